"""The worker library (``llmb.install.worker_library``): what a container job imports with
``PYTHONPATH=<install>/python``. llmb and its plugins lie at its top; its copies of llmb's dependencies
(click, PyYAML, pluggy, structlog) only under ``.fallback``, which ``import llmb`` appends after the
interpreter's site-packages, so that the container's own click and PyYAML (which NeMo-Run and
Megatron-Bridge import) win; nothing compiled is copied. A real job on the private Slurm, run by a
container-like Python (a venv with its own click and PyYAML, no pluggy or structlog), says so in its
first line; a worker whose environment breaks a dependency says which and exits 1."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from llmb.install import worker_library

DEPENDENCIES = {"pluggy": "pluggy", "structlog": "structlog", "click": "click", "PyYAML": "yaml"}
MARKER = '\n__llmb_test_origin__ = "container"\n'


def test_the_library_holds_llmb_and_its_plugins_at_the_top_and_the_dependencies_only_under_fallback(
    tmp_path,
):
    install = tmp_path / "install"
    library = Path(worker_library.build(str(install)))
    described = worker_library.contents()
    ours = sorted(
        p for d, info in described.items() if d not in DEPENDENCIES for p in info["packages"]
    )
    # llmb, backends, workloads
    assert "llmb" in ours and "llmb_backend_slurm" in ours and len(ours) >= 6
    top = {p.name for p in library.iterdir() if not p.name.endswith(".dist-info")}
    assert top == {*ours, ".fallback", worker_library.STAMP}
    fallback = library / ".fallback"
    assert {p.name for p in fallback.iterdir() if not p.name.endswith(".dist-info")} == set(
        DEPENDENCIES.values()
    )
    assert {p.name.split("-")[0] for p in fallback.glob("*.dist-info")} == set(DEPENDENCIES)
    assert not [p for p in library.rglob("*") if p.suffix in (".so", ".pyd", ".dylib")]
    stamp = json.loads((library / worker_library.STAMP).read_text())
    assert stamp["packages"] == {".": ours, ".fallback": sorted(DEPENDENCIES.values())}
    assert worker_library.current(str(install)) == worker_library.versions(described)
    # A library an older llmb laid out (dependencies beside llmb, a stamp of versions only) is built again.
    (library / worker_library.STAMP).write_text(json.dumps(worker_library.versions(described)))
    assert worker_library.current(str(install)) is None

    # Without site-packages (-S) the library alone serves: .fallback comes last, PyYAML runs as pure Python.
    probe = (
        "import sys, llmb, yaml, pluggy; print(sys.path[-1]); print(yaml.__with_libyaml__, yaml.safe_load('a: 1'));"
        "from llmb.plugins.host import PluginHost; print(sorted(PluginHost().workloads()))"
    )
    shown = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(library), "LLMB_NO_CACHE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == str(fallback) and lines[1] == "False {'a': 1}" and "llama31" in lines[2]


def test_import_llmb_changes_nothing_where_there_is_no_fallback():
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; before = list(sys.path); import llmb; print(sys.path == before)",
        ],
        capture_output=True,
        text=True,
    )
    assert shown.stdout.strip() == "True", shown.stderr


def container_python(
    root: Path, *, everything_else: bool, click: str | None = "copy", yaml: str | None = "copy"
) -> Path:
    """A venv standing for NVIDIA's container: its site-packages hold copies of this environment's click
    and PyYAML (pure Python, marked, their version ending in +container), or a broken one ("broken": its
    __init__ raises), or none (None); no pluggy, structlog or llmb. With ``everything_else``, the rest of
    this environment's site-packages too (torch, numpy, ...), linked."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    here = Path(importlib.metadata.distribution("click").locate_file(""))
    if everything_else:
        skip = (
            "click",
            "yaml",
            "_yaml",
            "pyyaml",
            "pluggy",
            "structlog",
            "llmb",
            "__editable__",
            "__pycache__",
        )
        for entry in here.iterdir():
            if not entry.name.lower().startswith(skip) and entry.suffix != ".pth":
                (site / entry.name).symlink_to(entry)
    for dist, package, how in (("click", "click", click), ("PyYAML", "yaml", yaml)):
        if how is None:
            continue
        source = Path(list(importlib.util.find_spec(package).submodule_search_locations)[0])
        shutil.copytree(
            source, site / package, ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )
        init = site / package / "__init__.py"
        if how == "broken":
            init.write_text(f"raise RuntimeError('this container\\'s {package} is broken')\n")
        else:
            init.write_text(init.read_text() + MARKER)
        (meta,) = [
            p for p in here.glob("*.dist-info") if p.name.lower().startswith(dist.lower() + "-")
        ]
        shutil.copytree(meta, site / meta.name)
        version = importlib.metadata.version(dist)
        metadata = site / meta.name / "METADATA"
        metadata.write_text(
            metadata.read_text().replace(
                f"\nVersion: {version}\n", f"\nVersion: {version}+container\n", 1
            )
        )
    return python


