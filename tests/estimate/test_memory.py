"""The memory estimator: Korthikanti's per-layer activations exactly, the ZeRO and Megatron model-state tables,
and monotonicity of every part in the strategy's degrees."""
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from ndcp.estimate.activations import layer_activation_bytes
from ndcp.estimate.keys import Degrees
from ndcp.estimate.layout import default_partition
from ndcp.estimate.memory import estimate_memory, state_bytes_per_param
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, ModelSpec, RecomputePlan, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model

# GPT-3 175B as in Korthikanti et al. 2022 Table 3 (h 12288, a 96, s 2048), dropout on, no flash attention.
GPT3 = ModelSpec(name="gpt3", layers=96, hidden=12288, heads=96, ffn_hidden=49152, vocab=51200, activation="gelu",
                 max_positions=2048, position_embedding="learned", tied_embeddings=True, norm="layernorm",
                 linear_bias=True, attention_dropout=0.1, hidden_dropout=0.1)
A100 = ClusterSpec(device_preset("a100-80g"), 1024)
KORTHIKANTI_RUN = RunSpec(global_batch=1536, seq_len=2048, precision="fp16", flash_attention=False)


def per_layer(recompute: str, sp: bool, tp: int = 8, mbs: int = 1) -> int:
    strategy = Strategy(dp=1024 // (tp * 16), tp=tp, pp=16, mbs=mbs, mbn=1536 // (1024 // (tp * 16) * mbs), sp=sp,
                        recompute=RecomputePlan.uniform(recompute))
    return estimate_memory(GPT3, A100, KORTHIKANTI_RUN, strategy).activation_bytes_per_layer[recompute]


@pytest.mark.parametrize("mbs", [1, 2])
def test_korthikanti_per_layer_activations_exactly(mbs):
    # docs/formulas.md §5 (Korthikanti 2022, Table 2 / §4): bytes per layer for s, b, h, a, t.
    s, b, h, a, t = 2048, mbs, 12288, 96, 8
    assert per_layer("none", sp=False, mbs=mbs) == s * b * h * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t))
    assert per_layer("none", sp=True, mbs=mbs) == s * b * h * (34 + Fraction(5 * a * s, h)) / t
    assert per_layer("selective", sp=False, mbs=mbs) == s * b * h * (10 + Fraction(24, t))
    assert per_layer("selective", sp=True, mbs=mbs) == 34 * s * b * h / t
    assert per_layer("full", sp=True, mbs=mbs) == 2 * s * b * h / t
    assert per_layer("full", sp=False, mbs=mbs) == 2 * s * b * h


def test_korthikanti_without_parallelism():
    s, b, h, a = 2048, 1, 12288, 96
    assert per_layer("none", sp=False, tp=1) == s * b * h * (34 + Fraction(5 * a * s, h))


def test_worked_values_from_formulas_md():
    # docs/formulas.md §5 worked table (b=1, s=2048, t=8), 175B: TP only 0.579 GB, TP+SP 0.359, +selective 0.107.
    assert per_layer("none", sp=False) / 1e9 == pytest.approx(0.579, abs=0.001)
    assert per_layer("none", sp=True) / 1e9 == pytest.approx(0.359, abs=0.001)
    assert per_layer("selective", sp=True) / 1e9 == pytest.approx(0.107, abs=0.001)


@pytest.mark.parametrize("d", [1, 2, 8, 64])
def test_megatron_distributed_optimizer_table(d):
    # Megatron-LM docs dist_optimizer.md: bf16 params / fp32 main grads: 18 -> 6 + 12/d; fp32/fp32: 16 -> 8 + 8/d.
    bf16 = RunSpec(global_batch=8, seq_len=128, precision="bf16", grad_dtype="fp32")
    fp32 = RunSpec(global_batch=8, seq_len=128, precision="fp32", grad_dtype="fp32")
    assert sum(state_bytes_per_param(bf16, 0, d).values()) == 18
    assert sum(state_bytes_per_param(bf16, 1, d).values()) == pytest.approx(6 + 12 / d)
    assert sum(state_bytes_per_param(fp32, 0, d).values()) == 16
    assert sum(state_bytes_per_param(fp32, 1, d).values()) == pytest.approx(8 + 8 / d)


