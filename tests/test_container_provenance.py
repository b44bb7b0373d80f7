"""Which public recipe each document is, and the container its tables were measured with (issue 31,
item 10), checked against recorded excerpts of the public repository at the commit it names.

tests/upstream_copies/NVIDIA+dgxc-benchmarking/<tag>.yaml holds, per release tag of NVIDIA's LLM
Benchmarking Collection, the few lines that state a recipe's container (its ``metadata.yaml``
``container.images``, its launch and set-up scripts' ``FW_VERSION`` and ``enroot import``, the top-level
README's "Container Version" column), each with its line number, and the git blob id of each recipe
README a seed document is a byte copy of. A variant's container is its default image: the one
``llmb run``, ``llmb install`` and every "measured with nemo:..." note use, so it must be the container
the document's tables were measured with. Where the collection's current release runs another recipe,
``llmb plan`` says which one llmb follows.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from llmb.yamlio import load_yaml_file

COPIES = Path(__file__).parent / "upstream_copies" / "NVIDIA+dgxc-benchmarking"
REPOSITORY = "NVIDIA/dgxc-benchmarking"

# (workload, variant) -> the release tag and recipe folder its document is, and how the top-level README
# names the recipe in its benchmark table. The Llama 3.1 variants also record theirs (``upstream:``).
DOCUMENTS = {
    ("llama31", "megatron-bridge"): ("v25.12.01", "llama3.1", "[Llama 3.1]"),
    ("llama31", "nemo2"): ("v25.04.01", "llama3.1", " Llama 3.1 "),
    ("llama4", "nemo2"): ("v25.05.05", "llama4", " Llama4 Maverick "),
    ("nemotronh", "nemo2"): ("v25.05.05", "nemotronh", " Nemotron-H "),
}


def copy(tag: str) -> dict:
    return load_yaml_file(COPIES / f"{tag}.yaml")


def lines(tag: str, path: str) -> list[str]:
    return [text for _, text in sorted((copy(tag)["files"][path].get("lines") or {}).items())]


def containers(tag: str, folder: str, model: str) -> dict[str, set[str]]:
    """Every container the recorded lines of ``folder``'s recipe at ``tag`` name, by where they say it."""
    files = copy(tag)["files"]
    found: dict[str, set[str]] = {}
    if f"{folder}/metadata.yaml" in files:
        found["metadata.yaml container.images"] = {
            m.group(1)
            for text in lines(tag, f"{folder}/metadata.yaml")
            if (m := re.search(r"- '(.+)'", text))
        }
    for script in ("launch.sh", "setup.sh"):
        if f"{folder}/{script}" not in files:
            continue
        recorded = lines(tag, f"{folder}/{script}")
        versions = {m.group(1) for t in recorded if (m := re.match(r"export FW_VERSION=(\S+)", t))}
        found[f"{script} FW_VERSION"] = {f"nvcr.io#nvidia/nemo:{v}" for v in versions}
        for text in recorded:  # the image the set-up script imports
            if m := re.search(r"docker://(\S+?)\"?$", text):
                found[f"{script} enroot import"] = {
                    m.group(1).replace("${FW_VERSION}", v) for v in versions
                }
    header, *rows = [t for t in lines(tag, "README.md") if "Container Version" in t or model in t]
    column = [c.strip() for c in header.split("|")].index(
        next(c.strip() for c in header.split("|") if c.strip().endswith("Container Version"))
    )
    found["README.md Container Version"] = {
        f"nvcr.io#nvidia/nemo:{[c.strip() for c in row.split('|')][column]}"
        for row in rows
        if model in row
    }
    return found


def git_blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def variants(host):
    for workload_name in ("llama31", "llama4", "nemotronh"):
        workload = host.workload(workload_name)
        for variant in workload.variants:
            yield workload, variant


# ---------------------------------------------------------------- the recorded copies themselves


