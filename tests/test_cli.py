"""The command line, run in-process: JSON contracts, derived degrees, and one-line user errors with exit 2."""
import json

import pytest
import yaml

from ndcp.cli import main
from ndcp.specs.strategy_input import parse_strategy_string
from ndcp.specs.units import parse_size
from ndcp.specs import SpecError

from .cli_helpers import assert_one_line_error, run as run_error

PROBLEM = ["llama3-8b", "--device", "h100", "--gpus", "16", "--global-batch", "64", "--seq-len", "4096"]
TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "512"]


def run_json(capsys, *args):
    code = main([*args, "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)  # stdout holds exactly one JSON document




# -- estimate ----------------------------------------------------------------------------------------------------
def test_estimate_json_contract_and_derived_dp_mbn(capsys):
    doc = run_json(capsys, "estimate", *PROBLEM, "--strategy", "tp=2,pp=2,mbs=1,zero=1,sp=on,recompute=selective")
    for key in ("model", "device", "gpus", "run", "strategy", "memory"):
        assert key in doc
    for key in ("name", "parameters", "active_parameters", "layers"):
        assert key in doc["model"]
    assert doc["model"]["name"] == "llama3-8b" and doc["model"]["layers"] == 32
    for key in ("name", "memory_bytes", "peak_flops", "intra_node_bandwidth", "inter_node_bandwidth",
                "devices_per_node"):
        assert key in doc["device"]
    assert doc["gpus"] == 16
    assert doc["run"]["global_batch"] == 64 and doc["run"]["seq_len"] == 4096 and doc["run"]["flash_attention"]
    s = doc["strategy"]
    assert (s["tp"], s["pp"], s["dp"], s["mbs"], s["mbn"]) == (2, 2, 4, 1, 16)
    assert s["sp"] is True and s["recompute"] == "selective" and s["schedule"] == "1f1b"
    m = doc["memory"]
    for key in ("capacity_bytes", "peak_bytes", "fits", "stages", "activation_bytes_per_layer"):
        assert key in m
    assert isinstance(m["peak_bytes"], int) and isinstance(m["capacity_bytes"], int)
    assert m["capacity_bytes"] == doc["device"]["memory_bytes"]
    assert len(m["stages"]) == 2
    for stage in m["stages"]:
        for part in ("parameters", "gradients", "optimizer_states", "activations"):
            assert isinstance(stage["parts"][part], int)
        assert stage["total_bytes"] == sum(stage["parts"].values())
    assert m["peak_bytes"] == max(st["total_bytes"] for st in m["stages"])


def test_estimate_json_time_when_available(capsys):
    doc = run_json(capsys, "estimate", *PROBLEM, "--strategy", "tp=2,pp=2,sp=on")
    if "time" not in doc:
        assert any("time" in note for note in doc.get("notes", []))
        pytest.skip("ndcp.estimate.time not available")
    t = doc["time"]
    for key in ("step_seconds", "mfu", "hfu", "tokens_per_second_per_gpu", "parts"):
        assert key in t
    assert 0 < t["mfu"] < 1


def test_estimate_defaults_dp_is_all_gpus(capsys):
    doc = run_json(capsys, "estimate", *TINY)
    s = doc["strategy"]
    assert (s["tp"], s["pp"], s["cp"], s["dp"], s["mbs"], s["mbn"], s["zero"]) == (1, 1, 1, 8, 1, 2, 1)
    assert s["recompute"] == "none" and s["sp"] is False


def test_estimate_vpp_defaults_to_interleaved(capsys):
    doc = run_json(capsys, "estimate", *TINY, "--strategy", "pp=2,vpp=2")
    assert doc["strategy"]["schedule"] == "interleaved" and doc["strategy"]["dp"] == 4


def test_estimate_memory_cap_sets_capacity(capsys):
    doc = run_json(capsys, "estimate", *TINY, "--memory-cap", "70GiB", "--reserve", "512MiB")
    assert doc["memory"]["capacity_bytes"] == 70 * 2**30
    assert doc["run"]["memory_cap_bytes"] == 70 * 2**30 and doc["run"]["reserve_bytes"] == 512 * 2**20


def test_estimate_that_does_not_fit_still_exits_0(capsys):
    args = ["estimate", "llama3-8b", "--device", "h100", "--gpus", "1", "--global-batch", "8", "--seq-len", "4096"]
    doc = run_json(capsys, *args, "--memory-cap", "20GiB")
    assert doc["memory"]["fits"] is False
    assert main(args + ["--memory-cap", "20GiB"]) == 0
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "over by" in out


def test_estimate_json_to_file_and_report_on_stdout(capsys, tmp_path):
    path = tmp_path / "plan.json"
    assert main(["estimate", *TINY, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Assumptions" in out and "fits" in out
    assert json.loads(path.read_text())["strategy"]["dp"] == 8


def test_strategy_file_per_stage_recompute_and_override(capsys, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"pp": 2, "mbs": 4, "recompute": {"stages": [{"full": 1, "selective": 1},
                                                                                 {"none": 2}]}}))
    doc = run_json(capsys, "estimate", *TINY, "--strategy-file", str(plan), "--strategy", "mbs=2")
    s = doc["strategy"]
    assert s["pp"] == 2 and s["mbs"] == 2 and s["mbn"] == 2  # --strategy overrides the file
    assert [(st["none"], st["selective"], st["full"]) for st in s["recompute"]["stages"]] == [(0, 1, 1), (2, 0, 0)]
    # The JSON output can be fed back as a strategy file.
    out = tmp_path / "out.json"
    out.write_text(json.dumps(doc))
    again = run_json(capsys, "estimate", *TINY, "--strategy-file", str(out))
    assert again["strategy"] == s


def test_strategy_file_stage_counts_must_match_layers(capsys, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"pp": 2, "recompute": {"stages": [{"full": 3}, {"none": 2}]}}))
    assert_one_line_error(*run_error(capsys, "estimate", *TINY, "--strategy-file", str(plan)), "recompute.stages[0]")


