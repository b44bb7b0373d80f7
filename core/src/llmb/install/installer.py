"""``llmb install``: prepare the install directory as the seeds' installer does.

For the chosen workloads (and GPU type) it creates the folders
(``images/``, ``workloads/<workload>/experiments``, the Hugging Face cache),
writes the cluster file's commented template (``cluster.yaml``, never over
an existing one: ``llmb.install.cluster_config``),
imports each container image the recipes run in with ``enroot import``
(``llmb.install.images``), and fetches the Hugging Face files their production
frameworks read (``llmb.install.hf``). Anything already there is skipped, so a rerun
finishes what a failed run left. There is no virtual environment to make:
the seeds' venvs held their launchers, and llmb is the launcher; what jobs
inside the container import is the worker library (``llmb.install.worker_library``,
``<install>/python``), brought up to date with the llmb running here.

``plan`` decides every step without touching anything; ``missing`` lists
what the steps still to do need and this machine lacks; ``execute`` runs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from llmb import http_safety
from llmb.errors import UsageError
from llmb.install import cluster_config, hf, images, worker_library
from llmb.recipes.gpus import gpu_type, recipes_of
from llmb.recipes.records import Variant, Workload
from llmb.redaction import MASK, mask

PROGRESS_FROM = 10 << 20  # bytes: a file this large shows its progress in tenths


@dataclass
class Step:
    """One thing ``llmb install`` makes. ``status``: ``present`` (already there),
    ``planned``, ``done``, ``absent`` (an optional file the repository lacks), ``failed``,
    ``skipped`` (a Hugging Face file not asked for once its endpoint timed out: ``error`` says why)."""

    kind: str  # folder | config | library | image | huggingface
    what: str
    target: str
    status: str
    command: list[str] | None = None  # image: the enroot command
    repo: str | None = None  # huggingface
    filename: str | None = None
    required: bool = True
    gated: bool = False
    error: str | None = None

    def action(self, token_set: bool) -> str:
        """What the step does, as a user would type or see it; a token shows as ***."""
        if self.kind == "folder":
            return f"mkdir -p {self.target}"
        if self.kind == "image":
            return " ".join(self.command or ())
        if self.kind == "library":
            return f"copy {self.what} into {self.target}"
        if self.kind == "config":
            return f"write the commented template {self.target} (an existing file is kept)"
        auth = f" (Authorization: Bearer {MASK})" if token_set or self.gated else ""
        return f"GET {mask(hf.url_of(self.repo, self.filename))}{auth} -> {self.target}"

    def as_dict(self, token_set: bool) -> dict:
        data = asdict(self)
        data["action"] = self.action(token_set)
        return data


@dataclass
class Plan:
    install: str
    workloads: list[str]
    gpu: str | None
    steps: list[Step] = field(default_factory=list)

    def pending(self, kind: str | None = None) -> list[Step]:
        return [s for s in self.steps if s.status == "planned" and kind in (None, s.kind)]


def select(
    workloads: list[Workload], gpu: str | None, variant: str | None, named: bool
) -> list[tuple[Workload, Variant, list[str]]]:
    """(workload, variant, sizes) with recipes on ``gpu`` (any GPU when None; a type that runs another's
    recipes, the other's: an H200 the H100's). A workload named by the user with nothing there is a
    usage error."""
    table = recipes_of(gpu)
    chosen = []
    for workload in workloads:
        variants = workload.variants
        if variant is not None:
            found = workload.variant(variant)
            if found is None:
                if named:
                    raise UsageError(
                        f"{workload.name} has no variant {variant!r}; its variants: "
                        f"{', '.join(v.name for v in workload.variants)}."
                    )
                continue
            variants = (found,)
        hits = []
        for v in variants:
            sizes = list(dict.fromkeys(s.size for s in v.series if gpu is None or s.gpu == table))
            if sizes:
                hits.append((workload, v, sizes))
        if named and not hits:
            gpus = sorted({s.gpu for v in variants for s in v.series})
            raise UsageError(
                f"{workload.name} has no recipes for {gpu}; its GPU types: {', '.join(gpus)}."
            )
        chosen += hits
    return chosen


def plan(
    workloads: list[Workload],
    install: str,
    *,
    gpu: str | None = None,
    variant: str | None = None,
    named: bool = False,
    with_images: bool = True,
    with_huggingface: bool = True,
) -> Plan:
    """Every step to install ``workloads`` into ``install``; touches nothing."""
    if gpu is not None:
        gpu = gpu_type(gpu).name
    chosen = select(workloads, gpu, variant, named)
    result = Plan(
        install=install, workloads=list(dict.fromkeys(w.name for w, _, _ in chosen)), gpu=gpu
    )
    home = hf.hf_home(install)
    files: dict[tuple[str, str], Step] = {}
    for _, v, sizes in chosen:
        production = v.production
        if not with_huggingface or production is None or production.huggingface is None:
            continue
        spec = production.huggingface
        for repo in dict.fromkeys(spec.repos[s] for s in sizes if s in spec.repos):
            for filename, required in hf.files_of(spec.assets):
                cached = hf.cached_file(home, repo, filename)
                status = (
                    "present"
                    if cached
                    else "absent"
                    if hf.known_absent(home, repo, filename)
                    else "planned"
                )
                step = files.setdefault(
                    (repo, filename),
                    Step(
                        kind="huggingface",
                        what=f"{repo} {filename}",
                        repo=repo,
                        filename=filename,
                        target=cached or hf.repo_dir(home, repo),
                        status=status,
                        required=required,
                    ),
                )
                step.gated = step.gated or spec.gated
    folders = [os.path.join(install, "workloads", name, "experiments") for name in result.workloads]
    references = (
        list(dict.fromkeys(c for _, v, _ in chosen for c in v.containers(recipes_of(gpu))))
        if with_images
        else []
    )
    if references:
        folders.insert(0, os.path.join(install, "images"))
    if files:
        folders.append(home)
    for folder in folders:
        result.steps.append(
            Step(
                kind="folder",
                what=folder,
                target=folder,
                status="present" if os.path.isdir(folder) else "planned",
            )
        )
    config = os.path.join(install, cluster_config.FILE_NAME)
    result.steps.append(
        Step(
            kind="config",
            what="cluster file",
            target=config,
            status="present" if os.path.lexists(config) else "planned",
        )
    )
    wanted = worker_library.versions(worker_library.contents())
    result.steps.append(
        Step(
            kind="library",
            what=", ".join(f"{d} {v}" for d, v in wanted.items()),
            target=worker_library.library_dir(install),
            status="present" if worker_library.current(install) == wanted else "planned",
        )
    )
    for reference in references:
        target = os.path.join(install, "images", images.sqsh_name(reference))
        present = os.path.isfile(target) and os.path.getsize(target) > 0
        result.steps.append(
            Step(
                kind="image",
                what=reference,
                target=target,
                status="present" if present else "planned",
                command=images.import_command(reference, target),
            )
        )
    result.steps += files.values()
    return result


def _writable(path: str) -> bool:
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.access(path, os.W_OK | os.X_OK)


def missing(steps: Plan, environ: dict | None = None) -> list[str]:
    """What the pending steps need and this machine lacks, one sentence each."""
    env = os.environ if environ is None else environ
    problems = []
    if steps.pending() and not _writable(steps.install):
        problems.append(
            f"the install directory {steps.install} is not writable (set LLMB_INSTALL to one that is)"
        )
    pending_images = steps.pending("image")
    if pending_images and shutil.which("enroot", path=env.get("PATH")) is None:
        problems.append(
            f"enroot is not on PATH; it imports the container images "
            f"({', '.join(s.what for s in pending_images)}). Run llmb install where enroot is "
            f"installed (a cluster login or compute node), or add --no-images"
        )
    gated = sorted({s.repo for s in steps.pending("huggingface") if s.gated})
    if gated and not env.get("HF_TOKEN"):
        problems.append(
            f"HF_TOKEN is not set; the gated Hugging Face repositories {', '.join(gated)} need it. "
            f"Create a token at https://huggingface.co/settings/tokens, request access to those "
            f"repositories, and export HF_TOKEN=<token> (or add --no-huggingface)"
        )
    if steps.pending("huggingface"):
        problems += hf.timeout_problems(env)
    return problems


def _relay(command: list[str]) -> int:
    """Run ``command``, passing its output (progress bars included) to stderr."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    ) as proc:
        try:
            while chunk := os.read(proc.stdout.fileno(), 65536):
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
        except BaseException:
            proc.kill()
            raise
        return proc.wait()


