"""MoE token dispatch per dispatcher, node-limited routing and the routing work (docs/formulas.md §7.2, §3.2)."""
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndcp.estimate.communication import all_gather_seconds, all_to_all_seconds
from ndcp.estimate.layer_time import layer_time
from ndcp.estimate.time import estimate_time
from ndcp.estimate.moe import (dispatch_seconds, distinct_hits, ep_placement, flex_kernel_bytes, reachable_nodes,
                               reachable_ranks, routing_bytes)
from ndcp.estimate.keys import Degrees, LayerKey
from ndcp.specs import device_preset
from ndcp.specs.device import ClusterSpec
from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model
from ndcp.specs.model import MoESpec
from ndcp.specs.run import MOE_DISPATCHERS, RunSpec
from ndcp.specs.strategy import Strategy

H100 = device_preset("h100")
# what NCCL reaches on H100's links (docs/formulas.md §7): NVLink's 80 % of 450 GB/s (~370 measured, nccl-tests
# #212), 47 GB/s of an NDR NIC's 50 (nccl-tests #290)
H100_NVLINK, H100_NIC = 360e9, 47e9
DSV3 = load_model("deepseek-v3")
RUN = RunSpec(global_batch=1024, seq_len=4096)
TOKENS = 4096.0


def cluster(gpus: int = 1024, per_node: int = 8) -> ClusterSpec:
    return ClusterSpec(replace(H100, devices_per_node=per_node), gpus)


def dispatch(dispatcher: str, ep: int, model=DSV3, per_node: int = 8, imbalance: float = 1.0, tp: int = 1,
             etp: int = 1) -> float:
    run = replace(RUN, moe_dispatcher=dispatcher, moe_load_imbalance=imbalance)
    return dispatch_seconds(model, cluster(per_node=per_node), run, TOKENS, tp, ep, etp)


def without_groups(model):
    return replace(model, moe=replace(model.moe, router_groups=0, router_group_topk=0))


def test_the_library_deepseek_v3_routes_each_token_to_at_most_4_of_8_groups():
    assert (DSV3.moe.router_groups, DSV3.moe.router_group_topk) == (8, 4)


def test_within_a_node_alltoall_is_the_ring_all_to_all_over_nvlink():
    pairs = TOKENS * DSV3.moe.top_k * DSV3.hidden * 2
    ring = all_to_all_seconds(pairs, 8, H100_NVLINK, H100.intra_node_latency)
    assert dispatch("alltoall", 8) == pytest.approx(ring)


def test_across_nodes_alltoall_sends_the_remote_share_over_the_nic():
    # EP 64 on 8 nodes: 56 of 64 shares leave the node, the 7 in-node ones ride NVLink at the same time
    pairs = TOKENS * DSV3.moe.top_k * DSV3.hidden * 2
    expected = pairs * 56 / 64 / H100_NIC + 63 * H100.inter_node_latency  # a latency per peer
    assert dispatch("alltoall", 64) == pytest.approx(expected)


def test_deepseek_v3_on_8_nodes_reaches_4_nodes_and_flex_sends_about_3_copies_per_token_over_the_nic():
    nodes = reachable_nodes(DSV3.moe, 8)
    assert nodes == pytest.approx(4.0)
    copies = distinct_hits(nodes, 8) * 7 / 8
    assert copies == pytest.approx(3.15, abs=0.01)
    row = TOKENS * DSV3.hidden * 2
    latency = 63 * H100.inter_node_latency  # the same 63 peers either way; 7 R against 3.15 R over the NIC
    assert dispatch("flex", 64) == pytest.approx(row * copies / H100_NIC + latency)
    assert (dispatch("alltoall", 64) - latency) / (dispatch("flex", 64) - latency) == pytest.approx(7 / 3.15, rel=0.01)


