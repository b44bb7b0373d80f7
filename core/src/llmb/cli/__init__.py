"""The ``llmb`` command line.

Subcommands are imported only when invoked, so ``llmb --help`` and
``llmb list`` never import torch or an NVIDIA framework. Data goes to stdout,
logs to stderr. Errors llmb can explain print one paragraph and exit with
their code (2 for usage errors); a plugin's hook that fails when called is
named, with the hook, in one line (exit 2); nothing prints a traceback unless
``LLMB_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from llmb.errors import LlmbError

COMMANDS = {
    "list": (
        "llmb.cli.list_cmd",
        "list_command",
        "Show the support matrix: sizes, GPU types, dtypes, GPU counts.",
    ),
    "plan": ("llmb.cli.plan_cmd", "plan_command", "Resolve a recipe and show what a run would do."),
    "run": (
        "llmb.cli.jobs_cmd",
        "run_command",
        "Run a recipe (local torch engine or a cluster) and follow it.",
    ),
    "status": ("llmb.cli.jobs_cmd", "status_command", "Show a job's state, or list jobs."),
    "logs": ("llmb.cli.jobs_cmd", "logs_command", "Print a job's log, or follow its progress."),
    "cancel": ("llmb.cli.jobs_cmd", "cancel_command", "Stop a job and wait until it has ended."),
    "sweep": (
        "llmb.cli.sweep_cmd",
        "sweep_command",
        "Run every combination of sizes, dtypes and GPU counts.",
    ),
    "preflight": (
        "llmb.cli.preflight_cmd",
        "preflight_command",
        "Measure every node (GEMM, memory, all-reduce) and flag the slow ones before a benchmark.",
    ),
    "certify": (
        "llmb.cli.certify_cmd",
        "certify_command",
        "Certify a cluster: the published suite, gated, one verdict.",
    ),
    "results": (
        "llmb.cli.results_cmd",
        "results_command",
        "Parse runs' logs: step time, TFLOPS, MFU, status.",
    ),
    "compare": (
        "llmb.cli.compare_cmd",
        "compare_command",
        "Compare runs with published numbers or a baseline.",
    ),
    "report": (
        "llmb.cli.report_cmd",
        "report_command",
        "Plot runs against GPU count and write an HTML/Markdown report.",
    ),
    "plugins": (
        "llmb.cli.plugins_cmd",
        "plugins_command",
        "List plugins and where they come from; plugins new starts one.",
    ),
    "install": (
        "llmb.cli.install_cmd",
        "install_command",
        "Import container images and fetch Hugging Face files.",
    ),
    "config": (
        "llmb.cli.config_cmd",
        "config_command",
        "Show the cluster file's settings and where each comes from.",
    ),
    "archive": (
        "llmb.cli.archive_cmd",
        "archive_command",
        "Pack the experiments (without profiles, traces, checkpoints).",
    ),
}

# llmb-run's flags (NVIDIA's benchmarking collection's launcher), as llmb spells them: its users type them
LLMB_RUN_SPELLINGS = {
    "-w": "llmb takes the workload as its first argument (llmb run llama31 ...)",
    "--workload": "llmb takes the workload as its first argument (llmb run llama31 ...)",
    "--workloads": "llmb certify takes every installed workload; a suite file (--file) chooses",
    "-s": "llmb spells it --size",
    "--model_size": "llmb spells it --size",
    "--scale": "llmb spells it --gpus",
    "-d": "llmb spells it --dry-run",
    "--dryrun": "llmb spells it --dry-run",
    "-p": "llmb spells it --profile",
    "--max-scale": "llmb certify runs the published configurations at 512 GPUs or below",
    "--min-scale": "llmb sweep --gpus N runs the GPU counts given",
    "-f": "llmb has none; --no-memory-check skips the memory estimate",
    "--force": "llmb has none; --no-memory-check skips the memory estimate",
}


def refuse_repeated_options(command: click.Command, args: list[str], where: str) -> None:
    """A UsageError when ``args`` give an option of ``command`` that takes one value (or a flag and its
    ``--no-`` form) more than once: click would keep the last silently."""
    if isinstance(command, click.Group):
        return  # its subcommand's options are its own (resolved in turn)
    by_name: dict[str, click.Option] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                by_name[name] = param
    seen: dict[str, list[str]] = {}
    tokens = iter(args)
    for token in tokens:
        if token == "--":
            break
        if not token.startswith("-") or token == "-":
            continue
        name, equals, value = token.partition("=")
        param = by_name.get(name)
        if param is None:
            continue
        takes_value = not param.is_flag and not param.count
        if takes_value and not equals:
            value = next(tokens, "")
        if param.multiple or param.count:
            continue
        seen.setdefault(param.name, []).append(f"{name} {value}" if takes_value else name)
    for given in seen.values():
        if len(given) > 1:
            raise click.UsageError(
                f"{where}: {' and '.join(given)} both given; give it once (the last would win "
                f"without a word)."
            )


EXIT_INTERNAL = 70
EXIT_PLUGIN = 2  # a plugin's hook failed when called (llmb.plugins.guard): not llmb's bug


class WholeHelpGroup(click.Group):
    """A group whose list of subcommands gives each one's first sentence whole, wrapped to the terminal
    (click cuts it at the column's width with '...')."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (name, command.get_short_help_str(limit=10_000))
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            refuse_repeated_options(command, rest, f"llmb {name}")
        return name, command, rest

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="llmb", prog_name="llmb")
@click.option(
    "--log-format",
    type=click.Choice(["console", "json"], case_sensitive=False),
    envvar="LLMB_LOG_FORMAT",
    help="Warnings and logs on stderr: plain 'llmb: warning: ...' lines (console, the default) "
    "or structlog JSON lines (json). Variable: LLMB_LOG_FORMAT.",
)
def cli(log_format: str | None) -> None:
    """llmb runs NVIDIA's LLM pre-training benchmarks (Llama 3.1, Llama 4
    Maverick, Nemotron-4, Nemotron-H) and reports step time, tokens/s,
    TFLOPS/GPU, MFU and time-to-train against the published numbers.

    \b
    Examples:
      llmb list
      llmb plan llama31 --size 8b --gpu b200 --dtype nvfp4 --gpus 8
      llmb run llama31 --size 8b --gpu h100 --dtype bf16 --gpus 2 --proxy tiny
      llmb results
    """
    from llmb import log

    log.configure(fmt=log_format and log_format.lower())  # each command says each warning once


