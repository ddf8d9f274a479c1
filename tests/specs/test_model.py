"""ModelSpec parameter counts, pinned to published numbers.

Reference numbers are copied here (the tests read no reference file):
- Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"),
  Eq. (2) and Table 1, as summarised in docs/formulas.md §1 and examples/published_runs.yaml.
- Published totals of the library models (model cards / technical reports), cited per test.
"""
import dataclasses

import pytest

from ndcp.specs import MLASpec, ModelSpec, MoESpec, SpecError
from ndcp.specs.library import load_model

# Narayanan et al. 2021, Table 1: (published billions, hidden h, layers l, heads). V = 51,200, s = 2,048.
NARAYANAN_TABLE1 = [
    (1.7, 2304, 24, 24),
    (3.6, 3072, 30, 32),
    (7.5, 4096, 36, 32),
    (18.4, 6144, 40, 48),
    (39.1, 8192, 48, 64),
    (76.1, 10240, 60, 80),
    (145.6, 12288, 80, 96),
    (310.1, 16384, 96, 128),
    (529.6, 20480, 105, 128),
    (1008.0, 25600, 128, 160),
]
V, S = 51200, 2048


def gpt(h: int, l: int, heads: int, vocab: int = V, positions: int = S, **overrides) -> ModelSpec:
    """A Megatron GPT: GeLU 4h MLP, LayerNorm, biases everywhere, learned positions, tied embeddings."""
    fields = dict(name=f"gpt-{h}x{l}", layers=l, hidden=h, heads=heads, ffn_hidden=4 * h, vocab=vocab,
                  activation="gelu", norm="layernorm", linear_bias=True, position_embedding="learned",
                  max_positions=positions, tied_embeddings=True)
    fields.update(overrides)
    return ModelSpec(**fields)


def narayanan_eq2(h: int, l: int) -> int:
    """P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)), expanded to integers: 12 l h^2 + 13 l h + (V+s) h."""
    return 12 * l * h * h + 13 * l * h + (V + S) * h


@pytest.mark.parametrize("published, h, l, heads", NARAYANAN_TABLE1)
def test_narayanan_table1_parameter_counts(published, h, l, heads):
    model = gpt(h, l, heads)
    formula = narayanan_eq2(h, l)
    # the expanded integer form is the paper's equation
    assert formula == pytest.approx(12 * l * h**2 * (1 + 13 / (12 * h) + (V + S) / (12 * l * h)), rel=1e-12)
    # ModelSpec counts every weight; the formula omits only the final LayerNorm (weight + bias = 2h)
    assert model.parameters == formula + 2 * h
    assert round(model.parameters / 1e9, 1) == published
    assert model.active_parameters == model.parameters


def test_gpt_layer_is_12h2_plus_13h():
    # Narayanan 2021 §1 / BLOOM README: 12 h^2 + 13 h per transformer layer
    h = 1024
    model = gpt(h, 2, 16)
    assert model.dense_layer.total == 12 * h * h + 13 * h
    assert model.attention_params == 4 * h * h + 4 * h
    assert model.dense_layer.mlp == 8 * h * h + 5 * h


def test_untied_output_adds_vocab_times_hidden():
    tied = gpt(512, 2, 8)
    untied = dataclasses.replace(tied, tied_embeddings=False)
    assert untied.parameters - tied.parameters == V * 512


def test_rope_has_no_position_table():
    learned = gpt(512, 2, 8)
    rope = dataclasses.replace(learned, position_embedding="rope")
    assert learned.parameters - rope.parameters == S * 512


def test_gqa_and_swiglu_shapes():
    # Llama-3-8B layer: q 4096x4096, k/v 4096x1024, o 4096x4096; gate/up/down 4096x14336; two RMSNorms.
    m = load_model("llama3-8b")
    assert m.attention_params == 4096 * 4096 * 2 + 2 * 4096 * 1024
    assert m.dense_layer.mlp == 3 * 4096 * 14336
    assert m.dense_layer.norms == 2 * 4096


def test_qkv_bias_adds_q_k_v_outputs():
    base = load_model("qwen2.5-72b")
    no_bias = dataclasses.replace(base, qkv_bias=False)
    # Qwen2: bias on q (64 x 128), k and v (8 x 128 each), none on o
    assert base.attention_params - no_bias.attention_params == (64 + 2 * 8) * 128


