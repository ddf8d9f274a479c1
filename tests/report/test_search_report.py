"""The rich search report: its panels are present and show the numbers the JSON document holds."""
import dataclasses
import re

import pytest
from rich.console import Console

from ndcp.report.csvout import ranking_rows
from ndcp.report.jsonout import search_document
from ndcp.report.search import one_line, render_search
from ndcp.report.terminal import format_seconds, gib
from ndcp.solve.certificate import cpsat_search
from ndcp.solve.exhaustive import exhaustive_search
from ndcp.rules import RULES
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.units import GIB


def problem(cap=0, options=SpaceOptions(), model="tiny", gbs=32, confidence=0.9):
    m = load_model(model)
    cluster = ClusterSpec(device_preset("h100"), 8)
    run = RunSpec(global_batch=gbs, seq_len=1024, memory_cap_bytes=cap, confidence=confidence)
    return m, cluster, run, SearchSpace(m, cluster, run, options)


def render(m, cluster, run, space, result, width=140) -> str:
    console = Console(record=True, width=width, color_system=None)
    render_search(console, m, cluster, run, space, result, "megatron")
    return console.export_text()


@pytest.fixture(scope="module")
def optimal():
    m, cluster, run, space = problem()
    result = cpsat_search(space, top=10)
    return m, cluster, run, space, result


def test_panels_and_numbers_match_json(optimal):
    m, cluster, run, space, result = optimal
    text = render(*optimal)
    doc = search_document(m, cluster, run, space, result)
    for title in ("Assumptions", "Result", "Top 10 strategies", "Best strategy", "Memory per device"):
        assert title in text, title
    assert "optimal" in text and "certificate" in text
    assert f"{doc['space']['size']:,} valid strategies" in text
    for rule, count in doc["space"]["refused"].items():
        assert re.search(rf"{rule}\s+{count:,}\s+{re.escape(RULES[rule][:20])}", text), rule
    assert f"{doc['verified']:,} of {doc['space']['size']:,} strategies verified" in text
    assert f"{doc['solver_calls']} solver call" in text
    ranking = text[text.index("Top 10 strategies"):text.index("Best strategy")]
    rows = [line.split() for line in ranking.splitlines() if re.match(r"^\s*\d+\s+(≡\s+)?\d", line)]
    # every strategy a row, numbered 1..K as in the JSON; a row whose step time equals the one above is marked ≡
    assert [row[0] for row in rows] == [str(s["rank"]) for s in doc["strategies"]] == [
        str(k) for k in range(1, len(doc["strategies"]) + 1)]
    marked = [row[1] == "≡" for row in rows]
    assert marked == [i > 0 and s["time"]["step_seconds"] == doc["strategies"][i - 1]["time"]["step_seconds"]
                      for i, s in enumerate(doc["strategies"])]
    assert ("≡: the same step time as the plan above" in ranking) == any(marked)
    rows = [row[:1] + row[2:] if mark else row for row, mark in zip(rows, marked)]
    for row, s in zip(rows, doc["strategies"]):
        st, mem, t = s["strategy"], s["memory"], s["time"]
        assert row[0] == str(s["rank"])
        assert row[1:5] == [str(st[k]) for k in ("tp", "pp", "cp", "dp")]  # dense model: no ep column
        assert f"{st['mbs']}/{st['mbn']}" in row
        assert st["recompute"] in row
        assert gib(mem["peak_bytes"]) in row and gib(mem["capacity_bytes"] - mem["peak_bytes"]) in row
        assert " ".join(format_seconds(t["step_seconds"]).split()[:1]) in row
        assert f"{100 * t['mfu']:.1f}" in row
        assert f"{t['tokens_per_second_per_gpu']:,.0f}" in row
        compute = t["parts"]["compute_forward"] + t["parts"]["compute_backward"]
        assert f"{100 * compute / t['step_seconds']:.1f}" in row
    best = doc["strategies"][0]
    detail = text[text.index("Best strategy"):]
    assert f"tp={best['strategy']['tp']} pp={best['strategy']['pp']}" in detail
    assert gib(best["memory"]["capacity_bytes"]) in detail
    assert "stage" in detail and ("█" in detail or "░" in detail)


def test_space_summary_shows_pinned_and_searched():
    m, cluster, run, space = problem(options=SpaceOptions(fix=(("tp", 2),), max=(("pp", 2),),
                                                          recompute_modes=("selective",)))
    result = cpsat_search(space, top=3)
    text = " ".join(render(m, cluster, run, space, result).split())
    assert "tp=2" in text and "pp<=2" in text and "recompute=selective" in text
    assert "ep=1 (dense model)" in text


