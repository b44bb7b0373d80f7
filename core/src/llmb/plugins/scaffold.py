"""``llmb plugins new NAME``: a skeleton workload plugin whose own tests pass before its author
changes a line.

The files are templates shipped as package data (``llmb/data/plugin_template/*.tmpl``), filled in
by ``render``: each ``{{key}}`` is replaced by its value, and a key the template names but the
scaffold does not know is an error (no template engine, no dependency). ``TEMPLATES`` says where
each lands in the new directory.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

from llmb.errors import LlmbError, UsageError

# template -> its path in the plugin directory ({package}, {name}: filled in)
TEMPLATES = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "__init__.py.tmpl": "src/{package}/__init__.py",
    "plugin.py.tmpl": "src/{package}/plugin.py",
    "model.py.tmpl": "src/{package}/model.py",
    "workload.yaml.tmpl": "src/{package}/workload.yaml",
    "test_workload.py.tmpl": "tests/test_{name}.py",
}
NAME = re.compile(r"[a-z][a-z0-9]{0,39}")
_KEY = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def render(text: str, values: dict[str, str]) -> str:
    """``text`` with each ``{{key}}`` replaced by ``values[key]``; a key without a value raises."""

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"template key {key!r} has no value; known: {', '.join(sorted(values))}")
        return values[key]

    return _KEY.sub(fill, text)


def yaml_string(text: str) -> str:
    """``text`` as a quoted YAML scalar, which YAML reads back as that string whatever it is: an
    unquoted ``no``, ``off``, ``on``, ``yes``, ``true``, ``false`` or ``null`` is read as a boolean or
    null (YAML 1.1, as PyYAML reads it). A JSON string is a YAML double-quoted one."""
    import json

    return json.dumps(text)


def values_for(name: str, llmb_version: str) -> dict[str, str]:
    """What the templates are filled with for the workload ``name``; the ``*_yaml`` values are those
    the YAML templates take, quoted (``yaml_string``)."""
    document = f"{name}-recipe.md"
    return {
        "name": name,
        "name_yaml": yaml_string(name),
        "title": name[:1].upper() + name[1:],
        "package": f"llmb_plugin_{name}",
        "distribution": f"llmb-plugin-{name}",
        "document": document,
        "document_yaml": yaml_string(document),
        "llmb_version": llmb_version,
    }


def check_name(name: str, taken: dict[str, str]) -> None:
    """Refuse a name that cannot be a workload's, or that is taken here (``taken``: a name -> what
    holds it, e.g. ``"an alias of the installed workload llama31"``)."""
    if not NAME.fullmatch(name):
        raise UsageError(
            f"plugin name {name!r}: expected lower-case letters and digits, starting with a letter "
            f"(at most 40), e.g. qwen3; it becomes the workload's name, llmb-plugin-NAME and "
            f"llmb_plugin_NAME"
        )
    if name in taken:
        raise UsageError(f"plugin name {name!r} is {taken[name]}; pick another")


def taken_names(host) -> dict[str, str]:
    """Every name a new workload may not take here: installed workloads, their aliases, and the
    entry points of installed plugins (one that failed to load still holds its workload's name)."""
    taken: dict[str, str] = {}
    for info in host.plugins():
        taken[info.name] = f"the name of the installed plugin {info.distribution or info.module}"
    for workload in host.workloads().values():
        for alias in workload.aliases:
            taken[alias] = f"an alias of the installed workload {workload.name}"
        taken[workload.name] = "an installed workload's name"
    return taken


def write_skeleton(name: str, target: Path, llmb_version: str) -> list[Path]:
    """Write the skeleton of workload ``name`` into the new directory ``target``; the files written."""
    if target.exists() or target.is_symlink():
        raise UsageError(
            f"{target} already exists; llmb plugins new writes a new directory (choose another with --dir)"
        )
    if not target.parent.is_dir():
        raise UsageError(
            f"{target.parent} is not a directory; create it first or choose another --dir"
        )
    values = values_for(name, llmb_version)
    source = files("llmb").joinpath("data", "plugin_template")
    planned = {
        where.format(package=values["package"], name=name): render(
            source.joinpath(template).read_text(encoding="utf-8"), values
        )
        for template, where in TEMPLATES.items()
    }
    written = []
    try:
        target.mkdir()
        for relative, text in planned.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except (
        OSError
    ) as exc:  # a read-only or full file system: said in one line, what was written kept
        raise LlmbError(
            f"could not write the skeleton into {target}: {exc.strerror or exc} "
            f"({len(written)} of {len(planned)} files written)"
        ) from None
    return written
