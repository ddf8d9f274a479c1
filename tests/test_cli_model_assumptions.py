"""A Hugging Face config of a model_type ndcp does not know is read as a Llama-style decoder, and every report says
so: the assumptions panel of estimate and search, the lines above recompute's and sweep's tables, and the JSON
(`model.assumptions`; recompute and sweep: `model_assumptions`)."""
import json

import pytest

from tests.cli_helpers import run

UNKNOWN = {"model_type": "mamba9000", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 4, "intermediate_size": 688, "vocab_size": 1024, "max_position_embeddings": 2048}
PROBLEM = ["--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "512"]
COMMANDS = {
    "estimate": ["estimate", "{model}", *PROBLEM, "--strategy", "tp=2"],
    "search": ["search", "{model}", *PROBLEM, "--time-limit", "20"],
    "recompute": ["recompute", "{model}", *PROBLEM, "--strategy", "tp=2", "--caps", "40GiB"],
    "sweep": ["sweep", "{model}", "--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "512",
              "--tokens", "1B", "--recompute", "uniform", "--workers", "1"],
}


@pytest.fixture
def unknown_config(tmp_path):
    path = tmp_path / "mamba9000" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(UNKNOWN))
    return str(path)


def _args(command, model):
    return [model if a == "{model}" else a for a in COMMANDS[command]]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_report_says_the_unknown_type_was_read_as_llama(capsys, monkeypatch, unknown_config, command):
    monkeypatch.setenv("COLUMNS", "400")  # one line, not wrapped
    code, out, err = run(capsys, *_args(command, unknown_config))
    assert code == 0, err
    line = next(line for line in out.splitlines() if "mamba9000" in line and "assumed" in line)
    for words in ("not one ndcp knows", "Llama-style decoder", "hidden_size", "num_key_value_heads",
                  "other keys ignored"):
        assert words in line


@pytest.mark.parametrize("command, where", [("estimate", ("model", "assumptions")),
                                            ("search", ("model", "assumptions")),
                                            ("recompute", ("model_assumptions",)),
                                            ("sweep", ("model_assumptions",))])
def test_the_json_carries_the_same_line(capsys, unknown_config, command, where):
    code, out, err = run(capsys, *_args(command, unknown_config), "--json", "-")
    assert code == 0, err
    value = json.loads(out)
    for key in where:
        value = value[key]
    assert len(value) == 1 and "'mamba9000' is not one ndcp knows" in value[0]


def test_a_supported_model_assumes_nothing(capsys):
    code, out, err = run(capsys, "estimate", "tiny", *PROBLEM, "--strategy", "tp=2", "--json", "-")
    assert code == 0, err
    assert json.loads(out)["model"]["assumptions"] == []