def test_each_copy_names_its_repository_tag_and_commit_and_every_file_at_that_commit():
    for path in sorted(COPIES.glob("*.yaml")):
        data = load_yaml_file(path)
        assert (data["repository"], data["tag"]) == (REPOSITORY, path.stem)
        assert re.fullmatch(r"[0-9a-f]{40}", data["commit"])
        for name, entry in data["files"].items():
            assert entry["url"] == f"https://github.com/{REPOSITORY}/blob/{data['commit']}/{name}"
            assert entry.get("blob") is None or re.fullmatch(r"[0-9a-f]{40}", entry["blob"])


# ---------------------------------------------------------------- each document's release and container


def test_every_variant_of_the_checked_workloads_has_its_document_here(host):
    assert sorted((w.name, v.name) for w, v in variants(host)) == sorted(DOCUMENTS)


@pytest.mark.parametrize("key", sorted(DOCUMENTS), ids="/".join)
def test_the_variants_container_is_the_one_its_recipe_release_runs(host, key):
    """The metadata, the scripts and the top-level README of the release agree on one container; the
    variant's container (its default image) is it, and the document's title names it."""
    tag, folder, model = DOCUMENTS[key]
    workload = host.workload(key[0])
    variant = workload.variant(key[1])
    said = containers(tag, folder, model)
    assert len(said) >= 2 and all(said.values()), said
    (upstream,) = set().union(*said.values())
    assert variant.container == upstream, (
        f"{key}: llmb's default image {variant.container} is not {upstream}, the container {REPOSITORY} "
        f"{tag} runs {folder}/README.md with ({said})"
    )
    assert f"nemo:{upstream.rsplit(':', 1)[1]}" in workload.documents[variant.seed]


@pytest.mark.parametrize("key", [k for k in sorted(DOCUMENTS) if k[0] == "llama31"], ids="/".join)
def test_the_variant_records_the_release_and_commit_its_document_is(host, key):
    tag, folder, _ = DOCUMENTS[key]
    upstream = host.workload(key[0]).variant(key[1]).upstream
    assert upstream is not None
    assert (upstream.repository, upstream.release, upstream.commit, upstream.path) == (
        REPOSITORY,
        tag,
        copy(tag)["commit"],
        f"{folder}/README.md",
    )


@pytest.mark.parametrize("key", sorted(DOCUMENTS), ids="/".join)
def test_the_seed_document_is_that_releases_readme_byte_for_byte(host, seeds, key):
    tag, folder, _ = DOCUMENTS[key]
    seed = host.workload(key[0]).variant(key[1]).seed
    assert git_blob_id(seeds / seed) == copy(tag)["files"][f"{folder}/README.md"]["blob"]


def test_the_current_release_runs_another_llama31_recipe_and_the_variants_say_which(host):
    """v26.06.01 runs Llama 3.1 on nemo:26.04.01 with other layouts (GB200 405B FP8: TP 4, PP 16 at
    256-512 GPUs, where v25.12.01 has TP 2 with FSDP at 128-512)."""
    for name in ("megatron-bridge", "nemo2"):
        upstream = host.workload("llama31").variant(name).upstream
        current = upstream.current_release
        said = containers(current, "llama3.1", "[Llama 3.1]")
        assert set().union(*said.values()) == {upstream.current_container}, said
        assert (
            copy(current)["files"]["llama3.1/README.md"]["blob"]
            != (copy(upstream.release)["files"]["llama3.1/README.md"]["blob"])
        )
    ours = [t for t in lines("v25.12.01", "llama3.1/README.md") if "405b" in t]
    theirs = [t for t in lines("v26.06.01", "llama3.1/README.md") if "405b" in t]
    cells = [[c.strip() for c in row.split("|")[1:-1]] for row in ours + theirs]
    assert [(c[1], c[6], c[7]) for c in cells] == [("128-512", "2", "1"), ("256-512", "4", "16")]


# ---------------------------------------------------------------- the 405B FP8 figure at 512 H100s


