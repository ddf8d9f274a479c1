"""Every listed Hugging Face model type imports with its published parameter count (within 2 %).

The configs under tests/specs/fixtures/<name>/config.json copy the shape keys of the public config.json of the
Hugging Face model named in each file's `_name_or_path` (huggingface.co/<that name>); nemotron-4-15b writes the
shape of Parmar et al. 2024 Table 1 as a `nemotron` config (no public Hugging Face config of that model).
"""
import json
from pathlib import Path

import pytest

from ndcp.specs import SpecError
from ndcp.specs.hf import SUPPORTED_MODEL_TYPES, architecture_type, model_from_hf_config
from ndcp.specs.library import load_model

FIXTURES = Path(__file__).parent / "fixtures"

# (fixture, published total parameters, source)
PUBLISHED = [
    ("qwen3-8b", 8.2e9, "Qwen/Qwen3-8B model card: 8.2B parameters (6.95B non-embedding)"),
    ("gemma-2-9b", 917_962_752 + 8_324_201_984, "Gemma Team 2024, Gemma 2 report Table 2: embedding + non-embedding"),
    ("gemma-3-1b-pt", 302e6 + 698e6, "Gemma Team 2025, Gemma 3 report Table 1: 302M embedding + 698M non-embedding"),
    ("phi-3-mini-4k", 3.8e9, "Abdin et al. 2024, Phi-3 report §2: phi-3-mini, 3.8B parameters"),
    ("nemotron-4-15b", 3.2e9 + 12.5e9, "Parmar et al. 2024, Nemotron-4 15B §2: 3.2B embedding + 12.5B non-embedding"),
    ("olmo-2-1124-7b", 7.30e9, "allenai/OLMo-2-1124-7B on the Hugging Face hub: 7.30B parameters"),
    ("pythia-6.9b", 6_857_302_016, "Biderman et al. 2023, Pythia Table 1 (total parameters of pythia-6.9b)"),
    ("falcon-7b", 7e9, "Almazrouei et al. 2023, The Falcon Series: Falcon-7B, 7B parameters"),
    ("starcoder2-3b", 3.03e9, "bigcode/starcoder2-3b on the Hugging Face hub: 3.03B (Lozhkov et al. 2024: 3B)"),
    ("granite-3.0-8b-base", 8.1e9, "ibm-granite/granite-3.0-8b-base model card, architecture table: 8.1B parameters"),
    ("glm-4-9b-0414", 9.4e9, "THUDM/GLM-4-9B-0414 on the Hugging Face hub: 9.4B parameters"),
    ("gpt-oss-20b", 20.91e9, "OpenAI 2025, gpt-oss-120b & gpt-oss-20b model card Table 1: 20.91B total"),
]


