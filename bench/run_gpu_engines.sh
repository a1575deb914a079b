#!/usr/bin/env bash
# Whole-model engines on the GPU machine: export (python3: torch + transformers; diffusers), then
# bench/trt_engines.py on TensorRT 8.5 (the bundle from ../shared/trt/make-bundle.sh, unpacked
# to /tmp/trt85, or its parts in /tmp/trt-parts).  One model per call:
#   MODEL=bert [ENGINES=unfused,trt_ln,trt_ln_fc] [PLUGINS=/path/libfusion_plugins_trt8.so] \
#   [PRECISION=fp32] [BATCH=n] [TUNE=1] [LAYERS=1] [TIMING_CACHE_IN=file] bash bench/run_gpu_engines.sh
# BATCH: the engines' batch (default: the model's, bench/trt_engines.py MODELS); RESULTS: the
# results file the rows go to (default bench/results/trt_engines.json, where rows of another
# batch go beside the others; the UNet at batch 1 is in bench/results/trt_engines_batch1.json).
# LAYERS=1: each engine's per-layer profile (fusion.trt.layers), to $OUT/layers.tgz.
# Results: bench/results/trt_engines.json (and $OUT/trt_engines.json when OUT is set); engines
# and the timing cache stay in /tmp for the next call while the machine is warm.
# TUNE=1 also runs `fuse --tune --target trt` on the model (timed: how long tuning takes).
# MODEL=unet (diffusers UNet2DModel; engines unfused,plugin_gn,trt_gn) needs diffusers for its
# export, which the GPU machine's python3 lacks: carry .whl (with diffusers-0.42.1-py3-none-any.whl,
# from `pip download --no-deps diffusers==0.42.1 -d .whl`; its own needs are all there) and it
# is installed to /tmp/diffusers_deps, on PYTHONPATH for the export only.
set -u
cd "$(dirname "$0")/.."
MODEL=${MODEL:-bert}
# shellcheck source=bench/trt85_env.sh
source bench/trt85_env.sh
export FUSION_COMMIT=${FUSION_COMMIT:-unknown}
export CUDA_CACHE_PATH=/tmp/trt85_cuda_cache CUDA_CACHE_MAXSIZE=4294967296
ONNX=/tmp/trt_models/$MODEL.onnx
EXPORT_ENV=()
if [ ! -f "$ONNX" ] && [ "$MODEL" = unet ] && ! python3 -c "import diffusers" 2>/dev/null; then
    if [ ! -d /tmp/diffusers_deps/diffusers ]; then
        ls .whl/diffusers-*.whl >/dev/null 2>&1 || { echo "unet: python3 has no diffusers and no .whl/diffusers-*.whl was carried"; exit 2; }
        python3 -m pip install -q --no-index --no-deps --target /tmp/diffusers_deps .whl/diffusers-*.whl || exit 2
    fi
    EXPORT_ENV=(env "PYTHONPATH=/tmp/diffusers_deps${PYTHONPATH:+:$PYTHONPATH}")
fi
[ -f "$ONNX" ] || ${EXPORT_ENV[@]+"${EXPORT_ENV[@]}"} python3 bench/trt_engines.py export --model "$MODEL" --out /tmp/trt_models || exit 2
# A timing cache carried from an earlier call (TIMING_CACHE_IN) saves most of a rebuild.
[ -n "${TIMING_CACHE_IN:-}" ] && [ -f "$TIMING_CACHE_IN" ] && [ ! -f /tmp/trt_engines_timing.cache ] &&
    cp "$TIMING_CACHE_IN" /tmp/trt_engines_timing.cache
py310 bench/trt_engines.py run --model "$MODEL" --onnx "$ONNX" --precision "${PRECISION:-fp32}" \
    ${ENGINES:+--engines $ENGINES} ${PLUGINS:+--plugins $PLUGINS} ${BATCH:+--batch $BATCH} ${RESULTS:+--out $RESULTS} \
    ${LAYERS:+--layers /tmp/trt_layers}
rc=$?
if [ -n "${TUNE:-}" ]; then
    case $MODEL in vit | unet) PROF="batch=8" ;; *) PROF="batch=8 seq=128" ;; esac
    t0=$SECONDS
    py310 -m fusion fuse "$ONNX" -o /tmp/trt_models/$MODEL.tuned.onnx --tune \
        --target "${TUNE_TARGET:-trt}" --profile $PROF --tactic-sources CUBLAS,CUBLAS_LT \
        --timing-cache /tmp/trt_engines_timing.cache --precision "${PRECISION:-fp32}" ${PLUGINS:+--plugins $PLUGINS} \
        > /tmp/trt_models/$MODEL.tune.txt 2>&1
    echo "tuning wall $((SECONDS - t0)) s" >> /tmp/trt_models/$MODEL.tune.txt
    tail -n 30 /tmp/trt_models/$MODEL.tune.txt
fi
if [ -n "${OUT:-}" ]; then
    cp "${RESULTS:-bench/results/trt_engines.json}" /tmp/trt_models/*.tune.txt "$OUT"/ 2>/dev/null
    [ -d /tmp/trt_layers ] && tar czf "$OUT/layers.tgz" -C /tmp/trt_layers .
    cp /tmp/trt_engines_timing.cache "$OUT/" 2>/dev/null
fi
exit $rc
