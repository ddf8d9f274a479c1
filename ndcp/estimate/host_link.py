"""The bandwidth one device's host copies (activation offload, the host-side optimizer step) get when they share the
node's host links (docs/formulas.md §5.3): the device's own PCIe link with its NIC's GPUDirect RDMA traffic, its PCIe
switch's uplink to the CPU with the other devices behind that switch, and its socket's memory bandwidth with the
other devices of that socket. Every device of a training job copies at the same time (the same layers of the same
schedule), so each shared link is split evenly among them.
"""
from __future__ import annotations

from functools import lru_cache

from ..specs.device import ClusterSpec


def fair_share(capacity: float, competing: float) -> float:
    """What a copy that would take the whole link gets next to a flow asking for `competing` bytes/s: max-min
    fairness (the link's arbiter serves both in turn), so the competing flow takes its demand or half the link,
    whichever is less."""
    return capacity - min(competing, capacity / 2)


@lru_cache(maxsize=1024)
def host_copy_bandwidth(cluster: ClusterSpec, network_busy: bool) -> float:
    """Bytes/s, one way, of one device's host copies while every device of the node copies. `network_busy`: the
    device's scale-out NIC runs at its full rate meanwhile (the cluster spans nodes and the copies run under the
    compute its data-parallel, pipeline or context-parallel traffic overlaps); priced as always on when the cluster
    spans nodes, since ndcp does not align the two in time (an upper bound on the contention)."""
    device = cluster.device
    nic = device.inter_node_bandwidth if network_busy else 0.0
    behind_switch = device.nics_per_pcie_switch > 0  # GPUDirect RDMA: NIC <-> device through the switch
    own_link = fair_share(device.host_bandwidth, nic) if behind_switch else device.host_bandwidth
    uplink = fair_share(device.host_bandwidth, 0.0 if behind_switch else device.devices_per_uplink * nic)
    return min(own_link, uplink / device.devices_per_uplink, device.host_memory_bandwidth)


def offload_copy_bandwidth(cluster: ClusterSpec) -> float:
    """The bandwidth of activation offload copies: they run under the layers' compute, which the job's scale-out
    traffic overlaps whenever the cluster spans scale-up domains."""
    return host_copy_bandwidth(cluster, cluster.count > cluster.domain_ranks)


__all__ = ["fair_share", "host_copy_bandwidth", "offload_copy_bandwidth"]
