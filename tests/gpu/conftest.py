"""GPU-only fixtures: CuPy, the compiled kernel modules, and the kernel-test report."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

LOG = logging.getLogger(__name__)


@pytest.fixture(scope="session")
def cp():
    """CuPy with a usable CUDA device, else the test is skipped."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - any CUDA failure means: no GPU here
        pytest.skip(f"no CUDA device: {e}")
    if n == 0:
        pytest.skip("no CUDA device")
    return cupy


@pytest.fixture(scope="session")
def kernels(cp):
    """The plugin kernel files compiled with cupy.RawModule, by name."""
    from fusion.plugins.library import load_kernel_module

    mods = {name: load_kernel_module(name) for name in ("layernorm", "rmsnorm", "fc")}
    for m in mods.values():
        m.compile()
    return mods


@pytest.fixture(scope="session")
def kernel_report():
    """Rows of max errors; written as JSON to $FUSION_KERNEL_REPORT at the end."""
    rows: list[dict] = []
    yield rows
    path = os.environ.get("FUSION_KERNEL_REPORT")
    if path and rows:
        # Where and on what they were measured (run_gpu_kernels.sh sets these; no .git there).
        import cupy

        meta = {
            "commit": os.environ.get("FUSION_COMMIT", "unknown"),
            "dirty": os.environ.get("FUSION_DIRTY", "1") == "1",
            "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        }
        Path(path).write_text(json.dumps([{**r, **meta} for r in rows], indent=1))
        LOG.info("wrote %d kernel test rows to %s", len(rows), path)
