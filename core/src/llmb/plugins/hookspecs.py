"""The llmb hook specifications: the whole contract between core and plugins.

Plugins are found through the entry-point group ``llmb``; each entry point
names a module (or object) whose ``@llmb.hookimpl`` functions implement some
of the hooks below. Name a workload plugin's entry point after its workload
(``nemotronh = llmb_plugin_nemotronh.plugin``): when such a plugin fails to
import, that is how the core knows which workload the failure belongs to.

Per-workload hooks (``llmb_resolve_recipe``, ``llmb_model_flops``) are called
only on the plugin that registered the workload and on the wrappers
(``@hookimpl(wrapper=True)``) of plugins that register no workload (site
plugins). Another workload's plugin is never asked, and a site plugin's plain
implementation is ignored with a warning, so no plugin needs to check whose
workload it is and no answer depends on registration order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

from llmb.recipes.records import ModelArch, ModelFlops, Recipe, RecipeRequest, Workload

if TYPE_CHECKING:  # the results package is imported only by commands that read logs
    from llmb.results.scan import LogParser

hookspec = pluggy.HookspecMarker("llmb")


@hookspec
def llmb_workloads() -> list[Workload]:
    """Register workloads: return the ``Workload`` records this plugin provides.

    Names must be unique across all plugins; the core refuses a duplicate with
    a message naming both providers. Build records from a data file with
    ``llmb.recipes.workload_file.load_workload`` or construct them directly. This is
    called once per process, lazily, so keep it free of network or GPU work.
    """


@hookspec(firstresult=True)
def llmb_resolve_recipe(workload: Workload, request: RecipeRequest) -> Recipe | None:
    """Turn ``request`` into a validated ``Recipe`` for ``workload``.

    The core's own implementation (``trylast``) resolves from the workload's
    recipe tables: it picks the variant and table row, applies the
    documented errata, derives DP and GA and enforces the scale rules. A
    workload plugin implements this hook only to change that, usually by
    calling ``llmb.recipes.resolve.resolve_from_tables`` and adjusting the result.

    Site plugins wrap it (``@hookimpl(wrapper=True)``: ``recipe = yield``) to
    adjust the finished recipe for their cluster, e.g.
    ``recipe.with_env(TP_COMM_OVERLAP="False")``.

    Raise ``llmb.errors.RecipeError`` for a request no recipe satisfies; its
    message names the bad value and lists the valid ones.
    """


@hookspec(firstresult=True)
def llmb_model_flops(workload: Workload, arch: ModelArch, seq_len: int) -> ModelFlops | None:
    """Model FLOPs of one sample (one ``seq_len`` sequence, forward+backward).

    ``arch`` is the size's architecture with the recipe's layer count (proxy
    rows have fewer layers). Return the workload seed's own formula, split
    into the terms the seed prints. The core's fallback (``trylast``) is
    Megatron-Bridge's formula (field-facts §3) for transformer families and
    returns None for architectures it cannot count.
    """


@hookspec
def llmb_log_parsers() -> list[LogParser]:
    """Contribute log parsers (1:N): every registered parser reads every log.

    A ``LogParser`` has a unique ``name`` and a ``start()`` that returns the
    state for one log: ``feed(chunk)`` receives the log in order as chunks of
    whole lines (most chunks do not concern a parser, so test a literal with
    ``in`` before any regular expression), ``finish()`` returns what it
    found. The core's parsers are ``megatron_bridge``, ``nemo2``,
    ``torchtitan``, ``checkpoint``, ``nccl``, ``nccl_transport`` and
    ``failures``; another plugin's findings appear in ``RunResult.extra``
    under its parser's name.
    A parser that raises is switched off for that log and the error is noted
    in the result.
    """


@hookspec
def llmb_flaky_signatures() -> list[str]:
    """Contribute flaky-failure signatures (1:N): literal, case-sensitive
    strings whose presence in the tail of a failed run's log makes the
    failure flaky, worth a fresh attempt (``llmb run --retries N``; the Slurm
    backend retries them, excluding unhealthy nodes). The core contributes
    the list of NVIDIA's performance launcher (Megatron-Bridge
    scripts/performance); add the messages your site's transient faults
    print (a filesystem's, a network plugin's). Return plain strings; keep
    them specific, since one match makes a failure retryable. A failure that
    follows the run's own NaN grad norm is never retried on a signature
    (unless the run sets ``LLMB_RETRY_NAN=1``), whichever plugin added it.
    """


@hookspec(firstresult=True)
def llmb_build_model(workload: Workload, arch: ModelArch) -> Any:
    """The workload's model for ``arch`` as a ``torch.nn.Module`` (the torch engine).

    Called only on the plugin that registered ``workload`` (and site-plugin
    wrappers). Import torch inside the implementation, never at module level:
    the CLI must not import torch. Compose the family from
    ``llmb.engines.torch.blocks``; parameters are created on the current default
    device (the engine uses ``torch.device("meta")`` to count them without
    memory). ``model(input_ids)`` takes int64 ``[batch, seq]`` token ids and
    returns float ``[batch, seq, vocab]`` logits. The parameter count must
    equal ``llmb.recipes.params.count_params(arch)``.
    """


@hookspec
def llmb_before_step(step: int, rank: int) -> float | None:
    """Called by the torch engine on every rank before each training step (1:N).

    ``step`` counts from 1; ``rank`` is the global rank. Raise to fail this
    rank at this step: the exception ends the rank as an error of the step
    would (its traceback in the run's log, with the ``[rankN]:`` prefix;
    the job FAILED with it as the reason). Return a number to multiply each
    of the step's micro-batch losses by before backward (``float("nan")``:
    a diverging run, its grad norm NaN; a pipeline schedule computes its
    losses itself and is not changed), or None to leave the step alone; the
    answers of several plugins multiply. Called on every step: keep it cheap,
    and free of collective calls. The core implements none; tests inject
    faults through it (``tests/fault_plugin.py``, loaded by ``LLMB_PLUGINS``).
    """


@hookspec
def llmb_profile(request: Any) -> Any:
    """Contribute to a run's profiling (1:N; every plugin may answer).

    ``request`` is an ``llmb.runs.profiling.ProfileRequest`` (what the user asked:
    profile, GPU metrics, NCCL trace, the step window, the device, where the
    run writes). Return an ``llmb.runs.profiling.ProfileContribution`` (an argv
    prefix for every rank, environment variables, a step limit, what the
    training loop must do at the window's edges) or None when not concerned.
    The core contributes nsys (when installed, on GPU), the torch.profiler
    fallback, and the NCCL trace variables.
    """


@hookspec(firstresult=True)
def llmb_job_summary(job: Any) -> Any:
    """What ``exit.json`` records as the result of a job that is no training run, or None.

    ``job`` is an ``llmb.runs.jobs.Job`` that has just ended. A training run's
    result is its results row, parsed from its log; a job of another kind
    (``llmb preflight``'s, workload ``preflight``) answers with its own summary
    (a dict), written in place of that row. Called once per job, when the core
    records its end (``llmb.lifecycle.reconcile``)."""


@hookspec
def llmb_backends() -> list:
    """Register backends (1:N): ``llmb.backends.Backend`` records whose
    ``load()`` returns the implementation (imported lazily): ``submit``,
    ``status`` (batched over jobs), ``cancel``, ``describe``, ``log_path``
    and, for a backend that retries, ``resubmit``; see
    ``llmb.backends.BackendImpl``. A backend reports what it sees; the core
    decides when a job has ended, records it and retries it
    (``llmb.lifecycle.reconcile``). The core registers ``local``."""
