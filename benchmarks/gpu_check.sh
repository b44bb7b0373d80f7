#!/usr/bin/env bash
# The torch engine's checks on one NVIDIA GPU, in one go (4 minutes on an H100):
#   1. benchmarks/engine_throughput.py: Llama 3.1 8B's width (2 layers, full vocabulary, 8,192-token
#      sequence), compiled and eager, beside the plain reference loop; MFU against the published peak.
#   2. llmb run llama31 8B with --layers N in bf16 and in fp8 (torchao float8, current scaling): the
#      full-width model with as many layers as one GPU holds, through the local backend.
#   3. llmb preflight on the one GPU.
# Each stage's log goes to $OUT (default ./gpu-check); a stage that fails does not stop the next.
# Wheels in .whl/ (llmb's own and what the machine lacks) are installed first, when present:
#   pip wheel --no-deps -w .whl ./core ./backends/slurm ./backends/runai ./plugins/*
#   (plus wheels of structlog, zstandard and torchao for the machine's Python)
set -u
OUT=${OUT:-$PWD/gpu-check}
GPU=${GPU:-h100}
LAYERS=${LAYERS:-10}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/llmb-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/llmb-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 LLMB_INSTALL=${LLMB_INSTALL:-/tmp/llmb-install}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
python3 -c "import torchao; print('torchao', torchao.__version__)" 2>&1 | tail -1
python3 -c "import transformer_engine.pytorch" 2>&1 | tail -1

stage() {  # stage NAME SECONDS COMMAND...: run it with a time limit, log to $OUT/NAME.log, show its end
    local name=$1 limit=$2 begin=$SECONDS
    shift 2
    echo "== $name: $*"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: rc $? in $((SECONDS - begin)) s"
    grep -v '^\s*$' "$OUT/$name.log" | tail -n "${TAIL:-14}"
}

stage bench 170 python3 benchmarks/engine_throughput.py --gpu "$GPU" --only 8b --layers 2 --rounds 4
# The same work per step in both precisions: 4 micro-batches of 8,192 tokens (the recipes' GBS scaled
# down with the data-parallel size: bf16 runs CP 2, so DP 4 on 8 GPUs; fp8 DP 8).
RUN=(python3 -m llmb run llama31 --size 8b --gpu "$GPU" --gpus 1 --layers "$LAYERS" --json)
TAIL=40 stage run-bf16 170 "${RUN[@]}" --dtype bf16 --set gbs=16
TAIL=40 stage run-fp8 160 "${RUN[@]}" --dtype fp8 --set gbs=32
stage preflight 60 python3 -m llmb preflight --gpu "$GPU" --nodes 1 --gpus-per-node 1 --json
# the runs' own logs and records, one archive
tar -czf "$OUT/llmb-install.tgz" -C "$LLMB_INSTALL" . 2>/dev/null
ls -la "$OUT"
