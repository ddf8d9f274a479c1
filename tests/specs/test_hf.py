"""Hugging Face config.json import: each supported model_type, agreement with the library, and errors.

The config dicts below copy the shape keys of the public Hugging Face config.json files named in each comment.
"""
import dataclasses

import pytest

from ndcp.specs import SpecError
from ndcp.specs.hf import SUPPORTED_MODEL_TYPES, model_from_hf_config
from ndcp.specs.library import load_model

# GPT-3 175B expressed as a gpt2-type config (Brown et al. 2020 Table 2.1; vocab padded to 51200 as in Megatron-LM)
GPT3_175B = {"model_type": "gpt2", "n_embd": 12288, "n_layer": 96, "n_head": 96, "n_inner": None,
             "n_positions": 2048, "vocab_size": 51200, "activation_function": "gelu_new",
             "attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "layer_norm_epsilon": 1e-5}

# meta-llama/Meta-Llama-3-8B config.json
LLAMA3_8B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192, "hidden_act": "silu",
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False, "attention_bias": False,
             "attention_dropout": 0.0}

# meta-llama/Llama-3.1-405B config.json
LLAMA31_405B = {"model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
                "num_attention_heads": 128, "num_key_value_heads": 8, "vocab_size": 128256,
                "max_position_embeddings": 131072, "hidden_act": "silu", "mlp_bias": False,
                "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                "tie_word_embeddings": False}

# mistralai/Mistral-7B-v0.1 config.json (7.24B parameters)
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
              "max_position_embeddings": 32768, "hidden_act": "silu", "sliding_window": 4096,
              "tie_word_embeddings": False}

# mistralai/Mixtral-8x7B-v0.1 config.json (Instruct variants also carry head_dim 128)
MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32000,
                "max_position_embeddings": 32768, "hidden_act": "silu", "num_local_experts": 8,
                "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02, "rms_norm_eps": 1e-5, "rope_theta": 1e6,
                "tie_word_embeddings": False}

# Qwen/Qwen2.5-72B config.json
QWEN25_72B = {"model_type": "qwen2", "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
              "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 152064,
              "max_position_embeddings": 32768, "hidden_act": "silu", "max_window_layers": 80,
              "use_sliding_window": False, "rope_theta": 1000000.0, "tie_word_embeddings": False}

# Qwen/Qwen1.5-MoE-A2.7B config.json (model card: 14.3B total, 2.7B activated)
QWEN15_MOE = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
              "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 151936,
              "max_position_embeddings": 8192, "hidden_act": "silu", "decoder_sparse_step": 1,
              "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60,
              "num_experts_per_tok": 4, "mlp_only_layers": [], "tie_word_embeddings": False}

# Qwen/Qwen3-235B-A22B config.json
QWEN3_235B = {"model_type": "qwen3_moe", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 94,
              "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
              "max_position_embeddings": 40960, "hidden_act": "silu", "attention_bias": False,
              "decoder_sparse_step": 1, "moe_intermediate_size": 1536, "num_experts": 128, "num_experts_per_tok": 8,
              "mlp_only_layers": [], "norm_topk_prob": True, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
              "tie_word_embeddings": False}

# deepseek-ai/DeepSeek-V3 config.json
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
               "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256, "num_experts_per_tok": 8,
               "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
               "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8,
               "topk_group": 4, "first_k_dense_replace": 3, "moe_layer_freq": 1, "num_nextn_predict_layers": 1,
               "vocab_size": 129280, "max_position_embeddings": 163840, "hidden_act": "silu",
               "scoring_func": "sigmoid", "rms_norm_eps": 1e-6, "rope_theta": 10000,
               "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                                "original_max_position_embeddings": 4096, "type": "yarn"},
               "tie_word_embeddings": False}

# deepseek-ai/DeepSeek-V2-Lite config.json (no low-rank Q; model card: 15.7B total)
DEEPSEEK_V2_LITE = {"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
                    "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
                    "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64,
                    "num_experts_per_tok": 6, "kv_lora_rank": 512, "q_lora_rank": None, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "qk_nope_head_dim": 128, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                    "vocab_size": 102400, "max_position_embeddings": 163840, "hidden_act": "silu",
                    "tie_word_embeddings": False}


def same_shape(a, b) -> bool:
    """Specs equal up to name and source."""
    return dataclasses.replace(a, name="x", source="") == dataclasses.replace(b, name="x", source="")


@pytest.mark.parametrize("config, library", [
    (GPT3_175B, "gpt3-175b"), (LLAMA3_8B, "llama3-8b"), (LLAMA31_405B, "llama3.1-405b"),
    (MIXTRAL_8X7B, "mixtral-8x7b"), (QWEN25_72B, "qwen2.5-72b"), (QWEN3_235B, "qwen3-235b-a22b"),
    (DEEPSEEK_V3, "deepseek-v3"),
])
def test_hf_config_matches_library(config, library):
    imported = model_from_hf_config(config, library)
    expected = load_model(library)
    assert imported.parameters == expected.parameters
    assert imported.active_parameters == expected.active_parameters
    assert imported.mtp_params == expected.mtp_params
    assert same_shape(imported, expected)
    assert imported.name == library and imported.source


def test_gpt2_defaults():
    model = model_from_hf_config(GPT3_175B, "gpt3")
    assert model.ffn_hidden == 4 * 12288  # n_inner None -> 4 * n_embd
    assert model.tied_embeddings and model.linear_bias
    assert (model.norm, model.position_embedding, model.activation) == ("layernorm", "learned", "gelu")
    # the real gpt2 (124M) config: 124,439,808 parameters
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
            "vocab_size": 50257, "activation_function": "gelu_new"}
    assert model_from_hf_config(gpt2, "gpt2").parameters == 124_439_808


