#!/usr/bin/env bash
# What a lent GPU machine (16 CPUs, one NVIDIA GPU, no network) is for, in one call: the
# accelerator's real NVML readings through a replica and a sampling gateway, the CUDA provider
# where the machine's onnxruntime has it, workers scaling to 8 (bench_scaling), and what 32
# replicas probed and sampled at 10 Hz cost the workers (bench_isolation: idle CPU, c16 p99 on
# and off), measured where the cores are enough to resolve them.
#
# Its image has Python and numpy, onnxruntime, uvloop, httpx, grpcio... but not the rest of the
# gateway's packages, nor wrk or nginx: these travel, prepared here (README of the device tool):
#   .whl    the missing wheels, for its python3 (3.12)
#   .tools  bin/wrk, bin/nginx and the libraries they load beyond libc
#   models  `make models`' output (the replica's model)
#   .single the gateway of main's last commit before --workers, for bench_scaling's single
#           process (`git archive <commit> gateway v2proto replicas | tar -x -C .single`)
# and the call is `bash loadtests/gpu_round.sh` with those carried. Each step has its own
# time limit and writes $OUT/<step>.log, so one that fails or overruns leaves the others.
set -u
out=${OUT:-/tmp/gpu-round}
py=${PYTHON:-python3}
wheels=${WHEELS:-.whl}  # another folder only to rehearse the call here
mkdir -p "$out"
if ! "$py" -c "import fastapi, httptools, pybreaker" 2>/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$wheels"/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
if [ -d .tools ]; then
    # Wrappers give the carried libraries to wrk and nginx alone: on LD_LIBRARY_PATH for every
    # process they would replace the machine's own OpenSSL under its Python's ssl module.
    mkdir -p /tmp/wrap
    for tool in wrk nginx; do
        printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$PWD/.tools/lib" \
            "$PWD/.tools/bin/$tool" >"/tmp/wrap/$tool"
        chmod 755 "/tmp/wrap/$tool"
    done
    export PATH="/tmp/wrap:$PATH"
    [ -x /usr/sbin/nginx ] || install -m 755 /tmp/wrap/nginx /usr/sbin/nginx
    mkdir -p /var/log/nginx /var/lib/nginx
fi

step() {
    local name=$1 limit=$2
    shift 2
    echo "== $name (at most ${limit} s)"
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "exit status $?" >>"$out/$name.log"
    tail -n 45 "$out/$name.log"
}

step machine 30 bash -c "nproc; nvidia-smi -L; $py -V; wrk -v | head -1; nginx -v; \
    $py -c 'import onnxruntime as o; print(o.__version__, o.get_available_providers())'"
if "$py" -c "import onnxruntime as o, sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())"; then
    step cuda 120 "$py" loadtests/gpu_check.py  # the accelerator check is its last part
else
    step accelerator 90 "$py" loadtests/gpu_accelerator_check.py
fi
single=()
[ -d .single ] && single=(--single-tree .single)
step scaling 220 "$py" loadtests/bench_scaling.py --workers 1,2,8 --threads 4 --connections 64 \
    --seconds 8 --c1-seconds 3 "${single[@]}"
step isolation 70 "$py" loadtests/bench_isolation.py --workers 8 --seconds 15
step latency 150 "$py" loadtests/bench_isolation.py --latency --workers 2 --seconds 8 --rounds 3
