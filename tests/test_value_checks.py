"""Issue 23: one check per kind of value (``llmb.install.value_checks``), the same whichever way the
value is given: a flag of ``llmb run`` / ``sweep`` / ``certify``, its environment variable, the
cluster file, or an ADDITIONAL_SLURM_PARAMS item for the same sbatch option.

First the three holes found by probing, each through the real ``llmb`` in a subprocess, refused
before anything is written or submitted (a real submission meets a fake ``sbatch`` that records
every job it is given):

- ``--mount '/etc:/x,/:/host'`` smuggled a second pyxis mount through the comma;
- ``--image`` with a trailing line break passed a ``match``/``$`` check;
- ``ADDITIONAL_SLURM_PARAMS`` items for the dedicated options (``nodelist=$(id)``, ``gres=``, ...)
  skipped the checks their flags pass.

Then every kind through every way it can be given: a bad value is refused with the same words,
each naming where it came from; real-world values still reach the script."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from llmb.errors import UsageError
from llmb.install import cluster_settings, value_checks

RUN = (
    "run",
    "llama31",
    "--size",
    "8b",
    "--gpu",
    "h100",
    "--dtype",
    "bf16",
    "--gpus",
    "8",
    "--backend",
    "slurm",
)
QUIET = {s.variable: "" for s in cluster_settings.SETTINGS} | {"ADDITIONAL_SLURM_PARAMS": ""}
ASP = "ADDITIONAL_SLURM_PARAMS"


def files_under(root: Path) -> list[str]:
    return (
        sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        if root.exists()
        else []
    )


@pytest.fixture
def fake_sbatch(tmp_path) -> tuple[Path, Path]:
    """(a bin directory whose sbatch records each job it is given in a log and answers job 4242, the log)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "sbatch.log"
    bin_dir.mkdir()
    script = bin_dir / "sbatch"
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = --parsable ]; then echo "$@" >> {log}; echo 4242; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir, log


def llmb(llmb_proc, install: Path, *args: str, path: Path | None = None, **env: str):
    extra = {"PATH": f"{path}{os.pathsep}{os.environ['PATH']}"} if path else {}
    return llmb_proc(
        *args, env={**QUIET, "LLMB_INSTALL": str(install), **extra, **env}, timeout=120
    )


def refused(result, needle: str) -> None:
    assert result.code == 2, (result.out, result.err)
    assert needle in result.err, result.err
    assert "Traceback" not in result.err and result.out == ""


# ----------------------------------------------------------------- the three holes


SMUGGLED = "/etc:/x,/:/host"


def test_a_comma_in_a_mount_smuggles_no_second_mount(llmb_proc, tmp_path, fake_sbatch):
    """Hole 1: pyxis splits --container-mounts on commas; '/etc:/x,/:/host' would mount / at /host."""
    install = tmp_path / "install"
    bin_dir, log = fake_sbatch
    needle = f"--mount {SMUGGLED!r}: expected SRC:DST or SRC:DST:ro with absolute paths"
    for extra in (("--dry-run",), ("--bare",)):  # a plan, and a real submission
        refused(llmb(llmb_proc, install, *RUN, *extra, "--mount", SMUGGLED, path=bin_dir), needle)
    for command in (("sweep", *RUN[1:], "--dry-run"), ("sweep", *RUN[1:], "--bare")):
        result = llmb(llmb_proc, install, *command, "--mount", SMUGGLED, path=bin_dir)
        assert result.code == 2 and needle in result.err, result.err
    assert files_under(install) == [] and not log.exists()

    install.mkdir()
    (install / "cluster.yaml").write_text(json.dumps({"mounts": [SMUGGLED]}))
    result = llmb(llmb_proc, install, *RUN, "--bare", path=bin_dir)
    refused(
        result,
        f"{install / 'cluster.yaml'}: mounts item {SMUGGLED!r}: expected SRC:DST or SRC:DST:ro",
    )
    assert files_under(install) == ["cluster.yaml"] and not log.exists()