def worker_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("[llmb] worker:"))


@pytest.mark.slurm
def test_a_slurm_job_run_by_a_container_like_python_imports_the_containers_click_and_pyyaml(
    llmb_proc, slurm, tmp_path
):
    """As in the container: PYTHONPATH=<install>/python first, then the interpreter's own site-packages
    (here a venv's: its click and PyYAML, torch, no pluggy or structlog), then llmb's .fallback."""
    pytest.importorskip(
        "torch", reason="the torch engine needs torch (./dev.sh installs torch==2.13.0)"
    )
    install = tmp_path / "install"
    library = worker_library.build(str(install))
    python = container_python(tmp_path / "container", everything_else=True)
    env = {
        "LLMB_INSTALL": str(install),
        "LLMB_NO_CACHE": "1",
        "LLMB_BACKEND": "slurm",
        "LLMB_SLURM_PYTHON": str(python),
        **slurm.env(),
    }
    # --bare runs LLMB_SLURM_PYTHON; --env PYTHONPATH= puts the library first, as a container run's script does.
    result = llmb_proc(
        "run",
        "llama31",
        "--size",
        "8b",
        "--gpu",
        "h100",
        "--dtype",
        "bf16",
        "--proxy",
        "tiny",
        "--bare",
        "--gpus",
        "1",
        "--backend",
        "slurm",
        "--env",
        f"PYTHONPATH={library}",
        "--json",
        env=env,
        timeout=600,
    )
    assert result.out.strip(), result.err[-3000:]
    summary = json.loads(result.out)
    log = Path(summary["log"]).read_text()
    assert result.code == 0 and summary["state"] == "SUCCEEDED", log[-3000:]
    v = {dist: importlib.metadata.version(dist) for dist in DEPENDENCIES}
    version = subprocess.run(
        [
            str(python),
            "-c",
            "import platform; print(platform.python_version(), platform.machine())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert worker_line(log) == (
        f"[llmb] worker: Python {version[0]} ({version[1]}); click {v['click']}+container (the environment's), "
        f"PyYAML {v['PyYAML']}+container (the environment's), pluggy {v['pluggy']} (llmb's copy), "
        f"structlog {v['structlog']} (llmb's copy)"
    )
    # The same interpreter and path: the modules imported are the container's marked copies and llmb's.
    probe = (
        "import llmb, click, yaml, pluggy, structlog; print(click.__llmb_test_origin__, yaml.__llmb_test_origin__, "
        "llmb.__file__, pluggy.__file__, structlog.__file__)"
    )
    shown = subprocess.run(
        [str(python), "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": library, "PATH": "/usr/bin:/bin"},
    ).stdout.split()
    assert shown[:2] == ["container", "container"] and shown[2].startswith(f"{library}/llmb/")
    assert shown[3].startswith(f"{library}/.fallback/pluggy/") and shown[4].startswith(
        f"{library}/.fallback/structlog/"
    )


@pytest.mark.parametrize("case", ["broken PyYAML", "no pluggy at all"])
def test_a_worker_whose_environment_breaks_a_dependency_says_which_first_and_exits_1(
    tmp_path, case
):
    library = Path(worker_library.build(str(tmp_path / "install")))
    # the environment's copy is found first, and raises: llmb's copy cannot help
    if case == "broken PyYAML":
        python = container_python(tmp_path / "container", everything_else=False, yaml="broken")
        expected = "PyYAML (RuntimeError: this container's yaml is broken)"
    else:  # neither the environment nor the library has it
        python = container_python(tmp_path / "container", everything_else=False)
        shutil.rmtree(library / ".fallback" / "pluggy")
        expected = "pluggy (ModuleNotFoundError: No module named 'pluggy')"
    shown = subprocess.run(
        [str(python), "-m", "llmb.worker", str(tmp_path / "run.json")],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(library), "PATH": "/usr/bin:/bin"},
    )
    assert shown.returncode == 1 and shown.stdout == "", shown.stderr
    first = shown.stderr.splitlines()[0]
    assert re.fullmatch(
        r"\[llmb\] worker: Python \S+ \(\S+\); cannot import what llmb needs: (.*)", first
    ), first
    assert first.endswith(expected) and "Traceback" not in shown.stderr


