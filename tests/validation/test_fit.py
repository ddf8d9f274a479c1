"""Fitting device parameters to measured runs: bounded least squares, the leave-one-source-out error, and
`ndcp calibrate` writing a device file that `--device` accepts."""
import json
from pathlib import Path

import numpy as np
import pytest

from ndcp.cli import main
from ndcp.specs import SpecError
from ndcp.specs.device import PRESETS
from ndcp.specs.device_file import load_device
from ndcp.validation.fit import FITTABLE, bounded_least_squares, calibrate_device, grid_minimum

RUNS = Path(__file__).resolve().parents[2] / "examples" / "published_runs.yaml"


def test_bounded_least_squares_finds_an_interior_minimum_and_stops_at_a_bound():
    target = np.array([0.3, -0.2])
    residuals = lambda x: np.array([x[0] - target[0], 2 * (x[1] - target[1]), x[0] * x[1] + 0.06])  # noqa: E731
    free = bounded_least_squares(residuals, np.zeros(2), np.array([-1.0, -1.0]), np.array([1.0, 1.0]))
    assert free == pytest.approx(target, abs=1e-4)
    bounded = bounded_least_squares(residuals, np.zeros(2), np.array([-1.0, 0.0]), np.array([1.0, 1.0]))
    assert bounded[1] == 0.0 and bounded[0] == pytest.approx(0.3, abs=1e-4)


def test_grid_minimum_refines_around_the_coarse_best():
    assert grid_minimum(lambda c: abs(c - 0.6731)) == 0.675
    assert grid_minimum(lambda c: 1.0) == 0.495  # ties go to the smallest value tried (0.50 - the fine step)


def test_calibrating_h100_on_the_published_runs_fits_better_in_sample_and_reports_held_out_error():
    result = calibrate_device(RUNS, PRESETS["h100"])
    ins, cv = result["in_sample"], result["leave_one_source_out"]
    assert ins["runs"] == cv["runs"] >= 10
    squares = lambda errors: sum(e * e for e in errors.values())  # noqa: E731
    assert squares(ins["errors"]) <= squares(result["start"]["errors"])  # the start is one point of the search
    assert cv["mean"] >= ins["mean"]  # held-out runs are predicted no better than fitted ones
    assert [f["source"] for f in cv["folds"]] == sorted({f["source"] for f in cv["folds"]})
    for name, value in result["parameters"].items():
        assert FITTABLE[name].low <= value <= FITTABLE[name].high
    fitted = result["device"]
    assert fitted.calibrated and fitted.compute_efficiency == result["parameters"]["compute_efficiency"]


def test_no_run_on_the_device_is_a_spec_error():
    with pytest.raises(SpecError, match="no run on device 'mi300x'"):
        calibrate_device(RUNS, PRESETS["mi300x"])


