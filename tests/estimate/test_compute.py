"""Matmul FLOPs against the published closed forms (docs/formulas.md §2), and the roofline time rule."""
import dataclasses

import pytest

from ndcp.estimate.compute import (Gemm, attention_core_flops, fp8_weight_elements, layer_gemms,
                                   model_flops_per_sequence,
                                   model_flops_per_step, narayanan_flops_per_step, total_flops)
from ndcp.estimate.gemm import gemm_pass_seconds, gemm_seconds
from ndcp.specs import ModelSpec, MoESpec, MLASpec, device_preset


def gpt(layers, hidden, heads, vocab=51200, seq=2048):
    """A GPT-3-style model (4h GeLU MLP, learned positions, biases, tied embeddings)."""
    return ModelSpec("gpt", layers, hidden, heads, 4 * hidden, vocab, activation="gelu", position_embedding="learned",
                     norm="layernorm", linear_bias=True, tied_embeddings=True, max_positions=seq)


def llama(layers, hidden, heads, kv_heads, ffn, vocab=128256):
    return ModelSpec("llama", layers, hidden, heads, ffn, vocab, kv_heads=kv_heads, max_positions=8192)


# (layers, hidden, heads, B, s): Narayanan 2021 Table 1 and Korthikanti 2022 Table 3 shapes
GPT_SETTINGS = [(24, 2304, 24, 512, 2048), (48, 6144, 64, 4, 2048), (96, 12288, 96, 64, 2048),
                (128, 25600, 160, 512, 2048)]


@pytest.mark.parametrize("layers,hidden,heads,batch,seq", GPT_SETTINGS)
def test_narayanan_basis_is_eq3(layers, hidden, heads, batch, seq):
    # Narayanan 2021 Eq. (3): F = 96 B s l h^2 (1 + s/6h + V/16lh)
    model, V = gpt(layers, hidden, heads), 51200
    expected = 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + V / (16 * layers * hidden))
    got = narayanan_flops_per_step(model, seq, batch)
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("layers,hidden,heads,batch,seq", GPT_SETTINGS)
def test_model_flops_are_korthikanti_appendix_a_in_either_convention(layers, hidden, heads, batch, seq):
    # Korthikanti 2022 App. A: model 72 B L s h^2 (1 + s/6h + V/12hL) counting the full score matrix; the causal
    # convention counts half of the s/6h attention-core term
    model, V = gpt(layers, hidden, heads), 51200
    base = 72 * batch * layers * seq * hidden**2
    assert model_flops_per_step(model, seq, batch, "full") == pytest.approx(
        base * (1 + seq / (6 * hidden) + V / (12 * hidden * layers)), rel=1e-12)
    assert model_flops_per_step(model, seq, batch, "causal") == pytest.approx(
        base * (1 + seq / (12 * hidden) + V / (12 * hidden * layers)), rel=1e-12)


@pytest.mark.parametrize("model,seq,published", [
    # NVIDIA dgxc-benchmarking README notes (docs/formulas.md §2.3): model FLOPs per sequence
    (gpt(96, 12288, 96), 2048, 2.20e15),
    (llama(32, 4096, 32, 8, 14336), 8192, 4.74e14),
    (llama(80, 8192, 64, 8, 28672), 8192, 3.94e15),
    (llama(126, 16384, 128, 8, 53248), 8192, 2.17e16),
])
def test_per_sequence_flops_match_nvidia_recipes_within_1_percent(model, seq, published):
    assert model_flops_per_sequence(model, seq, "full") == pytest.approx(published, rel=0.01)


def test_causal_attention_halves_the_core_for_time_only():
    model = llama(32, 4096, 32, 8, 14336)
    full = attention_core_flops(model, 8192, 8192, 1, causal=False)
    assert full == 4 * 8192 * 8192 * 4096  # 2 matmuls x 2 s^2 h (Korthikanti App. A)
    assert attention_core_flops(model, 8192, 8192, 1, causal=True) == full / 2


def test_tensor_parallel_splits_every_gemm_of_a_dense_layer():
    model = llama(32, 4096, 32, 8, 14336)
    one, eight = total_flops(layer_gemms(model, "dense", 4096, 1)), total_flops(layer_gemms(model, "dense", 4096, 8))
    assert eight == pytest.approx(one / 8)


def test_moe_layer_counts_router_top_k_and_shared_experts():
    moe = MoESpec(experts=8, top_k=2, expert_ffn_hidden=1024, shared_experts=1)
    model = ModelSpec("m", 4, 512, 8, 2048, 1000, moe=moe)
    tokens, h = 100, 512
    attention = 2 * tokens * (h * (8 + 2 * 8) * 64 + 8 * 64 * h)
    expert = 2 * tokens * 3 * h * 1024  # gated: gate, up, down
    router = 2 * tokens * h * 8
    assert total_flops(layer_gemms(model, "moe", tokens, 1)) == pytest.approx(attention + router + 3 * expert)
    # expert work per device is the same whatever the EP/ETP split (balanced routing)
    assert total_flops(layer_gemms(model, "moe", tokens, 2, ep=4, etp=2)) == pytest.approx(
        total_flops(layer_gemms(model, "moe", tokens, 2, ep=1, etp=1)))


