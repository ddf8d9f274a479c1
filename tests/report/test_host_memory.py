"""Host memory in the reports: a plan that offloads (activations or the optimizer) shows what it puts in host memory,
per device and per node, against the node's host memory; every report's assumptions say how much host memory a
device has and where the figure comes from (the device's host_memory_bytes)."""
import dataclasses

from rich.console import Console

from ndcp.cli import build_strategy
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.time import estimate_time
from ndcp.report.jsonout import estimate_document
from ndcp.report.search import render_search
from ndcp.report.terminal import format_bytes, render_estimate
from ndcp.solve.certificate import cpsat_search
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.strategy_input import parse_strategy_string
from ndcp.specs.units import GIB

# Llama-3.1-405B on 2,048 H100 (the bench question): with every layer's activations offloaded. On the point estimate
# (confidence 0): no measured run offloads, and at 90 % the band that widens for it leaves these plans no room.
RUN_405B = RunSpec(global_batch=2048, seq_len=8192, confidence=0.0)
OFFLOADED = "tp=8,pp=16,mbs=1,zero=1,sp=on,offload=activations"


def estimate_report(strategy: str, device=device_preset("h100"), model="llama3.1-405b", gpus=2048, run=RUN_405B):
    """(the text of the estimate report at 200 columns, its --json document)."""
    m = load_model(model)
    cluster = ClusterSpec(device, gpus)
    s = build_strategy(m, cluster, run, parse_strategy_string(strategy))
    args = (m, cluster, run, s, estimate_memory(m, cluster, run, s), estimate_time(m, cluster, run, s))
    console = Console(record=True, width=200, color_system=None)
    render_estimate(console, *args)
    return console.export_text(), estimate_document(*args)


def host_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("host memory")]


def test_offloaded_activations_show_host_memory_per_device_and_per_node():
    text, doc = estimate_report(OFFLOADED)
    memory = doc["memory"]
    used, capacity = memory["host_peak_bytes"], memory["host_capacity_bytes"]
    busiest = max(memory["stages"], key=lambda s: s["host_bytes"])
    assert 0 < used <= capacity == device_preset("h100").host_memory_bytes
    [line] = host_lines(text)
    assert (f"host memory (offload): peak {format_bytes(used)} per device on stage {busiest['stage']}, "
            f"{format_bytes(8 * used)} per node of 8; {format_bytes(capacity - used)} free of "
            f"{format_bytes(capacity)} per device (1.21 TiB per node)") == line
    assert "fits: peak" in text


def test_optimizer_offload_shows_host_memory():
    text, doc = estimate_report("tp=8,pp=16,mbs=1,zero=1,sp=on,recompute=selective,offload=optimizer")
    assert doc["memory"]["host_peak_bytes"] > 0
    [line] = host_lines(text)
    assert format_bytes(doc["memory"]["host_peak_bytes"]) in line


def test_no_host_line_without_offload():
    text, doc = estimate_report("tp=8,pp=16,mbs=1,zero=1,sp=on,recompute=selective")
    assert doc["memory"]["host_peak_bytes"] == 0
    assert host_lines(text) == []


def test_assumptions_name_the_host_memory_and_its_source():
    text, _ = estimate_report("tp=8,pp=16,mbs=1,zero=1,sp=on,recompute=selective")
    assert ("host      154.35 GiB per device x 8 = 1.21 TiB per node, for offload (the h100 preset's "
            "host_memory_bytes, ndcp/specs/device.py; a device file sets its own)") in text
    # 2,048 GPUs on 256 nodes: each GPU's PCIe link carries its NIC's traffic too (estimate/host_link.py)
    assert "activations offloaded at 26 GB/s per" in text
    a100, _ = estimate_report("tp=8,pp=16,mbs=1,zero=1,sp=on", device=device_preset("a100-80g"), model="gpt3-175b",
                              gpus=512, run=RunSpec(global_batch=1536, seq_len=2048))
    assert "37.00 GiB per device x 8 = 296.00 GiB per node" in a100 and "the a100-80g preset's" in a100


def test_host_memory_over_capacity_does_not_fit_and_says_by_how_much():
    small = dataclasses.replace(device_preset("h100"), name="small-host", host_memory_bytes=16 * GIB)
    text, doc = estimate_report(OFFLOADED, device=small)
    memory = doc["memory"]
    over = memory["host_peak_bytes"] - 16 * GIB
    assert not memory["fits"] and memory["peak_bytes"] <= memory["capacity_bytes"]
    assert f"DOES NOT FIT: host memory over by {format_bytes(over)} per device" in text
    [line] = host_lines(text)
    assert f"over by {format_bytes(over)} of 16.00 GiB per device (128.00 GiB per node)" in line
    assert "16.00 GiB per device x 8 = 128.00 GiB per node" in text
    assert "host_memory_bytes of device small-host, as its file or the overrides give it" in text


def test_search_winner_that_offloads_shows_host_memory():
    """On DGX H100 nodes the winner no longer offloads (issue #34: the copies share each GPU's PCIe link with its NIC
    and the node offers 154 GiB per GPU); with a host link and host memory ten times as wide (NVLink-C2C class) and
    256 GiB per GPU it offloads layers (tens of GiB of them per GPU), and the report says how much host memory that
    takes."""
    m = load_model("llama3.1-405b")
    h100 = device_preset("h100")
    wide = dataclasses.replace(h100, name="wide-host", host_bandwidth=10 * h100.host_bandwidth,
                               socket_memory_bandwidth=10 * h100.socket_memory_bandwidth, host_memory_bytes=256 * GIB)
    cluster = ClusterSpec(wide, 2048)
    space = SearchSpace(m, cluster, RUN_405B, SpaceOptions())
    result = cpsat_search(space, top=1)
    best = result.best.memory
    assert best.host_peak_bytes > 50 * GIB
    console = Console(record=True, width=200, color_system=None)
    render_search(console, m, cluster, RUN_405B, space, result, "megatron")
    text = console.export_text()
    [line] = host_lines(text)
    assert f"peak {format_bytes(best.host_peak_bytes)} per device" in line
    assert f"{format_bytes(8 * best.host_peak_bytes)} per node of 8" in line
    assert "256.00 GiB per device x 8 = 2.00 TiB per node" in text
