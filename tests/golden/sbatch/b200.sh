#!/bin/bash
# llmb: job slurm-JOBID, attempt 1. Resubmit by hand with: sbatch <this file>
#SBATCH --job-name=pretrain_llama31_8b_fp8_gpus16_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs256
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --output=$LLMB_INSTALL/workloads/llama31/experiments/pretrain_llama31_8b_fp8_gpus16_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs256/pretrain_llama31_8b_fp8_gpus16_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs256_TIMESTAMP/pretrain_llama31_8b_fp8_gpus16_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs256/sbatch_%x.out
#SBATCH --open-mode=append
#SBATCH --exclusive
#SBATCH --no-requeue
#SBATCH --mem=0
#SBATCH --time=00:30:00
#SBATCH --gres=gpu:8

set -uo pipefail  # never -x: it would print every exported value
log_file=$LLMB_INSTALL/workloads/llama31/experiments/pretrain_llama31_8b_fp8_gpus16_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs256/pretrain_llama31_8b_fp8_gpus16_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs256_TIMESTAMP/pretrain_llama31_8b_fp8_gpus16_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs256/log-pretrain_llama31_8b_fp8_gpus16_tp1_pp1_cp1_vpNone_ep1_mbs2_gbs256.out
started_file=$LLMB_INSTALL/jobs/slurm-JOBID/attempt-1.started
exit_file=$LLMB_INSTALL/jobs/slurm-JOBID/attempt-1.exit
printf '{"slurm_job_id": "%s", "nodes": "%s", "started_at": %s}\n' \
  "$SLURM_JOB_ID" "$SLURM_JOB_NODELIST" "$(date +%s)" > "$started_file"

# The rendezvous host: the first host of the allocation, by the address Slurm reaches it at.
first_host=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
master_addr=$(scontrol show node "$first_host" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p' | head -n 1)
export MASTER_ADDR="${master_addr:-$first_host}"
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export LLMB_JOB_ID=slurm-JOBID
export PYTHONUNBUFFERED=1
export CUDA_DEVICE_MAX_CONNECTIONS=32
export HF_HOME=$LLMB_INSTALL/.cache/huggingface
export HF_HUB_OFFLINE=1
export NCCL_NVLS_ENABLE=0
export NVTE_BWD_LAYERNORM_SM_MARGIN=16
export NVTE_FWD_LAYERNORM_SM_MARGIN=16
export PYTHONPATH=$LLMB_INSTALL/python
export TOKENIZERS_PARALLELISM=False
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export TORCH_NCCL_HIGH_PRIORITY=1
export TRANSFORMERS_OFFLINE=1

# Each rank under numactl on its GPU's socket, as NVIDIA's Megatron-Bridge scripts/performance launcher
# runs it; it prints the binding it got, or why it runs unbound.
IFS= read -r -d '' bind_rank <<'LLMB_BIND_RANK'
divisor=$1 stride=$2 cores=$3
shift 3
local_id=${SLURM_LOCALID:-0}
rank=${SLURM_PROCID:-0}
host=${SLURMD_NODENAME:-$HOSTNAME}
numa=$((local_id / divisor))
if ! command -v -- "$1" >/dev/null 2>&1; then
  echo "[llmb] rank $rank on $host: cannot start the worker: $1 is not an executable command"
  exit 127
fi
why=""
if ! command -v numactl >/dev/null 2>&1; then
  why="numactl is not installed"
elif [ ! -d "/sys/devices/system/node/node$numa" ]; then
  why="NUMA node $numa does not exist (SLURM_LOCALID $local_id / $divisor GPUs per socket)"
else
  bind=(numactl "--cpunodebind=$numa" "--membind=$numa")
  cpus=""
  for ((i = 0; i < cores; i++)); do
    cpu=$((local_id * stride + i))
    if [ ! -d "/sys/devices/system/cpu/cpu$cpu" ]; then
      echo "[llmb] warning: rank $rank on $host: CPU $cpu does not exist, so no cores are pinned"
      cpus=""
      break
    fi
    cpus=${cpus:+$cpus,}$cpu
  done
  [ -n "$cpus" ] && bind+=("--physcpubind=$cpus")
  if ! refused=$("${bind[@]}" true 2>&1); then
    why="${bind[*]} failed: ${refused%%$'\n'*}"
  fi
fi
if [ -n "$why" ]; then
  echo "[llmb] warning: rank $rank on $host runs without NUMA binding: $why"
  exec "$@"
fi
echo "[llmb] rank $rank on $host: ${bind[*]}"
exec "${bind[@]}" "$@"
LLMB_BIND_RANK

echo "[llmb] job slurm-JOBID attempt 1: Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, MASTER_ADDR=$MASTER_ADDR ($first_host)" >> "$log_file"
on_signal() {
  printf '{"exit_code": null, "signal": "%s", "ended_at": %s}\n' "$1" "$(date +%s)" > "$exit_file"
  [ -n "${srun_pid:-}" ] && kill -TERM "$srun_pid" 2>/dev/null
  wait
  exit 143
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
srun --kill-on-bad-exit=1 --wait=60 --ntasks-per-node=8 --mpi=pmix '--container-image=nvcr.io#nvidia/nemo:25.11.01' --no-container-mount-home --container-writable --container-mounts=$LLMB_INSTALL:$LLMB_INSTALL --container-env=CUDA_DEVICE_MAX_CONNECTIONS,HF_HOME,HF_HUB_OFFLINE,LLMB_JOB_ID,MASTER_ADDR,MASTER_PORT,NCCL_NVLS_ENABLE,NVTE_BWD_LAYERNORM_SM_MARGIN,NVTE_FWD_LAYERNORM_SM_MARGIN,PYTHONPATH,PYTHONUNBUFFERED,TOKENIZERS_PARALLELISM,TORCH_NCCL_AVOID_RECORD_STREAMS,TORCH_NCCL_HIGH_PRIORITY,TRANSFORMERS_OFFLINE bash -c "$bind_rank" llmb-bind 4 0 0 python3 -m llmb.worker $LLMB_INSTALL/jobs/slurm-JOBID/run.json >> "$log_file" 2>&1 &
srun_pid=$!
wait "$srun_pid"
code=$?
printf '{"exit_code": %d, "signal": null, "ended_at": %s}\n' "$code" "$(date +%s)" > "$exit_file"
exit "$code"