def _import_image(step: Step) -> None:
    try:
        code = _relay(step.command)
    except BaseException:
        # an interrupted import leaves a partial file that a rerun would take as done
        _remove(step.target)
        raise
    if code != 0:
        _remove(step.target)
        step.status, step.error = (
            "failed",
            (
                f"enroot import of {step.what} exited with code {code} (its output is above). nvcr.io needs your NGC "
                f"credentials in ~/.config/enroot/.credentials; rerun llmb install to retry"
            ),
        )
    else:
        step.status = "done"


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class _Downloads:
    """The Hugging Face steps' clocks: each file has the per-file deadline, cut to what is left
    of the one for all files, which starts with the first download."""

    def __init__(self):
        self.file_s, self.total_s = hf.timeouts()
        self.ends: float | None = None

    def deadline(self) -> float:
        """Seconds for the next file (0 or less: the overall deadline has passed)."""
        if self.ends is None:
            self.ends = time.monotonic() + self.total_s
        return min(self.file_s, self.ends - time.monotonic())

    def ran_out(self) -> bool:
        """Whether the overall deadline has passed."""
        return self.ends is not None and time.monotonic() >= self.ends


_RETRY = (
    "rerun llmb install to fetch what is missing (what was fetched is kept), set HF_ENDPOINT for "
    "another mirror, {file_variable} (seconds per file) or {variable} (seconds for all files) "
    "for a longer wait, or add --no-huggingface"
)


