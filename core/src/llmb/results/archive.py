"""``llmb archive``: the experiments in one compressed file, without what is
big and not needed to read the results again.

Left out, as the tool we replace leaves them out: profiles and traces
(``*.nsys-rep``, ``*_trace.json``), archives (``*.tar.*``) and the folders
``code``, ``checkpoints`` and ``nsys_profile``; and the torch profiler's
traces (``*.pt.trace.json``, the folders ``torch_profile`` and
``pytorch_profile``). Logs, recipes (``recipe.json``), provenance
(``provenance.json``) and everything else in a run directory are kept.
A directory llmb finds by itself (each workload's ``experiments``, a suite's
runs) is packed only when no symbolic link leads to it from the install
directory (``link_on_the_way``); a directory named on the command line is
packed wherever it is. Paths inside the archive start at the install directory
(``workloads/<workload>/experiments/...``) so that unpacking it into an
empty directory and pointing ``llmb results`` there reads the runs back.

Every member is written with its secrets masked (``llmb.redaction``, the one
mechanism behind every file llmb writes): a record of an earlier llmb, a log
a framework printed a credential into, or a secret of this shell's
environment that reappears in a file, is packed as ``***``. A JSON file's
records are masked as ``write_json`` masks them; any other text line by line;
a binary file (a NUL in its first block) is packed as it is.

Two formats: ``gz`` (``.tar.gz``, the default) and ``zst`` (``.tar.zst``,
Zstandard with a compression thread per CPU: much faster on the large
logs of a certification suite; ``tar --zstd -xf`` unpacks it).
"""

from __future__ import annotations

import fnmatch
import json
import os
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

EXCLUDED_FILES = ("*.nsys-rep", "*_trace.json", "*.pt.trace.json", "*.tar.*")
EXCLUDED_DIRS = ("code", "checkpoints", "nsys_profile", "torch_profile", "pytorch_profile")
# format -> file names it writes
SUFFIXES = {"gz": (".tar.gz", ".tgz"), "zst": (".tar.zst", ".tzst")}
GZIP_LEVEL = 6
# of zstd's 1-22 (its default is 3): smaller files, still quick with a thread per CPU
ZSTD_LEVEL = 10
MASKED_JSON_MAX = 64 << 20  # bytes: a larger .json is masked as text, line by line
_CHUNK = 4 << 20  # bytes of text masked at once, cut at a line's end
_SPOOL = 32 << 20  # bytes of a masked member kept in memory before it goes to a temporary file


@dataclass
class Packed:
    output: str
    files: int = 0
    bytes_in: int = 0
    excluded_files: int = 0
    excluded_dirs: int = 0
    bytes_out: int = 0


def excluded(name: str, is_dir: bool) -> bool:
    if is_dir:
        return name in EXCLUDED_DIRS
    return any(fnmatch.fnmatch(name, pattern) for pattern in EXCLUDED_FILES)


def walk(root: str, packed: Packed):
    """(path, size) of every file kept under ``root``; counts what is left out."""
    for directory, dirs, files in os.walk(root):
        kept = []
        for name in sorted(dirs):
            if excluded(name, True):
                packed.excluded_dirs += 1
            else:
                kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            path = os.path.join(directory, name)
            if excluded(name, False) or not os.path.isfile(path) or os.path.islink(path):
                packed.excluded_files += 1
                continue
            yield path, os.path.getsize(path)


def link_on_the_way(base: str, path: str) -> str | None:
    """The first symbolic link between the directory ``base`` and ``path`` below it (``path``
    included), as ``"NAME -> TARGET"``; None when ``path`` is reached without one. What llmb
    finds under the install by itself is packed only when it is really there: a linked
    ``experiments`` directory could point anywhere (``~/.ssh``)."""
    current = base
    for part in os.path.relpath(path, base).split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            return f"{os.path.relpath(current, base)} -> {os.readlink(current)}"
    return None


def format_of(path: str) -> str | None:
    """The format a file name asks for (``gz``, ``zst``), or None."""
    return next((fmt for fmt, suffixes in SUFFIXES.items() if path.endswith(suffixes)), None)


