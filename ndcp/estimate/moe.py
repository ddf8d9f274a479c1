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
from ..specs.run import RunSpec
from .communication import all_gather_seconds, ep_link, in_domain, scale_out_bandwidth, scale_up

# Megatron-Core's router keeps its logits, scores and top-k probabilities in FP32 (--moe-router-dtype fp32, as the
# recipes set it) and passes over them: logits written, softmax or sigmoid read and written, top-k read, the
# auxiliary-loss statistics read (router.py, moe_utils.py). Per token and expert, bytes of one forward.
ROUTER_PASSES = 4
ROUTER_BYTES = 4


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


def routing_bytes(model: ModelSpec, run: RunSpec, tokens: float, tp: int, etp: int) -> float:
    """HBM bytes of one forward of a MoE layer's memory-bound routing work on one device: the router's FP32 passes
    over tokens x experts scores, and permute / unpermute (Megatron-Core moe_utils.permute and unpermute: gather
    each token's top_k copies into expert order, read them back and sum them weighted): each reads and writes
    (1 + top_k) rows of hidden, for this device's tokens x etp / tp tokens (the busiest rank's share of pairs)."""
    moe = model.moe
    local = tokens * etp / tp
    router = tokens * moe.experts * ROUTER_BYTES * ROUTER_PASSES
    rows = local * (1 + moe.top_k * run.moe_load_imbalance)
    return router + 2 * rows * model.hidden * run.activation_bytes


__all__ = ["EPPlacement", "ep_placement", "distinct_hits", "reachable_nodes", "reachable_ranks", "dispatch_seconds",
           "routing_bytes", "ROUTER_PASSES", "ROUTER_BYTES"]
