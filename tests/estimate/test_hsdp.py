"""HSDP (Strategy.dp_shard): ZeRO-3 sharded inside a group of data-parallel ranks, replicated across the groups
(torchtitan dp_shard x dp_replicate, FSDP2; docs/formulas.md §7.2)."""
import pytest
from hypothesis import given, settings, strategies as st

from ndcp.estimate import communication as comm
from ndcp.estimate.data_parallel import data_parallel_terms
from ndcp.estimate.memory import estimate_memory, model_state_bytes
from ndcp.estimate.parameters import stage_parameters
from ndcp.estimate.time import estimate_time
from ndcp.rules import strategy_refusal
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, SpecError, Strategy, device_preset
from ndcp.specs.library import load_model

LLAMA_8B, MIXTRAL = load_model("llama3-8b"), load_model("mixtral-8x7b")
H100 = device_preset("h100")
FULL = RecomputePlan.uniform("full")


def test_dp_shard_equal_to_dp_is_plain_fsdp():
    plain = Strategy(dp=64, mbs=1, mbn=2, zero=3)
    assert Strategy(dp=64, dp_shard=64, mbs=1, mbn=2, zero=3) == plain
    assert (plain.shard_ranks, plain.dp_replicate) == (64, 1)
    hsdp = plain.with_(dp_shard=8)
    assert (hsdp.shard_ranks, hsdp.dp_replicate) == (8, 8)
    assert hsdp.as_dict()["dp_shard"] == 8 and "dp_shard" not in plain.as_dict()
    assert hsdp.key() != plain.key()


def test_gradients_reduce_scatter_in_the_shard_group_then_all_reduce_across_replicas():
    # tp 1, dp 64 = 8 x 8: the shard group is one node (NVLink), each replica group has one rank per node (one NIC)
    cluster, run = ClusterSpec(H100, 64), RunSpec(global_batch=128, seq_len=4096)
    s = Strategy(dp=64, dp_shard=8, mbs=1, mbn=2, zero=3)
    (terms,), (params,) = data_parallel_terms(LLAMA_8B, cluster, run, s), stage_parameters(LLAMA_8B, s)
    layers, nvlink = params.layers, (H100.intra_node_bandwidth, H100.intra_node_latency)
    nic = (H100.inter_node_bandwidth, H100.inter_node_latency)
    grads, weights = 4 * params.dense / layers, 2 * params.dense / layers  # per layer: one FSDP unit each
    expected_grads = layers * (comm.reduce_scatter_seconds(grads, 8, *nvlink)
                               + comm.all_reduce_seconds(grads / 8, 8, *nic))
    assert terms.gradients == pytest.approx(expected_grads)
    assert terms.forward_gather == pytest.approx(layers * comm.all_gather_seconds(weights, 8, *nvlink))


def test_states_shard_over_the_shard_group_only():
    run = RunSpec(global_batch=128, seq_len=4096)
    plain = Strategy(dp=64, mbs=1, mbn=2, zero=3)
    (params,) = stage_parameters(LLAMA_8B, plain)
    full, hsdp = (model_state_bytes(run, s, params) for s in (plain, plain.with_(dp_shard=8)))
    for part in ("gradients", "optimizer_states"):
        assert hsdp[part] == pytest.approx(8 * full[part])  # 1/8 of the states instead of 1/64


@pytest.mark.parametrize("trainer", ["megatron", "torchtitan"])
def test_hsdp_sits_between_zero3_and_zero1_at_scale(trainer):
    # 1024 ranks: plain FSDP's per-layer rings pay 1023 latency steps each; HSDP's shard rings stay in a node
    cluster = ClusterSpec(H100, 1024)
    run = RunSpec(global_batch=1024, seq_len=8192, trainer=trainer)
    fsdp = Strategy(dp=1024, mbs=1, mbn=1, zero=3, recompute=FULL)
    zero1, hsdp = fsdp.with_zero(1), fsdp.with_(dp_shard=8)
    step = {name: estimate_time(LLAMA_8B, cluster, run, s).step_seconds
            for name, s in (("zero1", zero1), ("hsdp", hsdp), ("zero3", fsdp))}
    peak = {name: estimate_memory(LLAMA_8B, cluster, run, s).peak_bytes
            for name, s in (("zero1", zero1), ("hsdp", hsdp), ("zero3", fsdp))}
    assert step["zero1"] <= step["hsdp"] < step["zero3"]
    assert peak["zero3"] < peak["hsdp"] < peak["zero1"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.sampled_from([8, 16, 32]),
       st.sampled_from(["megatron", "torchtitan"]), st.sampled_from([1, 2, 8]))
def test_fewer_shard_ranks_never_hold_less_memory(tp, cp, dp, trainer, per_node):
    cluster = ClusterSpec(H100, tp * cp * dp).with_overrides(devices_per_node=per_node)
    run = RunSpec(global_batch=2 * dp, seq_len=4096, trainer=trainer)
    base = Strategy(dp=dp, tp=tp, cp=cp, mbs=1, mbn=2, zero=3, sp=tp > 1, recompute=FULL)
    shards = [s for s in (dp, dp // 2, dp // 4, dp // 8, 1) if s >= 1]
    peaks = [estimate_memory(LLAMA_8B, cluster, run, base.with_(dp_shard=s)).peak_bytes for s in shards]
    assert peaks == sorted(peaks)  # plain FSDP (dp_shard = dp) holds the least


@pytest.mark.parametrize("strategy, model, says", [
    (Strategy(dp=64, dp_shard=6, mbs=1, mbn=2, zero=3), LLAMA_8B, "valid dp_shard: 1, 2, 4, 8, 16, 32, 64"),
    (Strategy(dp=64, dp_shard=8, mbs=1, mbn=2, zero=1), LLAMA_8B, "it needs zero=3"),
    (Strategy(dp=64, dp_shard=8, ep=8, mbs=1, mbn=2, zero=3), MIXTRAL, "with routed experts it is not modelled"),
])
def test_the_rule_names_what_hsdp_needs(strategy, model, says):
    refusal = strategy_refusal(model, ClusterSpec(H100, 64), RunSpec(global_batch=128, seq_len=4096), strategy)
    assert refusal is not None and refusal.field == "dp_shard" and says in refusal.message


def test_a_negative_dp_shard_is_refused():
    with pytest.raises(SpecError, match="dp_shard"):
        Strategy(dp=8, dp_shard=-1)
