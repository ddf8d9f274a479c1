"""Hugging Face readers for the 2025 MoE models: Kimi-K2 (the DeepSeek-V3 architecture), GLM-4.5 (glm4_moe) and
Llama 4 (MoE interleaved with dense layers, chunked attention), their parameter counts against the published totals,
and the library models that carry them.

The config dicts copy the shape keys of the public config.json files named in each comment (keys transformers
derives, Llama 4's `moe_layers` and `no_rope_layers`, are left to their derivation here and given explicitly in the
tests of that derivation).
"""
import dataclasses

import pytest

from ndcp.specs import SpecError
from ndcp.specs.hf import model_from_hf_config
from ndcp.specs.library import load_model

# moonshotai/Kimi-K2-Instruct config.json (model card: 1T total, 32B activated parameters)
KIMI_K2 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "attention_bias": False,
           "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
           "kv_lora_rank": 512, "max_position_embeddings": 131072, "moe_intermediate_size": 2048,
           "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 384, "n_shared_experts": 1,
           "num_attention_heads": 64, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 64,
           "num_nextn_predict_layers": 0, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
           "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid",
           "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc", "v_head_dim": 128,
           "vocab_size": 163840}
# zai-org/GLM-4.5 config.json (GLM-4.5 report: 355B total, 32B activated)
GLM45 = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": True, "head_dim": 128,
         "hidden_act": "silu", "hidden_size": 5120, "partial_rotary_factor": 0.5, "intermediate_size": 12288,
         "max_position_embeddings": 131072, "moe_intermediate_size": 1536, "norm_topk_prob": True,
         "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 160, "n_shared_experts": 1,
         "routed_scaling_factor": 2.5, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
         "num_hidden_layers": 92, "num_key_value_heads": 8, "rope_theta": 1000000, "num_nextn_predict_layers": 1,
         "tie_word_embeddings": False, "use_qk_norm": True, "vocab_size": 151552}
# zai-org/GLM-4.5-Air config.json (106B total, 12B activated)
GLM45_AIR = dict(GLM45, hidden_size=4096, intermediate_size=10944, moe_intermediate_size=1408, n_routed_experts=128,
                 first_k_dense_replace=1, num_hidden_layers=46, use_qk_norm=False)
# meta-llama/Llama-4-Scout-17B-16E config.json, its text_config (model card: 109B total, 17B active)
SCOUT_TEXT = {"model_type": "llama4_text", "attention_bias": False, "attention_chunk_size": 8192, "head_dim": 128,
              "hidden_act": "silu", "hidden_size": 5120, "interleave_moe_layer_step": 1, "intermediate_size": 8192,
              "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760, "num_attention_heads": 40,
              "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
              "rope_theta": 500000.0, "tie_word_embeddings": False, "use_qk_norm": True, "vocab_size": 202048}
# meta-llama/Llama-4-Maverick-17B-128E config.json, its text_config (400B total, 17B active)
MAVERICK_TEXT = dict(SCOUT_TEXT, interleave_moe_layer_step=2, num_local_experts=128, max_position_embeddings=1048576,
                     use_qk_norm=False)
# the multimodal wrapper (Llama4ForConditionalGeneration) around Scout's text model
SCOUT = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "text_config": SCOUT_TEXT,
         "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408, "num_hidden_layers": 34,
                           "num_attention_heads": 16, "intermediate_size": 5632, "image_size": 336, "patch_size": 14,
                           "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096, "projector_output_dim": 4096,
                           "vision_output_dim": 4096},
         "tie_word_embeddings": False}
MAVERICK = dict(SCOUT, text_config=MAVERICK_TEXT)


def embeddings(model) -> int:
    return model.embedding_params + model.output_params


def close(value: float, published: float, within: float) -> bool:
    return abs(value - published) <= within * published


def test_kimi_k2_is_deepseek_v3_with_384_experts():
    kimi = model_from_hf_config(KIMI_K2, "kimi-k2")
    assert kimi.assumptions == ()  # a supported type: nothing assumed
    assert kimi.mla is not None and kimi.moe.experts == 384 and kimi.moe.top_k == 8 and kimi.heads == 64
    assert kimi.moe.first_dense_layers == 1 and kimi.moe_layers == 60 and kimi.mtp_depth == 0
    assert close(kimi.parameters, 1.04e12, 0.02)  # 1,026.4B
    assert close(kimi.active_parameters, 32e9, 0.03)  # 32.9B


