"""What the host links leave one device's host copies (estimate/host_link.py, docs/formulas.md §5.3): its PCIe link
shared with its NIC's GPUDirect RDMA traffic, its switch's uplink with the other devices behind it, its socket's
memory bandwidth with the socket's other devices; and what that does to activation offload."""
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndcp.estimate.host_link import fair_share, host_copy_bandwidth, offload_copy_bandwidth
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.recompute import RecomputePlan

H100, A100 = device_preset("h100"), device_preset("a100-80g")
LLAMA = load_model("llama3-70b")
RUN = RunSpec(global_batch=128, seq_len=8192)
PLAN = Strategy(tp=8, pp=4, dp=2, mbs=1, mbn=64, zero=1, sp=True)
OFFLOADED = PLAN.with_(recompute=RecomputePlan.uniform("offload"))


def test_the_dgx_topology_facts():
    # DGX H100: one ConnectX-7 per GPU, each GPU behind its own CX7 switch, four GPUs per Xeon 8480C socket
    assert (H100.devices_per_pcie_switch, H100.nics_per_pcie_switch, H100.sockets_per_node) == (1, 1, 2)
    assert H100.host_memory_bandwidth == pytest.approx(307.2e9 / 4)
    # DGX A100: two GPUs and two ConnectX-6 per PCIe Gen4 switch; EPYC 7742, 204.8 GB/s per socket
    assert (A100.devices_per_pcie_switch, A100.nics_per_pcie_switch) == (2, 2)
    assert A100.host_memory_bandwidth == pytest.approx(51.2e9)


def test_one_dgx_h100_node_copies_at_the_full_link_and_many_at_half_of_it():
    assert offload_copy_bandwidth(ClusterSpec(H100, 8)) == H100.host_bandwidth
    # 400 Gb/s of RDMA (50 GB/s) next to the copies on one 52 GB/s link: each gets half
    assert offload_copy_bandwidth(ClusterSpec(H100, 16)) == pytest.approx(26e9)
    # DGX A100: the two GPUs of a switch split its Gen4 uplink, whatever the NICs do
    assert host_copy_bandwidth(ClusterSpec(A100, 8), network_busy=False) == pytest.approx(13e9)
    assert offload_copy_bandwidth(ClusterSpec(A100, 64)) == pytest.approx(13e9)


def test_nics_on_the_cpu_load_the_uplink_instead_of_the_devices_link():
    on_cpu = ClusterSpec(replace(H100, nics_per_pcie_switch=0, devices_per_pcie_switch=2), 64)
    # the uplink carries both devices' copies and both NICs' 50 GB/s: the NICs take half, the copies share the rest
    assert offload_copy_bandwidth(on_cpu) == pytest.approx(52e9 / 2 / 2)


def test_the_socket_memory_bandwidth_caps_the_copies():
    narrow = ClusterSpec(replace(H100, socket_memory_bandwidth=80e9), 8)  # 20 GB/s for each of a socket's 4 GPUs
    assert offload_copy_bandwidth(narrow) == pytest.approx(20e9)


@given(capacity=st.floats(1e9, 1e12), competing=st.floats(0, 1e12), more=st.floats(0, 1e12))
def test_a_fair_share_never_grows_with_the_competing_flow(capacity, competing, more):
    assert capacity / 2 <= fair_share(capacity, competing + more) <= fair_share(capacity, competing) <= capacity


topologies = st.fixed_dictionaries({
    "host_bandwidth": st.sampled_from([13e9, 26e9, 52e9, 104e9, 450e9]),
    "inter_node_bandwidth": st.sampled_from([12.5e9, 25e9, 50e9, 100e9]),
    "devices_per_pcie_switch": st.integers(1, 4),
    "nics_per_pcie_switch": st.integers(0, 4),
    "sockets_per_node": st.sampled_from([1, 2, 4]),
    "socket_memory_bandwidth": st.sampled_from([100e9, 204.8e9, 307.2e9, 1e12]),
})


@given(facts=topologies, gpus=st.sampled_from([8, 16, 64]))
def test_more_sharing_of_a_host_link_is_never_faster(facts, gpus):
    """More devices behind a switch, fewer sockets, a faster NIC or a busy one: never more bandwidth."""
    device = replace(H100, **facts)
    cluster = ClusterSpec(device, gpus)
    base = host_copy_bandwidth(cluster, network_busy=gpus > 8)
    assert 0 < base <= device.host_bandwidth
    assert host_copy_bandwidth(cluster, network_busy=True) <= host_copy_bandwidth(cluster, network_busy=False)
    more_behind_switch = replace(device, devices_per_pcie_switch=device.devices_per_pcie_switch + 1)
    fewer_sockets = replace(device, sockets_per_node=max(1, device.sockets_per_node // 2))
    faster_nic = replace(device, inter_node_bandwidth=2 * device.inter_node_bandwidth)
    for shared in (more_behind_switch, fewer_sockets, faster_nic):
        assert host_copy_bandwidth(ClusterSpec(shared, gpus), network_busy=gpus > 8) <= base


@settings(max_examples=15, deadline=None)
@given(devices_per_switch=st.integers(1, 3), nics=st.integers(0, 2))
def test_more_sharing_never_makes_an_offloading_step_faster(devices_per_switch, nics):
    device = replace(H100, devices_per_pcie_switch=devices_per_switch, nics_per_pcie_switch=nics)
    shared = replace(device, devices_per_pcie_switch=devices_per_switch + 1)
    step = estimate_time(LLAMA, ClusterSpec(device, 64), RUN, OFFLOADED).step_seconds
    assert estimate_time(LLAMA, ClusterSpec(shared, 64), RUN, OFFLOADED).step_seconds >= step


@settings(max_examples=15, deadline=None)
@given(host_gbs=st.floats(0.5, 8.0), gpus=st.sampled_from([64, 128]))
def test_offload_is_never_faster_than_keeping_when_the_link_is_saturated(host_gbs, gpus):
    """A host link of a few GB/s cannot move a layer's 252 MiB under its few milliseconds of compute: the step pays
    the copies and is slower than keeping the activations (and the plan keeps them when they fit)."""
    cluster = ClusterSpec(replace(H100, host_bandwidth=host_gbs * 1e9), gpus)
    dp = gpus // 32
    plan = Strategy(tp=8, pp=4, dp=dp, mbs=1, mbn=128 // dp, zero=1, sp=True)
    offloaded = plan.with_(recompute=RecomputePlan.uniform("offload"))
    kept = estimate_time(LLAMA, cluster, RUN, plan).step_seconds
    assert estimate_time(LLAMA, cluster, RUN, offloaded).step_seconds > kept
