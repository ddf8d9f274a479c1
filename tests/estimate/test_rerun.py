"""What recompute modules re-run and what activation offload exposes (estimate/rerun.py, docs/formulas.md §5.2-5.3)."""
from dataclasses import replace

import pytest

from ndcp.estimate.activations import layer_activation_bytes, recompute_workspace_bytes
from ndcp.estimate.compute import Gemm, mla_up_projection_gemms, mlp_gemms, total_flops
from ndcp.estimate.fusion import layer_elementwise_bytes
from ndcp.estimate.gemm import weight_gemm_seconds
from ndcp.estimate.keys import Degrees, LayerKey
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.layer_time import layer_time, tp_all_reduce_seconds
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.recompute import RecomputePlan

H100 = device_preset("h100")
RUN = RunSpec(global_batch=128, seq_len=8192)
DEGREES = Degrees(tp=8, cp=1, ep=1, etp=1, mbs=1, sp=True)


def test_module_reruns_count_their_gemm_flops():
    llama, deepseek = load_model("llama3-70b"), load_model("deepseek-v3")
    cluster = ClusterSpec(H100, 64)
    tokens = 8192
    none = layer_time(llama, cluster, RUN, LayerKey("dense", "none", DEGREES)).flops
    mlp = layer_time(llama, cluster, RUN, LayerKey("dense", "mlp", DEGREES)).flops
    assert mlp - none == pytest.approx(total_flops(mlp_gemms(llama, llama.ffn_hidden, tokens, 8)))
    up = layer_time(deepseek, cluster, RUN, LayerKey("moe", "mla_up_proj", DEGREES._replace(ep=8))).flops
    base = layer_time(deepseek, cluster, RUN, LayerKey("moe", "none", DEGREES._replace(ep=8))).flops
    assert up - base == pytest.approx(total_flops(mla_up_projection_gemms(deepseek, tokens, 8)))


@pytest.mark.parametrize("name,kind,norms", [
    ("mixtral-8x7b", "moe", 1),  # the MoE pre-MLP norm; the attention norm is fused into linear_qkv
    ("deepseek-v3", "dense", 1),  # MLA's input norm; the dense MLP's norm is fused into fc1
    ("deepseek-v3", "moe", 2)])  # MLA's input norm and the MoE pre-MLP norm
def test_layernorm_recompute_reruns_the_separate_norms_memory_bound(name, kind, norms):
    """Megatron-Core's layernorm module re-runs the norms that are separate modules (gpt_layer_specs.py,
    transformer_layer.py), each a read and a write of T x h / t under SP at HBM bandwidth, no matmul."""
    model = load_model(name)
    seconds, flops = _rerun(model, kind, "layernorm", DEGREES._replace(ep=8 if kind == "moe" else 1))
    assert seconds == pytest.approx(norms * 2 * 8192 * model.hidden / 8 * 2 / 3.35e12) and flops == 0.0


def test_layernorm_with_mlp_reruns_the_mlp_norm_once():
    """On DeepSeek-V3's dense layers layernorm+mlp re-runs MLA's input norm and the MLP with its fused norm: the norm
    re-run adds one norm to mlp's re-run, not two."""
    deepseek, cluster = load_model("deepseek-v3"), ClusterSpec(H100, 64)
    norm = 2 * 8192 * deepseek.hidden / 8 * 2 / 3.35e12
    mlp = layer_time(deepseek, cluster, RUN, LayerKey("dense", "mlp", DEGREES)).recompute
    both = layer_time(deepseek, cluster, RUN, LayerKey("dense", "layernorm+mlp", DEGREES)).recompute
    assert both == pytest.approx(mlp + norm)


