"""Alpha-beta collective costs and where each parallel group sits in the cluster.

Ring collectives (Patarasuk & Yuan 2009; Thakur et al. 2005): with n ranks and a message of `nbytes` per rank,
all-reduce moves 2(n-1)/n x nbytes per rank in 2(n-1) steps, reduce-scatter and all-gather (n-1)/n x nbytes in
n-1 steps, all-to-all (n-1)/n x nbytes in n-1 steps; each step pays the link latency (alpha), each byte 1/bandwidth
(beta). `nbytes` is always the full (unsharded) buffer one rank holds before a reduce-scatter or after an all-gather.

Rank placement (Megatron-LM parallel_state, order "tp-cp-ep-dp-pp"): consecutive global ranks vary TP fastest,
then CP, then DP, then PP. Expert layers re-carve the same tp*cp*dp ranks of a pipeline stage as ETP (fastest),
then EP, then expert-data-parallel. A group whose ranks all lie within one block of devices_per_node consecutive
ranks talks over the scale-up fabric (NVLink); otherwise each device uses its scale-out NIC.
"""
from __future__ import annotations

from math import prod

from ..specs.device import DeviceSpec

RANK_ORDER = ("tp", "cp", "dp", "pp")  # innermost (fastest-varying) first
EXPERT_RANK_ORDER = ("etp", "ep", "edp", "pp")


def group_span(dims: tuple[str, ...], degrees: dict[str, int], order: tuple[str, ...] = RANK_ORDER) -> int:
    """Consecutive ranks covered by the group spanning `dims` (adjacent in `order`): its stride times its size."""
    positions = sorted(order.index(d) for d in dims)
    inner = prod(degrees.get(d, 1) for d in order[:positions[0]])
    return inner * prod(degrees.get(order[i], 1) for i in positions)


def fits_in_node(span: int, device: DeviceSpec) -> bool:
    return span <= device.devices_per_node


def link(device: DeviceSpec, span: int) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) per device for a group covering `span` consecutive ranks."""
    if fits_in_node(span, device):
        return device.intra_node_bandwidth, device.intra_node_latency
    return device.inter_node_bandwidth, device.inter_node_latency


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


__all__ = ["RANK_ORDER", "EXPERT_RANK_ORDER", "group_span", "fits_in_node", "link", "all_reduce_seconds",
           "reduce_scatter_seconds", "all_gather_seconds", "all_to_all_seconds", "p2p_seconds"]
