"""The rich estimate report: its sections are present and show the numbers the JSON document holds."""
import dataclasses
import re

import pytest
from rich.console import Console

from ndcp.cli import build_strategy
from ndcp.specs.strategy_input import parse_strategy_string
from ndcp.estimate.memory import estimate_memory
from ndcp.report.jsonout import estimate_document
from ndcp.report.terminal import format_bytes, format_seconds, gib, memory_bar, memory_bars, render_estimate
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model

try:
    from ndcp.estimate.time import estimate_time
except ImportError:  # time estimator not available
    estimate_time = None


def problem(model="llama3-8b", gpus=16, cap=0, strategy="tp=2,pp=2,mbs=1,sp=on,recompute=selective"):
    m = load_model(model)
    cluster = ClusterSpec(device_preset("h100"), gpus)
    run = RunSpec(global_batch=64, seq_len=4096, memory_cap_bytes=cap)
    s = build_strategy(m, cluster, run, parse_strategy_string(strategy))
    memory = estimate_memory(m, cluster, run, s)
    time = estimate_time(m, cluster, run, s) if estimate_time else None
    return m, cluster, run, s, memory, time


def render(*args, width=120):
    console = Console(record=True, width=width, color_system=None)
    render_estimate(console, *args)
    return console.export_text()


def test_report_sections_and_numbers_match_json():
    args = problem()
    text = render(*args)
    doc = estimate_document(*args)
    assert "Assumptions" in text and "llama3-8b" in text and "16 x h100" in text
    assert "8.03B parameters" in text and "flash attention on" in text and "4096" in text
    assert "450 GB/s" in text and "50 GB/s" in text
    assert "tp=2 pp=2 cp=1 dp=4" in text and "mbn=16" in text and "recompute=selective" in text
    mem = doc["memory"]
    assert f"capacity {gib(mem['capacity_bytes'])} GiB" in text
    for stage in mem["stages"]:
        row = next(line for line in text.splitlines() if re.match(rf"\s+{stage['stage']}\s+{stage['layers']}\s", line))
        assert gib(stage["total_bytes"]) in row
        assert gib(stage["parts"]["parameters"]) in row and gib(stage["parts"]["activations"]) in row
    rows = doc["evidence"]["memory_rows"]
    assert mem["fits"] and (f"fits at 90 %: peak {format_bytes(mem['peak_bytes'])} (≤ "
                            f"{format_bytes(mem['peak_bytes_band_high'])} at 90 %, {rows} measured rows) on stage "
                            f"{mem['peak_stage']}") in text
    if "time" in doc:
        t = doc["time"]
        low, high = (format_seconds(s) for s in t["step_seconds_band"])
        assert f"({low}–{high}, 90 %, {doc['evidence']['runs']} comparable runs)" in text
        assert "Step time" in text and f"MFU {100 * t['mfu']:.1f}%" in text and f"HFU {100 * t['hfu']:.1f}%" in text
        assert f"{t['tokens_per_second_per_gpu']:,.0f} tokens/s/GPU" in text
        assert "pipeline bubble" in text and "% of step" in text


def test_report_over_capacity_names_stage_and_excess():
    args = problem(cap=20 * 2**30, strategy="tp=2,pp=2,sp=on")
    memory = args[4]
    assert not memory.fits
    text = render(*args)
    excess = format_bytes(memory.peak_bytes - memory.capacity_bytes)
    assert f"DOES NOT FIT: over by {excess} on stage {memory.peak_stage}" in text
    assert "┃" in text  # the capacity marker on the bars


@pytest.mark.parametrize("width", [80, 100, 160])
def test_report_fits_console_width(width):
    text = render(*problem(), width=width)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    assert "█" in text


def test_report_without_time_says_so():
    m, cluster, run, s, memory, _ = problem(model="tiny", gpus=8, strategy="")
    text = render(m, cluster, run, s, memory, None, ["time estimator missing"])
    assert "step time: not estimated" in text and "time estimator missing" in text


def test_format_bytes():
    assert format_bytes(0) == "0 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(80 * 2**30) == "80.00 GiB"
    assert format_bytes(2**30, unit="MiB", digits=0) == "1024 MiB"


def test_memory_bars_are_fixed_width_on_a_common_scale():
    stages = [{"parameters": 10, "activations": 10}, {"parameters": 40, "reserve": 5}]
    bars = memory_bars(stages, capacity=30, width=20)
    assert all(len(bar.plain) == 20 for bar in bars)
    assert "┃" in bars[1].plain and "┃" not in bars[0].plain
    assert memory_bar({"parameters": 5}, 10, width=10).plain == "█████░░░░░"


def test_report_names_the_features_no_measured_run_uses_and_drops_bands_at_confidence_zero():
    args = problem(strategy="tp=2,pp=2,mbs=1,sp=on,recompute=offload")
    text = render(*args)
    assert "no measured run uses: activation offload (band widened for each)" in text
    console = Console(record=True, width=120, color_system=None)
    m, cluster, run, s, _, time = args
    at_zero = dataclasses.replace(run, confidence=0.0)  # the run's fit verdict and its bands both at confidence 0
    render_estimate(console, m, cluster, at_zero, s, estimate_memory(m, cluster, at_zero, s), time)
    point = console.export_text()
    assert "comparable runs" not in point and "measured rows" not in point and " at 90 %" not in point
    assert "no measured run uses: activation offload\n" in point  # named at any confidence


def test_report_says_when_the_peak_fits_and_its_upper_edge_does_not():
    m, cluster, run, s, _, time = problem()
    capacity = estimate_memory(m, cluster, run, s).peak_bytes + 2**28  # 256 MiB over the point peak
    capped = RunSpec(global_batch=64, seq_len=4096, memory_cap_bytes=capacity)
    memory = estimate_memory(m, cluster, capped, s)
    text = render(m, cluster, capped, s, memory, time, width=200)
    # at the run's confidence (90 %) the plan does not fit: its upper edge is over the capacity
    assert not memory.fits and "DOES NOT FIT at 90 %" in text
    assert f"at most {format_bytes(memory.fit_bytes)} fits at 90 %" in text
    # judged on the point estimate (confidence 0) it fits, and the report is at that confidence too: no band
    point = dataclasses.replace(capped, confidence=0.0)
    memory = estimate_memory(m, cluster, point, s)
    text = render(m, cluster, point, s, memory, time, width=200)
    assert memory.fits and "fits: peak" in text and " free of " in text and "at 90 %" not in text


@pytest.mark.parametrize("device, count, text", [
    ("h100", 512, "64 nodes of 8"),
    ("h100", 8, "1 node of 8"),
    ("h100", 12, "2 nodes of 8, the last with 4"),
    ("h100", 7, "1 node, 7 of its 8 devices"),
    ("gb200-nvl72", 72, "18 nodes of 4"),
])
def test_the_devices_line_says_when_the_last_node_is_partial(device, count, text):
    """12 GPUs are not "2 nodes of 8": the report says the last node holds 4 (ranks fill nodes in order), and 7 GPUs
    are one node with a device left over, where it had read "(1 node of 8)"."""
    from ndcp.report.terminal import assumptions_panel
    model, cluster = load_model("llama3-8b"), ClusterSpec(device_preset(device), count)
    console = Console(record=True, width=200, color_system=None)
    console.print(assumptions_panel(model, cluster, RunSpec(global_batch=64, seq_len=4096)))
    assert f"{count} x {device} ({text});" in console.export_text()
