#!/usr/bin/env bash
# One GPU session on real TensorRT (8.5.3, the bundle from ../shared/trt/make-bundle.sh):
# environment check -> TensorRT tests -> fixture models verified on TensorRT -> TensorRT's
# LayerNorm plugin timed on the kernel grid.  Logs and JSON go to $OUT (default .device-out/).
# Each stage has its own time limit and runs even if an earlier one failed; the whole run
# stays under ~8 minutes.  Exit status: non-zero if any stage failed.
#
# Before it, the bundle's parts travel one device call each (carry [".trt-bundle/partNN"],
# copying the part to /tmp/trt-parts); this script unpacks them to /tmp/trt85 if that is
# not done yet.  Carry .trt-bundle/whl310 (pytest wheels for Python 3.10) for the tests.
# Set FUSION_COMMIT (the device copy has no .git).  Environment knobs: TESTS_LIMIT_S,
# VERIFY_LIMIT_S, VERIFY_BUDGET_S, VERIFY_MATCH, VERIFY_TARGETS (default trt: the onnx target's
# rows need no GPU: `trt_verify.py --targets onnx --as-trt-version 8.5.3.1` on the CPU, then
# `--merge`), LN_LIMIT_S, LN_QUICK=1.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# TensorRT 8.5 JIT-compiles some kernels for sm_90: keep what it compiled for the next engine.
export CUDA_CACHE_PATH=/tmp/trt85_cuda_cache CUDA_CACHE_MAXSIZE=4294967296
# shellcheck source=bench/gpu_stages.sh
source bench/gpu_stages.sh  # (the cwd is the repo root)

BUNDLE=/tmp/trt85
if [ ! -x $BUNDLE/py/bin/python3.10 ]; then
    if ls /tmp/trt-parts/part* >/dev/null 2>&1; then
        log "unpacking $(ls /tmp/trt-parts | wc -l) parts to $BUNDLE"
        mkdir -p $BUNDLE && cat $(ls -v /tmp/trt-parts/part*) | xz -d -T0 | tar x -C $BUNDLE || { log "unpack failed"; exit 2; }
    else
        log "no TensorRT bundle at $BUNDLE and no parts in /tmp/trt-parts"; exit 2
    fi
fi
# shellcheck disable=SC1091
source $BUNDLE/env.sh
export _b  # py310 (an exported function) reads it in the stages' child shells
export PY310_PATH=$PWD
{ nvidia-smi; py310 -c 'import sys, tensorrt, polygraphy, onnx, onnxruntime, numpy; print(sys.version); print("tensorrt", tensorrt.__version__, "polygraphy", polygraphy.__version__, "onnx", onnx.__version__, "onnxruntime", onnxruntime.__version__, "numpy", numpy.__version__)'; } >"$OUT/env.txt" 2>&1
tail -n 2 "$OUT/env.txt" | tee -a "$OUT/run.log"

if [ -d .trt-bundle/whl310 ]; then
    mkdir -p /tmp/trt85_pydeps
    (cd /tmp/trt85_pydeps && for w in "$OLDPWD"/.trt-bundle/whl310/*.whl; do py310 -m zipfile -e "$w" . ; done) >/dev/null 2>&1
    export PY310_PATH=$PWD:/tmp/trt85_pydeps
fi
if [ -n "${SKIP_TESTS:-}" ]; then
    log "tests skipped (SKIP_TESTS)"
elif py310 -c "import pytest" 2>/dev/null; then
    stage tests "${TESTS_LIMIT_S:-60}" bash -c "py310 -m pytest -q -p no:cacheprovider -rfs tests/test_trt_gpu.py"
else
    log "no pytest for Python 3.10: TensorRT tests not run"
fi

CACHE=/tmp/trt85_timing.cache
# (timeout runs programs, not the shell function py310: each stage goes through bash -c)
stage verify "${VERIFY_LIMIT_S:-200}" bash -c "py310 bench/trt_verify.py --out '$OUT' --no-tactic-sources \
    --targets ${VERIFY_TARGETS:-trt} --timing-cache $CACHE --budget-s ${VERIFY_BUDGET_S:-160} --references .trt-bundle/refs ${VERIFY_MATCH:+--match '$VERIFY_MATCH'} ${VERIFY_MODELS:+--models $VERIFY_MODELS}"
[ -n "${SKIP_LN:-}" ] || stage layernorm "${LN_LIMIT_S:-90}" bash -c "py310 bench/bench_trt_layernorm.py --out '$OUT' --no-tactic-sources \
    ${LN_QUICK:+--quick}"
log "done, status $STATUS"
exit $STATUS
