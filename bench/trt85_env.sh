# Sourced by the bench/run_gpu_*.sh scripts that need TensorRT 8.5 on the GPU machine: unpack
# the bundle (../shared/trt/make-bundle.sh; its parts carried to /tmp/trt-parts) to /tmp/trt85
# once, then its environment (py310), this checkout on its path, and fusion.patterns linked.
BUNDLE=/tmp/trt85
if [ ! -x $BUNDLE/py/bin/python3.10 ]; then
    mkdir -p $BUNDLE && cat $(ls -v /tmp/trt-parts/part*) | xz -d -T0 | tar x -C $BUNDLE || { echo "no bundle"; exit 2; }
fi
# shellcheck disable=SC1091
source $BUNDLE/env.sh
export PY310_PATH=$PWD
[ -e fusion/patterns ] || ln -s ../patterns fusion/patterns