def test_offload_exposes_only_the_copy_that_outlasts_compute():
    llama = load_model("llama3-70b")
    cluster = ClusterSpec(H100, 64)
    moved = (layer_activation_bytes(llama, RUN, "dense", "none", DEGREES)
             - layer_activation_bytes(llama, RUN, "dense", "offload", DEGREES))
    plain = layer_time(llama, cluster, RUN, LayerKey("dense", "none", DEGREES))
    offload = layer_time(llama, cluster, RUN, LayerKey("dense", "offload", DEGREES))
    # 8 nodes: each GPU's PCIe link is shared with its NIC's GPUDirect RDMA traffic, the copies get half of it
    copy = moved / (H100.host_bandwidth / 2)
    assert offload.recompute == pytest.approx(max(0, copy - plain.forward) + max(0, copy - plain.backward))
    # a host link and host memory 10x faster hide the copies entirely (NVLink-C2C class)
    fast = ClusterSpec(replace(H100, host_bandwidth=520e9, socket_memory_bandwidth=10 * H100.socket_memory_bandwidth),
                       64)
    assert layer_time(llama, fast, RUN, LayerKey("dense", "offload", DEGREES)).recompute == 0.0
    # two layers' worth on the device while one runs its backward (its own and the prefetched next one)
    assert recompute_workspace_bytes(llama, RUN, "dense", "offload", DEGREES) == pytest.approx(2 * moved)


def test_offload_lowers_peak_memory_and_costs_time_by_the_host_link():
    llama = load_model("llama3-70b")
    cluster = ClusterSpec(H100, 64)
    base = Strategy(tp=8, pp=4, dp=2, mbs=1, mbn=64, zero=1, sp=True)
    kept, offloaded = base, base.with_(recompute=RecomputePlan.uniform("offload"))
    full = base.with_(recompute=RecomputePlan.uniform("full"))
    peaks = [estimate_memory(llama, cluster, RUN, s).peak_bytes for s in (kept, offloaded, full)]
    steps = [estimate_time(llama, cluster, RUN, s).step_seconds for s in (kept, offloaded, full)]
    assert peaks[1] < 0.6 * peaks[0]
    # 8 nodes: each GPU's PCIe link carries its NIC's traffic too, the copies get 26 GB/s, and offloading every
    # layer (252 MiB each way in 2.6 + 5.2 ms of compute) costs more than re-running the forward
    assert steps[0] < steps[2] < steps[1]
    # a host link twice as wide (its contended share 52 GB/s): cheaper than full recompute, dearer than keeping
    wide = ClusterSpec(replace(H100, host_bandwidth=2 * H100.host_bandwidth), 64)
    assert steps[0] < estimate_time(llama, wide, RUN, offloaded).step_seconds < steps[2]
    slow = ClusterSpec(replace(H100, host_bandwidth=26e9), 64)  # PCIe Gen4
    assert estimate_time(llama, slow, RUN, offloaded).step_seconds > steps[1]


def test_offloaded_activations_must_fit_the_host_memory():
    llama = load_model("llama3-70b")
    strategy = Strategy(tp=8, pp=4, dp=2, mbs=1, mbn=64, zero=1, sp=True, recompute=RecomputePlan.uniform("offload"))
    roomy = estimate_memory(llama, ClusterSpec(H100, 64), RUN, strategy)
    # stage 0 holds 4 micro-batches (1F1B, pp 4) of 20 layers, each moving 252.25 MiB: 19.7 GiB of host memory
    assert roomy.host_peak_bytes == pytest.approx(4 * 20 * 252.25 * 2**20, rel=1e-3) and roomy.fits
    tight = estimate_memory(llama, ClusterSpec(replace(H100, host_memory_bytes=16 * 2**30), 64), RUN, strategy)
    assert not tight.fits and tight.peak_bytes == roomy.peak_bytes


