"""``llmb archive``: the experiments in one .tar.gz, without profiles, traces, checkpoints and code."""

from __future__ import annotations

import os
import sys
import time

import click

from llmb.cli.output import emit_json
from llmb.errors import UsageError


@click.command("archive")
@click.argument("dirs", nargs=-1, type=click.Path(file_okay=False))
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="The archive to write (default: ./llmb-experiments-<date>-<time>.tar.gz).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def archive_command(dirs, output, as_json):
    """Pack DIRS (default: every workload's experiments under $LLMB_INSTALL)
    into one compressed archive, leaving out profiles and traces
    (*.nsys-rep, *_trace.json), archives (*.tar.*) and the code, checkpoints,
    nsys_profile and torch_profile folders."""
    from llmb import archive
    from llmb.paths import experiments_dirs, install_dir

    if dirs:
        missing = [d for d in dirs if not os.path.isdir(d)]
        if missing:
            raise UsageError(f"no such directory: {', '.join(missing)}.")
        roots = [(os.path.abspath(d), os.path.basename(os.path.abspath(d.rstrip(os.sep)))) for d in dirs]
    else:
        install = install_dir()
        roots = [(d, os.path.relpath(d, install)) for d in experiments_dirs()]
        if not roots:
            raise UsageError(f"there are no experiments under {install} (set LLMB_INSTALL, or name directories).")
    output = output or f"llmb-experiments-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz"
    if not output.endswith((".tar.gz", ".tgz")):
        raise UsageError(f"--output {output!r}: the archive is a gzip-compressed tar; name it *.tar.gz.")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise UsageError(f"--output {output}: the directory {parent} does not exist; create it first, or write the "
                         f"archive elsewhere (a mistyped path would otherwise leave directories behind).")
    tty = sys.stderr.isatty()
    last = [time.monotonic()]  # first line after a moment: small archives print only their summary

    def progress(files: int, size: int) -> None:
        if time.monotonic() - last[0] >= (0.2 if tty else 5.0):
            last[0] = time.monotonic()
            text = f"llmb archive: {files:,} files, {size / 1e6:,.1f} MB"
            click.echo(f"\r{text}\x1b[K" if tty else text, err=True, nl=not tty)

    packed = archive.pack(roots, output, progress)
    if tty:
        click.echo("", err=True)
    if as_json:
        emit_json(packed.__dict__)
        return
    click.echo(f"{packed.output}: {packed.files:,} files, {packed.bytes_in / 1e6:,.1f} MB packed into "
               f"{packed.bytes_out / 1e6:,.1f} MB; left out {packed.excluded_files:,} files and "
               f"{packed.excluded_dirs:,} folders (profiles, traces, checkpoints, code).")
