"""Hugging Face files the production frameworks read: where they live, how they are fetched.

They live in a Hugging Face hub cache under the install directory,
``<install>/.cache/huggingface`` (``HF_HOME``), laid out as the
``huggingface_hub`` library lays it out, so that the frameworks find them
with ``HF_HUB_OFFLINE=1`` and no token::

    hub/models--{owner}--{name}/refs/main                    the commit id
    hub/models--{owner}--{name}/snapshots/{commit}/{file}    the file
    hub/models--{owner}--{name}/.no_exist/{commit}/{file}    an optional file the repository lacks

They are fetched with the Hugging Face wire format, plain ``urllib``:
``GET {endpoint}/{repo}/resolve/{revision}/{file}`` with the header
``Authorization: Bearer <token>``; the response's ``X-Repo-Commit`` header
names the commit. ``HF_ENDPOINT`` replaces ``https://huggingface.co``. A
redirect that leaves the endpoint's origin (large files live on a CDN) is
followed without the token. The token is never written anywhere.

The exchange goes through ``llmb.http_safety``, as Run:ai's does, rather than
``huggingface_hub``: that library has per-request timeouts but no deadline
for a whole download (a server answering a byte every few seconds holds it
indefinitely) and no size cap, and it is a large import for four small files.
Each file has ``DEADLINE_S`` (``LLMB_HF_FILE_TIMEOUT``) and ``MAX_FILE_BYTES``; all
of an install's files together have ``TOTAL_DEADLINE_S`` (``LLMB_HF_TIMEOUT``), and a
file that times out raises ``DownloadTimedOut``, on which ``llmb install`` stops asking
that endpoint (``llmb.install.installer``): a stalled mirror costs one file's wait, not
one per file.
"""

from __future__ import annotations

import http.client
import math
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from llmb import http_safety
from llmb.errors import LlmbError, UsageError
from llmb.http_safety import KeepAuthOnOrigin
from llmb.paths import hf_home  # noqa: F401 - where they live; the frameworks' side reads it from llmb.paths
from llmb.redaction import mask

DEFAULT_ENDPOINT = "https://huggingface.co"
REVISION = "main"
# What each asset of a workload's `production.huggingface` section is: (file, required).
ASSET_FILES = {
    "config": (("config.json", True),),
    "tokenizer": (
        ("tokenizer.json", True),
        ("tokenizer_config.json", True),
        ("special_tokens_map.json", False),
    ),
}
# A config.json is kilobytes and the largest tokenizer.json of a published model tens of
# megabytes (Llama 4's about 27 MB): an answer past this is not the file asked for.
MAX_FILE_BYTES = 64 << 20
# One file's whole exchange, however the server paces it: 64 MiB at a slow site link's 0.25 MB/s.
DEADLINE_S = 300.0
# All of one install's downloads together: a whole install's files are about 60 MB (four
# tokenizers of 9 to 27 MB), four minutes at that link.
TOTAL_DEADLINE_S = 900.0
# Their settings, in seconds; an empty variable counts as unset.
FILE_TIMEOUT_VARIABLE = "LLMB_HF_FILE_TIMEOUT"
TIMEOUT_VARIABLE = "LLMB_HF_TIMEOUT"
MAX_TIMEOUT_S = 86400.0
CONNECT_TIMEOUT_S = 60.0
_COMMIT = re.compile(r"[0-9a-f]{40}")  # a server's answer, matched whole (fullmatch)


class DownloadError(LlmbError):
    """A Hugging Face file could not be fetched; the message never holds the token."""


class DownloadTimedOut(DownloadError):
    """The endpoint did not answer ``filename`` in time: no connection, or no complete answer by
    the deadline. ``reason`` is the message without the advice on what to do."""

    def __init__(self, reason: str, advice: str):
        super().__init__(f"{reason}; {advice}")
        self.reason = reason


