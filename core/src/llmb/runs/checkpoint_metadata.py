"""Reading a distributed checkpoint's ``.metadata`` without running its code.

``torch.distributed.checkpoint`` keeps a checkpoint's index in ``.metadata``,
a pickle, and reads it with ``pickle.load``: a crafted checkpoint directory
runs any code it likes in every rank that loads it. llmb never does that. The
index is read by an unpickler that builds only the few types a checkpoint
index is made of (the checkpoint module's metadata records, ``torch.Size``,
dtypes, layouts, paths) and refuses every other global, so nothing outside
that list is ever imported or called.

- ``check_metadata`` runs at submission, on the login node, for every engine:
  it walks the pickle with stand-ins for those types (no torch needed) and
  raises ``UsageError`` naming the first forbidden global.
- ``load_metadata`` is what the torch engine's checkpoint reader uses to
  build the real index, under the same allowlist.

The tensors themselves are raw bytes in ``.distcp`` files, which torch reads
without unpickling (and non-tensor items with ``weights_only=True``). What a
production framework reads beyond ``.metadata`` (Megatron's ``common.pt``)
is read by that framework's own loader: load only checkpoints your team wrote.
"""

from __future__ import annotations

import io
import os
import pickle
import re
from typing import Any

from llmb.errors import UsageError

METADATA_FILE = ".metadata"
# an index is kilobytes to a few megabytes; refuse to read a disk's worth
_MAX_METADATA_BYTES = 256 * 1024 * 1024

_DCP_METADATA = "torch.distributed.checkpoint.metadata"
ALLOWED_GLOBALS = frozenset(
    {
        (_DCP_METADATA, name)
        for name in (
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "ChunkStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        )
    }
    | {
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),
        ("pathlib", "PosixPath"),
        ("pathlib", "PurePosixPath"),
        ("collections", "OrderedDict"),
    }
)


class UnsafeCheckpoint(UsageError):
    """A checkpoint index that names something other than a checkpoint index's types."""


_DTYPE_NAME = re.compile(
    r"(b?float|u?int|complex|q?u?int|bits)\d\w*|float|double|half|long|short|int|bool|cfloat|cdouble|chalf"
)


def allowed(module: str, name: str) -> bool:
    """An allowed type, or a dtype (``torch.float32`` pickles as the torch module's attribute)."""
    return (module, name) in ALLOWED_GLOBALS or (
        module == "torch" and _DTYPE_NAME.fullmatch(name) is not None
    )


class _StandIn:
    """Accepts any construction and state: a placeholder for an allowed type while checking."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __call__(self, *args: Any, **kwargs: Any) -> _StandIn:
        return _StandIn(*args)


class _CheckingUnpickler(pickle.Unpickler):
    def __init__(self, file, where: str, real: bool):
        super().__init__(file)
        self.where = where
        self.real = real

    def find_class(self, module: str, name: str) -> Any:
        if not allowed(module, name):
            raise UnsafeCheckpoint(
                f"{self.where} refers to {module}.{name}, which a checkpoint index never contains; llmb does not "
                f"load it (unpickling it could run code). Load a checkpoint written by llmb or by the recipe's "
                f"framework."
            )
        if not self.real:
            return _StandIn
        found = super().find_class(module, name)
        if module == "torch" and (module, name) not in ALLOWED_GLOBALS:
            import torch

            if not isinstance(found, torch.dtype):
                raise UnsafeCheckpoint(
                    f"{self.where} refers to torch.{name}, which is not a dtype."
                )
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeCheckpoint(
            f"{self.where} holds persistent references, which a checkpoint index never has."
        )


def _read(path: str) -> bytes:
    try:
        if not os.path.isfile(path):
            raise UsageError(
                f"{path}: missing or not a regular file; a distributed checkpoint has one."
            )
        if os.path.getsize(path) > _MAX_METADATA_BYTES:
            raise UnsafeCheckpoint(
                f"{path} is larger than any checkpoint index ({_MAX_METADATA_BYTES >> 20} MiB)."
            )
        with open(path, "rb") as handle:
            return handle.read(_MAX_METADATA_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}.") from None


def check_metadata(directory: str) -> None:
    """Refuse a checkpoint whose ``.metadata`` names anything outside the allowlist (or is not a pickle)."""
    path = os.path.join(directory, METADATA_FILE)
    try:
        _CheckingUnpickler(io.BytesIO(_read(path)), path, real=False).load()
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - any malformed pickle
        raise UnsafeCheckpoint(
            f"{path} is not a readable checkpoint index ({type(exc).__name__}: {exc})."
        ) from None


def load_metadata(stream) -> Any:
    """The checkpoint index in ``stream``, built from the allowed types only."""
    return _CheckingUnpickler(stream, getattr(stream, "name", METADATA_FILE), real=True).load()


def safe_reader(path: str):
    """A ``torch.distributed.checkpoint`` storage reader for ``path`` that reads the index with ``load_metadata``."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeFileSystemReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any):
            rank = kwargs.get("rank")
            name = METADATA_FILE if rank is None else f"__{rank}{METADATA_FILE}"
            with open(os.path.join(self.path, name), "rb") as stream:
                metadata = load_metadata(stream)
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeFileSystemReader(path)