@pytest.mark.parametrize("d", [1, 4, 64])
def test_zero_table(d):
    # ZeRO (Rajbhandari 2020) Table 1 with K = 12: 16, 4 + 12/d, 2 + 14/d, 16/d bytes per parameter.
    fp16 = RunSpec(global_batch=8, seq_len=128, precision="fp16", grad_dtype="fp16")
    expected = [16, 4 + 12 / d, 2 + 14 / d, 16 / d]
    for stage, want in enumerate(expected):
        assert sum(state_bytes_per_param(fp16, stage, d).values()) == pytest.approx(want)


def test_uneven_partition_gives_end_stages_fewer_layers():
    counts = default_partition(61, 16)  # DeepSeek-V3: 61 layers on 16 stages
    assert sum(counts) == 61 and counts[0] == min(counts) and counts[-1] == min(counts)
    assert default_partition(96, 16) == (6,) * 16


def test_peak_stage_is_first_with_uniform_layers_and_capacity_respected():
    strategy = Strategy(dp=8, tp=8, pp=16, mbs=1, mbn=192, sp=True, recompute=RecomputePlan.uniform("selective"))
    estimate = estimate_memory(GPT3, A100, KORTHIKANTI_RUN, strategy)
    assert estimate.peak_stage == 0 and estimate.fits
    capped = RunSpec(global_batch=1536, seq_len=2048, flash_attention=False, memory_cap_bytes=10 * 2**30)
    assert not estimate_memory(GPT3, A100, capped, strategy).fits
    assert all(isinstance(v, int) for s in estimate.stages for v in s.parts.values())


LLAMA = load_model("llama3-8b")
H100 = ClusterSpec(device_preset("h100"), 64)
RUN = RunSpec(global_batch=64, seq_len=4096)