def test_an_image_with_a_trailing_line_break_is_refused(llmb_proc, tmp_path, fake_sbatch):
    """Hole 2: a match/$ check let 'nvcr.io#nvidia/nemo:26.04.01\\n' through to srun's command line."""
    install = tmp_path / "install"
    bin_dir, log = fake_sbatch
    image = "nvcr.io#nvidia/nemo:26.04.01\n"
    for extra in (("--dry-run",), ("--bare",)):
        result = llmb(llmb_proc, install, *RUN, *extra, "--image", image, path=bin_dir)
        refused(
            result,
            "--image 'nvcr.io#nvidia/nemo:26.04.01\\n' is not in registry#repo:tag form, "
            "e.g. nvcr.io#nvidia/nemo:26.04.01",
        )
    sqsh = llmb(llmb_proc, install, *RUN, "--dry-run", "--image", "/lustre/images/nemo.sqsh\n")
    refused(sqsh, "--image '/lustre/images/nemo.sqsh\\n': a .sqsh image must be an absolute path")
    assert files_under(install) == [] and not log.exists()

    install.mkdir()
    (install / "cluster.yaml").write_text(json.dumps({"images": {"llama31": image}}))
    result = llmb(llmb_proc, install, *RUN, "--dry-run")
    refused(
        result,
        f"{install / 'cluster.yaml'}: images.llama31 'nvcr.io#nvidia/nemo:26.04.01\\n' is not in "
        f"registry#repo:tag form",
    )
    assert files_under(install) == ["cluster.yaml"]


ITEMS = {  # ADDITIONAL_SLURM_PARAMS item -> the refusal, as the option's own flag is refused
    "nodelist=$(id)": "item nodelist '$(id)': expected a Slurm host list such as node001,node[002-004]",
    # issue 41: an abbreviation is refused as one, whatever its value
    "nodel=$(id)": "item 'nodel' abbreviates sbatch's --nodelist: give an option's whole name (nodelist)",
    "exclude=node1 `id`": "item exclude 'node1 `id`': expected a Slurm host list",
    "gres=gpu:8 --wrap=id": "item gres 'gpu:8 --wrap=id': expected gpu:N or gpu:TYPE:N",
    'reservation=r"x': "item reservation 'r\"x': expected a name or comma-separated names",
    "qos=high$(id)": "item qos 'high$(id)': expected a name or comma-separated names",
    "constraint=gpu&$(id)": "item constraint 'gpu&$(id)': expected a Slurm feature expression",
    "segment=$(id)": "item segment '$(id)': expected a whole number from 1 to 131,072",
    "account=acct$(id)": "item account 'acct$(id)': expected a name",
    "time=2 hours": "item time '2 hours': expected minutes, MM:SS, HH:MM:SS",
}


@pytest.mark.parametrize("item", sorted(ITEMS))
def test_additional_slurm_params_items_pass_their_options_checks(
    llmb_proc, tmp_path, fake_sbatch, item
):
    """Hole 3: the dedicated options' items reached an #SBATCH line unchecked (#SBATCH --nodelist="$(id)")."""
    install = tmp_path / "install"
    bin_dir, log = fake_sbatch
    needle = f"{ASP} {ITEMS[item]}"
    for args, env in (
        ((*RUN, "--dry-run"), {ASP: f"exclusive;{item}"}),
        ((*RUN, "--dry-run", "--additional-slurm-params", item), {}),
        ((*RUN, "--bare", "--detach"), {ASP: item}),
    ):  # a real submission
        result = llmb(llmb_proc, install, *args, path=bin_dir, **env)
        refused(result, needle)
        assert "#SBATCH" not in result.err
    assert not log.exists()  # nothing submitted
    # no job, no script
    assert not [f for f in files_under(install) if f.startswith("jobs/") or f.endswith(".sh")]


