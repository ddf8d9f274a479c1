"""A MoE layer's token dispatch per dispatcher, and its memory-bound routing work (docs/formulas.md §7.2, §3.2).

Dispatch (one token dispatch; the combine moves the same bytes back). Routing is taken as balanced and uniform over
the experts a token may reach, the busiest rank receiving `RunSpec.moe_load_imbalance` times the even share. The
EP group (ETP ranks innermost, estimate/communication.py EXPERT_RANK_ORDER) spans `domains` scale-up domains (the
node of an 8-GPU board, the rack of an NVL72; "node" below reads "domain"), `per_domain` EP ranks each; what stays
in a domain goes over the scale-up fabric, what leaves it over the device's scale-out NIC (tapered when the group
spans pods, communication.scale_out_bandwidth), the two links at once, so a dispatch takes the longer of the two
shares (each at its own bandwidth), plus one latency per peer at the slowest crossed link's (the ring model's
charge: a group spread over more domains is never faster).

- alltoall (Megatron-Core MoEAlltoAllTokenDispatcher): one copy per token-expert pair to the rank of its expert, so
  per_node - 1 of the ep ranks' shares stay in the node and ep - per_node leave it. Within one node this is the
  ring all-to-all's (ep - 1)/ep of the bytes at the NVLink bandwidth, as before.
- allgather (MoEAllGatherTokenDispatcher): every rank all-gathers the EP group's tokens (ring, slowest link of the
  group) and keeps those routed to its experts; the combine reduce-scatters them back. Independent of top_k.
- flex (MoEFlexTokenDispatcher over DeepEP or HybridEP): one copy per token and destination node over the NIC, then
  one copy per destination rank over NVLink inside the node (DeepEP README, "normal kernels with NVLink and RDMA
  forwarding"). Each reaches its link's rate there (H800: 153-158 GB/s of ~160 NVLink, 43-58 GB/s of ~50 RDMA), so
  no efficiency factor is applied. Node-limited routing (MoESpec.router_groups / router_group_topk;
  DeepSeek-V3 §2.1.2, §3.2.2: each token to at most 4 nodes) bounds the nodes a token reaches.

Expected distinct bins hit by k uniform draws over b bins: b (1 - (1 - 1/b)^k).
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec, MoESpec
from ..specs.run import FP32_BYTES, RunSpec
from .communication import all_gather_seconds, ep_link, in_domain, scale_out_bandwidth, scale_up

# Megatron-Core's router keeps its logits, scores and top-k probabilities in FP32 (--moe-router-dtype fp32, as the
# recipes set it) and passes over them: logits written, softmax or sigmoid read and written, top-k read, the
# auxiliary-loss statistics read (router.py, moe_utils.py). Per token and expert, bytes of one forward.
ROUTER_PASSES = 4
ROUTER_BYTES = FP32_BYTES


class EPPlacement(NamedTuple):
    """Where an EP group's ranks sit: the scale-up domains it spans and its EP ranks per domain."""

    domains: int
    per_domain: float


def ep_placement(cluster: ClusterSpec, ep: int, etp: int) -> EPPlacement:
    """The scale-up domains an EP group of ep ranks (each etp consecutive devices wide) spans, and its EP ranks per
    domain. A group that does not tile the job's domain segment straddles at least two domains."""
    span = ep * etp
    if in_domain(cluster, span):
        return EPPlacement(1, float(ep))
    domains = max(2, math.ceil(span / cluster.domain_ranks))
    return EPPlacement(domains, ep / domains)


def distinct_hits(bins: float, draws: int) -> float:
    """Expected distinct bins hit by `draws` uniform draws over `bins` equal bins (at least one bin)."""
    if bins <= 1:
        return 1.0
    return bins * (1.0 - (1.0 - 1.0 / bins) ** draws)


def reachable_nodes(moe: MoESpec, nodes: int) -> float:
    """Nodes a token may reach under group-limited routing: the expected nodes holding its router_group_topk
    groups of router_groups (consecutive experts on consecutive ranks, so each node holds groups/nodes of them
    when there are more groups than nodes; a group spans nodes/groups nodes otherwise); all of them without groups."""
    groups, chosen = moe.router_groups, moe.router_group_topk
    if not groups or chosen >= groups or nodes <= 1:
        return float(nodes)
    if groups < nodes:
        return chosen * nodes / groups
    per_node = groups // nodes
    missed = math.prod((groups - chosen - i) / (groups - i) for i in range(per_node))  # a node holds none chosen
    return nodes * (1.0 - max(0.0, missed))


def reachable_ranks(moe: MoESpec, ep: int) -> float:
    """EP ranks holding the experts a token may reach: all ep, or the router_group_topk groups' share of them."""
    groups, chosen = moe.router_groups, moe.router_group_topk
    if not groups or chosen >= groups:
        return float(ep)
    return max(1.0, ep * chosen / groups)