def timeouts(environ: dict | None = None) -> tuple[float, float]:
    """(per file, all files) in seconds, from ``LLMB_HF_FILE_TIMEOUT`` and ``LLMB_HF_TIMEOUT``;
    UsageError naming the variable for a value that is not a number of seconds."""
    problems = timeout_problems(environ)
    if problems:
        raise UsageError(problems[0] + ".")
    env = os.environ if environ is None else environ
    return (
        _seconds(env.get(FILE_TIMEOUT_VARIABLE)) or DEADLINE_S,
        _seconds(env.get(TIMEOUT_VARIABLE)) or TOTAL_DEADLINE_S,
    )


def timeout_problems(environ: dict | None = None) -> list[str]:
    """One sentence for each timeout variable whose value is not a number of seconds."""
    env = os.environ if environ is None else environ
    problems = []
    for name, default in (
        (FILE_TIMEOUT_VARIABLE, DEADLINE_S),
        (TIMEOUT_VARIABLE, TOTAL_DEADLINE_S),
    ):
        value = env.get(name)
        if value and _seconds(value) is None:
            problems.append(
                f"{name}={mask(value)[:40]!r} is not a number of seconds above 0 and at most "
                f"{MAX_TIMEOUT_S:.0f} (default {default:.0f})"
            )
    return problems


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float((value or "").strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S else None


def shown_seconds(seconds: float) -> str:
    """``2``, ``1.5``, ``300``: as a person writes a timeout."""
    return f"{seconds:.0f}" if seconds >= 10 or seconds == int(seconds) else f"{seconds:.1f}"


def endpoint(environ: dict | None = None) -> str:
    env = os.environ if environ is None else environ
    return (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def files_of(assets: tuple[str, ...] | list[str]) -> list[tuple[str, bool]]:
    """The (file, required) pairs of ``assets``, each file once."""
    seen: dict[str, bool] = {}
    for asset in assets:
        for name, required in ASSET_FILES[asset]:
            seen[name] = seen.get(name, False) or required
    return list(seen.items())


def repo_dir(home: str, repo: str) -> str:
    return os.path.join(home, "hub", "models--" + repo.replace("/", "--"))


def _commit_of(home: str, repo: str) -> str | None:
    try:
        with open(os.path.join(repo_dir(home, repo), "refs", REVISION), encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def cached_file(home: str, repo: str, filename: str) -> str | None:
    """The cached copy of ``filename`` from ``repo``, or None."""
    commit = _commit_of(home, repo)
    path = os.path.join(repo_dir(home, repo), "snapshots", commit or "", filename)
    return path if commit and os.path.isfile(path) else None


def known_absent(home: str, repo: str, filename: str) -> bool:
    """Whether an earlier download found that ``repo`` has no ``filename``."""
    commit = _commit_of(home, repo)
    return bool(commit) and os.path.isfile(
        os.path.join(repo_dir(home, repo), ".no_exist", commit, filename)
    )


def _record(home: str, repo: str, commit: str, absent: str | None = None) -> None:
    base = repo_dir(home, repo)
    os.makedirs(os.path.join(base, "refs"), exist_ok=True)
    with open(os.path.join(base, "refs", REVISION), "w", encoding="utf-8") as handle:
        handle.write(commit)
    if absent:
        marker = os.path.join(base, ".no_exist", commit, absent)
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        open(marker, "wb").close()


def url_of(repo: str, filename: str, environ: dict | None = None) -> str:
    return f"{endpoint(environ)}/{repo}/resolve/{REVISION}/{urllib.parse.quote(filename)}"


class _KeepTokenOnOrigin(KeepAuthOnOrigin):
    """Follow redirects, dropping the Authorization header when one leaves the original origin
    (scheme, host and port); keep the commit id the redirecting response names (the CDN's has none)."""

    commit = ""

    def __init__(self):
        super().__init__(schemes=("https", "http"))  # HF_ENDPOINT may be a plain-http mirror

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        self.commit = self.commit or (headers.get("X-Repo-Commit") or "").strip().lower()
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _refused(repo: str, code: int) -> str:
    return (
        f"Hugging Face refused {repo} (HTTP {code}): the repository is gated; request access on its page "
        f"and check that HF_TOKEN is a token of the account that has it"
    )


def download(
    repo: str,
    filename: str,
    home: str,
    token: str | None,
    *,
    required: bool = True,
    progress: Callable[[int, int | None], None] | None = None,
    deadline_s: float = DEADLINE_S,
    max_bytes: int = MAX_FILE_BYTES,
) -> str | None:
    """Fetch ``filename`` of ``repo`` into the cache under ``home``; its path, or
    None for an optional file the repository does not have. The whole exchange
    ends by ``deadline_s`` and the file is refused past ``max_bytes``
    (``llmb.http_safety``): a partial file is never left behind."""
    request = urllib.request.Request(url_of(repo, filename))
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    redirects = _KeepTokenOnOrigin()
    where = f"{repo}/{filename}"
    try:
        with http_safety.exchange(
            request,
            deadline_s=deadline_s,
            timeout=min(CONNECT_TIMEOUT_S, deadline_s),
            redirects=redirects,
        ) as response:
            if response.status >= 400:
                return _refusal(response, repo, filename, home, required)
            commit = (
                response.headers.get("X-Repo-Commit") or ""
            ).strip().lower() or redirects.commit
            commit = commit if _COMMIT.fullmatch(commit) else REVISION
            target = os.path.join(repo_dir(home, repo), "snapshots", commit, filename)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            partial = f"{target}.{os.getpid()}.part"
            try:
                with open(partial, "wb") as out:
                    http_safety.copy_bounded(response, out, max_bytes, progress)
                os.replace(partial, target)
            finally:
                if os.path.exists(partial):
                    os.unlink(partial)
    except http_safety.DeadlineExceeded:
        raise DownloadTimedOut(
            f"{where}: no complete answer from {_shown_endpoint()} within "
            f"{shown_seconds(deadline_s)} s",
            _RETRY,
        ) from None
    except http_safety.TooLarge as exc:
        raise DownloadError(
            f"{where}: the answer is larger than {exc.limit >> 20} MiB, and a config or tokenizer "
            f"file is a few MB; refused (is HF_ENDPOINT a Hugging Face mirror?)"
        ) from None
    except (http_safety.RedirectRefused, http_safety.CertificateRefused) as exc:
        raise DownloadError(f"{where}: {mask(str(exc))}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):  # a connection that stalled before the deadline
            raise DownloadTimedOut(
                f"{where}: {_shown_endpoint()} did not answer ({mask(str(reason))})", _RETRY
            ) from None
        raise DownloadError(
            f"cannot reach {_shown_endpoint()} for {where}: {mask(str(reason))} "
            f"(set HF_ENDPOINT for a mirror)"
        ) from None
    _record(home, repo, commit)
    return target


def _refusal(response, repo: str, filename: str, home: str, required: bool) -> None:
    """An error answer: None for an optional file the repository lacks (recorded), else DownloadError."""
    if response.status == 404 and not required:
        commit = (
            (response.headers.get("X-Repo-Commit") or "").strip().lower()
            if response.headers
            else ""
        )
        if _COMMIT.fullmatch(commit):
            _record(home, repo, commit, absent=filename)
        return None
    if response.status in (401, 403):
        raise DownloadError(_refused(repo, response.status))
    reason = getattr(response, "reason", "") or ""
    raise DownloadError(
        f"{mask(url_of(repo, filename))} answered HTTP {response.status} {reason}".rstrip()
    )


_RETRY = "rerun llmb install to retry (set HF_ENDPOINT for a nearer mirror)"


def _shown_endpoint() -> str:
    return mask(endpoint())