def _peak(**kw) -> dict:
    strategy = Strategy(**kw)
    return {s.stage: s for s in estimate_memory(LLAMA, H100, RUN, strategy).stages}


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]), zero=st.integers(0, 3))
def test_more_tp_or_pp_never_raises_per_device_parameter_memory(tp, pp, zero):
    def worst(tp, pp):
        dp = 64 // (tp * pp)
        return max(s.parts["parameters"] for s in _peak(dp=dp, tp=tp, pp=pp, mbs=1, mbn=64 // dp, zero=zero).values())

    # ZeRO-3 shards parameters over dp, which shrinks as TP/PP grow; the TP/PP split alone must never add memory.
    if zero < 3:
        assert worst(tp * 2, pp) <= worst(tp, pp)
        assert worst(tp, pp * 2) <= worst(tp, pp)


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), mbs=st.sampled_from([1, 2, 4]), sp=st.booleans(), cp=st.sampled_from([1, 2]))
def test_more_recompute_never_raises_and_larger_mbs_never_lowers_activations(tp, mbs, sp, cp):
    sp = sp and tp > 1
    dp = 64 // (tp * cp)
    if 64 % (dp * mbs):
        return
    acts = {}
    for mode in ("none", "selective", "full"):
        acts[mode] = _peak(dp=dp, tp=tp, cp=cp, mbs=mbs, mbn=64 // (dp * mbs), sp=sp,
                           recompute=RecomputePlan.uniform(mode))[0].parts["activations"]
    assert acts["full"] <= acts["selective"] <= acts["none"]
    if 64 % (dp * mbs * 2) == 0:
        bigger = _peak(dp=dp, tp=tp, cp=cp, mbs=mbs * 2, mbn=64 // (dp * mbs * 2), sp=sp)[0].parts["activations"]
        assert bigger >= acts["none"]


# -- trainer-specific inventories ----------------------------------------------------------------------------------
def _layer(run: RunSpec, model: ModelSpec, mode: str, tp: int = 1, cp: int = 1, mbs: int = 1, sp: bool = False):
    return layer_activation_bytes(model, run, "dense", mode, Degrees(tp, cp, 1, 1, mbs, sp))


def test_megatron_te_llama_layer_inventory():
    # Megatron-Core + Transformer Engine, Llama-3.1-405B layer, TP8 + SP, selective (flash attention): norm inputs
    # and norm outputs 2+2 each, Q 2, K and V 2g/a each, attention output 2, fc1 output 4f/h, SwiGLU output 2f/h:
    # s*b*h*(12 + 4g/a + 6f/h)/t bytes.
    model = load_model("llama3.1-405b")
    run = RunSpec(global_batch=8, seq_len=8192)
    s, h, a, g, f, t = 8192, model.hidden, model.heads, model.num_kv_heads, model.ffn_hidden, 8
    assert _layer(run, model, "selective", tp=t, sp=True) == pytest.approx(
        s * h * (12 + Fraction(4 * g, a) + Fraction(6 * f, h)) / t)


def test_megatron_moe_layer_keeps_no_expert_output():
    # DeepSeek-V3 MoE layer, tp 1, mbs 1, seq 4096, FP8 linear inputs, layernorm + mla_up_proj recomputed. Kept:
    # residuals 2 x 2sh; q latent 2s(1536 + 1536) (down-projection and its norm); kv latent 2s(512 + 512 + 64)
    # (down-projection, its norm, rope key); attention output 2s*128*128 for the fused attention's backward and its
    # FP8 copy s*128*128 for the output projection's; softmax statistics 4s*128; router
    # logits 4s*256; 8 routed copies: input 8sh (FP8), fc1 output 8s*2*2*2048, SwiGLU output 8s*2048 (FP8); shared
    # expert fc1 2s*2*2048 and output s*2048 (FP8). The probabilities are applied inside the experts' SwiGLU, so
    # the combine keeps nothing (Megatron-LM moe/experts.py weighted_bias_swiglu_impl; docs/formulas.md §5).
    model = load_model("deepseek-v3")
    run = RunSpec(global_batch=8, seq_len=4096, precision="fp8")
    s, h = 4096, model.hidden
    expected = (2 * 2 * s * h + 2 * s * (1536 + 1536) + 2 * s * (512 + 512 + 64) + 3 * s * 128 * 128 + 4 * s * 128
                + 4 * s * 256 + 8 * s * h + 8 * s * 2 * 2 * 2048 + 8 * s * 2048 + 2 * s * 2 * 2048 + s * 2048)
    kept = layer_activation_bytes(model, run, "moe", "layernorm+mla_up_proj", Degrees(1, 1, 64, 1, 1, False))
    assert kept == pytest.approx(expected, rel=1e-9)


def test_torchtitan_op_sac_keeps_every_other_matmul():
    # torchtitan 0.3.0 op-level SAC (distributed/activation_checkpoint.py SelectiveAC): block input, outputs of mm 1,
    # 3, 5 = the fused wqkv, w1, w2 (wo, w3 recomputed), the attention output and fp32 logsumexp. Llama-3.1-8B,
    # local batch 2 (docs/saved_tensors.yaml measures the same at batch 1).
    model = LLAMA
    run = RunSpec(global_batch=16, seq_len=8192, trainer="torchtitan")
    tokens, h, a, d = 2 * 8192, model.hidden, model.heads, model.dim_per_head
    g, f = model.num_kv_heads, model.ffn_hidden
    kept = 2 * h + 2 * (a + 2 * g) * d + 2 * a * d + 4 * a + 2 * f + 2 * h
    assert _layer(run, model, "selective", mbs=2) == tokens * kept
    # Eager autograd without AC: two fused RMSNorms (bf16 input, fp32 rstd, the output the linear keeps); RoPE'd Q,
    # K and V not expanded for GQA, the attention output (which wo reads), logsumexp; w1, SiLU, w3 and product
    # outputs 2f each.
    eager = 2 * (2 * h + 4 + 2 * h) + 2 * a * d + 4 * g * d + 2 * a * d + 4 * a + 8 * f
    assert _layer(run, model, "none", mbs=2) == tokens * eager
    assert _layer(run, model, "full", mbs=2) == tokens * 2 * h
    # Megatron's selective for the same layer keeps more (12 + 4g/a + 6f/h units) than torchtitan's op policy.
    assert _layer(RunSpec(global_batch=16, seq_len=8192), model, "selective", mbs=2) > tokens * kept


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(), cp=st.sampled_from([1, 2]), mbs=st.sampled_from([1, 2]))
def test_torchtitan_recompute_modes_are_ordered(tp, sp, cp, mbs):
    run = RunSpec(global_batch=64, seq_len=4096, trainer="torchtitan")
    sp = sp and tp > 1
    none, selective, full = (_layer(run, LLAMA, m, tp, cp, mbs, sp) for m in ("none", "selective", "full"))
    assert full <= selective <= none