@pytest.mark.parametrize("trainer", ["megatron", "mindformers"])
def test_the_mlp_activation_rerun_is_the_dense_counterpart_of_moe_act(trainer):
    """MindFormers' select set (mlp_act) re-runs the dense SwiGLU, elementwise: read gate and up, write the product
    (3 x s x ffn / t x 2 bytes at HBM bandwidth), no matmul FLOPs, nothing on a MoE layer; it saves the product's
    bytes (estimate/activations.py mlp_act_output) and never more than full recompute."""
    llama = load_model("llama3-70b")
    cluster = ClusterSpec(H100, 64)
    run = replace(RUN, trainer=trainer)
    none = layer_time(llama, cluster, run, LayerKey("dense", "none", DEGREES))
    act = layer_time(llama, cluster, run, LayerKey("dense", "mlp_act", DEGREES))
    assert act.recompute == pytest.approx(3 * 8192 * llama.ffn_hidden / 8 * 2 / 3.35e12)
    assert act.flops == none.flops and act.forward == none.forward
    saved = (layer_activation_bytes(llama, run, "dense", "none", DEGREES)
             - layer_activation_bytes(llama, run, "dense", "mlp_act", DEGREES))
    assert saved == 2 * 8192 * llama.ffn_hidden / 8
    full_saved = (layer_activation_bytes(llama, run, "dense", "none", DEGREES)
                  - layer_activation_bytes(llama, run, "dense", "full", DEGREES))
    assert 0 < saved < full_saved
    mlp = layer_time(llama, cluster, run, LayerKey("dense", "mlp", DEGREES))
    assert act.recompute < mlp.recompute < layer_time(llama, cluster, run, LayerKey("dense", "full", DEGREES)).recompute
    deepseek = load_model("deepseek-v3")
    moe = DEGREES._replace(ep=8)
    assert layer_time(deepseek, cluster, run, LayerKey("moe", "mlp_act", moe)).recompute == 0.0
    assert (layer_activation_bytes(deepseek, run, "moe", "mlp_act", moe)
            == layer_activation_bytes(deepseek, run, "moe", "none", moe))


def test_a_mindformers_plan_with_the_select_set_estimates_between_none_and_full():
    llama = load_model("llama3-8b")
    cluster = ClusterSpec(H100, 8)
    run = RunSpec(global_batch=32, seq_len=8192, trainer="mindformers")
    base = Strategy(dp=1, tp=2, cp=4, mbs=1, mbn=32, zero=3, sp=True)
    peaks, steps = [], []
    for mode in ("none", "mlp_act", "full"):
        s = base.with_(recompute=RecomputePlan.uniform(mode))
        peaks.append(estimate_memory(llama, cluster, run, s).peak_bytes)
        steps.append(estimate_time(llama, cluster, run, s).step_seconds)
    assert peaks[0] > peaks[1] > peaks[2] and steps[0] < steps[1] < steps[2]


NANO, NEMOTRON_H = load_model("nemotron-3-nano"), load_model("nemotron-h-8b")  # 23 M, 6 A, 23 MoE; 24 M, 4 A, 24 MLP
HYBRID = Degrees(tp=1, cp=1, ep=8, etp=1, mbs=1, sp=False)


def _rerun(model, kind, mode, degrees=HYBRID):
    t = layer_time(model, ClusterSpec(H100, 16), RUN, LayerKey(kind, mode, degrees))
    return t.recompute, t.flops - layer_time(model, ClusterSpec(H100, 16), RUN, LayerKey(kind, "none", degrees)).flops


def test_core_attn_on_a_hybrid_model_reruns_its_attention_blocks_cores_only():
    """Nemotron-3 Nano's body: 29 layers of the dense kind (23 Mamba-2 and 6 attention blocks) and 23 MoE blocks. Its
    selective recompute re-runs 6 attention cores (one each, as a plain layer's), no Mamba-2 scan and nothing on the
    MoE blocks: 6 cores' worth per body, not 52."""
    plain = replace(NANO, layer_mixers="", mamba=None, hybrid_blocks=False)  # attention on every layer
    core_seconds, core_flops = _rerun(plain, "moe", "selective")
    seconds, flops = _rerun(NANO, "dense", "selective")
    assert 29 * seconds == pytest.approx(6 * core_seconds) and 29 * flops == pytest.approx(6 * core_flops)
    assert _rerun(NANO, "moe", "selective") == (0.0, 0.0)


