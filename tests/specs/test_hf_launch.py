"""The launch facts of a Hugging Face config.json (RoPE base and scaling, norm epsilon, QK norm, the router), read
as transformers' configuration classes name them; absent keys leave ModelSpec's defaults."""
from ndcp.specs.hf import model_from_hf_config
from ndcp.specs.rope import RopeScaling

LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
         "hidden_act": "silu"}


def test_absent_keys_leave_the_defaults():
    model = model_from_hf_config(LLAMA, "x")
    assert (model.rotary_base, model.rope_scaling, model.norm_eps, model.qk_norm) == (10000.0, None, 1e-5, False)


def test_rope_parameters_of_newer_transformers_are_read_too():
    config = {**LLAMA, "rms_norm_eps": 1e-6, "rope_parameters": {
        "rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}
    model = model_from_hf_config(config, "x")
    assert model.rotary_base == 500000.0 and model.norm_eps == 1e-6
    assert model.rope_scaling == RopeScaling("llama3", 8.0, 8192)


def test_a_scaling_no_launch_flag_states_is_left_out():
    config = {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    assert model_from_hf_config(config, "x").rope_scaling is None


def test_qwen3_normalises_queries_and_keys():
    assert model_from_hf_config({**LLAMA, "model_type": "qwen3", "head_dim": 128}, "x").qk_norm


def test_deepseek_v2_routes_by_softmax_and_v3_by_sigmoid_with_groups_and_bias():
    deepseek = {"hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
                "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2,
                "n_routed_experts": 64, "num_experts_per_tok": 6, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                "v_head_dim": 128, "qk_nope_head_dim": 128, "first_k_dense_replace": 1, "vocab_size": 102400,
                "hidden_act": "silu"}
    v2 = model_from_hf_config({**deepseek, "model_type": "deepseek_v2"}, "x").moe
    assert (v2.router_score, v2.router_groups, v2.router_expert_bias, v2.routed_scaling) == ("softmax", 0, False, 1.0)
    v3 = model_from_hf_config({**deepseek, "model_type": "deepseek_v3", "n_group": 8, "topk_group": 4,
                               "routed_scaling_factor": 2.5}, "x").moe
    assert (v3.router_score, v3.router_groups, v3.router_group_topk, v3.router_expert_bias, v3.routed_scaling) == (
        "sigmoid", 8, 4, True, 2.5)
