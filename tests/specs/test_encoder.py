"""EncoderSpec: tokens per image, the parameters beside the language model, and validation (docs/models.md §5)."""
import pytest

from ndcp.specs import ModelSpec, SpecError
from ndcp.specs.encoder import EncoderSpec

VIT = dict(layers=2, hidden=64, heads=4, ffn_hidden=256, patch_size=14, output_hidden=128)


def test_tokens_per_image():
    assert EncoderSpec(**VIT, image_size=224).patches(224) == 256
    assert EncoderSpec(**VIT, image_size=224, class_token=True).patches(224) == 257
    assert EncoderSpec(**VIT, image_size=224, class_token=True).image_tokens(224) == 256  # class token dropped
    merged = EncoderSpec(**VIT, spatial_merge=2, learned_positions=False)
    assert merged.image_tokens(448) == 32 * 32 // 4 and merged.projector_input == 4 * 64
    assert EncoderSpec(**VIT, image_size=896, tokens_per_image=256).image_tokens(896) == 256


def test_parameters_beside_the_language_model():
    encoder = EncoderSpec(**VIT, image_size=224, projector="mlp", projector_hidden=128)
    text = ModelSpec(name="m", layers=2, hidden=128, heads=4, ffn_hidden=512, vocab=1000)
    model = ModelSpec(name="m", layers=2, hidden=128, heads=4, ffn_hidden=512, vocab=1000, encoder=encoder)
    parts = dict(model.submodules)
    layer = 4 * 64 * 64 + 4 * 64 + 2 * 64 * 256 + 256 + 64 + 2 * 2 * 64  # attention, MLP, biases, 2 LayerNorms
    embeddings = 3 * 14 * 14 * 64 + 256 * 64  # patch embedding, learned positions
    assert parts["vision_encoder"] == embeddings + 2 * layer
    assert parts["projector"] == 64 * 128 + 128 + 128 * 128 + 128
    assert parts["language_model"] == text.parameters
    assert model.parameters == sum(parts.values())
    assert model.encoder_model.causal is False and model.encoder_model.dense_layer.total == layer


def test_validation():
    with pytest.raises(SpecError, match="encoder.image_size.*multiple of 28"):
        EncoderSpec(**VIT, image_size=300, spatial_merge=2)
    with pytest.raises(SpecError, match="encoder.image_size.*learned position"):
        EncoderSpec(**VIT)
    with pytest.raises(SpecError, match="encoder.projector"):
        EncoderSpec(**VIT, image_size=224, projector="qformer")
    with pytest.raises(SpecError, match="encoder.output_hidden.*128"):
        ModelSpec(name="m", layers=2, hidden=256, heads=4, ffn_hidden=512, vocab=1000,
                  encoder=EncoderSpec(**VIT, image_size=224))
