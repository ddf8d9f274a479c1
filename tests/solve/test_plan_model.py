"""The plan sub-model's builders (ndcp/solve/plan_model.py), each on a tiny hand-written set of coefficients: what
each constraint group allows and forbids. (Their agreement with the full estimators is the oracle tests' part.)"""
from dataclasses import replace

from ortools.sat.python import cp_model

from ndcp.solve.plan_coefficients import (DataParallelCoefficients, PlanCoefficients, StageCoefficients,
                                          WindowCoefficients)
from ndcp.solve.plan_model import build_plan_model
from ndcp.solve.recompute import read_decisions

KEEP, FULL, OFFLOAD = ("dense", "none"), ("dense", "full"), ("dense", "offload")
NO_DP = DataParallelCoefficients(optimizer=0, optimizer_slope=0, windows=(), rounding_count=0)


def stage(**changes) -> StageCoefficients:
    """One stage of 4 dense layers: keeping a layer's activations costs 10 bytes and 100 time units, recomputing it
    fully 2 bytes and 130 units."""
    base = StageCoefficients(
        default_layers=4, fewest=4, most=4, kinds=(("dense", 4),), static=(0,), layer_static=(0,), fixed=0,
        resident=((KEEP, 10), (FULL, 2)), host=(), host_room=0, host_optimizer=((0, 0, False),),
        time=((KEEP, 100), (FULL, 130)), extra_time=0, fill=(), extra_fill=0,
        window=(((KEEP, 0), (FULL, 0)), ((KEEP, 0), (FULL, 0))), extra_window=(0, 0), data_parallel=(NO_DP,))
    return replace(base, **changes)


def coefficients(*stages: StageCoefficients, **changes) -> PlanCoefficients:
    base = PlanCoefficients(
        modes=("none", "full"), zero_count=1, partition_fixed=True, offset=0,
        total_layers=sum(st.default_layers for st in stages), host_capacity=0, fill_is_total=True,
        slowest_weight=1, sum_weight=0, divisor=1, workspace=((KEEP, 0), (FULL, 0)), stages=stages)
    return replace(base, **changes)


def best(c: PlanCoefficients, capacity: int, exclude=()) -> tuple[int, list[int], list[dict]] | None:
    """(objective, layers per stage, counts per stage) of the optimum, None when nothing fits."""
    built = build_plan_model(c, capacity, exclude)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    status = solver.solve(built.model)
    if status != cp_model.OPTIMAL:
        return None
    values = tuple(solver.value(v) for v in built.decisions)
    _, layers, counts = read_decisions(c, values)
    return round(solver.objective_value), layers, counts


def test_memory_within_the_capacity_decides_how_many_layers_recompute():
    c = coefficients(stage())
    assert best(c, 40)[0] == 400  # every layer keeps its activations: 4 x 10 bytes
    objective, _, counts = best(c, 34)  # 10 a + 2 (4 - a) <= 34: three keep, one recomputes
    assert (objective, counts[0]) == (430, {KEEP: 3, FULL: 1})
    assert best(c, 7) is None  # even full recompute on every layer needs 8 bytes


def test_model_states_and_fixed_bytes_count_against_the_capacity():
    c = coefficients(stage(static=(6,), fixed=4))
    assert best(c, 50)[2][0] == {KEEP: 4, FULL: 0}
    assert best(c, 44)[2][0] == {KEEP: 3, FULL: 1}  # 10 bytes fewer room: one layer recomputes


def test_a_recompute_workspace_is_paid_once_any_layer_uses_its_option():
    c = coefficients(stage(), workspace=((KEEP, 0), (FULL, 5)))
    # three keeping and one recomputing now need 30 + 2 + 5 = 37 > 34 bytes: two of each
    assert best(c, 34)[2][0] == {KEEP: 2, FULL: 2}


