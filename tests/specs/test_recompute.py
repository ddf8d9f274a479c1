"""Recompute options are data: each row says what it keeps and re-runs, and the estimators honour its weight."""
import pytest
from hypothesis import given, settings, strategies as st

from ndcp.estimate.activations import layer_activation_bytes
from ndcp.estimate.time import layer_time
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, SpecError, StageRecompute, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.recompute import HEAVIEST, HEAVIEST_FIRST, NO_RECOMPUTE, OPTIONS, RECOMPUTE_MODES

CLUSTER = ClusterSpec(device_preset("h100"), 64)


def test_options_are_rows_with_distinct_names_and_weights():
    assert RECOMPUTE_MODES == ("none", "selective", "full")
    assert len({o.weight for o in OPTIONS}) == len(OPTIONS)
    assert (NO_RECOMPUTE, HEAVIEST) == ("none", "full")
    assert HEAVIEST_FIRST == ("full", "selective", "none")


def test_stage_counts_by_option_name():
    stage = StageRecompute(selective=7, full=1)
    assert stage.counts == (0, 7, 1) and stage.layers == 8 and stage.count("full") == 1
    assert stage.as_dict() == {"none": 0, "selective": 7, "full": 1}
    with pytest.raises(SpecError, match="recompute option"):
        StageRecompute(offload=3)
    with pytest.raises(SpecError, match="recompute.full"):
        StageRecompute(full=-1)


def test_per_stage_plan_json_and_summary():
    plan = RecomputePlan(mode="per-stage", stages=(StageRecompute(none=3), StageRecompute(selective=2, full=1)))
    assert plan.summary() == "per-stage 3n/2s/1f"
    assert plan.as_json() == {"stages": [{"stage": 0, "layers": 3, "none": 3, "selective": 0, "full": 0},
                                         {"stage": 1, "layers": 3, "none": 0, "selective": 2, "full": 1}]}


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b"]),
       kind=st.sampled_from(["dense", "moe"]), tp=st.sampled_from([1, 2, 8]), cp=st.sampled_from([1, 2]),
       mbs=st.sampled_from([1, 2]), sp=st.booleans(), flash=st.booleans(),
       trainer=st.sampled_from(["megatron", "torchtitan"]), seq=st.sampled_from([2048, 8192]))
def test_heavier_options_keep_no_more_and_rerun_no_less(name, kind, tp, cp, mbs, sp, flash, trainer, seq):
    """The order the solver's bounds and the kind rule rely on (specs/recompute.py RecomputeOption.weight)."""
    model = load_model(name)
    if kind == "moe" and model.moe is None:
        kind = "dense"
    run = RunSpec(global_batch=64, seq_len=seq, flash_attention=flash, trainer=trainer)
    sp = sp and tp > 1
    kept = [layer_activation_bytes(model, run, kind, o, tp, cp, 1, 1, mbs, sp) for o in reversed(HEAVIEST_FIRST)]
    rerun = [layer_time(model, CLUSTER, run, kind, o, tp, cp, 1, 1, mbs, sp).recompute for o in reversed(HEAVIEST_FIRST)]
    assert all(a >= b for a, b in zip(kept, kept[1:])), kept
    assert all(a <= b for a, b in zip(rerun, rerun[1:])), rerun
    assert rerun[0] == 0.0
