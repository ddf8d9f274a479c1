"""Alpha-beta collective costs and where each parallel group sits in the cluster.

Ring collectives (Patarasuk & Yuan 2009; Thakur et al. 2005): with n ranks and a message of `nbytes` per rank,
all-reduce moves 2(n-1)/n x nbytes per rank in 2(n-1) steps, reduce-scatter and all-gather (n-1)/n x nbytes in
n-1 steps, all-to-all (n-1)/n x nbytes in n-1 steps; each step pays the link latency (alpha), each byte 1/bandwidth
(beta), the bandwidth NCCL reaches on the link: the datasheet figure times DeviceSpec.scale_up_efficiency or
scale_out_efficiency (nccl-tests bus bandwidth over line rate, docs/formulas.md §7). `nbytes` is always the full
(unsharded) buffer one rank holds before a reduce-scatter or after an all-gather. A few-byte all-reduce (the step's
scalar syncs, an FP8 amax) is NCCL's own LL cost model instead, not these alphas (few_byte_all_reduce_seconds).

Rank placement (Megatron-LM parallel_state, order "tp-cp-ep-dp-pp"): consecutive global ranks vary TP fastest,
then CP, then DP, then PP. Expert layers re-carve the same tp*cp*dp ranks of a pipeline stage as ETP (fastest),
then EP, then expert-data-parallel. The job's consecutive ranks fill scale-up domains in equal segments
(ClusterSpec.domain_ranks) and pods of the scale-out network likewise (ClusterSpec.pod_ranks). A group of `span`
consecutive ranks (its blocks start at multiples of span) stays inside a domain when span divides the segment, and
then talks over the scale-up fabric (NVLink, DeviceSpec.intra_node_*); otherwise each device uses its scale-out NIC
(inter_node_*), at 1/oversubscription of it when the group also leaves its pod (docs/formulas.md §7.4).

Context parallelism's attention traffic per --cp-comm-type (cp_comm_seconds) sits here too: it is built from these
collectives and the CP group's link.
"""
from __future__ import annotations

from functools import lru_cache
from math import prod
from typing import NamedTuple

from ..specs.device import ClusterSpec, DeviceSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import cp_a2a_size
from .keys import Degrees

RANK_ORDER = ("tp", "cp", "dp", "pp")  # innermost (fastest-varying) first
EXPERT_RANK_ORDER = ("etp", "ep", "edp", "pp")


def group_span(dims: tuple[str, ...], degrees: dict[str, int], order: tuple[str, ...] = RANK_ORDER) -> int:
    """Consecutive ranks covered by the group spanning `dims` (adjacent in `order`): its stride times its size."""
    positions = sorted(order.index(d) for d in dims)
    inner = prod(degrees.get(d, 1) for d in order[:positions[0]])
    return inner * prod(degrees.get(order[i], 1) for i in positions)


class Link(NamedTuple):
    """What one device of a group gets: bytes/s one way, and seconds per ring step."""

    bandwidth: float
    latency: float


def in_domain(cluster: ClusterSpec, span: int) -> bool:
    """Whether every group of `span` consecutive ranks lies inside one scale-up domain."""
    return cluster.domain_ranks % span == 0


def in_pod(cluster: ClusterSpec, span: int) -> bool:
    """Whether every group of `span` consecutive ranks lies inside one pod of the scale-out network."""
    return cluster.pod_ranks % span == 0


def scale_out_bandwidth(cluster: ClusterSpec, span: int) -> float:
    """Scale-out bytes/s per device of a group covering `span` consecutive ranks: the device's NIC, tapered by the
    oversubscription between pods when the group spans pods."""
    device = cluster.device
    nic = device.inter_node_bandwidth * device.scale_out_efficiency
    return nic / (1.0 if in_pod(cluster, span) else device.oversubscription)


def scale_up(device: DeviceSpec) -> Link:
    """The scale-up fabric's Link, at the bandwidth NCCL reaches on it (DeviceSpec.scale_up_efficiency)."""
    return Link(device.intra_node_bandwidth * device.scale_up_efficiency, device.intra_node_latency)