def test_allgather_gathers_every_token_over_the_slowest_link_whatever_top_k():
    row = TOKENS * DSV3.hidden * 2
    assert dispatch("allgather", 16) == pytest.approx(
        all_gather_seconds(16 * row, 16, H100_NIC, H100.inter_node_latency))
    wider = replace(DSV3, moe=replace(DSV3.moe, top_k=16))
    assert dispatch("allgather", 16, wider) == dispatch("allgather", 16)


def test_no_dispatch_without_expert_parallelism():
    assert all(dispatch(d, 1) == 0.0 for d in MOE_DISPATCHERS)


def test_placement_of_an_expert_group():
    assert ep_placement(cluster(), 8, 1) == (1, 8.0)
    assert ep_placement(cluster(), 64, 1) == (8, 8.0)
    assert ep_placement(cluster(), 16, 2) == (4, 4.0)  # ETP 2 innermost: 4 EP ranks per node


def test_distinct_hits_of_uniform_draws():
    assert distinct_hits(1, 8) == 1.0
    assert distinct_hits(2, 1) == pytest.approx(1.0)
    assert distinct_hits(4, 8) == pytest.approx(4 * (1 - 0.75 ** 8))


def test_groups_spread_over_fewer_nodes_than_groups_and_over_more():
    moe = DSV3.moe
    assert reachable_nodes(moe, 4) == pytest.approx(4 * (1 - 15 / 70))  # 2 groups per node: C(6,4)/C(8,4)
    assert reachable_nodes(moe, 16) == pytest.approx(8)  # a group spans 2 nodes; 4 groups
    assert reachable_nodes(without_groups(DSV3).moe, 16) == 16
    assert reachable_ranks(moe, 64) == 32 and reachable_ranks(without_groups(DSV3).moe, 64) == 64


def test_group_limits_are_checked():
    with pytest.raises(SpecError, match="router_groups"):
        MoESpec(experts=256, top_k=8, expert_ffn_hidden=2048, router_groups=7, router_group_topk=4)
    with pytest.raises(SpecError, match="router_group_topk"):
        MoESpec(experts=256, top_k=8, expert_ffn_hidden=2048, router_groups=8, router_group_topk=9)
    with pytest.raises(SpecError, match="router_group_topk"):
        MoESpec(experts=256, top_k=8, expert_ffn_hidden=2048, router_groups=8)


def test_run_settings_are_checked():
    with pytest.raises(SpecError, match="moe_dispatcher"):
        RunSpec(global_batch=8, seq_len=1024, moe_dispatcher="deepep")
    with pytest.raises(SpecError, match="moe_load_imbalance"):
        RunSpec(global_batch=8, seq_len=1024, moe_load_imbalance=0.9)


EP = st.sampled_from([2, 4, 8, 16, 32, 64, 128])
PER_NODE = st.sampled_from([2, 4, 8])
DISPATCHER = st.sampled_from(MOE_DISPATCHERS)


@settings(max_examples=60, deadline=None)
@given(EP, PER_NODE, DISPATCHER)
def test_more_ranks_sharing_a_nodes_nic_never_make_a_dispatch_faster(ep, per_node, dispatcher):
    # the same EP group on smaller nodes: more of its shares cross the scale-out link, none fewer
    assert dispatch(dispatcher, ep, per_node=per_node) >= dispatch(dispatcher, ep, per_node=2 * per_node) * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(EP, PER_NODE, st.floats(1.0, 4.0))
def test_flex_never_sends_more_than_alltoall_and_group_limits_never_slow_it(ep, per_node, imbalance):
    flex = dispatch("flex", ep, per_node=per_node, imbalance=imbalance)
    assert flex <= dispatch("alltoall", ep, per_node=per_node, imbalance=imbalance) * (1 + 1e-12)
    assert flex <= dispatch("flex", ep, without_groups(DSV3), per_node, imbalance) * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(EP, DISPATCHER, st.floats(1.0, 4.0))
def test_a_busier_rank_never_makes_a_dispatch_faster(ep, dispatcher, imbalance):
    assert dispatch(dispatcher, ep, imbalance=imbalance) >= dispatch(dispatcher, ep) * (1 - 1e-12)


