"""Hugging Face readers for hybrid models (specs/hf_hybrid.py; docs/models.md §6): Qwen3-Next, Qwen3.5 and
Nemotron-H, their layer patterns, and their parameter counts against a hand count from the config and the published
totals (sources: docs/models.md §6)."""
import pytest

from ndcp.specs.fields import SpecError
from ndcp.specs.hf import model_from_hf_config
from ndcp.specs.library import load_model

# Qwen/Qwen3-Next-80B-A3B-Instruct config.json (model card: 80B total, 79B non-embedding, 3B activated)
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "decoder_sparse_step": 1,
              "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
              "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
              "max_position_embeddings": 262144, "mlp_only_layers": [], "moe_intermediate_size": 512,
              "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48,
              "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 10000000,
              "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "vocab_size": 151936}
# The Qwen3.5-35B-A3B text model: transformers Qwen3_5MoeTextConfig defaults (configuration_qwen3_5_moe.py)
QWEN3_5 = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
           "vision_config": {"depth": 27},
           "text_config": {"model_type": "qwen3_5_moe_text", "vocab_size": 248320, "hidden_size": 2048,
                           "num_hidden_layers": 40, "num_attention_heads": 16, "num_key_value_heads": 2,
                           "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                           "linear_key_head_dim": 128, "linear_value_head_dim": 128, "moe_intermediate_size": 512,
                           "shared_expert_intermediate_size": 512, "num_experts_per_tok": 8, "num_experts": 256,
                           "intermediate_size": 512}}
# nvidia/Nemotron-H-8B-Base-8K config.json (model card: 8B; 24 Mamba-2, 4 attention, 24 MLP layers)
NEMOTRON_H_8B = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
                 "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
                 "hidden_size": 4096, "intermediate_size": 21504, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "mamba_num_heads": 128, "mamba_head_dim": 64,
                 "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128, "vocab_size": 131072,
                 "num_hidden_layers": 52, "mlp_hidden_act": "relu2", "tie_word_embeddings": False}

# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json (the shapes of Megatron-Bridge's nemotron_3_nano.py recipe)
NEMOTRON_3_NANO = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
                   "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
                   "hidden_size": 2688, "intermediate_size": 1856, "num_attention_heads": 32,
                   "num_key_value_heads": 2, "head_dim": 128, "mamba_num_heads": 64, "mamba_head_dim": 64,
                   "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128, "vocab_size": 131072,
                   "num_hidden_layers": 52, "mlp_hidden_act": "relu2", "tie_word_embeddings": False,
                   "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
                   "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 3712, "routed_scaling_factor": 2.5,
                   "max_position_embeddings": 262144}

def _gdn(h):  # Gated DeltaNet with 16 key heads, 32 value heads of 128: in (q, k, v, z, b, a), conv, dt/A, norm, out
    return h * (2 * 2048 + 2 * 4096 + 64) + 8192 * 4 + 64 + 128 + 4096 * h


def _gated_attention(h):  # 16 heads of 256 with their gate, 2 KV heads
    return h * (2 * 16 * 256 + 2 * 2 * 256) + 16 * 256 * h


def _qwen_moe_layer(h, experts, top_k):  # routed + shared experts (SwiGLU, width 512), router, two norms
    return experts * 3 * h * 512, top_k * 3 * h * 512, 3 * h * 512 + h * experts + 2 * h


def _qwen_counts(layers, experts, top_k, vocab, h=2048):
    routed, active, rest = _qwen_moe_layer(h, experts, top_k)
    mixers = layers // 4 * (3 * _gdn(h) + _gated_attention(h))
    outside = 2 * vocab * h + h  # embedding, output projection, final norm
    return outside + mixers + layers * (routed + rest), outside + mixers + layers * (active + rest)


def test_qwen3_next_reads_the_hybrid_pattern_and_its_counts():
    model = model_from_hf_config(QWEN3_NEXT, "qwen3-next")
    assert model.layer_mixers == "GGGA" * 12 and model.gated_attention and model.linear_attention.value_heads == 32
    assert model.moe_layers == 48 and model.moe.shared_experts == 1
    total, active = _qwen_counts(48, 512, 10, 151936)
    assert (model.parameters, model.active_parameters) == (total, active)
    embeddings = 2 * model.vocab * model.hidden
    assert model.parameters - embeddings == pytest.approx(79e9, rel=0.005)  # model card: 79B non-embedding
    assert round(model.parameters / 1e9) == 80 and round((model.active_parameters - embeddings) / 1e9) == 3


