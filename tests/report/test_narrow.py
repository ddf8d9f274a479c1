"""Every report fits the terminal: at 80 and 200 columns no line is wider and nothing is cut with an ellipsis;
the compact ranking keeps every number, long pipelines are summarised, and equivalent plans share one row."""
import dataclasses
import json
import re

import pytest

from ndcp.estimate.memory import estimate_memory
from ndcp.report.progress import SearchProgress
from ndcp.report.search import compact_degrees, tied_with_previous
from ndcp.report.terminal import GROUP_GLYPHS, format_seconds, legend, memory_bar, shown_stages
from ndcp.solve.result import Progress, off_node_peers
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.strategy import Strategy

from ..cli_helpers import run

TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024"]
TINY_MOE = ["tiny-moe", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024"]
PP64 = ["llama3.1-405b", "--device", "h100", "--gpus", "2048", "--global-batch", "2048", "--seq-len", "8192",
        "--strategy", "tp=8,pp=64,mbs=1,zero=1,sp=on,recompute=full"]
RUNS_CSV = ("id,model,device,gpus,global_batch,seq_len,tp,pp,dp,cp,ep,vpp,mbs,zero,sp,recompute,step_seconds,mfu,"
            "grad_dtype,mfu_convention\n"
            "a_long_run_identifier_that_does_not_fit_in_a_narrow_column,llama3-8b,h100,8,128,8192,1,1,4,2,1,1,1,1,"
            "false,selective,12.27,62.47%,bf16,full\n")


def report(capsys, monkeypatch, width, *args):
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = run(capsys, *args)
    assert code == 0, err
    return out


def assert_fits(text, width):
    assert "…" not in text
    wide = [line for line in text.splitlines() if len(line) > width]
    assert not wide, wide[0]


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("command", [
    ["search", *TINY], ["search", *TINY_MOE, "--recompute", "uniform"], ["estimate", *PP64],
    ["recompute", *TINY, "--strategy", "pp=2", "--points", "3"], ["models"], ["devices"]])
def test_reports_fit_the_width(capsys, monkeypatch, width, command):
    assert_fits(report(capsys, monkeypatch, width, *command), width)


@pytest.mark.parametrize("width", [80, 200])
def test_validate_fits_the_width(capsys, monkeypatch, tmp_path, width):
    runs = tmp_path / "runs.csv"
    runs.write_text(RUNS_CSV)
    text = report(capsys, monkeypatch, width, "validate", runs)
    assert_fits(text, width)
    assert "62.5" in text and "12.27" in text  # the measured MFU (62.47%) and step, in either layout


def test_estimate_of_a_deep_pipeline_is_summarised(capsys, monkeypatch):
    """pp=64: the first, the last and the peak stage, the stages between as rows `a-b`: under 60 lines at 80."""
    text = report(capsys, monkeypatch, 80, "estimate", *PP64)
    assert len(text.splitlines()) < 60
    doc = json.loads(run(capsys, "estimate", *PP64, "--json", "-")[1])
    assert f"{doc['memory']['peak_bytes'] / 2**30:.2f}" in text
    assert "-62 " in text and "stages a to b, shown by the heaviest" in text


def test_shown_stages_keep_the_ends_and_the_peak():
    model = load_model("llama3.1-405b")
    cluster = ClusterSpec(device_preset("h100"), 2048)
    run_spec = RunSpec(global_batch=2048, seq_len=8192)
    from ndcp.cli import build_strategy

    strategy = build_strategy(model, cluster, run_spec, {"tp": 8, "pp": 64, "sp": True, "recompute": "full"})
    memory = estimate_memory(model, cluster, run_spec, strategy)
    rows = shown_stages(memory)
    labels = [label for label, _ in rows]
    assert labels[0] == "0" and labels[-1] == "63" and str(memory.peak_stage) in labels
    assert len(rows) <= 5
    for label, stage in rows:  # a grouped row shows the heaviest stage of its run
        if "-" in label:
            first, last = map(int, label.split("-"))
            assert stage.total_bytes == max(s.total_bytes for s in memory.stages[first:last + 1])


def test_compact_ranking_keeps_every_number(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    doc = json.loads(run(capsys, "search", *TINY_MOE, "--recompute", "uniform", "--json", "-")[1])
    text = report(capsys, monkeypatch, 80, "search", *TINY_MOE, "--recompute", "uniform")
    ranking = text[text.index("Top "):text.index("Best strategy")]
    rows = [line.split() for line in ranking[:ranking.index("Step-time parts")].splitlines()
            if re.match(r"^\s*\d+ ", line)]
    assert [row[0] for row in rows] == [str(k) for k in range(1, len(doc["strategies"]) + 1)]  # ranks 1..K
    ties = [row[1] == "≡" for row in rows]
    assert any(ties) and "≡: the same step time as the plan above" in ranking
    assert ties == [i > 0 and s["time"]["step_seconds"] == doc["strategies"][i - 1]["time"]["step_seconds"]
                    for i, s in enumerate(doc["strategies"])]
    for s in doc["strategies"]:
        st = s["strategy"]
        degrees = f"tp{st['tp']} pp{st['pp']} cp{st['cp']} dp{st['dp']} ep{st['ep']} etp{st['etp']}"
        assert degrees in ranking  # MoE degrees include etp
        assert format_seconds(s["time"]["step_seconds"]) in ranking
        assert f"{s['memory']['peak_bytes'] / 2**30:.2f}" in ranking


def test_equal_times_are_marked_and_the_canonical_plan_leads():
    """A plan at the step time of the one above it is marked tied; the ranking orders equal times by least peak
    memory, then fewest peers across nodes, then identity."""
    model = load_model("tiny")
    cluster = ClusterSpec(device_preset("h100"), 8)
    run_spec = RunSpec(global_batch=32, seq_len=1024)
    from ndcp.cli import build_strategy
    from ndcp.solve.result import Evaluated
    from ndcp.estimate.time import estimate_time

    def priced(values):
        s = build_strategy(model, cluster, run_spec, values)
        return Evaluated(s, estimate_memory(model, cluster, run_spec, s), estimate_time(model, cluster, run_spec, s),
                         off_node_peers(s, cluster.device.devices_per_node))

    a, b = priced({"tp": 1, "mbs": 1}), priced({"tp": 1, "mbs": 4})
    heavy, light = sorted([a, b], key=lambda e: e.memory.peak_bytes, reverse=True)
    tied = [heavy, dataclasses.replace(light, time=heavy.time)]  # the same step time, different peaks
    ranked = sorted(tied, key=Evaluated.rank_key)
    assert ranked[0].strategy == light.strategy  # least peak memory first
    assert tied_with_previous(ranked) == [False, True]
    assert tied_with_previous([a, b]) == [False, a.step_seconds == b.step_seconds]


def test_off_node_peers_follow_megatron_placement():
    """8 devices per node, TP fastest: tp8 keeps its group in the node, dp2 at stride 8 has its peer outside."""
    s = Strategy(tp=8, pp=1, cp=1, dp=2, ep=1, etp=1, vpp=1, mbs=1, mbn=1)
    assert off_node_peers(s, 8) == 1
    assert off_node_peers(s.with_(tp=4, dp=4), 8) == 2  # dp4 at stride 4: one peer in the node, two outside
    assert off_node_peers(s.with_(tp=2, cp=2, dp=4), 8) == 2


def test_compact_degrees():
    s = Strategy(tp=4, pp=1, cp=1, dp=128, ep=1, etp=1, vpp=1, mbs=1, mbn=1)
    assert compact_degrees(s, ep=False) == "tp4 pp1 cp1 dp128"
    assert compact_degrees(s.with_(ep=8, vpp=2), ep=True) == "tp4 pp1 cp1 dp128 ep8 etp1 vpp2"


def test_memory_parts_have_distinct_glyphs():
    assert len(set(GROUP_GLYPHS.values())) == len(GROUP_GLYPHS)
    bar = memory_bar({"parameters": 1, "gradients": 1, "optimizer": 1, "activations": 1, "other": 1}, 10, width=10)
    assert all(glyph in bar.plain for glyph in GROUP_GLYPHS.values())
    assert all(f"{glyph} {group}" in legend().plain for group, glyph in GROUP_GLYPHS.items())


def test_progress_line_stays_within_the_width():
    progress = SearchProgress(True, "cp-sat")
    progress.last = Progress("solving per-stage recompute plans", 1.0, 14.026, 14.0, done=1234)
    full = progress.line()
    assert "solving per-stage recompute plans" in full
    short = progress.line(40)
    assert len(short) <= 40 and short.startswith("cp-sat ") and full.startswith(short)