def test_module_options_on_a_hybrid_model_rerun_the_moe_blocks_norm_and_moe_only():
    """layernorm re-runs the MoE blocks' pre-MLP norm (read + write T x h, bf16, at 3.35 TB/s) and nothing on the
    Mamba-2 and attention blocks, whose norms are fused into their first linear; moe the MoE block; the recipe's
    core_attn+layernorm+moe both, and the attention cores on the dense kind."""
    norm = 2 * 8192 * 2688 * 2 / 3.35e12
    assert _rerun(NANO, "moe", "layernorm")[0] == pytest.approx(norm)
    for mode in ("layernorm", "moe", "layernorm+moe", "moe_act"):
        assert _rerun(NANO, "dense", mode) == (0.0, 0.0)
    moe_seconds, moe_flops = _rerun(NANO, "moe", "moe")
    assert moe_flops > 0 and _rerun(NANO, "moe", "core_attn+layernorm+moe") == (pytest.approx(moe_seconds + norm),
                                                                                 pytest.approx(moe_flops))
    assert _rerun(NANO, "dense", "core_attn+layernorm+moe") == _rerun(NANO, "dense", "selective")


def test_mlp_on_a_dense_hybrid_model_reruns_its_mlp_blocks_only():
    """Nemotron-H 8B: 52 layers of one kind, 24 of them dense MLP blocks; mlp re-runs 24 MLPs (fc1, fc2) per body."""
    tokens, degrees = 8192, HYBRID._replace(ep=1)
    flops = _rerun(NEMOTRON_H, "dense", "mlp", degrees)[1]
    assert 52 * flops == pytest.approx(24 * total_flops(mlp_gemms(NEMOTRON_H, NEMOTRON_H.ffn_hidden, tokens, 1)))


# torchtitan's op-level SAC (estimate/rerun.py _op_level_sac; docs/formulas.md §5.7). Llama-3-8B, one micro-batch of
# 8,192 tokens, no TP: T = 8192, h = 4096, query width a d = 4096, F = 14336.
TITAN = RunSpec(global_batch=8, seq_len=8192, trainer="torchtitan")
ONE = Degrees(tp=1, cp=1, ep=1, etp=1, mbs=1, sp=False)
WO_W3_FLOPS = 2 * 8192 * 4096 * 4096 + 2 * 8192 * 4096 * 14336  # wo (a d -> h) and w3 (h -> F), forward


def _selective_less_none(model, cluster, run, degrees=ONE):
    none = layer_time(model, cluster, run, LayerKey("dense", "none", degrees))
    selective = layer_time(model, cluster, run, LayerKey("dense", "selective", degrees))
    assert selective.forward == none.forward and selective.backward == none.backward
    return selective.flops - none.flops, selective.recompute


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("compiled", [False, True])
def test_torchtitan_selective_reruns_every_second_mm_and_not_the_attention_core(precision, compiled):
    """0.3.0's block runs wqkv, wo, w1, w3, w2; the policy saves the 1st, 3rd and 5th mm and re-runs wo and w3, and
    torchao's Float8Linear is an aten.mm to it, so FP8 re-runs the same two. The flash kernel's output is saved: none
    of the attention core's 2 x 2 x 8192 x 8192 / 2 x 4096 FLOPs re-run (Megatron's selective re-runs them)."""
    llama = load_model("llama3-8b")
    run = replace(TITAN, precision=precision, torch_compile=compiled, fp8_recipe="tensorwise")
    flops, recompute = _selective_less_none(llama, ClusterSpec(H100, 8), run)
    assert flops == pytest.approx(WO_W3_FLOPS)