def test_moe_active_counts_top_k_experts():
    m = ModelSpec(name="m", layers=4, hidden=64, heads=4, ffn_hidden=256, vocab=100,
                  moe=MoESpec(experts=8, top_k=2, expert_ffn_hidden=128, first_dense_layers=1))
    expert = 3 * 64 * 128
    assert m.moe_layers == 3 and m.dense_layers == 1
    assert m.moe_layer.experts == 8 * expert
    assert m.moe_layer.mlp == 64 * 8  # router only (no shared experts)
    assert m.parameters - m.active_parameters == 3 * 6 * expert


def test_moe_layer_frequency():
    m = ModelSpec(name="m", layers=8, hidden=64, heads=4, ffn_hidden=256, vocab=100,
                  moe=MoESpec(experts=4, top_k=1, expert_ffn_hidden=64, first_dense_layers=1, layer_frequency=2))
    assert [m.is_moe_layer(i) for i in range(8)] == [False, True, False, True, False, True, False, True]


def test_mla_attention_count():
    # DeepSeek-V3 attention (HF modeling_deepseek): q_a 7168x1536 + q_a_norm 1536 + q_b 1536x(128x192),
    # kv_a 7168x(512+64) + kv_a_norm 512 + kv_b 512x(128x(128+128)), o (128x128)x7168
    m = load_model("deepseek-v3")
    expected = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168)
    assert m.attention_params == expected


def test_mla_without_q_lora():
    mla = MLASpec(kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16)
    m = ModelSpec(name="m", layers=2, hidden=64, heads=4, ffn_hidden=128, vocab=100, mla=mla)
    assert m.attention_params == 64 * 4 * 24 + 64 * 40 + 32 + 32 * 4 * 32 + 4 * 16 * 64


def test_tp_replicated_parameters_are_mla_down_projections_and_the_router():
    # Megatron-Core builds linear_q_down_proj and linear_kv_down_proj "duplicated" (whole on every TP rank), with the
    # latents' norms, and the router's experts x hidden weight whole: DeepSeek-V3's MoE layer
    m = load_model("deepseek-v3")
    layer = m.moe_layer
    down = 7168 * 1536 + 1536 + 7168 * (512 + 64) + 512
    assert layer.replicated == down + 7168 * 256
    assert m.dense_layer.replicated == down
    assert layer.per_tp_rank(1) == layer.attention + layer.mlp
    assert layer.per_tp_rank(4) == pytest.approx((layer.attention + layer.mlp - layer.replicated) / 4
                                                 + layer.replicated)


def test_tp_replicated_without_q_lora_and_without_mla():
    mla = MLASpec(kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16)
    m = ModelSpec(name="m", layers=2, hidden=64, heads=4, ffn_hidden=128, vocab=100, mla=mla)
    assert m.dense_layer.replicated == 64 * 40 + 32  # Q is column-parallel without a Q latent
    llama = load_model("llama3-8b")
    assert llama.dense_layer.replicated == 0
    assert llama.dense_layer.per_tp_rank(8) == (llama.dense_layer.attention + llama.dense_layer.mlp) / 8


# -- library models against published totals ----------------------------------------------------------------------

def within(value: int, published_billions: float, rel: float = 0.01) -> bool:
    return abs(value / 1e9 - published_billions) <= rel * published_billions


def test_gpt3_175b():
    m = load_model("gpt3-175b")
    # Brown et al. 2020: 175.0B; Narayanan 2021 Eq. (2) with V=51200, s=2048 gives 174.6B (+ final LayerNorm)
    assert m.parameters == narayanan_eq2(12288, 96) + 2 * 12288
    assert within(m.parameters, 175.0)


def test_llama_3_1_405b():
    # Llama 3.1 405B; the HF config counts 405.85B parameters
    m = load_model("llama3.1-405b")
    assert within(m.parameters, 405.0)
    assert round(m.parameters / 1e9, 2) == 405.85


@pytest.mark.parametrize("name, published", [("llama2-7b", 6.74), ("llama2-70b", 68.98), ("llama3-8b", 8.03),
                                              ("llama3-70b", 70.55), ("qwen2.5-72b", 72.7)])
def test_dense_models(name, published):
    # HF model-card / safetensors totals (Llama 2 paper: 7B / 70B; Qwen2.5-72B card: 72.7B)
    assert within(load_model(name).parameters, published, 0.001)


