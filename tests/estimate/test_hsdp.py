"""HSDP (Strategy.dp_shard): ZeRO-3 sharded inside a group of data-parallel ranks, replicated across the groups
(torchtitan dp_shard x dp_replicate, FSDP2; Megatron FSDP instances; docs/formulas.md §7.3).

Where it sits between plain ZeRO-3 and ZeRO-1 is not a law: it holds at least ZeRO-3's memory (its states shard over
fewer ranks) and at most ZeRO-1's model states once the shard group is large enough, and its parameter gathers are
never slower than ZeRO-3's; its step is faster than ZeRO-3's only where ZeRO-3's rings are latency-bound (the
1,024-rank example), since it adds an all-reduce across replicas and steps a larger optimizer shard."""
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from ndcp.estimate import communication as comm
from ndcp.estimate.data_parallel import DataParallelTerms, Windows, data_parallel_terms
from ndcp.estimate.memory import estimate_memory, model_state_bytes
from ndcp.estimate.trainers import data_parallel_sync
from ndcp.estimate.parameters import stage_parameters
from ndcp.estimate.time import estimate_time
from ndcp.rules import strategy_refusal
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, SpecError, Strategy, device_preset
from ndcp.specs.library import load_model

LLAMA_8B, MIXTRAL = load_model("llama3-8b"), load_model("mixtral-8x7b")
H100 = device_preset("h100")
# what NCCL reaches on H100's links (docs/formulas.md §7): NVLink's 80 % of 450 GB/s (~370 measured, nccl-tests
# #212), 47 GB/s of an NDR NIC's 50 (nccl-tests #290)
H100_NVLINK, H100_NIC = 360e9, 47e9
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
    layers, nvlink = params.layers, (H100_NVLINK, H100.intra_node_latency)
    nic = (H100_NIC, H100.inter_node_latency)
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
    # An example, not a law (module docstring): at 1024 ranks plain FSDP's per-layer rings pay 1023 latency steps
    # each; HSDP's shard rings stay in a node
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


STATES = ("parameters", "gradients", "optimizer_states")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.sampled_from([8, 16, 32]),
       st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from(["fp32", "bf16"]), st.sampled_from(["h100", "a100-80g"]),
       st.sampled_from([2, 4, 8]), st.sampled_from(["megatron", "torchtitan"]))
def test_hsdp_holds_at_least_zero3_and_its_gathers_are_never_slower(tp, cp, pp, dp, shard, grads, device, per_node,
                                                                   trainer):
    """Memory: HSDP's states shard over dp_shard x cp ranks instead of dp x cp, and it keeps one more communicator
    (the replicas' ring): never less than plain ZeRO-3 of the same layout. Time: its gathers run on a ring of fewer
    ranks (fewer latency steps, (s-1)/s of the bytes instead of (n-1)/n) on a link no slower (inside a scale-up
    domain where plain ZeRO-3's may not be): never slower. (Its gradient sync adds the all-reduce across replicas
    and may be slower; tested as a formula above.)"""
    shard = min(shard, dp // 2)
    cluster = ClusterSpec(device_preset(device), tp * cp * pp * dp).with_overrides(devices_per_node=per_node)
    run = RunSpec(global_batch=4 * dp, seq_len=4096, grad_dtype=grads, trainer=trainer)
    zero3 = Strategy(dp=dp, tp=tp, cp=cp, pp=pp, mbs=1, mbn=4, zero=3, sp=tp > 1, recompute=FULL)
    hsdp = zero3.with_(dp_shard=shard)
    assert (estimate_memory(LLAMA_8B, cluster, run, zero3).peak_bytes
            <= estimate_memory(LLAMA_8B, cluster, run, hsdp).peak_bytes)
    for h, z in zip(data_parallel_terms(LLAMA_8B, cluster, run, hsdp), data_parallel_terms(LLAMA_8B, cluster, run,
                                                                                          zero3)):
        assert h.forward_gather <= z.forward_gather * (1 + 1e-12)
        assert h.backward_gather <= z.backward_gather * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]), st.sampled_from([8, 16, 32]),
       st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from(["fp32", "bf16"]), st.sampled_from(["bf16", "fp32"]),
       st.sampled_from(["trainer", "microbatch", "forward-backward"]))
