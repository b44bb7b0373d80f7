"""How one run is launched on this cluster: the reference launcher's settings
(``launch_settings``), the dedicated sbatch options (flags, cluster file, or
their ADDITIONAL_SLURM_PARAMS items), and what this Slurm supports and has
(``sbatch --help``, ``srun --mpi=list``, ``sinfo``).

What the cluster cannot do is left out with a warning (an sbatch without
``--segment``, an srun without PMIx); a failed ``sinfo`` skips the detection
with a warning and never blocks the submission. Nodes known to hold another
GPU type than the run's refuse the run before anything is submitted.
"""

from __future__ import annotations

import os

from llmb import (
    SECRET_VARIABLES,
    RunSpec,
    SubmitOptions,
    UsageError,
    env_name_problem,
    gpu_type,
    value_checks,
)

from llmb_backend_slurm import cluster_gpus, launch_settings, params
from llmb_backend_slurm.commands import QueryFailed, SlurmCommands
from llmb_backend_slurm.script import directive

PLAIN = ("nodelist", "reservation", "qos", "constraint")


def plan(
    spec: RunSpec,
    submit: SubmitOptions,
    slurm: SlurmCommands,
    secrets: tuple[str, ...],
    container: bool,
    problems: list[str] | None,
) -> dict:
    """The launch settings of ``job.details["slurm"]``: dedicated options, gres, segment, MPI,
    binding, the ranks' environment, ``additional`` (the items left) and ``warnings``."""
    warnings: list[str] = []
    params.check_environment(os.environ)  # sbatch's input variables: options that enter unwritten
    given, additional = params.dedicated(params.parse(submit.additional, slurm.sbatch_lists))
    out: dict = {name: _one(name, getattr(submit, name), given.get(name)) for name in PLAIN}
    out["exclude"] = [value for value in (submit.exclude, given.get("exclude")) if value]
    for value in out["exclude"]:
        _check("exclude", value)
    out["additional"] = [list(item) for item in additional]

    gpus_in_node = launch_settings.node_gpus(spec.gpu, submit.gpus_per_node)
    out["segment"] = _segment(
        spec, gpus_in_node, submit.segment, given.get("segment"), slurm, warnings
    )
    out["mpi"] = None
    if container:
        if slurm.srun_has_mpi("pmix") is False:
            warnings.append(
                "srun here has no PMIx (srun --mpi=list does not name pmix), which NVIDIA's "
                "Megatron-Bridge scripts/performance launcher uses: the ranks start without --mpi=pmix."
            )
        else:
            out["mpi"] = "pmix"
    out["gres"] = _gres(spec, submit, given.get("gres"), out["nodelist"], slurm, warnings, problems)
    pin = (launch_settings.reference().get("core_pinning") or {}).get(gpu_type(spec.gpu).name) or {}
    opt_in = os.environ.get(pin["opt_in"]) if pin.get("opt_in") else None
    out["binding"] = (
        launch_settings.binding(
            spec.gpu, spec.workload, gpus_in_node, spec.framework, opt_in
        ).to_dict()
        if submit.numa_binding
        else None
    )
    row = launch_settings.row_of(
        spec.framework, spec.workload, spec.size, spec.gpu, spec.ranks, spec.framework_config
    )
    out["rank_env"] = {
        **launch_settings.rank_env(spec.gpu, "HF_TOKEN" in secrets, row),
        **_cluster_env(submit),
    }
    out["warnings"] = warnings
    return out


def _check(name: str, value: str) -> str:
    try:
        directive(name, value)
    except ValueError as exc:
        raise UsageError(f"--{name} {value!r}: {exc}.") from None
    return value


def _one(name: str, flag: str | None, item: str | None) -> str | None:
    if flag and item:
        raise UsageError(
            f"--{name} is given twice: {flag!r} as a flag or in the cluster file, {item!r} in "
            f"ADDITIONAL_SLURM_PARAMS; give it once."
        )
    value = flag or item
    return _check(name, value) if value else None


def _segment(
    spec: RunSpec,
    gpus_in_node: int,
    flag: int | None,
    item: str | None,
    slurm: SlurmCommands,
    warnings: list[str],
) -> int | None:
    if flag is not None and item is not None:
        _one("segment", str(flag), item)
    override = flag
    if item is not None:
        override = int(item)  # a whole number from 1: params.parse checked it as --segment's value
    segment = launch_settings.segment(spec.nodes, gpus_in_node, override)
    if segment and slurm.sbatch_has("segment") is False:
        warnings.append(
            f"sbatch here has no --segment option (Slurm's topology/block scheduling, newer than this "
            f"Slurm): the job is submitted without --segment={segment}, so its {spec.nodes} nodes may "
            f"span more NVLink domains than NVIDIA's Megatron-Bridge scripts/performance runs use."
        )
        return None
    return segment


def _gres(
    spec: RunSpec,
    submit: SubmitOptions,
    item: str | None,
    nodelist: str | None,
    slurm: SlurmCommands,
    warnings: list[str],
    problems: list[str] | None,
) -> str | None:
    if submit.gres:
        # the flag's check (the item passed it in params.parse)
        value_checks.gres(submit.gres, "--gres")
    override = _one("gres", submit.gres, item)
    where = (
        " and ".join(
            part
            for part in (
                submit.partition and f"partition {submit.partition}",
                nodelist and f"nodes {nodelist}",
            )
            if part
        )
        or "this cluster"
    )
    try:
        found = cluster_gpus.read(slurm.node_gpus(submit.partition, nodelist))
    except QueryFailed as exc:
        warnings.append(
            f"the nodes' GPUs could not be read ({exc}): the GPU type is not checked"
            + ("" if override else " and no --gres is requested (--gres gpu:N asks for it)")
            + "."
        )
        found = None
    if found is not None:
        try:
            cluster_gpus.check_type(spec.gpu, found, where)
        except UsageError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
    if override:
        return None if override == "none" else override
    if found is not None and found.uses_gres:
        return f"gpu:{spec.ranks_per_node or spec.ranks}"
    return None


def _cluster_env(submit: SubmitOptions) -> dict[str, str]:
    env = {}
    for name, value in submit.cluster_env:
        if problem := env_name_problem(name, "the cluster file's environment variable"):
            raise UsageError(problem)
        if name in SECRET_VARIABLES or name in submit.secrets:
            raise UsageError(
                f"the cluster file's environment sets {name}, a secret: it would be written into the "
                f"job's script. Export it in the submitting shell instead."
            )
        env[name] = str(value)
    return env
