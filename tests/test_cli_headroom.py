"""--headroom keeps a fraction of the capacity free; the reserve and the device's calibration are reported."""
import json

import pytest
from rich.console import Console

from ndcp.report.terminal import assumptions_panel
from ndcp.specs import ClusterSpec, RunSpec, SpecError, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.units import GIB

from .cli_helpers import assert_one_line_error, run

DEVICE_MEMORY = 80 * GIB
# Llama-3-8B on 8 H100s: without headroom its best plans use 98-99 % of the device.
SEARCH = ["search", "llama3-8b", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "8192",
          "--recompute", "uniform", "--top", "5", "--json", "-", "--quiet"]


def estimate(device, *extra):
    return ["estimate", "llama3-8b", "--device", device, "--gpus", "8", "--global-batch", "16", "--seq-len", "4096",
            "--strategy", "zero=1", "--json", "-", *extra]


def search_json(capsys, *extra):
    code, out, err = run(capsys, *SEARCH, *extra)
    assert code == 0, err
    return json.loads(out[out.index("{"):])


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5])
def test_headroom_scales_the_capacity(fraction):
    spec = RunSpec(global_batch=8, seq_len=1024, headroom_fraction=fraction)
    assert spec.capacity(DEVICE_MEMORY) == int(DEVICE_MEMORY * (1 - fraction))
    assert spec.headroom_bytes(DEVICE_MEMORY) + spec.capacity(DEVICE_MEMORY) == DEVICE_MEMORY
    capped = RunSpec(global_batch=8, seq_len=1024, memory_cap_bytes=60 * GIB, headroom_fraction=fraction)
    assert capped.capacity(DEVICE_MEMORY) == int(60 * GIB * (1 - fraction))  # the headroom applies to the cap


def test_no_headroom_keeps_the_whole_capacity():
    assert RunSpec(global_batch=8, seq_len=1024).capacity(DEVICE_MEMORY) == DEVICE_MEMORY


@pytest.mark.parametrize("fraction", [1.0, -0.1, float("nan"), 2])
def test_headroom_outside_zero_to_one_is_refused(fraction):
    with pytest.raises(SpecError, match="headroom_fraction"):
        RunSpec(global_batch=8, seq_len=1024, headroom_fraction=fraction)


def test_search_under_headroom_never_returns_a_plan_above_the_kept_fraction(capsys):
    plain = search_json(capsys, "--confidence", "0")  # the point estimate fills the capacity
    device = plain["device"]["memory_bytes"]
    assert max(s["memory"]["peak_bytes"] for s in plain["strategies"]) > 0.9 * device  # the check can fail
    doc = search_json(capsys, "--headroom", "0.1", "--confidence", "0")
    assert doc["status"] == "optimal" and doc["strategies"]
    assert all(s["memory"]["peak_bytes"] <= 0.9 * device for s in doc["strategies"])
    # at a confidence the headroom stays an extra margin: the peaks' upper edges within the kept fraction
    banded = search_json(capsys, "--headroom", "0.1")
    assert banded["strategies"] and all(s["memory"]["peak_bytes_band_high"] <= 0.9 * device
                                        for s in banded["strategies"])
    assert doc["run"]["headroom_fraction"] == 0.1
    assert doc["run"]["capacity_bytes"] == int(device * 0.9)
    assert doc["run"]["headroom_bytes"] == device - doc["run"]["capacity_bytes"]


@pytest.mark.parametrize("value", ["1", "-0.2", "abc", "nan"])
def test_bad_headroom_is_one_line_exit_2(capsys, value):
    code, out, err = run(capsys, *SEARCH, f"--headroom={value}")
    assert_one_line_error(code, out, err, "--headroom", value)


def test_reserve_is_modelled_unless_given(capsys):
    code, out, _ = run(capsys, *estimate("h100"))
    modelled = json.loads(out)
    parts = modelled["memory"]["stages"][0]["parts"]
    assert modelled["run"]["reserve_bytes"] is None
    assert parts["cuda_context"] > 0 and parts["communicators"] > 0 and "reserve" not in parts
    code, out, _ = run(capsys, *estimate("h100", "--reserve", "2GiB"))
    given = json.loads(out)
    parts = given["memory"]["stages"][0]["parts"]
    assert given["run"]["reserve_bytes"] == 2 * GIB and parts["reserve"] == 2 * GIB and "communicators" not in parts
    assert parts["fragmentation"] > 0


@pytest.mark.parametrize("device, calibrated", [("h100", True), ("b200", False)])
def test_json_says_whether_the_device_is_calibrated(capsys, device, calibrated):
    code, out, err = run(capsys, *estimate(device))
    assert code == 0, err
    assert json.loads(out)["device"]["calibrated"] is calibrated
    code, out, err = run(capsys, *SEARCH[:3], device, *SEARCH[4:])
    assert json.loads(out[out.index("{"):])["device"]["calibrated"] is calibrated


@pytest.mark.parametrize("device, line", [("h100", None), ("b300", "(default 0.62)"),
                                          ("b200", "(from the device's source 0.58138)")])
def test_assumptions_name_an_uncalibrated_device(device, line):
    """An uncalibrated preset says so, with its ceiling: the default, or the one its source states (b200: the
    published GB200 GEMM benchmark, docs/formulas.md §9)."""
    console = Console(width=400, record=True, highlight=False)
    run_spec = RunSpec(global_batch=16, seq_len=4096, headroom_fraction=0.1)
    console.print(assumptions_panel(load_model("llama3-8b"), ClusterSpec(device_preset(device), 8), run_spec))
    text = console.export_text()
    assert ("compute efficiency not calibrated on measured runs" in text) is (line is not None)
    assert line is None or f"{device}: compute efficiency not calibrated on measured runs {line}" in text
    assert "headroom 10%" in text and "fragmentation 27% of activations" in text