def test_the_fp8_weights_are_the_local_gemm_weights_but_the_routers():
    """fp8_weight_elements: k x n of each FP8 GEMM on one device, the local experts counted, no router (BF16), no
    bias or norm; MLA's down projections whole on every TP rank (duplicated), its up projections split."""
    moe = MoESpec(experts=8, top_k=2, expert_ffn_hidden=1024, shared_experts=1)
    model = ModelSpec("m", 4, 512, 8, 2048, 1000, moe=moe)
    h, attention = 512, 512 * (8 + 2 * 8) * 64 + 8 * 64 * 512
    assert fp8_weight_elements(model, "dense", 1) == attention + 3 * h * 2048
    assert fp8_weight_elements(model, "moe", 1) == attention + 8 * 3 * h * 1024 + 3 * h * 1024
    assert fp8_weight_elements(model, "moe", 2, ep=4, etp=2) == pytest.approx(
        attention / 2 + 2 * 3 * h * 1024 / 2 + 3 * h * 1024 / 2)  # 2 of 8 experts, halves of them; tp 2
    biased = gpt(2, 256, 4)
    assert fp8_weight_elements(biased, "dense", 1) == 12 * 256 * 256 == biased.dense_layer.attention + \
        biased.dense_layer.mlp - (3 * 256 + 256) - (4 * 256 + 256)  # the QKV, output, up and down biases left out
    mla = ModelSpec("mla", 2, 256, 4, 512, 1000, mla=MLASpec(kv_lora_rank=64, qk_rope_head_dim=16,
                                                             qk_nope_head_dim=32, v_head_dim=32, q_lora_rank=96))
    down, up = 256 * 96 + 256 * (64 + 16), 96 * 4 * 48 + 64 * 4 * 64 + 4 * 32 * 256
    assert fp8_weight_elements(mla, "dense", 2) == down + up / 2 + 3 * 256 * 512 / 2


def test_mla_attention_flops_follow_its_projections():
    mla = MLASpec(kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, q_lora_rank=96)
    model = ModelSpec("mla", 2, 256, 4, 512, 1000, mla=mla)
    t = 10
    expected = 2 * t * (256 * 96 + 96 * 4 * 48 + 256 * (64 + 16) + 64 * 4 * 64 + 4 * 32 * 256)
    assert total_flops(layer_gemms(model, "dense", t, 1)[:5]) == expected
    assert attention_core_flops(model, t, t, 1, causal=False) == 2 * t * t * 4 * (48 + 32)


def test_gemm_time_is_a_roofline():
    h100 = device_preset("h100")
    big = Gemm(8192, 8192, 8192)
    at_ceiling = big.flops / (h100.peak_flops * h100.compute_efficiency)
    # tiles, waves and the K-loop overhead cost a few per cent on top (tests/estimate/test_gemm.py)
    assert at_ceiling <= gemm_seconds([big], h100, 2) <= 1.1 * at_ceiling
    skinny = Gemm(8, 8192, 8192)  # 8 rows: the forward is bound by reading the weight
    assert gemm_pass_seconds(8, 8192, 8192, 1, h100, 2) == pytest.approx(skinny.bytes_moved(2) / h100.hbm_bandwidth)


def test_sliding_window_counts_the_band_of_the_causal_mask():
    # query i sees min(i, w) keys: sum over s queries = s*w - w^2/2 pairs (docs/models.md §3)
    full = ModelSpec(name="m", layers=4, hidden=1024, heads=8, ffn_hidden=4096, vocab=1000)
    s, w = 8192, 1024
    windowed = dataclasses.replace(full, sliding_window=w)
    half = dataclasses.replace(full, sliding_window=w, global_every=2)
    causal = attention_core_flops(full, s, s, 1, causal=True)
    assert attention_core_flops(windowed, s, s, 1, causal=True) == pytest.approx(causal * (s * w - w * w / 2) / (s * s / 2))
    band = attention_core_flops(windowed, s, s, 1, causal=True)
    assert attention_core_flops(half, s, s, 1, causal=True) == pytest.approx((band + causal) / 2)
    # a window as long as the sequence changes nothing; the full score matrix (no flash attention) is all computed
    assert attention_core_flops(dataclasses.replace(full, sliding_window=s), s, s, 1, causal=True) == causal
    assert attention_core_flops(windowed, s, s, 1, causal=False) == attention_core_flops(full, s, s, 1, causal=False)
    # the MFU numerator under the causal convention counts the band too
    assert model_flops_per_sequence(windowed, s, "causal") < model_flops_per_sequence(full, s, "causal")


