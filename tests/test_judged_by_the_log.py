"""A run is judged only by what its log proves (issue 40, items 1 and 2), through the real CLI.

What a log states of its run (its iteration lines' global batch size; Megatron-LM's arguments block;
Megatron-Bridge's configuration summary; torchtitan's and Lightning's set-up lines) is held against the
run's name and its records (recipe.json), and every field that changes the work is part of the key the
published figure is found by. Where they disagree the verdict is withheld (NOT_COMPARED, naming the
disagreement), never a pass. A record that holds an impossible value marks its run with the reason;
every command still ends normally.

The logs are synthetic, in the formats of the real ones (benchmarks/loggen.py; Megatron-LM's
``print_args`` and ``validate_args`` lines, Megatron-Bridge 0.4's ``log_non_default_values``).
"""

from __future__ import annotations

import json
import sqlite3

import loggen
import pytest
from experiment_dirs import make_run

MB_FP8 = "pretrain_llama3_8b_fp8_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs2_gbs128"
MB_BF16 = "pretrain_llama3_8b_bf16_gpus8_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs4_gbs128"
SUMMARY_MS = 4280.041797283177  # the performance summary's B200 FP8 8-GPU figure (llmb plan)
NEMO2_MS = 12270.0  # the NeMo 2 recipe's H100 BF16 8-GPU figure
STEPS = range(1, 51)


def lines(ms: float, tflops: float = 600.0, gbs: int = 128) -> list[str]:
    return list(
        loggen.megatron_bridge_lines(
            STEPS, step_ms=dict.fromkeys(STEPS, ms), tflops=dict.fromkeys(STEPS, tflops), gbs=gbs
        )
    )


def arguments(**values) -> list[str]:
    """Megatron-LM's print_args block: ``  name ...... value`` between its two rules."""
    return [
        "------------------------ arguments ------------------------",
        *(f"  {name} {'.' * (48 - len(name))} {value}" for name, value in values.items()),
        "-------------------- end of arguments ---------------------",
    ]


def recipe(**changes) -> dict:
    record = {
        "workload": "llama31",
        "variant": "megatron-bridge",
        "size": "8b",
        "dtype": "bf16",
        "gpus": 8,
        "gbs": 128,
        "seq_len": 8192,
        "gpu": "h100",
    }
    return {**record, **changes}


def compared(cli, run, *flags: str):
    result = cli("compare", str(run), "--json", *flags)
    [row] = json.loads(result.out)
    [verdict] = row["verdicts"]
    return result.code, verdict


# ----------------------------------------------------------------- item 1: the three wrong PASSes


def test_a_log_whose_global_batch_is_not_its_names_is_not_compared(cli, tmp_path):
    """A Megatron-Bridge log whose own lines say global batch size 1 in a run named ..._gbs128 passed at
    1022.5% by step time."""
    run = make_run(tmp_path, MB_FP8, lines(SUMMARY_MS / 10.225, gbs=1))
    code, verdict = compared(cli, run, "--gpu", "b200")
    assert (code, verdict["outcome"]) == (3, "not_compared"), verdict["detail"]
    assert (
        "the log's global batch size is 1 (its iteration lines) but its experiment's name says 128"
        in verdict["detail"]
    )
    # what the log measured is still reported, from the log's own batch
    [row] = cli("results", str(run), "--gpu", "b200", "--format", "json").json()
    assert row["status"] == "success"
    assert row["tokens_per_s"] == pytest.approx(8192 * 1 / (row["time_mean_ms"] / 1000))


def test_a_cpu_run_recorded_as_an_h100_is_held_against_its_peak_and_never_compared(cli, tmp_path):
    """recipe.json with gpu h100, no proxy, device cpu: the plausibility check was skipped and 6,326
    TFLOP/s/GPU passed. Now no record turns the check off, and a CPU's figures are never a GPU's."""
    impossible = make_run(
        tmp_path / "a", MB_BF16, lines(1200.0, tflops=6326.0), recipe=recipe(device="cpu")
    )
    code, verdict = compared(cli, impossible)
    assert (code, verdict["outcome"]) == (1, "implausible"), verdict["detail"]
    assert (
        "6,326.0 TFLOP/s/GPU (on the log) is above the h100's BF16 dense peak of 989"
        in verdict["detail"]
    )

    possible = make_run(
        tmp_path / "b",
        MB_BF16,
        [*lines(NEMO2_MS, tflops=500.0)],
        recipe=recipe(device="cpu", model_flops_per_sample=1e9),
    )
    code, verdict = compared(cli, possible)
    assert (code, verdict["outcome"]) == (3, "not_compared"), verdict["detail"]
    assert "the run computed on the CPU (its records say device cpu)" in verdict["detail"]


def test_a_run_of_another_sequence_length_is_not_compared(cli, tmp_path):
    """recipe.json with seq_len 1 passed: the reference lookup ignored the sequence length."""
    run = make_run(
        tmp_path, MB_BF16, lines(NEMO2_MS / 1.02, tflops=500.0), recipe=recipe(seq_len=1)
    )
    code, verdict = compared(cli, run)
    assert (code, verdict["outcome"]) == (3, "not_compared"), verdict["detail"]
    assert (
        "the run's sequence length is 1, not the published recipe's 8,192: no published figure "
        "measured its work" in verdict["detail"]
    )