def _two_links(cluster: ClusterSpec, span: int, intra_bytes: float, inter_bytes: float, peers: int,
               domains: int) -> float:
    """The scale-up and scale-out shares of a dispatch over a group covering `span` consecutive ranks at once (the
    longer of the two) at the bandwidths NCCL-class kernels reach (DeepEP on H800: 153-158 GB/s of NVLink's 200 one
    way, NCCL's 80 %: docs/formulas.md §7.2), plus one latency per peer at the latency of the slowest link it
    crosses, as the ring model charges (communication.py)."""
    device = cluster.device
    latency = device.inter_node_latency if domains > 1 else device.intra_node_latency
    return (max(intra_bytes / scale_up(device).bandwidth, inter_bytes / scale_out_bandwidth(cluster, span))
            + peers * latency)


def dispatch_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tokens: float, tp: int, ep: int,
                     etp: int) -> float:
    """One token dispatch (or combine) of a MoE layer over its EP group under run.moe_dispatcher (module
    docstring); `tokens` per micro-batch on the device, tokens x etp / tp of them per EP rank."""
    if ep <= 1:
        return 0.0
    moe = model.moe
    row = tokens * etp / tp * model.hidden * run.activation_bytes  # this rank's tokens, one copy each
    if run.moe_dispatcher == "allgather":
        return all_gather_seconds(ep * row, ep, *ep_link(cluster, ep, etp))
    domains, per_domain = ep_placement(cluster, ep, etp)
    received = row * run.moe_load_imbalance  # the busiest rank's share bounds the exchange
    if run.moe_dispatcher == "alltoall":
        pairs = received * moe.top_k
        return _two_links(cluster, ep * etp, pairs * (per_domain - 1) / ep, pairs * (ep - per_domain) / ep, ep - 1,
                          domains)
    domain_copies = distinct_hits(reachable_nodes(moe, domains), moe.top_k)
    rank_copies = distinct_hits(reachable_ranks(moe, ep), moe.top_k)
    return _two_links(cluster, ep * etp, received * rank_copies * (per_domain - 1) / per_domain,
                      received * domain_copies * (domains - 1) / domains, ep - 1, domains)


class RoutingBytes(NamedTuple):
    """HBM bytes of one MoE layer's memory-bound routing work on one device, one micro-batch (routing_bytes)."""

    forward: float
    backward: float
    around_dispatch: float  # the router's passes and (but with flex) the permute / unpermute, one pass: the part
    # estimate/layer_time.py's EP-overlap split schedules with the attention on the computation stream
    comm_stream: tuple[float, float] = (0.0, 0.0)  # of forward / backward, the flex dispatcher's whole-device
    # kernels on the communication stream (flex_kernel_bytes): serial with the compute, they hide no all-to-all


def flex_kernel_bytes(model: ModelSpec, run: RunSpec, tokens: float, tp: int, ep: int,
                      etp: int) -> tuple[float, float]:
    """HBM bytes of the flex dispatcher's permute, unpermute and metadata kernels of one MoE layer and micro-batch
    on one device, (forward, backward), as HybridEP runs them (deepseek-ai/DeepEP hybrid-ep @34152ae, the commit
    Megatron-LM's LTS image pins, docker/Dockerfile.ci.lts @d98e8a6; Megatron-Core fused_a2a.py @d98e8a6
    HybridEPDispatch / HybridEPCombine, unfused: moe_permute_fusion_into_hybridep False by default). With
    X = the rank's tokens x etp / tp rows, D = the rows its dispatch receives, one per token and destination rank
    (X x distinct_hits(reachable ranks, top_k), the busiest rank's), R = their top_k copies, each row of hidden at
    the activation dtype, E experts, L local ones:

    - permute (extension/permute.cu permute_kernel, after the dispatch kernel in Executor::dispatch_postprocess):
      reads the D received rows from the NVLink buffer, writes R expert-major rows (padding rows zeroed): D + R,
      in the dispatch forward and again in the combine backward (dispatch_with_permute with the handle);
    - unpermute (unpermute_kernel, Executor::combine_preprocess before the combine kernel): reads R, writes the D
      per-rank sums: R + D, in the combine forward and the dispatch backward (combine_with_unpermute);
    - metadata, dispatch forward only (Executor::metadata_preprocess_core; the backward reuses the handle): the
      scan kernel (backend/hybrid_ep_backend.cuh `scan`) reads the EP group's all-gathered routing map (ep X rows;
      its own NVLink domain's E / domains columns of bools, charged all E: an upper bound, microseconds) and writes
      the local-expert map (ep X x L bools) and the sparse-to-dense map (ep X int32); permute_preprocessing's
      cooperative scan reads D x L bools and writes its row map (D x L int32), then reads and rewrites it (pass 3).

    Grids (config.cuh @34152ae Configurer): permute and unpermute 16 blocks per SM, the scans 108 blocks
    (num_sms_preprocessing_api; Megatron-Core moe_hybridep_num_sms_preprocessing = 108): each takes the whole
    device, on the communication stream. The row maps the permute kernels read (4 B per received row and local
    expert) are not counted. DeepEP's normal kernels, the other flex backend, receive the same D rows and
    Megatron-Core permutes them on the computation stream (token_dispatcher.py @d98e8a6 _DeepepManager
    get_permuted_hidden_states_by_experts): the same bytes, without the metadata scans."""
    moe = model.moe
    local = tokens * etp / tp
    received = local * distinct_hits(reachable_ranks(moe, ep), moe.top_k) * run.moe_load_imbalance
    rows = received + local * moe.top_k * run.moe_load_imbalance  # D + R
    permutes = 2 * rows * model.hidden * run.activation_bytes  # permute + unpermute, each way
    local_experts = moe.experts / ep
    scans = ep * local * (moe.experts + local_experts + 4) + received * local_experts * (1 + 3 * 4)
    return permutes + scans, permutes