def get_host(ctx: click.Context):  # -> PluginHost, imported lazily
    root = ctx.find_root()
    if root.obj is None:
        from llmb.plugins.host import PluginHost

        root.obj = PluginHost()
    return root.obj


def _fail(message: str, code: int) -> None:
    from llmb.cli.output import echo_err

    # The one place an error is printed: its text may quote a log, a file name or a job's failure
    # reason, so escape sequences and control characters are made inert here, whoever raised it;
    # on a terminal it is wrapped to stderr's width.
    echo_err(f"llmb: error: {message}")
    sys.exit(code)


def _show(exc: click.ClickException) -> None:
    """Click's own message for ``exc`` (usage line, hint), made inert as ``_fail``'s are: it quotes the
    value given, a file name maybe."""
    import io

    from llmb.terminal import terminal_safe

    text = io.StringIO()
    exc.show(file=text)
    click.echo(terminal_safe(text.getvalue()), err=True, nl=False)


def _name_the_environment_variable(exc: click.BadParameter) -> None:
    """Say so when a bad value came from an environment variable rather than a flag."""
    param, ctx = exc.param, exc.ctx
    if param is None or ctx is None or not getattr(param, "envvar", None):
        return
    if ctx.get_parameter_source(param.name) == click.core.ParameterSource.ENVIRONMENT:
        exc.message = (
            f"{exc.message} (the value comes from the environment variable {param.envvar})"
        )


def main(argv: list[str] | None = None, host: object | None = None) -> None:
    """Entry point of the ``llmb`` console script."""
    try:
        code = cli.main(args=argv, prog_name="llmb", standalone_mode=False, obj=host)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.BadParameter as exc:
        _name_the_environment_variable(exc)
        _show(exc)
        sys.exit(exc.exit_code)
    except click.NoSuchOption as exc:
        if (spelling := LLMB_RUN_SPELLINGS.get(exc.option_name)) is not None:
            exc.message = f"{exc.message} llmb-run's {exc.option_name}: {spelling}."
            exc.possibilities = None
        _show(exc)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        _show(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        _fail("aborted", 130)
    except LlmbError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (``llmb list | head``)
        sys.exit(0)
    except Exception as exc:  # noqa: BLE001 - a bug: say so plainly
        if os.environ.get("LLMB_DEBUG"):
            raise
        from llmb.plugins.guard import failure_message

        if (message := failure_message(exc)) is not None:  # a plugin's hook failed: it is named
            _fail(message, EXIT_PLUGIN)
        _fail(
            f"internal error ({type(exc).__name__}: {exc}). This is a bug in llmb or a plugin; "
            f"run again with LLMB_DEBUG=1 for the traceback and report it.",
            EXIT_INTERNAL,
        )
    sys.exit(code if isinstance(code, int) else 0)
