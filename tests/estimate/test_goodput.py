"""Goodput with failures and checkpoints (docs/goodput.md): the optimal interval is Young's and Daly's where their
closed forms hold, goodput falls as failures come more often and checkpoints take longer, and the strategy sets
the checkpoint volume."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndcp.estimate.goodput import (DEFAULT_GPU_MTBF_HOURS, CheckpointVolume, FailureSettings, RankFacts, Storage,
                                   checkpoint_volume, expected_seconds, optimal_interval, run_goodput, write_seconds)
from ndcp.specs import RunSpec
from ndcp.specs.library import load_model
from ndcp.specs.strategy import Strategy

FACTS = RankFacts(devices_per_node=8, host_bandwidth=50e9, staging_capacity=200e9)
VOLUME = CheckpointVolume(written_per_rank=0.35e9, total=5.7e12, staged_per_rank=6.7e9)


def young(delta: float, mtbf: float) -> float:
    return math.sqrt(2 * delta * mtbf)


def daly(delta: float, mtbf: float) -> float:
    """Daly 2006's higher-order estimate of the optimum, for delta < 2 x mtbf."""
    ratio = delta / (2 * mtbf)
    return young(delta, mtbf) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - delta


def test_the_default_failure_rate_is_the_llama3_reports():
    # 419 unexpected interruptions in 54 days on 16,384 GPUs: one every 3.1 hours for that job
    assert DEFAULT_GPU_MTBF_HOURS / 16384 == pytest.approx(54 * 24 / 419)


@pytest.mark.parametrize("delta, mtbf", [(1.0, 1e6), (3.0, 11_135.0), (60.0, 3.6e6), (3.0, 5.6e16)])
def test_the_optimal_interval_is_young_where_checkpoints_are_short(delta, mtbf):
    # Young 1974: sqrt(2 delta M), the first-order optimum; exact as delta / M -> 0
    assert optimal_interval(delta, mtbf) == pytest.approx(young(delta, mtbf), rel=math.sqrt(delta / mtbf))


@pytest.mark.parametrize("delta, mtbf", [(3.0, 11_135.0), (300.0, 11_135.0), (1800.0, 11_135.0)])
def test_the_optimal_interval_is_dalys_higher_order_estimate(delta, mtbf):
    assert optimal_interval(delta, mtbf) == pytest.approx(daly(delta, mtbf), rel=0.02 * delta / mtbf + 1e-6)


def test_the_optimal_interval_minimises_the_expected_time():
    best = optimal_interval(300.0, 11_135.0)
    cost = [expected_seconds(1e6, t, 300.0, 600.0, 11_135.0) for t in (0.9 * best, best, 1.1 * best)]
    assert cost[1] < cost[0] and cost[1] < cost[2]


def test_without_failures_the_run_takes_its_ideal_time():
    run = run_goodput(1e6, 10.0, 64, VOLUME, FailureSettings(gpu_mtbf_hours=1e15, restart_seconds=1.0), FACTS)
    assert run.goodput == pytest.approx(1.0, abs=1e-3) and run.blast_radius_gpus == 64


def test_the_interval_is_whole_steps():
    run = run_goodput(1e6, 7.0, 16384, VOLUME, FailureSettings(), FACTS)
    assert run.interval_seconds == 7.0 * run.interval_steps and run.interval_steps >= 1


@settings(max_examples=60, deadline=None)
@given(mtbf=st.floats(1e3, 1e7), factor=st.floats(1.01, 100.0), write=st.floats(0.1, 1e3),
       asynchronous=st.booleans())
def test_goodput_falls_as_failures_come_more_often(mtbf, factor, write, asynchronous):
    volume = CheckpointVolume(write * 40e9 / 8, 1.0, 1e9)
    more, fewer = (run_goodput(1e6, 5.0, 1024, volume, FailureSettings(m, asynchronous=asynchronous), FACTS)
                   for m in (mtbf / factor, mtbf))
    assert more.goodput <= fewer.goodput


@settings(max_examples=60, deadline=None)
@given(write=st.floats(0.01, 1e3), factor=st.floats(1.01, 100.0), mtbf=st.floats(1e4, 1e7),
       asynchronous=st.booleans())
def test_goodput_falls_as_checkpoints_take_longer(write, factor, mtbf, asynchronous):
    def goodput(seconds):  # a node writes its 8 ranks' shards at 40 GB/s in `seconds`
        volume = CheckpointVolume(seconds * 40e9 / 8, 1.0, 1e9)
        return run_goodput(1e6, 5.0, 1024, volume, FailureSettings(mtbf, asynchronous=asynchronous), FACTS).goodput
    assert goodput(write * factor) <= goodput(write)


def test_an_asynchronous_save_blocks_only_for_the_copy_and_needs_host_memory():
    sync = run_goodput(1e6, 5.0, 16384, VOLUME, FailureSettings(), FACTS)
    fast = run_goodput(1e6, 5.0, 16384, VOLUME, FailureSettings(asynchronous=True), FACTS)
    assert fast.asynchronous and fast.blocking_seconds == pytest.approx(6.7e9 / 50e9)
    assert sync.blocking_seconds == pytest.approx(6.7e9 / 50e9 + sync.write_seconds)
    assert fast.goodput > sync.goodput and fast.interval_seconds >= fast.write_seconds
    cramped = run_goodput(1e6, 5.0, 16384, VOLUME, FailureSettings(asynchronous=True),
                          RankFacts(8, 50e9, staging_capacity=1e9))
    assert not cramped.asynchronous and cramped.goodput == sync.goodput


def test_the_slower_of_the_node_and_the_file_system_paces_a_save():
    assert write_seconds(VOLUME, Storage(40e9, 2e12), 8) == pytest.approx(5.7e12 / 2e12)  # the file system
    assert write_seconds(VOLUME, Storage(0.5e9, 2e12), 8) == pytest.approx(8 * 0.35e9 / 0.5e9)  # the node


def test_the_strategy_sets_the_checkpoint_volume():
    model, run = load_model("llama3-70b"), RunSpec(global_batch=1024, seq_len=8192)
    tp8 = checkpoint_volume(model, run, Strategy(dp=64, tp=8, pp=1, zero=1))
    pp4 = checkpoint_volume(model, run, Strategy(dp=16, tp=8, pp=4, zero=1))
    # the whole checkpoint is the model once at 2 + 12 bytes per parameter (bf16 weights, fp32 master and moments)
    assert tp8.total == pytest.approx(14 * model.parameters, rel=0.01)
    assert pp4.total == pytest.approx(tp8.total, rel=0.01)
    assert tp8.written_per_rank == pytest.approx(tp8.total / 512, rel=0.01)  # every rank writes its share
    # without ZeRO a rank holds (and stages) every optimizer state of its stage; ZeRO-1 shards them over DP
    assert checkpoint_volume(model, run, Strategy(dp=64, tp=8, zero=0)).staged_per_rank > 5 * tp8.staged_per_rank
    # a pipeline stage holds a quarter of the layers: its ranks stage about a quarter as much
    assert pp4.staged_per_rank < 0.4 * tp8.staged_per_rank
