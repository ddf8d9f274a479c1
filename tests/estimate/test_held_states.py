"""FSDP2 states a torchtitan pipeline stage holds for part of the step only (estimate/held_states.py): a chunk's
gathered parameters from its first forward, its unsharded gradients from its first backward, both released after
its last backward; counted by hand on step orders small enough to list, and on the Llama 3.1 405B 3-D layout."""
import pytest

from ndcp.estimate.held_states import partly_held_bytes, unheld_state_bytes
from ndcp.estimate.layout import StageLayout, stage_layouts
from ndcp.estimate.memory import estimate_memory, unheld_state_bound, unheld_states
from ndcp.estimate.parameters import stage_parameters
from ndcp.schedules import schedule_named
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model

L405 = load_model("llama3.1-405b")
TITAN = RunSpec(global_batch=256, seq_len=8192, trainer="torchtitan", confidence=0.0)
MEGATRON = RunSpec(global_batch=256, seq_len=8192, confidence=0.0)
GIB = 2**30


def three_d(vpp: int = 1, schedule: str = "1f1b", recompute: str = "full", zero: int = 3) -> Strategy:
    return Strategy(dp=8, tp=8, pp=8, vpp=vpp, mbs=4, mbn=8, zero=zero, sp=True, schedule=schedule,
                    recompute=RecomputePlan.uniform(recompute))


def small(pp: int, vpp: int, mbn: int) -> Strategy:
    return Strategy(dp=1, tp=1, pp=pp, vpp=vpp, mbs=1, mbn=mbn, zero=3, schedule="1f1b" if vpp == 1 else
                    "interleaved", recompute=RecomputePlan.uniform("full"))


def test_the_step_orders_are_the_schedules_own():
    one = schedule_named("1f1b")
    # pp 2, stage 0, 4 micro-batches: one warm-up forward, then F B pairs, then the last backward
    assert one.step_order(0, 2, 1, 4) == (("F", 0), ("F", 0), ("B", 0), ("F", 0), ("B", 0), ("F", 0), ("B", 0),
                                          ("B", 0))
    # as many micro-batches as warm-up: every forward first
    assert one.step_order(0, 2, 1, 2) == (("F", 0), ("F", 0), ("B", 0), ("B", 0))
    # interleaved pp 2, vpp 2, 2 micro-batches: all four chunk forwards in warm-up (g = 2), backwards last chunk first
    assert schedule_named("interleaved").step_order(0, 2, 2, 2) == (
        ("F", 0), ("F", 0), ("F", 1), ("F", 1), ("B", 1), ("B", 1), ("B", 0), ("B", 0))


@pytest.mark.parametrize("pp,vpp,mbn", [(2, 1, 2), (2, 1, 4), (4, 1, 8), (2, 2, 2), (4, 2, 8), (4, 3, 12)])
def test_the_order_reaches_the_in_flight_peak(pp, vpp, mbn):
    schedule = schedule_named("1f1b" if vpp == 1 else "interleaved")
    for stage in range(pp):
        live, peak = 0, 0
        for kind, _ in schedule.step_order(stage, pp, vpp, mbn):
            live += 1 if kind == "F" else -1
            peak = max(peak, live)
        assert live == 0 and peak == schedule.in_flight(stage, pp, vpp, mbn)


def layout(stage: int, chunks: tuple[tuple[int, int], ...], in_flight: float) -> StageLayout:
    return StageLayout(stage, chunks, in_flight)


def test_1f1b_stage_with_every_forward_first_by_hand():
    # pp 2, stage 0, mbn 2: F F B B. Activations a per micro-batch, parameters P, gradients G (one chunk).
    # after F F: 2a + P (no gradient yet); after the first B: a + P + G; the estimate's 2a + P + G is above the
    # larger of the two by min(G, a).
    a, P, G = 3.0, 5.0, 7.0
    assert unheld_state_bytes(small(2, 1, 2), layout(0, ((0, 2),), 2), a, P, G) == pytest.approx(min(G, a))
    a = 10.0
    assert unheld_state_bytes(small(2, 1, 2), layout(0, ((0, 2),), 2), a, P, G) == pytest.approx(G)


