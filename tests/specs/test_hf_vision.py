"""Vision-language Hugging Face configs import with their published parameter counts, the vision tower and the
projector listed beside the language model (docs/models.md §5).

Fixtures: tests/specs/fixtures/<name>/config.json copy the public config.json of the model in `_name_or_path`.
"""
from pathlib import Path

import pytest

from ndcp.specs import SpecError
from ndcp.specs.hf import SUPPORTED_MODEL_TYPES, model_from_hf_config
from ndcp.specs.library import load_model

FIXTURES = Path(__file__).parent / "fixtures"


def load(name):
    return load_model(str(FIXTURES / name))


def submodules(model):
    return dict(model.submodules)


def test_llava_1_5_7b():
    model = load("llava-1.5-7b-hf")
    # Liu et al. 2023 (LLaVA-1.5) / llava-hf/llava-1.5-7b-hf: 7.06B parameters
    assert model.parameters == pytest.approx(7.06e9, rel=0.02)
    parts = submodules(model)
    assert list(parts) == ["vision_encoder", "projector", "language_model"]
    # CLIP ViT-L/14 at 336 px: 303.5M (Radford et al. 2021); the 2-layer MLP 1024 -> 4096 -> 4096 with biases
    assert parts["vision_encoder"] == pytest.approx(303.5e6, rel=0.001)
    assert parts["projector"] == 1024 * 4096 + 4096 + 4096 * 4096 + 4096
    # the text config lists six keys: the rest are transformers' LlamaConfig defaults (7B shape)
    assert (model.layers, model.hidden, model.ffn_hidden, model.vocab) == (32, 4096, 11008, 32064)
    assert model.encoder.image_tokens(336) == 576 and model.encoder.class_token  # the class token is dropped


def test_qwen2_vl_7b():
    model = load("qwen2-vl-7b-instruct")
    parts = submodules(model)
    # Wang et al. 2024, Qwen2-VL Table 1: 675M vision encoder (with its merger), 7.6B language model
    assert parts["vision_encoder"] + parts["projector"] == pytest.approx(675e6, rel=0.02)
    assert parts["language_model"] == pytest.approx(7.6e9, rel=0.02)
    e = model.encoder
    assert (e.spatial_merge, e.temporal_patch, e.learned_positions, e.image_size) == (2, 2, False, 0)
    assert e.image_tokens(448) == (448 // 14) ** 2 // 4


def test_qwen2_5_vl_reads_its_own_vision_keys():
    model, v2 = load("qwen2.5-vl-7b-instruct"), load("qwen2-vl-7b-instruct")
    e = model.encoder
    assert (e.hidden, e.ffn_hidden, e.activation, e.norm) == (1280, 3420, "swiglu", "rmsnorm")
    # same language model as Qwen2-VL-7B; a gated vision MLP of about the same size
    assert submodules(model)["language_model"] == submodules(v2)["language_model"]
    assert model.parameters == pytest.approx(v2.parameters, rel=0.01)


def test_gemma_3_4b():
    model = load("gemma-3-4b-pt")
    parts = submodules(model)
    # Gemma Team 2025, Gemma 3 report Table 1: 417M vision encoder, 675M embedding, 3,209M non-embedding
    assert parts["vision_encoder"] == pytest.approx(417e6, rel=0.02)
    assert parts["language_model"] == pytest.approx(675e6 + 3209e6, rel=0.02)
    assert model.parameters == pytest.approx(417e6 + 675e6 + 3209e6, rel=0.02)
    assert model.encoder.image_tokens(896) == 256 and model.encoder.projector == "linear"
    # text_config lists five keys; the rest are Gemma3TextConfig defaults, with its 5:1 local/global windows
    assert (model.heads, model.num_kv_heads, model.head_dim, model.sliding_window, model.global_every) == \
        (8, 4, 256, 1024, 6)


def test_vision_types_are_supported():
    assert {"llava", "qwen2_vl", "qwen2_5_vl", "gemma3"} <= set(SUPPORTED_MODEL_TYPES)


def test_bad_vision_key_is_named():
    config = {"model_type": "llava", "text_config": {"model_type": "llama"},
              "vision_config": {"model_type": "clip_vision_model", "num_hidden_layers": 0}}
    with pytest.raises(SpecError, match="vision_config.num_hidden_layers"):
        model_from_hf_config(config, "x")
    with pytest.raises(SpecError, match="vision_config"):
        model_from_hf_config({"model_type": "llava", "text_config": {}, "vision_config": 3}, "x")


def test_library_llava_is_the_hf_config():
    library, imported = load_model("llava-1.5-7b"), load("llava-1.5-7b-hf")
    assert library.submodules == imported.submodules
    assert library.encoder == imported.encoder
