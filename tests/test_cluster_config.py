"""The cluster file ($LLMB_INSTALL/cluster.yaml) as a user meets it: the real
``llmb`` in a subprocess with a fresh install directory, ``llmb config show``,
and the sbatch script a Slurm dry run renders. Precedence: flag > environment
variable > file > default. The Slurm options the backend renders from
SubmitOptions fields of its own are asserted on SubmitOptions, built the way
``llmb run`` builds them (click's parsing, environment variables included)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click
import pytest
from llmb.cli.run_options import parameter_names, run_options
from llmb.errors import UsageError
from llmb.install import cluster_config, cluster_settings
from llmb.lifecycle.run_option_values import run_inputs
from llmb.recipes.records import RecipeRequest

RUN = (
    "run",
    "llama31",
    "--size",
    "8b",
    "--dtype",
    "bf16",
    "--gpus",
    "8",
    "--backend",
    "slurm",
    "--dry-run",
)
# Every variable the cluster settings read, emptied unless a test sets it (a developer's shell may hold them;
# an empty variable counts as unset, as click takes it).
QUIET = {s.variable: "" for s in cluster_settings.SETTINGS}


def llmb(llmb_proc, install: Path, *args: str, **env: str):
    return llmb_proc(*args, env={**QUIET, "LLMB_INSTALL": str(install), **env}, timeout=120)


def dry_run(llmb_proc, install: Path, *args: str, **env: str) -> dict:
    result = llmb(llmb_proc, install, *RUN, *args, "--json", **env)
    assert result.code == 0, result.err
    return result.json()


def sbatch_lines(script: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([a-z-]+)=(.*)$", script, re.M))


def write(install: Path, text: str) -> Path:
    install.mkdir(parents=True, exist_ok=True)
    path = install / "cluster.yaml"
    path.write_text(text)
    return path


def show(llmb_proc, install: Path, **env: str) -> dict:
    result = llmb(llmb_proc, install, "config", "show", "--json", **env)
    assert result.code == 0, result.err
    data = result.json()
    return {s["name"]: s for s in data.pop("settings")} | {"": data}


@pytest.fixture
def install(tmp_path) -> Path:
    return tmp_path / "install"


# ----------------------------------------------------------------- precedence


def test_config_show_names_the_file_the_variable_or_the_default(llmb_proc, install):
    path = write(
        install,
        'account: acct_file\npartition: part_file\nslurm: {qos: qos_file, time: "45"}\n'
        "mounts: [/lustre:/lustre:ro]\n",
    )
    settings = show(llmb_proc, install, SBATCH_QOS="qos_env", SBATCH_PARTITION="")
    assert settings[""] == {"file": str(path), "exists": True}
    picked = {name: (s["value"], s["source"], s["origin"]) for name, s in settings.items() if name}
    assert picked["account"] == ("acct_file", "file", str(path))
    assert picked["partition"] == ("part_file", "file", str(path))  # an empty variable is no value
    assert picked["qos"] == ("qos_env", "env", "SBATCH_QOS")
    assert picked["time_limit"] == ("45", "file", str(path))
    assert picked["mounts"] == (["/lustre:/lustre:ro"], "file", str(path))
    assert picked["reservation"] == (None, "default", None)
    assert picked["numa_binding"] == (True, "default", None)
    assert settings["qos"]["key"] == "slurm.qos" and settings["qos"]["flag"] == "--qos"

    text = llmb(llmb_proc, install, "config", "show", SBATCH_QOS="qos_env")
    assert text.code == 0
    rows = {line.split()[0]: line for line in text.out.splitlines()[2:]}
    assert "qos_env" in rows["slurm.qos"] and "env SBATCH_QOS" in rows["slurm.qos"]
    assert f"file {path}" in rows["account"] and "default" in rows["slurm.reservation"]


def test_without_a_file_config_show_says_how_to_make_one(llmb_proc, install):
    result = llmb(llmb_proc, install, "config", "show")
    assert result.code == 0, result.err
    assert f"cluster file: {install / 'cluster.yaml'} (none yet: llmb install writes" in result.out
    assert "or create it by hand" in result.out
    data = show(llmb_proc, install)
    assert data[""]["exists"] is False and {s["source"] for k, s in data.items() if k} == {
        "default"
    }
    path = llmb(llmb_proc, install, "config", "path")
    assert (path.code, path.out.strip()) == (0, str(install / "cluster.yaml"))


def test_the_rendered_sbatch_takes_file_then_variable_then_flag(llmb_proc, install):
    write(install, 'gpu: h100\naccount: acct_file\npartition: part_file\nslurm: {time: "45"}\n')
    only_file = sbatch_lines(dry_run(llmb_proc, install)["script"])
    assert (only_file["account"], only_file["partition"], only_file["time"]) == (
        "acct_file",
        "part_file",
        "45",
    )

    env = {"SBATCH_ACCOUNT": "acct_env", "SBATCH_TIMELIMIT": "30"}
    with_env = sbatch_lines(dry_run(llmb_proc, install, **env)["script"])
    assert (with_env["account"], with_env["partition"], with_env["time"]) == (
        "acct_env",
        "part_file",
        "30",
    )

    flagged = sbatch_lines(
        dry_run(llmb_proc, install, "--account", "acct_flag", "--time-limit", "1:00:00", **env)[
            "script"
        ]
    )
    assert (flagged["account"], flagged["partition"], flagged["time"]) == (
        "acct_flag",
        "part_file",
        "1:00:00",
    )

    # '' drops the file's value
    cleared = sbatch_lines(dry_run(llmb_proc, install, "--partition", "")["script"])
    assert "partition" not in cleared and cleared["account"] == "acct_file"


def test_local_runs_read_no_cluster_file(llmb_proc, install):
    write(install, "account: acct_file\ngpu: b200\nbogus_key: 1\n")  # broken, and another GPU type
    result = llmb(
        llmb_proc,
        install,
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--gpus",
        "2",
        "--proxy",
        "tiny",
        "--dry-run",
    )
    assert result.code == 0, result.err
    assert "ignores" not in result.err  # nothing of the file reached the local backend
    refused = llmb(llmb_proc, install, *RUN, "--gpu", "h100")
    assert refused.code == 2 and "bogus_key" in refused.err


def _submit(
    monkeypatch,
    install: Path,
    args: list[str],
    env: dict[str, str] | None = None,
    request: RecipeRequest | None = None,
):
    """(request, RunOptions, backend) exactly as ``llmb run`` builds them: click parses ``args`` and
    the environment, then ``run_inputs`` adds the cluster file."""
    for name, value in {**QUIET, "LLMB_INSTALL": str(install), **(env or {})}.items():
        monkeypatch.setenv(name, value)
    request = request or RecipeRequest(
        workload="llama31", size="8b", gpu=None, dtype="bf16", gpus=8
    )

    @click.command()
    @run_options
    def probe(**kw):
        return run_inputs(kw, request)

    return probe.main(["--backend", "slurm", *args], standalone_mode=False)


def test_every_dedicated_slurm_option_follows_the_precedence(monkeypatch, install):
    write(
        install,
        "gres: gpu:8\nnuma_binding: false\nslurm:\n  nodelist: node[01-04]\n  exclude: [node05, node06]\n"
        "  reservation: res_file\n  qos: qos_file\n  constraint: gpu&ib\n  segment: 2\n",
    )
    _, options, backend = _submit(monkeypatch, install, [])
    submit = options.submit
    assert backend == "slurm"
    assert (
        submit.nodelist,
        submit.exclude,
        submit.reservation,
        submit.qos,
        submit.constraint,
        submit.segment,
        submit.gres,
        submit.numa_binding,
    ) == ("node[01-04]", "node05,node06", "res_file", "qos_file", "gpu&ib", 2, "gpu:8", False)
    env = {
        "SBATCH_QOS": "qos_env",
        "SBATCH_RESERVATION": "res_env",
        "SBATCH_CONSTRAINT": "a100",
        "SBATCH_GRES": "none",
        "LLMB_NODELIST": "node09",
        "LLMB_EXCLUDE": "node10",
        "LLMB_SEGMENT": "4",
        "LLMB_NUMA_BINDING": "1",
    }
    _, options, _ = _submit(monkeypatch, install, [], env)
    submit = options.submit
    assert (
        submit.nodelist,
        submit.exclude,
        submit.reservation,
        submit.qos,
        submit.constraint,
        submit.segment,
        submit.gres,
        submit.numa_binding,
    ) == ("node09", "node10", "res_env", "qos_env", "a100", 4, "none", True)
    flags = [
        "--qos",
        "qos_flag",
        "--reservation",
        "res_flag",
        "--constraint",
        "h100",
        "--gres",
        "gpu:4",
        "--nodelist",
        "n1",
        "--exclude",
        "n2",
        "--segment",
        "1",
        "--no-numa-binding",
        "--dump-env",
    ]
    _, options, _ = _submit(monkeypatch, install, flags, env)
    submit = options.submit
    assert (
        submit.nodelist,
        submit.exclude,
        submit.reservation,
        submit.qos,
        submit.constraint,
        submit.segment,
        submit.gres,
        submit.numa_binding,
    ) == ("n1", "n2", "res_flag", "qos_flag", "h100", 1, "gpu:4", False)
    assert options.dump_env is True


def test_bad_values_from_a_flag_or_a_variable_name_where_they_came_from(
    llmb_proc, install, monkeypatch
):
    result = llmb(llmb_proc, install, *RUN, "--gpu", "h100", SBATCH_QOS="high;rm -rf /")
    assert (
        result.code == 2
        and "SBATCH_QOS 'high;rm -rf /'" in result.err
        and "Traceback" not in result.err
    )
    result = llmb(llmb_proc, install, *RUN, "--gpu", "h100", "--nodelist", "node1 node2")
    assert (
        result.code == 2 and "--nodelist 'node1 node2'" in result.err and "host list" in result.err
    )
    shown = llmb(llmb_proc, install, "config", "show", LLMB_NUMA_BINDING="perhaps")
    assert shown.code == 2 and "LLMB_NUMA_BINDING 'perhaps': expected true or false" in shown.err
    for flag, value, needle in (
        ("--gres", "gpu:100", "expected gpu:N"),
        ("--constraint", "a\nb", "line breaks"),
        ("--time-limit", "2 hours", "Slurm's forms"),
    ):
        with pytest.raises(UsageError, match=re.escape(needle)):
            _submit(monkeypatch, install, [flag, value])


# ----------------------------------------------------------------- GPU type, images, mounts, env


def test_the_file_gpu_is_the_default_and_another_gpu_is_refused(llmb_proc, install):
    write(install, "gpu: h100\n")
    planned = dry_run(llmb_proc, install)
    assert planned["run_spec"]["gpu"] == "h100"
    # a real submission: refused before anything is written or sent
    real = [a for a in RUN if a != "--dry-run"]
    for extra, env, named in (
        (["--gpu", "b200"], {}, "--gpu b200"),
        ([], {"GPU_TYPE": "b200"}, "GPU_TYPE b200"),
    ):
        result = llmb(llmb_proc, install, *real, *extra, **env)
        assert result.code == 2 and result.out == ""
        assert f"{named} disagrees with the cluster file {install / 'cluster.yaml'}" in result.err
        assert "gpu: h100" in result.err
        assert sorted(p.name for p in install.iterdir()) == ["cluster.yaml"]
    same = dry_run(llmb_proc, install, "--gpu", "H100")
    assert same["run_spec"]["gpu"] == "h100"


def test_the_file_gpus_per_node_places_the_ranks_and_the_flag_wins(llmb_proc, install):
    write(install, "gpu: h100\ngpus_per_node: 4\n")
    lines = sbatch_lines(dry_run(llmb_proc, install)["script"])
    assert (lines["nodes"], lines["ntasks-per-node"]) == ("2", "4")
    flagged = sbatch_lines(dry_run(llmb_proc, install, "--gpus-per-node", "8")["script"])
    assert (flagged["nodes"], flagged["ntasks-per-node"]) == ("1", "8")


def test_images_apply_per_workload_and_mounts_add_to_the_flags(llmb_proc, install, monkeypatch):
    write(
        install,
        'images:\n  llama31: "nvcr.io#nvidia/nemo:25.09"\nmounts:\n  - /lustre/data:/data:ro\n',
    )
    script = dry_run(llmb_proc, install, "--gpu", "h100", "--mount", "/scratch:/scratch")["script"]
    assert "'--container-image=nvcr.io#nvidia/nemo:25.09'" in script
    mounts = re.search(r"--container-mounts=(\S+)", script)[1].split(",")
    assert mounts[1:] == ["/lustre/data:/data:ro", "/scratch:/scratch"]
    flagged = dry_run(
        llmb_proc, install, "--gpu", "h100", "--image", "nvcr.io#nvidia/nemo:26.04.01"
    )["script"]
    assert "'--container-image=nvcr.io#nvidia/nemo:26.04.01'" in flagged
    other = RecipeRequest(workload="nemotronh", size="56b", gpu="h100", dtype="fp8", gpus=32)
    _, options, _ = _submit(monkeypatch, install, [], request=other)
    assert options.submit.image is None  # nemotronh runs its recipe's own image


def test_the_file_env_reaches_submit_options_and_env_flags_win(monkeypatch, install):
    write(install, "env:\n  NCCL_IB_HCA: mlx5\n  TP_COMM_OVERLAP: true\n  NCCL_DEBUG: WARN\n")
    _, options, _ = _submit(monkeypatch, install, ["--env", "NCCL_DEBUG=INFO"])
    assert options.submit.cluster_env == (("NCCL_IB_HCA", "mlx5"), ("TP_COMM_OVERLAP", "True"))
    assert options.env == (("NCCL_DEBUG", "INFO"),)


def test_sweep_files_give_the_new_options_by_the_same_names(llmb_proc, install, tmp_path):
    names = parameter_names()
    for name in (
        "nodelist",
        "exclude",
        "reservation",
        "qos",
        "constraint",
        "segment",
        "gres",
        "numa_binding",
        "dump_env",
    ):
        assert names[name] == name
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "llama31_8b:\n  scales: [8]\n  gpu: h100\n  dtypes: [bf16]\n  qos: 'two words'\n"
    )
    result = llmb(
        llmb_proc, install, "sweep", "--file", str(sweep), "--backend", "slurm", "--dry-run"
    )
    assert result.code == 2 and "'two words'" in result.err and "without spaces" in result.err


# ----------------------------------------------------------------- bad files


BAD_FILES = [
    ("acount: x\n", "unknown key acount in the cluster file; valid: account, partition, gpu"),
    (
        "slurm: {qso: x}\n",
        "unknown key qso in the slurm section; valid: time, nodelist, exclude, reservation, qos",
    ),
    ("- account\n", "the cluster file must be a mapping of account, partition"),
    ("slurm: normal\n", "the slurm section must be a mapping of time, nodelist"),
    ("mounts: /a:/b\n", "mounts must be a list of SRC:DST or SRC:DST:ro"),
    (
        "mounts: [data:/data]\n",
        "mounts item 'data:/data': expected SRC:DST or SRC:DST:ro with absolute paths",
    ),
    ("mounts: ['/a,/b:/c']\n", "mounts item '/a,/b:/c'"),
    ("gpus_per_node: eight\n", "gpus_per_node 'eight': expected a whole number from 1 to 72"),
    ("numa_binding: maybe\n", "numa_binding 'maybe': expected true or false"),
    ("gpu: tpu\n", "gpu 'tpu': unknown GPU type; llmb knows: h100"),
    ("gres: gpus:8\n", "gres 'gpus:8': expected gpu:N"),
    ("slurm: {time: 1:00:00}\n", "slurm.time 3600: quote the time limit"),
    ('slurm: {time: "an hour"}\n', "slurm.time 'an hour': expected minutes, MM:SS"),
    ("slurm: {qos: 'a b'}\n", "slurm.qos 'a b': expected a name"),
    ('slurm: {nodelist: "n1\\nn2"}\n', "slurm.nodelist 'n1\\nn2': expected a Slurm host list"),
    ("slurm: {segment: 0}\n", "slurm.segment 0: expected a whole number from 1"),
    ("account: [a, b]\n", "account: expected text"),
    ("env: {'A B': 1}\n", "env 'A B' is not a valid environment variable name"),
    ("env: [A=1]\n", "env must be a mapping NAME: value"),
    ("env: {NCCL_DEBUG: {x: 1}}\n", "env NCCL_DEBUG: expected a single value"),
    (
        "images: {llama31: nvcr.io/nvidia/nemo:25.09}\n",
        "images.llama31 'nvcr.io/nvidia/nemo:25.09' is not in registry#repo:tag form",
    ),
    (
        "images: {llama31: relative.sqsh}\n",
        "images.llama31 'relative.sqsh': a .sqsh image must be an absolute path",
    ),
    ("images: [llama31]\n", "images must map workload names to container images"),
]


@pytest.mark.parametrize(("text", "needle"), BAD_FILES, ids=[t for t, _ in BAD_FILES])
def test_a_bad_file_names_the_file_the_key_and_what_is_valid(llmb_proc, install, text, needle):
    path = write(install, text)
    for args in (("config", "show"), RUN):
        result = llmb(llmb_proc, install, *args)
        assert result.code == 2, (args, result.out)
        assert f"llmb: error: {path}: " in result.err and needle in result.err, result.err
        assert "Traceback" not in result.err and result.out == ""


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "APP_SECRET", "WANDB_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD"]
)
def test_secrets_are_refused_in_the_file_and_never_echoed(llmb_proc, install, name):
    write(install, f"env:\n  {name}: s3cr3t-value-42\n")
    result = llmb(llmb_proc, install, "config", "show")
    assert result.code == 2 and f"env {name}: a secret never goes in a file" in result.err
    assert "s3cr3t-value-42" not in result.err + result.out


def test_names_that_only_look_like_secrets_pass():
    config = cluster_config.from_dict(
        {"env": {"TOKENIZERS_PARALLELISM": "false", "NCCL_IB_HCA": "mlx5"}}, "f.yaml"
    )
    assert dict(config.env) == {"TOKENIZERS_PARALLELISM": "false", "NCCL_IB_HCA": "mlx5"}


def test_malformed_yaml_names_the_line(llmb_proc, install):
    path = write(install, "account: a\npartition: [batch\nslurm: {}\n")
    result = llmb(llmb_proc, install, "config", "show")
    assert result.code == 2 and f"the cluster file {path} is not valid YAML at line " in result.err
    line = int(re.search(r"at line (\d+)", result.err)[1])
    assert line in (2, 3, 4)  # where the unclosed list is found out
    tabs = write(install, "account: a\n\tpartition: b\n")
    result = llmb(llmb_proc, install, "config", "show")
    assert result.code == 2 and f"{tabs} is not valid YAML at line 2" in result.err


def test_an_empty_or_all_comment_file_sets_nothing(llmb_proc, install):
    write(install, "# nothing yet\n")
    data = show(llmb_proc, install)
    assert data[""]["exists"] is True and {s["source"] for k, s in data.items() if k} == {"default"}


# ----------------------------------------------------------------- the template


def _uncommented(template: str) -> str:
    """The template with its example lines switched on."""
    out = []
    for line in template.splitlines():
        match = re.match(r"^# (\s*(?:[A-Za-z0-9_]+:|- ).*)$", line)
        if match:
            out.append(match[1])
    return "\n".join(out) + "\n"


def test_the_template_examples_cover_every_key_and_are_valid(tmp_path):
    with open(cluster_config.TEMPLATE, encoding="utf-8") as handle:
        template = handle.read()
    path = tmp_path / "cluster.yaml"
    path.write_text(_uncommented(template))
    config = cluster_config.load(str(path))
    for setting in cluster_settings.SETTINGS:
        assert config.value(setting.name) is not None, setting.key
    assert config.images and config.mounts and config.env
    (tmp_path / "as_written.yaml").write_text(template)
    assert cluster_config.load(str(tmp_path / "as_written.yaml")) == cluster_config.ClusterConfig(
        path=str(tmp_path / "as_written.yaml")
    )


def test_every_setting_is_a_field_of_the_record_and_of_submit_options():
    from dataclasses import fields

    from llmb.runs.runspec import SubmitOptions

    record = {f.name for f in fields(cluster_config.ClusterConfig)}
    submit = {f.name for f in fields(SubmitOptions)}
    for setting in cluster_settings.SETTINGS:
        assert setting.name in record
        assert setting.name in submit or setting.name == "gpu", setting.name


def test_config_show_json_matches_the_documented_keys(llmb_proc, install):
    doc = (Path(__file__).resolve().parents[1] / "docs" / "cluster-config.md").read_text()
    for setting in cluster_settings.SETTINGS:
        assert f"`{setting.key}`" in doc and f"`{setting.variable}`" in doc, setting.key
    data = json.loads(llmb(llmb_proc, install, "config", "show", "--json").out)
    assert set(data) == {"file", "exists", "settings"}
    assert set(data["settings"][0]) == {
        "name",
        "key",
        "flag",
        "variable",
        "value",
        "source",
        "origin",
        "default",
    }


# Nine levels of nine aliases each: 9^9 (387 million) strings once expanded. Read through the YAML cache
# it took 1.6-2 GB and hung `config show` and every Slurm run; a user's file is never cached, and an
# alias is refused before anything is built.
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_an_alias_bomb_in_the_cluster_file_is_refused_at_once(llmb_proc, install, tmp_path):
    write(install, ALIAS_BOMB)
    result = llmb(llmb_proc, install, "config", "show")
    assert result.code == 2
    assert "cluster file" in result.err and "an alias (*a) is not accepted here" in result.err
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(ALIAS_BOMB)
    (install / "cluster.yaml").unlink()
    result = llmb(llmb_proc, install, "sweep", "--file", str(sweep), "--dry-run")
    assert result.code == 2 and "is not accepted here" in result.err


def test_a_cluster_file_that_is_a_fifo_is_refused_not_waited_on(llmb_proc, install):
    install.mkdir(parents=True, exist_ok=True)
    os.mkfifo(install / "cluster.yaml")
    result = llmb(llmb_proc, install, "config", "show")
    assert result.code == 2 and "not a regular file" in result.err


def test_an_eleven_megabyte_cluster_file_is_refused_before_it_is_parsed(
    llmb_proc, install, tmp_path
):
    """Issue 21, item 14: 300,000 image entries (11 MB) took config show 19 s and 860 MB."""
    lines = "".join(f"  workload{n:06d}: nvcr.io#nvidia/nemo:25.09\n" for n in range(300_000))
    path = write(install, "images:\n" + lines)
    assert path.stat().st_size > 10 << 20
    result = llmb(llmb_proc, install, "config", "show")
    assert result.code == 2 and "larger than 1 MiB; such a file is a few kilobytes" in result.err, (
        result.err
    )
    assert "Traceback" not in result.err
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "runs:\n"
        + "".join(f"  - {{workload: llama31, size: 8b, gpus: {n}}}\n" for n in range(100_000))
    )
    path.unlink()
    result = llmb(llmb_proc, install, "sweep", "--file", str(sweep), "--dry-run")
    assert result.code == 2 and "larger than 1 MiB" in result.err