def test_the_same_run_that_agrees_with_itself_passes(cli, tmp_path):
    """The checks are not a blanket refusal: a log whose statements agree with its records passes."""
    said = arguments(
        global_batch_size=128, seq_length=8192, world_size=8, num_layers=32, bf16=True, fp8=None
    )
    run = make_run(
        tmp_path, MB_BF16, [*said, *lines(NEMO2_MS / 1.02, tflops=500.0)], recipe=recipe()
    )
    code, verdict = compared(cli, run)
    assert (code, verdict["outcome"]) == (0, "pass"), verdict["detail"]


# ------------------------------------------------------ item 1: what the log states, field by field


@pytest.mark.parametrize(
    ("stated", "doubt"),
    [
        (
            arguments(seq_length=4096),
            "the log's sequence length is 4096 ('seq_length ....",
        ),
        (arguments(world_size=16), "the log's GPU count is 16 ("),
        (arguments(num_layers=16), "the log's layer count is 16 ("),
        (arguments(micro_batch_size=2), "the log's micro batch size is 2 ("),
        (arguments(bf16=True, fp8="hybrid"), "the log's precision is fp8 ("),
        (
            [
                "using world size: 16, data-parallel size: 16, context-parallel size: 1, hierarchical "
                "context-parallel sizes: None, tensor-model-parallel size: 1, encoder-tensor-model-parallel "
                "size: 0, pipeline-model-parallel size: 1, encoder-pipeline-model-parallel size: 0"
            ],
            "the log's GPU count is 16 ('using world size: 16",
        ),
        (
            [
                "",
                "=" * 70,
                "Configuration Summary (Non-Default Values vs Megatron Core)",
                "=" * 70,
                "",
                "[model] Non-default values (vs Mcore TransformerConfig):",
                "  fp8: 'hybrid'  (Mcore default: None)",
                "  num_layers: 32  (Mcore default: 0)",
                "",
                "-" * 70,
                "Other Configuration Values:",
                "-" * 70,
                "",
                "[train]:",
                "  global_batch_size: 128",
                "  micro_batch_size: 2",
                "",
                "=" * 70,
            ],
            "the log's micro batch size is 2 ('micro_batch_size: 2') but its recipe.json says 4",
        ),
    ],
    ids=[
        "seq-arguments",
        "gpus-arguments",
        "layers",
        "mbs",
        "dtype",
        "world-size-line",
        "mb-summary",
    ],
)
def test_what_the_log_states_is_held_against_the_run_s_records(cli, tmp_path, stated, doubt):
    record = recipe(mbs=4, tp=1, pp=1, cp=1, layers=32)
    run = make_run(
        tmp_path, MB_BF16, [*stated, *lines(NEMO2_MS / 1.02, tflops=500.0)], recipe=record
    )
    code, verdict = compared(cli, run)
    assert (code, verdict["outcome"]) == (3, "not_compared"), verdict["detail"]
    assert doubt in verdict["detail"]
    # results says why too, as a note, and never names a published figure for the run
    [row] = cli("results", str(run), "--format", "json").json()
    assert any(doubt in note for note in row["notes"]), row["notes"]
    assert row["reference_step_time_ms"] is None


def test_a_log_that_states_two_values_for_one_field_is_not_compared(cli, tmp_path):
    run = make_run(
        tmp_path,
        MB_BF16,
        [  # iterations 1-39 at GBS 128, 40-50 at 64: both inside the window 35-44
            *lines(NEMO2_MS / 1.02, tflops=500.0)[:78],
            *lines(NEMO2_MS / 1.02, tflops=500.0, gbs=64)[78:],
        ],
    )
    code, verdict = compared(cli, run, "--gpu", "h100")
    assert verdict["outcome"] == "not_compared", verdict["detail"]
    assert "the log's iteration lines state more than one global batch size: " in verdict["detail"]
    assert "128 and 64" in verdict["detail"] or "64 and 128" in verdict["detail"]


def test_a_recipe_json_that_contradicts_its_experiment_s_name_is_not_compared(cli, tmp_path):
    run = make_run(tmp_path, MB_BF16, lines(NEMO2_MS / 1.02, tflops=500.0), recipe=recipe(gpus=16))
    code, verdict = compared(cli, run)
    assert verdict["outcome"] == "not_compared", verdict["detail"]
    assert "its recipe.json's GPU count is 16 but its experiment's name says 8" in verdict["detail"]


