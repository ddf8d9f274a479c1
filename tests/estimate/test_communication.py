"""Alpha-beta collectives and rank placement (TP innermost, then CP, DP, PP)."""
import pytest

from ndcp.estimate.communication import (EXPERT_RANK_ORDER, RANK_ORDER, all_gather_seconds, all_reduce_seconds,
                                         all_to_all_seconds, group_span, link, p2p_seconds, reduce_scatter_seconds,
                                         ring_link)
from ndcp.specs import device_preset


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
    h100 = device_preset("h100")
    assert link(h100, 8) == (h100.intra_node_bandwidth, h100.intra_node_latency)
    assert link(h100, 16) == (h100.inter_node_bandwidth, h100.inter_node_latency)


def test_a_ring_across_nodes_uses_the_nics_of_its_members_on_a_node():
    # NCCL routes each ring channel through another NIC: a data-parallel group with k ranks on each node crosses
    # between nodes at k x the per-device NIC bandwidth, up to NVLink (docs/formulas.md §7)
    h100 = device_preset("h100")
    nic, nvlink = h100.inter_node_bandwidth, h100.intra_node_bandwidth
    for tp, members in ((8, 1), (4, 2), (2, 4), (1, 8)):
        bandwidth, latency = ring_link(h100, ("cp", "dp"), {"tp": tp, "cp": 1, "dp": 16})
        assert bandwidth == min(nvlink, members * nic) and latency == h100.inter_node_latency
    assert ring_link(h100, ("cp", "dp"), {"tp": 16, "dp": 4}) == (nic, h100.inter_node_latency)  # one rank per node
    assert ring_link(h100, ("dp",), {"tp": 2, "dp": 4}) == link(h100, 8)  # inside a node: NVLink
    narrow = device_preset("h800")  # NVLink 160 GB/s: 8 NICs of 50 GB/s cannot outrun it
    assert ring_link(narrow, ("dp",), {"dp": 16})[0] == narrow.intra_node_bandwidth
