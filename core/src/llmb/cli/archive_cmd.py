"""``llmb archive``: the experiments (or a certification suite's runs) in one .tar.gz or .tar.zst, without
profiles, traces, checkpoints and code."""

from __future__ import annotations

import os
import sys
import time

import click

from llmb.cli import get_host
from llmb.cli.output import emit_json, say
from llmb.errors import UsageError
from llmb.figures import byte_size
from llmb.log import warn


def _suite_roots(ctx, suite_id: str):
    """(roots, default file name stem) of a certification suite; its verdict is written beside its record
    (``certify/<id>/status.json``) first, so the archive says what llmb certify status said."""
    from llmb.certify.suite import archive_roots, load_suite, suite_dir
    from llmb.certify.verdict import judge_suite
    from llmb.paths import install_dir
    from llmb.runs.experiment import write_json

    suite = load_suite(suite_id)
    write_json(
        os.path.join(suite_dir(suite.id), "status.json"),
        judge_suite(get_host(ctx), suite).to_dict(),
    )
    return _really_inside(
        install_dir(), archive_roots(suite)
    ), f"llmb-certification-{suite.id}-{time.strftime('%Y%m%d')}"


def _experiment_roots(dirs: tuple[str, ...]):
    from llmb.paths import experiments_dirs, install_dir

    if dirs:
        missing = [d for d in dirs if not os.path.isdir(d)]
        if missing:
            raise UsageError(f"no such directory: {', '.join(missing)}.")
        return [
            (os.path.abspath(d), os.path.basename(os.path.abspath(d.rstrip(os.sep)))) for d in dirs
        ]
    install = install_dir()
    roots = _really_inside(install, [(d, os.path.relpath(d, install)) for d in experiments_dirs()])
    if not roots:
        raise UsageError(
            f"there are no experiments under {install} (set LLMB_INSTALL, or name directories)."
        )
    return roots


def _really_inside(install: str, roots: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``roots`` without those reached through a symbolic link from the install (each named in a warning):
    a link can point anywhere, and the archive would carry what it points to."""
    from llmb.results.archive import link_on_the_way

    kept = []
    for directory, name in roots:
        inside = not os.path.relpath(directory, install).startswith(os.pardir)
        link = link_on_the_way(install, directory) if inside else None
        if link is None:
            kept.append((directory, name))
        else:
            warn(
                f"left out {name}: it is reached through the symbolic link {link}; "
                f"name the directory (llmb archive DIR) to pack it."
            )
    return kept


def _output(output: str | None, fmt: str | None, stem: str) -> tuple[str, str]:
    """(file, format): the format from --format, else from the file's name, else gz."""
    from llmb.results.archive import SUFFIXES, format_of

    named = format_of(output) if output else None
    if output and named is None:
        names = " or ".join(
            f"*{suffix}" for suffixes in SUFFIXES.values() for suffix in suffixes[:1]
        )
        raise UsageError(f"--output {output!r}: the archive is a compressed tar; name it {names}.")
    if fmt and named and fmt != named:
        raise UsageError(
            f"--output {output!r} names a .tar.{named} archive but --format is {fmt}; make them agree."
        )
    fmt = fmt or named or "gz"
    output = output or stem + SUFFIXES[fmt][0]
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UsageError(
            f"--output {output}: the directory {parent} does not exist; create it first, or write the "
            f"archive elsewhere (a mistyped path would otherwise leave directories behind)."
        )
    return output, fmt


@click.command("archive")
@click.argument("dirs", nargs=-1, type=click.Path(file_okay=False))
@click.option(
    "--suite",
    "suite_id",
    metavar="ID",
    help="A certification suite's runs and records ('last': the most recent), to hand in.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    help="The archive to write (default: ./llmb-experiments-<date>-<time>.tar.gz, or for --suite "
    "./llmb-certification-<suite id>-<date>.tar.gz; .tar.zst with --format zst).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["gz", "zst"]),
    help="gz (.tar.gz) or zst (.tar.zst, multithreaded Zstandard). Default: from --output's name, else gz.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def archive_command(ctx, dirs, suite_id, output, fmt, as_json):
    """Pack DIRS (default: every workload's experiments under $LLMB_INSTALL),
    or with --suite a certification suite (its record and verdict, its
    sweeps and its jobs' run directories), into one compressed archive,
    leaving out profiles and traces (*.nsys-rep, *_trace.json,
    *.pt.trace.json), archives (*.tar.*) and the code, checkpoints,
    nsys_profile, torch_profile and pytorch_profile folders. Logs, recipes
    and provenance files are kept."""
    from llmb.results import archive

    if suite_id and dirs:
        raise UsageError("give DIRS or --suite ID, not both.")
    if suite_id:
        roots, stem = _suite_roots(ctx, suite_id)
    else:
        roots, stem = _experiment_roots(dirs), f"llmb-experiments-{time.strftime('%Y%m%d-%H%M%S')}"
    output, fmt = _output(output, fmt, stem)
    tty = sys.stderr.isatty()
    last = [time.monotonic()]  # first line after a moment: small archives print only their summary
    shown = [False]  # a progress line is on the terminal: end it before the summary

    def progress(files: int, size: int) -> None:
        if time.monotonic() - last[0] >= (0.2 if tty else 5.0):
            last[0], shown[0] = time.monotonic(), True
            text = f"llmb archive: {files:,} files, {byte_size(size)}"
            click.echo(f"\r{text}\x1b[K" if tty else text, err=True, nl=not tty)

    packed = archive.pack(roots, output, progress, fmt)
    if tty and shown[0]:  # the summary below says it all: the progress line goes
        click.echo("\r\x1b[K", err=True, nl=False)
    if as_json:
        emit_json({**packed.__dict__, "format": fmt})
        return
    say(
        f"{packed.output}: {packed.files:,} files, {byte_size(packed.bytes_in)} packed into "
        f"{byte_size(packed.bytes_out)}; left out {packed.excluded_files:,} files and "
        f"{packed.excluded_dirs:,} folders (profiles, traces, checkpoints, code)."
    )