def test_torchtitan_and_lightning_set_up_lines_state_batch_sequence_and_gpus(tmp_path):
    from llmb.results.formats import BUILTIN_PARSERS
    from llmb.results.scan import scan

    log = tmp_path / "log.txt"
    log.write_text(
        "[titan] 2025-04-03 16:30:01,100 - root - INFO - Building 2-D device mesh with ['dp_shard', 'tp'], "
        "[4, 2]\n"
        "[titan] 2025-04-03 16:30:02,100 - root - INFO - Trainer is initialized with local batch size 8, "
        "global batch size 32, gradient accumulation steps 1, sequence length 8192, total steps 1000 "
        "(warmup 200)\n"
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16\n"
    )
    found = scan(str(log), list(BUILTIN_PARSERS)).findings["statements"]
    assert {(s.field, s.value) for s in found} == {
        ("gpus", 8),
        ("gbs", 32),
        ("seq_len", 8192),
        ("gpus", 16),
    }


# ------------------------------------------------------------- item 2: records with absurd numbers


ABSURD = [
    ("gpus", 10**30, "gives gpus 1000000000000000000000000000000, which is not a GPU count"),
    (
        "gpus",
        1e308,
        "gives gpus 1e+308, which is not a GPU count (a whole number from 1 to 131,072)",
    ),
    ("seq_len", 1e308, "gives seq_len 1e+308, which is not a sequence length"),
    ("gbs", -5, "gives gbs -5, which is not a global batch size"),
    ("gpus", True, "gives gpus True, which is not a GPU count"),
    ("gpus", "eight", "gives gpus 'eight', which is not a GPU count"),
    ("layers", 10**40, "gives layers a 41-digit number, which is not a layer count"),
    ("model_flops_per_sample", 1e308, "gives model_flops_per_sample 1e+308, which is not a number"),
]


def _absurd_install(install):
    """An install whose experiments hold one run per absurd record, and one named with a 20-digit
    GPU count."""
    experiments = install / "workloads" / "llama31" / "experiments"
    for i, (field, value, _) in enumerate(ABSURD):
        make_run(
            experiments / f"r{i}",
            MB_BF16,
            lines(NEMO2_MS / 1.02, tflops=500.0),
            recipe=recipe(**{field: value}),
        )
    name = "pretrain_llama3_8b_bf16_gpus12345678901234567890_tp1_pp1_cp1_vpNone_ep1_etpNone_mbs4_gbs128"
    make_run(experiments / "name", name, lines(NEMO2_MS / 1.02, tflops=500.0))
    return experiments


def test_absurd_records_mark_their_runs_and_every_command_ends_normally(
    cli, install_root, tmp_path
):
    """Each ended results, compare, report and the install-wide rescan with exit 70 (SQLite's integer
    overflow, float conversion)."""
    experiments = _absurd_install(install_root)
    result = cli("results", "--format", "json")  # the install-wide scan, stored in the database
    assert result.code == 0, result.err
    rows = result.json()
    assert len(rows) == len(ABSURD) + 1
    notes = [note for row in rows for note in row["notes"]]
    for _, _, words in ABSURD:
        assert any(f"not judged: its recipe.json {words}" in note for note in notes), words
    assert any(
        "not judged: its experiment's name gives gpus 12345678901234567890, which is not a GPU count"
        in note
        for note in notes
    )
    assert cli("results", "--rescan").code == 0
    assert cli("results", "--from-db", "--format", "json").code == 0
    compare = cli("compare", "--json")
    assert compare.code in (1, 3), compare.err  # regressed or not compared: judged, not crashed
    assert all(v["outcome"] != "pass" for row in json.loads(compare.out) for v in row["verdicts"])
    report = cli("report", str(experiments), "--out", str(tmp_path / "report"))
    assert report.code == 0, report.err
    # the database holds every run, none with an impossible number
    with sqlite3.connect(install_root / "results.sqlite") as db:
        gpus = [g for (g,) in db.execute("SELECT gpus FROM runs")]
    assert len(gpus) == len(ABSURD) + 1
    assert all(g is None or 1 <= g <= 131072 for g in gpus)


def test_a_run_in_doubt_is_judged_by_no_command(cli, tmp_path):
    """Neither against a baseline, nor as one, nor plotted against the published curve by report."""
    good = make_run(tmp_path / "good", MB_BF16, lines(NEMO2_MS, tflops=500.0), recipe=recipe())
    doubted = make_run(
        tmp_path / "doubted", MB_BF16, lines(NEMO2_MS, tflops=500.0), recipe=recipe(gpus=16)
    )
    doubt = "its recipe.json's GPU count is 16 but its experiment's name says 8"
    # against a baseline
    result = cli("compare", str(doubted), "--baseline", str(good), "--json")
    [row] = json.loads(result.out)
    assert [v["outcome"] for v in row["verdicts"]] == ["not_compared", "not_compared"]
    assert all(doubt in v["detail"] for v in row["verdicts"])
    # as a baseline: it is no run to compare with
    refused = cli("compare", str(good), "--baseline", str(doubted), "--json")
    assert refused.code == 2 and "no successful run to compare with" in refused.err
    # report: listed with why, not plotted
    out = tmp_path / "report"
    assert cli("report", str(doubted), "--out", str(out)).code == 0
    summary = (out / "summary.md").read_text()
    assert "0 plotted" in summary or "1 without a result" in summary, summary[:400]
    assert f"not judged: {doubt}" in summary