def test_torchtitan_selective_prices_the_gemms_the_elementwise_forward_and_no_core():
    """BF16 eager: wo and w3 forward at the GEMM model plus the block's element-wise forward, op by op (fusion.py:
    10 a h of norms and residuals, RoPE and the Q, K, V copies 2 a (q + 2 k) + (2 a + 16)(q + k), SwiGLU 5 a F per
    token, a = 2 bytes), at HBM bandwidth."""
    llama = load_model("llama3-8b")
    q, k, h, f = 4096, 1024, 4096, 14336
    per_token = 10 * 2 * h + 2 * 2 * (q + 2 * k) + (2 * 2 + 16) * (q + k) + 5 * 2 * f
    gemms = weight_gemm_seconds(llama, "dense", (Gemm(8192, q, h), Gemm(8192, h, f)), 8192, H100, TITAN)
    _, recompute = _selective_less_none(llama, ClusterSpec(H100, 8), TITAN)
    assert recompute == pytest.approx(gemms + 8192 * per_token / 3.35e12)


def test_torchtitan_fp8_compiled_recasts_only_the_rerun_mms_and_eager_every_linear():
    """torchao tensorwise, forward cast bytes per element: compiled amax (a) + fused cast (a + 1) = 5; eager abs and
    max 3 a + the four cast ops a + 25 = 33 (fp8.py torchao_step_bytes), on input (m k) and weight (n k) elements.
    Compiled re-casts wo's and w3's operands; eager re-runs the whole forward, every linear's."""
    llama = load_model("llama3-8b")
    cluster = ClusterSpec(H100, 8)
    fp8 = replace(TITAN, precision="fp8", fp8_recipe="tensorwise")
    rerun_elements = 8192 * 4096 + 4096 * 4096 + 8192 * 4096 + 4096 * 14336  # wo, w3: m k + n k
    # every linear: the inputs of wqkv, wo and w1 with w3 (one input, as the forward prices it) and w2; the weights
    all_elements = 3 * 8192 * 4096 + 8192 * 14336 + 4096 * (6144 + 4096 + 2 * 14336) + 14336 * 4096
    for compiled, per_element, elements in ((True, 5, rerun_elements), (False, 33, all_elements)):
        run = replace(fp8, torch_compile=compiled)
        bf16 = replace(run, precision="bf16")
        _, with_casts = _selective_less_none(llama, cluster, run)
        _, without = _selective_less_none(llama, cluster, bf16)
        gemm_gain = (weight_gemm_seconds(llama, "dense", (Gemm(8192, 4096, 4096), Gemm(8192, 4096, 14336)), 8192,
                                         H100, bf16)
                     - weight_gemm_seconds(llama, "dense", (Gemm(8192, 4096, 4096), Gemm(8192, 4096, 14336)), 8192,
                                           H100, run))
        assert with_casts - without + gemm_gain == pytest.approx(per_element * elements / 3.35e12)


def test_megatron_selective_still_reruns_the_attention_core():
    llama = load_model("llama3-8b")
    flops, _ = _selective_less_none(llama, ClusterSpec(H100, 8), RUN)  # Megatron, seq 8192, flash: causal half
    assert flops == pytest.approx(2 * 2 * 8192 * 8192 / 2 * 4096)