@contextmanager
def _writer(path: str, fmt: str) -> Iterator[tarfile.TarFile]:
    if fmt == "gz":
        with tarfile.open(path, "w:gz", compresslevel=GZIP_LEVEL) as tar:
            yield tar
        return
    import zstandard  # only for .tar.zst

    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=-1)  # -1: one thread per CPU
    with (
        open(path, "wb") as raw,
        compressor.stream_writer(raw, closefd=False) as stream,
        tarfile.open(fileobj=stream, mode="w|") as tar,
    ):
        yield tar


def pack(
    roots: list[tuple[str, str]],
    output: str,
    progress: Callable[[int, int], None] | None = None,
    fmt: str = "gz",
) -> Packed:
    """Write ``output`` (``fmt``: gz or zst) from ``roots``: (directory, name it has in the archive).
    Written to a temporary file first: an interrupted archive never looks complete."""
    from llmb.redaction import environment_secrets

    known = environment_secrets()
    packed = Packed(output=os.path.abspath(output))
    # must exist: the command refuses to invent directories
    directory = os.path.dirname(packed.output) or "."
    handle, temporary = tempfile.mkstemp(
        prefix=".llmb-archive-", suffix=SUFFIXES[fmt][0], dir=directory
    )
    os.close(handle)
    try:
        with _writer(temporary, fmt) as tar:
            for root, arcroot in roots:
                for path, size in walk(root, packed):
                    _add_masked(
                        tar, path, os.path.join(arcroot, os.path.relpath(path, root)), known
                    )
                    packed.files += 1
                    packed.bytes_in += size
                    if progress:
                        progress(packed.files, packed.bytes_in)
        # mkstemp made it readable by its owner alone; an archive is meant to be handed on (a ticket, a
        # colleague): the permissions any new file of this user gets (the umask's)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, packed.output)
    except BaseException:
        os.unlink(temporary)
        raise
    packed.bytes_out = os.path.getsize(packed.output)
    return packed


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _add_masked(tar: tarfile.TarFile, path: str, arcname: str, known: tuple[str, ...]) -> None:
    """``path`` as ``arcname``, its secrets masked (see the module's docstring)."""
    from llmb.redaction import mask, scrub

    info = tar.gettarinfo(path, arcname)
    with open(path, "rb") as source, tempfile.SpooledTemporaryFile(_SPOOL) as masked:
        head = source.read(_CHUNK)
        if b"\0" in head[:8192]:
            tar.addfile(info, _Joined(head, source))
            return
        if path.endswith(".json") and info.size <= MASKED_JSON_MAX:
            text = (head + source.read()).decode("utf-8", "surrogateescape")
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            if data is None:
                text = mask(text, known)
            elif (clean := scrub(data, known)) != data:
                text = json.dumps(clean, indent=2) + "\n"
            masked.write(text.encode("utf-8", "surrogateescape"))
        else:
            rest = b""
            while head:
                block = rest + head
                cut = block.rfind(b"\n") + 1 if len(head) == _CHUNK else len(block)
                cut = cut or len(block)  # a line longer than a block: cut where the block ends
                text = block[:cut].decode("utf-8", "surrogateescape")
                masked.write(mask(text, known).encode("utf-8", "surrogateescape"))
                rest, head = block[cut:], source.read(_CHUNK)
            if rest:
                text = rest.decode("utf-8", "surrogateescape")
                masked.write(mask(text, known).encode("utf-8", "surrogateescape"))
        info.size = masked.tell()
        masked.seek(0)
        tar.addfile(info, masked)


class _Joined:
    """A file's first block, then the rest of it: what ``tarfile.addfile`` reads."""

    def __init__(self, head: bytes, rest):
        self.head, self.rest = head, rest

    def read(self, size: int = -1) -> bytes:
        if self.head:
            if size < 0:
                out, self.head = self.head + self.rest.read(), b""
                return out
            out, self.head = self.head[:size], self.head[size:]
            return out
        return self.rest.read(size)
