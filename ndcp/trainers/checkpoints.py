"""What a trainer's checkpoint does when a strategy changes: which of its shards move (`resharded`), and whether the
trainer's own checkpoint format loads them under the new degrees (`Trainer.reshard`, one function per trainer
here). `ndcp replan` reports them; docs/trainers.md §6 gives the sources at the versions the facts pin.

A dimension reshards when the piece of the checkpoint each rank holds changes with it: tp, pp (and the layers'
placement on stages: vpp, the layout), ep and etp split the parameters and their optimizer states; dp the optimizer
states (and, above ZeRO-1, gradients and parameters) that ZeRO shards over the data-parallel ranks, which Megatron's
distributed optimizer and FSDP shard over dp x cp; `zero` is the stage itself (what is sharded, and for Megatron the
checkpoint format). cp alone moves nothing: every context-parallel rank holds the same parameters.
"""
from __future__ import annotations

from typing import NamedTuple

from ..specs.strategy import Strategy

RESHARDED = ("tp", "pp", "ep", "etp", "dp", "zero")  # the dimensions `resharded` reports, in this order


class Resharding(NamedTuple):
    """One resharded dimension under one trainer's checkpoint format."""

    dimension: str
    """one of RESHARDED"""
    loads: bool
    """the checkpoint as the trainer saves it by default loads under the new degrees"""
    how: str
    """what reshards it (the format), or what the user must do first when it does not load as saved"""
    source: str
    """the trainer file (at the version docs/trainers.md pins) that says so"""


def _layout(s: Strategy) -> tuple:
    return s.pp, s.vpp, s.layers_per_stage


def resharded(before: Strategy, after: Strategy) -> tuple[str, ...]:
    """The dimensions (RESHARDED) whose checkpoint shards differ between the two strategies."""
    sharded = max(before.zero, after.zero) >= 1
    changed = {"tp": before.tp != after.tp, "pp": _layout(before) != _layout(after),
               "ep": before.ep != after.ep, "etp": before.etp != after.etp,
               "dp": sharded and (before.dp * before.cp, before.dp_shard) != (after.dp * after.cp, after.dp_shard),
               "zero": before.zero != after.zero}
    return tuple(d for d in RESHARDED if changed[d])


# -- Megatron-LM (main d98e8a6) ----------------------------------------------------------------------------------
MEGATRON_DIST = ("docs/api-guide/core/dist_checkpointing.md (a torch_dist checkpoint saved under one tensor, pipeline "
                 "or data parallelism loads under another); training/config/training_config.py CheckpointConfig."
                 "ckpt_format (default torch_dist)")
MEGATRON_OPTIMIZER = ("core/optimizer/distrib_optimizer.py DistributedOptimizer.sharded_state_dict (dp_reshardable, "
                      "the default: 'resharding only in DP dimension'); training/checkpointing.py load_checkpoint "
                      "('(TP, PP) mismatch after resume' for it); CheckpointConfig.dist_ckpt_optim_fully_reshardable "
                      "(TP/PP/EP/DP)")
MEGATRON_FSDP = ("training/arguments.py validate_args ('Megatron-FSDP requires the fsdp_dtensor checkpointing "
                 "format'); core/optimizer/distrib_optimizer.py checkpoint_fully_reshardable_formats (fsdp_dtensor)")


def megatron(dimension: str, before: Strategy, after: Strategy) -> Resharding:
    """Megatron-LM: ZeRO-1 (the distributed optimizer) and DDP save torch_dist, Megatron FSDP (ZeRO-2/3)
    fsdp_dtensor; the distributed optimizer's default optimizer format reshards over the data-parallel ranks only."""
    fsdp = before.zero >= 2
    if dimension == "zero" and fsdp != (after.zero >= 2):
        return Resharding(dimension, False, "the checkpoint format changes (torch_dist under DDP and the distributed "
                          "optimizer, fsdp_dtensor under Megatron FSDP): neither loads the other; keep the ZeRO stage "
                          "(--keep zero) or convert the checkpoint", MEGATRON_FSDP)
    if dimension == "zero" and not fsdp:
        return Resharding(dimension, False, "the optimizer's states change form (DDP's per parameter, the distributed "
                          "optimizer's per buffer); no source says one loads as the other: keep the ZeRO stage "
                          "(--keep zero) or resume with --no-load-optim", MEGATRON_OPTIMIZER)
    if fsdp:
        return Resharding(dimension, True, "fsdp_dtensor: every parameter and its optimizer state a DTensor",
                          MEGATRON_FSDP)
    if dimension == "dp" or before.zero == 0:
        how = ("torch_dist; the distributed optimizer's dp_reshardable states over dp x cp" if before.zero else
               "torch_dist: the optimizer states follow their parameters' sharded tensors")
        return Resharding(dimension, True, how, MEGATRON_DIST if before.zero == 0 else MEGATRON_OPTIMIZER)
    return Resharding(dimension, False, "the parameters reshard (torch_dist), the distributed optimizer's states "
                      "only if the checkpoint was saved with --dist-ckpt-optim-fully-reshardable (save one so before "
                      "the change, or resume with --no-load-optim)", MEGATRON_OPTIMIZER)


# -- torchtitan 0.3.0 --------------------------------------------------------------------------------------------
TORCHTITAN_DCP = ("torchtitan/components/checkpointer/dcp.py CheckpointManager (torch.distributed.checkpoint; "
                  "model and optimizer state dicts keyed by parameter name, components/optimizer/utils.py: 'a flat, "
                  "FQN-keyed dict that DCP can save and reshard')")
TORCHTITAN_LOADER = ("torchtitan/components/dataloader.py ParallelAwareDataloader.load_state_dict ('dataloader "
                     "resharding is not supported yet'); components/checkpointer/base.py exclude_from_loading")


def torchtitan(dimension: str, before: Strategy, after: Strategy) -> Resharding:
    """torchtitan: DCP reshards the model and the optimizer over any mesh; the data loader's state is per
    data-parallel rank and loads only under the same dp degree."""
    if dimension == "dp" and before.dp != after.dp:
        return Resharding(dimension, False, "the model and optimizer reshard (DCP), the data loader's state does not: "
                          "resume with --checkpoint.exclude-from-loading dataloader (the data order restarts)",
                          TORCHTITAN_LOADER)
    return Resharding(dimension, True, "DCP: DTensor shards, loaded under the new mesh", TORCHTITAN_DCP)


# -- MindFormers 1.6.0 -------------------------------------------------------------------------------------------
MINDFORMERS_TRANSFORM = ("MindFormers r1.5 docs appendix/conf_files.md (auto_trans_ckpt, src_strategy_path_or_dir); "
                         "MindSpore r2.5 docs model_train/parallel/model_transformation.md (transform_checkpoints)")


def mindformers(dimension: str, before: Strategy, after: Strategy) -> Resharding:
    """MindFormers 1.6 (Checkpoint 1.0): a distributed checkpoint is per-rank slices of the saved strategy; another
    strategy loads it after a transformation."""
    return Resharding(dimension, False, "load with auto_trans_ckpt: True and src_strategy_path_or_dir the saved "
                      "strategy files (MindFormers transforms the slices to the new strategy first)",
                      MINDFORMERS_TRANSFORM)


__all__ = ["RESHARDED", "Resharding", "resharded", "megatron", "torchtitan", "mindformers"]