TINY = load_model("tiny-moe")  # hidden 256, 8 experts, top-2, no shared experts


def routed(run: RunSpec, ep: int, model=TINY, tp: int = 1):
    return routing_bytes(model, run, TOKENS, tp, ep, 1)


def test_routing_bytes_hand_counted_for_a_small_model_with_the_alltoall_dispatcher():
    """tiny-moe, 4,096 tokens on one device, BF16, EP 4 (2 local experts): X = one row of hidden per token, R = its
    top-2 copies, S = the router's FP32 scores."""
    x = TOKENS * 256 * 2
    r = 2 * x
    s = TOKENS * 8 * 4
    around = 4 * s + 2 * (x + r)  # router passes; permute (read X, write R) and unpermute (read R, write X)
    sorts = 2 * 2 * r  # the received rows sorted by local expert and back, each read and written
    gradient = TOKENS * 256 * (4 + 2) + 3 * x  # the router's FP32 input gradient cast, added to the permute's
    assert routed(RUN, 4)[:3] == pytest.approx((around + sorts, around + sorts + gradient, around))
    assert routed(RUN, 4).comm_stream == (0.0, 0.0)  # no kernel of this dispatcher's on the communication stream


def test_one_local_expert_needs_no_sort_and_flex_sorts_in_its_own_dispatch():
    one_each, flex = routed(RUN, 8), routed(replace(RUN, moe_dispatcher="flex"), 4)
    assert one_each.forward == one_each.around_dispatch  # EP 8 of 8 experts: nothing to sort
    assert one_each.comm_stream == (0.0, 0.0)
    assert flex.forward == pytest.approx(flex.around_dispatch + flex.comm_stream[0])  # no sort beside its kernels
    assert routed(RUN, 4).forward - one_each.forward == pytest.approx(4 * 2 * TOKENS * 256 * 2)


def test_hybridep_kernels_hand_counted_for_a_small_model():
    """tiny-moe (hidden 256, 8 experts, top-2), 4,096 tokens, BF16, EP 4 (2 local experts): a token reaches
    4 (1 - (3/4)^2) = 1.75 ranks, so the dispatch delivers D = 1.75 rows a token; the permute reads them and writes
    the R = 2 expert-major copies, the unpermute the reverse, each way; the forward dispatch also scans the
    all-gathered routing map (4 ranks' tokens x 8 experts, bools), writes the local-expert map (x 2, bools) and the
    sparse-to-dense map (int32), and builds its row map (D x 2: bools read, int32 written, read and rewritten)."""
    flex = replace(RUN, moe_dispatcher="flex")
    d, r = 1.75 * TOKENS, 2 * TOKENS
    permutes = 2 * (d + r) * 256 * 2
    scans = 4 * TOKENS * (8 + 2 + 4) + d * 2 * (1 + 12)
    assert flex_kernel_bytes(TINY, flex, TOKENS, 1, 4, 1) == pytest.approx((permutes + scans, permutes))
    bytes_ = routed(flex, 4)
    assert bytes_.comm_stream == pytest.approx((permutes + scans, permutes))
    assert bytes_.around_dispatch == pytest.approx(4 * TOKENS * 8 * 4)  # the router's passes only


def test_flex_charges_its_permutes_once_in_place_of_the_source_side_ones():
    """With top-1 routing a token reaches one rank (D = X), so flex's permutes move what alltoall's do: at one local
    expert (no sorts) its backward equals alltoall's, and its forward exceeds it by the metadata scans alone."""
    top1 = replace(TINY, moe=replace(TINY.moe, top_k=1))
    flex, alltoall = routed(replace(RUN, moe_dispatcher="flex"), 8, top1), routed(RUN, 8, top1)
    assert flex.backward == pytest.approx(alltoall.backward)
    assert flex.forward - alltoall.forward == pytest.approx(flex.comm_stream[0] - flex.comm_stream[1])
    assert flex.around_dispatch + flex.comm_stream[1] == pytest.approx(alltoall.around_dispatch)


