"""Each pipeline schedule: what it runs, what each stage holds in flight, and its critical path, pinned to the papers
(Narayanan et al. 2021 §2.2; Korthikanti et al. 2022 §4.2.3; docs/formulas.md §4)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ndcp.schedules import SCHEDULES, default_schedule, schedule_named

ONE_F_ONE_B, INTERLEAVED = schedule_named("1f1b"), schedule_named("interleaved")


def test_registry_names_each_schedule_once_and_defaults_by_vpp():
    assert set(SCHEDULES) == {"1f1b", "interleaved"}
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
    bubble = schedule_named(default_schedule(v)).pipeline_seconds(p * t, t, m, v) - m * t
    assert bubble / (m * t) == pytest.approx((p - 1) / (v * m))


def test_pipeline_seconds_works_on_numpy_grids():
    sums, maxes = np.array([4.0, 8.0]), np.array([1.0, 2.0])
    assert np.allclose(INTERLEAVED.pipeline_seconds(sums, maxes, np.array([8, 16]), 2), [8 + 1.5, 32 + 3.0])
    assert ONE_F_ONE_B.pipeline_seconds(3.0, 3.0, 5, 1) == 15.0  # pp = 1: mbn x stage time


def test_interleaving_rules():
    assert INTERLEAVED.refusal(32, 1, 2, 8).rule == "vpp_layers"  # needs pp > 1
    assert INTERLEAVED.refusal(29, 4, 2, 8).rule == "vpp_layers"  # neither 29 nor 29 + 2 divisible by pp*vpp
    assert INTERLEAVED.refusal(30, 4, 2, 8) is None  # 30 + 2: the embedding+loss accounted split (3, 4 x 6, 3)
    assert INTERLEAVED.refusal(6, 4, 2, 8).rule == "vpp_layers"  # 6 + 2 = 8 chunks of 1: a first stage of 0 layers
    assert INTERLEAVED.refusal(29, 4, 2, 8, explicit_partition=True) is None
    assert INTERLEAVED.refusal(32, 4, 2, 3).rule == "vpp_mbn"  # mbn >= pp (current Megatron-Core)
    assert INTERLEAVED.refusal(32, 4, 2, 6) is None  # no longer a multiple of pp
    assert INTERLEAVED.refusal(32, 4, 2, 8) is None
    assert not ONE_F_ONE_B.accepts_vpp(2) and not INTERLEAVED.accepts_vpp(1)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(SCHEDULES)), pp=st.integers(1, 16), vpp=st.integers(1, 8),
       mbn=st.integers(1, 128), times=st.lists(st.floats(0.001, 10.0), min_size=1, max_size=16))
def test_linear_form_equals_the_critical_path(name, pp, vpp, mbn, times):
    schedule = SCHEDULES[name]
    vpp = vpp if schedule.accepts_vpp(vpp) else default_vpp(schedule)
    line = schedule.linear_pipeline(mbn, vpp)
    total, slowest = sum(times), max(times)
    path = schedule.pipeline_seconds(total, slowest, mbn, vpp)
    assert (line.slowest_weight * slowest + line.sum_weight * total) / line.divisor == pytest.approx(path)
    assert path >= mbn * slowest * (1 - 1e-12)  # never faster than the slowest stage's own work


def default_vpp(schedule) -> int:
    return next(v for v in range(1, 9) if schedule.accepts_vpp(v))
