"""One FLOP accounting (docs/formulas.md §2.3): HFU is what the time model executes, so it never exceeds the device's
compute efficiency; MFU counts model FLOPs under a declared convention and never counts padding or recompute."""
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, event, given, settings, strategies as st

from ndcp.estimate.compute import attention_core_flops, layer_gemms, model_flops_per_step, total_flops
from ndcp.estimate.time import estimate_time
from ndcp.rules import strategy_refusal
from ndcp.specs import ClusterSpec, ModelSpec, MoESpec, RecomputePlan, RunSpec, SpecError, Strategy, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.mixers import LinearAttentionSpec, MambaSpec


@st.composite
def problems(draw):
    """A random model (dense or MoE, optional capacity factor, optional hybrid layers), a valid strategy and a
    sequence length up to 1M."""
    heads = draw(st.sampled_from([8, 16, 32]))
    hidden = heads * draw(st.sampled_from([64, 128]))
    layers = draw(st.sampled_from([4, 8, 12]))
    moe = None
    if draw(st.booleans()):
        moe = MoESpec(experts=draw(st.sampled_from([4, 8])), top_k=draw(st.sampled_from([1, 2])),
                      expert_ffn_hidden=hidden, shared_experts=draw(st.sampled_from([0, 1])),
                      capacity_factor=draw(st.sampled_from([0.0, 1.0, 1.25, 2.0])))
    hybrid = draw(st.sampled_from(["", "", "GGGA", "M-A-"]))  # Qwen3-Next-like layers, Nemotron-H-like blocks, none
    mixers = {} if not hybrid else {
        "layer_mixers": hybrid * (layers // 4), "hybrid_blocks": hybrid == "M-A-", "gated_attention": hybrid == "GGGA",
        "linear_attention": LinearAttentionSpec(heads // 2, heads, 64, 64) if hybrid == "GGGA" else None,
        "mamba": MambaSpec(4 * heads, 64, draw(st.sampled_from([64, 128])), 1) if hybrid == "M-A-" else None}
    if hybrid == "M-A-" and moe is not None:
        moe = replace(moe, first_dense_layers=0, layer_frequency=1)
    model = ModelSpec("random", layers, hidden, heads, 4 * hidden, draw(st.sampled_from([1000, 32000])),
                      kv_heads=draw(st.sampled_from([heads, heads // 4])), moe=moe, max_positions=1 << 20, **mixers)
    seq = draw(st.sampled_from([512, 4096, 32768, 131072, 1048576]))
    tp, pp = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 4]))
    cp = 1 if hybrid == "GGGA" else draw(st.sampled_from([1, 2] if hybrid else [1, 2, 8]))  # cp_mixers
    dp, mbs, mbn = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4, 8]))
    ep = draw(st.sampled_from([1, 2, 4])) if moe else 1
    strategy = Strategy(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=1 if moe else 1, mbs=mbs, mbn=mbn,
                        zero=draw(st.sampled_from([0, 1, 2, 3])), sp=tp > 1 and draw(st.booleans()),
                        recompute=RecomputePlan.uniform(draw(st.sampled_from(
                            ["none", "full"] if hybrid else ["none", "selective", "full"]))))
    device = device_preset(draw(st.sampled_from(["a100-80g", "h100", "b200", "mi300x"])))
    fp8 = device.fp8_peak_flops > 0 and draw(st.booleans())  # FP8 runs: MFU and HFU of the FP8 peak
    run = RunSpec(global_batch=dp * mbs * mbn, seq_len=seq, flash_attention=draw(st.booleans()),
                  precision="fp8" if fp8 else "bf16")
    cluster = ClusterSpec(device, dp * tp * pp * cp)
    return model, cluster, run, strategy


def _valid(model, cluster, run, strategy) -> bool:
    try:
        return strategy_refusal(model, cluster, run, strategy) is None
    except SpecError:
        return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])  # assume(valid)
