"""The Python 3.12 environments the framework contract tests run the real frameworks in.

    python tests/frameworks/envs.py build [LEG ...]     build (or reuse) them; prints where
    python tests/frameworks/envs.py path LEG            the interpreter of a built leg

One base environment holds torch (``requirements/base.txt``); each leg is a
small environment on top of it (a ``.pth`` file puts the base's packages
behind its own) with one framework version, pinned exactly in
``requirements/<leg>.txt`` and installed with ``--no-deps``, so nothing is
resolved and no torch is pulled. They live in a cache outside the checkout
(``$LLMB_FRAMEWORK_ENVS``, default ``~/.cache/llmb/framework-envs``), named
by a digest of their requirements: a rerun on the same machine reuses them,
a changed pin builds a new one. A build happens in a temporary directory
renamed when complete, so an interrupted build is never mistaken for one.

Python 3.12 is found as ``$LLMB_PYTHON312``, ``python3.12`` on PATH, or
pyenv's ``~/.pyenv/versions/3.12.*``. Prebuilt wheels PyPI lacks come from
``$LLMB_SHARED_WHEELS`` (default ``../shared/wheels`` beside the checkout).
Standard library only: it runs before anything else is installed.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REQUIREMENTS = HERE / "requirements"


@dataclass(frozen=True)
class Leg:
    """One framework version the contract tests check."""

    name: str
    framework: str  # llmb's name: megatron_bridge | nemo2
    checker: str  # the script under tests/frameworks/ that runs inside it
    distribution: str  # the framework's own distribution, and the release series it pins
    series: str
    wheels: tuple[str, ...] = ()  # prebuilt wheels from the shared wheels directory


TE_TORCH = "transformer_engine_torch-2.20.2-cp312-cp312-linux_x86_64.whl"
LEGS = {
    leg.name: leg
    for leg in (
        Leg(
            "megatron-bridge-0.4",
            "megatron_bridge",
            "check_megatron_bridge.py",
            "megatron-bridge",
            "0.4",
            (TE_TORCH,),
        ),
        Leg(
            "megatron-bridge-0.6",
            "megatron_bridge",
            "check_megatron_bridge.py",
            "megatron-bridge",
            "0.6",
            (TE_TORCH,),
        ),
        Leg("nemo-2.3", "nemo2", "check_nemo2.py", "nemo-toolkit", "2.3"),
    )
}


class EnvError(RuntimeError):
    """An environment cannot be built here; the message says what is missing."""


def cache_root() -> Path:
    return Path(
        os.environ.get("LLMB_FRAMEWORK_ENVS") or Path.home() / ".cache" / "llmb" / "framework-envs"
    )


def shared_wheels() -> Path:
    return Path(os.environ.get("LLMB_SHARED_WHEELS") or ROOT.parent / "shared" / "wheels")


def find_python312() -> str:
    candidates = [
        os.environ.get("LLMB_PYTHON312"),
        *sorted(
            glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True
        ),
        shutil.which("python3.12"),
    ]
    for candidate in candidates:
        # A pyenv shim is on PATH even where it cannot run 3.12: try each one.
        if (
            candidate
            and subprocess.run(
                [candidate, "-c", "import sys, venv; assert sys.version_info[:2] == (3, 12)"],
                capture_output=True,
            ).returncode
            == 0
        ):
            return candidate
    raise EnvError(
        "no Python 3.12 found (the frameworks need it): set LLMB_PYTHON312, put python3.12 on PATH, "
        "or install one with pyenv (~/.pyenv/versions/3.12.*)."
    )


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


def base_dir() -> Path:
    return cache_root() / f"base-{_digest((REQUIREMENTS / 'base.txt').read_bytes())}"


def leg_dir(leg: Leg) -> Path:
    parts = [
        (REQUIREMENTS / "base.txt").read_bytes(),
        (REQUIREMENTS / f"{leg.name}.txt").read_bytes(),
        *(w.encode() for w in leg.wheels),
    ]
    return cache_root() / f"{leg.name}-{_digest(*parts)}"


def _python(env: Path) -> Path:
    return env / "bin" / "python"


def _purelib(env: Path) -> Path:
    out = subprocess.run(
        [str(_python(env)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def _run(cmd: list[str], what: str) -> None:
    started = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        tail = "\n".join(
            line for line in done.stdout.splitlines() if "Location 'file:" not in line
        )[-4000:]
        raise EnvError(f"{what} failed (exit {done.returncode}):\n{tail}")
    print(f"envs: {what}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)


def find_uv() -> str | None:
    """uv (https://docs.astral.sh/uv/), which installs these environments many times faster than pip:
    ``$LLMB_UV``, the checkout's ``.venv/bin/uv`` (``./dev.sh setup`` installs it) or ``uv`` on PATH;
    None (pip installs them) where there is none or ``LLMB_UV=pip``."""
    chosen = os.environ.get("LLMB_UV")
    if chosen == "pip":
        return None
    for candidate in (chosen, ROOT / ".venv" / "bin" / "uv", shutil.which("uv")):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    if chosen:
        raise EnvError(f"LLMB_UV={chosen} is not an executable (LLMB_UV=pip installs with pip)")
    return None


def _install_command(uv: str | None, env: Path, requirements: Path, extra: list[str]) -> list[str]:
    """Install exactly the pinned requirements into ``env`` with ``uv`` (None: pip), resolving nothing
    (``--no-deps``)."""
    if uv is not None:
        # --compile-bytecode: as pip does; the checkers run with PYTHONDONTWRITEBYTECODE, and without
        # .pyc files every one of them would compile the frameworks afresh (20 s for NeMo 2).
        return [uv, "pip", "install", "--quiet", "--no-deps", "--compile-bytecode", "--python", str(_python(env)),
                "-r", str(requirements), *extra]  # fmt: skip
    return [str(_python(env)), "-m", "pip", "install", "--quiet", "--no-input", "--no-deps",
            "--disable-pip-version-check", "-r", str(requirements), *extra]  # fmt: skip


def _build(
    target: Path, python: str, requirements: Path, extra: list[str], base: Path | None
) -> None:
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        uv = find_uv()
        # uv installs without the environment's own pip, so none is put in (ensurepip takes seconds).
        no_pip = ["--without-pip"] if uv else []
        _run([python, "-m", "venv", *no_pip, str(partial)], f"venv {target.name}")
        if base is not None:
            site = _purelib(partial)
            base_site = _purelib(base)
            # The base's packages, behind the leg's own (a .pth entry is appended to sys.path).
            (site / "_llmb_framework_base.pth").write_text(f"{base_site}\n", encoding="utf-8")
            # Transformer Engine looks for the CUDA libraries under its own site-packages/nvidia.
            if (base_site / "nvidia").is_dir():
                (site / "nvidia").mkdir(exist_ok=True)
                for lib in (base_site / "nvidia").iterdir():
                    (site / "nvidia" / lib.name).symlink_to(lib)
        _run(
            _install_command(uv, partial, requirements, extra),
            f"install {requirements.name} ({'uv' if uv else 'pip'})",
        )
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def build(leg: Leg) -> Path:
    """The interpreter of ``leg``'s environment, built if it is not there yet."""
    python = find_python312()
    base = base_dir()
    if not base.exists():
        _build(base, python, REQUIREMENTS / "base.txt", [], None)
    target = leg_dir(leg)
    if not target.exists():
        wheels = [shared_wheels() / name for name in leg.wheels]
        missing = [str(w) for w in wheels if not w.is_file()]
        if missing:
            raise EnvError(
                f"prebuilt wheels missing: {', '.join(missing)} (set LLMB_SHARED_WHEELS); they take "
                f"most of an hour to build from source, which CI never does."
            )
        _build(target, python, REQUIREMENTS / f"{leg.name}.txt", [str(w) for w in wheels], base)
    return _python(target)


def built(leg: Leg) -> Path | None:
    """The interpreter of ``leg``'s environment if it has been built, else None."""
    python = _python(leg_dir(leg))
    return python if python.exists() and base_dir().exists() else None


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("build", "path"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    names = argv[2:] or list(LEGS)
    unknown = [n for n in names if n not in LEGS]
    if unknown:
        print(f"envs: unknown leg {', '.join(unknown)}; legs: {', '.join(LEGS)}", file=sys.stderr)
        return 2
    try:
        for name in names:
            if argv[1] == "path":
                found = built(LEGS[name])
                if found is None:
                    print(
                        f"envs: {name} is not built (python tests/frameworks/envs.py build {name})",
                        file=sys.stderr,
                    )
                    return 1
                print(found)
                continue
            started = time.monotonic()
            python = build(LEGS[name])
            print(f"envs: {name} ready in {time.monotonic() - started:.0f} s: {python}", flush=True)
    except EnvError as exc:
        print(f"envs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sysconfig.get_paths()  # stdlib only; fail early on a broken interpreter
    sys.exit(main(sys.argv))
