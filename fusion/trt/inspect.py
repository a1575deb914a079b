"""What TensorRT made of a model: the parser's errors with the failing node, plugin layers.

Plugin layers are counted on the parsed network (every TensorRT version reports layer types
there: the fallback importer's work) and, where it can, with the engine inspector (TensorRT
>= 8.2 with DETAILED profiling verbosity: what survived into the engine).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import onnx

log = logging.getLogger(__name__)


@dataclass
class PluginLayer:
    name: str
    plugin: str  # the creator's name ("LayerNorm"), where TensorRT tells it


def parser_errors(trt, parser, proto: onnx.ModelProto, logger) -> str:
    """The parser's errors, each with the failing node's name and op type."""
    nodes = list(proto.graph.node)
    msgs = []
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        where = ""
        name = _call(e, "node_name")  # TensorRT >= 10
        op = _call(e, "node_operator")
        idx = _call(e, "node")
        if not name and isinstance(idx, int) and 0 <= idx < len(nodes):
            name, op = nodes[idx].name, nodes[idx].op_type
        if name or op:
            where = f"node {name or idx!r} ({op or '?'}): "
        elif isinstance(idx, int) and idx >= 0:
            where = f"node #{idx}: "
        msgs.append(where + str(e.desc()).strip())
    if not msgs:
        msgs = logger.errors()[-1:] or ["no error given"]
    more = f" (and {len(msgs) - 1} more)" if len(msgs) > 1 else ""
    return f"TensorRT {trt.__version__} could not parse the model: {msgs[0]}{more}"


def _call(obj, attr):
    f = getattr(obj, attr, None)
    try:
        return f() if callable(f) else None
    except Exception:  # noqa: BLE001 - an accessor this version lacks or that fails
        return None


def network_plugin_layers(trt, network) -> list[PluginLayer]:
    """The plugin layers of a parsed network: the parser's fallback importer made each of them."""
    kinds = {getattr(trt.LayerType, k) for k in ("PLUGIN", "PLUGIN_V2", "PLUGIN_V3") if hasattr(trt.LayerType, k)}
    out = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if layer.type in kinds:
            out.append(PluginLayer(layer.name, _plugin_name(trt, layer)))
    return out


def _plugin_name(trt, layer) -> str:
    """The plugin's creator name; the Python bindings hand out the ILayer base class, so it is
    recast to the plugin layer class first (as polygraphy does)."""
    try:
        if layer.type == getattr(trt.LayerType, "PLUGIN_V2", None):
            layer.__class__ = trt.IPluginV2Layer
            return str(layer.plugin.plugin_type)
        if layer.type == getattr(trt.LayerType, "PLUGIN_V3", None):  # TensorRT >= 10
            layer.__class__ = trt.IPluginV3Layer
            core = layer.get_plugin().get_capability_interface(trt.PluginCapabilityType.CORE)
            return str(core.plugin_name)
    except Exception as e:  # noqa: BLE001 - the name is a nicety; the layer type is the count
        log.debug("plugin name of %s unavailable: %s", layer.name, e)
    return "?"


def _make_logger(trt):
    # Not trt.build.make_logger: that module imports this one.  Its callers pass their logger.
    return trt.Logger(trt.Logger.WARNING)


def inspector_records(trt, engine) -> list[dict] | None:
    """The engine inspector's record of each layer (name, type, tactic, formats), or None where
    it has none: TensorRT < 8.2, or an engine built without DETAILED profiling verbosity (then
    it lists names only)."""
    try:
        info = json.loads(engine.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON))
    except Exception as e:  # noqa: BLE001 - the inspector is a nicety: callers fall back
        log.debug("engine inspector unavailable: %s", e)
        return None
    layers = info.get("Layers", [])
    if not layers or not isinstance(layers[0], dict):
        return None
    return layers


def engine_plugin_count(trt, engine_bytes: bytes, logger=None) -> int | None:
    """Plugin layers the engine inspector reports (built with DETAILED profiling verbosity)."""
    try:
        engine = trt.Runtime(logger or _make_logger(trt)).deserialize_cuda_engine(engine_bytes)
    except Exception as e:  # noqa: BLE001 - the inspector is a nicety; the network walk is the count
        log.debug("engine not deserialized for its inspector: %s", e)
        return None
    layers = inspector_records(trt, engine)
    if layers is None:
        return None
    return sum("plugin" in str(layer.get("LayerType", "")).lower() for layer in layers)