def test_hsdp_model_states_lie_between_zero3_and_zero1_once_its_shard_group_is_large_enough(
        tp, cp, pp, dp, shard, grads, states, gather):
    """Per parameter (P + G + O bytes, Megatron: bf16 P, G at --grad-dtype, O = master + moments): ZeRO-3 holds
    (P+G+O)/(n), HSDP (P+G+O)/(s), ZeRO-1 P + G + O/n, n = dp x cp, s = dp_shard x cp <= n. So HSDP's model states lie
    between ZeRO-3's and ZeRO-1's exactly when s (P+G) >= P+G+O and ZeRO-3 reshards layer by layer (no parameters
    kept gathered, no unsharded gradient buffer); below that shard group it may hold more than ZeRO-1."""
    shard = min(shard, dp // 2)
    run = RunSpec(global_batch=4 * dp, seq_len=4096, grad_dtype=grads, optimizer_state_dtype=states,
                  param_gather=gather)
    zero3 = Strategy(dp=dp, tp=tp, cp=cp, pp=pp, mbs=1, mbn=4, zero=3, sp=tp > 1, recompute=FULL)
    (params, *_), sync = stage_parameters(LLAMA_8B, zero3), data_parallel_sync(run, 3, pp)
    states = {name: model_state_bytes(run, s, params)
              for name, s in (("zero3", zero3), ("hsdp", zero3.with_(dp_shard=shard)), ("zero1", zero3.with_zero(1)))}
    held = {name: sum(parts[k] for k in STATES) for name, parts in states.items()}
    assert held["zero3"] <= held["hsdp"] * (1 + 1e-12)
    if sync.gathered_parameters or sync.full_grad_buffer:
        return
    per_param = run.param_bytes + run.grad_bytes
    if shard * cp * per_param >= per_param + run.optimizer_state_bytes:
        assert held["hsdp"] <= held["zero1"] * (1 + 1e-12)
    else:  # the bound is tight: HSDP then holds more than ZeRO-1's unsharded parameters and gradients alone
        assert held["hsdp"] > states["zero1"]["parameters"] + states["zero1"]["gradients"]


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


# -- PyTorch FSDP's all-reduce across replicas runs on its own stream and link (docs/formulas.md §7.3) --------------
def test_pytorch_fsdp_all_reduces_across_replicas_beside_the_shard_groups_collectives():
    """FSDP1 HYBRID_SHARD (`_reduce_grad`: `_all_reduce_stream`, `_inter_node_pg`, pytorch/pytorch #106080) and FSDP2
    HSDP (`foreach_reduce`'s `all_reduce_stream`) all-reduce on another stream and process group, on the NICs, while
    the shard group's reduce-scatter and re-gather run on NVLink: the all-reduce is `across`, out of the window's sum.
    Megatron FSDP keeps it in the sum; a shard group across nodes shares the NICs with it, so does a replica group
    inside one scale-up domain: the sum again."""
    cluster = ClusterSpec(H100, 64)
    s = Strategy(dp=64, dp_shard=8, mbs=1, mbn=2, zero=3)
    (params,) = stage_parameters(LLAMA_8B, s)
    layers, nic = params.layers, (H100_NIC, H100.inter_node_latency)
    all_reduce = layers * comm.all_reduce_seconds(4 * params.dense / layers / 8, 8, *nic)
    (megatron,) = data_parallel_terms(LLAMA_8B, cluster, RunSpec(global_batch=128, seq_len=4096), s)
    for fsdp in ("fsdp1", "fsdp2"):
        (torch,) = data_parallel_terms(LLAMA_8B, cluster, RunSpec(global_batch=128, seq_len=4096, fsdp_version=fsdp),
                                       s)
        assert torch.across == pytest.approx(all_reduce) and megatron.across == 0.0
        assert torch.gradients + torch.across == pytest.approx(megatron.gradients)
        assert torch.across_share == pytest.approx(max(16 / 132, 2 * H100_NIC / H100.hbm_bandwidth))
    run = RunSpec(global_batch=128, seq_len=4096, fsdp_version="fsdp1")
    (nodes,) = data_parallel_terms(LLAMA_8B, cluster, run, s.with_(dp_shard=16))  # the shard group spans 2 nodes
    (domain,) = data_parallel_terms(LLAMA_8B, cluster.with_overrides(devices_per_node=64), run, s)  # all on NVLink
    assert nodes.across == domain.across == 0.0


def test_two_queues_show_the_longer_and_the_last_layers_share_of_the_shorter():
    """By hand, 13B-like (fms-fsdp on 128 A100 at 400 Gb/s a node): 0.2 s of reduce-scatter and re-gather on NVLink
    (HBM share c = 0.235) and 1.0 s of all-reduce across 16 nodes (its share c_A = 0.148, NCCL's SMs) in a 1.1 s
    backward, 40 layers (b = 0.025). On one link the window held 1.2 s: max(1.2 - 1.1, 1.2 u) = 0.305 s with
    u = 0.025 + 0.975 x 0.235 = 0.254125. On two, the all-reduce's queue is the longer by enough,
    1.0 x (0.235 - 0.148) = 0.087 >= 0.2 x 0.235 = 0.047: the window holds it and the last layer's reduce-scatter
    ahead of its all-reduce, 1.0 + 0.025 x 0.2 = 1.005 s, and 1.005 u = 0.2554 s shows."""
    one_link = DataParallelTerms(gradients=0.1, grads_per_microbatch=True, backward_gather=0.1, forward_gather=0.0,
                                 gathers_per_microbatch=True, last_bucket=0.025, optimizer=0.0, sm_share=0.148,
                                 hbm_share=0.235)
    assert one_link.unhidden == pytest.approx(0.254125)
    summed = replace(one_link, gradients=1.1)
    assert summed.exposed(Windows(forward=0.5, backward=1.1), 1) == pytest.approx(1.2 * 0.254125)
    two = replace(one_link, across=1.0, across_share=0.148)
    assert two.sync_window() == pytest.approx(1.005)
    assert two.exposed(Windows(forward=0.5, backward=1.1), 1) == pytest.approx(1.005 * 0.254125)
    assert two.exposed(Windows(forward=0.5, backward=0.5), 1) == pytest.approx(1.005 - 0.5)  # the NICs' queue shows
    # what the window shows is never below what both queues take from the compute together (S u + A u_A)
    assert two.exposed(Windows(forward=0.5, backward=10.0), 1) >= 0.2 * 0.254125 + 1.0 * (0.025 + 0.975 * 0.148)
    # alike queues (0.5 s each): both hold SMs at once, more than the longer's share shows; priced as the sum
    alike = replace(two, gradients=0.25, backward_gather=0.25, across=0.5)
    assert alike.sync_window() == pytest.approx(1.0)
    assert alike.exposed(Windows(forward=0.5, backward=10.0), 1) == pytest.approx(1.0 * 0.254125)
