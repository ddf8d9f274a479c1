"""`ndcp replan FILE --gpus N` on the command line: the report's tables, the JSON contract, the new configuration
for the same trainer (--emit PATH), and one-line errors."""
import json

import pytest

from ndcp.launch import stated_problem
from tests.cli_helpers import assert_one_line_error, run


def test_the_report_shows_both_plans_what_changes_and_the_checkpoint(capsys, tiny_megatron_file):
    code, out, err = run(capsys, "replan", tiny_megatron_file, "--gpus", 16, "--keep", "tp")
    assert code == 0
    assert out.startswith("from  8 GPUs (megatron,") and "\nto    16 GPUs: optimal:" in out
    assert "What changes" in out and "gpus" in out and "GPU-seconds per token" in out
    assert "--keep tp: honoured" in out
    assert "Checkpoint (megatron's format" in out or "no dimension reshards" in out


def test_json_holds_the_contract_and_nothing_else_goes_to_stdout(capsys, tiny_megatron_file):
    code, out, err = run(capsys, "replan", tiny_megatron_file, "--gpus", 16, "--json", "-")
    doc = json.loads(out)
    assert code == 0
    assert {"from", "to", "changes", "reshard", "step_seconds_change"} <= set(doc)
    assert doc["to"]["status"] == "optimal" and isinstance(doc["reshard"], list)


def test_emit_writes_the_new_plan_for_the_file_trainer_with_its_own_problem_line(capsys, tiny_megatron_file, tmp_path):
    path = tmp_path / "new.sh"
    code, out, err = run(capsys, "replan", tiny_megatron_file, "--gpus", 16, "--emit", path, "-q")
    assert code == 0 and out.startswith("16 GPUs: optimal:")
    words = stated_problem(path.read_text())
    assert words[words.index("--gpus") + 1] == "16" and "--tensor-model-parallel-size" in path.read_text()
    assert "wrote the megatron configuration" in err


def test_the_new_file_replans_again(capsys, tiny_megatron_file, tmp_path):
    path = tmp_path / "new.sh"
    assert run(capsys, "replan", tiny_megatron_file, "--gpus", 16, "--emit", path, "-q")[0] == 0
    code, out, err = run(capsys, "replan", path, "--gpus", 8, "--json", "-")
    assert code == 0 and json.loads(out)["from"]["gpus"] == 16


@pytest.mark.parametrize("args, words", [
    (("--gpus", 16, "--keep", "dp"), ("--keep", "'dp'", "tp, pp")),
    (("--gpus", 0), ("--gpus", "integer >= 1")),
    (("--gpus", 16, "--emit", "-", "--json", "-"), ("--emit -", "--json -")),
])
def test_usage_errors_are_one_line(capsys, tiny_megatron_file, args, words):
    assert_one_line_error(*run(capsys, "replan", tiny_megatron_file, *args), *words)


def test_a_missing_file_or_a_file_ndcp_did_not_write_is_one_line(capsys, tiny_megatron_file, tmp_path):
    assert_one_line_error(*run(capsys, "replan", tmp_path / "absent.sh", "--gpus", 16), "absent.sh")
    bare = tmp_path / "bare.sh"
    lines = tiny_megatron_file.read_text().splitlines()
    bare.write_text("\n".join(line for line in lines if not line.startswith("# ndcp")))
    assert_one_line_error(*run(capsys, "replan", bare, "--gpus", 16), "--model", "--device", "--from-gpus")
