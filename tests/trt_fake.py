"""A stand-in ``tensorrt`` module: just enough of TensorRT's Python API (8.5 .. 10) for the
build and verify wiring to run on CPU.

Its "parser" reads the ONNX model: every graph input becomes a network input (-1 for
dynamic dims; ``shape_tensors`` are marked), every node a layer; nodes whose op_type is in
``plugin_ops`` become PLUGIN_V2 layers, and one in ``fail_ops`` makes parsing fail with an
error on that node, as onnx-tensorrt reports it.  What the build was asked for (flags,
tactic sources, profiles) is recorded on the module for tests to read.
"""

from __future__ import annotations

import enum
import types

import numpy as np
import onnx


class _Enum(enum.IntEnum):
    pass


TACTIC_SOURCES_85 = ("CUBLAS", "CUBLAS_LT", "CUDNN", "EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")


def make(version: str = "8.5.3.1", plugin_ops=("LayerNorm",), fail_ops=("NoSuchPlugin",), shape_tensors=(),
         major_api: int | None = None, tactic_sources=TACTIC_SOURCES_85) -> types.ModuleType:  # fmt: skip
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.calls = {"flags": set(), "cleared": set(), "tactics": None, "profiles": [], "plugin_libs": [], "verbosity": None}

    class Severity(_Enum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    class ILogger:
        def __init__(self):
            pass

    ILogger.Severity = Severity
    trt.ILogger = ILogger
    trt.NetworkDefinitionCreationFlag = _Enum("NetworkDefinitionCreationFlag", {"EXPLICIT_BATCH": 0})
    trt.BuilderFlag = _Enum("BuilderFlag", {"FP16": 0, "TF32": 7})
    trt.TacticSource = _Enum("TacticSource", {n: i for i, n in enumerate(tactic_sources)})
    trt.ProfilingVerbosity = _Enum("ProfilingVerbosity", {"LAYER_NAMES_ONLY": 0, "NONE": 1, "DETAILED": 2})
    trt.LayerType = _Enum("LayerType", {"CONVOLUTION": 0, "ELEMENTWISE": 1, "PLUGIN_V2": 2, "SHUFFLE": 3})
    trt.MemoryPoolType = _Enum("MemoryPoolType", {"WORKSPACE": 0})
    trt.LayerInformationFormat = _Enum("LayerInformationFormat", {"ONELINE": 0, "JSON": 1})
    trt.DataType = _Enum("DataType", {"FLOAT": 0, "HALF": 1, "INT32": 3, "BOOL": 4})
    trt.TensorIOMode = _Enum("TensorIOMode", {"NONE": 0, "INPUT": 1, "OUTPUT": 2})

    def nptype(t):
        return {trt.DataType.FLOAT: np.float32, trt.DataType.HALF: np.float16, trt.DataType.INT32: np.int32,
                trt.DataType.BOOL: np.bool_}[t]  # fmt: skip

    trt.nptype = nptype

    def init_libnvinfer_plugins(logger, namespace):
        trt.calls["plugin_logger"] = logger
        return True

    trt.init_libnvinfer_plugins = init_libnvinfer_plugins

    class Registry:
        pass

    registry = Registry()
    if (major_api or int(version.split(".")[0])) >= 10:
        def load_library(path):
            trt.calls["plugin_libs"].append(path)
            return object()

        registry.load_library = load_library
    trt.get_plugin_registry = lambda: registry

    class IPluginV2Layer:
        pass

    trt.IPluginV2Layer = IPluginV2Layer

    class Layer:
        def __init__(self, name, type_, plugin_type=None):
            self.name, self.type = name, type_
            if plugin_type:
                self.plugin = types.SimpleNamespace(plugin_type=plugin_type)

    class Input:
        def __init__(self, name, shape, is_shape_tensor):
            self.name, self.shape, self.is_shape_tensor = name, tuple(shape), is_shape_tensor

    class Network:
        def __init__(self, flags):
            self.flags, self.inputs, self.layers = flags, [], []

        num_inputs = property(lambda self: len(self.inputs))
        num_layers = property(lambda self: len(self.layers))

        def get_input(self, i):
            return self.inputs[i]

        def get_layer(self, i):
            return self.layers[i]

    class ParserError:
        def __init__(self, desc, node):
            self._desc, self._node = desc, node

        def desc(self):
            return self._desc

        def node(self):
            return self._node

        def code(self):
            return 8

    class OnnxParser:
        def __init__(self, network, logger):
            self.network, self.errors = network, []

        def parse_from_file(self, path):
            return self._parse(onnx.load(path))

        def parse(self, data, path=None):
            return self._parse(onnx.load_from_string(bytes(data)))

        num_errors = property(lambda self: len(self.errors))

        def get_error(self, i):
            return self.errors[i]

        def _parse(self, model):
            g = model.graph
            init = {t.name for t in g.initializer}
            for vi in g.input:
                if vi.name in init:
                    continue
                dims = [d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim]
                self.network.inputs.append(Input(vi.name, dims, vi.name in shape_tensors))
            for i, n in enumerate(g.node):
                if n.op_type in fail_ops:
                    self.errors.append(ParserError(
                        "Assertion failed: creator && \"Plugin not found, are the plugin name, version, and namespace "
                        "correct?\"", i))  # fmt: skip
                    return False
                if n.op_type in plugin_ops:
                    self.network.layers.append(Layer(n.name or f"node{i}", trt.LayerType.PLUGIN_V2, n.op_type))
                else:
                    self.network.layers.append(Layer(n.name or f"node{i}", trt.LayerType.ELEMENTWISE))
            return True

    trt.OnnxParser = OnnxParser

    class Profile:
        def __init__(self):
            self.shapes, self.values = {}, {}

        def set_shape(self, name, lo, opt, hi):
            self.shapes[name] = (tuple(lo), tuple(opt), tuple(hi))

        def set_shape_input(self, name, lo, opt, hi):
            self.values[name] = (tuple(lo), tuple(opt), tuple(hi))

    class TimingCache:
        def __init__(self, data):
            self.data = data

        def serialize(self):
            return b"cache:" + bytes(self.data)

    class Config:
        def set_flag(self, f):
            trt.calls["flags"].add(f)

        def clear_flag(self, f):
            trt.calls["cleared"].add(f)

        def set_tactic_sources(self, mask):
            trt.calls["tactics"] = mask
            return True

        def set_memory_pool_limit(self, pool, size):
            trt.calls["workspace"] = size

        def create_timing_cache(self, data):
            return TimingCache(data)

        def set_timing_cache(self, cache, ignore_mismatch):
            return True

        def add_optimization_profile(self, p):
            trt.calls["profiles"].append(p)
            return len(trt.calls["profiles"]) - 1

        @property
        def profiling_verbosity(self):
            return trt.calls["verbosity"]

        @profiling_verbosity.setter
        def profiling_verbosity(self, v):
            trt.calls["verbosity"] = v

    class Builder:
        def __init__(self, logger):
            self.logger = logger

        def create_network(self, flags):
            trt.calls["network_flags"] = flags
            return Network(flags)

        def create_builder_config(self):
            return Config()

        def create_optimization_profile(self):
            return Profile()

        def build_serialized_network(self, network, config):
            if trt.calls.get("fail_build") == "cudnn":  # what a stub libcudnn makes of a build
                self.logger.log(Severity.ERROR, "1: [convolutionRunner.cpp::execute::391] Error Code 1: Cudnn "
                                "(CUDNN_STATUS_MAPPING_ERROR)")
                return None
            if trt.calls.get("fail_build"):
                self.logger.log(Severity.ERROR, "Could not find any implementation for node {ForeignNode[MatMul_3]}")
                self.logger.log(Severity.ERROR, "[builder.cpp::buildSerializedNetwork::751] Error Code 2: Internal "
                                "Error (Assertion engine != nullptr failed. )")
                return None
            return memoryview(b"ENGINE:" + ",".join(layer.name for layer in network.layers).encode())

    trt.Builder = Builder

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, data):
            raise RuntimeError("the fake has no engines")

    trt.Runtime = Runtime
    return trt
