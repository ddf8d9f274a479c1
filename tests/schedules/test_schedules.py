"""Each pipeline schedule: what it runs, what each stage holds in flight, and its critical path, pinned to the papers
(Narayanan et al. 2021 §2.2; Korthikanti et al. 2022 §4.2.3; docs/formulas.md §4)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ndcp.schedules import SCHEDULES, default_schedule, schedule_named

ONE_F_ONE_B, INTERLEAVED = schedule_named("1f1b"), schedule_named("interleaved")


def test_registry_names_each_schedule_once_and_defaults_by_vpp():
    assert set(SCHEDULES) == {"1f1b", "interleaved", "zb-h1", "dualpipe", "dualpipev"}
    assert default_schedule(1) == "1f1b"
    assert all(default_schedule(v) == "interleaved" for v in range(2, 9))


def test_1f1b_holds_pp_minus_stage_micro_batches():
    assert [ONE_F_ONE_B.in_flight(s, 4, 1, 8) for s in range(4)] == [4, 3, 2, 1]
    assert [ONE_F_ONE_B.in_flight(s, 4, 1, 2) for s in range(4)] == [2, 2, 2, 1]


def test_interleaved_first_stage_holds_korthikanti_factor():
    # Stage 0 holds pp*vpp*(1 + (pp-1)/(pp*vpp)) chunks (Korthikanti §4.2.3).
    pp, vpp = 8, 3
    assert INTERLEAVED.in_flight(0, pp, vpp, 64) == pp * vpp + pp - 1
    assert INTERLEAVED.in_flight(pp - 1, pp, vpp, 64) < INTERLEAVED.in_flight(0, pp, vpp, 64)


@pytest.mark.parametrize("p,m,v", [(4, 8, 1), (8, 64, 1), (8, 64, 3), (16, 128, 2)])
def test_bubble_fraction_matches_narayanan(p, m, v):
    # Narayanan 2021 §2.2.1: (p-1)/m for 1F1B; §2.2.2: (p-1)/(v m) interleaved, with uniform stages of time t
    t = 0.37
    bubble = schedule_named(default_schedule(v)).pipeline_seconds(p * t, t, m, v, p) - m * t
    assert bubble / (m * t) == pytest.approx((p - 1) / (v * m))


def test_pipeline_seconds_works_on_numpy_grids():
    sums, maxes = np.array([4.0, 8.0]), np.array([1.0, 2.0])
    assert np.allclose(INTERLEAVED.pipeline_seconds(sums, maxes, np.array([8, 16]), 2, 4),
                       [8 + 1.5, 32 + 3.0])
    assert ONE_F_ONE_B.pipeline_seconds(3.0, 3.0, 5, 1, 1) == 15.0  # pp = 1: mbn x stage time


def test_interleaving_rules():
    assert INTERLEAVED.refusal(32, 1, 2, 8).rule == "vpp_layers"  # needs pp > 1
    assert INTERLEAVED.refusal(29, 4, 2, 8) is None  # uneven: Megatron runs it with --pipeline-model-parallel-layout
    assert INTERLEAVED.refusal(30, 4, 2, 8) is None  # 30 + 2: the embedding+loss accounted split (3, 4 x 6, 3)
    assert INTERLEAVED.refusal(7, 4, 2, 8).rule == "vpp_layers"  # 7 layers < 8 chunks: one would hold none
    assert INTERLEAVED.refusal(8, 4, 2, 8) is None  # one layer per chunk
    assert INTERLEAVED.refusal(7, 4, 2, 8, explicit_partition=True) is None  # checked by the partition rule
    assert INTERLEAVED.refusal(32, 4, 2, 3).rule == "vpp_mbn"  # mbn >= pp (current Megatron-Core)
    assert INTERLEAVED.refusal(32, 4, 2, 6) is None  # no longer a multiple of pp
    assert INTERLEAVED.refusal(32, 4, 2, 8) is None
    assert not ONE_F_ONE_B.accepts_vpp(2) and not INTERLEAVED.accepts_vpp(1)


@st.composite
def stage_times(draw):
    """Per stage (total, full backward, weight-gradient GEMMs) as the estimators produce them: the forward and the
    backward's input-gradient GEMMs each cost at least the weight-gradient ones (W <= total / 3, B >= 2W)."""
    total = draw(st.floats(0.001, 10.0))
    wgrad = draw(st.floats(0.0, 1.0)) * total / 3
    backward = 2 * wgrad + draw(st.floats(0.0, 1.0)) * max(0.0, total - 3 * wgrad)
    return total, backward, wgrad


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(SCHEDULES)), vpp=st.integers(1, 8), mbn=st.integers(1, 128),
       stages=st.lists(stage_times(), min_size=1, max_size=16))
def test_linear_form_equals_the_critical_path(name, vpp, mbn, stages):
    schedule, pp = SCHEDULES[name], len(stages)
    vpp = vpp if schedule.accepts_vpp(vpp) else default_vpp(schedule)
    line = schedule.linear_pipeline(mbn, vpp, pp)
    fills = [schedule.fill(*t) for t in stages]
    assert all(f >= schedule.fill_floor(t[0]) * (1 - 1e-12) for f, t in zip(fills, stages))  # the solver's bound
    slowest = max(t[0] for t in stages)
    path = schedule.pipeline_seconds(sum(fills), slowest, mbn, vpp, pp)
    assert (line.slowest_weight * slowest + line.sum_weight * sum(fills)) / line.divisor == pytest.approx(path)
    assert path >= mbn * slowest * (1 - 1e-12)  # never faster than the slowest stage's own work


def default_vpp(schedule) -> int:
    return next(v for v in range(1, 9) if schedule.accepts_vpp(v))