def test_the_fake_sbatch_does_take_a_good_submission(llmb_proc, tmp_path, fake_sbatch):
    """The control of the tests above: the same real submission with good values reaches sbatch."""
    install = tmp_path / "install"
    bin_dir, log = fake_sbatch
    result = llmb(
        llmb_proc,
        install,
        *RUN,
        "--bare",
        "--detach",
        path=bin_dir,
        **{ASP: "nodelist=node[001-004];qos=high", "SBATCH_ACCOUNT": "my-team.gpu_a100"},
    )
    assert result.code == 0, result.err
    assert log.read_text().startswith("--parsable --comment=llmb:")
    script = next(install.rglob("sbatch_*.sh")).read_text()
    for line in (
        "#SBATCH --nodelist=node[001-004]",
        "#SBATCH --qos=high",
        "#SBATCH --account=my-team.gpu_a100",
    ):
        assert line in script.splitlines(), line


# ----------------------------------------------------------------- one check, every way in


@dataclass(frozen=True)
class Kind:
    name: str
    check: object  # (value, where) -> value, the one check of the kind
    bad: tuple[str, ...]
    good: tuple[str, ...]
    shows: str  # how a good value appears in the dry run's script ("{v}": the value)
    flag: str | None = None
    variable: str | None = None
    key: str | None = None  # in the cluster file
    item: str | None = None  # the ADDITIONAL_SLURM_PARAMS key


def _setting(name: str, item: str, bad: tuple[str, ...], good: tuple[str, ...], shows: str) -> Kind:
    s = cluster_settings.BY_NAME[name]
    return Kind(name, s.check, bad, good, shows, s.flag, s.variable, s.key, item)


KINDS = [
    _setting(
        "account",
        "account",
        ("acct$(id)", "acct\n"),
        ("my-team.gpu_a100", "llm.bench-2"),
        "#SBATCH --account={v}",
    ),
    _setting(
        "partition",
        "partition",
        ("batch`id`", "a b"),
        ("batch,backfill",),
        "#SBATCH --partition={v}",
    ),
    _setting("qos", "qos", ("high rm", "high\n"), ("high",), "#SBATCH --qos={v}"),
    _setting(
        "reservation", "reservation", ('res"x',), ("bench.week-1",), "#SBATCH --reservation={v}"
    ),
    _setting(
        "time_limit",
        "time",
        ("2 hours", "30\n"),
        ("1-00:00:00", "2:00:00", "30"),
        "#SBATCH --time={v}",
    ),
    _setting(
        "nodelist",
        "nodelist",
        ("$(id)", "node001\n"),
        ("node[001-004],node010",),
        "#SBATCH --nodelist={v}",
    ),
    _setting(
        "exclude", "exclude", ("node1\nnode2", "node1 node2"), ("node013",), "#SBATCH --exclude={v}"
    ),
    _setting(
        "constraint",
        "constraint",
        ("gpu&$(id)", "gpu&ib\n"),
        ("gpu&ib", "[rack1|rack2]"),
        "#SBATCH --constraint={v}",
    ),
    _setting(
        "gres", "gres", ("gpu:x", "gpu:8\n", "gpu:0"), ("gpu:8", "gpu:h100:8"), "#SBATCH --gres={v}"
    ),
    # sbatch 22.05 (here) has no --segment: the dry run says it leaves --segment=N out
    _setting("segment", "segment", ("x", "0", "1\n"), ("1",), "--segment={v}"),
    Kind(
        "image",
        value_checks.image,
        ("nvcr.io#nvidia/nemo:26.04.01\n", "nvcr.io#nvidia/nemo:26.04.01,/:/host", "relative.sqsh"),
        ("nvcr.io#nvidia/nemo:26.04.01", "/lustre/images/nemo-26.04.01.sqsh"),
        "--container-image={v}",
        flag="--image",
        key="images.llama31",
    ),
    Kind(
        "mount",
        value_checks.mount,
        (SMUGGLED, "/data:/data\n", "data:/data", "/a:/b:rx"),
        ("/lustre/data:/data:ro", "/scratch:/scratch"),
        ",{v}",
        flag="--mount",
        key="mounts",
    ),
    Kind(
        "env value",
        value_checks.env_value,
        ("a\nb", "x\r"),
        ("mlx5_0,mlx5_1", "two words"),
        "export NCCL_IB_HCA={v}",
        flag="--env",
        key="env.NCCL_IB_HCA",
    ),
    Kind(
        "env name",
        value_checks.env_name,
        ("A B", "A$(id)"),
        ("_X1", "NCCL_IB_HCA"),
        "export {v}=1",
        flag="--env",
        key="env",
    ),
]
PATHS = ("flag", "variable", "file", "item")
CASES = [
    (k, way)
    for k in KINDS
    for way in PATHS
    if getattr(k, "key" if way == "file" else way) is not None
]