@given(problems())
def test_mfu_never_exceeds_hfu_and_hfu_never_exceeds_the_compute_efficiency(problem):
    model, cluster, run, strategy = problem
    assume(_valid(model, cluster, run, strategy))
    event("hybrid layers" if model.layer_mixers else "attention layers")
    est = estimate_time(model, cluster, run, strategy)
    assert est.mfu_convention == "causal"
    assert 0 < est.mfu <= est.hfu * (1 + 1e-12)
    assert est.hfu <= 1.0
    # every matmul runs at most at the device's efficiency ceiling, so the executed FLOP rate cannot pass it
    assert est.hfu <= cluster.device.compute_efficiency * (1 + 1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])  # MoE and valid
@given(problems(), st.sampled_from([1.0, 1.25, 1.5, 2.0, 4.0]))
def test_a_larger_capacity_factor_never_raises_mfu(problem, factor):
    model, cluster, run, strategy = problem
    assume(model.moe is not None and _valid(model, cluster, run, strategy))
    low = replace(model, moe=replace(model.moe, capacity_factor=1.0))
    high = replace(model, moe=replace(model.moe, capacity_factor=factor))
    slow, fast = estimate_time(high, cluster, run, strategy), estimate_time(low, cluster, run, strategy)
    assert slow.model_flops == fast.model_flops  # padding is never model FLOPs
    assert slow.mfu <= fast.mfu * (1 + 1e-12)
    assert slow.hardware_flops >= fast.hardware_flops


def test_conventions_differ_only_in_the_attention_core():
    model = load_model("llama3-8b")
    seq, batch = 8192, 4
    core = attention_core_flops(model, seq, seq, 1, causal=False) * model.layers * batch
    full, causal = (model_flops_per_step(model, seq, batch, c) for c in ("full", "causal"))
    assert full - causal == pytest.approx(3 * core / 2)  # forward + backward of the masked half


def test_hfu_counts_what_runs_for_one_dense_layer():
    """HFU numerator, by hand for a pp=1, tp=1 run of one micro-batch: 3 x the GEMMs, the causal core forward and
    its flash backward (2.5 x), one more core forward for selective recompute; the logits 3 x."""
    model = ModelSpec("one", 1, 1024, 8, 4096, 1000, max_positions=4096)
    cluster = ClusterSpec(device_preset("h100"), 1)
    run = RunSpec(global_batch=1, seq_len=4096)
    strategy = Strategy(dp=1, mbn=1, recompute=RecomputePlan.uniform("selective"))
    gemms = total_flops(layer_gemms(model, "dense", 4096, 1))
    core = attention_core_flops(model, 4096, 4096, 1, causal=True)
    logits = 2 * 4096 * 1024 * 1000
    est = estimate_time(model, cluster, run, strategy)
    assert est.hardware_flops == pytest.approx(3 * gemms + core * (1 + 2.5 + 1) + 3 * logits)


def test_long_context_hfu_stays_physical():
    """The issue's case: a Llama-2-7B-shaped model at 1M tokens on 1,024 H100 with tp=8, cp=32 and selective
    recompute used to report HFU 165 %."""
    model = replace(load_model("llama2-7b"), max_positions=1 << 20)
    cluster = ClusterSpec(device_preset("h100"), 1024)
    run = RunSpec(global_batch=4, seq_len=1 << 20)
    strategy = Strategy(dp=4, tp=8, cp=32, mbn=1, sp=True, recompute=RecomputePlan.uniform("selective"))
    assert _valid(model, cluster, run, strategy)
    est = estimate_time(model, cluster, run, strategy)
    assert est.mfu <= est.hfu <= cluster.device.compute_efficiency
    full = estimate_time(model, cluster, replace(run, mfu_convention="full"), strategy)
    assert full.step_seconds == est.step_seconds and full.hfu == est.hfu  # a convention only reports
    assert full.mfu > est.mfu

