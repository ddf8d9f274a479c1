"""`validate_file`'s time limit (ndcp/validation/compare.py) and `ndcp validate --time-limit`: checked before each
run, the runs not reached listed as skipped (`reached` false), the summary of those compared still given."""
import json
from types import SimpleNamespace

import pytest

from ndcp.validation import compare, validate_file

from ..cli_helpers import assert_one_line_error, run

ROWS = ("id,model,device,gpus,global_batch,seq_len,tp,pp,dp,mbs,zero,recompute,step_seconds\n"
        "first,llama3-8b,h100,8,64,4096,1,1,8,1,1,selective,6.0\n"
        "second,llama3-8b,h100,8,64,4096,2,1,4,1,1,selective,6.0\n"
        "third,llama3-8b,h100,8,64,4096,1,1,8,1,1,full,7.0\n")


@pytest.fixture
def runs_csv(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(ROWS)
    return path


def test_runs_after_the_time_limit_are_skipped_as_not_reached(runs_csv, monkeypatch):
    clock = iter(range(100))  # one second per reading: the deadline (0 + 1.5) passes after the first run's check
    monkeypatch.setattr(compare, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    result = validate_file(runs_csv, time_limit=1.5)
    assert [r.id for r in result.runs] == ["first"]
    assert [(s.id, s.reached) for s in result.skipped] == [("second", False), ("third", False)]
    assert all("not reached: the time limit of 1.5 s ran out" == s.reason for s in result.skipped)
    assert not result.complete and result.summary.runs == 1
    assert result.notes == ("time limit of 1.5 s reached: 2 of 3 runs not reached (listed as skipped)",)


def test_without_a_time_limit_every_run_is_reached(runs_csv):
    result = validate_file(runs_csv)
    assert [r.id for r in result.runs] == ["first", "second", "third"]
    assert result.complete and not result.notes
    assert result.as_dict()["complete"] is True


def test_cli_time_limit_prints_the_partial_result_and_says_which_runs_were_skipped(capsys, runs_csv):
    code, out, err = run(capsys, "validate", runs_csv, "--time-limit", "1e-9", "--json", "-")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["complete"] is False and doc["runs"] == []
    assert [(s["id"], s["reached"]) for s in doc["skipped"]] == [("first", False), ("second", False),
                                                                  ("third", False)]
    assert doc["summary"]["runs"] == 0
    code, out, err = run(capsys, "validate", runs_csv, "--time-limit", "1e-9", "--quiet")
    assert code == 0 and out.startswith("0 runs compared, 3 skipped"), out + err


def test_cli_time_limit_must_be_positive(capsys, runs_csv):
    code, out, err = run(capsys, "validate", runs_csv, "--time-limit", "0")
    assert_one_line_error(code, out, err, "--time-limit")
