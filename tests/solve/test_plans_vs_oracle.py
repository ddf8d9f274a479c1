"""Per-layer recompute plans: the joint CP-SAT search equals an exhaustive enumeration of per-stage counts and
partitions (full estimators), and is never slower than the best uniform plan."""
import pytest
from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings, strategies as st

from ndcp.solve.certificate import cpsat_search
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, ModelSpec, RunSpec, device_preset

from .oracle import assert_plan_search_matches_oracle

TOP = 2


@st.composite
def small_problems(draw):
    heads = draw(st.sampled_from([4, 8]))
    model = ModelSpec(name="small", layers=draw(st.integers(2, 5)), hidden=heads * 64, heads=heads,
                      kv_heads=draw(st.sampled_from([1, heads])), ffn_hidden=draw(st.sampled_from([512, 1024])),
                      vocab=draw(st.sampled_from([1000, 32000])), activation=draw(st.sampled_from(["gelu", "swiglu"])))
    cap = draw(st.sampled_from([0, 2**27, 2**28, 2**29, 2**30]))
    run = RunSpec(global_batch=draw(st.sampled_from([2, 4, 8])), seq_len=draw(st.sampled_from([1024, 4096])),
                  memory_cap_bytes=cap, reserve_bytes=2**20)
    gpus = draw(st.sampled_from([1, 2, 4]))
    options = SpaceOptions(zero_stages=(1, 3), max=(("pp", 2), ("cp", 1), ("vpp", 1)))
    return SearchSpace(model, ClusterSpec(device_preset(draw(st.sampled_from(["h100", "a100-80g"]))), gpus), run,
                       options)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=small_problems(), offset=st.sampled_from([0, 1]))
def test_joint_plan_search_equals_exhaustive_enumeration(space, offset):
    space = replace(space, options=replace(space.options, max_offset=offset))
    # Plans are proven optimal within PLAN_TOLERANCE (the plan model's rounding stays below it on these cases).
    oracle, solved = assert_plan_search_matches_oracle(space, top=TOP)
    plans = {e.strategy.recompute.summary().split()[0] for e in oracle.strategies}
    event(f"oracle {oracle.status}; best plans: {', '.join(sorted(plans)) or '-'}")
    uniform = cpsat_search(space, top=1)
    if uniform.strategies:
        assert solved.strategies[0].step_seconds <= uniform.strategies[0].step_seconds * (1 + 1e-12)


@pytest.mark.parametrize("cap", [0, 2**26])
def test_plan_search_equals_exhaustive_enumeration_on_the_accounted_split(cap):
    """Per-layer plans on Megatron's embedding+loss accounted split (6 layers, pp=2 x vpp=2: 1, 2, 2, 1)."""
    model = ModelSpec(name="six", layers=6, hidden=256, heads=4, kv_heads=4, ffn_hidden=512, vocab=1000)
    space = SearchSpace(model, ClusterSpec(device_preset("h100"), 4),
                        RunSpec(global_batch=8, seq_len=1024, memory_cap_bytes=cap, reserve_bytes=2**20),
                        SpaceOptions(zero_stages=(1,), fix=(("pp", 2), ("vpp", 2))))
    oracle, _ = assert_plan_search_matches_oracle(space, top=TOP)
    for e in oracle.strategies:
        assert [p.layers for p in e.strategy.recompute.stages or ()] in ([], [1, 2, 2, 1])
