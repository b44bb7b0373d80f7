"""Slurm's client commands, each call a subprocess with a timeout.

Nothing here decides anything about a job: it runs ``sbatch``, ``squeue``,
``sacct``, ``scancel``, ``scontrol``, ``sinfo`` and ``srun``, parses what they
print, and says when they failed. A failed query is reported as such (``QueryFailed``),
never as a job state: a job is never cancelled or failed because Slurm did
not answer.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from llmb import VARIABLES, UsageError

TIMEOUT_S = 60.0
SQUEUE_FORMAT = "%i|%T|%r|%N"  # id, state, reason, nodes
SACCT_FIELDS = "JobID,State,ExitCode,NodeList"
SINFO_GPUS = "%G|%f"  # generic resources, node features
# sbatch's input variables that llmb reads and renders as #SBATCH lines (the seeds' SBATCH_GPUS_PER_NODE too).
RENDERED_VARIABLES = frozenset(
    {*(v for v in VARIABLES.values() if v.startswith("SBATCH_")), "SBATCH_GPUS_PER_NODE"}
)
# Answers that depend only on the installed Slurm (its configuration file), asked once per process.
_ASKED: dict[tuple, str | None] = {}


class QueryFailed(Exception):
    """A Slurm command failed or timed out (the jobs' states are unknown, not changed)."""


class AnswerLost(QueryFailed):
    """sbatch did not say whether it submitted the job (it timed out, was killed, or
    printed no job id): the job may exist, and is looked up by its marker."""


@dataclass(frozen=True)
class Row:
    slurm_id: str
    state: str
    reason: str
    nodes: str
    exit_code: str | None = None


class SlurmCommands:
    """Runs Slurm's commands; ``calls`` counts them (the tracking benchmark reads it)."""

    def __init__(self, env: dict[str, str] | None = None, timeout: float | None = None):
        self.env = env
        self.timeout = timeout or float(os.environ.get("LLMB_SLURM_TIMEOUT") or TIMEOUT_S)
        self.calls = 0

    def run(
        self, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        self.calls += 1
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                env=env if env is not None else self.env,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise UsageError(
                f"{argv[0]} not found: the slurm backend needs Slurm's client commands on PATH "
                f"(run llmb on a login node of the cluster)."
            ) from None
        except subprocess.TimeoutExpired:
            raise QueryFailed(f"{argv[0]} did not answer within {self.timeout:.0f} s") from None

    # ------------------------------------------------------------ submit / cancel

    def sbatch(self, script_path: str, env: dict[str, str], marker: str) -> str:
        """The Slurm job id; UsageError with Slurm's reason when it refuses the job;
        AnswerLost when whether it took the job is unknown (``marker``, the job's
        ``--comment``, finds it then)."""
        try:
            result = self.run(["sbatch", "--parsable", f"--comment={marker}", script_path], env=env)
        except QueryFailed as exc:
            raise AnswerLost(str(exc)) from None
        if result.returncode < 0:
            raise AnswerLost(
                f"sbatch was stopped by signal {-result.returncode} before it answered"
            )
        if result.returncode != 0:
            reason = _reason(result.stderr) or f"sbatch exited with {result.returncode}"
            # e.g. "Socket timed out on send/recv": slurmctld may have taken it
            if "timed out" in reason.lower():
                raise AnswerLost(f"sbatch failed with {reason!r}")
            raise UsageError(f"Slurm refused the job: {reason}")
        job_id = result.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise AnswerLost(f"sbatch answered {result.stdout.strip()!r}, not a job id")
        return job_id

    def scancel(self, slurm_ids: list[str]) -> None:
        result = self.run(["scancel", *slurm_ids])
        if result.returncode != 0:
            raise QueryFailed(f"scancel failed: {_reason(result.stderr)}")

    # ------------------------------------------------------------ what the cluster has

    def _asked_once(self, argv: list[str]) -> str | None:
        """What ``argv`` printed (stdout and stderr), once per process and Slurm configuration;
        None when it failed or is not installed."""
        key = (tuple(argv), (self.env if self.env is not None else os.environ).get("SLURM_CONF"))
        if key not in _ASKED:
            try:
                result = self.run(argv)
            except (QueryFailed, UsageError):
                _ASKED[key] = None
            else:
                _ASKED[key] = result.stdout + result.stderr if result.returncode == 0 else None
        return _ASKED[key]

    def sbatch_has(self, option: str) -> bool | None:
        """Whether ``sbatch --help`` lists ``--option``; None when sbatch could not be asked."""
        text = self._asked_once(["sbatch", "--help"])
        return None if text is None else re.search(rf"--{re.escape(option)}\b", text) is not None

    def sbatch_lists(self, option: str) -> bool | None:
        """Whether ``sbatch --help`` lists ``--option`` by that whole name (not a longer option it
        begins); None when sbatch could not be asked."""
        text = self._asked_once(["sbatch", "--help"])
        return None if text is None else option in re.findall(r"--([a-z][a-z0-9-]*)", text)

    def srun_has_mpi(self, plugin: str) -> bool | None:
        """Whether ``srun --mpi=list`` names the MPI plugin; None when srun could not be asked."""
        text = self._asked_once(["srun", "--mpi=list"])
        return None if text is None else re.search(rf"\b{re.escape(plugin)}", text) is not None

    def node_gpus(self, partition: str | None, nodelist: str | None) -> list[tuple[str, str]]:
        """(generic resources, features) of each node group sinfo lists, for the partition and
        nodes when given; QueryFailed when sinfo fails."""
        argv = ["sinfo", "--noheader", f"--format={SINFO_GPUS}"]
        if partition:
            argv.append(f"--partition={partition}")
        if nodelist:
            argv.append(f"--nodes={nodelist}")
        try:
            result = self.run(argv)
        except UsageError as exc:
            raise QueryFailed(str(exc)) from None
        if result.returncode != 0:
            raise QueryFailed(f"sinfo failed: {_reason(result.stderr)}")
        rows = []
        for line in result.stdout.splitlines():
            gres, _, features = line.strip().partition("|")
            if gres or features:
                rows.append((gres.strip(), features.strip()))
        return rows

    # ------------------------------------------------------------ queries (one call for any number of jobs)

    def squeue(self, slurm_ids: list[str]) -> dict[str, Row]:
        """Jobs Slurm still holds (live, or finished less than MinJobAge ago)."""
        if not slurm_ids:
            return {}
        result = self.run(
            [
                "squeue",
                "--noheader",
                "--states=all",
                f"--jobs={','.join(slurm_ids)}",
                f"--format={SQUEUE_FORMAT}",
            ]
        )
        if result.returncode != 0:
            if "Invalid job id" in result.stderr:
                # none of them is known any more (squeue refuses a list of only unknown ids)
                return {}
            raise QueryFailed(f"squeue failed: {_reason(result.stderr)}")
        rows = {}
        for line in result.stdout.splitlines():
            parts = line.split("|")
            if len(parts) >= 4 and parts[0].strip():
                row = Row(parts[0].strip(), parts[1].strip(), parts[2].strip(), parts[3].strip())
                rows[row.slurm_id] = row
        return rows

    def sacct(self, slurm_ids: list[str]) -> dict[str, Row] | None:
        """Finished jobs from accounting; None when the cluster keeps none."""
        if not slurm_ids:
            return {}
        result = self.run(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "--allocations",
                f"--jobs={','.join(slurm_ids)}",
                f"--format={SACCT_FIELDS}",
            ]
        )
        if result.returncode != 0:
            if "accounting storage is disabled" in result.stderr.lower():
                return None
            raise QueryFailed(f"sacct failed: {_reason(result.stderr)}")
        rows = {}
        for line in result.stdout.splitlines():
            parts = line.split("|")
            if len(parts) >= 4 and parts[0].strip().isdigit():
                rows[parts[0]] = Row(parts[0], parts[1], "", parts[3], exit_code=parts[2])
        return rows

    def marked(self, markers: list[str]) -> dict[str, str]:
        """This user's jobs Slurm holds whose comment is one of ``markers``: marker -> Slurm job
        id (the first submitted, should a script have been resubmitted by hand)."""
        if not markers:
            return {}
        result = self.run(["squeue", "--noheader", "--me", "--states=all", "--format=%i|%k"])
        if result.returncode != 0:
            raise QueryFailed(f"squeue failed: {_reason(result.stderr)}")
        wanted, found = set(markers), {}
        for line in result.stdout.splitlines():
            slurm_id, _, comment = line.partition("|")
            slurm_id, comment = slurm_id.strip(), comment.strip()
            if (
                comment in wanted
                and slurm_id.isdigit()
                and (comment not in found or int(slurm_id) < int(found[comment]))
            ):
                found[comment] = slurm_id
        return found

    def hostnames(self, nodelist: str) -> list[str]:
        """``node[1-2]`` -> ``["node1", "node2"]``."""
        if not nodelist or nodelist in ("(null)", "None assigned"):
            return []
        result = self.run(["scontrol", "show", "hostnames", nodelist])
        if result.returncode != 0:
            raise QueryFailed(f"scontrol show hostnames failed: {_reason(result.stderr)}")
        return result.stdout.split()


def _reason(stderr: str) -> str:
    """Slurm's own words: its ``error:`` lines, without the command's prefix."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line.split("error:", 1)[1].strip() for line in lines if "error:" in line]
    return "; ".join(dict.fromkeys(errors)) if errors else (lines[-1] if lines else "")


def submission_env(secrets: tuple[str, ...]) -> dict[str, str]:
    """sbatch's environment: this shell's (sbatch exports it to the job), which is
    how secrets travel; nothing else carries them. Without the ``SBATCH_*``
    variables llmb reads itself: sbatch would let them override the script's
    ``#SBATCH`` lines, so ``SBATCH_QOS=a llmb run --qos b`` would run under ``a``; nor those
    for the options llmb sets or refuses (``params.VARIABLES``: ``llmb run`` refuses them, and a
    retry submitted later from another shell must not make the job an array either)."""
    from llmb_backend_slurm.params import VARIABLES

    env = {
        name: value
        for name, value in os.environ.items()
        if name not in RENDERED_VARIABLES and name not in VARIABLES
    }
    missing = [name for name in secrets if name not in env]
    if missing:
        raise UsageError(f"secret variable(s) {', '.join(missing)} not set in this shell.")
    return env
