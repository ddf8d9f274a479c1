"""RunSpec's Megatron setting delay_wgrad_compute (ndcp/specs/run.py): a bool, Megatron only, and where a run is
read (the options, a measured row) only with the expert all-to-all overlap asked for, as Megatron-Core requires."""
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
