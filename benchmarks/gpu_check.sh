#!/usr/bin/env bash
# The torch engine's checks on one NVIDIA GPU, in one go (at most 8 minutes: each stage has a time limit):
#   1. benchmarks/engine_throughput.py: Llama 3.1 8B's width (full vocabulary, 8,192-token sequence) at
#      2 layers (compiled, eager, the plain reference loop) and at 10 layers with 4 micro-batches
#      (compiled), each beside its peer, transformers' LlamaForCausalLM, when transformers is installed.
#   2. llmb run of every workload with --fit: the full-width model sliced to what one GPU holds (fewer
#      layers; fewer experts per MoE layer), through the local backend, with MFU in its --json.
#   3. llmb preflight on the one GPU.
# The GPU type is the card's, as llmb names it (an H200 runs the H100 recipes); GPU=h100 overrides.
# Each stage's log goes to $OUT (default ./gpu-check); a stage that fails does not stop the next.
# Wheels in .whl/ (llmb's own and what the machine lacks) are installed first, when present:
#   pip wheel --no-deps -w .whl ./core ./backends/slurm ./backends/runai ./plugins/*
#   (plus wheels of structlog, zstandard and torchao for the machine's Python)
set -u
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/llmb-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/llmb-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 LLMB_INSTALL=${LLMB_INSTALL:-/tmp/llmb-install}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
for module in torchao transformers; do
    python3 -c "import $module; print('$module', $module.__version__)" 2>&1 | tail -1
done
GPU=${GPU:-$(python3 -c "
from llmb.runs.gpu_seen import from_nvidia_smi, gpu_type_of
seen = from_nvidia_smi()
print(next((t for t in map(gpu_type_of, seen.names if seen else ()) if t), 'h100'))" 2>/dev/null || echo h100)}
echo "GPU type: $GPU"

stage() {  # stage NAME SECONDS COMMAND...: run it with a time limit, log to $OUT/NAME.log, show its end
    local name=$1 limit=$2 begin=$SECONDS
    shift 2
    echo "== $name: $*"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: rc $? in $((SECONDS - begin)) s"
    grep -v '^\s*$' "$OUT/$name.log" | grep -v 'Enum subclass' | tail -n "${TAIL:-14}"
}

BENCH=(python3 benchmarks/engine_throughput.py --gpu "$GPU" --only 8b)
stage bench-2-layers 120 "${BENCH[@]}" --layers 2 --rounds 4
stage bench-10-layers 110 "${BENCH[@]}" --layers 10 --ga 4 --rounds 3 --warmup 1 --compiled-only
# Each workload's largest slice for one GPU, 10 steps (the first compiles), in bf16 where the recipe
# has it (Nemotron-H 56B publishes fp8 rows only: torchao float8 on the GPU).
for run in "llama31 8b bf16" "llama4 400b bf16" "nemotron4 340b bf16" "nemotronh 56b fp8"; do
    set -- $run
    TAIL=6 stage "run-$1" 55 python3 -m llmb run "$1" --size "$2" --gpu "$GPU" --gpus 1 --fit \
        --dtype "$3" --steps 10 --no-window-check --json
done
stage preflight 45 python3 -m llmb preflight --gpu "$GPU" --nodes 1 --gpus-per-node 1 --json
# one line per run: what it measured
python3 -m llmb results 2>&1 | tail -n 12
# the runs' own logs and records, one archive
tar -czf "$OUT/llmb-install.tgz" -C "$LLMB_INSTALL" . 2>/dev/null
ls -la "$OUT"
