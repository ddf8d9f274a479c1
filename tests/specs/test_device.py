"""Device presets by name and device YAML files: `--device` takes either, everywhere."""
import json
from dataclasses import replace

import pytest

from ndcp.cli import main
from ndcp.specs import SpecError
from ndcp.specs.device import PRESETS, device_preset, device_yaml, load_device, read_device_file


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