def test_mistral():
    model = model_from_hf_config(MISTRAL_7B, "mistral-7b")
    assert round(model.parameters / 1e9, 2) == 7.24


def test_qwen2_moe():
    model = model_from_hf_config(QWEN15_MOE, "qwen1.5-moe")
    assert model.qkv_bias
    assert (model.moe.shared_experts, model.moe.shared_expert_ffn_hidden) == (1, 5632)
    assert round(model.parameters / 1e9, 1) == 14.3
    assert round(model.active_parameters / 1e9, 1) == 2.7


def test_qwen3_moe_head_dim():
    model = model_from_hf_config(QWEN3_235B, "q")
    assert model.head_dim == 128 and model.dim_per_head == 128
    assert model.moe_layers == 94 and model.moe.shared_experts == 0


def test_deepseek_v2_lite_without_q_lora():
    model = model_from_hf_config(DEEPSEEK_V2_LITE, "v2-lite")
    assert model.mla.q_lora_rank == 0
    assert (model.moe.shared_experts, model.moe.first_dense_layers, model.mtp_depth) == (2, 1, 0)
    assert round(model.parameters / 1e9, 1) == 15.7


def test_decoder_sparse_step():
    config = dict(QWEN15_MOE, decoder_sparse_step=2)  # MoE on layers 1, 3, 5, ...
    model = model_from_hf_config(config, "q")
    assert [model.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    config = dict(QWEN15_MOE, mlp_only_layers=[0, 1])  # dense prefix
    model = model_from_hf_config(config, "q")
    assert model.moe.first_dense_layers == 2 and model.moe_layers == 22


def test_irregular_moe_layers_rejected():
    with pytest.raises(SpecError, match="mlp_only_layers"):
        model_from_hf_config(dict(QWEN15_MOE, mlp_only_layers=[5]), "q")


def test_moe_layer_freq_follows_hf_rule():
    # HF DeepSeek: layer i is MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0
    model = model_from_hf_config(dict(DEEPSEEK_V3, first_k_dense_replace=3, moe_layer_freq=2), "d")
    assert [i for i in range(61) if model.is_moe_layer(i)] == [i for i in range(61) if i >= 3 and i % 2 == 0]


def test_unsupported_model_type_lists_supported():
    with pytest.raises(SpecError) as error:
        model_from_hf_config({"model_type": "bert", "hidden_size": 768}, "bert")
    message = str(error.value)
    assert "bert" in message
    for model_type in ("gpt2", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3_moe", "deepseek_v3"):
        assert model_type in message
    assert set(SUPPORTED_MODEL_TYPES) >= {"gpt2", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3_moe",
                                          "deepseek_v3"}


def test_non_string_model_type():
    with pytest.raises(SpecError, match="supported model types"):
        model_from_hf_config({"model_type": ["llama"]}, "x")


def test_missing_model_type():
    with pytest.raises(SpecError, match="model_type.*llama"):
        model_from_hf_config({"hidden_size": 8}, "x")


@pytest.mark.parametrize("key", ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                                 "intermediate_size"])
def test_missing_required_key_named(key):
    config = {k: v for k, v in LLAMA3_8B.items() if k != key}
    with pytest.raises(SpecError, match=key):
        model_from_hf_config(config, "x")


@pytest.mark.parametrize("key, value", [("hidden_size", "4096"), ("num_hidden_layers", -1),
                                        ("num_hidden_layers", 0), ("num_key_value_heads", 5),
                                        ("tie_word_embeddings", "no"), ("hidden_act", "relu"),
                                        ("attention_dropout", 2.0), ("vocab_size", 1.5)])
def test_bad_values_are_spec_errors(key, value):
    with pytest.raises(SpecError):
        model_from_hf_config(dict(LLAMA3_8B, **{key: value}), "x")


def test_error_names_hf_key():
    with pytest.raises(SpecError, match="num_hidden_layers"):
        model_from_hf_config(dict(LLAMA3_8B, num_hidden_layers=0), "x")
    with pytest.raises(SpecError, match="num_experts_per_tok"):
        model_from_hf_config(dict(MIXTRAL_8X7B, num_experts_per_tok=9), "x")


def test_a_misspelt_key_whose_absence_gave_a_default_is_said_in_the_assumptions():
    """A hand-written config.json with `num_key_value_head` (no s): Hugging Face ignores the key and ndcp, like
    LlamaConfig, takes as many KV heads as heads (8.84B parameters instead of 8.03B). The spec's assumptions, which
    every report prints, name the key and the one it was meant to be."""
    config = {k: v for k, v in LLAMA3_8B.items() if k != "num_key_value_heads"} | {"num_key_value_head": 8}
    model = model_from_hf_config(config, "mine")
    assert model.num_kv_heads == 32
    assert model.assumptions == ("Hugging Face key 'num_key_value_head' is not one ndcp reads: did you mean "
                                 "'num_key_value_heads'? That key is absent, so its default applies",)


@pytest.mark.parametrize("config", [LLAMA3_8B, LLAMA31_405B, MIXTRAL_8X7B, QWEN25_72B, GPT3_175B],
                         ids=["llama3-8b", "llama3.1-405b", "mixtral", "qwen2.5", "gpt3"])
def test_a_published_config_draws_no_misspelling_note(config):
    assert not any("did you mean" in line for line in model_from_hf_config(config, "x").assumptions)