def _file(kind: Kind, value: str) -> dict:
    if kind.key == "mounts":
        return {"mounts": [value]}
    if kind.key == "env":
        return {"env": {value: "1"}}
    section, _, leaf = kind.key.rpartition(".")
    return {section: {leaf: value}} if section else {leaf: value}


def _flag_args(kind: Kind, value: str) -> list[str]:
    if kind.name == "env value":
        return ["--env", f"NCCL_IB_HCA={value}"]
    if kind.name == "env name":
        return ["--env", f"{value}=1"]
    return [kind.flag, value]


def _where(kind: Kind, way: str, install: Path) -> str:
    if way == "flag":
        return {"env value": "--env NCCL_IB_HCA"}.get(kind.name, kind.flag)
    if way == "variable":
        return kind.variable
    if way == "item":
        return f"{ASP} item {kind.item}"
    path = install / "cluster.yaml"
    return {
        "mounts": f"{path}: mounts item",
        "env": f"{path}: env",
        "env.NCCL_IB_HCA": f"{path}: env NCCL_IB_HCA",
    }.get(kind.key, f"{path}: {kind.key}")


def _expected(kind: Kind, value: str, where: str) -> str:
    """The check's own words for ``value`` given at ``where``."""
    with pytest.raises(UsageError) as refusal:
        if kind.name == "env value":
            kind.check("NCCL_IB_HCA", value, where)
        else:
            kind.check(value, where)
    return str(refusal.value)


def _give(cli, monkeypatch, install: Path, kind: Kind, way: str, value: str, *extra: str):
    """``llmb run --dry-run --json`` with ``value`` given ``way``; the other ways left empty."""
    monkeypatch.setenv("LLMB_INSTALL", str(install))
    args = [*RUN, "--dry-run", "--json", *extra]
    if way == "flag":
        args += _flag_args(kind, value)
    elif way == "variable":
        monkeypatch.setenv(kind.variable, value)
    elif way == "item":
        monkeypatch.setenv(ASP, f"{kind.item}={value}")
    else:
        install.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: "\n" stays a line break
        (install / "cluster.yaml").write_text(json.dumps(_file(kind, value)))
    return cli(*args)


@pytest.mark.parametrize(("kind", "way"), CASES, ids=[f"{k.name}-{w}" for k, w in CASES])
def test_a_bad_value_is_refused_with_the_same_words_whichever_way_it_is_given(
    cli, monkeypatch, tmp_path, kind, way
):
    for n, bad in enumerate(kind.bad):
        install = tmp_path / f"install{n}"
        result = _give(cli, monkeypatch, install, kind, way, bad)
        where = _where(kind, way, install)
        expected = _expected(kind, bad, where)
        assert result.code == 2, (bad, result.out)
        assert result.err.strip() == f"llmb: error: {expected}", (bad, result.err)
        # the value as given
        assert repr(bad) in expected or kind.name == "env name" or "***" in expected
        assert result.out == "" and [f for f in files_under(install) if f != "cluster.yaml"] == []
        monkeypatch.delenv(kind.variable or "UNSET_VARIABLE", raising=False)
        monkeypatch.delenv(ASP, raising=False)


