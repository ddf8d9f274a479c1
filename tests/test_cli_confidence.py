"""`--confidence` on the command line: the run object and per-strategy margins in --json, "fits" at the stated
confidence in the text report (what is left at the point estimate), the validated alternative's keys, and a search
whose answer at confidence 0 is the point estimate's."""
import json

from tests.cli_helpers import run

SEARCH = ["search", "tiny", "--device", "h100", "--gpus", "4", "--global-batch", "16", "--seq-len", "2048",
          "--recompute", "uniform", "--top", "3"]


def search_json(capsys, *extra):
    code, out, err = run(capsys, *SEARCH, *extra, "--json", "-", "--quiet")
    assert code == 0, err
    return json.loads(out)


def test_the_confidence_reaches_the_run_and_every_strategy_s_margin(capsys):
    banded, point = search_json(capsys), search_json(capsys, "--confidence", "0")
    assert banded["run"]["confidence"] == 0.9 and point["run"]["confidence"] == 0.0
    for s in banded["strategies"]:
        memory = s["memory"]
        assert memory["margin_bytes"] > 0
        assert memory["peak_bytes_band_high"] <= memory["capacity_bytes"]  # fits at 90 %: its upper edge within
    assert all(s["memory"]["margin_bytes"] == 0 for s in point["strategies"])


def test_a_validated_winner_has_a_null_alternative(capsys):
    doc = search_json(capsys, "--zero", "1")  # no measured run uses ZeRO-2, which the tiny model's winner takes
    assert doc["validated_alternative"] is None and doc["validated_alternative_search"] is None
    unvalidated = search_json(capsys)
    assert unvalidated["validated_alternative_search"]["winner_features_without_evidence"] == ["zero-2"]
    assert unvalidated["validated_alternative"]["strategy"]["zero"] != 2


SCHEDULES_ALL = ("--zero", "1", "--fix", "pp=2", "--schedules", "all", "--overlap", "none", "--trainer", "any")


def test_an_unevidenced_schedule_gets_the_validated_alternative(capsys):
    doc = search_json(capsys, *SCHEDULES_ALL)
    found = doc["validated_alternative_search"]
    winner, alternative = doc["strategies"][0], doc["validated_alternative"]
    assert winner["strategy"]["schedule"] in found["winner_features_without_evidence"]
    assert found["status"] == "optimal" and alternative["strategy"]["schedule"] in ("1f1b", "interleaved")
    assert alternative["time"]["step_seconds"] >= winner["time"]["step_seconds"]
    assert found["slower_by"] == alternative["time"]["step_seconds"] / winner["time"]["step_seconds"] - 1
    code, out, _ = run(capsys, *SEARCH, *SCHEDULES_ALL)
    assert code == 0 and "Validated alternative" in out and "evidenced only:" in out


def test_the_text_report_says_what_is_left_at_the_point_estimate(capsys):
    code, out, _ = run(capsys, *SEARCH)
    assert code == 0 and "fits at 90 %" in out and "left at the point estimate" in out
    code, out, _ = run(capsys, *SEARCH, "--confidence", "0")
    assert code == 0 and "fits:" in out and "free of" in out and "point estimate" not in out


def without_clock(doc):
    if isinstance(doc, dict):
        return {k: without_clock(v) for k, v in doc.items() if k not in ("solve_seconds", "timing", "wall")}
    if isinstance(doc, list):
        return [without_clock(v) for v in doc]
    return doc


def test_a_search_at_a_confidence_answers_alike_every_time(capsys):
    # per-layer plans under a cap that binds: the plan model's margins by ZeRO stage and recompute families
    extra = ("--trainer", "any", "--recompute", "per-layer", "--memory-cap", "300MiB", "--reserve", "1MiB")
    first, second = (without_clock(search_json(capsys, *extra)) for _ in range(2))
    assert first["strategies"] and first == second