def test_nearest_misses_and_over_memory(optimal):
    """A result whose faster strategies were refused by memory lists them as nearest misses."""
    m, cluster, run, space = problem(cap=int(1.1 * GIB), confidence=0.0)  # the point estimate, as the case was chosen
    result = exhaustive_search(space, top=5)
    assert result.nearest_misses and result.over_memory
    text = " ".join(render(m, cluster, run, space, result).split())
    assert "Nearest misses" in text
    assert f"{result.over_memory:,} dropped for memory" in text
    miss, best = result.nearest_misses[0], result.best
    faster = 100 * (best.step_seconds - miss.step_seconds) / best.step_seconds
    assert f"would be {faster:.0f} % faster" in text
    assert f"needs {miss.memory.peak_bytes / GIB:.2f} GiB of {miss.memory.capacity_bytes / GIB:.2f}" in text
    # at a confidence a miss also names the most that fits at it
    m, cluster, run, space = problem(cap=int(1.2 * GIB))
    result = exhaustive_search(space, top=5)
    banded = [miss for miss in result.nearest_misses if miss.memory.peak_bytes <= miss.memory.capacity_bytes]
    assert banded
    text = " ".join(render(m, cluster, run, space, result).split())
    assert f"({banded[0].memory.fit_bytes / GIB:.2f} at 90 %)" in text


def test_feasible_shows_gap_and_bound(optimal):
    m, cluster, run, space, result = optimal
    bound = result.best.step_seconds * 0.9
    feasible = dataclasses.replace(result, status="feasible", lower_bound_seconds=bound)
    text = " ".join(render(m, cluster, run, space, feasible).split())
    assert "feasible" in text and f"gap {100 * feasible.gap:.2f} %" in text
    assert format_seconds(bound) in text
    assert one_line(feasible).startswith("feasible: ")


def test_infeasible_shows_explanation():
    m, cluster, run, space = problem(options=SpaceOptions(max=(("cp", 1), ("tp", 1))), gbs=3)
    result = cpsat_search(space, top=5)
    assert result.status == "infeasible"
    text = " ".join(render(m, cluster, run, space, result).split())
    assert "infeasible" in text and "No strategy passes the validity rules" in text
    assert "Top " not in text and "Best strategy" not in text
    assert one_line(result).startswith("infeasible: No strategy")


def test_narrow_console_keeps_every_number(optimal):
    """At 80 columns the ranking splits into two tables; nothing is cut off with an ellipsis."""
    text = render(*optimal, width=80)
    ranking = text[text.index("Top 10 strategies"):text.index("Best strategy")]
    assert "…" not in ranking
    assert "Step-time parts" in ranking


def test_csv_rows_match_result(optimal):
    *_, result = optimal
    header, rows = ranking_rows(result)
    assert header[0] == "rank" and "compute_forward_seconds" in header
    assert [r[0] for r in rows] == list(range(1, len(result.strategies) + 1))
    assert [float(r[header.index("step_seconds")]) for r in rows] == [e.step_seconds for e in result.strategies]


def test_the_assumptions_say_whose_plans_the_search_holds():
    from ndcp.report.search import planned_for
    from ndcp.specs import RunSpec

    run = RunSpec(global_batch=8, seq_len=1024)
    assert planned_for("megatron", run).startswith("megatron: only plans it runs as --emit writes them (one "
                                                   "recompute option on every layer; schedules 1f1b, interleaved)")
    assert "recompute per stage" in planned_for("mindformers", run)
    assert planned_for(None, run).startswith("any trainer (--trainer any): every plan ndcp prices, with megatron's")


def test_an_optimal_answer_accepted_within_the_plan_models_rounding_says_how_far_it_is_proven(optimal):
    """The per-layer search accepts a plan within its plan model's time rounding: the answer's proven bound then lies
    below the best verified step, and the report says by how much (a faster plan may exist within it); an exact
    certificate says nothing more."""
    m, cluster, run, space, result = optimal
    assert result.proven_within == pytest.approx(0.0, abs=1e-9) and "within" not in render(m, cluster, run, space,
                                                                                           result)
    bound = result.best.step_seconds * 0.99
    rounded = dataclasses.replace(result, lower_bound_seconds=bound)
    assert rounded.proven_within == pytest.approx(0.01) and rounded.as_dict()["proven_within"] == rounded.proven_within
    text = " ".join(render(m, cluster, run, space, rounded).split())
    assert "proven fastest" in text and "within 1.00 %" in text and format_seconds(bound) in text
    assert "proven optimal within 1.00 % in" in one_line(rounded) and " within " not in one_line(result)
    feasible = dataclasses.replace(rounded, status="feasible")
    assert feasible.proven_within is None


def test_the_best_plans_other_memory_is_listed_part_by_part_under_its_table(optimal):
    """README "Reading the report": `other` is everything else, listed under the table part by part, as `ndcp
    estimate` lists it: the search's winner lists the same parts of its peak stage, summing to its `other` column."""
    from ndcp.report.terminal import group_parts, other_parts
    m, cluster, run, space, result = optimal
    detail = render(*optimal)[render(*optimal).index("Best strategy"):]
    peak = next(s for s in result.best.memory.stages if s.stage == result.best.memory.peak_stage)
    line = next(line for line in detail.splitlines() if line.startswith(f"other on stage {peak.stage} (GiB): "))
    parts = {k: v for k, v in other_parts(peak.parts).items() if v}
    assert parts and all(f"{name.replace('_', ' ')} {gib(value)}" in line for name, value in parts.items())
    assert sum(parts.values()) == group_parts(peak.parts)["other"]