def test_calibrate_writes_a_device_file_that_estimate_uses(tmp_path, capsys):
    output = tmp_path / "my-h100.yaml"
    assert main(["calibrate", str(RUNS), "--device", "h100", "--output", str(output), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["device"] == "my-h100" and set(doc["parameters"]) == {"compute_efficiency",
                                                                      "flash_forward_efficiency",
                                                                      "flash_backward_efficiency"}
    fit = doc["fit"]
    assert fit["runs"] >= 10 and fit["cross_validated_mean_abs_mfu_points"] >= fit["mean_abs_mfu_points"] > 0
    device = load_device(str(output))
    assert device.name == "my-h100"
    assert device.compute_efficiency == pytest.approx(doc["parameters"]["compute_efficiency"])
    problem = ["estimate", "llama3-8b", "--gpus", "8", "--global-batch", "32", "--seq-len", "4096", "--json", "-"]
    assert main(problem + ["--device", str(output)]) == 0
    assert json.loads(capsys.readouterr().out)["device"]["name"] == "my-h100"


def test_calibrate_user_errors(tmp_path, capsys):
    base = ["calibrate", str(RUNS), "--device", "h100", "--output", str(tmp_path / "x.yaml")]
    assert main(base + ["--parameters", "warp_speed"]) == 2
    assert "compute_efficiency" in capsys.readouterr().err
    assert main(["calibrate", str(tmp_path / "none.yaml"), "--device", "h100", "--output", "x.yaml"]) == 2
    assert "no such runs file" in capsys.readouterr().err


def test_the_fit_recovers_a_known_gemm_ceiling_from_runs_measured_on_a_slower_device(tmp_path):
    """Runs whose MFU is what the estimators give with compute_efficiency 0.60 (a CSV in `ndcp validate`'s format,
    ids without "_": each run its own source): fitted from the h100 preset (0.68), the ceiling comes back."""
    from dataclasses import replace

    from ndcp.cli import build_strategy
    from ndcp.estimate.time import estimate_time
    from ndcp.specs import ClusterSpec, RunSpec
    from ndcp.specs.library import load_model

    # the rows state no loss kernel: read as Megatron-LM's default, the unfused loss
    model, run = load_model("llama3-8b"), RunSpec(global_batch=32, seq_len=4096, loss_kernel="unfused")
    slow = ClusterSpec(replace(PRESETS["h100"], compute_efficiency=0.60), 8)
    lines = ["id,model,device,gpus,global_batch,seq_len,tp,pp,dp,mbs,zero,sp,recompute,mfu"]
    for tp in (1, 2, 4, 8):
        values = {"tp": tp, "pp": 1, "mbs": 1, "zero": 1, "sp": tp > 1, "recompute": "none"}
        strategy = build_strategy(model, slow, run, values)
        mfu = estimate_time(model, slow, run, strategy).mfu
        sp = "true" if tp > 1 else "false"  # the CSV reader takes true/false for sp
        lines.append(f"tp{tp},llama3-8b,h100,8,32,4096,{tp},1,{8 // tp},1,1,{sp},none,{mfu!r}")
    runs = tmp_path / "runs.csv"
    runs.write_text("\n".join(lines) + "\n")
    result = calibrate_device(runs, PRESETS["h100"], ("compute_efficiency",))
    assert result["start"]["mean"] > 2  # the preset's ceiling misses these runs by points
    assert result["parameters"]["compute_efficiency"] == pytest.approx(0.60, abs=0.005)
    assert result["in_sample"]["mean"] < 0.2 and len(result["leave_one_source_out"]["folds"]) == 4


def test_leave_one_source_out_groups_runs_by_publication():
    """A row's source.group names its publication (several container releases of one performance summary are one
    source); rows without one fall back to the id prefix."""
    from ndcp.validation.fit import source
    from ndcp.validation.runs import read_rows

    second = dict(read_rows(RUNS.parent / "measured_runs_2.yaml"))
    first = dict(read_rows(RUNS))
    assert {source(second[i]()) for i in ("mbr2511_llama3_8b_h100_fp8cs_8", "mbr2509_deepseekv3_h100_1024")} == \
        {"megatron-bridge-performance"}
    assert source(second["mbr_moonlight16b_h100_bf16_8"]()) == "megatron-bridge-skills"
    # one benchmark page's tables in two files are one publication (held out together)
    assert source(second["torchtitan_l31_8b_fsdp128_bf16"]()) == source(first["torchtitan_l31_8b_fsdp8_bf16"]()) == \
        "torchtitan"
    assert source(first["narayanan2021_t1_1t"]()) == "narayanan2021"


def test_calibrate_script_table_has_every_source_and_the_doc_its_markers():
    import sys

    sys.path.insert(0, str(RUNS.parents[1] / "scripts"))
    import calibrate

    row = {"runs": 2, "step_pct": 10.0, "mfu_points": 2.5}
    result = {"parameters": {"ampere_compute_efficiency": 0.7, "hopper_compute_efficiency": 0.68,
                             "hopper_fp8_compute_efficiency": 0.6, "blackwell_fp8_compute_efficiency": 0.0},
              "fitted_on": {"AMPERE_GEMM_EFFICIENCY": ["a"], "HOPPER_GEMM_EFFICIENCY": ["b", "c"]},
              "sources": [{"source": "mpt", "fitting_runs": 1, "moe_runs": 0, "shipped": row, "in_sample": row,
                           "held_out": {**row, "mfu_points": None}, "source_median": 0.9,
                           "within_source_step_pct": 4.0}]}
    table = calibrate.markdown_table(result)
    assert "| mpt | 2 (0) | 1 | 10.0 / 2.50 | 10.0 / 2.50 | 10.0 / - | 0.900 | 4.0 |" in table
    assert "`HOPPER_GEMM_EFFICIENCY` on 2 runs" in table and "HOPPER_FP8_GEMM_EFFICIENCY 0.6" in table
    doc = (RUNS.parents[1] / "docs" / "calibration.md").read_text(encoding="utf-8")
    block = doc[doc.index(calibrate.TABLE_BEGIN):doc.index(calibrate.TABLE_END)]
    assert all(f"| {name} |" in block for name in ("narayanan2021", "llm-foundry", "megatron-bridge-performance"))
    assert block.count("\n| ") >= 10 + 3  # at least ten sources, then all, dense, MoE


def test_within_source_spread_divides_out_one_constant_per_source():
    """A source whose runs are all off by one factor (a software stack's offset) has no spread left; a source whose
    runs disagree keeps it: |0.8/0.9 - 1| and |1.0/0.9 - 1| are 11.1 % each."""
    calibrate = _calibrate_script()
    ratios = [("old-stack", 0.8), ("old-stack", 0.8), ("old-stack", 0.8), ("mixed", 0.8), ("mixed", 1.0)]
    medians = calibrate.source_medians(ratios)
    assert medians == {"old-stack": 0.8, "mixed": pytest.approx(0.9)}
    assert calibrate.within_source_pct(ratios[:3], medians) == pytest.approx(0.0)
    assert calibrate.within_source_pct(ratios[3:], medians) == pytest.approx(100 / 9)
    assert calibrate.within_source_pct([], medians) is None


def _calibrate_script():
    import sys

    sys.path.insert(0, str(RUNS.parents[1] / "scripts"))
    import calibrate

    return calibrate


def test_the_script_fits_an_fp8_ceiling_only_on_runs_of_two_sources():
    """scripts/calibrate.py --fp8-only on the first file: its one Hopper FP8 run (dgxc) is a single source, so the
    Hopper FP8 ceiling keeps its preset and says why; the 16-bit ceilings keep the shipped constants."""
    calibrate = _calibrate_script()
    result = calibrate.calibrate([RUNS], fp8_only=True)
    p = result["parameters"]
    assert p["hopper_fp8_compute_efficiency"] == calibrate.device_module.HOPPER_FP8_GEMM_EFFICIENCY
    assert p["hopper_compute_efficiency"] == calibrate.device_module.HOPPER_GEMM_EFFICIENCY
    assert "1 source(s) (dgxc)" in result["kept"]["HOPPER_FP8_GEMM_EFFICIENCY"]
    assert result["fitted_on"] == {} and result["in_sample"]["fp8"]["runs"] == result["in_sample"]["runs"] == 1
    assert calibrate.preset_lines(p, constants=()) == []  # --write rewrites the fitted constants only


def test_the_script_fits_the_fp8_ceiling_on_fp8_runs_at_the_16_bit_ceiling(tmp_path):
    """FP8 runs of two sources whose MFU is what the estimators give with an FP8 ceiling of 0.55 on the h100 preset:
    the fit returns it, and the 16-bit ceiling stays the shipped one (--fp8-only)."""
    from dataclasses import replace

    from ndcp.cli import build_strategy
    from ndcp.estimate.time import estimate_time
    from ndcp.specs import ClusterSpec, RunSpec
    from ndcp.specs.library import load_model

    calibrate = _calibrate_script()
    # the rows state no loss kernel: read as Megatron-LM's default, the unfused loss
    model, run = load_model("llama3-8b"), RunSpec(global_batch=32, seq_len=4096, precision="fp8", loss_kernel="unfused")
    slow = ClusterSpec(replace(PRESETS["h100"], fp8_compute_efficiency=0.55), 8)
    lines = ["id,model,device,gpus,global_batch,seq_len,precision,tp,pp,dp,mbs,zero,sp,recompute,mfu"]
    for tp in (1, 2, 4, 8):
        strategy = build_strategy(model, slow, run, {"tp": tp, "pp": 1, "mbs": 1, "zero": 1, "sp": tp > 1,
                                                     "recompute": "none"})
        mfu = estimate_time(model, slow, run, strategy).mfu
        lines.append(f"{'ab'[tp % 3 == 1]}_tp{tp},llama3-8b,h100,8,32,4096,fp8,{tp},1,{8 // tp},1,1,"
                     f"{'true' if tp > 1 else 'false'},none,{mfu!r}")
    runs = tmp_path / "runs.csv"
    runs.write_text("\n".join(lines) + "\n")
    result = calibrate.calibrate([runs], fp8_only=True)
    assert result["parameters"]["hopper_fp8_compute_efficiency"] == 0.55
    assert result["parameters"]["hopper_compute_efficiency"] == PRESETS["h100"].compute_efficiency
    assert result["in_sample"]["max"] < 0.05 and set(result["fitted_on"]) == {"HOPPER_FP8_GEMM_EFFICIENCY"}


def test_ndcp_calibrate_reads_fp8_runs_only_for_the_fp8_ceiling():
    default = calibrate_device(RUNS, PRESETS["h100"], ("compute_efficiency",))
    with_fp8 = calibrate_device(RUNS, PRESETS["h100"], ("fp8_compute_efficiency",))
    fp8_ids = set(with_fp8["in_sample"]["errors"]) - set(default["in_sample"]["errors"])
    assert fp8_ids == {"dgxc_llama31_70b_h100_fp8_64"}
    assert with_fp8["start"]["parameters"] == {"fp8_compute_efficiency": PRESETS["h100"].fp8_ceiling}
    assert with_fp8["device"].fp8_calibrated