@pytest.mark.parametrize(("kind", "way"), CASES, ids=[f"{k.name}-{w}" for k, w in CASES])
def test_real_world_values_pass_whichever_way_they_are_given(cli, monkeypatch, tmp_path, kind, way):
    for n, good in enumerate(kind.good):
        install = tmp_path / f"install{n}"
        result = _give(cli, monkeypatch, install, kind, way, good)
        assert result.code == 0, (good, result.err)
        planned = result.json()
        shown = kind.shows.format(
            v=good if kind.name != "env value" or " " not in good else f"'{good}'"
        )
        assert shown in planned["script"] + "\n".join(planned.get("warnings") or ()) + result.err, (
            good,
            shown,
        )
        monkeypatch.delenv(kind.variable or "UNSET_VARIABLE", raising=False)
        monkeypatch.delenv(ASP, raising=False)


def test_every_cluster_setting_has_a_kind_here_and_every_item_option_its_settings_check():
    from llmb_backend_slurm import params

    assert {k.name for k in KINDS} >= {s.name for s in cluster_settings.SETTINGS} - {
        "numa_binding",
        "gpu",
        "gpus_per_node",
    }
    for kind in KINDS:
        if kind.item:
            # the same function, not a copy
            assert params.CHECKED[kind.item] is kind.check, kind.name
    assert set(params.DEDICATED) <= set(params.CHECKED)


def test_each_check_matches_the_whole_value():
    """A trailing line break is never dropped (re's $ would accept it); blanks around a value are."""
    for check, good in (
        (value_checks.names, "acct"),
        (value_checks.hostlist, "node[1-2]"),
        (value_checks.features, "gpu&ib"),
        (value_checks.time_limit, "30"),
        (value_checks.gres, "gpu:8"),
        (value_checks.image, "nvcr.io#nvidia/nemo:26.04.01"),
        (value_checks.mount, "/a:/b:ro"),
        (value_checks.env_name, "NCCL_DEBUG"),
        (value_checks.sbatch_option, "mail-type"),
    ):
        assert check(good, "where") == good
        for suffix in ("\n", "\r\n", "\x00", "\nX"):
            with pytest.raises(UsageError, match=re.escape(repr(good + suffix))):
                check(good + suffix, "where")
    assert (
        value_checks.names(" acct ", "where") == "acct"
        and value_checks.segment(" 4 ", "where") == 4
    )
    for check, value in (
        (value_checks.segment, "\u0663"),
        (value_checks.time_limit, "\u0663\u0660"),
        (value_checks.gres, "gpu:\u0668"),  # another script's digits: int() would read them
        (value_checks.segment, "1" * 5000),
        (value_checks.gres, "gpu:" + "1" * 5000),
    ):
        with pytest.raises(UsageError):
            check(value, "where")


def test_the_scripts_last_line_of_defence_is_a_whole_match_too():
    from llmb_backend_slurm.script import _SAFE_DIRECTIVE, directive

    assert _SAFE_DIRECTIVE.fullmatch("node[1-2]") and not _SAFE_DIRECTIVE.fullmatch("node1\n")
    with pytest.raises(ValueError, match="line break"):
        directive("nodelist", "node1\n")
    # sbatch reads it; no shell does
    assert directive("comment", "$(id)") == '#SBATCH --comment="$(id)"'


def test_env_values_that_may_be_secrets_are_not_repeated():
    with pytest.raises(UsageError) as refusal:
        value_checks.env_value("GITHUB_PAT", "ghp_s3cr3t\n", "--env GITHUB_PAT")
    assert "ghp_s3cr3t" not in str(refusal.value) and "***" in str(refusal.value)
    with pytest.raises(UsageError) as refusal:
        value_checks.env_value("HTTPS_PROXY", "http://u:pw-9876@proxy:3128\n", "--env HTTPS_PROXY")
    assert "pw-9876" not in str(refusal.value)
