"""Alpha-beta collectives and rank placement (TP innermost, then CP, DP, PP): scale-up inside a domain, scale-out
across, tapered between pods."""
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from ndcp.estimate.communication import (EXPERT_RANK_ORDER, RANK_ORDER, all_gather_seconds, all_reduce_seconds,
                                         all_to_all_seconds, ep_link, few_byte_all_reduce_seconds, group_span,
                                         in_domain, in_pod, link,
                                         p2p_seconds, reduce_scatter_seconds, ring_link, scale_out_bandwidth, scale_up,
                                         tp_link)
from ndcp.specs import ClusterSpec, device_preset


def test_ring_volumes():
    gb = 1e9
    assert all_reduce_seconds(gb, 8, 1e9, 0.0) == pytest.approx(2 * 7 / 8)  # 2(n-1)/n
    assert reduce_scatter_seconds(gb, 8, 1e9, 0.0) == pytest.approx(7 / 8)  # (n-1)/n
    assert all_gather_seconds(gb, 8, 1e9, 0.0) == pytest.approx(7 / 8)
    assert all_to_all_seconds(gb, 4, 1e9, 0.0) == pytest.approx(3 / 4)
    assert p2p_seconds(gb, 1e9, 1e-5) == pytest.approx(1 + 1e-5)


def test_latency_per_ring_step_and_single_rank_is_free():
    assert all_reduce_seconds(0, 4, 1e9, 1e-5) == pytest.approx(6e-5)  # 2(n-1) steps
    assert reduce_scatter_seconds(0, 4, 1e9, 1e-5) == pytest.approx(3e-5)
    assert all_reduce_seconds(1e9, 1, 1e9, 1e-5) == 0.0


US = 1e-6


@pytest.mark.parametrize("per_node, ranks, microseconds", [
    (8, 8, 6.6 + 14 * 0.6),  # one NVLink domain: the LL ring, 15.0 (the LL tree: 6.8 + 14 x 0.6 = 15.2)
    (8, 4, 6.6 + 6 * 0.6),  # 10.2
    (8, 16, 6.8 + 2 * (7 * 0.6 + 1 * 5.0)),  # 2 nodes: the tree, 25.2 (the ring: 6.6 + 28 x 1.0 + 2 x 2.7 = 40.0)
    (8, 1024, 6.8 + 2 * (7 * 0.6 + 7 * 5.0)),  # 128 nodes: the tree, 85.2
    (2, 4, 6.6 + 4 * 1.0 + 2 * 2.7),  # 2 nodes of 2: the ring, 16.0 (the tree: 6.8 + 2 x (0.6 + 5.0) = 18.0)
    (1, 2, 6.6 + 2 * 5.0),  # one rank a node: the ring's network hop is the tree's, 16.6 (the tree: 16.8)
    (8, 1, 0.0),
])
def test_a_few_byte_all_reduce_costs_what_nccls_ll_model_counts(per_node, ranks, microseconds):
    """NCCL's tuning model of an all-reduce (src/graph/tuning.cc v2.30.7-1, ncclTopoTuneModel), counted by hand in
    microseconds for n consecutive ranks in `nodes` scale-up domains of p ranks: the LL ring 6.6 + (2(n-1) -
    2(nodes-1)) x 0.6 (1.0, the network overhead, once the ring leaves a node) + 2(nodes-1) x 2.7 (5.0 at p = 1),
    or the LL tree 6.8 + 2((p-1) x 0.6 + log2(nodes) x 5.0), whichever is cheaper."""
    cluster = ClusterSpec(replace(device_preset("h100"), devices_per_node=per_node), max(ranks, per_node))
    assert few_byte_all_reduce_seconds(cluster, ranks) == pytest.approx(microseconds * US)


