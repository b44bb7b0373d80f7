"""The sbatch script of one attempt of a job.

    #SBATCH lines     nodes, tasks per node, GPUs per node (gres) where the
                      cluster uses it, account, partition, time limit, the
                      experiment name as job name, output in the seeds' layout,
                      exclusive nodes, all their memory, no in-place requeue,
                      the segment on NVL72 systems, nodelist, exclude,
                      reservation, qos, constraint, ADDITIONAL_SLURM_PARAMS
    set-up            MASTER_ADDR = the address of the allocation's first host,
                      MASTER_PORT, the run's variables (every value shell-quoted)
    srun              the worker on every rank, under numactl on its GPU's
                      socket (binding.py): in NVIDIA's container through pyxis
                      (with PMIx), or bare from the nodes' Python environment
    markers           started/exit files in the job directory: the state of
                      last resort when Slurm no longer knows the job

Secrets never appear here: they reach the job through the submission
environment (sbatch exports it), and only their names are listed for pyxis.
No ``set -x``: a traced script would print every exported value.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from llmb_backend_slurm import binding as rank_binding
from llmb_backend_slurm.launch_settings import Binding

STARTED = "attempt-{attempt}.started"
EXITED = "attempt-{attempt}.exit"
# matched whole: the last line of defence
_SAFE_DIRECTIVE = re.compile(r"[A-Za-z0-9_.,:/@%+=&|\[\]-]*")

_RECIPE = "llmb sets it from the recipe; change the recipe (--gpus, --gpus-per-node) instead"
_LAYOUT = "llmb sets it: the job's name, output and directory follow the published recipes' experiment layout"
_REQUEUE = (
    "llmb sets --no-requeue itself, or --requeue with llmb run --requeue: use that flag instead"
)
# The #SBATCH options render() writes from the job itself (an ADDITIONAL_SLURM_PARAMS item for one would
# come after llmb's line, and sbatch keeps the last): why each is llmb's, and what to use instead.
OWNED_OPTIONS = {
    "job-name": _LAYOUT,
    "nodes": _RECIPE,
    "ntasks-per-node": _RECIPE,
    "output": _LAYOUT,
    "open-mode": (
        "llmb sets it to append: every attempt of a job writes one output file, and a requeued or "
        "retried attempt must not wipe what the first one wrote"
    ),
    "requeue": _REQUEUE,
    "no-requeue": _REQUEUE,
    "gpus-per-node": (
        "llmb sets it from SBATCH_GPUS_PER_NODE, where the cluster schedules GPUs that way; the "
        "recipe's GPUs per node is --gpus-per-node"
    ),
}


@dataclass(frozen=True)
class Container:
    image: str  # registry#repo:tag, or an imported .sqsh file
    mounts: tuple[str, ...]
    env_names: tuple[str, ...]  # variables that must override the image's ENV (names only)


@dataclass(frozen=True)
class BatchScript:
    job_id: str
    attempt: int
    experiment: str
    nodes: int
    tasks_per_node: int
    output: str  # sbatch_<experiment>.out
    log: str  # log-<experiment>.out: every rank's output
    job_dir: str  # where the markers go
    worker: tuple[str, ...]  # argv of one rank (after the profiler's wrapper)
    env: dict[str, str] = field(default_factory=dict)
    account: str | None = None
    partition: str | None = None
    time_limit: str | None = None
    gpus_per_node: str | None = None  # SBATCH_GPUS_PER_NODE, where the seeds set it
    gres: str | None = None  # gpu:N, where the cluster schedules GPUs as generic resources
    exclusive: bool = True
    mem: str | None = "0"  # all of each node's memory
    requeue: bool = False
    segment: int | None = None
    nodelist: str | None = None
    exclude: tuple[str, ...] = ()
    reservation: str | None = None
    qos: str | None = None
    constraint: str | None = None
    additional: tuple[tuple[str, str | None], ...] = ()
    container: Container | None = None
    mpi: str | None = None  # srun --mpi
    binding: Binding | None = None  # each rank under numactl; None: unbound
    generator: str = "llmb"


def directive(key: str, value: str | None = None) -> str:
    """One ``#SBATCH`` line; sbatch reads these itself (not the shell), so a
    value with spaces or quotes is double-quoted the way sbatch accepts."""
    if value is None:
        return f"#SBATCH --{key}"
    if any(c in value for c in "\n\r\0"):
        raise ValueError(f"sbatch option {key}: a value cannot contain a line break")
    if _SAFE_DIRECTIVE.fullmatch(value):
        return f"#SBATCH --{key}={value}"
    if '"' in value:
        raise ValueError(
            f"sbatch option {key}: a value cannot contain a double quote in a #SBATCH line"
        )
    return f'#SBATCH --{key}="{value}"'


def output_pattern(path: str, job_name: str) -> str:
    """``--output``'s value for the file ``path``. sbatch reads it as a filename pattern (``%j`` the job
    id, ``%x`` its name, ``%%`` a percent sign: Slurm's sbatch man page, "filename pattern"), so a ``%``
    of the path's own (an install under ``/lustre/100%``) is doubled, or the output would go to a
    folder that does not exist; the file's name, ``sbatch_<job name>.out``, is written ``sbatch_%x.out``:
    the same file, and the experiment's name once less in a line that held it four times."""
    folder, name = os.path.split(path)
    name = "sbatch_%x.out" if name == f"sbatch_{job_name}.out" else name.replace("%", "%%")
    return os.path.join(folder.replace("%", "%%"), name)


