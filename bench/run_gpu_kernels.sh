#!/usr/bin/env bash
# One GPU session for the plugins: build -> contract check -> kernel tests -> harness ->
# benchmarks (norm/FC, then skip-norm/GroupNorm).  JSON results and logs.tar.gz go to $OUT
# (default .device-out/).  Every stage has its own time limit and the stages run even if an
# earlier one failed; the whole run stays under ~10 minutes.  Exit status: non-zero if any
# stage failed.
#
# Locally, before sending the tree to the GPU machine (no GPU needed):
#   python -m fusion.plugins.library build -o plugin_build --harness
#   cp -r "$(python -c 'import importlib.util as u; print(u.find_spec("kernel_lens").submodule_search_locations[0])')/include/tensorrt" plugin_build/trt_include
#   pip download --only-binary=:all: --python-version 3.12 --no-deps -d .whl pytest pluggy iniconfig packaging pygments
# and carry plugin_build/ and .whl/: the carried build is reused when its stamp matches
# the sources; otherwise it is rebuilt there (TensorRT headers from plugin_build/trt_include).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=$(command -v python3 || command -v python)
# shellcheck source=bench/gpu_stages.sh
STAGE_TAIL=25
source bench/gpu_stages.sh  # (the cwd is the repo root)

{ nvidia-smi; "$PY" --version; } >"$OUT/env.txt" 2>&1
# What this machine lacks of pytest and the fusion package's pure-Python dependencies comes
# from the carried wheels, installed outside site-packages.
DEPS=/tmp/fusion_pydeps
export PYTHONPATH=$DEPS${PYTHONPATH:+:$PYTHONPATH}
"$PY" -c "import pytest" 2>/dev/null ||
    "$PY" -m pip install -q --no-index --find-links .whl --target $DEPS pytest >>"$OUT/pip.log" 2>&1
for mod_pkg in onnx_graphsurgeon:onnx-graphsurgeon polygraphy:polygraphy ml_dtypes:ml_dtypes \
    typing_extensions:typing_extensions; do
    "$PY" -c "import ${mod_pkg%%:*}" 2>/dev/null ||
        "$PY" -m pip install -q --no-index --find-links .whl --no-deps --target $DEPS "${mod_pkg##*:}" >>"$OUT/pip.log" 2>&1
done
"$PY" -c "import fusion.plugins.library" >>"$OUT/pip.log" 2>&1 || { log "cannot import fusion.plugins.library:"; tail -3 "$OUT/pip.log" | tee -a "$OUT/run.log"; }

# cuBLASLt for the FC plugin (its own dlopen; LD_LIBRARY_PATH stays as torch expects it):
# the nvidia-cublas wheel's copy, else the toolkit's, else whatever the loader finds.
CUBLASLT=$("$PY" - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("nvidia")
cands = [pathlib.Path(d) / sub / "libcublasLt.so.13" for d in (spec.submodule_search_locations if spec else [])
         for sub in ("cu13/lib", "cublas/lib")]
cands += [pathlib.Path("/usr/local/cuda/lib64/libcublasLt.so.13")]
print(next((str(p) for p in cands if p.exists()), ""))
EOF
)
[ -n "$CUBLASLT" ] && export FUSION_CUBLASLT=$CUBLASLT
log "cuBLASLt: ${CUBLASLT:-loader default}"

LIBDIR=plugin_build
[ -d plugin_build/trt_include ] && export TENSORRT_INCLUDE=$PWD/plugin_build/trt_include
stage build 120 "$PY" -m fusion.plugins.library build -o "$LIBDIR" --harness
if ! stage check 30 "$PY" -m fusion.plugins.library check "$LIBDIR/libfusion_plugins.so"; then
    # A carried build that does not load here: rebuild from source on this machine.
    LIBDIR=plugin_build_device
    stage build_device 240 "$PY" -m fusion.plugins.library build -o "$LIBDIR" --harness
    stage check_device 30 "$PY" -m fusion.plugins.library check "$LIBDIR/libfusion_plugins.so"
fi
LIB=$LIBDIR/libfusion_plugins.so

export FUSION_KERNEL_REPORT="$OUT/kernels_tests.json"
export FUSION_PLUGIN_LIB=$PWD/$LIB  # (tests/gpu compares its launcher's view of the device with Python's)
# FUSION_SKIP_KERNEL_TESTS=1: benchmarks only (when device time is short and the kernels
# were already tested).
[ "${FUSION_SKIP_KERNEL_TESTS:-0}" = 1 ] ||
    stage kernel_tests 240 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/gpu -rfs
stage harness 60 "$LIBDIR/fusion_harness" "$LIB" --json "$OUT/kernels_harness.json"
# The harness knows nothing of git or the device: record where it ran.
"$PY" - "$OUT/kernels_harness.json" <<'PY' || true
import json, os, subprocess, sys
d = json.load(open(sys.argv[1]))
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
d.update(commit=os.environ.get("FUSION_COMMIT", "unknown"), dirty=os.environ.get("FUSION_DIRTY", "1") == "1",
         device=gpu.stdout.strip().splitlines()[0] if gpu.stdout.strip() else "unknown")
json.dump(d, open(sys.argv[1], "w"), indent=1)
PY
# FUSION_SKIP_KERNEL_BENCH=1: leave out the norm/FC benchmark (kernels.json, ~3 minutes).
[ "${FUSION_SKIP_KERNEL_BENCH:-0}" = 1 ] ||
    stage bench 240 "$PY" bench/bench_kernels.py --out "$OUT" --lib "$LIB" --harness "$LIBDIR/fusion_harness"
# FUSION_GROUPNORM_SWEEP=1: every register-path K of the GroupNorm points (the launch policy's A/B).
[ "${FUSION_GROUPNORM_SWEEP:-0}" = 1 ] &&
    stage groupnorm_sweep 180 "$PY" bench/bench_skip_group.py --out "$OUT" --sweep
# Skip LayerNorm / RMSNorm and GroupNorm against the copy and torch (~1-2 minutes).
stage bench_skip_group 180 "$PY" bench/bench_skip_group.py --out "$OUT"
log "done, status $STATUS"
# Few files come back from the GPU machine: the logs travel as one archive.
(cd "$OUT" && tar czf logs.tar.gz ./*.log env.txt && rm -f ./*.log env.txt)
exit $STATUS