@given(ranks=st.sampled_from([2, 4, 8, 16, 64, 256, 1024]), per_node=st.sampled_from([1, 2, 4, 8, 72]))
def test_a_few_byte_all_reduce_grows_with_its_group_and_is_no_cheaper_than_a_step(ranks, per_node):
    """More ranks never make it cheaper, and it never costs less than NCCL's base latency plus one hop."""
    cluster = ClusterSpec(replace(device_preset("h100"), devices_per_node=per_node), 2048)
    seconds = few_byte_all_reduce_seconds(cluster, ranks)
    assert seconds <= few_byte_all_reduce_seconds(cluster, 2 * ranks)
    assert seconds >= (6.6 + 2 * 0.6) * US


def test_rank_order_is_tp_cp_dp_pp():
    assert RANK_ORDER == ("tp", "cp", "dp", "pp")
    assert EXPERT_RANK_ORDER[:2] == ("etp", "ep")
    degrees = {"tp": 4, "cp": 2, "dp": 8, "pp": 4}
    assert group_span(("tp",), degrees) == 4
    assert group_span(("cp",), degrees) == 8  # stride 4, size 2
    assert group_span(("cp", "dp"), degrees) == 64
    assert group_span(("pp",), degrees) == 256
    # a different order is an argument, not a code change
    assert group_span(("tp",), degrees, ("dp", "tp", "cp", "pp")) == 32


def test_group_in_a_node_uses_nvlink_else_the_nic():
    h100 = ClusterSpec(device_preset("h100"), 1024)
    d = h100.device
    assert link(h100, 8) == (scale_up(d).bandwidth, d.intra_node_latency)
    assert link(h100, 16) == (scale_out_bandwidth(h100, 16), d.inter_node_latency)


@pytest.mark.parametrize("device, nvlink, nic", [
    ("h100", 360e9, 47e9),  # NVLink's 80 % (~370 GB/s of 450 measured, nccl-tests #212); 46-48 GB/s per NDR NIC
    ("a100-80g", 240e9, 24e9),  # 80 % (~230 GB/s of 300 measured, nccl-tests #149); 192 GB/s over 8 HDR NICs
    ("h800", 160e9, 47e9),  # DeepSeek-V3's 160 GB/s is already the usable figure: not reduced again
    ("b200", 679.61e9, 47e9),  # NVLink5 ring busbw on GB200 (Azure ND GB200 v6, 8 GB); NDR NIC as on H100
    ("b300", 679.61e9, 94e9),  # the same NVLink5; ConnectX-8 800 Gb/s: no published figure, the lower fraction
])
def test_links_run_at_the_bus_bandwidth_nccl_reaches_not_the_datasheet(device, nvlink, nic):
    cluster = ClusterSpec(device_preset(device), 1024)
    assert scale_up(cluster.device).bandwidth == pytest.approx(nvlink)
    assert scale_out_bandwidth(cluster, 16) == pytest.approx(nic)


def test_a_ring_across_nodes_uses_the_nics_of_its_members_on_a_node():
    # NCCL routes each ring channel through another NIC: a data-parallel group with k ranks on each node crosses
    # between nodes at k x the per-device NIC bandwidth, up to NVLink (docs/formulas.md §7)
    h100 = ClusterSpec(device_preset("h100"), 1024)
    d = h100.device
    nic, nvlink, latency_out = 47e9, 360e9, d.inter_node_latency  # achievable: 8 x 47 GB/s outruns 360 GB/s
    for tp, members in ((8, 1), (4, 2), (2, 4), (1, 8)):
        bandwidth, latency = ring_link(h100, ("cp", "dp"), {"tp": tp, "cp": 1, "dp": 16})
        assert bandwidth == min(nvlink, members * nic) and latency == latency_out
    assert ring_link(h100, ("cp", "dp"), {"tp": 16, "dp": 4}) == (nic, latency_out)  # one rank per node
    assert ring_link(h100, ("dp",), {"tp": 2, "dp": 4}) == link(h100, 8)  # inside a node: NVLink
    narrow = ClusterSpec(device_preset("h800"), 1024)  # NVLink 160 GB/s: 8 NICs of 50 GB/s cannot outrun it
    assert ring_link(narrow, ("dp",), {"dp": 16})[0] == narrow.device.intra_node_bandwidth == 160e9


GB200 = device_preset("gb200-nvl72")


