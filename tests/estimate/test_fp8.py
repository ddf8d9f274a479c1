"""FP8 training (docs/formulas.md §3.1): the FP8 GEMM rate, what stays BF16, the memory it changes, the refusals."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from ndcp.estimate.activations import layer_activation_bytes
from ndcp.estimate import communication as comm
from ndcp.estimate.compute import Gemm, layer_gemms, memory_seconds
from ndcp.estimate.data_parallel import Group, _collectives
from ndcp.estimate.fp8 import (amax_reduction_seconds, bf16_layer_kinds, bf16_run, cast_bytes_per_element, check_fp8,
                               layer_cast_bytes,
                               torchao_step_bytes,
                               uncached_weight_copy_bytes_per_parameter, weight_copy_bytes_per_parameter)
from ndcp.estimate.gemm import gemm_pass_seconds, gemm_seconds
from ndcp.estimate.keys import Degrees, LayerKey, StageKey
from ndcp.estimate.memory import estimate_memory, model_state_bytes
from ndcp.estimate.parameters import stage_parameters
from ndcp.estimate.layer_time import layer_time
from ndcp.estimate.moe import routing_bytes
from ndcp.estimate.time import stage_extra_time
from ndcp.specs import ClusterSpec, RunSpec, SpecError, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.strategy import Strategy
from ndcp.validation import validate_file

from ..cli_helpers import assert_one_line_error, run

H100, B200, A100 = device_preset("h100"), device_preset("b200"), device_preset("a100-80g")
LLAMA = load_model("llama3-8b")
BF16 = RunSpec(16, 8192)
FP8 = RunSpec(16, 8192, precision="fp8")
ROOT = Path(__file__).resolve().parents[2]


def test_fp8_peaks_are_the_datasheet_dense_figures():
    assert H100.fp8_peak_flops == 1978.9e12 and device_preset("h200").fp8_peak_flops == 1978.9e12
    assert device_preset("h800").fp8_peak_flops == 1978.9e12
    assert B200.fp8_peak_flops == 4500e12 and B200.mxfp8 and not H100.mxfp8
    assert A100.fp8_peak_flops == 0


def test_a_large_fp8_gemm_runs_at_the_fp8_peak_times_the_ceiling():
    m = n = k = 16384
    fp8 = gemm_pass_seconds(m, n, k, 1, H100, 2, fp8=True)
    bf16 = gemm_pass_seconds(m, n, k, 1, H100, 2)
    ceiling = H100.fp8_ceiling
    k0 = 2 * H100.fp8_peak_flops * ceiling / (2 * H100.hbm_bandwidth)  # BF16 write-back of FP8 tiles
    efficiency = 2 * m * n * k / (fp8 * H100.fp8_peak_flops)
    # whole waves aside (8192 tiles over 132 SMs), the tile's K loop plus its write-back at the FP8 ceiling
    waves = -(-(m // 128) * (n // 256) // 132)
    assert fp8 == pytest.approx(waves * 132 * 2 * 128 * 256 * (k + k0) / (H100.fp8_peak_flops * ceiling))
    assert efficiency <= ceiling
    assert 1.9 < bf16 / fp8 < 2.0  # twice the peak, less the doubled write-back share
    # a skinny GEMM is memory-bound: FP8 operands (1 byte), BF16 result
    assert gemm_pass_seconds(8, 8192, 8192, 1, H100, 2, fp8=True) == pytest.approx(
        ((8 * 8192 + 8192 * 8192) * 1 + 8 * 8192 * 2) / H100.hbm_bandwidth)


def test_the_fp8_gemm_runs_at_the_fp8_ceiling_and_a_device_without_one_at_the_bf16_ceiling():
    """fp8_compute_efficiency (docs/formulas.md §3.1) sets the FP8 GEMMs' ceiling and their write-back k0; BF16
    GEMMs keep compute_efficiency. 0 (a device whose FP8 ceiling is not fitted) means the BF16 one, as before."""
    m, n, k = 8192, 8192, 16384
    assumed, fitted = replace(H100, fp8_compute_efficiency=0.0), replace(H100, fp8_compute_efficiency=0.5)
    assert assumed.fp8_ceiling == H100.compute_efficiency and not assumed.fp8_calibrated and fitted.fp8_calibrated
    waves = -(-(m // 128) * (n // 256) // 132)

    def wave_model(ceiling):
        k0 = 2 * H100.fp8_peak_flops * ceiling / (2 * H100.hbm_bandwidth)
        return waves * 132 * 2 * 128 * 256 * (k + k0) / (H100.fp8_peak_flops * ceiling)

    assert gemm_pass_seconds(m, n, k, 1, assumed, 2, fp8=True) == pytest.approx(wave_model(H100.compute_efficiency))
    assert gemm_pass_seconds(m, n, k, 1, fitted, 2, fp8=True) == pytest.approx(wave_model(0.5))
    assert gemm_pass_seconds(m, n, k, 1, fitted, 2, fp8=True) > gemm_pass_seconds(m, n, k, 1, assumed, 2, fp8=True)
    assert gemm_pass_seconds(m, n, k, 1, fitted, 2) == gemm_pass_seconds(m, n, k, 1, assumed, 2)  # BF16 unmoved
    # a whole FP8 layer slows with the FP8 ceiling alone; its BF16 twin does not
    key = LayerKey("dense", "none", Degrees(1, 1, 1, 1, 1, False))
    for precision_run, slower in ((FP8, True), (BF16, False)):
        at_half, assumed_time = (layer_time(LLAMA, ClusterSpec(d, 8), precision_run, key).forward
                                 for d in (fitted, assumed))
        assert (at_half > assumed_time) is slower and (at_half == assumed_time) is not slower


def test_linear_layers_run_fp8_plus_casts_and_the_rest_stays_bf16():
    tokens = 8192
    gemms = layer_gemms(LLAMA, "dense", tokens, 1)
    bf16, fp8 = (layer_time(LLAMA, ClusterSpec(H100, 8), r, LayerKey("dense", "none", Degrees(1, 1, 1, 1, 1, False)))
                 for r in (BF16, FP8))
    linear_bf16, linear_fp8 = gemm_seconds(gemms, H100, 2), gemm_seconds(gemms, H100, 2, fp8=True)
    per_element = cast_bytes_per_element(FP8, H100)
    assert per_element == 4.0  # delayed on Hopper: read 2, write 1, transpose 1
    # the inputs every micro-batch; the weights once a step (Transformer Engine's cached copy: step_costs)
    cast_forward = memory_seconds(per_element * sum(g.m * g.k for g in gemms), H100)
    cast_backward = memory_seconds(per_element * sum(g.m * g.n for g in gemms), H100)
    # the attention core, norms and residuals are unchanged: only the GEMMs and the casts differ
    assert fp8.forward - bf16.forward == pytest.approx(linear_fp8 - linear_bf16 + cast_forward)
    assert fp8.backward - bf16.backward == pytest.approx(2 * (linear_fp8 - linear_bf16) + cast_backward)
    assert fp8.forward < 0.8 * bf16.forward
    # the output layer (and the embedding) stay BF16
    for role in ("first", "last"):
        key = StageKey(Degrees(1, 1, 1, 1, 1, False))
        assert stage_extra_time(LLAMA, ClusterSpec(H100, 8), FP8, role, key).total == pytest.approx(
            stage_extra_time(LLAMA, ClusterSpec(H100, 8), BF16, role, key).total)


def test_the_moe_router_stays_bf16():
    model = load_model("mixtral-8x7b")
    cluster = ClusterSpec(H100, 8)
    tokens = 4096
    run_bf16, run_fp8 = RunSpec(8, 4096), RunSpec(8, 4096, precision="fp8")
    gemms = layer_gemms(model, "moe", tokens, 1, 1, 1)
    router = Gemm(tokens, model.hidden, model.moe.experts)
    assert router in gemms
    low = tuple(g for g in gemms if g != router)
    t_bf16 = layer_time(model, cluster, run_bf16, LayerKey("moe", "none", Degrees(1, 1, 1, 1, 1, False)))
    t_fp8 = layer_time(model, cluster, run_fp8, LayerKey("moe", "none", Degrees(1, 1, 1, 1, 1, False)))
    cast = memory_seconds(cast_bytes_per_element(run_fp8, H100) * sum(g.m * g.k * g.count for g in low), H100)
    # and the experts' FP8 row padding, the one routing copy FP8 adds (estimate/moe.py routing_bytes)
    padding = memory_seconds(routing_bytes(model, run_fp8, tokens, 1, 1, 1).forward
                             - routing_bytes(model, run_bf16, tokens, 1, 1, 1).forward, H100)
    assert padding > 0
    assert t_fp8.forward - t_bf16.forward == pytest.approx(
        gemm_seconds(low, H100, 2, fp8=True) - gemm_seconds(low, H100, 2) + cast + padding)


def test_recipe_cast_costs_order_and_blackwell_needs_no_transpose():
    costs = {r: cast_bytes_per_element(replace(FP8, fp8_recipe=r), H100) for r in ("delayed", "tensorwise", "blockwise")}
    assert costs["delayed"] < costs["blockwise"] < costs["tensorwise"]
    assert cast_bytes_per_element(FP8, B200) == 3.0
    assert cast_bytes_per_element(BF16, H100) == 0.0


def test_torchao_amax_and_cast_bytes_eager_op_by_op_and_fused_when_compiled():
    # eager: abs (read 2, write 2) + max (read 2); .to(float32) (2 + 4), * scale (4 + 4), clamp (4 + 4), .to(fp8) (4 + 1)
    assert torchao_step_bytes(2, compiled=False) == (6.0, 27.0)
    # fp32 input: .to(float32) is no copy; abs 4 + 4, max 4
    assert torchao_step_bytes(4, compiled=False) == (12.0, 21.0)
    # torch.compile: one reduction kernel reads the tensor once; one cast kernel reads it and writes FP8
    assert torchao_step_bytes(2, compiled=True) == (2.0, 3.0)


def _torchtitan_fp8(compiled: bool, recipe: str = "tensorwise") -> RunSpec:
    return RunSpec(16, 8192, precision="fp8", fp8_recipe=recipe, trainer="torchtitan", torch_compile=compiled)


def test_transformer_engines_cached_fp8_weights_are_cast_once_a_step():
    """Megatron passes is_first_microbatch, so Transformer Engine casts each FP8 weight (and its transpose) at the
    step's first micro-batch and reuses it: one cast per weight of an FP8 GEMM a step, at the recipe's bytes per
    element (delayed on Hopper: 4), at HBM bandwidth; none in a 16-bit run, under torchao, or where the weights are
    cast every micro-batch (disable_parameter_transpose_cache: in the layer's forward instead)."""
    from ndcp.estimate.fp8 import step_weight_cast_seconds
    from ndcp.estimate.step_costs import step_cost_seconds
    cast = 1.0e9
    assert step_weight_cast_seconds(FP8, H100, cast) == pytest.approx(4.0 * cast / H100.hbm_bandwidth)
    assert step_weight_cast_seconds(BF16, H100, cast) == 0.0
    assert step_weight_cast_seconds(_torchtitan_fp8(True), H100, cast) == 0.0
    assert step_weight_cast_seconds(_torchtitan_fp8(True, "delayed"), H100, cast) == 0.0
    assert step_weight_cast_seconds(replace(FP8, disable_parameter_transpose_cache=True), H100, cast) == 0.0
    cluster, local = ClusterSpec(H100, 8), 1.2e9
    assert step_cost_seconds(FP8, cluster, local, cast, 8) - step_cost_seconds(BF16, cluster, local, cast, 8) == (
        pytest.approx(step_weight_cast_seconds(FP8, H100, cast)
                      + memory_seconds(local * (FP8.grad_bytes - BF16.grad_bytes), H100)))


# Llama-3-8B's linear layers, one device at tp 1: QKV (4096 x (4096 + 2 x 1024)), output projection (4096 x 4096),
# gate, up and down (3 x 4096 x 14336); no norm, embedding or output layer
LLAMA_LAYER_WEIGHTS = 4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336


def test_the_step_casts_the_weights_of_the_fp8_gemms_only():
    """What a step casts once: the weights of the body layers' FP8 GEMMs on the device (parameters.py fp8_weights),
    not the 16-bit embedding, output layer and norms, nor the first/last layers kept in BF16."""
    one = stage_parameters(LLAMA, Strategy(tp=1, pp=1, dp=8, mbs=1, mbn=2))[0]
    assert one.fp8_weights == 32 * LLAMA_LAYER_WEIGHTS
    assert one.dense + one.expert - one.fp8_weights == pytest.approx(2 * 128256 * 4096 + 65 * 4096)
    kept = stage_parameters(LLAMA, Strategy(tp=1, pp=1, dp=8, mbs=1, mbn=2), (1, 2))[0]
    assert kept.fp8_weights == 29 * LLAMA_LAYER_WEIGHTS
    # tp 8, pp 4: 8 layers a stage, each weight split 8 ways; the ends hold no more cast weights than the middle
    split = stage_parameters(LLAMA, Strategy(tp=8, pp=4, dp=1, mbs=1, mbn=8, sp=True))
    assert [p.fp8_weights for p in split] == [8 * LLAMA_LAYER_WEIGHTS / 8] * 4


def test_the_moe_router_is_not_cast():
    """A MoE layer's FP8 weights: its experts' and shared experts' and its mixer's, not the router's (which stays
    BF16, compute.fp8_gemms): Mixtral 8x7B at tp 1, ep 8, one device holds one expert of each layer."""
    mixtral = load_model("mixtral-8x7b")
    params = stage_parameters(mixtral, Strategy(tp=1, pp=1, dp=8, ep=8, mbs=1, mbn=2))[0]
    h, f = mixtral.hidden, mixtral.moe.expert_ffn_hidden
    attention = h * (h + 2 * mixtral.num_kv_heads * mixtral.dim_per_head) + h * h
    assert params.fp8_weights == mixtral.layers * (attention + 3 * h * f)
    layer = mixtral.moe_layer  # what the device holds of its layers' linear weights but the routers
    assert params.fp8_weights == mixtral.layers * (layer.per_tp_rank(1) + layer.experts / 8 - h * mixtral.moe.experts)


def test_the_plan_terms_charge_the_step_cast_over_the_fp8_weights():
    """DataParallelTerms.step_costs (what the plan model and the estimate both read) takes the FP8 run's cast of the
    stage's FP8 weights over the BF16 run's: Llama-3-8B tp 1, 32 layers, delayed scaling on Hopper (4 bytes per
    weight) and FP8's 16-bit gradients where the BF16 run keeps fp32 ones (none here: both grad_dtype fp32)."""
    from ndcp.estimate.data_parallel import data_parallel_terms
    cluster, plan = ClusterSpec(H100, 8), Strategy(tp=1, pp=1, dp=8, mbs=1, mbn=2, zero=1)
    fp8, bf16 = (data_parallel_terms(LLAMA, cluster, run, plan)[0].step_costs for run in (FP8, BF16))
    assert fp8 - bf16 == pytest.approx(4.0 * 32 * LLAMA_LAYER_WEIGHTS / H100.hbm_bandwidth)


def test_torchtitan_casts_are_torchaos_hand_counted_per_gemm():
    """torchao Float8Linear, tensorwise (pytorch/ao @0afa4c1): forward amax + cast of input and weight; backward amax
    + cast of the output gradient (twice eager, once compiled), the saved FP8 weight and the output gradient's
    transpose copied for torch._scaled_mm's layouts, the 16-bit input cast again (its amax the forward's when
    compiled) and copied column-major."""
    tokens = 8192
    gemms = layer_gemms(LLAMA, "dense", tokens, 1)
    mk, nk, mn = (sum(a * b for a, b in pairs) for pairs in (
        [(g.m, g.k) for g in gemms], [(g.n, g.k) for g in gemms], [(g.m, g.n) for g in gemms]))
    h, f, q = LLAMA.hidden, LLAMA.ffn_hidden, (LLAMA.heads + 2 * LLAMA.num_kv_heads) * LLAMA.dim_per_head
    assert mk == tokens * (h + h + h + f)  # QKV, output projection, gate+up (one input), down projection
    assert mn == tokens * (q + h + 2 * f + h)
    compiled = layer_cast_bytes(_torchtitan_fp8(True), H100, gemms)
    eager = layer_cast_bytes(_torchtitan_fp8(False), H100, gemms)
    assert compiled == pytest.approx((5 * (mk + nk), 7 * mn + 5 * mk + 2 * nk))
    assert eager == pytest.approx((33 * (mk + nk), 68 * mn + 35 * mk + 2 * nk))
    # Transformer Engine (Megatron): one cast per operand, 6 bytes each for tensorwise on Hopper (amax, cast,
    # transpose); the weights' only where Megatron disables TE's weight cache, else once a step
    megatron = replace(_torchtitan_fp8(False), trainer="megatron")
    assert layer_cast_bytes(megatron, H100, gemms) == pytest.approx((6 * mk, 6 * mn))
    uncached = replace(megatron, disable_parameter_transpose_cache=True)
    assert layer_cast_bytes(uncached, H100, gemms) == pytest.approx((6 * (mk + nk), 6 * mn))
    # torchao's other recipes were not read: Transformer Engine's count stands in, the weights cast every micro-batch
    # as torchao's Float8Linear casts them
    assert layer_cast_bytes(_torchtitan_fp8(True, "delayed"), H100, gemms) == pytest.approx((4 * (mk + nk), 4 * mn))
    assert layer_cast_bytes(replace(_torchtitan_fp8(True), precision="bf16"), H100, gemms) == (0.0, 0.0)


def test_a_torchtitan_fp8_layer_adds_its_gemms_and_torchaos_casts_to_the_bf16_layer():
    tokens = 8192
    gemms = layer_gemms(LLAMA, "dense", tokens, 1)
    key = LayerKey("dense", "none", Degrees(1, 1, 1, 1, 1, False))
    fp8_run = _torchtitan_fp8(True)
    bf16, fp8 = (layer_time(LLAMA, ClusterSpec(H100, 8), r, key) for r in (replace(fp8_run, precision="bf16"), fp8_run))
    linear = gemm_seconds(gemms, H100, 2, fp8=True) - gemm_seconds(gemms, H100, 2)
    forward, backward = (memory_seconds(b, H100) for b in layer_cast_bytes(fp8_run, H100, gemms))
    assert fp8.forward - bf16.forward == pytest.approx(linear + forward)
    assert fp8.backward - bf16.backward == pytest.approx(2 * linear + backward)
    # uncompiled, torchao's op-by-op casts cost more than the FP8 GEMMs save on this layer
    eager = replace(fp8_run, torch_compile=False)
    assert (layer_time(LLAMA, ClusterSpec(H100, 8), eager, key).backward
            > layer_time(LLAMA, ClusterSpec(H100, 8), replace(eager, precision="bf16"), key).backward)
def test_current_scaling_all_reduces_each_sequence_parallel_amax_at_nccls_latency():
    """TE's Float8CurrentScaling reduces the amax of every sequence-parallel cast over the TP group (one FP32 per
    tensor: NCCL's few-byte all-reduce, communication.py; its LL ring, 6.6 us + 2(n - 1) x 0.6 us, inside the
    NVLink domain); delayed scaling reduces its
    history once per step and block recipes scale locally; without SP there is nothing to agree on."""
    node = ClusterSpec(H100, 8)
    tensorwise = RunSpec(16, 8192, precision="fp8", fp8_recipe="tensorwise")
    assert amax_reduction_seconds(tensorwise, node, 8, True) == pytest.approx(6.6e-6 + 14 * 0.6e-6)  # 15.0 us
    assert amax_reduction_seconds(tensorwise, node, 4, True) == pytest.approx(6.6e-6 + 6 * 0.6e-6)  # 10.2 us
    assert amax_reduction_seconds(tensorwise, node, 8, False) == 0.0
    assert amax_reduction_seconds(tensorwise, node, 1, True) == 0.0
    for recipe in ("delayed", "blockwise"):
        assert amax_reduction_seconds(replace(tensorwise, fp8_recipe=recipe), node, 8, True) == 0.0
    assert amax_reduction_seconds(BF16, node, 8, True) == 0.0
    # a TP group across nodes: NCCL's LL tree, 6.8 + 2 x (3 x 0.6 + 1 x 5.0) = 20.4 us
    two_nodes = ClusterSpec(replace(H100, devices_per_node=4), 8)
    assert amax_reduction_seconds(tensorwise, two_nodes, 8, True) == pytest.approx(20.4e-6)
    assert amax_reduction_seconds(tensorwise, two_nodes, 8, True) == comm.few_byte_all_reduce_seconds(two_nodes, 8)


def test_a_current_scaling_layer_exposes_one_amax_reduction_per_pair_each_way():
    """A dense layer has two TP pairs (the mixer's, the MLP's): tensorwise exposes 2 x 2 amax all-reduces more
    TP time than delayed scaling, whatever overlap hides the collectives themselves."""
    cluster = ClusterSpec(H100, 8)
    delayed = RunSpec(16, 8192, precision="fp8", fp8_recipe="delayed")
    tensorwise = replace(delayed, fp8_recipe="tensorwise")
    for hidden in (frozenset(), frozenset({"tp"})):
        key = LayerKey("dense", "none", Degrees(8, 1, 1, 1, 1, True), "p2p", hidden)
        extra = layer_time(LLAMA, cluster, tensorwise, key).tp_comm - layer_time(LLAMA, cluster, delayed, key).tp_comm
        assert extra == pytest.approx(4 * amax_reduction_seconds(tensorwise, cluster, 8, True))


def test_fp8_weight_copies_and_fp8_linear_inputs():
    strategy = Strategy(dp=8, zero=0)
    params = stage_parameters(LLAMA, strategy)[0]
    assert 0 < params.fp8_weights < params.dense
    bf16, fp8 = model_state_bytes(BF16, strategy, params), model_state_bytes(FP8, strategy, params)
    assert weight_copy_bytes_per_parameter(FP8, 0) == 2.0  # FP8 copy + transpose (Hopper layout)
    assert fp8["parameters"] - bf16["parameters"] == pytest.approx(2.0 * params.fp8_weights)
    assert fp8["gradients"] == bf16["gradients"] and fp8["optimizer_states"] == bf16["optimizer_states"]
    # --fp8-param-gather (ZeRO >= 1): the FP8 copy and transpose replace the BF16 linear weight
    sharded = strategy.with_zero(1)
    assert weight_copy_bytes_per_parameter(FP8, 1) == 0.0
    assert (model_state_bytes(FP8, sharded, params)["parameters"]
            == pytest.approx(model_state_bytes(BF16, sharded, params)["parameters"]))
    torchtitan = replace(FP8, trainer="torchtitan")
    assert weight_copy_bytes_per_parameter(torchtitan, 0) == weight_copy_bytes_per_parameter(torchtitan, 3) == 0.0
    # the QKV, output-projection, FC1 and FC2 inputs are saved in FP8: one byte less each; but the attention core's
    # output, which in BF16 is the output projection's input itself, is kept in BF16 for the fused attention's
    # backward beside the projection's FP8 copy: 2 bytes more
    s, h, attention = FP8.seq_len, LLAMA.hidden, LLAMA.heads * LLAMA.dim_per_head
    saved = (layer_activation_bytes(LLAMA, BF16, "dense", "none", Degrees(1, 1, 1, 1, 1, False))
             - layer_activation_bytes(LLAMA, FP8, "dense", "none", Degrees(1, 1, 1, 1, 1, False)))
    assert saved == pytest.approx(s * (h + attention + h + LLAMA.ffn_hidden) - 2 * s * attention)
    # recomputing the attention core (selective) drops that BF16 output again
    selective = (layer_activation_bytes(LLAMA, BF16, "dense", "selective", Degrees(1, 1, 1, 1, 1, False))
                 - layer_activation_bytes(LLAMA, FP8, "dense", "selective", Degrees(1, 1, 1, 1, 1, False)))
    assert selective == pytest.approx(s * (h + attention + h + LLAMA.ffn_hidden))
    # full recompute keeps the BF16 layer input either way
    assert layer_activation_bytes(LLAMA, FP8, "dense", "full", Degrees(1, 1, 1, 1, 1, False)) == pytest.approx(
        layer_activation_bytes(LLAMA, BF16, "dense", "full", Degrees(1, 1, 1, 1, 1, False)))


def test_the_activation_input_stored_in_fp8_halves_fc1_outputs():
    # Megatron's activation_func_fp8_input_store (DeepSeek-V3 §3.3.2: SwiGLU inputs cached in FP8): fc1's output,
    # gate and up (2 x ffn per token), 1 byte instead of 2; in BF16 runs too
    s, f = BF16.seq_len, LLAMA.ffn_hidden
    for spec in (BF16, FP8):
        stored = replace(spec, activation_func_fp8_input_store=True)
        saved = (layer_activation_bytes(LLAMA, spec, "dense", "none", Degrees(1, 1, 1, 1, 1, False))
                 - layer_activation_bytes(LLAMA, stored, "dense", "none", Degrees(1, 1, 1, 1, 1, False)))
        assert saved == pytest.approx(s * 2 * f)


def test_bf16_optimizer_states_and_fp8_parameter_gathers():
    assert BF16.optimizer_state_bytes == 12
    assert replace(BF16, optimizer_state_dtype="bf16").optimizer_state_bytes == 8
    assert FP8.param_bytes == FP8.activation_bytes == 2 and FP8.param_gather_bytes == 1
    group = Group(8, comm.scale_up(H100))
    *_, gather_bf16 = _collectives(BF16, 3, 1e9, 1, group)
    *_, gather_fp8 = _collectives(FP8, 3, 1e9, 1, group)
    assert gather_fp8 < 0.51 * gather_bf16


def test_refusals():
    with pytest.raises(SpecError, match="no FP8 tensor cores"):
        check_fp8(FP8, A100)
    with pytest.raises(SpecError, match="Blackwell"):
        check_fp8(replace(FP8, fp8_recipe="mxfp8"), H100)
    check_fp8(replace(FP8, fp8_recipe="mxfp8"), B200)
    with pytest.raises(SpecError, match="fp8_recipe"):
        replace(FP8, fp8_recipe="nvfp4")
    with pytest.raises(SpecError, match="grad_dtype"):
        RunSpec(16, 8192, grad_dtype="fp8")


ESTIMATE = ["estimate", "llama3-8b", "--gpus", "64", "--global-batch", "16", "--seq-len", "131072",
            "--strategy", "tp=1,cp=8,zero=1,recompute=full", "--json", "-"]


def test_cli_contract_and_refusals(capsys):
    code, out, err = run(capsys, *ESTIMATE, "--device", "h100", "--precision", "fp8")
    assert code == 0, err
    doc = json.loads(out[out.index("{"):])
    assert doc["strategy"]["precision"] == "fp8" and doc["strategy"]["fp8_recipe"] == "delayed"
    assert doc["run"]["precision"] == "fp8"
    assert_one_line_error(*run(capsys, *ESTIMATE, "--device", "a100-80g", "--precision", "fp8"), "no FP8")
    assert_one_line_error(*run(capsys, *ESTIMATE, "--device", "h100", "--precision", "fp8", "--fp8-recipe", "mxfp8"),
                          "mxfp8", "Blackwell")
    assert_one_line_error(*run(capsys, *ESTIMATE, "--device", "h100", "--fp8-recipe", "delayed"), "--precision fp8")
    code, out, err = run(capsys, *ESTIMATE, "--device", "b200", "--precision", "fp8", "--fp8-recipe", "mxfp8")
    assert code == 0, err
    assert json.loads(out[out.index("{"):])["strategy"]["fp8_recipe"] == "mxfp8"


def test_published_fp8_run_is_compared_and_its_speed_up_is_in_range():
    result = validate_file(ROOT / "examples" / "published_runs.yaml")
    rows = {r.id: r for r in result.runs}
    fp8, bf16 = rows["dgxc_llama31_70b_h100_fp8_64"], rows["dgxc_llama31_70b_h100_bf16_64"]
    assert fp8.measured_step == pytest.approx(9.86)
    assert abs(fp8.step_relative_error) < 0.10
    # the one same-stack FP8/BF16 pair (dgxc-benchmarking v25.04): measured speed-up 14.66 / 9.86 = 1.487, within 2 %
    # (1.42, -4.5 %, while the FP8 weights' casts were charged every micro-batch: docs/formulas.md §3.1)
    measured = bf16.measured_step / fp8.measured_step
    assert measured == pytest.approx(1.487, abs=1e-3)
    assert bf16.estimated_step / fp8.estimated_step == pytest.approx(measured, rel=0.02)


def test_fp8_search_is_the_exhaustive_optimum(capsys):
    args = ["search", "llama3-8b", "--device", "h100", "--gpus", "16", "--global-batch", "32", "--seq-len", "8192",
            "--precision", "fp8", "--recompute", "uniform", "--memory-cap", "40GiB", "--json", "-", "--quiet"]
    steps = []
    for extra in ((), ("--exhaustive",)):
        code, out, err = run(capsys, *args, *extra)
        assert code == 0, err
        doc = json.loads(out[out.index("{"):])
        assert doc["strategies"][0]["strategy"]["precision"] == "fp8"
        steps.append(doc["strategies"][0]["time"]["step_seconds"])
    assert steps[0] == pytest.approx(steps[1])


def test_a_reported_strategy_round_trips_and_its_precision_must_match_the_run(capsys, tmp_path):
    code, out, err = run(capsys, *ESTIMATE, "--device", "h100", "--precision", "fp8")
    assert code == 0, err
    plan = tmp_path / "plan.json"
    plan.write_text(out[out.index("{"):])
    code, again, err = run(capsys, *ESTIMATE[:-4], "--strategy-file", plan, "--json", "-", "--device", "h100",
                           "--precision", "fp8")
    assert code == 0, err
    assert json.loads(again[again.index("{"):])["strategy"] == json.loads(out[out.index("{"):])["strategy"]
    assert_one_line_error(*run(capsys, *ESTIMATE[:-4], "--strategy-file", plan, "--device", "h100"),
                          "precision=fp8", "--precision bf16")


def test_an_uncached_fp8_weight_copy_is_saved_by_every_micro_batch_in_flight_under_zero_0():
    # disable_parameter_transpose_cache: Transformer Engine quantizes a BF16 weight on every forward and saves the
    # copy (+ transpose) for the backward; FP8 parameters (ZeRO >= 1, --fp8-param-gather) are untouched.
    uncached = RunSpec(32, 4096, precision="fp8", fp8_recipe="tensorwise", disable_parameter_transpose_cache=True)
    assert uncached_weight_copy_bytes_per_parameter(uncached, 0) == 2.0
    assert uncached_weight_copy_bytes_per_parameter(uncached, 1) == 0.0
    assert uncached_weight_copy_bytes_per_parameter(replace(uncached, disable_parameter_transpose_cache=False), 0) == 0
    assert uncached_weight_copy_bytes_per_parameter(replace(uncached, precision="bf16"), 0) == 0.0
    # Llama-3-8B, pp 2 (16 layers a stage), 1F1B: stage 0 holds 2 micro-batches, the last 1. A layer's linear weights:
    # QKV 4096 x (4096 + 2 x 1024), projection 4096 x 4096, SwiGLU MLP 3 x 4096 x 14336
    linear = 16 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
    strategy = Strategy(dp=4, pp=2, mbs=1, mbn=8, zero=0)
    stages = estimate_memory(LLAMA, ClusterSpec(H100, 8), uncached, strategy).stages
    assert stages[0].parts["fp8_weight_copies"] == 2 * linear * (2 - 1)
    assert stages[1].parts["fp8_weight_copies"] == 0  # one micro-batch in flight: its copy is the one counted
    sharded = estimate_memory(LLAMA, ClusterSpec(H100, 8), uncached, strategy.with_zero(1)).stages
    assert all("fp8_weight_copies" not in s.parts for s in sharded)


# -- BF16 first and last layers (Megatron --first-last-layers-bf16: fp8.bf16_run, fp8.bf16_layer_kinds) ----------
def test_the_layers_kept_in_bf16_are_numbered_over_a_hybrid_models_blocks():
    """Megatron-Core numbers the layers globally over the hybrid pattern's blocks (fp8_utils.py
    is_first_last_bf16_layer, hybrid_block.py i + pp_layer_offset @d98e8a6): Nemotron-3 Nano's pattern starts with
    a Mamba-2 block (a "dense" kind here) and ends with a MoE block; two at each end are M, - and M, -."""
    nano = load_model("nemotron-3-nano")
    run = RunSpec(64, 8192, precision="fp8", fp8_recipe="tensorwise", first_layers_bf16=1, last_layers_bf16=1)
    assert bf16_layer_kinds(nano, run, "first") == (("dense", 1),)
    assert bf16_layer_kinds(nano, run, "last") == (("moe", 1),)
    two = replace(run, first_layers_bf16=2, last_layers_bf16=2)
    assert bf16_layer_kinds(nano, two, "first") == (("dense", 1), ("moe", 1))
    assert bf16_layer_kinds(nano, two, "last") == (("dense", 1), ("moe", 1))
    assert bf16_layer_kinds(nano, two, "middle") == ()


def test_a_layer_counted_at_both_ends_is_kept_in_bf16_once():
    tiny = load_model("llama3-8b")
    run = RunSpec(64, 8192, precision="fp8", fp8_recipe="tensorwise", first_layers_bf16=20, last_layers_bf16=20)
    assert bf16_layer_kinds(tiny, run, "first") == (("dense", 20),)
    assert bf16_layer_kinds(tiny, run, "last") == (("dense", 12),)  # 32 layers: 20..31


def test_a_bf16_layer_runs_as_the_bf16_run_with_nothing_kept_apart():
    run = RunSpec(64, 8192, precision="fp8", fp8_recipe="mxfp8", first_layers_bf16=1, last_layers_bf16=3)
    plain = bf16_run(run)
    assert (plain.precision, plain.bf16_layers, plain.fp8) == ("bf16", (0, 0), False)
    assert cast_bytes_per_element(plain, device_preset("b200")) == 0.0
    assert replace(plain, precision="fp8", fp8_recipe="mxfp8") == RunSpec(64, 8192, precision="fp8",
                                                                          fp8_recipe="mxfp8")