def test_qwen3_next_layer_types_override_the_interval():
    types = ["linear_attention"] * 47 + ["full_attention"]
    model = model_from_hf_config({**QWEN3_NEXT, "layer_types": types}, "qwen3-next")
    assert model.layer_mixers == "G" * 47 + "A"
    with pytest.raises(SpecError, match="layer_types"):
        model_from_hf_config({**QWEN3_NEXT, "layer_types": ["mamba"] * 48}, "qwen3-next")


def test_qwen3_5_reads_its_text_model_and_says_the_vision_encoder_is_left_out():
    model = model_from_hf_config(QWEN3_5, "qwen3.5")
    assert model.layer_mixers == "GGGA" * 10 and model.moe.experts == 256
    total, active = _qwen_counts(40, 256, 8, 248320)
    assert (model.parameters, model.active_parameters) == (total, active)
    assert round(model.parameters / 1e9) == 35 and round(model.active_parameters / 1e9) == 3  # 35B-A3B
    assert any("vision encoder is not modelled" in line for line in model.assumptions)
    assert load_model("qwen3.5-35b-a3b").parameters == total


def test_nemotron_h_blocks_are_a_mixer_or_an_mlp_alone():
    model = model_from_hf_config(NEMOTRON_H_8B, "nemotron-h-8b")
    assert model.hybrid_blocks and model.layer_mixers.count("M") == 24 and model.layer_mixers.count("A") == 4
    assert [model.has_mlp(i) for i in range(4)] == [False, True, False, True]
    h = 4096
    mamba = h * (2 * 8192 + 2 * 8 * 128 + 128) + 8192 * h + (8192 + 2048) * 5 + 3 * 128 + 8192
    attention = h * (32 + 16) * 128 + 32 * 128 * h
    mlp = 2 * h * 21504
    total = 24 * mamba + 4 * attention + 24 * mlp + 52 * h + 2 * 131072 * h + h
    assert model.parameters == total == load_model("nemotron-h-8b").parameters
    assert round(model.parameters / 1e9) == 8  # model card: 8B


def test_nemotron_3_moe_blocks_and_refusals():
    moe = {**NEMOTRON_H_8B, "hybrid_override_pattern": "MEM*EMEM*E", "n_routed_experts": 128,
           "num_experts_per_tok": 6, "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712}
    model = model_from_hf_config(moe, "nemotron-3")
    assert [model.is_moe_layer(i) for i in range(5)] == [False, True, False, False, True]
    assert model.moe_layers == 4 and model.moe.router_expert_bias
    with pytest.raises(SpecError, match="dense MLP and MoE blocks"):
        model_from_hf_config({**moe, "hybrid_override_pattern": "M-M*E"}, "mixed")
    with pytest.raises(SpecError, match="moe_latent_size"):
        model_from_hf_config({**moe, "moe_latent_size": 1024}, "latent")


def test_nemotron_3_nano_counts_against_a_hand_count_and_the_technical_report():
    model = model_from_hf_config(NEMOTRON_3_NANO, "nemotron-3-nano")
    assert [model.layer_mixers.count(c) for c in "MA-"] == [23, 6, 23] and model.moe_layers == 23
    h, inner, bc = 2688, 64 * 64, 2 * 8 * 128  # Mamba-2 inner width (heads x head_dim), B and C widths
    mamba = h * (2 * inner + bc + 64) + inner * h + (inner + bc) * 5 + 3 * 64 + inner
    attention = h * (32 + 2 * 2) * 128 + 32 * 128 * h
    routed, shared_and_router = 2 * h * 1856, 2 * h * 3712 + h * 128  # squared ReLU: up and down only
    body = 23 * mamba + 6 * attention + 23 * shared_and_router + 52 * h
    outside = 2 * 131072 * h + h  # embedding, output projection, final norm
    total, active = outside + body + 23 * 128 * routed, outside + body + 23 * 6 * routed
    assert (model.parameters, model.active_parameters) == (total, active)
    assert load_model("nemotron-3-nano").parameters == total
    # Nemotron 3 Nano technical report (arXiv 2512.20848): 31.6B total, 3.2B active (3.6B with the embeddings);
    # the active figures are rounded to 0.1B
    assert model.parameters == pytest.approx(31.6e9, rel=0.005)
    assert round(model.active_parameters / 1e8) == 36 and round((model.active_parameters - 131072 * h) / 1e8) == 32
