#!/usr/bin/env bash
# Realistic-size models through our TensorRT 8 plugins on the GPU machine: export with python3
# (torch + transformers), then bench/trt_e2e_models.py on TensorRT 8.5 (the bundle from
# ../shared/trt/make-bundle.sh, unpacked to /tmp/trt85, or its parts in /tmp/trt-parts):
#   LIB=.work/lib/libfusion_plugins_trt8.so MODELS=bert,vit PRECISIONS=fp32 \
#   [UNFUSED=1] [OUT_JSON=bench/results/trt_e2e_models.json] bash bench/run_gpu_models.sh
# Rows replace the file given by OUT_JSON (default: $OUT/trt_e2e_models.json when OUT is set).
set -u
cd "$(dirname "$0")/.."
# shellcheck source=bench/trt85_env.sh
source bench/trt85_env.sh
export CUDA_CACHE_PATH=/tmp/trt85_cuda_cache CUDA_CACHE_MAXSIZE=4294967296
MODELS=${MODELS:-bert,bert384,vit,gpt2,llama}
for m in $(echo "$MODELS" | tr , ' '); do
    case $m in bert384) e=bert ;; *) e=$m ;; esac
    [ -f /tmp/trt_models/$e.onnx ] || python3 bench/trt_engines.py export --model "$e" --out /tmp/trt_models ||
        echo "export of $e failed: its rows will say so"
done
py310 bench/trt_e2e_models.py --plugins "${LIB:?LIB: the TensorRT 8 plugin library}" \
    --out "${OUT_JSON:-${OUT:-/tmp}/trt_e2e_models.json}" --models "$MODELS" --precisions "${PRECISIONS:-fp32,fp16}" \
    ${UNFUSED:+--unfused} ${BUDGET_S:+--budget-s $BUDGET_S}