def test_chunked_attention_counts_the_causal_half_of_each_chunk():
    # Llama 4: queries see only their own chunk of c tokens, causally: n whole chunks of c^2/2 pairs and r^2/2 in the
    # rest, on 3 of 4 layers (global_every=4); the NoPE layers keep full causal attention
    full = ModelSpec(name="m", layers=4, hidden=1024, heads=8, ffn_hidden=4096, vocab=1000)
    chunked = dataclasses.replace(full, attention_chunk=3000, global_every=4)
    s = 8192  # two whole chunks and 2,192 tokens left
    causal = attention_core_flops(full, s, s, 1, causal=True)
    local = causal * (2 * 3000**2 + 2192**2) / s**2
    assert attention_core_flops(chunked, s, s, 1, causal=True) == pytest.approx((3 * local + causal) / 4)
    # a chunk as long as the sequence is plain causal attention; unfused attention computes every score
    assert attention_core_flops(dataclasses.replace(full, attention_chunk=s), s, s, 1, causal=True) == causal
    assert attention_core_flops(chunked, s, s, 1, causal=False) == attention_core_flops(full, s, s, 1, causal=False)


def test_a_blocks_projections_are_the_parts_of_its_fused_gemms():
    """block_projection_gemm (torchtitan's per-projection mms) is read off the fused GEMMs: the query, key and value
    slices fill the fused QKV's columns, the gate and up halves the fused up projection, and each shape is the hand
    count of Llama-3 8B at tp 4 (h 4096, 32 query and 8 key heads of 128, F 14336): column-parallel ones split n,
    row-parallel (wo, w2) k."""
    from ndcp.estimate.compute import BLOCK_PROJECTIONS, block_projection_gemm
    model, tokens, tp = llama(32, 4096, 32, 8, 14336), 8192, 4
    g = {name: block_projection_gemm(model, name, tokens, tp) for name in BLOCK_PROJECTIONS}
    assert g["wqkv"] == Gemm(tokens, 4096, (32 + 2 * 8) * 128 / tp) and g["wo"] == Gemm(tokens, 32 * 128 / tp, 4096)
    assert (g["wq"].n, g["wk"].n, g["wv"].n) == (32 * 128 / tp, 8 * 128 / tp, 8 * 128 / tp)
    assert g["wq"].n + g["wk"].n + g["wv"].n == g["wqkv"].n
    assert g["w1"] == g["w3"] == Gemm(tokens, 4096, 14336 / tp) and g["w2"] == Gemm(tokens, 14336 / tp, 4096)
    fused = layer_gemms(model, "dense", tokens, tp)
    assert total_flops(g[n] for n in ("wqkv", "wo", "w1", "w3", "w2")) == pytest.approx(total_flops(fused), rel=1e-12)


def test_a_gated_attention_query_projection_carries_its_gate_and_mla_has_no_block_projections():
    """Under gated attention the fused QKV's query slice also outputs the per-head gate (2a heads of d), as the
    parameters count it; an MLA block's projections are not a MHA/GQA block's: refused with the reason."""
    from ndcp.estimate.compute import block_projection_gemm
    gated = dataclasses.replace(llama(32, 4096, 32, 8, 14336), gated_attention=True)
    wq, wqkv = (block_projection_gemm(gated, n, 1, 1) for n in ("wq", "wqkv"))
    assert wq.n == 2 * 32 * 128 and wqkv.n == (2 * 32 + 2 * 8) * 128
    assert wqkv.k * wqkv.n + 32 * 128 * 4096 == gated.attention_params
    mla = ModelSpec("mla", 4, 1024, 8, 4096, 32000, mla=MLASpec(q_lora_rank=256, kv_lora_rank=128,
                                                                  qk_nope_head_dim=64, qk_rope_head_dim=32,
                                                                  v_head_dim=64))
    with pytest.raises(ValueError, match="MHA/GQA attention only"):
        block_projection_gemm(mla, "wqkv", 1, 1)
    with pytest.raises(ValueError, match="valid: wqkv"):
        block_projection_gemm(gated, "wx", 1, 1)


def test_separate_qkv_runs_three_gemms_of_their_own_widths_with_the_fused_flops():
    """torchtitan before 0.3.0 (e7c0cae models/llama3/model.py: wq, wk, wv) in the fused projection's place, split by
    TP as it is (column-parallel): Llama-3-8B at tp 2, widths a d / 2 = 2048 and g d / 2 = 512; the tile model
    prices the narrower GEMMs at least as slowly. MLA keeps its own projections."""
    from ndcp.estimate.compute import separate_qkv_gemms
    from ndcp.specs.library import load_model
    model = load_model("llama3-8b")
    fused = layer_gemms(model, "dense", 8192, 2)
    split = separate_qkv_gemms(model, "dense", fused, 8192, 2)
    assert split[:3] == (Gemm(8192, 4096, 2048), Gemm(8192, 4096, 512), Gemm(8192, 4096, 512))
    assert split[3:] == fused[1:] and total_flops(split) == total_flops(fused)
    h100 = device_preset("h100")
    assert gemm_seconds(split[:3], h100, 2) >= gemm_seconds(fused[:1], h100, 2)
    deepseek = load_model("deepseek-v3")
    gemms = layer_gemms(deepseek, "moe", 4096, 1)
    assert separate_qkv_gemms(deepseek, "moe", gemms, 4096, 1) == gemms