def test_1f1b_stage_that_forwards_after_its_first_backward_holds_everything():
    # pp 2, stage 0, mbn 4: F F B F ...: the second peak of 2 in flight comes with the gradients held
    assert unheld_state_bytes(small(2, 1, 4), layout(0, ((0, 2),), 2), 3.0, 5.0, 7.0) == 0.0


def test_interleaved_stage_by_hand():
    # pp 2, vpp 2, mbn 2, stage 0: F0 F0 F1 F1 B1 B1 B0 B0; chunks of 1 and 3 layers (shares 1/4, 3/4); a = 2 per
    # micro-batch (1 per chunk), P = 8, G = 16. Not held after each op (peak 4 chunks):
    #   F0: 3 chunks less (3) + chunk 1's P (6) + all G (16) = 25;  F0: 2 + 6 + 16 = 24;  F1: 1 + 16 = 17;
    #   F1: 0 + 16 = 16;  B1: 1 + 4 (chunk 0's G) = 5;  B1 (before the release): 2 + 4 = 6;
    #   B0 (chunk 1 released): 3 + 2 + 4 = 9;  B0: 4 + 2 + 4 = 10. Least: 5.
    got = unheld_state_bytes(small(2, 2, 2), layout(0, ((0, 1), (2, 3)), 4), 2.0, 8.0, 16.0)
    assert got == pytest.approx(5.0)


def test_megatron_and_states_held_anyway_release_nothing():
    params = stage_parameters(L405, three_d())[1]
    assert partly_held_bytes(MEGATRON, three_d(), params.dense) == (0.0, 0.0)
    assert partly_held_bytes(TITAN, three_d().with_(pp=1, dp=64), params.dense) == (0.0, 0.0)
    # torchtitan under PP: bf16 gathered parameters (ZeRO-3) and the fp32 unsharded gradient buffer (ZeRO >= 2)
    assert partly_held_bytes(TITAN, three_d(), params.dense) == (2 * params.dense, 4 * params.dense)
    assert partly_held_bytes(TITAN, three_d(zero=1), params.dense) == (0.0, 0.0)


def test_405b_interleaved_releases_what_the_1f1b_stages_keep():
    # 1F1B, 8 micro-batches on pp 8: only stage 0 runs every forward before its first backward (one micro-batch,
    # 15 layers x 128 MiB of full-recompute inputs, less than its gradients); the others hold everything at the peak.
    one = [unheld_states(L405, TITAN, three_d(), st) for st in stage_layouts(L405, three_d())]
    assert one[0] == pytest.approx(15 * 128 * 2**20)
    assert one[1:] == [0.0] * 7
    # interleaved (vpp 2): the last stage peaks at 9 chunks in the steady state with only its last chunk's
    # gradients (7 of 15 layers) created: the first chunk's 8/15 of the fp32 gradient buffer is not held
    strategy = three_d(vpp=2, schedule="interleaved")
    last = stage_layouts(L405, strategy)[7]
    gradients = 4 * stage_parameters(L405, strategy)[7].dense
    assert unheld_states(L405, TITAN, strategy, last) == pytest.approx(gradients * 8 / 15)


def test_the_solver_bound_is_above_every_plan():
    strategy = three_d(vpp=2, schedule="interleaved")
    for st in stage_layouts(L405, strategy):
        bound = unheld_state_bound(L405, TITAN, strategy, st)
        for mode in ("none", "selective", "full"):
            for zero in (1, 2, 3):
                assert unheld_states(L405, TITAN, three_d(2, "interleaved", mode, zero), st) <= bound + 1e-6
        assert unheld_state_bound(L405, TITAN, strategy, st, extra_layers=2) > bound


def test_the_estimate_reports_the_release_as_a_negative_part():
    cluster = ClusterSpec(device_preset("h100"), 512)
    strategy = three_d(vpp=2, schedule="interleaved")
    stage = estimate_memory(L405, cluster, TITAN, strategy).stages[7]
    assert stage.parts["unheld_states"] == -int(unheld_states(L405, TITAN, strategy, stage_layouts(L405,
                                                                                                     strategy)[7]))
    assert "unheld_states" not in estimate_memory(L405, cluster, MEGATRON, strategy).stages[7].parts
