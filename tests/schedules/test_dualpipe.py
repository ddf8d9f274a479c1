"""DualPipe and DualPipe-V: activations in flight replayed from the phase counts of DeepSeek's DualPipe.step and
DualPipeV.step (github.com/deepseek-ai/DualPipe, dualpipe.py / dualpipev.py), their rules, the mirrored parameters
and the placement of the embedding and the loss; bubbles from the README's table (docs/formulas.md §4.2)."""
import pytest

from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.parameters import stage_parameters
from ndcp.estimate.time import estimate_time
from ndcp.schedules import schedule_named
from ndcp.specs import ClusterSpec, ModelSpec, RunSpec, Strategy, device_preset

DUALPIPE, DUALPIPEV = schedule_named("dualpipe"), schedule_named("dualpipev")


def _peak(phases) -> int:
    """Most chunks whose forward ran and whose backward did not, over an op sequence ("F", "B" or "W")."""
    live = peak = 0
    for op in phases:
        live += {"F": 1, "B": -1, "W": 0}[op]
        peak = max(peak, live)
    return peak


def _dualpipe_ops(rank: int, ranks: int, chunks: int) -> list[str]:
    """One rank's ops in DualPipe.step: steps 1-8 with their counts; an overlapped pair runs its forward first."""
    half, h, n = ranks // 2, min(rank, ranks - 1 - rank), chunks // 2
    steps = [((half - h - 1) * 2, "F"), (h + 1, "FF"), (half - h - 1, "BWF"), (n - ranks + h + 1, "FBFB"),
             (half - h - 1, "BFB"), (h + 1, "BB"), (half - h - 1, "WB"), (h + 1, "W")]
    return [op for count, ops in steps for _ in range(count) for op in ops]


def _dualpipev_ops(rank: int, ranks: int, chunks: int) -> list[str]:
    """One rank's ops in DualPipeV.step (each micro-batch runs both of the rank's chunks)."""
    steps = [((ranks - rank - 1) * 2, "F"), (rank + 1, "FF"), (ranks - rank - 1, "BWF"),
             (chunks - ranks * 2 + rank + 1, "FBFB"), (ranks - rank - 1, "BFB"), (rank + 1, "BB"),
             (ranks - rank - 1, "WB"), (rank + 1, "W")]
    return [op for count, ops in steps for _ in range(count) for op in ops]


@pytest.mark.parametrize("pp,mbn", [(2, 4), (4, 8), (4, 10), (8, 20), (16, 120)])
def test_dualpipe_holds_pp_plus_one_stage_chunks_on_every_rank(pp, mbn):
    for rank in range(pp):
        ops = _dualpipe_ops(rank, pp, mbn)
        assert ops.count("F") == ops.count("B") == mbn  # every micro-batch once, one of its two stages
        assert _peak(ops) == DUALPIPE.in_flight(rank, pp, 1, mbn) == pp + 1  # the README's "PP+1"


@pytest.mark.parametrize("pp,mbn", [(2, 4), (4, 8), (4, 11), (8, 20)])
def test_dualpipev_holds_two_pp_plus_one_half_stage_chunks(pp, mbn):
    for rank in range(pp):
        ops = _dualpipev_ops(rank, pp, mbn)
        assert ops.count("F") == ops.count("B") == 2 * mbn  # both chunks of the V per micro-batch
        # 2pp + 1 chunks of half a device stage: the README's PP + 1 with PP = 2pp stages
        assert _peak(ops) == 2 * DUALPIPEV.in_flight(rank, pp, 1, mbn) == 2 * pp + 1


def test_rules_follow_the_step_asserts():
    assert DUALPIPE.refusal(32, 3, 1, 12).rule == "dualpipe_shape"  # odd pp
    assert DUALPIPE.refusal(32, 4, 1, 7).field == "mbn"  # odd mbn
    assert DUALPIPE.refusal(32, 4, 1, 6).field == "mbn"  # mbn < 2 pp
    assert DUALPIPE.refusal(32, 4, 1, 8) is None
    assert DUALPIPEV.refusal(32, 4, 1, 7).field == "mbn"
    assert DUALPIPEV.refusal(32, 4, 1, 9) is None  # odd mbn is fine in the V
    assert DUALPIPEV.refusal(7, 4, 1, 8).field == "pp"  # 7 layers < 2 pp stages of the V
    assert not DUALPIPE.accepts_vpp(2) and not DUALPIPEV.accepts_vpp(2)


@pytest.mark.parametrize("name,stages", [("dualpipe", lambda pp: (pp - 2) / 2), ("dualpipev", lambda pp: (pp - 1) / 2)])
def test_bubble_is_the_readme_table_with_equal_stages(name, stages):
    """(PP/2 - 1)(F&B + B - 3W): PP = pp stages of a device each (DualPipe), PP = 2pp of half a device (V)."""
    schedule, pp, mbn = schedule_named(name), 8, 32
    total, backward, wgrad = 3.0, 2.0, 0.9  # a stage: F&B (its total), its full backward, its weight gradients
    fill = schedule.fill(total, backward, wgrad)
    assert fill == pytest.approx(total + backward - 3 * wgrad)
    bubble = schedule.pipeline_seconds(pp * fill, total, mbn, 1, pp) - mbn * total
    assert bubble == pytest.approx(stages(pp) * (total + backward - 3 * wgrad))


MODEL = ModelSpec(name="small", layers=8, hidden=512, heads=8, kv_heads=8, ffn_hidden=1024, vocab=32000)
CLUSTER = ClusterSpec(device_preset("h100"), 4)
RUN = RunSpec(global_batch=16, seq_len=2048)


def _strategy(schedule: str) -> Strategy:
    return Strategy(dp=1, pp=4, mbs=1, mbn=16, schedule=schedule)


def test_dualpipe_devices_hold_their_mirror_stage_parameters():
    own, mirrored = stage_parameters(MODEL, _strategy("1f1b")), stage_parameters(MODEL, _strategy("dualpipe"))
    for s in range(4):
        assert mirrored[s].dense == pytest.approx(own[s].dense + own[3 - s].dense)


def test_dualpipev_puts_the_embedding_and_the_loss_on_the_first_device():
    memory = estimate_memory(MODEL, CLUSTER, RUN, _strategy("dualpipev"))
    assert memory.stages[0].parts["logits"] > 0 and memory.stages[3].parts["logits"] == 0
    params = stage_parameters(MODEL, _strategy("dualpipev"))
    assert params[0].dense > params[3].dense  # embedding and output layer on device 0


def test_dualpipe_hides_the_pipeline_sends_and_reports_them():
    plain, dual = estimate_time(MODEL, CLUSTER, RUN, _strategy("1f1b")), estimate_time(MODEL, CLUSTER, RUN,
                                                                                         _strategy("dualpipe"))
    assert dual.parts["pp_comm"] == 0 and dual.hidden["pp_comm"] == pytest.approx(plain.parts["pp_comm"])
    assert dual.step_seconds < plain.step_seconds  # smaller bubble, sends hidden