def test_mixtral_8x7b():
    # Jiang et al. 2024 (Mixtral of Experts): 46.7B total, 12.9B active (13B) per token
    m = load_model("mixtral-8x7b")
    assert within(m.parameters, 46.7)
    assert within(m.active_parameters, 12.9)


def test_mixtral_8x22b():
    # Mistral announcement: 141B total, 39B active
    m = load_model("mixtral-8x22b")
    assert within(m.parameters, 141.0)
    assert within(m.active_parameters, 39.0)


def test_deepseek_v3():
    # DeepSeek-V3 Technical Report: 671B total, 37B activated per token; the released checkpoint is 685B
    # = 671B main model + 14B MTP module (whose checkpoint also stores its own embedding and output head).
    m = load_model("deepseek-v3")
    assert within(m.parameters, 671.0)
    assert m.mtp_params > 0
    assert within(m.parameters + m.mtp_params + 2 * m.vocab * m.hidden, 685.0)
    # Counting every weight a token touches (embedding row, output head included) gives 37.55B; the report's
    # "37B" matches this truncated, or the count without the input embedding (36.6B) rounded.
    assert 37e9 <= m.active_parameters < 38e9
    assert round((m.active_parameters - m.vocab * m.hidden) / 1e9) == 37
    assert within(m.active_parameters, 37.0, 0.02)


def test_qwen3_235b_a22b():
    # Qwen3 technical report / model card: 235B total, 22B activated
    m = load_model("qwen3-235b-a22b")
    assert within(m.parameters, 235.0)
    assert within(m.active_parameters, 22.0)


def test_mtp_excluded_from_parameters():
    m = load_model("deepseek-v3")
    no_mtp = dataclasses.replace(m, mtp_depth=0)
    assert no_mtp.parameters == m.parameters and no_mtp.mtp_params == 0


# -- validation ---------------------------------------------------------------------------------------------------

def test_kv_heads_must_divide_heads():
    with pytest.raises(SpecError, match="kv_heads"):
        ModelSpec(name="m", layers=2, hidden=64, heads=8, kv_heads=3, ffn_hidden=128, vocab=100)


def test_top_k_at_most_experts():
    with pytest.raises(SpecError, match="top_k"):
        MoESpec(experts=4, top_k=5, expert_ffn_hidden=8)


def test_dense_prefix_shorter_than_model():
    with pytest.raises(SpecError, match="first_dense_layers"):
        ModelSpec(name="m", layers=2, hidden=64, heads=8, ffn_hidden=128, vocab=100,
                  moe=MoESpec(experts=4, top_k=1, expert_ffn_hidden=8, first_dense_layers=2))


# -- activations and sliding windows ------------------------------------------------------------------------------

def _small(**fields) -> ModelSpec:
    return ModelSpec(name="m", layers=6, hidden=64, heads=8, ffn_hidden=256, vocab=100, **fields)


def test_activation_decides_the_gate_projection():
    # gated MLPs (SwiGLU, GeGLU; Shazeer 2020) have gate, up and down: 3hF; GELU, ReLU and squared ReLU have 2hF
    mlp = {act: _small(activation=act).dense_layer.mlp for act in ("gelu", "relu", "squared_relu", "swiglu", "geglu")}
    assert mlp["swiglu"] == mlp["geglu"] == 3 * 64 * 256
    assert mlp["gelu"] == mlp["relu"] == mlp["squared_relu"] == 2 * 64 * 256
    with pytest.raises(SpecError, match="activation.*squared_relu"):
        _small(activation="reglu")


def test_sliding_window_layers():
    assert _small().local_layers == 0
    every_layer = _small(sliding_window=128)
    assert every_layer.local_layers == 6
    interleaved = _small(sliding_window=128, global_every=3)  # layers 2 and 5 keep full attention
    assert [interleaved.is_local_layer(i) for i in range(6)] == [True, True, False, True, True, False]
    assert interleaved.parameters == _small().parameters  # a window changes no weight
    with pytest.raises(SpecError, match="global_every.*sliding_window"):
        _small(global_every=2)


def test_chunked_attention_layers():
    chunked = _small(attention_chunk=8192, global_every=4)  # Llama 4: every 4th layer keeps full attention
    assert [chunked.is_local_layer(i) for i in range(6)] == [True, True, True, False, True, True]
    assert chunked.local_layers == 5 and chunked.parameters == _small().parameters
    with pytest.raises(SpecError, match="attention_chunk.*a window or a chunk"):
        _small(attention_chunk=8192, sliding_window=4096)
