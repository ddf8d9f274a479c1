"""Trainer behaviours (ndcp/specs/trainer_behaviour.py): the named facts the estimators price per trainer."""
from ndcp.specs.trainer_behaviour import (BEHAVIOURS, FP8_CASTS, LOSS_KERNELS, MEGATRON, MEGATRON_LM_LOSS_KERNEL,
                                          MINDFORMERS, TORCHTITAN)


def test_every_trainer_names_whose_code_casts_its_fp8_operands():
    assert all(b.fp8_casts in FP8_CASTS for b in BEHAVIOURS.values())
    # torchtitan's float8 converter runs torchao Float8Linear; Megatron runs Transformer Engine (MindFormers: as
    # Megatron's, not verified)
    assert TORCHTITAN.fp8_casts == "torchao"
    assert MEGATRON.fp8_casts == MINDFORMERS.fp8_casts == "transformer_engine"


def test_megatrons_files_run_the_fused_loss_where_megatron_lm_defaults_to_the_unfused_one():
    """TrainerBehaviour.loss_kernel is what the trainer's files run: ndcp's Megatron emitter writes
    --cross-entropy-loss-fusion (the native fused loss); Megatron-LM's own default, what a Megatron run that states no
    loss ran, is the unfused one; MindFormers states no loss and keeps Megatron-LM's default (not verified);
    torchtitan runs PyTorch's eager loss."""
    assert LOSS_KERNELS == ("unfused", "native", "te", "flash", "eager")
    assert (MEGATRON.loss_kernel, MEGATRON_LM_LOSS_KERNEL) == ("native", "unfused")
    assert (MINDFORMERS.loss_kernel, TORCHTITAN.loss_kernel) == ("unfused", "eager")