def link(cluster: ClusterSpec, span: int) -> Link:
    """The Link of a group covering `span` consecutive ranks: scale-up inside a domain, else scale-out."""
    if in_domain(cluster, span):
        return scale_up(cluster.device)
    return Link(scale_out_bandwidth(cluster, span), cluster.device.inter_node_latency)


def ring_link(cluster: ClusterSpec, dims: tuple[str, ...], degrees: dict[str, int],
              order: tuple[str, ...] = RANK_ORDER) -> Link:
    """link() of a ring collective (all-reduce, reduce-scatter, all-gather) over the group spanning `dims`. Across
    domains NCCL forms one ring per channel and routes each channel through another NIC of the domain, so a ring
    whose group has k members in each domain crosses between domains on those k devices' NICs at once: k x the
    per-device scale-out bandwidth, never more than the scale-up link the ring also runs through (docs/formulas.md
    §7: NVIDIA measures 192 GB/s all-reduce bus bandwidth between DGX A100s of 8 x 200 Gb/s NICs, NVIDIA/nccl#812)."""
    span = group_span(dims, degrees, order)
    if in_domain(cluster, span):
        return scale_up(cluster.device)
    stride = span // prod(degrees.get(d, 1) for d in dims)
    members_per_domain = max(1, cluster.domain_ranks // stride)
    return Link(min(scale_up(cluster.device).bandwidth, members_per_domain * scale_out_bandwidth(cluster, span)),
                cluster.device.inter_node_latency)


# The links of the groups every layer shape asks about, cached per degrees.
@lru_cache(maxsize=1024)
def tp_link(cluster: ClusterSpec, tp: int) -> Link:
    """link() of a TP group."""
    return link(cluster, group_span(("tp",), {"tp": tp}))


@lru_cache(maxsize=1024)
def cp_link(cluster: ClusterSpec, tp: int, cp: int) -> Link:
    """link() of a CP group (TP ranks innermost)."""
    return link(cluster, group_span(("cp",), {"tp": tp, "cp": cp}))


@lru_cache(maxsize=1024)
def ep_link(cluster: ClusterSpec, ep: int, etp: int) -> Link:
    """link() of an EP group (ETP ranks innermost, the expert rank order)."""
    return link(cluster, group_span(("ep",), {"etp": etp, "ep": ep}, EXPERT_RANK_ORDER))


def all_reduce_seconds(nbytes: float, n: int, bandwidth: float, latency: float) -> float:
    """Ring all-reduce: 2(n-1)/n x nbytes, 2(n-1) steps."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * latency


def reduce_scatter_seconds(nbytes: float, n: int, bandwidth: float, latency: float) -> float:
    """Ring reduce-scatter of an nbytes buffer: (n-1)/n x nbytes, n-1 steps."""
    if n <= 1:
        return 0.0
    return (n - 1) / n * nbytes / bandwidth + (n - 1) * latency


def all_gather_seconds(nbytes: float, n: int, bandwidth: float, latency: float) -> float:
    """Ring all-gather into an nbytes buffer: (n-1)/n x nbytes, n-1 steps."""
    return reduce_scatter_seconds(nbytes, n, bandwidth, latency)


def all_to_all_seconds(nbytes: float, n: int, bandwidth: float, latency: float) -> float:
    """All-to-all of nbytes per rank: the (n-1)/n share that leaves the rank, n-1 peers."""
    return reduce_scatter_seconds(nbytes, n, bandwidth, latency)


def p2p_seconds(nbytes: float, bandwidth: float, latency: float) -> float:
    """One point-to-point send."""
    return nbytes / bandwidth + latency


# -- latency-bound all-reduce -------------------------------------------------------------------------------------
# NCCL's own cost model of an all-reduce (src/graph/tuning.cc ncclTopoTuneModel, v2.30.7-1 @73cf1122; the LL figures
# and the in-node ring were the same at b6475625, v2.20): latency = base + per-hop latencies, microseconds, by
# algorithm and protocol. At a few bytes the LL protocol's bandwidth term is nothing, so these are the whole cost.
LL_RING_BASE = 6.6e-6  # baseLatencies[Ring][LL]
LL_TREE_BASE = 6.8e-6  # baseLatencies[Tree][LL]
LL_NVLINK_HOP = 0.6e-6  # hwLatencies[NVLINK][Ring][LL] = hwLatencies[NVLINK][Tree][LL]
LL_NET_RING_HOP = 2.7e-6  # hwLatencies[NET][Ring][LL]
LL_NET_TREE_HOP = 5.0e-6  # hwLatencies[NET][Tree][LL], a ring's network hop too when a node holds one rank (ppn == 1)
NET_OVERHEAD = 1.0e-6  # getNetOverhead: the floor of a ring step once the ring leaves the node (x86 Intel, Arm)


@lru_cache(maxsize=4096)  # the solver asks it per stage and ZeRO stage of every layout, for a few group sizes
def few_byte_all_reduce_seconds(cluster: ClusterSpec, n: int) -> float:
    """A latency-bound all-reduce of a few bytes (scalars, an FP8 amax) over a group of `n` consecutive ranks, as
    NCCL prices it (LL_* above) and picks it: the cheaper of the LL ring and the LL tree. The group's scale-up
    domains are NCCL's nodes (1 when in_domain, else at least 2), p = n / nodes ranks each:
      ring  6.6 + (2(n-1) - 2(nodes-1)) x max(0.6, overhead) + 2(nodes-1) x net   (overhead 0 and net 0 in one node;
            net 2.7, or 5.0 when p = 1; overhead 1.0)
      tree  6.8 + 2 ((p-1) x 0.6 + floor(log2 nodes) x 5.0)                      microseconds.
    In one domain the ring is always 0.2 us cheaper (8 ranks: 15.0 us); across domains the tree wins but for the
    smallest groups (16 H100 in 2 nodes: 25.2 us; 1,024 in 128: 85.2 us). NCCL's figures are taken for every device
    (RCCL's and HCCL's own were not read); an AMD host's 2 us overhead is not modelled, nor NVLink SHARP (NVLS:
    25 us in one domain, cheaper than the ring above 16 ranks: conservative there). docs/formulas.md §7."""
    if n <= 1:
        return 0.0
    nodes = 1 if in_domain(cluster, n) else max(2, -(-n // cluster.domain_ranks))
    per_node, steps, across = n // nodes, 2 * (n - 1), 2 * (nodes - 1)
    hop = LL_NVLINK_HOP if nodes == 1 else max(LL_NVLINK_HOP, NET_OVERHEAD)
    net = LL_NET_TREE_HOP if per_node == 1 else LL_NET_RING_HOP
    ring = LL_RING_BASE + (steps - across) * hop + across * net
    tree = LL_TREE_BASE + 2 * ((per_node - 1) * LL_NVLINK_HOP + (nodes.bit_length() - 1) * LL_NET_TREE_HOP)
    return min(ring, tree)


# -- context parallelism ------------------------------------------------------------------------------------------
def cp_bytes(model: ModelSpec, run: RunSpec, tokens: float, tp: int) -> tuple[float, float, float]:
    """Bytes per rank of this rank's local K+V, Q and attention output (its tokens, its tp share of the heads); the
    output is the core's, heads x head_dim wide (Qwen3's 64 x 128 against a hidden size of 4096)."""
    if model.mla is not None:
        qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
        kv, q, out = model.heads * (qk + model.mla.v_head_dim), model.heads * qk, model.heads * model.mla.v_head_dim
    else:
        q = out = model.heads * model.dim_per_head
        kv = 2 * model.num_kv_heads * model.dim_per_head
    return tuple(tokens * width / tp * run.activation_bytes for width in (kv, q, out))


# Each --cp-comm-type (Megatron-Core / Transformer Engine context parallelism, docs/formulas.md §7): exposed seconds
# (forward, backward) of one layer's CP communication, given the attention core's forward and backward it may hide
# behind. kv, q, out: this rank's bytes of K+V, Q and the attention output (cp_bytes).
def _cp_p2p(cluster, tp, cp, kv, q, out, core, core_backward):
    """Ring: cp-1 passes of the K/V chunk, each overlapping an attention block; backward K/V again plus dK/dV."""
    return _ring(cp_link(cluster, tp, cp), cp, kv, core, core_backward)


def _ring(link: tuple[float, float], n: int, kv: float, core: float, core_backward: float) -> tuple[float, float]:
    ring = (n - 1) * p2p_seconds(kv, *link)
    return max(0.0, ring - core), max(0.0, 2 * ring - core_backward)


def _cp_allgather(cluster, tp, cp, kv, q, out, core, core_backward):
    """All-gather the sequence's K/V before attention (Llama 3 §3.3.2), not overlapped; the backward gathers it
    again and reduce-scatters dK/dV (TE AttnFuncWithCPAndKVAllGather)."""
    bandwidth, latency = cp_link(cluster, tp, cp)
    gather = all_gather_seconds(cp * kv, cp, bandwidth, latency)
    return gather, gather + reduce_scatter_seconds(cp * kv, cp, bandwidth, latency)


def _a2a_pass(cluster, tp, n, span, kv, q, out):
    """One Ulysses pass over n ranks: all-to-alls of Q, K+V and the output (backward: dO, dQ, dK+dV)."""
    bandwidth, latency = link(cluster, span)
    return sum(all_to_all_seconds(b, n, bandwidth, latency) for b in (q, kv, out))


def _cp_a2a(cluster, tp, cp, kv, q, out, core, core_backward):
    """DeepSpeed-Ulysses: sequence-sharded Q/K/V become head-sharded over cp, attention runs on whole sequences, the
    output goes back; none of it overlapped (the attention needs all of it)."""
    a2a = _a2a_pass(cluster, tp, cp, tp * cp, kv, q, out)
    return a2a, a2a


def _cp_a2a_p2p(cluster, tp, cp, kv, q, out, core, core_backward):
    """Hierarchical: Ulysses over the a CP ranks of a scale-up domain, then the p2p ring over the cp/a domain groups,
    whose K/V chunk (a x tokens, heads/a) has the same bytes as kv."""
    a = cp_a2a_size(cluster.domain_ranks, tp, cp)
    a2a = _a2a_pass(cluster, tp, a, tp * a, kv, q, out) if a > 1 else 0.0
    ring_forward, ring_backward = _ring(cp_link(cluster, tp, cp), cp // a, kv, core, core_backward)
    return a2a + ring_forward, a2a + ring_backward


CP_COMM_TIME = {"p2p": _cp_p2p, "allgather": _cp_allgather, "a2a": _cp_a2a, "a2a+p2p": _cp_a2a_p2p}


def cp_comm_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, degrees: Degrees, cp_comm: str,
                    core: float, core_backward: float) -> tuple[float, float]:
    """Exposed (forward, backward) seconds of one layer's context-parallel communication, one micro-batch split by
    `degrees`, whose attention core takes `core` seconds forward and `core_backward` backward."""
    tp, cp = degrees.tp, degrees.cp
    if cp <= 1:
        return 0.0, 0.0
    return CP_COMM_TIME[cp_comm](cluster, tp, cp, *cp_bytes(model, run, degrees.tokens(run.seq_len), tp), core,
                                 core_backward)


__all__ = ["RANK_ORDER", "EXPERT_RANK_ORDER", "group_span", "Link", "in_domain", "in_pod", "scale_out_bandwidth",
           "scale_up", "link", "ring_link", "tp_link", "cp_link", "ep_link",
           "all_reduce_seconds", "reduce_scatter_seconds", "all_gather_seconds", "all_to_all_seconds", "p2p_seconds",
           "LL_RING_BASE", "LL_TREE_BASE", "LL_NVLINK_HOP", "LL_NET_RING_HOP", "LL_NET_TREE_HOP", "NET_OVERHEAD",
           "few_byte_all_reduce_seconds", "cp_bytes", "cp_comm_seconds", "CP_COMM_TIME"]
