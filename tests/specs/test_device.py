"""Device presets by name and device YAML files: `--device` takes either, everywhere."""
import json
from dataclasses import replace

import pytest

from ndcp.cli import main
from ndcp.specs import SpecError
from ndcp.specs.device import PRESETS, device_preset
from ndcp.specs.device_file import device_yaml, load_device, read_device_file


def test_preset_names_are_case_insensitive_with_a_did_you_mean():
    assert device_preset("H100") is PRESETS["h100"]
    assert load_device(" A100-80G ") is PRESETS["a100-80g"]
    with pytest.raises(SpecError, match=r"device='h10' is not known \(did you mean h100\?\); valid: .*h100"):
        device_preset("h10")


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_round_trips_through_its_yaml(tmp_path, name):
    path = tmp_path / f"{name}.yaml"
    path.write_text(device_yaml(PRESETS[name], "a header line"))
    assert read_device_file(path) == PRESETS[name]
    assert load_device(str(path)) == PRESETS[name]


def test_base_preset_with_overrides_and_the_name_from_the_file_stem(tmp_path):
    path = tmp_path / "slow-h100.yml"
    path.write_text("base: H100\ncompute_efficiency: 0.55\ninter_node_bandwidth: 2.5e+10\n")
    device = load_device(str(path))
    assert device == replace(PRESETS["h100"], name="slow-h100", compute_efficiency=0.55, inter_node_bandwidth=25e9)


@pytest.mark.parametrize("text, message", [
    ("base: h100\ncompute_efficiency: 1.5\n", "compute_efficiency"),
    ("base: h100\nflops: 1\n", "'flops': unknown key; valid keys: name, memory_bytes"),
    ("base: tpu\n", "device='tpu' is not known"),
    ("name: x\n", "memory_bytes: missing required field"),
    ("- h100\n", "expected a mapping of device fields"),
    ("base: [h100\n", "invalid YAML at line"),
    ("base: h100\nsm_count: many\n", "sm_count='many' is not valid; expected an integer"),
])
def test_bad_device_files_are_one_line_spec_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match="bad.yaml") as error:
        load_device(str(path))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot read device file"):
        load_device(str(tmp_path / "none.yaml"))


def test_devices_show_prints_a_file_that_estimate_accepts(tmp_path, capsys):
    assert main(["devices", "--show", "H100"]) == 0
    text = capsys.readouterr().out
    path = tmp_path / "mine.yaml"
    path.write_text(text.replace("compute_efficiency: 0.68", "compute_efficiency: 0.5")
                    .replace("name: h100", "name: mine"))
    problem = ["estimate", "tiny", "--gpus", "8", "--global-batch", "16", "--seq-len", "512", "--json", "-"]
    assert main(problem + ["--device", str(path)]) == 0
    mine = json.loads(capsys.readouterr().out)
    assert main(problem + ["--device", "h100"]) == 0
    preset = json.loads(capsys.readouterr().out)
    assert mine["device"]["name"] == "mine" and mine["device"]["compute_efficiency"] == 0.5
    assert mine["time"]["step_seconds"] > preset["time"]["step_seconds"]
    assert main(["devices", "--show", "h10"]) == 2
    assert "did you mean h100?" in capsys.readouterr().err
    assert main(["devices", "--show", ""]) == 2 and "device='' is not" in capsys.readouterr().err


NEW_PRESETS = ("gb200-nvl72", "gb300-nvl72", "b300", "mi325x", "mi355x", "h20")


def test_devices_lists_the_2026_presets_with_their_sources_and_calibration(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["devices"]) == 0
    text = capsys.readouterr().out
    for name in NEW_PRESETS:
        device = PRESETS[name]
        assert name in text and not device.calibrated and device.source.startswith("NOT CALIBRATED")
    assert "2500/5000/10000" in text and "4/72" in text  # GB200: BF16/FP8/FP4 dense peaks, trays of 4 in racks of 72


def test_devices_show_gb200_nvl72_round_trips_as_a_device_file(tmp_path, capsys):
    assert main(["devices", "--show", "gb200-nvl72"]) == 0
    path = tmp_path / "gb200-nvl72.yaml"
    path.write_text(capsys.readouterr().out)
    device = load_device(str(path))
    assert device == PRESETS["gb200-nvl72"]
    assert (device.devices_per_node, device.devices_per_domain, device.domain_size) == (4, 72, 72)