def test_offloaded_activations_stay_within_the_host_room():
    offload = stage(resident=((KEEP, 10), (OFFLOAD, 0)), time=((KEEP, 100), (OFFLOAD, 101)),
                    host=((OFFLOAD, 3),), host_room=6,
                    window=(((KEEP, 0), (OFFLOAD, 0)), ((KEEP, 0), (OFFLOAD, 0))))
    c = coefficients(offload, modes=("none", "offload"), workspace=((KEEP, 0), (OFFLOAD, 0)))
    assert best(c, 20)[2][0] == {KEEP: 2, OFFLOAD: 2}  # the host holds two layers' 3 bytes each
    assert best(c, 19) is None  # a third layer would have to leave the device


def test_moe_layers_take_the_heavier_recompute_first():
    moe_full, moe_keep = ("moe", "full"), ("moe", "none")
    mixed = stage(default_layers=2, fewest=2, most=2, kinds=(("dense", 1), ("moe", 1)),
                  resident=((KEEP, 10), (FULL, 2), (moe_keep, 10), (moe_full, 2)),
                  time=((KEEP, 100), (FULL, 110), (moe_keep, 100), (moe_full, 200)),
                  window=(((KEEP, 0), (FULL, 0), (moe_keep, 0), (moe_full, 0)),) * 2)
    c = coefficients(mixed, workspace=((KEEP, 0), (FULL, 0), (moe_keep, 0), (moe_full, 0)))
    # one layer must recompute; the dense one would be cheaper, but the estimators give full to the MoE layer first
    assert best(c, 12)[2][0] == {KEEP: 1, FULL: 0, moe_keep: 0, moe_full: 1}


def test_an_excluded_plan_is_not_found_again():
    c = coefficients(stage())
    first = best(c, 34)
    values = (1, first[2][0][KEEP], first[2][0][FULL])  # the ZeRO boolean, then the counts
    assert best(c, 34, exclude=(values,))[2][0] == {KEEP: 2, FULL: 2}


def test_a_collective_is_exposed_beyond_its_overlap_window():
    window = WindowCoefficients(index=0, at_fewest=50, slope=0, count=2, which="forward", last=5, top=50, lines=())
    dp = DataParallelCoefficients(optimizer=7, optimizer_slope=0, windows=(window,), rounding_count=2)
    c = coefficients(stage(window=(((KEEP, 10), (FULL, 20)), ((KEEP, 0), (FULL, 0))), data_parallel=(dp,)))
    # 4 kept layers hide 40 of the 50 units: 10 exposed, paid twice, plus the optimizer step
    assert best(c, 40)[0] == 400 + 2 * 10 + 7
    # under a cap one layer recomputes: 130 more units, and its wider window hides the rest but the last bucket
    assert best(c, 34)[0] == 430 + 2 * 5 + 7


def test_a_free_partition_moves_layers_off_the_stage_with_more_extra_work():
    first = stage(fewest=3, most=5)
    second = stage(fewest=3, most=5, extra_time=150)
    c = coefficients(first, second, partition_fixed=False, offset=1)
    objective, layers, _ = best(c, 100)
    assert (objective, layers) == (500, [5, 3])  # 5 x 100 against 3 x 100 + 150
    assert best(replace(c, partition_fixed=True), 100)[0] == 550  # the default 4 and 4


def test_a_heavily_weighted_pipeline_stays_within_cp_sats_integer_range():
    """Interleaved 1F1B weighs the slowest stage vpp x mbn - 1 (GPT-3 175B on 64 A100, vpp 3, 1,536 micro-batches:
    4,607) and zero bubble pp x mbn: with every time variable up to 1e15, CP-SAT refused such models as a possible
    integer overflow (MODEL_INVALID), which the search read as "no plan". They are solved like any other."""
    for weight in (4607, 32 * 1536, 2 * 64 * 4096):  # interleaved, zero bubble, DualPipe at its largest
        c = coefficients(stage(), stage(), slowest_weight=weight, sum_weight=1, divisor=3)
        assert build_plan_model(c, 40).model.validate() == ""
        # every layer keeps its activations: 400 units per stage, weighted as the slowest and summed once each
        assert best(c, 40)[0] == weight * 400 + 800
