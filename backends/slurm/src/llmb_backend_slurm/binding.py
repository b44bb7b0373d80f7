"""Each rank under ``numactl`` on its GPU's socket, the way the reference launcher runs it.

The batch script holds ``RANK_WRAPPER`` in a variable and srun runs, on every rank,
``bash -c "$bind_rank" llmb-bind DIVISOR STRIDE CORES WORKER...``: the values
are positional arguments, never spliced into code. The rank prints the binding
it got (``[llmb] rank 3 on node1: numactl --cpunodebind=0 --membind=0``); when
it cannot be bound (no ``numactl``, no such NUMA node, numactl refusing it) it
prints ``[llmb] warning: rank R on HOST runs without NUMA binding: why`` and runs
unbound. Without a pinning stride, no cores are pinned; a CPU that does not
exist drops the pinning (with a warning), not the socket binding. A worker
command that cannot run is reported on a ``[llmb] rank`` line too (exit 127):
llmb's own lines, which never count as the worker having started.
"""

from __future__ import annotations

from llmb_backend_slurm.launch_settings import Binding

VARIABLE = "bind_rank"
ARGV0 = "llmb-bind"

RANK_WRAPPER = r"""divisor=$1 stride=$2 cores=$3
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
"""


def wrapper_argv(binding: Binding) -> tuple[str, ...]:
    """What precedes the worker's argv on srun's command line (after ``bash -c "$bind_rank"``)."""
    return (ARGV0, str(binding.divisor), str(binding.pin_stride), str(binding.pin_cores))