def render(script: BatchScript) -> str:
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# {script.generator}: job {script.job_id}, attempt {script.attempt}. Resubmit by hand with: sbatch <this file>",
        directive("job-name", script.experiment),
        directive("nodes", str(script.nodes)),
        directive("ntasks-per-node", str(script.tasks_per_node)),
        directive("output", output_pattern(script.output, script.experiment)),
        directive("open-mode", "append"),
    ]
    if script.exclusive:
        lines.append(directive("exclusive"))
    lines.append(directive("requeue" if script.requeue else "no-requeue"))
    for key, value in (
        ("mem", script.mem),
        ("account", script.account),
        ("partition", script.partition),
        ("time", script.time_limit),
        ("gpus-per-node", script.gpus_per_node),
        ("gres", script.gres),
        ("segment", script.segment and str(script.segment)),
        ("nodelist", script.nodelist),
        ("exclude", ",".join(script.exclude)),
        ("reservation", script.reservation),
        ("qos", script.qos),
        ("constraint", script.constraint),
    ):
        if value:
            lines.append(directive(key, value))
    lines += [directive(key, value) for key, value in script.additional]

    started = f"{script.job_dir}/{STARTED.format(attempt=script.attempt)}"
    exited = f"{script.job_dir}/{EXITED.format(attempt=script.attempt)}"
    lines += [
        "",
        "set -uo pipefail  # never -x: it would print every exported value",
        f"log_file={q(script.log)}",
        f"started_file={q(started)}",
        f"exit_file={q(exited)}",
        'printf \'{"slurm_job_id": "%s", "nodes": "%s", "started_at": %s}\\n\' \\',
        '  "$SLURM_JOB_ID" "$SLURM_JOB_NODELIST" "$(date +%s)" > "$started_file"',
        "",
        "# The rendezvous host: the first host of the allocation, by the address Slurm reaches it at.",
        'first_host=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "master_addr=$(scontrol show node \"$first_host\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p' | head -n 1)",
        'export MASTER_ADDR="${master_addr:-$first_host}"',
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
        f"export LLMB_JOB_ID={q(script.job_id)}",
        "export PYTHONUNBUFFERED=1",
    ]
    for name, value in sorted(script.env.items()):
        lines.append(f"export {name}={q(str(value))}")

    srun = [
        "srun",
        "--kill-on-bad-exit=1",
        "--wait=60",
        f"--ntasks-per-node={script.tasks_per_node}",
    ]
    if script.mpi:
        srun.append(f"--mpi={script.mpi}")
    if script.container:
        c = script.container
        srun += [
            f"--container-image={c.image}",
            "--no-container-mount-home",
            "--container-writable",
        ]
        if c.mounts:
            srun.append(f"--container-mounts={','.join(c.mounts)}")
        names = sorted(
            {
                *c.env_names,
                *script.env,
                "MASTER_ADDR",
                "MASTER_PORT",
                "LLMB_JOB_ID",
                "PYTHONUNBUFFERED",
            }
        )
        srun.append(f"--container-env={','.join(names)}")
    command = " ".join(q(part) for part in srun)
    if script.binding:
        command += f' bash -c "${rank_binding.VARIABLE}" ' + " ".join(
            map(q, rank_binding.wrapper_argv(script.binding))
        )
        lines += [
            "",
            "# Each rank under numactl on its GPU's socket, as NVIDIA's Megatron-Bridge scripts/performance launcher",
            "# runs it; it prints the binding it got, or why it runs unbound.",
            f"IFS= read -r -d '' {rank_binding.VARIABLE} <<'LLMB_BIND_RANK'",
            rank_binding.RANK_WRAPPER.rstrip("\n"),
            "LLMB_BIND_RANK",
        ]
    command += " " + " ".join(map(q, script.worker))
    lines += [
        "",
        f'echo "[llmb] job {script.job_id} attempt {script.attempt}: Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, '
        f'MASTER_ADDR=$MASTER_ADDR ($first_host)" >> "$log_file"',
        "on_signal() {",
        '  printf \'{"exit_code": null, "signal": "%s", "ended_at": %s}\\n\' "$1" "$(date +%s)" > "$exit_file"',
        '  [ -n "${srun_pid:-}" ] && kill -TERM "$srun_pid" 2>/dev/null',
        "  wait",
        "  exit 143",
        "}",
        "trap 'on_signal TERM' TERM",
        "trap 'on_signal INT' INT",
        f'{command} >> "$log_file" 2>&1 &',
        "srun_pid=$!",
        'wait "$srun_pid"',
        "code=$?",
        'printf \'{"exit_code": %d, "signal": null, "ended_at": %s}\\n\' "$code" "$(date +%s)" > "$exit_file"',
        'exit "$code"',
        "",
    ]
    return "\n".join(lines)