def installed_distribution(
    site: Path,
    name: str,
    entry_points: dict[str, str],
    files: dict[str, str],
    *,
    editable: Path | None = None,
) -> None:
    """A distribution as pip leaves it in ``site``: its files, and a .dist-info whose RECORD lists them
    (an editable install's lists none: its direct_url.json names the project instead)."""
    for relative, text in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(text)
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[llmb]\n{lines}" if entry_points else "")
    record = [] if editable else list(files)
    if editable:
        url = editable.as_uri()
        (info / "direct_url.json").write_text(
            json.dumps({"url": url, "dir_info": {"editable": True}})
        )
        record.append(f"{info.name}/direct_url.json")
    record += [f"{info.name}/METADATA", f"{info.name}/entry_points.txt", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in record))


LEFT_OUT = "llmb: warning: plugin left out of the worker library: it will not load on the cluster"


def install_library(llmb_proc, tmp_path: Path, *path: Path):
    """``llmb install`` of the worker library alone, with ``path`` on PYTHONPATH: its result, its library."""
    install = tmp_path / "install"
    result = llmb_proc(
        "install",
        "--no-images",
        "--no-huggingface",
        "--json",
        env={
            "LLMB_INSTALL": str(install),
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": os.pathsep.join(str(p) for p in path),
        },
    )
    assert result.code == 0, result.err
    (step,) = [s for s in result.json()["steps"] if s["kind"] == "library"]
    assert step["status"] == "done", step
    library = install / "python"
    top = {p.name for p in library.iterdir() if not p.name.endswith(".dist-info")}
    warnings = [line for line in result.err.splitlines() if line.startswith("llmb: warning:")]
    return library, top, warnings