@pytest.mark.parametrize("d", [1, 8, 128])
def test_fsdp2_states_are_16_bytes_per_parameter(d):
    # torchtitan FSDP2: fp32 sharded parameters are the optimizer's own (no master copy), fp32 gradients, two fp32
    # Adam moments: 16/d with full sharding; Megatron's ZeRO-3 layout keeps bf16 params + a master copy: 18/d.
    titan = RunSpec(global_batch=8, seq_len=128, trainer="torchtitan")
    assert sum(state_bytes_per_param(titan, 3, d).values()) == pytest.approx(16 / d)
    assert sum(state_bytes_per_param(RunSpec(global_batch=8, seq_len=128), 3, d).values()) == pytest.approx(18 / d)


@pytest.mark.parametrize("gpus, measured_gib", [(8, 82.4), (128, 67.0)])
def test_torchtitan_fsdp_llama_8b_peak_within_ten_percent(gpus, measured_gib):
    # pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md Tables 1 and 3: Llama 3.1 8B, FSDP over 8 or
    # 128 H100 96 GB, local batch 2, seq 8192, selective (op) AC, eager: 82.4 and 67.0 GiB (torchtitan logs
    # max_reserved). The estimate is the device total (CUDA context and NCCL buffers included, which max_reserved
    # does not see, docs/formulas.md §5.1), so it sits a little high.
    cluster = ClusterSpec(device_preset("h100"), gpus).with_overrides(memory_bytes=96 * 2**30)
    run = RunSpec(global_batch=2 * gpus, seq_len=8192, trainer="torchtitan", confidence=0.0)  # the point estimate
    strategy = Strategy(dp=gpus, tp=1, pp=1, mbs=2, mbn=1, zero=3, recompute=RecomputePlan.uniform("selective"))
    estimate = estimate_memory(LLAMA, cluster, run, strategy)
    assert estimate.fits
    assert estimate.peak_bytes / 2**30 == pytest.approx(measured_gib, rel=0.10)


DEFERRAL_CLUSTER = ClusterSpec(device_preset("h100"), 8)
DEFERRAL_STRATEGY = Strategy(dp=2, tp=2, pp=2, mbs=1, mbn=8, sp=True)  # global batch 16 on 8 GPUs


def deferred(limit, strategy=DEFERRAL_STRATEGY) -> list[int]:
    run = RunSpec(global_batch=16, seq_len=4096, wgrad_deferral_limit=limit)
    stages = estimate_memory(load_model("llama3-8b"), DEFERRAL_CLUSTER, run, strategy).stages
    return [s.parts.get("deferred_wgrad", 0) for s in stages]