@pytest.mark.parametrize("fixture, published, source", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_published_parameter_count(fixture, published, source):
    model = load_model(str(FIXTURES / fixture / "config.json"))
    assert model.parameters == pytest.approx(published, rel=0.02), source
    assert model.name == fixture and model.source.startswith("Hugging Face config.json")


def test_every_listed_type_is_supported():
    listed = {"qwen3", "gemma2", "gemma3_text", "phi3", "nemotron", "olmo2", "gpt_neox", "falcon", "starcoder2",
              "granite", "glm4", "gpt_oss"}
    assert listed <= set(SUPPORTED_MODEL_TYPES)
    fixtures = {json.loads((FIXTURES / p[0] / "config.json").read_text())["model_type"] for p in PUBLISHED}
    assert listed <= fixtures


def test_activations_by_architecture():
    activation = {name: load_model(str(FIXTURES / name)).activation for name, _, _ in PUBLISHED}
    assert activation["nemotron-4-15b"] == "squared_relu"  # relu2, no gate
    assert activation["gemma-2-9b"] == activation["gemma-3-1b-pt"] == "geglu"  # gated tanh-GELU
    assert activation["pythia-6.9b"] == activation["falcon-7b"] == activation["starcoder2-3b"] == "gelu"
    assert activation["qwen3-8b"] == activation["gpt-oss-20b"] == "swiglu"


def test_sliding_window_patterns():
    def pattern(name):
        model = load_model(str(FIXTURES / name))
        return model.sliding_window, [model.is_local_layer(i) for i in range(model.layers)]

    window, layers = pattern("gemma-2-9b")  # Gemma 2: local, global, local, ...
    assert window == 4096 and layers[:4] == [True, False, True, False]
    window, layers = pattern("gemma-3-1b-pt")  # Gemma 3: 5 local then 1 global
    assert window == 512 and layers[:6] == [True] * 5 + [False] and sum(layers) == 22
    window, layers = pattern("gpt-oss-20b")  # layer_types: sliding, full, sliding, ...
    assert window == 128 and layers == [True, False] * 12
    assert pattern("starcoder2-3b") == (4096, [True] * 30)
    assert pattern("qwen3-8b")[0] == 0  # use_sliding_window false


def test_irregular_layer_types_rejected():
    config = json.loads((FIXTURES / "gpt-oss-20b" / "config.json").read_text())
    config["layer_types"] = ["full_attention"] + ["sliding_attention"] * 23
    with pytest.raises(SpecError, match="layer_types"):
        model_from_hf_config(config, "x")


def test_gpt_oss_biases_and_active_parameters():
    model = load_model(str(FIXTURES / "gpt-oss-20b"))
    assert model.linear_bias and model.moe.experts == 32 and model.moe.top_k == 4
    # model card Table 1: 3.61B active, counting the unembedding but not the embedding table
    assert model.active_parameters - model.vocab * model.hidden == pytest.approx(3.61e9, rel=0.02)


def test_falcon_multi_query_and_alibi():
    config = json.loads((FIXTURES / "falcon-7b" / "config.json").read_text())
    assert model_from_hf_config(config, "f").num_kv_heads == 1
    with pytest.raises(SpecError, match="alibi"):
        model_from_hf_config(dict(config, alibi=True), "f")


def test_gated_relu_is_refused_with_valid_names():
    config = json.loads((FIXTURES / "qwen3-8b" / "config.json").read_text())
    with pytest.raises(SpecError, match="hidden_act.*valid: silu"):
        model_from_hf_config(dict(config, hidden_act="relu"), "x")


def test_llama_compatible_generic_path_says_so_with_the_keys_read():
    config = json.loads((FIXTURES / "qwen3-8b" / "config.json").read_text())
    del config["architectures"]
    generic = model_from_hf_config(dict(config, model_type="my_new_llama"), "generic")
    assert generic.parameters == load_model(str(FIXTURES / "qwen3-8b")).parameters
    assert "not a supported type" in generic.source
    (line,) = generic.assumptions
    assert "model_type 'my_new_llama' is not one ndcp knows: read as a Llama-style decoder" in line
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "intermediate_size", "vocab_size", "hidden_act", "max_position_embeddings"):
        assert key in line
    assert load_model(str(FIXTURES / "qwen3-8b")).assumptions == ()


def test_an_unknown_type_is_read_by_the_reader_its_architectures_name():
    config = json.loads((FIXTURES / "gpt-oss-20b" / "config.json").read_text())
    renamed = model_from_hf_config(dict(config, model_type="gpt_oss_next"), "renamed")
    assert renamed.parameters == load_model(str(FIXTURES / "gpt-oss-20b")).parameters
    (line,) = renamed.assumptions
    assert "read by the gpt_oss reader (its architectures: GptOssForCausalLM)" in line


@pytest.mark.parametrize("architecture, model_type", [
    ("DeepseekV3ForCausalLM", "deepseek_v3"), ("Qwen2MoeForCausalLM", "qwen2_moe"), ("GPT2LMHeadModel", "gpt2"),
    ("GPTNeoXForCausalLM", "gpt_neox"), ("Gemma3ForCausalLM", "gemma3_text"), ("Gemma3ForConditionalGeneration",
                                                                                 "gemma3"),
    ("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl"), ("BertModel", None), ("MambaForCausalLM", None),
])
def test_architecture_names_map_to_model_types(architecture, model_type):
    assert architecture_type({"architectures": [architecture]}) == model_type


def test_unknown_type_without_llama_keys_says_what_is_accepted():
    with pytest.raises(SpecError, match="llama-compatible config"):
        model_from_hf_config({"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12}, "bert")
    moe = json.loads((FIXTURES / "gpt-oss-20b" / "config.json").read_text())
    del moe["architectures"]
    with pytest.raises(SpecError, match="not supported"):  # experts are not read the Llama way
        model_from_hf_config(dict(moe, model_type="my_moe"), "m")


def test_qwen_max_window_layers():
    config = json.loads((FIXTURES / "qwen3-8b" / "config.json").read_text())
    windowed = dict(config, use_sliding_window=True, sliding_window=4096, max_window_layers=0)
    assert model_from_hf_config(windowed, "q").local_layers == 36
    assert model_from_hf_config(dict(windowed, max_window_layers=36), "q").sliding_window == 0
    with pytest.raises(SpecError, match="max_window_layers=28"):  # the top 8 layers only: not a periodic pattern
        model_from_hf_config(dict(windowed, max_window_layers=28), "q")