@pytest.mark.parametrize(
    "attack",
    [
        "entry point inside yaml",
        "files in another's package",
        "the container's name",
        "editable, elsewhere",
    ],
)
def test_a_plugin_cannot_put_another_package_in_front_of_the_containers(
    llmb_proc, tmp_path, attack
):
    """Issue 32, item 3: the library copied the top-level package of every entry point's module, so a
    plugin could put this machine's yaml (or another distribution's package, or a package named as the
    container's framework) at the front of the container's path. Now such an entry point is left out, with
    one warning naming the plugin, the package and whose it is, and its plugin is not in the library."""
    site, path = tmp_path / "site", [tmp_path / "site"]
    if attack == "entry point inside yaml":  # PyYAML's own yaml, nothing of the plugin's in it
        installed_distribution(site, "llmb-plugin-evil", {"evil": "yaml.constructor"}, {})
        package, reason = "yaml", "yaml is PyYAML's, not llmb-plugin-evil's"
    elif attack == "files in another's package":
        # the plugin installs a module into victim-lib's package
        installed_distribution(site, "victim-lib", {}, {"victim/__init__.py": "VICTIM = 1\n"})
        installed_distribution(
            site, "llmb-plugin-evil", {"evil": "victim.hook"}, {"victim/hook.py": "\n"}
        )
        package, reason = "victim", "victim is victim-lib's, not llmb-plugin-evil's"
    elif attack == "the container's name":
        # its own package, but named as NeMo's, which the container has
        files = {"nemo/__init__.py": "\n", "nemo/plugin.py": "\n"}
        installed_distribution(site, "llmb-plugin-evil", {"evil": "nemo.plugin"}, files)
        package, reason = "nemo", "nemo is a package of the container's own"
    else:  # an editable install whose entry point's package is not in its project
        (tmp_path / "elsewhere" / "strayed").mkdir(parents=True)
        (tmp_path / "elsewhere" / "strayed" / "__init__.py").write_text("\n")
        (tmp_path / "project").mkdir()
        installed_distribution(
            site, "llmb-plugin-evil", {"evil": "strayed"}, {}, editable=tmp_path / "project"
        )
        path.append(tmp_path / "elsewhere")
        package, reason = "strayed", "strayed lies outside llmb-plugin-evil's project"
    library, top, warnings = install_library(llmb_proc, tmp_path, *path)
    assert package not in top and {"llmb", "llmb_plugin_llama31", "llmb_backend_slurm"} <= top, top
    assert not list(library.glob("llmb_plugin_evil-*"))
    (warning,) = warnings
    assert warning.startswith(
        f"{LEFT_OUT} (plugin: evil; distribution: llmb-plugin-evil; package: {package}; reason: {reason}"
    ), warning


def test_of_a_plugin_the_library_holds_what_its_distribution_installed(llmb_proc, tmp_path):
    """Only the files its RECORD lists (not what else lies in the directory), its entry points less those
    left out; an editable install's package from its project. A job's Python then loads both plugins."""
    site, project = tmp_path / "site", tmp_path / "project"
    installed_distribution(
        site,
        "llmb-plugin-good",
        {"good": "llmb_good.plugin", "good_yaml": "yaml"},
        {
            "llmb_good/__init__.py": "\n",
            "llmb_good/plugin.py": "\n",
            "llmb_good/data.yaml": "a: 1\n",
        },
    )
    (site / "llmb_good" / "left_behind.txt").write_text("not the distribution's\n")
    # editable: the package in the project's src, on the path as the install's .pth puts it
    (project / "src" / "llmb_editable").mkdir(parents=True)
    (project / "src" / "llmb_editable" / "__init__.py").write_text("\n")
    installed_distribution(
        site, "llmb-plugin-editable", {"editable": "llmb_editable"}, {}, editable=project
    )
    library, top, warnings = install_library(llmb_proc, tmp_path, site, project / "src")
    assert {"llmb_good", "llmb_editable"} <= top and "yaml" not in top, top
    assert sorted(p.name for p in (library / "llmb_good").iterdir()) == [
        "__init__.py",
        "data.yaml",
        "plugin.py",
    ]
    (good,) = library.glob("llmb_plugin_good-*.dist-info")
    assert (good / "entry_points.txt").read_text().strip() == "[llmb]\ngood = llmb_good.plugin"
    (warning,) = warnings
    assert warning.startswith(
        f"{LEFT_OUT} (plugin: good_yaml; distribution: llmb-plugin-good; package: yaml"
    )
    # what a job imports: both plugins load from the library
    probe = (
        "from llmb.plugins.host import PluginHost; "
        "print(' '.join(sorted(p.name + '=' + p.status for p in PluginHost().plugins())))"
    )
    shown = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(library), "LLMB_NO_CACHE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert shown.returncode == 0 and "warning" not in shown.stderr, shown.stderr
    names = set(shown.stdout.split())
    assert {"good=loaded", "editable=loaded", "llama31=loaded", "slurm=loaded"} <= names, names
    assert not [n for n in names if n.startswith("good_yaml=")]
