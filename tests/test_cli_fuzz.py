"""Random command lines never make llmb crash: every outcome is output with
exit 0, or an explained error with exit 1 or 2, and never a traceback."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

WORDS = [
    "list",
    "plan",
    "plugins",
    "results",
    "compare",
    "--format",
    "csv",
    "table",
    "--window",
    "35:44",
    "9:1",
    "--since",
    "7d",
    "--from-db",
    "--baseline",
    "--threshold",
    "0.95",
    "2",
    "--rescan",
    "--full-names",
    "--json",
    "--help",
    "--version",
    "llama31",
    "llama4",
    "nemotron4",
    "nemotronh",
    "nosuch",
    "--size",
    "8b",
    "70b",
    "405b",
    "405b-proxy",
    "400b",
    "340b",
    "56b",
    "--gpu",
    "h100",
    "b200",
    "gb200",
    "gb300",
    "b300",
    "h200",
    "--dtype",
    "bf16",
    "fp8",
    "nvfp4",
    "--gpus",
    "0",
    "8",
    "64",
    "128",
    "512",
    "1024",
    "-3",
    "1e9",
    "--set",
    "tp=2",
    "mbs=0",
    "gbs=GPUs*3",
    "gbs=GPUs/0",
    "layers=1",
    "vp=na",
    "ep=",
    "=",
    "fsdp=maybe",
    "dp=4",
    "--strong-scaling",
    "--weak-scaling",
    "--variant",
    "nemo2",
    "megatron-bridge",
    "--gpus-per-node",
    "4",
    "--",
    "",
    " ",
    "ü",
    "\x00x",
]

argument = st.one_of(st.sampled_from(WORDS), st.text(max_size=12), st.integers(-5, 5000).map(str))


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(argv=st.lists(argument, max_size=12))
def test_random_command_lines_never_crash(cli, argv):
    result = cli(*argv)
    assert result.code in (0, 1, 2), (argv, result)
    assert "Traceback" not in result.err + result.out, argv
    assert "internal error" not in result.err, (argv, result.err)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    workload=st.sampled_from(["llama31", "llama4", "nemotron4", "nemotronh"]),
    size=st.sampled_from(["8b", "70b", "405b", "405b-proxy", "400b", "340b", "56b", None]),
    gpu=st.sampled_from(["h100", "b200", "gb200", "gb300", None]),
    dtype=st.sampled_from(["bf16", "fp8", "nvfp4", None]),
    gpus=st.integers(1, 4096),
    strong=st.booleans(),
    sets=st.lists(
        st.sampled_from(["tp=2", "pp=2", "cp=2", "mbs=2", "gbs=GPUs*2", "layers=4", "vp=na"]),
        max_size=3,
    ),
)
def test_plausible_plans_resolve_or_explain(cli, workload, size, gpu, dtype, gpus, strong, sets):
    argv = ["plan", workload, "--gpus", str(gpus), "--json"]
    for flag, value in (("--size", size), ("--gpu", gpu), ("--dtype", dtype)):
        if value:
            argv += [flag, value]
    if strong:
        argv.append("--strong-scaling")
    for item in sets:
        argv += ["--set", item]
    result = cli(*argv)
    assert result.code in (0, 2), (argv, result.err)
    if result.code == 0:
        plan = result.json()
        assert plan["tp"] * plan["pp"] * plan["cp"] * plan["dp"] == plan["gpus"]
        assert plan["mbs"] * plan["dp"] * plan["ga"] == plan["gbs"]
    else:
        assert result.err.startswith("llmb: error: ") and result.err.count("\n") == 1