# -- errors ------------------------------------------------------------------------------------------------------
def test_unknown_model_is_one_line_exit_2(capsys):
    assert_one_line_error(*run_error(capsys, "estimate", "no-such-model", "--device", "h100", "--gpus", "8",
                                     "--global-batch", "8", "--seq-len", "2048"), "no-such-model")


def test_tp_3_names_tp_and_valid_values(capsys):
    code, out, err = run_error(capsys, "estimate", *PROBLEM, "--strategy", "tp=3")
    assert_one_line_error(code, out, err, "tp=3", "valid tp: 1, 2, 4, 8")


def test_strategy_not_multiplying_to_gpus(capsys):
    assert_one_line_error(*run_error(capsys, "estimate", *PROBLEM, "--strategy", "tp=2,pp=2,dp=8"), "--gpus 16")
    assert_one_line_error(*run_error(capsys, "estimate", *PROBLEM, "--strategy", "pp=3"), "pp=3")


def test_global_batch_not_divisible(capsys):
    assert_one_line_error(*run_error(capsys, "estimate", *PROBLEM, "--strategy", "mbs=3"), "mbs=3")


@pytest.mark.parametrize("strategy, words", [
    ("foo=1", ["foo", "valid keys", "tp"]),
    ("tp=two", ["tp=", "integer"]),
    ("sp=maybe", ["sp=", "on, off"]),
    ("recompute=some", ["recompute=", "selective"]),
    ("schedule=zb", ["schedule=", "1f1b"]),
    ("zero=4", ["zero=4", "0, 1, 2, 3"]),
    ("tp", ["key=value"]),
    ("tp=2,tp=4", ["twice"]),
    ("sp=on", ["sp"]),  # sequence parallelism needs tp > 1
    ("vpp=2", ["vpp=2", "pp > 1"]),
])
def test_bad_strategy_strings(capsys, strategy, words):
    assert_one_line_error(*run_error(capsys, "estimate", *PROBLEM, "--strategy", strategy), *words)


@pytest.mark.parametrize("cap", ["70XB", "lots", "-5GiB", "0", "90GiB"])
def test_bad_memory_cap(capsys, cap):
    assert_one_line_error(*run_error(capsys, "estimate", *PROBLEM, "--memory-cap", cap), "memory-cap")


