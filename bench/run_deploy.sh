#!/usr/bin/env bash
# `python -m fusion deploy` on the GPU with TensorRT 8.5.3: fuse, build, verify at the profile's
# min/opt/max, time fused vs unfused, report.  The report, summary and log go to $OUT.
#
#   bench/run_deploy.sh [MODEL [RANGE...]]     (default: the width-768 LayerNorm fixture, target trt)
#
# Needs the bundle from ../shared/trt/make-bundle.sh: unpacked at /tmp/trt85, or its parts in
# /tmp/trt-parts (one device call per part, as for bench/run_gpu_trt.sh).  TARGET=plugin
# PLUGINS=lib.so for this project's plugins; PASSES (default layernorm: named, since the trt target
# leaves it off by default).  Tactic sources: cuBLAS only (the bundle's cuDNN is a stub).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.device-out}
mkdir -p "$OUT"
MODEL=${1:-bench/wide/ln_wide_legacy_op13_fp32.onnx}
[ $# -gt 0 ] && shift
RANGES=${*:-batch=1,2,4 seq=1,64,128}
B=/tmp/trt85
if [ ! -x $B/py/bin/python3.10 ]; then
    mkdir -p $B && cat $(ls -v /tmp/trt-parts/part*) | xz -d -T0 | tar x -C $B || { echo "no TensorRT bundle"; exit 2; }
fi
# shellcheck disable=SC1091
source $B/env.sh
[ -e fusion/patterns ] || ln -s ../patterns fusion/patterns  # (the source tree, importable as fusion)
export PY310_PATH=$PWD CUDA_CACHE_PATH=/tmp/trt85_cuda_cache
# shellcheck disable=SC2086
py310 -m fusion deploy "$MODEL" -o /tmp/deploy-out --target "${TARGET:-trt}" --passes "${PASSES:-layernorm}" \
    ${PLUGINS:+--plugins $PLUGINS} \
    --profile $RANGES --tactic-sources cublas,cublas_lt >"$OUT/deploy.txt" 2>"$OUT/deploy.log"
rc=$?
cp /tmp/deploy-out/*.html /tmp/deploy-out/*.json "$OUT/" 2>/dev/null
tail -n 5 "$OUT/deploy.log"; tail -n 20 "$OUT/deploy.txt"
echo "deploy exit $rc"
exit $rc
