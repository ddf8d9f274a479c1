"""Pipeline layout (ndcp/estimate/layout.py): which layers of which kind sit on which device stage, and how many
micro-batches each holds in flight."""
import pytest

from ndcp.estimate.layout import chunks_kind_counts, stage_kind_counts, stage_layouts
from ndcp.specs import RecomputePlan, Strategy
from ndcp.specs.library import load_model

DEEPSEEK = load_model("deepseek-v3")  # 3 dense layers, then 58 MoE layers


def _strategy(pp: int, vpp: int, mbn: int = 32, layers_per_stage: tuple[int, ...] = ()) -> Strategy:
    return Strategy(dp=8, tp=1, pp=pp, cp=1, ep=8, vpp=vpp, mbs=1, mbn=mbn, zero=1, recompute=RecomputePlan(),
                    layers_per_stage=layers_per_stage)


@pytest.mark.parametrize("pp, vpp, partition", [(1, 1, ()), (4, 1, ()), (8, 2, ()),
                                                (2, 2, (10, 20, 15, 16))])
def test_each_device_stage_counts_the_layers_of_each_kind_its_chunks_hold(pp, vpp, partition):
    strategy = _strategy(pp, vpp, layers_per_stage=partition)
    per_stage = stage_kind_counts(DEEPSEEK, pp, vpp, partition)
    assert list(per_stage) == [chunks_kind_counts(DEEPSEEK, layout.chunks) for layout in stage_layouts(DEEPSEEK, strategy)]
    assert sum(k["dense"] for k in per_stage) == DEEPSEEK.dense_layers
    assert sum(k["moe"] for k in per_stage) == DEEPSEEK.moe_layers
    # the dense layers come first: they sit on device stage 0 (its first chunk)
    assert per_stage[0]["dense"] == DEEPSEEK.dense_layers


def test_stage_layouts_follow_the_micro_batches_and_are_shared_between_equal_strategies():
    few, many = stage_layouts(DEEPSEEK, _strategy(8, 1, mbn=4)), stage_layouts(DEEPSEEK, _strategy(8, 1, mbn=64))
    assert stage_layouts(DEEPSEEK, _strategy(8, 1, mbn=4)) is few  # cached: bounds ask for them per item
    assert [s.in_flight_chunks for s in few] != [s.in_flight_chunks for s in many]  # 1F1B: min(pp - s, mbn)
    assert few[0].in_flight_chunks == 4 and many[0].in_flight_chunks == 8
