"""ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", §2.1): 1F1B's memory, a bubble of
(p - 1)(T_F + T_B - T_W) with B the input-gradient pass, and its rules (docs/formulas.md §4.1)."""
import pytest

from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.time import estimate_time
from ndcp.schedules import schedule_named
from ndcp.specs import ClusterSpec, ModelSpec, RunSpec, Strategy, device_preset

ZB, ONE_F_ONE_B = schedule_named("zb-h1"), schedule_named("1f1b")


@pytest.mark.parametrize("p,m", [(4, 8), (8, 24), (16, 64)])
def test_bubble_is_qi_et_al_with_equal_stages(p, m):
    t_f, t_b, t_w = 1.0, 0.9, 0.8  # forward, input-gradient and weight-gradient passes of one stage
    total, full_backward = t_f + t_b + t_w, t_b + t_w
    fill = ZB.fill(total, full_backward, t_w)
    bubble = ZB.pipeline_seconds(p * fill, total, m, 1, p) - m * total
    assert bubble == pytest.approx((p - 1) * (t_f + t_b - t_w))
    # against 1F1B's (p - 1)(T_F + T_B + T_W): 2 (p - 1) T_W less
    plain = ONE_F_ONE_B.pipeline_seconds(p * total, total, m, 1, p) - m * total
    assert plain - bubble == pytest.approx(2 * (p - 1) * t_w)


def test_holds_what_1f1b_holds():
    assert [ZB.in_flight(s, 8, 1, 32) for s in range(8)] == [ONE_F_ONE_B.in_flight(s, 8, 1, 32) for s in range(8)]


def test_rules():
    assert ZB.refusal(32, 1, 1, 8).field == "pp"  # no pipeline, no bubble to fill
    assert ZB.refusal(32, 4, 1, 3).field == "mbn"
    assert ZB.refusal(32, 4, 1, 4) is None
    assert ZB.accepts_vpp(1) and not ZB.accepts_vpp(2)


def test_same_memory_less_time_than_1f1b():
    model = ModelSpec(name="small", layers=8, hidden=1024, heads=8, kv_heads=8, ffn_hidden=4096, vocab=32000)
    cluster, run = ClusterSpec(device_preset("h100"), 4), RunSpec(global_batch=16, seq_len=2048)
    zb, plain = (Strategy(dp=1, pp=4, mbs=1, mbn=16, schedule=name) for name in ("zb-h1", "1f1b"))
    assert estimate_memory(model, cluster, run, zb).peak_bytes == estimate_memory(model, cluster, run, plain).peak_bytes
    zb_time, plain_time = estimate_time(model, cluster, run, zb), estimate_time(model, cluster, run, plain)
    assert zb_time.parts["bubble"] < plain_time.parts["bubble"]
    assert zb_time.step_seconds < plain_time.step_seconds