def test_a_device_file_without_the_domain_keys_keeps_the_node_as_its_domain(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("base: h100\ndevices_per_node: 4\nintra_node_bandwidth: 3.0e+11\n")
    device = load_device(str(path))
    assert device.devices_per_domain == 0 and device.domain_size == 4 and device.pod_size == 0
    assert device.oversubscription == 1.0


@pytest.mark.parametrize("text, message", [
    ("base: gb200-nvl72\ndevices_per_domain: 70\n", "devices_per_domain=70 is not valid; expected 0 or a multiple "
                                                     "of devices_per_node (4)"),
    ("base: h100\npod_size: 12\n", "pod_size=12 is not valid; expected 0 or a multiple of the scale-up domain (8"),
    ("base: h100\noversubscription: 0.5\n", "oversubscription=0.5 is not valid; expected a finite number >= 1.0"),
    ("base: h100\nfp8_compute_efficiency: 1.2\n", "fp8_compute_efficiency=1.2 is not valid; expected a finite number "
                                                   ">= 0.0 and <= 1.0"),
    ("base: h100\nfp8_compute_efficiency: -0.1\n", "fp8_compute_efficiency=-0.1 is not valid"),
])
def test_bad_domain_and_network_keys_name_the_field_and_what_is_valid(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as error:
        load_device(str(path))
    assert message in str(error.value)


def test_the_fp8_ceiling_is_a_device_field_and_0_assumes_the_bf16_one(tmp_path):
    """fp8_compute_efficiency (docs/formulas.md §3.1): a device file may set it; 0, the default, means not fitted
    on FP8 runs, and the FP8 GEMMs run at compute_efficiency (fp8_ceiling)."""
    path = tmp_path / "fp8.yaml"
    path.write_text("base: h100\nfp8_compute_efficiency: 0.6\n")
    fitted = load_device(str(path))
    assert fitted.fp8_ceiling == 0.6 and fitted.fp8_calibrated and fitted.compute_efficiency == 0.68
    path.write_text("base: h100\ncompute_efficiency: 0.5\nfp8_compute_efficiency: 0\n")
    assumed = load_device(str(path))
    assert assumed.fp8_ceiling == 0.5 and not assumed.fp8_calibrated
    assert "fp8_compute_efficiency: 0.6  # FP8 GEMM ceiling, fraction of fp8_peak_flops;" in device_yaml(fitted)


# Blackwell figures from published microbenchmarks (docs/formulas.md §7 and §9): Microsoft Azure
# AI-benchmarking-guide, Azure_Results/ND_GB200_v6_results.md (cuBLASLt FP8 GEMM; nccl-tests ring all-reduce on one
# tray's 4 GPUs) and the same harness on Hopper (ND_H100_v5, ND_H200_v5).
AZURE_GB200_FP8_GEMM_16K = 2906.9  # TFLOP/s, 16384^3, of GB200's 5000 FP8 dense
AZURE_HOPPER_FP8_GEMM_16K = {"h100": 1377.3, "h200": 1366.3}  # of 1978.9
AZURE_GB200_RING_ALLREDUCE_8GB = 679.61  # GB/s bus bandwidth over NVLink5, 900 GB/s one way


@pytest.mark.parametrize("name", ["b200", "gb200-nvl72"])
def test_blackwell_gemm_ceiling_is_the_published_gb200_benchmark_not_a_fit(name):
    device = PRESETS[name]
    assert device.compute_efficiency == pytest.approx(AZURE_GB200_FP8_GEMM_16K / 5000) == pytest.approx(0.581, abs=5e-4)
    assert not device.calibrated and not device.fp8_calibrated  # published, not fitted: reports still say so
    assert device.fp8_ceiling == device.compute_efficiency and device.sm_count == 148


@pytest.mark.parametrize("name", list(AZURE_HOPPER_FP8_GEMM_16K))
def test_the_same_harness_reads_hopper_at_its_fitted_ceiling(name):
    """Why the benchmark's fraction is read as ndcp's ceiling: on Hopper it sits within 2.5 % of the fitted one."""
    device = PRESETS[name]
    assert AZURE_HOPPER_FP8_GEMM_16K[name] * 1e12 / device.fp8_peak_flops == pytest.approx(
        device.compute_efficiency, rel=0.025)


def test_blackwell_ultra_keeps_the_default_gemm_ceiling_without_a_published_figure():
    for name in ("b300", "gb300-nvl72"):
        assert PRESETS[name].compute_efficiency == 0.62 and not PRESETS[name].calibrated


@pytest.mark.parametrize("name", ["b200", "gb200-nvl72", "b300", "gb300-nvl72"])
def test_nvlink5_reaches_the_published_ring_bus_bandwidth(name):
    device = PRESETS[name]
    assert device.intra_node_bandwidth == 900e9
    achieved = device.scale_up_efficiency * device.intra_node_bandwidth
    assert achieved == pytest.approx(AZURE_GB200_RING_ALLREDUCE_8GB * 1e9)
    assert device.scale_up_efficiency < PRESETS["h100"].scale_up_efficiency == 0.80  # NVLink4 keeps the 80 % rule


def test_blackwell_scale_out_is_the_ndr_figure_where_the_nic_is_the_hoppers():
    for name in ("b200", "gb200-nvl72"):  # ConnectX-7 400 Gb/s, as on DGX H100
        assert PRESETS[name].scale_out_efficiency == PRESETS["h100"].scale_out_efficiency == 47 / 50
