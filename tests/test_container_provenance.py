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
from dataclasses import replace
from pathlib import Path

import pytest
from llmb.recipes import references
from llmb.yamlio import load_yaml_file

# The collection's copies, by its name then: NVIDIA/dgxc-benchmarking, renamed NVIDIA/exemplar-performance
# (whose v26.08.00 moved each recipe to <model>/<phase>/<framework>/).
UPSTREAM = Path(__file__).parent / "upstream_copies"
COPIES = UPSTREAM / "NVIDIA+dgxc-benchmarking"
RENAMED = UPSTREAM / "NVIDIA+exemplar-performance"
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
    renamed = RENAMED / f"{tag}.yaml"
    return load_yaml_file(renamed if renamed.exists() else COPIES / f"{tag}.yaml")


def recipe_folder(tag: str, model: str) -> str:
    """Where ``tag`` keeps the recipe of ``model`` (``llama3.1``): its folder, or since v26.08.00 its
    Megatron-Bridge pre-training folder."""
    files = copy(tag)["files"]
    folders = [
        p.rsplit("/", 1)[0] for p in files if p.startswith(f"{model}/") and p.endswith("/README.md")
    ]
    return next((f for f in folders if f.endswith("/pretrain/megatron_bridge")), model)


def lines(tag: str, path: str) -> list[str]:
    recorded = copy(tag)["files"][path].get("lines") or {}
    return [recorded[n] for n in sorted(recorded, key=int)]  # in line order


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
    """v26.08.00 (NVIDIA/exemplar-performance) runs Llama 3.1 on nemo:26.06.01 with other layouts
    (GB200 405B FP8: TP 4, PP 16 at 256-512 GPUs, where v25.12.01 has TP 2 with FSDP at 128-512)."""
    for name in ("megatron-bridge", "nemo2"):
        upstream = host.workload("llama31").variant(name).upstream
        current = upstream.current_release
        folder = recipe_folder(current, "llama3.1")
        said = containers(current, folder, "[Llama 3.1]")
        assert set().union(*said.values()) == {upstream.current_container}, said
        assert len(said) == 3, said  # metadata.yaml, launch.sh and the README's table agree
        assert (
            copy(current)["files"][f"{folder}/README.md"]["blob"]
            != (copy(upstream.release)["files"]["llama3.1/README.md"]["blob"])
        )
    current = host.workload("llama31").variant("megatron-bridge").upstream.current_release
    ours = [t for t in lines("v25.12.01", "llama3.1/README.md") if "405b" in t]
    theirs = [
        t for t in lines(current, f"{recipe_folder(current, 'llama3.1')}/README.md") if "405b" in t
    ]
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
            "recipe (v26.08.00, nemo:26.06.01) prints other layouts",
        ),
        (
            NEMO2_8B,
            "follows: the v25.04.01 recipe (nemo:25.02.01), whose tables these are; the current release's "
            "recipe (v26.08.00, nemo:26.06.01) runs Megatron-Bridge, and the NeMo 2 ones between "
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


# ---------------------------------------------------------------- Nemotron-4: one container per GPU type

NEMOTRON4 = ("v25.12.01", "nemotron4-340b")
HEADINGS = {"## H100": "h100", "## GB200": "gb200", "## GB300": "gb300", "## B200": "b200"}
SECTIONS = {"### GB300 Workloads": "gb300", "### GB200 Workloads": "gb200", "### B200 Workloads": "b200",
            "### H100 Workloads": "h100"}  # fmt: skip


def nemotron4_containers_by_gpu() -> dict[str, dict[str, str]]:
    """What each recorded place of the v25.12.01 nemotron4-340b recipe says each GPU type runs in."""
    tag, folder = NEMOTRON4
    metadata = lines(tag, f"{folder}/metadata.yaml")
    by_gpu, key = {}, None
    for text in metadata[metadata.index("    by_gpu:") + 1 :]:
        if m := re.fullmatch(r"      (\w+):", text):
            key = m.group(1)
        elif m := re.fullmatch(r"        - '(.+)'", text):
            by_gpu[key] = m.group(1)

    def version(text: str) -> str:
        return re.search(r"FW_VERSION=(\S+)", text).group(1)

    # launch.sh: FW_VERSION for gb200 and b200, then for the others; setup.sh: for gb300 and h100, then others
    launch = lines(tag, f"{folder}/launch.sh")
    assert (
        launch[1] == "if [ $GPU_TYPE = gb200 ] || [ $GPU_TYPE = b200 ]; then"
        and launch[3] == "else"
    )
    then, otherwise = version(launch[2]), version(launch[4])
    setup = lines(tag, f"{folder}/setup.sh")
    assert (
        setup[0] == "if [ $GPU_TYPE = gb300 ] || [ $GPU_TYPE = h100 ]; then" and setup[2] == "else"
    )
    first, second = version(setup[1]), version(setup[3])
    readme, section = {}, None
    for text in lines(tag, "README.md"):
        section = SECTIONS.get(text, section)
        if f"]({folder}/README.md)" in text:
            readme[section] = [c.strip() for c in text.split("|")][4]
    nemo = "nvcr.io#nvidia/nemo:"
    gpus = ("h100", "gb200", "gb300", "b200")
    return {
        "metadata.yaml container.images.by_gpu": {
            g: by_gpu.get(g, by_gpu["default"]) for g in gpus
        },
        "launch.sh FW_VERSION": {
            g: nemo + (then if g in ("gb200", "b200") else otherwise) for g in gpus
        },
        "setup.sh FW_VERSION": {
            g: nemo + (first if g in ("gb300", "h100") else second) for g in gpus
        },
        "README.md Container Version": {g: nemo + readme[g] for g in gpus},
    }


def test_nemotron4s_container_is_one_its_recipe_release_runs(host):
    """The v25.12.01 recipe the document flattens runs nemo:25.09.00, and nemo:25.07.01 on GB200 and
    B200: its metadata, launch and set-up scripts and the collection's per-GPU tables agree, and the
    variant's container on each GPU type of its tables (its default image there) is that one."""
    workload = host.workload("nemotron4")
    variant = workload.variant("nemo2")
    said = nemotron4_containers_by_gpu()
    (upstream,) = {tuple(sorted(by_gpu.items())) for by_gpu in said.values()}
    assert dict(upstream) == {
        "h100": "nvcr.io#nvidia/nemo:25.09.00",
        "gb300": "nvcr.io#nvidia/nemo:25.09.00",
        "gb200": "nvcr.io#nvidia/nemo:25.07.01",
        "b200": "nvcr.io#nvidia/nemo:25.07.01",
    }
    ours = {s.gpu: variant.container_for(s.gpu) for s in variant.series}
    assert ours == dict(upstream)
    # the default (a GPU type the recipe has no table for) is the metadata's default
    assert variant.container == variant.container_for(None) == variant.container_for("b300")
    assert variant.container == said["metadata.yaml container.images.by_gpu"]["h100"]
    assert variant.containers() == ("nvcr.io#nvidia/nemo:25.09.00", "nvcr.io#nvidia/nemo:25.07.01")
    title = workload.documents[variant.seed]
    assert "nemo:25.09.00" in title and "nemo:25.07.01 on GB200 and B200" in title
    assert "25.04.01" not in title


def test_nemotron4_records_the_release_its_document_flattens(host, seeds):
    """The document's tables are the v25.12.01 README's, in its order (H100, GB200, GB300, B200, under
    headings the flattened document lost), and the variant says which release and commit that is."""
    tag, folder = NEMOTRON4
    variant = host.workload("nemotron4").variant("nemo2")
    upstream = variant.upstream
    assert (upstream.repository, upstream.release, upstream.commit, upstream.path) == (
        REPOSITORY,
        tag,
        copy(tag)["commit"],
        f"{folder}/README.md",
    )
    recorded = lines(tag, f"{folder}/README.md")
    headings = [HEADINGS[text] for text in recorded if text in HEADINGS]
    assert headings == list(dict.fromkeys(t.gpu for t in variant.series))
    cells = [[c.strip() for c in text.strip("|").split("|")] for text in recorded if "340b" in text]
    ours = (seeds / variant.seed).read_text().splitlines()
    firsts = [ours[i + 2] for i, line in enumerate(ours) if line.startswith("| Size |")]
    first_rows = [[c.strip() for c in row.strip("|").split("|")] for row in firsts]
    # the first row of H100's one table and of each other GPU type's first (weak scaling) one
    assert [first_rows[0], *first_rows[1::2]] == cells
    # the current release has no such recipe: it lists it as deprecated, last in v26.02.01
    deprecated = [t for t in lines(upstream.current_release, "README.md") if "Nemotron4 340B" in t]
    assert [c.strip() for c in deprecated[0].split("|")][-2] == "26.02.01"
    assert (
        upstream.current_container == ""
        and "deprecated, last in v26.02.01" in upstream.current_differs
    )


@pytest.mark.parametrize(
    ("gpu", "gpus", "image"),
    [
        ("gb200", "128", "nvcr.io#nvidia/nemo:25.07.01"),
        ("b200", "128", "nvcr.io#nvidia/nemo:25.07.01"),
        ("h100", "256", "nvcr.io#nvidia/nemo:25.09.00"),
        ("gb300", "128", "nvcr.io#nvidia/nemo:25.09.00"),
    ],
)
def test_a_nemotron4_runs_default_image_is_its_gpu_types(cli, gpu, gpus, image):
    """The image a run launches (the run spec's and the sbatch script's), what the plan says it follows
    and the "measured with" of its figures are the GPU type's container."""
    args = ("nemotron4", "--gpu", gpu, "--dtype", "fp8", "--gpus", gpus)
    run = cli("run", *args, "--backend", "slurm", "--dry-run", "--json")
    assert run.code == 0, run.err
    shown = json.loads(run.out)
    assert shown["run_spec"]["container"] == image
    assert re.findall(r"--container-image=([^'\s]+)", shown["script"]) == [image]
    plan = cli("plan", *args, "--json")
    assert plan.code == 0, plan.err
    follows = json.loads(plan.out)["follows"]
    assert follows["container"] == image
    assert follows["text"].startswith(f"the v25.12.01 recipe (nemo:{image.rsplit(':', 1)[1]})")


def test_llmb_install_imports_each_gpu_types_nemotron4_container(cli):
    def images(*args):
        result = cli("install", "nemotron4", *args, "--dry-run", "--json")
        assert result.code == 0, result.err
        return [s["what"] for s in json.loads(result.out)["steps"] if s["kind"] == "image"]

    assert images() == ["nvcr.io#nvidia/nemo:25.09.00", "nvcr.io#nvidia/nemo:25.07.01"]
    assert images("--gpu", "gb200") == images("--gpu", "b200") == ["nvcr.io#nvidia/nemo:25.07.01"]
    assert images("--gpu", "h100") == images("--gpu", "gb300") == ["nvcr.io#nvidia/nemo:25.09.00"]


def test_the_figures_of_nemotron4_name_their_gpu_types_container(host):
    """Each worked example's "measured with" is its GPU type's container (the 21.542 s GB200 output
    nemo:25.07.01, the 4.31 s H100 example nemo:25.09.00)."""
    workload = host.workload("nemotron4")
    for gpu, dtype, gpus, scaling, container in (
        ("gb200", "fp8", 128, "strong", "25.07.01"),
        ("h100", "bf16", 256, "weak", "25.09.00"),
    ):
        config = references.Configuration("nemo2", "340b", gpu, dtype, gpus, scaling)
        figure = references.find(workload, config)
        assert figure.container == container, (gpu, figure)
        newer = references.find(workload, replace(config, container="26.04.01"))
        assert (
            f"measured with nemo:{container}, older than the run's nemo:26.04.01"
            in newer.describe()
        )


def test_every_workload_names_one_current_release_of_the_collection(host):
    """ "The current release" is one release wherever llmb names it: in plan's ``follows`` line (each
    variant's upstream) and in list's deprecation notes (issue 43: v26.06.01 in one, v26.08.00 in the
    other); and it is the newest release the recorded copies hold."""
    named = {}
    for name, workload in host.workloads().items():
        for variant in workload.variants:
            if variant.upstream is not None and variant.upstream.current_release:
                named[f"{name} {variant.name}"] = variant.upstream.current_release
        if workload.deprecated is not None:
            named[f"{name} deprecated"] = workload.deprecated.release
    assert len(named) >= 5 and set(named.values()) == {"v26.08.00"}, named
    recorded = sorted(p.stem for p in UPSTREAM.glob("*/v*.yaml"))
    assert recorded[-1] == "v26.08.00", recorded
