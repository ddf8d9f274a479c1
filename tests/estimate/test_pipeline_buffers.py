"""torch.distributed.pipelining's buffers under torchtitan (estimate/pipeline_buffers.py): held stage outputs and
per-micro-batch receive buffers, counted by hand on torchtitan's Llama 3.1 405B 3-D layout (tp8 pp8 dp8, 8
micro-batches of 4, seq 8192, SP), and absent for Megatron or without PP."""
import pytest

from ndcp.estimate.layout import stage_layouts
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.pipeline_buffers import boundary_bytes, held_logits_bytes, pipeline_buffer_bytes
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model

L405 = load_model("llama3.1-405b")
TITAN = RunSpec(global_batch=256, seq_len=8192, trainer="torchtitan", confidence=0.0)
MEGATRON = RunSpec(global_batch=256, seq_len=8192, confidence=0.0)
# one micro-batch at the stage boundary: 4 x 8192/8 tokens x 16384 x 2 bytes (SP shard); its logits: 4 x 8192 x
# 128256/8 x 2 bytes (loss parallel)
BOUNDARY = 4 * 8192 // 8 * 16384 * 2
LOGITS = 4 * 8192 * 128256 // 8 * 2


def three_d(vpp: int = 1, schedule: str = "1f1b", pp: int = 8) -> Strategy:
    return Strategy(dp=8, tp=8, pp=pp, vpp=vpp, mbs=4, mbn=8, zero=3, sp=True, schedule=schedule,
                    recompute=RecomputePlan.uniform("full"))


def buffers(run: RunSpec, strategy: Strategy) -> list[float]:
    return [pipeline_buffer_bytes(L405, run, strategy, layout) for layout in stage_layouts(L405, strategy)]


def test_boundary_and_logits_by_hand():
    assert boundary_bytes(L405, TITAN, three_d()) == BOUNDARY  # 128 MiB
    assert held_logits_bytes(L405, TITAN, three_d()) == LOGITS  # 1.0 GB


def test_1f1b_first_middle_and_last_stage_by_hand():
    # 1F1B with m = 8 on pp = 8: stage s holds min(8 - s, 8) micro-batches in flight.
    # first: 8 outputs + 8 gradient receive buffers; middle: those + 8 activation receive buffers less the in-flight
    # ones (the first layer's saved inputs); last: 8 - 1 activation receive buffers and 8 micro-batches of logits.
    got = buffers(TITAN, three_d())
    assert got[0] == pytest.approx(16 * BOUNDARY)
    assert got[1] == pytest.approx((24 - 7) * BOUNDARY)
    assert got[6] == pytest.approx((24 - 2) * BOUNDARY)
    assert got[7] == pytest.approx((8 - 1) * BOUNDARY + 8 * LOGITS)


def test_interleaved_counts_each_chunk():
    # vpp 2: each device runs two PipelineStages; rank 0's second chunk and every chunk of ranks 1-6 are middle
    # stages, rank 7's second chunk is the model's last
    strategy = three_d(vpp=2, schedule="interleaved")
    layouts = stage_layouts(L405, strategy)
    got = buffers(TITAN, strategy)
    held = [layout.in_flight_chunks / 2 for layout in layouts]
    assert got[0] == pytest.approx((16 + 24 - held[0]) * BOUNDARY)
    assert got[3] == pytest.approx(2 * (24 - held[3]) * BOUNDARY)
    assert got[7] == pytest.approx((24 - held[7] + 8 - held[7]) * BOUNDARY + 8 * LOGITS)


def test_none_for_megatron_or_without_pipeline():
    assert buffers(MEGATRON, three_d()) == [0.0] * 8
    assert buffers(TITAN, three_d(pp=1)) == [0.0]


def test_a_part_of_the_stage_peak_only_where_held():
    cluster = ClusterSpec(device_preset("h100"), 512)
    titan = estimate_memory(L405, cluster, TITAN, three_d())
    megatron = estimate_memory(L405, cluster, MEGATRON, three_d())
    assert [s.parts["pipeline_buffers"] for s in titan.stages] == [int(b) for b in buffers(TITAN, three_d())]
    assert all("pipeline_buffers" not in s.parts for s in megatron.stages)


def test_more_micro_batches_of_fewer_samples():
    # mbs 2, m 16: the boundary and the logits halve, the buffers double: the first stage holds as much (2m x b),
    # the last stage (m - 1)b/2 + m L/2, the in-flight count (1) no longer halving with them
    more = buffers(TITAN, Strategy(dp=8, tp=8, pp=8, mbs=2, mbn=16, zero=3, sp=True,
                                   recompute=RecomputePlan.uniform("full")))
    assert more[0] == pytest.approx(16 * BOUNDARY)
    assert more[7] == pytest.approx(15 * BOUNDARY / 2 + 8 * LOGITS)
