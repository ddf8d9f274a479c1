"""A vision encoder and projector are priced where they run: on the stage that embeds, in its parameters,
activations and time, and in the MFU numerator (docs/models.md §5)."""
import dataclasses

import pytest

from ndcp.estimate.compute import encoder_forward_flops, layer_forward_flops, model_flops_per_step
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.parameters import stage_parameters
from ndcp.estimate.time import estimate_time, stage_times
from ndcp.specs import ClusterSpec, ModelSpec, RunSpec, Strategy, device_preset
from ndcp.specs.encoder import EncoderSpec

ENCODER = EncoderSpec(layers=4, hidden=512, heads=8, ffn_hidden=2048, patch_size=14, image_size=224,
                      output_hidden=1024, class_token=True, projector="mlp", projector_hidden=1024)
TEXT = ModelSpec(name="text", layers=8, hidden=1024, heads=8, ffn_hidden=4096, vocab=32000)
VLM = dataclasses.replace(TEXT, name="vlm", encoder=ENCODER)
CLUSTER = ClusterSpec(device_preset("h100"), 8)
STRATEGY = Strategy(dp=2, tp=2, pp=2, mbs=1, mbn=8)
RUN = RunSpec(global_batch=16, seq_len=2048)
IMAGES = dataclasses.replace(RUN, images_per_sample=2)


def test_encoder_parameters_sit_on_the_first_stage():
    text, vlm = stage_parameters(TEXT, STRATEGY), stage_parameters(VLM, STRATEGY)
    assert vlm[1] == text[1]
    extra = vlm[0].dense - text[0].dense
    parts = dict(VLM.submodules)
    # linear layers split over tp = 2, embeddings and norms replicated: between a half and all of the submodules
    assert (parts["vision_encoder"] + parts["projector"]) / 2 < extra < parts["vision_encoder"] + parts["projector"]


def test_encoder_activations_and_time_on_the_first_stage_only_with_images():
    without = estimate_memory(VLM, CLUSTER, RUN, STRATEGY)
    with_images = estimate_memory(VLM, CLUSTER, IMAGES, STRATEGY)
    assert [s.parts["encoder_activations"] for s in without.stages] == [0, 0]
    first, last = (s.parts["encoder_activations"] for s in with_images.stages)
    assert first > 0 and last == 0
    assert with_images.stages[1].parts == without.stages[1].parts
    # one image's activations scale with the images: twice the images, twice the bytes
    four = estimate_memory(VLM, CLUSTER, dataclasses.replace(RUN, images_per_sample=4), STRATEGY)
    assert four.stages[0].parts["encoder_activations"] == pytest.approx(2 * first, rel=1e-6)
    plain, images = stage_times(VLM, CLUSTER, RUN, STRATEGY), stage_times(VLM, CLUSTER, IMAGES, STRATEGY)
    assert images[0].total > plain[0].total and images[1] == plain[1]
    assert estimate_time(VLM, CLUSTER, IMAGES, STRATEGY).step_seconds > estimate_time(TEXT, CLUSTER, RUN,
                                                                                         STRATEGY).step_seconds


def test_mfu_counts_the_encoders_flops():
    patches = ENCODER.patches(224)
    assert patches == 16 * 16 + 1
    layers = 4 * layer_forward_flops(VLM.encoder_model, "dense", patches, "causal")
    # bidirectional: every patch attends to every patch, whatever the convention
    assert layers == 4 * layer_forward_flops(VLM.encoder_model, "dense", patches, "full")
    per_sample = encoder_forward_flops(VLM, 2, 224, "causal")
    assert per_sample > 2 * layers
    text = model_flops_per_step(TEXT, 2048, 16, "causal")
    assert model_flops_per_step(VLM, 2048, 16, "causal", 2, 224) == pytest.approx(text + 16 * 3 * per_sample)
    assert model_flops_per_step(VLM, 2048, 16, "causal") == pytest.approx(text)  # no images: the text model's
