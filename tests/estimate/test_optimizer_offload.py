"""The optimizer on the host (docs/formulas.md §6.1): its states leave the device for the host memory, and the step
pays the host link and the host memory bandwidth; only where the trainer runs it."""
from dataclasses import replace

import pytest

from ndcp.estimate.data_parallel import data_parallel_terms
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.parameters import optimizer_shard, stage_parameters
from ndcp.estimate.time import estimate_time
from ndcp.rules import strategy_refusal
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model

from ..cli_helpers import assert_one_line_error, run

LLAMA = load_model("llama3-70b")
CLUSTER = ClusterSpec(device_preset("h100"), 64)
RUN = RunSpec(global_batch=128, seq_len=8192)
PLAN = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True)
OFFLOADED = PLAN.with_(optimizer_offload=True)


def test_the_states_leave_the_device_for_the_host():
    on_device, on_host = (estimate_memory(LLAMA, CLUSTER, RUN, s) for s in (PLAN, OFFLOADED))
    for device, host, params in zip(on_device.stages, on_host.stages, stage_parameters(LLAMA, PLAN)):
        assert host.parts["optimizer_states"] == 0 and device.parts["optimizer_states"] > 0
        assert host.parts["parameters"] == device.parts["parameters"]
        assert host.parts["gradients"] == device.parts["gradients"]
        # the host keeps the shard's FP32 master weights and two FP32 moments (12 B) and an FP32 gradient copy (4 B)
        assert host.host_bytes - device.host_bytes == pytest.approx(optimizer_shard(PLAN, params) * 16, abs=1)
    assert on_host.peak_bytes < on_device.peak_bytes


def test_the_host_step_pays_the_link_and_the_host_memory_bandwidth():
    device = CLUSTER.device
    terms = data_parallel_terms(LLAMA, CLUSTER, RUN, OFFLOADED)
    for term, params in zip(terms, stage_parameters(LLAMA, PLAN)):
        n = optimizer_shard(PLAN, params)
        # FP32 gradients down and FP32 parameters up the 52 GB/s link; Adam reads and writes 12 B of states and
        # reads the 4 B gradient copy at 76.8 GB/s (DGX H100: 307.2 GB/s per socket over its 4 GPUs); the step's fixed
        # costs come on top (estimate/step_costs.py)
        assert term.optimizer - term.step_costs == pytest.approx(n * 8 / 52e9 + n * 28 / 76.8e9)
        assert 0 < term.step_costs < 0.01 * term.optimizer
        assert device.host_bandwidth == 52e9 and device.host_memory_bandwidth == 76.8e9
    slower = estimate_time(LLAMA, CLUSTER, RUN, OFFLOADED).step_seconds - estimate_time(LLAMA, CLUSTER, RUN,
                                                                                          PLAN).step_seconds
    assert 0.3 < slower < 1.0  # 16.89 -> 17.47 s (docs/formulas.md §6.1)


def test_only_where_the_trainer_offloads_the_optimizer():
    assert strategy_refusal(LLAMA, CLUSTER, RUN, OFFLOADED) is None
    assert strategy_refusal(LLAMA, CLUSTER, RUN, OFFLOADED.with_zero(0)) is None
    fsdp = strategy_refusal(LLAMA, CLUSTER, RUN, OFFLOADED.with_zero(3))
    assert fsdp.rule == "optimizer_offload" and fsdp.field == "zero"
    titan = strategy_refusal(LLAMA, CLUSTER, replace(RUN, trainer="torchtitan"), OFFLOADED.with_zero(3))
    assert titan.rule == "optimizer_offload" and titan.field == "optimizer_offload"
    # Megatron: with FP8 parameter gathers (ZeRO >= 1) the offload needs delayed scaling
    tensorwise = replace(RUN, precision="fp8", fp8_recipe="tensorwise")
    assert strategy_refusal(LLAMA, CLUSTER, tensorwise, OFFLOADED).rule == "optimizer_offload"
    assert strategy_refusal(LLAMA, CLUSTER, tensorwise, OFFLOADED.with_zero(0)) is None
    assert strategy_refusal(LLAMA, CLUSTER, replace(tensorwise, fp8_recipe="delayed"), OFFLOADED) is None


PROBLEM = ["llama3-70b", "--device", "h100", "--gpus", "64", "--global-batch", "128", "--seq-len", "8192"]


def test_strategy_keys_json_and_emission(capsys):
    import json
    code, out, err = run(capsys, "estimate", *PROBLEM, "--strategy", "tp=8,pp=4,sp=on,offload=activations+optimizer",
                         "--json", "-")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["strategy"]["optimizer_offload"] is True and doc["strategy"]["recompute"] == "offload"
    assert doc["memory"]["host_peak_bytes"] > 0
    code, out, err = run(capsys, "estimate", *PROBLEM, "--strategy", "tp=8,pp=4,offload=optimizer", "--emit",
                         "megatron", "--emit-anyway")  # 85.35 GiB: it does not fit, and the file says so
    assert code == 0, err
    assert "--optimizer-cpu-offload" in out and "--use-precision-aware-optimizer" in out
    assert "# ndcp: WARNING: the file does not fit" in out
    assert_one_line_error(*run(capsys, "estimate", *PROBLEM, "--strategy", "tp=8,pp=4,zero=3,offload=optimizer"),
                          "zero=3", "ZeRO 0, 1")


def test_search_takes_the_host_optimizer_when_only_it_fits(capsys):
    # Llama-3-70B on 16 H100 under 60 GiB: nothing fits with the optimizer on the device (75.9 GiB at least); with
    # the optimizer searched on the host too, the proven optimum keeps it there
    args = ["search", "llama3-70b", "--device", "h100", "--gpus", "16", "--global-batch", "32", "--seq-len", "4096",
            "--memory-cap", "60GiB", "--recompute", "uniform", "--top", "1", "--quiet"]
    code, out, _ = run(capsys, *args)
    assert code == 1 and out.startswith("infeasible")
    code, out, err = run(capsys, *args, "--optimizer-offload", "both")
    assert code == 0, err
    assert out.startswith("optimal:") and "offload=optimizer" in out and "zero=0" in out


def test_searching_it_under_a_trainer_without_it_is_a_usage_error(capsys):
    assert_one_line_error(*run(capsys, "search", *PROBLEM, "--trainer", "torchtitan", "--optimizer-offload", "on"),
                          "--optimizer-offload on", "torchtitan")