@pytest.mark.parametrize("device, gpus, ranks", [
    ("gb200-nvl72", 2048, 64),  # 32 racks of 16 trays: 64 | 2048, 72 does not
    ("gb200-nvl72", 144, 72),  # two whole racks
    ("gb200-nvl72", 96, 48),  # two racks of 12 trays (72 and 64 do not divide 96)
    ("gb200-nvl72", 36, 36),  # the whole job inside one rack
    ("h100", 16, 8), ("h100", 6, 6),
    ("h100", 12, 8),  # no whole-node segment divides 12: a node, the last one partial
])
def test_a_job_fills_each_domain_with_an_equal_segment_of_whole_nodes(device, gpus, ranks):
    assert ClusterSpec(device_preset(device), gpus).domain_ranks == ranks


def test_a_group_inside_an_nvl72_domain_uses_nvlink_beyond_its_tray():
    cluster = ClusterSpec(GB200, 2048)
    nvlink = scale_up(GB200)
    assert GB200.devices_per_node == 4 and GB200.domain_size == 72
    assert link(cluster, 64) == nvlink  # 16 trays of one rack
    assert ep_link(cluster, 64, 1) == nvlink and tp_link(cluster, 4) == nvlink
    nic = scale_out_bandwidth(cluster, 128)
    assert link(cluster, 128) == (nic, GB200.inter_node_latency)
    assert not in_domain(ClusterSpec(GB200, 144), 16)  # 16-rank blocks straddle the 72-GPU racks
    # a data-parallel ring across racks: its 64 members of a rack each cross on their own NIC, up to NVLink
    assert ring_link(cluster, ("dp",), {"dp": 2048}) == (nvlink.bandwidth, GB200.inter_node_latency)
    assert ring_link(cluster, ("dp",), {"tp": 16, "dp": 128})[0] == 4 * nic


def test_a_group_spanning_pods_gets_the_oversubscribed_share_of_its_nic():
    tapered = ClusterSpec(replace(device_preset("h100"), pod_size=256, oversubscription=4.0), 1024)
    nic = 47e9  # NDR's 50 GB/s at NCCL's 94 %
    assert tapered.pod_ranks == 256
    assert link(tapered, 256).bandwidth == nic and in_pod(tapered, 256)
    assert link(tapered, 512).bandwidth == scale_out_bandwidth(tapered, 512) == nic / 4
    assert ring_link(tapered, ("dp",), {"tp": 8, "dp": 128})[0] == nic / 4  # one member a node, across 4 pods


SPANS = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256])


@given(device=st.sampled_from(["h100", "a100-80g", "mi300x", "b200", "gb200-nvl72"]), span=SPANS,
       stride=SPANS, size=SPANS)
def test_a_group_inside_a_domain_is_never_slower_than_the_same_group_across_domains(device, span, stride, size):
    """The same group (ranks and stride) on a cluster whose domains hold it and on one whose domains are its nodes:
    its link's bandwidth is never lower and its latency never higher (collectives are monotone in both)."""
    preset = device_preset(device)
    gpus = 1024
    one_node = ClusterSpec(replace(preset, devices_per_domain=0), gpus)
    wide = ClusterSpec(replace(preset, devices_per_domain=preset.devices_per_node * 64), gpus)
    degrees = {"tp": stride, "dp": size}
    for links in ((link(wide, span), link(one_node, span)),
                  (ring_link(wide, ("dp",), degrees), ring_link(one_node, ("dp",), degrees))):
        inside, across = links
        assert inside.bandwidth >= across.bandwidth and inside.latency <= across.latency


@given(span=SPANS, pod=st.sampled_from([8, 16, 64, 256]), taper=st.floats(1.0, 8.0))
def test_oversubscription_never_widens_a_link(span, pod, taper):
    flat = ClusterSpec(device_preset("h100"), 1024)
    tapered = ClusterSpec(replace(flat.device, pod_size=pod, oversubscription=taper), 1024)
    assert link(tapered, span).bandwidth <= link(flat, span).bandwidth
    assert ring_link(tapered, ("dp",), {"dp": span})[0] <= ring_link(flat, ("dp",), {"dp": span})[0]