def test_unknown_device_and_missing_arguments(capsys):
    assert_one_line_error(*run_error(capsys, "estimate", "tiny", "--device", "tpu9", "--gpus", "8",
                                     "--global-batch", "8", "--seq-len", "512"), "tpu9", "h100")
    assert_one_line_error(*run_error(capsys, "estimate", "tiny", "--gpus", "8"), "--device")
    assert_one_line_error(*run_error(capsys, "estimate", *TINY, "--gpus", "0"), "--gpus")
    assert_one_line_error(*run_error(capsys), "COMMAND")


def test_debug_shows_traceback(capsys):
    code, out, err = run_error(capsys, "--debug", "estimate", *PROBLEM, "--strategy", "tp=3")
    assert code == 2 and "Traceback" in err and err.strip().splitlines()[-1].startswith("ndcp: error: ")


def test_internal_error_exit_3(capsys, monkeypatch):
    import ndcp.api  # `ndcp estimate` estimates through the Python API

    def boom(*args):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(ndcp.api, "estimate_memory", boom)
    code, out, err = run_error(capsys, "estimate", *TINY)
    assert code == 3 and "Traceback" not in err
    assert "kaboom" in err and "--debug" in err and len(err.strip().splitlines()) == 1


def test_help_has_examples(capsys):
    for command in ("estimate", "models", "devices", "validate"):
        assert main([command, "--help"]) == 0
        assert "example" in capsys.readouterr().out
    assert main(["--help"]) == 0
    assert "estimate" in capsys.readouterr().out


# -- models / devices --------------------------------------------------------------------------------------------
def test_models_json_list(capsys):
    models = run_json(capsys, "models")
    assert isinstance(models, list)
    by_name = {m["name"]: m for m in models}
    assert {"tiny", "llama3-8b"} <= set(by_name)
    assert by_name["llama3-8b"]["layers"] == 32 and isinstance(by_name["llama3-8b"]["parameters"], int)
    assert main(["models"]) == 0
    assert "llama3-8b" in capsys.readouterr().out


def test_devices_json_list(capsys):
    devices = run_json(capsys, "devices")
    assert isinstance(devices, list)
    h100 = next(d for d in devices if d["name"] == "h100")
    assert isinstance(h100["memory_bytes"], int) and h100["devices_per_node"] == 8
    assert main(["devices"]) == 0
    assert "h100" in capsys.readouterr().out


# -- helpers -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [("70GiB", 70 * 2**30), ("75GB", 75 * 10**9), ("80000MiB", 80000 * 2**20),
                                         ("85899345920B", 80 * 2**30), ("1.5TiB", int(1.5 * 2**40)), ("2g", 2 * 2**30)])
def test_parse_size(text, value):
    assert parse_size(text) == value


def test_parse_strategy_string_values():
    assert parse_strategy_string("tp=8, pp=16,sp=off,recompute=FULL,zero=0") == {
        "tp": 8, "pp": 16, "sp": False, "recompute": "full", "zero": 0}
    with pytest.raises(SpecError):
        parse_strategy_string("mbs=0")


def test_cluster_overrides(capsys):
    doc = run_json(capsys, "estimate", *TINY, "--devices-per-node", "4", "--intra-node-bandwidth", "300",
                   "--inter-node-bandwidth", "25", "--device-memory", "40GiB")
    d = doc["device"]
    assert d["devices_per_node"] == 4 and d["memory_bytes"] == 40 * 2**30
    assert d["intra_node_bandwidth"] == 300e9 and d["inter_node_bandwidth"] == 25e9


def test_ctrl_c_before_a_search_verified_anything_is_status_unknown(capsys, monkeypatch):
    """Ctrl-C while a search command starts (reading its model, building its space) is status `unknown`, exit 4;
    in a command with no search at stake, exit 130."""
    def interrupt(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr("ndcp.cli.search.plan_search", interrupt)
    assert main(["search", "tiny", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024"]) == 4
    assert capsys.readouterr().err == "ndcp: unknown: interrupted before any strategy was verified\n"
    monkeypatch.setattr("ndcp.cli.estimate.estimate_strategy", interrupt)
    assert main(["estimate", "tiny", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024"]) \
        == 130
    assert capsys.readouterr().err == "ndcp: interrupted\n"
