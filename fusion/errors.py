"""Typed errors.  The CLI turns every FusionError into one line on stderr and exit code 2."""

from __future__ import annotations


class FusionError(Exception):
    """Base class: anything a user can cause with bad input or a bad environment."""

    exit_code = 2


class ModelLoadError(FusionError):
    """The input is not a readable, well-formed ONNX model."""


class UnsupportedModelError(FusionError):
    """A well-formed model this library does not support (IR/opset version, ...)."""


class InvalidGraphError(FusionError):
    """The graph itself is broken: a cycle, dangling inputs, duplicate names, no nodes."""


class OutputError(FusionError):
    """The output cannot be written where asked."""


class VerifyError(FusionError):
    """Verification could not run (not: it ran and found a mismatch)."""


class PluginBuildError(FusionError):
    """The plugin library could not be built or loaded."""


class EngineBuildError(FusionError):
    """A TensorRT engine could not be built."""