def _stop_asking(steps: list[Step], failed: Step, reason: str, total: float | None) -> None:
    """``failed`` timed out: the Hugging Face steps still planned are not asked for; ``failed``'s
    error says so in one line (which endpoint, after which file, how many not fetched, how to retry)."""
    endpoint = mask(hf.endpoint())
    rest = [
        s for s in steps if s.kind == "huggingface" and s.status == "planned" and s is not failed
    ]
    fetched = sum(1 for s in steps if s.kind == "huggingface" and s.status == "done")
    where = f"{failed.repo}/{failed.filename}"
    for step in rest:
        step.status, step.error = "skipped", f"not asked for: {endpoint} timed out on {where}"
    parts = [reason]
    if total is not None:
        parts[0] += (
            f" (the {hf.TIMEOUT_VARIABLE}={hf.shown_seconds(total)} s for all Hugging Face "
            f"downloads ran out)"
        )
    if rest:
        parts.append(
            f"llmb install stopped asking {endpoint} after {where}: {len(rest)} more Hugging Face "
            f"file{'s' if len(rest) != 1 else ''} not fetched, {fetched} fetched"
        )
    parts.append(
        _RETRY.format(file_variable=hf.FILE_TIMEOUT_VARIABLE, variable=hf.TIMEOUT_VARIABLE)
    )
    failed.status, failed.error = "failed", "; ".join(parts)


def _fetch(
    step: Step,
    home: str,
    token: str | None,
    echo: Callable[[str], None],
    clocks: _Downloads,
    steps: list[Step],
) -> None:
    deadline_s = clocks.deadline()
    if deadline_s <= 0:
        _stop_asking(steps, step, f"{step.repo}/{step.filename}: not asked for", clocks.total_s)
        return
    shown = [0]

    def progress(done: int, total: int | None) -> None:
        if total and total >= PROGRESS_FROM and done * 10 // total > shown[0]:
            shown[0] = done * 10 // total
            echo(f"  {step.what}: {done * 100 // total}% of {total / 1e6:.0f} MB")

    try:
        path = hf.download(
            step.repo,
            step.filename,
            home,
            token,
            required=step.required,
            progress=progress,
            deadline_s=deadline_s,
        )
    except hf.DownloadTimedOut as exc:
        _stop_asking(steps, step, exc.reason, clocks.total_s if clocks.ran_out() else None)
        return
    except hf.DownloadError as exc:
        step.status, step.error = "failed", str(exc)
        return
    if path is None:
        step.status = "absent"
    else:
        step.status, step.target = "done", path


def execute(steps: Plan, token: str | None, echo: Callable[[str], None]) -> None:
    """Run the pending steps in order; a failed step is recorded and the rest still run, except
    that once a Hugging Face file times out no other is asked for (``skipped``). Before any step, the
    certificate paths the downloads hand OpenSSL (``SSL_CERT_FILE``...) are checked: a bad one is
    ``http_safety.CertificatePathRefused`` (exit 2, nothing done), never a download that hangs."""
    pending = steps.pending()
    if steps.pending("image") or (
        steps.pending("huggingface") and hf.endpoint().lower().startswith("https:")
    ):
        http_safety.check_certificate_paths()  # enroot's curl, and llmb's own https, read them
    home = hf.hf_home(steps.install)
    clocks = _Downloads() if any(s.kind == "huggingface" for s in pending) else None
    for number, step in enumerate(pending, start=1):
        if step.status != "planned":  # skipped: its endpoint timed out
            continue
        echo(f"[{number}/{len(pending)}] {step.kind} {step.what}")
        if step.kind == "folder":
            os.makedirs(step.target, exist_ok=True)
            step.status = "done"
        elif step.kind == "config":
            try:
                written = cluster_config.write_template(step.target)
                step.status = "done" if written else "present"
            except OSError as exc:
                step.status, step.error = (
                    "failed",
                    f"could not write the cluster file template: {exc}",
                )
        elif step.kind == "library":
            try:
                worker_library.build(steps.install)
                step.status = "done"
            except (OSError, RuntimeError) as exc:
                step.status, step.error = "failed", f"could not write the worker library: {exc}"
        elif step.kind == "image":
            if not os.path.isdir(os.path.dirname(step.target)):
                os.makedirs(os.path.dirname(step.target), exist_ok=True)
            _import_image(step)
        else:
            _fetch(step, home, token, echo, clocks, pending)
        if step.status == "failed":
            echo(f"  failed: {step.error}")
