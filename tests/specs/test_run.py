"""RunSpec's Megatron settings (ndcp/specs/run.py): delay_wgrad_compute, a bool, Megatron only, and where a run is
read (the options, a measured row) only with the expert all-to-all overlap asked for, as Megatron-Core requires; the
BF16 first/last layers (first_layers_bf16, last_layers_bf16), counts, Megatron only, and where a run is read only in
an FP8 run with a recipe other than delayed."""
import dataclasses

import pytest

from ndcp.specs.fields import SpecError
from ndcp.specs.run import RunSpec


def test_the_weight_gradients_are_not_delayed_by_default():
    assert RunSpec(64, 4096).delay_wgrad_compute is False


def test_a_delay_that_is_not_a_bool_is_refused():
    with pytest.raises(SpecError, match="delay_wgrad_compute='yes' is not valid"):
        RunSpec(64, 4096, overlap="ep", delay_wgrad_compute="yes")


def test_the_delay_is_megatrons_only():
    with pytest.raises(SpecError, match="delay_wgrad_compute=True is not valid; a Megatron setting "
                                        r"\(--delay-wgrad-compute\): valid with trainer megatron only"):
        RunSpec(64, 4096, trainer="torchtitan", overlap="ep", delay_wgrad_compute=True)


def test_a_read_run_delays_only_under_the_expert_overlap():
    """TransformerConfig.__post_init__ @d98e8a6: 'overlap_moe_expert_parallel_comm must be enabled when enabling
    delay_wgrad_compute'. A run derived with other overlaps (its trainer's defaults) keeps the setting, inert."""
    RunSpec(64, 4096, overlap="ep+p2p", delay_wgrad_compute=True).check_delay_wgrad()
    derived = dataclasses.replace(RunSpec(64, 4096, overlap="ep", delay_wgrad_compute=True), overlap="trainer")
    with pytest.raises(SpecError, match=r"valid with an overlap that names ep \(overlap is trainer\)"):
        derived.check_delay_wgrad()
    RunSpec(64, 4096, overlap="tp").check_delay_wgrad()  # not delayed: nothing to check


def test_no_layer_is_kept_in_bf16_by_default():
    assert RunSpec(64, 4096, precision="fp8").bf16_layers == (0, 0)


def test_bf16_layer_counts_are_non_negative_integers():
    with pytest.raises(SpecError, match="first_layers_bf16=-1 is not valid; expected an integer >= 0"):
        RunSpec(64, 4096, precision="fp8", fp8_recipe="tensorwise", first_layers_bf16=-1)
    with pytest.raises(SpecError, match="last_layers_bf16='one' is not valid"):
        RunSpec(64, 4096, precision="fp8", fp8_recipe="tensorwise", last_layers_bf16="one")


def test_bf16_layers_are_megatrons_only():
    with pytest.raises(SpecError, match=r"first_layers_bf16=1 is not valid; a Megatron setting "
                                        r"\(--first-last-layers-bf16\): valid with trainer megatron only"):
        RunSpec(64, 4096, trainer="torchtitan", precision="fp8", fp8_recipe="tensorwise", first_layers_bf16=1)


def test_a_read_run_keeps_layers_in_bf16_only_under_fp8_with_a_per_layer_recipe():
    """Megatron-Core checks the counts only under fp8 (they do nothing otherwise) and refuses them under delayed
    scaling (TransformerConfig.__post_init__ @d98e8a6). A run derived in BF16 (another trainer's emitted run) keeps
    the setting, inert: bf16_layers is (0, 0) there."""
    RunSpec(64, 4096, precision="fp8", fp8_recipe="mxfp8", first_layers_bf16=1, last_layers_bf16=1).check_bf16_layers()
    derived = dataclasses.replace(RunSpec(64, 4096, precision="fp8", fp8_recipe="tensorwise", last_layers_bf16=2),
                                  precision="bf16")
    assert derived.bf16_layers == (0, 0)
    with pytest.raises(SpecError, match=r"last_layers_bf16=2 is not valid; BF16 first/last layers exist only inside "
                                        r"an FP8 run: valid with precision fp8 \(precision is bf16\)"):
        derived.check_bf16_layers()
    with pytest.raises(SpecError, match="delayed scaling"):
        RunSpec(64, 4096, precision="fp8", first_layers_bf16=1).check_bf16_layers()
    RunSpec(64, 4096).check_bf16_layers()  # none kept: nothing to check


def test_separate_qkv_projections_are_torchtitans_only():
    assert RunSpec(64, 4096, trainer="torchtitan", qkv_projections="separate").qkv_projections == "separate"
    with pytest.raises(SpecError, match=r"qkv_projections='separate' is not valid; separate Q, K and V projections "
                                        r"are modelled for trainer torchtitan only"):
        RunSpec(64, 4096, qkv_projections="separate")
    with pytest.raises(SpecError, match="qkv_projections"):
        RunSpec(64, 4096, trainer="torchtitan", qkv_projections="split")