def test_fp8_pads_each_experts_rows_unless_hybridep_did():
    fp8 = replace(RUN, precision="fp8")
    copies = 2 * 2 * (2 * TOKENS * 256 * 2)  # fc1's input padded, fc2's output unpadded: R read and written each
    assert routed(fp8, 8).forward - routed(RUN, 8).forward == pytest.approx(copies)
    assert routed(fp8, 8).backward - routed(RUN, 8).backward == pytest.approx(copies)
    flex = replace(RUN, moe_dispatcher="flex")
    assert routed(replace(flex, precision="fp8"), 8) == routed(flex, 8)


def test_shared_experts_add_their_output_forward_only():
    shared = replace(TINY, moe=replace(TINY.moe, shared_experts=1))
    x = TOKENS * 256 * 2
    with_shared, without = routed(RUN, 4, shared), routed(RUN, 4)
    assert with_shared.forward - without.forward == pytest.approx(3 * x)
    assert with_shared.backward == without.backward


def test_the_busiest_rank_moves_its_share_of_every_copy_of_the_rows():
    busy = routed(replace(RUN, moe_load_imbalance=1.5), 4)
    even = routed(RUN, 4)
    r = 2 * TOKENS * 256 * 2
    assert busy.forward - even.forward == pytest.approx(0.5 * r * (2 + 4))  # permute + unpermute, two sorts


def test_a_moe_layer_adds_the_routing_forward_to_its_forward_and_the_backward_to_its_backward():
    """The same layer with the sorts (2 local experts) and without (1): its forward and backward grow by the
    sorts' seconds at HBM speed, each pass, and the routing backward is the larger (the input gradient)."""
    run = replace(RUN, seq_len=1024, global_batch=16)
    clus = ClusterSpec(H100, 8)
    layer = {ep: layer_time(TINY, clus, run, LayerKey("moe", "none", Degrees(tp=1, cp=1, ep=ep, etp=1, mbs=1,
                                                                              sp=False), "p2p", frozenset()))
             for ep in (4, 8)}
    sorts = 4 * 2 * 1024 * 256 * 2 / H100.hbm_bandwidth
    assert layer[4].forward - layer[8].forward == pytest.approx(sorts, rel=0.02)
    assert layer[4].backward - layer[8].backward == pytest.approx(sorts, rel=0.02)
    bytes_ = routing_bytes(TINY, run, 1024.0, 1, 4, 1)
    assert bytes_.backward > bytes_.forward


@pytest.mark.parametrize("field, value", [("moe_load_imbalance", 1.5), ("moe_dispatcher", "allgather")])
def test_an_imbalanced_or_gathered_moe_layer_is_never_faster(field, value):
    model = load_model("mixtral-8x7b")
    key = LayerKey("moe", "none", Degrees(tp=1, cp=1, ep=8, etp=1, mbs=1, sp=False), "p2p", frozenset())
    clus = ClusterSpec(H100, 8)
    base = layer_time(model, clus, RUN, key)
    changed = layer_time(model, clus, replace(RUN, **{field: value}), key)
    assert changed.total > base.total
    if field == "moe_load_imbalance":  # the busiest rank's experts run more rows
        assert changed.forward > base.forward and changed.ep_comm > base.ep_comm



@settings(max_examples=25, deadline=None)
@given(st.sampled_from([2, 4, 8]), st.sampled_from([1, 2, 4]), DISPATCHER)
def test_a_step_is_never_faster_when_its_expert_group_shares_more_nics(ep, per_node, dispatcher):
    # tiny-moe on 8 devices, the same plan on nodes half as large: every link that was shared stays shared
    model, run = load_model("tiny-moe"), replace(RUN, global_batch=16, seq_len=1024, moe_dispatcher=dispatcher)
    strategy = Strategy(dp=8, tp=1, pp=1, ep=ep, etp=1, mbs=1, mbn=2)
    small, large = (ClusterSpec(replace(H100, devices_per_node=n), 8) for n in (per_node, 2 * per_node))
    assert estimate_time(model, small, run, strategy).step_seconds >= \
        estimate_time(model, large, run, strategy).step_seconds * (1 - 1e-12)


