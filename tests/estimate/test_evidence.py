"""Evidence behind an estimate (ndcp.estimate.evidence, docs/evidence.md): the generated table is current, its
held-out bands cover what the docs state, and the band rule behaves as documented."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from ndcp.estimate.evidence import (EVIDENCED_FEATURES, TABLE_PATH, EvidenceTable, Least, Residual, comparable,
                                    device_generation, evidence_for, lower_edge, plan_evidence, plan_features, shipped_table, upper_edge)
from ndcp.specs.library import load_model
from ndcp.specs.recompute import RecomputePlan, StageRecompute
from ndcp.specs.run import RunSpec
from ndcp.specs.strategy import Strategy

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
LLAMA = load_model("llama3-8b")
MIXTRAL = load_model("mixtral-8x7b")
RUN = RunSpec(global_batch=64, seq_len=4096)
FEATURES = sorted(EVIDENCED_FEATURES) + ["activation offload", "dualpipev"]


def test_the_table_records_the_digest_of_the_runs_files_it_was_built_from():
    # a runs file changed without `python scripts/build_evidence.py` fails here
    recorded = {entry["path"]: entry["sha256"] for entry in DOCUMENT["inputs"]}
    assert sorted(recorded) == ["examples/measured_runs_2.yaml", "examples/measured_runs_nvl72.yaml",
                                "examples/published_runs.yaml"]
    for path, digest in recorded.items():
        assert hashlib.sha256((ROOT / path).read_bytes()).hexdigest() == digest, path


def test_held_out_bands_cover_at_least_85_percent_of_step_times_and_peaks():
    coverage = shipped_table().held_out_coverage(0.9)
    assert coverage._asdict() == DOCUMENT["held_out_coverage"]  # the figure the script printed, and the docs state
    assert (coverage.step_covered, coverage.step_rows) == (109, 113)
    assert (coverage.peak_covered, coverage.peak_rows) == (24, 27)
    assert coverage.step_share >= 0.85 and coverage.peak_share >= 0.85


def test_confidence_zero_is_the_point_estimate():
    evidence = evidence_for(frozenset({"trainer megatron", "dense", "dualpipev"}), 0.0)
    assert evidence.step_band == (1.0, 1.0) and evidence.memory_high == 1.0
    assert evidence.features_without_evidence == ("dualpipev",)  # named even then


@settings(max_examples=60, deadline=None)
@given(st.frozensets(st.sampled_from(FEATURES), max_size=6), st.floats(0.05, 0.95), st.floats(0.0, 0.2))
def test_bands_hold_the_point_and_widen_with_confidence(features, confidence, more):
    narrow, wide = evidence_for(features, confidence), evidence_for(features, min(0.99, confidence + more))
    assert narrow.step_band[0] <= 1.0 <= narrow.step_band[1] and narrow.memory_high >= 1.0
    assert wide.step_band[0] <= narrow.step_band[0] and wide.step_band[1] >= narrow.step_band[1]
    assert wide.memory_high >= narrow.memory_high


def test_each_feature_without_evidence_widens_the_band_by_the_pooled_band():
    base = frozenset({"trainer megatron", "dense", "device hopper", "zero-1"})
    known, unknown = evidence_for(base, 0.9), evidence_for(base | {"dualpipev", "activation offload"}, 0.9)
    pooled = evidence_for(frozenset(), 0.9)
    assert unknown.features_without_evidence == ("activation offload", "dualpipev")
    assert unknown.step_band[1] == pytest.approx(known.step_band[1] * pooled.step_band[1] ** 2)
    assert unknown.step_band[0] == pytest.approx(known.step_band[0] * pooled.step_band[0] ** 2)
    assert unknown.memory_high == pytest.approx(known.memory_high * pooled.memory_high ** 2)
    assert {"activation offload", "dualpipev"}.isdisjoint(EVIDENCED_FEATURES)


def test_conformal_edges_are_the_stated_order_statistics():
    ratios = [float(i) for i in range(1, 11)]  # n = 10
    assert upper_edge(ratios, 0.9) == 10.0  # ceil(0.9 * 11) = 10th
    assert upper_edge(ratios, 0.5) == 6.0  # ceil(5.5) = 6th
    assert upper_edge(ratios, 0.95) == 10.0  # ceil(10.45) = 11 > n: the largest
    assert lower_edge(ratios, 0.9) == 1.0  # floor(1.1) = 1st
    assert lower_edge(ratios, 0.5) == 5.0  # floor(5.5) = 5th
    assert lower_edge(ratios, 0.99) == 1.0  # floor(0.11) = 0: the smallest


def _row(i: int, source: str, *features: str) -> Residual:
    return Residual(f"r{i}", source, frozenset(features), 1.0)


def test_comparable_rows_narrow_by_the_largest_shared_feature_while_enough_rows_and_sources_remain():
    rows = tuple(_row(i, f"s{i % 3}", "a", *(("b",) if i < 6 else ()), *(("c",) if i < 2 else ()))
                 for i in range(9))
    assert comparable(rows, frozenset({"a", "b", "c"}), Least(rows=3, sources=3)) == rows[:6]  # a, then b; c: 2 rows
    assert comparable(rows, frozenset({"b"}), Least(rows=7, sources=1)) == rows  # b leaves 6 < 7: all rows
    assert comparable(rows, frozenset({"c"}), Least(rows=2, sources=2)) == rows[:2]
    assert comparable(rows, frozenset({"c"}), Least(rows=2, sources=3)) == rows  # c's rows come from 2 sources


def test_comparable_rows_are_the_plans_model_class_first_where_enough_publications_measured_it():
    # 6 MoE rows of 3 sources (ratio 1.4) among 12 dense rows of 4 sources (ratio 1.0), all sharing "a"
    moe = tuple(Residual(f"m{i}", f"s{i % 3}", frozenset({"a", "moe"}), 1.4) for i in range(6))
    dense = tuple(Residual(f"d{i}", f"s{i % 4}", frozenset({"a", "dense"}), 1.0) for i in range(12))
    rows = moe + dense
    assert comparable(rows, frozenset({"a", "moe"}), Least(rows=6, sources=4)) == moe  # 3 sources suffice for a class
    assert comparable(rows, frozenset({"a", "dense"}), Least(rows=6, sources=4)) == dense
    assert comparable(rows, frozenset({"a", "moe"}), Least(rows=7, sources=4)) == rows  # too few MoE rows: all
    two_sources = tuple(r._replace(source=f"s{int(r.id[1:]) % 2}") for r in moe) + dense
    assert comparable(two_sources, frozenset({"a", "moe"}), Least(rows=6, sources=4)) == two_sources


def test_a_moe_plans_band_is_read_from_the_measured_moe_runs():
    table = shipped_table()
    moe_rows = tuple(r for r in table.steps if "moe" in r.features)
    features = plan_features(MIXTRAL, Strategy(tp=1, pp=4, ep=8, vpp=2, mbs=1, zero=1), RUN, "h100")
    evidence = table.evidence(features, 0.9)
    assert evidence.runs == len(moe_rows) >= 19  # the MoE rows come from 3 publications: no narrower set qualifies
    assert evidence.step_band == (pytest.approx(lower_edge(sorted(r.ratio for r in moe_rows), 0.95)),
                                  pytest.approx(upper_edge(sorted(r.ratio for r in moe_rows), 0.95)))


def test_held_out_coverage_counts_rows_inside_the_bands_of_the_other_sources():
    rows = tuple(Residual(f"r{i}", f"s{i}", frozenset({"a"}), 1.0 + i / 10) for i in range(4))
    table = EvidenceTable(rows, ())
    coverage = table.held_out_coverage(0.5)
    # each row against the three others' band at 50 % (level 0.75: the 1st and the 3rd of 3, widened to hold 1.0):
    # 1.0, 1.1 and 1.2 inside, 1.3 above the others' largest
    assert (coverage.step_rows, coverage.step_covered) == (4, 3)


def test_plan_features_name_what_an_estimate_rests_on():
    plain = plan_features(LLAMA, Strategy(dp=8, tp=1), RUN, "h100")
    assert plain == {"trainer megatron", "device hopper", "dense", "zero-1", "no recompute"}
    assert plan_features(LLAMA, Strategy(dp=1), RUN) == {"trainer megatron", "dense", "no recompute"}
    piped = Strategy(dp=2, pp=2, mbn=8, zero=3, dp_shard=1, cp=2, schedule="dualpipev",
                     recompute=RecomputePlan("per-stage", (StageRecompute(offload=16), StageRecompute(full=16))))
    fp8 = RunSpec(global_batch=64, seq_len=4096, precision="fp8", fp8_recipe="tensorwise", trainer="torchtitan")
    assert plan_features(MIXTRAL, piped, fp8, "b200") == {
        "trainer torchtitan", "device blackwell", "moe", "moe dispatcher alltoall", "hsdp", "context parallel",
        "cp comm p2p", "fp8 tensorwise", "dualpipev", "activation offload", "full recompute"}
    assert "recompute modules" in plan_features(MIXTRAL, Strategy(recompute=RecomputePlan("moe_act")), RUN)
    assert "fsdp" in plan_features(LLAMA, Strategy(dp=8, zero=3), RUN)


def test_plan_features_name_the_megatron_memory_settings_where_they_price_something():
    run = RunSpec(64, 4096, precision="fp8", wgrad_deferral_limit=22, disable_parameter_transpose_cache=True)
    piped = Strategy(dp=2, pp=4, zero=0)
    assert plan_features(LLAMA, piped, run) >= {"output wgrad deferred", "fp8 weights uncached"}
    # no PP: Megatron does not defer; FP8 parameters (ZeRO >= 1) keep their transposes either way
    assert not plan_features(LLAMA, Strategy(dp=8, zero=1), run) & {"output wgrad deferred", "fp8 weights uncached"}


def test_plan_features_name_the_weight_gradient_delay_where_the_expert_overlap_runs():
    run = RunSpec(64, 4096, overlap="ep", delay_wgrad_compute=True)
    assert "wgrad delayed" in plan_features(MIXTRAL, Strategy(dp=8, ep=8), run)
    assert "wgrad delayed" not in plan_features(MIXTRAL, Strategy(dp=8, ep=1), run)  # no all-to-all to overlap


def test_plan_features_name_the_bf16_first_and_last_layers_under_fp8_only():
    """No measured row keeps layers in BF16: a plan that does is a feature no row carries (unvalidated)."""
    run = RunSpec(64, 4096, precision="fp8", fp8_recipe="tensorwise", last_layers_bf16=1)
    assert "fp8 bf16 first/last layers" in plan_features(LLAMA, Strategy(dp=8), run)
    derived = replace(run, precision="bf16")  # the setting is inert without FP8
    assert "fp8 bf16 first/last layers" not in plan_features(LLAMA, Strategy(dp=8), derived)


def test_plan_features_name_the_scan_mixers_of_hybrid_models():
    nano, qwen_next = load_model("nemotron-3-nano"), load_model("qwen3-next-80b-a3b")
    assert plan_features(nano, Strategy(dp=8, ep=8), RUN) >= {"moe", "mamba-2"}
    assert "gated deltanet" in plan_features(qwen_next, Strategy(dp=8), RUN)
    assert not {"mamba-2", "gated deltanet"} & plan_features(MIXTRAL, Strategy(dp=8), RUN)
    # the Megatron-Bridge Nemotron-3 Nano rows evidence Mamba-2 layers; no measured run has Gated DeltaNet layers
    assert "mamba-2" in EVIDENCED_FEATURES and "gated deltanet" not in EVIDENCED_FEATURES


def test_every_blackwell_preset_is_one_generation():
    assert {device_generation(name) for name in ("b200", "gb200-nvl72", "b300", "gb300-nvl72")} == {"blackwell"}
    assert device_generation("h800") == "hopper" and device_generation("mi300x") == "cdna3"


def test_plan_evidence_is_the_band_of_the_plan_features():
    strategy = Strategy(dp=8, recompute=RecomputePlan("offload"))
    evidence = plan_evidence(LLAMA, "h100", RUN, strategy)
    assert evidence == evidence_for(plan_features(LLAMA, strategy, RUN, "h100"), 0.9)
    assert evidence.features_without_evidence == ("activation offload",)
    assert evidence.peak_bytes_high(10**9) == -(-10**9 * evidence.memory_high // 1)


def test_a_band_rests_on_enough_rows_for_its_confidence():
    """Split-conformal edges are order statistics only when ceil(level (n + 1)) <= n: at 90 % a one-sided peak edge
    needs 9 rows, a two-sided step band (level 95 %) 19; a narrower comparable set is not taken. So a plan is never
    said to fit at 90 % on the largest of a handful of rows."""
    from ndcp.estimate.evidence import PEAK_LEAST, STEP_LEAST, least_for
    assert least_for(PEAK_LEAST, 0.9, two_sided=False).rows == 9
    assert least_for(STEP_LEAST, 0.9, two_sided=True).rows == 19
    assert least_for(PEAK_LEAST, 0.5, two_sided=False) == PEAK_LEAST  # below the floor: the floor stays
    table = shipped_table()
    for features in {row.features for row in table.peaks + table.steps}:
        evidence = table.evidence(features, 0.9)
        assert evidence.memory_rows >= 9 and evidence.runs >= 19


def test_a_higher_confidence_never_narrows_a_band_even_where_it_stops_the_narrowing_sooner():
    """At 84 % nine 1F1B peak rows suffice; at 91 % ten are needed and the band falls back to all 27 rows, whose
    edge (1.085) lies below the worst of those nine (1.128): the closer rows' range bounds the wider set's edge."""
    table = shipped_table()
    assert evidence_for(frozenset({"1f1b", "torch.compile"}), 0.90625).memory_high >= \
        evidence_for(frozenset({"1f1b", "torch.compile"}), 0.84375).memory_high
    levels = [i / 40 for i in range(1, 40)]
    for features in {row.features for row in table.peaks + table.steps}:
        bands = [table.evidence(features, c) for c in levels]
        for narrow, wide in zip(bands, bands[1:]):
            assert wide.memory_high >= narrow.memory_high
            assert wide.step_band[0] <= narrow.step_band[0] and wide.step_band[1] >= narrow.step_band[1]