def test_the_deferred_output_layer_weight_gradient_keeps_its_input_and_output_gradient_on_the_last_stage():
    # Megatron --defer-embedding-wgrad-compute --wgrad-deferral-limit N: the first min(N, m) micro-batches (0: all m)
    # keep the output layer's input [s/t, b, h] (SP) and its output gradient [s, b, V/t], BF16. Llama-3-8B: h 4096,
    # V 128,256; s 4096, b 1, t 2, m 8.
    per_microbatch = 2 * 4096 * (4096 // 2 + 128256 // 2)
    assert deferred(3) == [0, 3 * per_microbatch]
    assert deferred(0) == deferred(22) == [0, 8 * per_microbatch]
    assert deferred(None) == [0, 0]
    # Megatron refuses deferral without pipeline parallelism: nothing to price
    assert deferred(3, Strategy(dp=4, tp=2, mbs=1, mbn=4, sp=True)) == [0]


def test_deferring_the_output_layer_weight_gradient_leaves_the_step_time():
    # the weight gradients run at the pipeline flush instead: the same GEMMs, moved (docs/formulas.md §5.5)
    model = load_model("llama3-8b")
    runs = [RunSpec(global_batch=16, seq_len=4096, wgrad_deferral_limit=limit) for limit in (None, 0)]
    times = [estimate_time(model, DEFERRAL_CLUSTER, run, DEFERRAL_STRATEGY).step_seconds for run in runs]
    assert times[0] == times[1]


def _backward_parts(strategy: Strategy) -> list[tuple[int, int]]:
    """(backward_workspace, logits) of each stage, torchtitan Llama-3-8B at 4,096 tokens."""
    run = RunSpec(global_batch=16, seq_len=4096, trainer="torchtitan")
    stages = estimate_memory(load_model("llama3-8b"), DEFERRAL_CLUSTER, run, strategy).stages
    return [(s.parts.get("backward_workspace", 0), s.parts["logits"]) for s in stages]


def test_a_layers_backward_temporaries_are_paid_once_a_stage_and_not_beside_the_loss_peak():
    # one layer runs its backward at a time: the stage pays B·T·(h + 2F) once (activations.backward_workspace_bytes),
    # except beside the loss's logits peak where the two cannot coexist (no pipeline, or the last stage of plain 1F1B,
    # which runs a micro-batch's loss backward before its layers'): there max(logits, temporaries); interleaved, the
    # last stage runs other chunks' backwards while a micro-batch's logits are held: both
    temporaries = 2 * 4096 * (4096 + 2 * 14336)
    [(no_pipeline, logits)] = _backward_parts(Strategy(dp=8, mbs=1, mbn=2))
    assert no_pipeline == 0 and logits == 3 * 4 * 4096 * 128_256 > temporaries
    one_f_one_b = _backward_parts(Strategy(dp=4, pp=2, mbs=1, mbn=4))
    assert one_f_one_b[0] == (temporaries, 0)
    assert one_f_one_b[1][0] == max(0, temporaries - one_f_one_b[1][1]) == 0  # 3·4·T·V of fp32 logits: 6.3 GB
    interleaved = _backward_parts(Strategy(dp=4, pp=2, vpp=2, mbs=1, mbn=4, schedule="interleaved"))
    assert [b for b, _ in interleaved] == [temporaries, temporaries]


# -- BF16 first and last layers in an FP8 run (Megatron --first-last-layers-bf16; docs/formulas.md §3.1) ----------
LLAMA_8B = ModelSpec("llama-8b", 32, 4096, 32, 14336, 128256, kv_heads=8, max_positions=8192)
FP8_CS = RunSpec(global_batch=64, seq_len=8192, precision="fp8", fp8_recipe="tensorwise")
H100_8 = ClusterSpec(device_preset("h100"), 8)


@pytest.mark.parametrize("field, stage", [("first_layers_bf16", 0), ("last_layers_bf16", 1)])
def test_a_bf16_layer_saves_bf16_linear_inputs_and_keeps_no_fp8_weight_copy(field, stage):
    """Hand count, Llama-3 8B at tp 1, two 1F1B stages (2 micro-batches in flight on the first, 1 on the last),
    ZeRO-0 (FP8 weight and transpose next to the BF16 weight: 2 bytes a linear parameter). A layer kept in BF16
    saves, per token, its attention input, output-projection input, MLP input (h each) and fc2's input (ffn) in BF16
    instead of FP8 (+1 byte each), and its attention core's output once instead of beside an FP8 copy (-2 bytes
    x h): h + ffn bytes more a token; and it drops its FP8 weight copies, 2 bytes per linear parameter."""
    s = Strategy(dp=4, tp=1, pp=2, mbs=1, mbn=16, zero=0)
    before = estimate_memory(LLAMA_8B, H100_8, FP8_CS, s).stages[stage].parts
    after = estimate_memory(LLAMA_8B, H100_8, replace(FP8_CS, **{field: 1}), s).stages[stage].parts
    in_flight = 2 - stage
    h, ffn, layer = 4096, 14336, LLAMA_8B.layer(0)
    assert after["activations"] - before["activations"] == pytest.approx(in_flight * 8192 * (h + ffn), abs=1)
    assert after["parameters"] - before["parameters"] == pytest.approx(-2 * (layer.attention + layer.mlp), abs=1)
    other = 1 - stage
    assert (estimate_memory(LLAMA_8B, H100_8, replace(FP8_CS, **{field: 1}), s).stages[other].parts
            == estimate_memory(LLAMA_8B, H100_8, FP8_CS, s).stages[other].parts)


def test_fp8_parameters_under_the_distributed_optimizer_weigh_what_bf16_ones_do():
    """Under --fp8-param-gather (ZeRO >= 1) an FP8 layer keeps its FP8 weight and transpose (2 bytes) in place of
    the BF16 weight: a BF16 layer's parameters weigh the same, only its activations grow."""
    s = Strategy(dp=4, tp=1, pp=2, mbs=1, mbn=16, zero=1)
    before = estimate_memory(LLAMA_8B, H100_8, FP8_CS, s).stages[0].parts
    after = estimate_memory(LLAMA_8B, H100_8, replace(FP8_CS, first_layers_bf16=1), s).stages[0].parts
    assert after["parameters"] == before["parameters"] and after["activations"] > before["activations"]


def test_a_fully_recomputed_bf16_layers_larger_re_run_is_covered_by_its_bf16_activations():
    """A recomputed BF16 layer keeps only its input, as in FP8, but its re-run rematerialises BF16 linear inputs (h +
    ffn bytes a token more than FP8's, the recompute workspace's difference): the BF16 layer's activations, priced
    without recompute (memory._bf16_layer_bytes), add that per micro-batch in flight, so the stage's peak stays an
    upper bound, exact with one in flight (the last of two 1F1B stages); the workspace part itself does not move."""
    from ndcp.estimate.activations import recompute_workspace_bytes
    from ndcp.estimate.fp8 import bf16_run
    s = Strategy(dp=4, tp=1, pp=2, mbs=1, mbn=16, zero=0, recompute=RecomputePlan.uniform("full"))
    before = estimate_memory(LLAMA_8B, H100_8, FP8_CS, s).stages[1].parts
    after = estimate_memory(LLAMA_8B, H100_8, replace(FP8_CS, last_layers_bf16=1), s).stages[1].parts
    degrees = Degrees.of_strategy(s)
    rematerialised = (recompute_workspace_bytes(LLAMA_8B, bf16_run(FP8_CS), "dense", "full", degrees)
                      - recompute_workspace_bytes(LLAMA_8B, FP8_CS, "dense", "full", degrees))
    assert rematerialised == pytest.approx(8192 * (4096 + 14336), abs=1)
    assert after["activations"] - before["activations"] == pytest.approx(rematerialised, abs=1)
    assert after["recompute_workspace"] == before["recompute_workspace"]