def test_torchtitan_selective_under_tp_reruns_the_sp_all_gathers_and_stays_below_full():
    llama = load_model("llama3-70b")
    cluster = ClusterSpec(H100, 64)
    none, selective, full = (layer_time(llama, cluster, TITAN, LayerKey("dense", mode, DEGREES))
                             for mode in ("none", "selective", "full"))
    # tp 8, SP: wo's and w3's shards re-run, and the two all-gathers (half the forward's collective pairs)
    assert selective.flops - none.flops == pytest.approx(2 * 8192 * 8192 / 8 * 8192 + 2 * 8192 * 8192 * 28672 / 8)
    # seconds: those GEMMs, the block's element-wise forward on the rank, and one all-reduce's worth of the forward's
    # two collective pairs (an all-gather of T x h each)
    gemms = (Gemm(8192, 8192 / 8, 8192), Gemm(8192, 8192, 28672 / 8))
    elementwise = layer_elementwise_bytes(llama, TITAN, "dense", 8192, 8192, 8, True) / 3.35e12
    assert selective.recompute == pytest.approx(weight_gemm_seconds(llama, "dense", gemms, 8192, H100, TITAN)
                                                 + elementwise + tp_all_reduce_seconds(cluster, 8192 * 8192 * 2, 8))
    no_sp = DEGREES._replace(sp=False)
    gathers = selective.recompute - layer_time(llama, cluster, TITAN, LayerKey("dense", "selective", no_sp)).recompute
    # half the forward's collectives re-run either way (SP: the two all-gathers; without: wo's all-reduce), and
    # without SP the norms and residual adds re-run on every token, not the rank's sequence shard
    assert 0 < selective.tp_comm and gathers < 0
    assert 0 < selective.recompute < full.recompute


WK_FLOPS = 2 * 8192 * 4096 * 1024  # wk (h -> g d), forward


@pytest.mark.parametrize("compiled", [False, True])
def test_separate_projections_rerun_wk_too(compiled):
    """torchtitan before 0.3.0 (RunSpec.qkv_projections separate, e7c0cae) runs wq, wk, wv, wo, w1, w3, w2: the policy
    re-runs the 2nd, 4th and 6th, wk, wo and w3 (measured: 17 backward GEMMs, docs/saved_tensors.yaml)."""
    llama = load_model("llama3-8b")
    run = replace(TITAN, torch_compile=compiled, qkv_projections="separate")
    flops, _ = _selective_less_none(llama, ClusterSpec(H100, 8), run)
    assert flops == pytest.approx(WO_W3_FLOPS + WK_FLOPS)


@pytest.mark.parametrize("recipe", ["tensorwise", "delayed", "mxfp8"])
def test_an_fp8_module_rerun_casts_its_gemms_inputs_again_and_not_their_weights(recipe):
    """Under FP8 Megatron-Core re-runs the `mlp` module through Transformer Engine's checkpoint, which restores the
    FP8 state: fc1's and fc2's inputs are cast again (the recipe's bytes per element, fp8.py CAST_BYTES, times m x k),
    their weights not (cast at the step's first micro-batch, reused). Llama-3-70B at tp 8 without SP (no amax
    all-reduce), 8,192 tokens: fc1 reads 8,192 x 8,192 inputs, fc2 8,192 x 28,672 / 8; the 16-bit run has no cast."""
    from ndcp.estimate.fp8 import cast_bytes_per_element, layer_cast_bytes
    llama, cluster, tokens = load_model("llama3-70b"), ClusterSpec(H100, 64), 8192
    fp8 = replace(RUN, precision="fp8", fp8_recipe=recipe)
    gemms = mlp_gemms(llama, llama.ffn_hidden, tokens, 8)
    inputs = tokens * llama.hidden + tokens * llama.ffn_hidden / 8
    assert layer_cast_bytes(fp8, H100, gemms)[0] == pytest.approx(cast_bytes_per_element(fp8, H100) * inputs)
    assert layer_cast_bytes(RUN, H100, gemms)[0] == 0.0

    def mlp_rerun(run):
        key = LayerKey("dense", "mlp", DEGREES._replace(sp=False))
        return layer_time(llama, cluster, run, key).recompute

    gemm_time = weight_gemm_seconds(llama, "dense", gemms, tokens, H100, fp8)
    casts = layer_cast_bytes(fp8, H100, gemms)[0] / H100.hbm_bandwidth
    assert casts > 0
    assert mlp_rerun(fp8) - gemm_time == pytest.approx(
        mlp_rerun(RUN) - weight_gemm_seconds(llama, "dense", gemms, tokens, H100, RUN) + casts)
