"""Trainer behaviours (ndcp/specs/trainer_behaviour.py): the named facts the estimators price per trainer."""
from ndcp.specs.trainer_behaviour import BEHAVIOURS, FP8_CASTS, MEGATRON, MINDFORMERS, TORCHTITAN


def test_every_trainer_names_whose_code_casts_its_fp8_operands():
    assert all(b.fp8_casts in FP8_CASTS for b in BEHAVIOURS.values())
    # torchtitan's float8 converter runs torchao Float8Linear; Megatron runs Transformer Engine (MindFormers: as
    # Megatron's, not verified)
    assert TORCHTITAN.fp8_casts == "torchao"
    assert MEGATRON.fp8_casts == MINDFORMERS.fp8_casts == "transformer_engine"
