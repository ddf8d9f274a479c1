"""Plan sub-models (ndcp/solve/recompute.py): equivalent items are solved once per search; what decides a sub-model's
path is deterministic time, never the machine's speed."""
import math
import time

import pytest
from ortools.sat.python import cp_model

from ndcp.solve import certificate, recompute
from ndcp.solve.plan_form import RESOLUTION
from ndcp.solve.recompute import (PROBE_DETERMINISTIC_SECONDS, PROBE_SAFETY_SECONDS, TUNED_DETERMINISTIC_SECONDS,
                                  PLAN_TOLERANCE, PlanModel)
from ndcp.space import SearchSpace
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model


def test_items_with_the_same_sub_model_are_solved_once():
    # Llama-3.1-405B on 16,384 H100: cp 2 with micro-batch 1 and cp 4 with micro-batch 2 (dp 64 and 32) hold the
    # same tokens per device and shard over the same ranks; their sub-models are the same model, solved once
    space = SearchSpace(load_model("llama3.1-405b"), ClusterSpec(device_preset("h100"), 16384),
                        RunSpec(global_batch=2048, seq_len=8192, confidence=0.0))  # the point estimate, as found
    items = {(layout.cp, mbs): (layout, mbs, mbn) for layout, mbs, mbn in space.walk().batches
             if (layout.tp, layout.pp, layout.vpp, layout.schedule, layout.cp_comm, layout.optimizer_offload)
             == (8, 16, 7, "interleaved", "p2p", False)}
    _, _, modes = space.inner_choices(8)
    plans = [PlanModel(space, *items[key], True, tuple(modes), tuple(space.zero_stages(items[key][0])))
             for key in ((2, 1), (4, 2))]
    capacity = space.run.capacity(space.cluster.device.memory_bytes)
    solved: dict = {}
    first, second = (plan.solve(capacity, 30, solved=solved) for plan in plans)
    assert len(solved) == 1
    fresh = plans[1].solve(capacity, 30)  # the second item's own solve agrees with the one it was served
    assert (second.bound_seconds, second.assignment, second.proven) == (fresh.bound_seconds, fresh.assignment,
                                                                        fresh.proven)
    assert second.strategy == fresh.strategy
    assert (first.strategy.cp, first.strategy.mbs, second.strategy.cp, second.strategy.mbs) == (2, 1, 4, 2)
    # another item's sub-model is its own
    other = PlanModel(space, *items[(1, 1)], True, tuple(modes), tuple(space.zero_stages(items[(1, 1)][0])))
    other.solve(capacity, 30, solved=solved)
    assert len(solved) == 2


def test_what_decides_a_sub_models_path_is_deterministic_time(monkeypatch):
    """Every CP-SAT solve of a plan sub-model is bounded by deterministic time (the probe against the cutoff, the
    tuned search), or runs to the search's own deadline (the default branching, after the tuned search stalled).
    The one other wall-clock limit is the probe's safety net, far above what its deterministic budget takes: a
    wall-clock limit that short (the probe had 0.5 s) lets the machine's load choose which plan, within the gap
    limit, a sub-model answers, and so the ranking (docs/solver.md §9, Determinism)."""
    # llama3-70b on 64 H100 under 60 GiB, top 3: three tuned solves and one probe against the cutoff (~4 s)
    from tests.solve.test_interrupt import TIGHT

    limits, original = [], recompute.interruptible

    def spy(solver, model, callback=None):
        p = solver.parameters
        limits.append((p.max_time_in_seconds, p.max_deterministic_time, p.search_branching))
        return original(solver, model, callback)

    monkeypatch.setattr(recompute, "interruptible", spy)
    time_limit = 600
    result = certificate.plan_search(TIGHT, top=3, time_limit=time_limit)
    assert result.status == "optimal"
    probes = [(wall, det) for wall, det, _ in limits if det == PROBE_DETERMINISTIC_SECONDS]
    assert probes and all(wall == PROBE_SAFETY_SECONDS for wall, _ in probes)
    for wall, det, branching in limits:
        if det == PROBE_DETERMINISTIC_SECONDS:
            continue
        # the tuned search stops at its deterministic budget; both it and the default branching have the deadline
        assert det == (TUNED_DETERMINISTIC_SECONDS if branching == cp_model.LP_SEARCH else float("inf"))
        assert wall > time_limit - 60  # what is left of the search's time (it takes seconds)
    assert PROBE_SAFETY_SECONDS >= 20 * PROBE_DETERMINISTIC_SECONDS  # a net, not a budget (docs/tuning.md)


def test_a_sub_model_cp_sat_refuses_is_unknown_never_empty(monkeypatch):
    """A model CP-SAT refuses (MODEL_INVALID) tells nothing of its plans: the search keeps only its bound (as at a
    timeout, `feasible`), where reading it as "no plan" would drop every plan of it from a proof."""
    from tests.solve.test_plan_model import coefficients, stage

    def overflowing(*_args, **_kwargs):
        m = cp_model.CpModel()
        x = m.new_int_var(0, 2**61, "x")
        m.minimize(4 * x)  # past 2^62: refused
        return recompute.BuiltPlanModel(m, [], [], [], [x])

    monkeypatch.setattr(recompute, "build_plan_model", overflowing)
    plan = PlanModel.__new__(PlanModel)  # the coefficients are all _solve reads
    plan.coefficients = coefficients(stage())
    with pytest.raises(recompute.PlanTimeout):
        plan._solve(40, (), None, time.perf_counter() + 30, 0, 1, None)
    with pytest.raises(recompute.PlanTimeout):  # with a cutoff: the probe, then the model without it
        plan._solve(40, (), math.floor(1e9), time.perf_counter() + 30, 0, 1, None)


def test_the_plan_models_rounding_is_a_small_fraction_of_the_step_however_many_micro_batches():
    # GPT-3 175B on 64 A100 with 1,536 micro-batches: the schedule's linear form weighs each layer's time thousands of
    # times, so a unit of 1e-6 of the step per coefficient (as before) left a layer about 50 units and the rounding up
    # to 0.47 % of the step; the unit shares RESOLUTION of the bound out over the weighed coefficients instead
    space = SearchSpace(load_model("gpt3-175b"), ClusterSpec(device_preset("a100-80g"), 64),
                        RunSpec(global_batch=1536, seq_len=2048, confidence=0.0))
    layout, mbs, mbn = next((layout, mbs, mbn) for layout, mbs, mbn in space.walk().batches
                            if (layout.tp, layout.pp, layout.vpp, mbs) == (4, 16, 6, 1))
    assert mbn == 1536
    _, _, modes = space.inner_choices(4)
    plan = PlanModel(space, layout, mbs, mbn, True, tuple(modes), tuple(space.zero_stages(layout)))
    solution = plan.solve(space.run.capacity(space.cluster.device.memory_bytes), 60)
    assert solution is not None and solution.proven
    # the weighed layer terms take RESOLUTION of it, the data-parallel terms' own rounding about as much again: far
    # under the plan tolerance (1e-4), which then decides when a plan is accepted
    bound = solution.bound_seconds
    assert solution.rounding_seconds <= 3 * RESOLUTION * bound < PLAN_TOLERANCE * bound
    assert plan.form.layer_time[("dense", "none")] / plan.form.unit > 1e4  # a layer is many units, not ~50