@pytest.mark.parametrize("config, total, active", [(GLM45, 355e9, 32e9), (GLM45_AIR, 106e9, 12e9)])
def test_glm_4_5_counts(config, total, active):
    glm = model_from_hf_config(config, "glm")
    assert glm.qkv_bias and glm.head_dim == 128 and glm.num_kv_heads == 8 and glm.mtp_depth == 1
    assert glm.moe.shared_experts == 1 and glm.moe.first_dense_layers == config["first_k_dense_replace"]
    assert close(glm.parameters, total, 0.01)  # 352.8B, 106.9B
    # the report's activated counts leave out the embedding and output layers: 32.1B, 12.2B
    assert close(glm.active_parameters - embeddings(glm), active, 0.02)


def test_glm_4_5_defaults_follow_transformers():
    # Glm4MoeConfig: first_k_dense_replace 1, n_shared_experts 1
    defaults = {k: v for k, v in GLM45.items() if k not in ("first_k_dense_replace", "n_shared_experts")}
    glm = model_from_hf_config(defaults, "glm")
    assert glm.moe.first_dense_layers == 1 and glm.moe.shared_experts == 1


@pytest.mark.parametrize("config, total, moe_layers", [(SCOUT_TEXT, 109e9, 48), (MAVERICK_TEXT, 400e9, 24)])
def test_llama4_counts(config, total, moe_layers):
    llama4 = model_from_hf_config(config, "llama4")
    assert llama4.moe_layers == moe_layers and llama4.moe.shared_experts == 1 and llama4.ffn_hidden == 16384
    # the published totals count the vision encoder (~0.9B) beside the text model: Scout 107.8B, Maverick 400.7B
    assert close(llama4.parameters, total, 0.015)
    assert close(llama4.active_parameters, 17e9, 0.02)  # 17.2B


def test_maverick_interleaves_dense_and_moe_layers():
    maverick = model_from_hf_config(MAVERICK_TEXT, "maverick")  # interleave_moe_layer_step 2: layers 1, 3, ... MoE
    assert [maverick.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert maverick.dense_layer.mlp == 3 * 5120 * 16384  # intermediate_size_mlp
    assert maverick.moe_layer.experts == 128 * 3 * 5120 * 8192  # intermediate_size


def test_llama4_chunked_attention_on_three_of_four_layers():
    scout = model_from_hf_config(SCOUT_TEXT, "scout")
    assert scout.attention_chunk == 8192 and scout.sliding_window == 0
    assert [scout.is_local_layer(i) for i in range(8)] == [True, True, True, False] * 2  # NoPE layers: full
    assert scout.local_layers == 36


@pytest.mark.parametrize("keys", [
    {"moe_layers": list(range(48)), "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(48)]},
    {"layer_types": ["chunked_attention", "chunked_attention", "chunked_attention", "full_attention"] * 12},
])
def test_llama4_explicit_layer_lists_read_as_derived(keys):
    assert model_from_hf_config(dict(SCOUT_TEXT, **keys), "s") == model_from_hf_config(SCOUT_TEXT, "s")


def test_llama4_without_chunks_or_with_irregular_lists():
    assert model_from_hf_config(dict(SCOUT_TEXT, attention_chunk_size=None), "s").attention_chunk == 0
    with pytest.raises(SpecError, match="no_rope_layers.*full attention on every n-th layer"):
        model_from_hf_config(dict(SCOUT_TEXT, no_rope_layers=[1, 0] + [1] * 46), "s")
    with pytest.raises(SpecError, match="moe_layers.*dense prefix"):
        model_from_hf_config(dict(SCOUT_TEXT, moe_layers=[0, 1, 5]), "s")


def test_llama4_multimodal_config_plans_the_text_model_and_says_so():
    scout = model_from_hf_config(SCOUT, "scout")
    text = model_from_hf_config(SCOUT_TEXT, "scout")
    assert dataclasses.replace(scout, assumptions=(), source="") == dataclasses.replace(text, source="")
    (line,) = scout.assumptions
    assert "vision encoder and its adapter are not modelled" in line


@pytest.mark.parametrize("config, library", [(KIMI_K2, "kimi-k2"), (GLM45, "glm-4.5"), (GLM45_AIR, "glm-4.5-air"),
                                             (SCOUT, "llama4-scout"), (MAVERICK, "llama4-maverick")])
def test_library_models_are_the_configs(config, library):
    expected = load_model(library)
    imported = model_from_hf_config(config, library)
    assert dataclasses.replace(imported, source="") == dataclasses.replace(expected, source="")
    assert "huggingface.co" in expected.source