def routing_bytes(model: ModelSpec, run: RunSpec, tokens: float, tp: int, ep: int, etp: int) -> RoutingBytes:
    """HBM bytes of a MoE layer's memory-bound routing work on one device, forward and backward, op by op as
    Megatron-Core runs it (megatron/core/transformer/moe @d98e8a6; docs/formulas.md §3.2, the inventory). With
    X = this device's tokens x etp / tp rows of hidden and R = their top_k copies (the busiest rank's,
    RunSpec.moe_load_imbalance), each at the activation dtype, and S = the router's FP32 tokens x experts scores:

    - the router (router.py TopKRouter.routing, moe_utils.topk_routing_with_score_function): ROUTER_PASSES x S
      each way;
    - permute and unpermute (moe_utils.permute / unpermute, Transformer Engine's fused kernels): X + R each, and in
      the backward each is the other's kernel on the gradients, X + R again; flex permutes the rows its dispatch
      received, D + R each, and HybridEP runs them and its metadata scans on the communication stream
      (flex_kernel_bytes: `comm_stream`, not in `around_dispatch`);
    - alltoall with more than one local expert: the received rows sorted by local expert and back
      (token_dispatcher.py MoEAlltoAllTokenDispatcher.dispatch_postprocess and combine_preprocess,
      moe_utils.sort_chunks_by_idxs: a gather of whole rows, read R and write R), 2 x 2R each way (the backward of
      each sort is the inverse sort);
    - FP8 with the alltoall or allgather dispatcher: experts.py TEGroupedMLP.forward pads each expert's rows to the
      recipe's alignment (Transformer Engine Fp8Padding / Fp8Unpadding, fused_multi_row_padding: the BF16 rows
      copied, read R and write R) before fc1 and unpads fc2's output, 2 x 2R each way; HybridEP pads inside its
      dispatch (moe_utils.skip_routed_expert_padding), so flex rows are charged none (DeepEP, which does not, is
      the other flex backend: unpriced there);
    - shared experts: their output added to the routed one (moe_layer.py MoELayer.postprocess, or the alltoall
      dispatcher's combine_postprocess), read 2X and write X forward;
    - backward only: the layer input's gradient from the router's FP32 input-gradient GEMM cast to the activation
      dtype (moe_utils.RouterGatingLinearFunction.backward, `grad_input.to(input_dtype)`: read 4 bytes and write
      the activation's per element, 3X at BF16) and added to the permute's (autograd's accumulation of the two
      uses of the layer input: read 2X, write X).
    """
    moe = model.moe
    local = tokens * etp / tp
    row_bytes = model.hidden * run.activation_bytes
    x = local * row_bytes
    r = local * moe.top_k * run.moe_load_imbalance * row_bytes
    router = tokens * moe.experts * ROUTER_BYTES * ROUTER_PASSES
    flex = flex_kernel_bytes(model, run, tokens, tp, ep, etp) if run.moe_dispatcher == "flex" else (0.0, 0.0)
    around = router + (0.0 if run.moe_dispatcher == "flex" else 2 * (x + r))
    sorts = 2 if run.moe_dispatcher == "alltoall" and moe.experts > ep else 0  # by local expert, and back
    paddings = 2 if run.fp8 and run.moe_dispatcher != "flex" else 0  # pad fc1's input, unpad fc2's output
    copies = sorts + paddings
    moved = copies * 2 * r
    shared = 3 * x if moe.shared_experts else 0.0
    cast = local * model.hidden * (ROUTER_BYTES + run.activation_bytes) if run.activation_bytes < ROUTER_BYTES else 0.0
    input_gradient = cast + 3 * x
    return RoutingBytes(around + flex[0] + moved + shared, around + flex[1] + moved + input_gradient, around, flex)


__all__ = ["EPPlacement", "ep_placement", "distinct_hits", "reachable_nodes", "reachable_ranks", "dispatch_seconds",
           "routing_bytes", "RoutingBytes", "flex_kernel_bytes", "ROUTER_PASSES", "ROUTER_BYTES"]
