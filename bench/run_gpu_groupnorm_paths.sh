#!/usr/bin/env bash
# FusedGroupNorm's kernel paths inside TensorRT 8.5 engines (bench/groupnorm_paths.py): export
# and fuse the models (python3: torch); `fusion verify --trt` and each plugin layer's data type
# (py310, the bundle) for the fp32 model in fp32 and fp16 and the fp16 model in fp16; then the
# results file.  Carry the TensorRT 8 plugin library, .whl/ (as for run_gpu_kernels.sh) and the
# bundle's parts:
#   PLUGINS=$PWD/.work/lib/libfusion_plugins_trt8.so FUSION_COMMIT=<sha> bash bench/run_gpu_groupnorm_paths.sh
# Results: $OUT/trt_groupnorm_paths.json (copy to bench/results/), verify logs in $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.device-out}
mkdir -p "$OUT"
PLUGINS=${PLUGINS:?set PLUGINS to the TensorRT 8 plugin library}
# shellcheck source=bench/trt85_env.sh
source bench/trt85_env.sh
# python3 (torch) imports the fusion package: what it lacks comes from the carried .whl/ (as in
# run_gpu_kernels.sh), on its path only (py310 has its own).
DEPS=/tmp/fusion_pydeps
for mod_pkg in onnx_graphsurgeon:onnx-graphsurgeon polygraphy:polygraphy ml_dtypes:ml_dtypes \
    typing_extensions:typing_extensions; do
    PYTHONPATH=$DEPS python3 -c "import ${mod_pkg%%:*}" 2>/dev/null ||
        python3 -m pip install -q --no-index --find-links .whl --no-deps --target $DEPS "${mod_pkg##*:}"
done
PY3=(env "PYTHONPATH=$DEPS" python3)
MODELS=/tmp/groupnorm_paths
"${PY3[@]}" bench/groupnorm_paths.py model $MODELS || exit 2
# run: model, engine precision (as bench/groupnorm_paths.py's RUNS)
for RUN in fp32:gn:fp32 fp16:gn:fp16 fp16_io:gn16:fp16; do
    IFS=: read -r R M P <<<"$RUN"
    py310 -m fusion verify --trt --plugins "$PLUGINS" --tactic-sources cublas,cublas_lt --precision $P --json \
        $MODELS/$M.onnx $MODELS/${M}_fused.onnx >"$OUT/verify_$R.json" 2>"$OUT/verify_$R.log"
    echo "verify $R: rc=$?"
    py310 bench/groupnorm_paths.py layers $MODELS/${M}_fused.onnx --precision $P --plugins "$PLUGINS" \
        --out "$OUT/layers_$R.json" 2>"$OUT/layers_$R.log"
    echo "layers $R: rc=$?"
done
"${PY3[@]}" bench/groupnorm_paths.py collect "$OUT" --out "$OUT/trt_groupnorm_paths.json" \
    --trt-version "$(py310 -c 'import tensorrt; print(tensorrt.__version__)')"