GB200 = device_preset("gb200-nvl72")


def test_an_ep64_all_to_all_inside_an_nvl72_rack_runs_on_nvlink_alone():
    """DeepSeek-V3 on 2,048 GB200: an EP group of 64 covers 16 trays of one rack (64 ranks per rack), so its
    all-to-all is the NVLink ring's (ep - 1)/ep of the top-k copies, no byte on the NIC; with the trays as their
    own domains the same group crosses 16 of them at the NIC's 50 GB/s."""
    rack = ClusterSpec(GB200, 2048)
    run = replace(RUN, moe_dispatcher="alltoall")
    assert ep_placement(rack, 64, 1) == (1, 64.0)
    pairs = TOKENS * DSV3.hidden * run.activation_bytes * DSV3.moe.top_k
    nvlink = all_to_all_seconds(pairs, 64, GB200.intra_node_bandwidth * GB200.scale_up_efficiency,
                                GB200.intra_node_latency)
    assert dispatch_seconds(DSV3, rack, run, TOKENS, 1, 64, 1) == pytest.approx(nvlink, rel=1e-12)
    trays = ClusterSpec(replace(GB200, devices_per_domain=0), 2048)
    assert ep_placement(trays, 64, 1) == (16, 4.0)
    assert dispatch_seconds(DSV3, trays, run, TOKENS, 1, 64, 1) > 10 * nvlink  # 60 of 63 shares at 50 GB/s


def test_an_intra_node_nccl_all_to_all_on_h100_is_charged_within_the_published_bus_bandwidths():
    """docs/formulas.md §7.2, "checked against published all-to-all bandwidths": NCCL's alltoall on 4 H100 of one
    node moves 500 MB per rank at 335 GB/s of bus bandwidth (busbw = algbw x 3/4; NVIDIA/nccl #2169, NCCL 2.30.4),
    and NCCL's collectives other than all-reduce reach ~370 GB/s on NVLink4 at large sizes (S. Jeaugey,
    NVIDIA/nccl-tests #212). The alltoall dispatcher of the same 500 MB (DeepSeek-V3's top-8 copies of 4,571 tokens
    of 7,168 BF16 values) is charged between the two."""
    size = 524_288_000
    tokens = size / (DSV3.hidden * 2 * DSV3.moe.top_k)
    seconds = dispatch_seconds(DSV3, cluster(), replace(RUN, moe_dispatcher="alltoall"), tokens, 1, 4, 1)
    assert seconds == pytest.approx(0.75 * size / H100_NVLINK + 3 * H100.intra_node_latency, rel=1e-12)
    assert 335e9 <= 0.75 * size / seconds <= 370e9  # ndcp: 355 GB/s


def test_full_and_moe_recompute_re_run_the_forward_dispatch_and_combine_and_moe_act_does_not():
    """Four all-to-alls per MoE layer and micro-batch (dispatch and combine forward, their gradients backward), and
    two more when full recompute re-runs the layer's forward or Megatron's moe module re-runs the MoE block
    (docs/formulas.md §7.2); re-running only the experts' activation (moe_act) re-sends nothing."""
    model, clus = load_model("mixtral-8x7b"), ClusterSpec(H100, 8)
    degrees = Degrees(tp=1, cp=1, ep=8, etp=1, mbs=1, sp=False)
    layer = {mode: layer_time(model, clus, RUN, LayerKey("moe", mode, degrees, "p2p", frozenset()))
             for mode in ("none", "full", "moe", "moe_act")}
    a2a = dispatch_seconds(model, clus, RUN, TOKENS, 1, 8, 1)
    assert layer["none"].ep_comm == pytest.approx(4 * a2a, rel=1e-12)
    assert layer["full"].recompute == pytest.approx(layer["none"].forward + 2 * a2a, rel=1e-12)
    assert layer["full"].recompute > layer["moe"].recompute > 2 * a2a > layer["moe_act"].recompute
