#!/usr/bin/env bash
# One device call: every fixture family through our TensorRT 8 plugins (target plugin) in
# real TensorRT 8.5.3 engines: bench/trt_e2e_fixtures.py, about 6 minutes of wall time.
#
#   bash bench/run_gpu_families.sh LIB [extra trt_e2e_fixtures.py args]
#
# LIB: a prebuilt libfusion_plugins_trt8.so (carried).  The TensorRT bundle must already be
# unpacked at /tmp/trt85.  Stored onnxruntime references (the bundle's onnxruntime cannot run
# every fixture, GPT-2 fp16 for one): carry .trt-bundle/refs, made on the CPU with
#   python bench/trt_e2e_fixtures.py --make-references .trt-bundle/refs
# Set FUSION_COMMIT (the device copy has no .git).  Knobs: E2E_LIMIT_S (hard limit, 345),
# E2E_BUDGET_S (no unfused build starts after it, 290), E2E_FUSED_BUDGET_S (no fused model
# starts after it, 190), E2E_TIMING_CACHE (a file, or empty for none).  Writes $OUT/trt_e2e_fixtures.json (row by row), run.log.
set -u
cd "$(dirname "$0")/.."
LIB=${1:?usage: bench/run_gpu_families.sh LIB [args]}
shift
OUT=${OUT:-$PWD/.device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export CUDA_CACHE_PATH=/tmp/trt85_cuda_cache CUDA_CACHE_MAXSIZE=4294967296
B=${TRT_BUNDLE:-/tmp/trt85}  # (another path only to test this script without the bundle)
[ -x "$B/py/bin/python3.10" ] || { echo "no TensorRT bundle at $B"; exit 2; }
[ -f "$LIB" ] || { echo "no plugin library at $LIB"; exit 2; }
# shellcheck disable=SC1091
source "$B/env.sh"
export _b 2>/dev/null
export PY310_PATH=$PWD
[ -e fusion/patterns ] || ln -s ../patterns fusion/patterns
# FusedFC calls cuBLASLt: the device's own (CUDA 13) first, else the bundle's cuBLAS 11 (as .work/h5/run.sh).
L=""
for c in /usr/local/cuda/lib64/libcublasLt.so.13 /usr/local/cuda/targets/x86_64-linux/lib/libcublasLt.so.13; do
    [ -e "$c" ] && { L=$c; break; }
done
[ -z "$L" ] && L=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(list(nvidia.cu13.__path__)[0], "lib", "libcublasLt.so.13"))' 2>/dev/null)
[ -n "$L" ] && [ -e "$L" ] || L=$B/cuda11/libcublasLt.so.11
export FUSION_CUBLASLT=$L
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    echo "FUSION_CUBLASLT=$L"
    py310 -c 'import tensorrt, onnxruntime; print("tensorrt", tensorrt.__version__, "onnxruntime", onnxruntime.__version__)'
} 2>&1 | tee "$OUT/run.log"
EXTRA=()
[ -d .trt-bundle/refs ] && EXTRA=(--references .trt-bundle/refs)
# One timing cache across fixtures; E2E_TIMING_CACHE= (empty) for none: TensorRT 8.5 refuses a
# cache that Myelin graphs of other models wrote ("Myelin error from unknown graph").
TC=${E2E_TIMING_CACHE-/tmp/trt85_e2e_timing.cache}
[ -n "$TC" ] && EXTRA+=(--timing-cache "$TC")
timeout --kill-after=10 "${E2E_LIMIT_S:-345}" bash -c 'py310 "$@"' _ bench/trt_e2e_fixtures.py \
    --plugins "$LIB" --out "$OUT/trt_e2e_fixtures.json" --commit "${FUSION_COMMIT:-unknown}" \
    --budget-s "${E2E_BUDGET_S:-290}" \
    --fused-budget-s "${E2E_FUSED_BUDGET_S:-190}" ${EXTRA[@]+"${EXTRA[@]}"} "$@" 2>&1 | tee -a "$OUT/run.log"
rc=${PIPESTATUS[0]}
echo "rc=$rc" | tee -a "$OUT/run.log"
exit "$rc"
