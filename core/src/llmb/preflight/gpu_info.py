"""What ``nvidia-smi -q -x`` says about a node's GPUs: product name, driver, ECC errors, clocks.

The XML report (``nvsmi_device_v12.dtd`` and its neighbours) is read element by
element with patterns, not a validating parser, so that a report an older or newer
driver extends still reads: ``<driver_version>``, then per ``<gpu id=...>`` its
``<product_name>``, ``<clocks><sm_clock>``, ``<max_clocks><sm_clock>`` and
``<ecc_errors><volatile>`` (newer drivers: ``sram_uncorrectable``, ``dram_uncorrectable``,
...; older: ``double_bit/total``). Uncorrectable volatile errors (since the driver loaded)
flag a node; correctable ones are recorded. The job runs it once per node (local rank 0),
after the GEMM, so that the clock is the one under load.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from llmb.recipes.gpus import catalogue

_GPU = re.compile(r"<gpu id=\"([^\"]*)\">")
_MHZ = re.compile(r"(\d+)\s*MHz")
# An SM clock below this fraction of the GPU's maximum under load: held down (power, thermal,
# application clocks).
LOW_CLOCK_FRACTION = 0.7


def _element(text: str, name: str) -> str | None:
    m = re.search(rf"<{name}>(.*?)</{name}>", text, re.S)
    return m.group(1) if m else None


def _mhz(block: str | None) -> int | None:
    value = _element(block, "sm_clock") if block else None
    m = _MHZ.search(value or "")
    return int(m.group(1)) if m else None


def parse(text: str) -> dict:
    """{"driver": str|None, "gpus": [{"bus_id", "name", "sm_mhz", "max_sm_mhz", "ecc_uncorrected",
    "ecc_corrected"}]}."""
    heads = list(_GPU.finditer(text))
    driver = _element(text[: heads[0].start()] if heads else text, "driver_version")
    gpus = []
    for i, head in enumerate(heads):
        body = text[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        # a MIG slice's own counts
        body = re.sub(r"<mig_devices>.*?</mig_devices>", "", body, flags=re.S)
        volatile = _element(_element(body, "ecc_errors") or "", "volatile") or ""
        uncorrected = corrected = 0
        for name, value in re.findall(r"<(\w+)>\s*(\d+)\s*</\1>", volatile):
            if "uncorrectable" in name:
                uncorrected += int(value)
            elif "correctable" in name:
                corrected += int(value)
        for kind, total in re.findall(
            r"<(single_bit|double_bit)>.*?<total>\s*(\d+)\s*</total>", volatile, re.S
        ):
            if kind == "double_bit":
                uncorrected += int(total)
            else:
                corrected += int(total)
        name = _element(body, "product_name")
        gpus.append(
            {
                "bus_id": head.group(1),
                "name": name.strip() if name else None,
                "sm_mhz": _mhz(_element(body, "clocks")),
                "max_sm_mhz": _mhz(_element(body, "max_clocks")),
                "ecc_uncorrected": uncorrected,
                "ecc_corrected": corrected,
            }
        )
    return {"driver": driver.strip() if driver else None, "gpus": gpus}


def gpu_type_of(name: str | None) -> str | None:
    """llmb's GPU type of a product name (``NVIDIA H100 80GB HBM3`` -> h100), None when unknown."""
    if not name:
        return None
    words = re.findall(r"[a-z]+\d+", name.lower())
    known = catalogue()
    return next((w for w in words if w in known), None)


def problems(report: dict, gpu: str, expected_count: int) -> list[str]:
    """What is wrong with a node's GPUs against ``--gpu`` and the GPUs a node should have."""
    out = []
    gpus = report.get("gpus") or []
    if len(gpus) != expected_count:
        out.append(f"nvidia-smi lists {len(gpus)} GPUs, expected {expected_count}")
    types = sorted({gpu_type_of(g.get("name")) or str(g.get("name")) for g in gpus})
    if gpus and types != [gpu]:
        out.append(f"GPU type {', '.join(types)}, not {gpu}")
    bad = [str(i) for i, g in enumerate(gpus) if g.get("ecc_uncorrected")]
    if bad:
        out.append(f"uncorrectable ECC errors on GPU {', '.join(bad)}")
    slow = [
        f"{i} ({g['sm_mhz']}/{g['max_sm_mhz']} MHz)"
        for i, g in enumerate(gpus)
        if g.get("sm_mhz")
        and g.get("max_sm_mhz")
        and g["sm_mhz"] < LOW_CLOCK_FRACTION * g["max_sm_mhz"]
    ]
    if slow:
        out.append(f"SM clock held low on GPU {', '.join(slow)}")
    return out


def query(timeout: float = 60.0) -> dict | None:
    """This node's report, or None where there is no nvidia-smi (a CPU node)."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        done = subprocess.run([binary, "-q", "-x"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"driver": None, "gpus": [], "error": f"nvidia-smi -q -x: {exc}"}
    if done.returncode != 0:
        return {
            "driver": None,
            "gpus": [],
            "error": f"nvidia-smi -q -x exited {done.returncode}: {done.stderr.strip()[:200]}",
        }
    return parse(done.stdout)