def test_the_nemo2_405b_fp8_figure_at_512_h100s_is_labelled_with_the_container_it_came_from(cli):
    """12.37 s is the v25.04.01 recipe's (nemo:25.02.01); the recipe that runs nemo:25.04.01 (v25.05.01
    to v25.05.05) prints 13.020 s for the same configuration, so the figure is not nemo:25.04.01's."""
    header, row = lines("v25.04.01", "llama3.1/README.md")
    at_512 = [c.strip() for c in header.split("|")].index("512x H100 GPUs")
    assert [c.strip() for c in row.split("|")][at_512] == "12.37"
    assert "13.020" in lines("v25.05.05", "llama3.1/README.md")[-1]
    assert containers("v25.05.05", "llama3.1", " Llama 3.1 ")["metadata.yaml container.images"] == {
        "nvcr.io#nvidia/nemo:25.04.01"
    }

    result = cli(
        "plan", "llama31", "--variant", "nemo2", "--size", "405b", "--gpu", "h100", "--dtype", "fp8",
        "--gpus", "512", "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    expected = json.loads(result.out)["expected"]
    assert expected["step_time_s"] == 12.37
    assert "nemo:25.02.01" in expected["source"] and "nemo:25.04.01" not in expected["source"]


# ---------------------------------------------------------------- llmb plan says which recipe it follows

MB_405B = ("--size", "405b", "--gpu", "gb200", "--dtype", "fp8", "--gpus", "128")
NEMO2_8B = ("--variant", "nemo2", "--size", "8b", "--gpu", "h100", "--dtype", "bf16", "--gpus", "8")
NEMOTRONH = ("nemotronh", "--gpu", "h100", "--dtype", "fp8", "--gpus", "32")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            MB_405B,
            "follows: the v25.12.01 recipe (nemo:25.11.01), whose tables these are; the current release's "
            "recipe (v26.06.01, nemo:26.04.01) prints other layouts",
        ),
        (
            NEMO2_8B,
            "follows: the v25.04.01 recipe (nemo:25.02.01), whose tables these are; the current release's "
            "recipe (v26.06.01, nemo:26.04.01) runs Megatron-Bridge, and the NeMo 2 ones between "
            "(v25.05 to v25.08.02, nemo:25.04.01 to nemo:25.07.01) print other figures",
        ),
    ],
    ids=["megatron-bridge", "nemo2"],
)
def test_plan_says_which_recipe_it_follows_and_why(cli, monkeypatch, args, line):
    monkeypatch.setenv("COLUMNS", "400")
    result = cli("plan", "llama31", *args)
    assert result.code == 0, result.err
    assert result.out.splitlines()[2] == line
    shown = json.loads(cli("plan", "llama31", *args, "--json").out)["follows"]
    assert shown["text"] == line.removeprefix("follows: ")
    release = line.split()[2]
    assert (shown["release"], shown["commit"]) == (release, copy(release)["commit"])
    assert shown["container"].endswith(line.split("(")[1].split(")")[0])


def test_plan_of_a_workload_without_a_recorded_recipe_has_no_follows_line(cli):
    result = cli("plan", *NEMOTRONH)
    assert result.code == 0, result.err
    assert not any(line.startswith("follows:") for line in result.out.splitlines())
    shown = json.loads(cli("plan", *NEMOTRONH, "--json").out)
    assert shown["follows"] is None


# ---------------------------------------------------------------- known: Nemotron-4's label


@pytest.mark.xfail(
    strict=True,
    reason="seeds/nemotron4-340b.md flattens the v25.10-v25.12.02 nemotron4-340b recipe, which runs "
    "nemo:25.09.00 (nemo:25.07.01 on GB200 and B200, metadata.yaml container.images.by_gpu); llmb labels "
    "it nemo:25.04.01 and has one container per variant, not per GPU type",
)
def test_nemotron4s_container_is_one_its_recipe_release_runs(host):
    said = {
        m.group(1)
        for text in lines("v25.12.01", "nemotron4-340b/metadata.yaml")
        if (m := re.search(r"- '(.+)'", text))
    }
    assert host.workload("nemotron4").variant("nemo2").container in said
