"""Megatron-LM arguments read back (--strategy-from, launch.read_back): the strategy values and run settings a
launch script states, parsed with the pinned flags (facts/megatron.yaml) as Megatron-LM's own parse_args reads them.
"""
from __future__ import annotations

import argparse
import shlex
from functools import lru_cache

from ..specs.model import ModelSpec
from ..specs.pipeline_layout import parse_layout
from ..specs.recompute import HEAVIEST, NO_RECOMPUTE, option_for_modules
from ..specs.strategy import accounted_partition
from ..specs.trainer_behaviour import MEGATRON
from .base import facts, overlap_value, partition_of, read_error
from .megatron_model import OFFLOAD, PLACEHOLDERS, read_loss_kernel


class _ArgumentReader(argparse.ArgumentParser):
    """argparse whose errors are one --strategy-from error naming the argument (argparse's own prints its usage
    block and exits)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise read_error("megatron", f"{message}, as Megatron-LM reads it (facts/megatron.yaml)")


@lru_cache(maxsize=1)
def _parser() -> argparse.ArgumentParser:
    """An argparse for the pinned flags (facts/megatron.yaml), so a launch script reads as Megatron reads it (built
    once: --strategy-from reads a file for its strategy, its overlaps and its loss kernel)."""
    p = _ArgumentReader(add_help=False, allow_abbrev=False)
    types = {"int": int, "float": float, "str": str}
    filled = {p.option for p in PLACEHOLDERS}  # the user's settings: not read
    for name, fact in facts("megatron")["flags"].items():
        if name in filled:
            continue
        if fact["type"] == "flag":
            p.add_argument(name, action="store_true")
        else:
            p.add_argument(name, type=types[fact["type"]], nargs=fact.get("nargs"), choices=fact.get("choices"))
    return p


def arguments(text: str) -> list[str]:
    """The argument tokens of a launch script: after the training script (`... pretrain_gpt.py`) if named, else
    from the first option; comments, line continuations and environment assignments dropped."""
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as error:
        raise read_error("megatron", f"cannot split the arguments: {error}") from None
    scripts = [i for i, t in enumerate(tokens) if t.endswith(".py")]
    start = scripts[-1] + 1 if scripts else next((i for i, t in enumerate(tokens) if t.startswith("--")), len(tokens))
    return tokens[start:]


def _parsed(text: str) -> argparse.Namespace:
    """A launch script's pinned flags as Megatron-LM parses them (the others ignored)."""
    return _parser().parse_known_args(arguments(text))[0]


def read(text: str, model: ModelSpec) -> dict:
    """Strategy values (the --strategy keys, plus run settings) from Megatron arguments."""
    a = _parsed(text)
    for flag, value, expected in (("--num-layers", a.num_layers, model.layers), ("--hidden-size", a.hidden_size,
                                  model.hidden), ("--num-attention-heads", a.num_attention_heads, model.heads),
                                  ("--num-experts", a.num_experts, model.moe.experts if model.moe else None)):
        if value is not None and value != expected:
            raise read_error("megatron", f"{flag} {value} does not match {model.name} ({expected})")
    if a.micro_batch_size is None:
        raise read_error("megatron", "--micro-batch-size is missing")
    v = {"tp": a.tensor_model_parallel_size or 1, "pp": a.pipeline_model_parallel_size or 1,
         "cp": a.context_parallel_size or 1, "ep": a.expert_model_parallel_size or 1, "mbs": a.micro_batch_size,
         "sp": a.sequence_parallel, "global_batch": a.global_batch_size, "seq_len": a.seq_length}
    v["etp"] = (a.expert_tensor_parallel_size or v["tp"]) if model.moe is not None else 1
    if a.cp_comm_type:
        v["cp_comm"] = a.cp_comm_type[0]
    v["zero"] = ({"optim_grads": 2, "optim_grads_params": 3}.get(a.data_parallel_sharding_strategy, 1)
                 if a.use_megatron_fsdp else 1 if a.use_distributed_optimizer else 0)
    instances = a.num_distributed_optimizer_instances or 1
    if instances > 1 and (v["zero"] != 3 or a.outer_dp_sharding_strategy not in (None, "no_shard")):
        raise read_error("megatron", f"--num-distributed-optimizer-instances {instances}: ndcp models HSDP under "
                                     "Megatron FSDP optim_grads_params, replicated (--outer-dp-sharding-strategy "
                                     "no_shard) only")
    if instances > 1:
        v["dp_replicate"] = instances  # dp_shard = dp / instances once dp is known (derive_batch_split)
    if a.optimizer_cpu_offload:
        fraction = 1.0 if a.optimizer_offload_fraction is None else a.optimizer_offload_fraction
        if fraction != 1.0:
            raise read_error("megatron", f"--optimizer-offload-fraction {fraction:g}: ndcp plans the whole optimizer on "
                                         "the host or none of it (1.0)")
        v["optimizer_offload"] = True
    v["precision"] = "fp8" if a.fp8_format else "fp16" if a.fp16 else "bf16"
    v["overlap"] = read_overlap_args(a)
    v["moe_dispatcher"] = a.moe_token_dispatcher_type if model.moe is not None else None
    v["fp8_recipe"] = (a.fp8_recipe or "delayed") if a.fp8_format else None
    if a.delay_wgrad_compute:  # a run setting (RunSpec.delay_wgrad_compute): must match the run
        v["delay_wgrad_compute"] = True
    # a run setting (RunSpec.bf16_layers): must match the run; each count defaults to 1 (TransformerConfig @d98e8a6)
    # and does nothing without FP8
    v["bf16_layers"] = ((1 if a.num_layers_at_start_in_bf16 is None else a.num_layers_at_start_in_bf16,
                         1 if a.num_layers_at_end_in_bf16 is None else a.num_layers_at_end_in_bf16)
                        if a.first_last_layers_bf16 and a.fp8_format else (0, 0))
    v["loss_kernel"] = read_loss_kernel(a.cross_entropy_loss_fusion, a.cross_entropy_fusion_impl)  # a run setting
    if a.defer_embedding_wgrad_compute:  # a run setting (RunSpec.wgrad_deferral_limit): must match the run
        v["wgrad_deferral_limit"] = a.wgrad_deferral_limit or 0
    _read_layout(a, v, model)
    v["recompute"] = _read_recompute(a, partition_of(v, model))
    return v


def _read_layout(a: argparse.Namespace, v: dict, model: ModelSpec) -> None:
    pp = v["pp"]
    if a.pipeline_model_parallel_layout:
        v["layout"] = parse_layout(a.pipeline_model_parallel_layout)
    elif a.num_layers_per_virtual_pipeline_stage:
        v["vpp"] = model.layers // (pp * a.num_layers_per_virtual_pipeline_stage)
    elif a.num_virtual_stages_per_pipeline_rank:
        v["vpp"] = a.num_virtual_stages_per_pipeline_rank
    if a.account_for_embedding_in_pipeline_split and a.account_for_loss_in_pipeline_split:
        counts = accounted_partition(model.layers, pp * v.get("vpp", 1))
        if counts is None:
            raise read_error("megatron", f"{model.layers} + 2 layers do not split evenly over pp x vpp stages")
        v["layers_per_stage"] = counts
    if a.decoder_first_pipeline_num_layers is not None:
        v["first_stage_layers"] = a.decoder_first_pipeline_num_layers
    if a.decoder_last_pipeline_num_layers is not None:
        v["last_stage_layers"] = a.decoder_last_pipeline_num_layers


def _read_recompute(a: argparse.Namespace, counts: tuple[int, ...]):
    """A uniform mode, or per-stage counts: block recompute runs the first N layers of every stage fully."""
    if getattr(a, "fine_grained_activation_offloading", False):
        return OFFLOAD
    if a.recompute_granularity is None:
        return "none"
    if a.recompute_granularity == "selective":
        modules = [m for m in (a.recompute_modules or ["core_attn"])]
        return "selective" if modules == ["core_attn"] else option_for_modules("+".join(modules))
    if a.recompute_method != "block":
        return "full"  # uniform: every layer checkpointed (in groups of --recompute-num-layers)
    n = a.recompute_num_layers or 1
    return {"stages": [{NO_RECOMPUTE: c - min(n, c), HEAVIEST: min(n, c)} for c in counts]}


def read_overlap_args(a: argparse.Namespace) -> str:
    """The run's --overlap that parsed Megatron arguments state (`overlaps`, read back)."""
    stated = {"ep"} if a.overlap_moe_expert_parallel_comm else set()
    stated |= {"tp"} if a.tp_comm_overlap else set()
    stated |= set() if a.no_overlap_p2p_communication else {"p2p"}  # on by default (store_false overlap_p2p_comm)
    return overlap_value(stated, MEGATRON.default_overlaps)


def read_overlap(text: str) -> str:
    """The run's --overlap a Megatron configuration states."""
    a = _parsed(text)
    return read_overlap_args(a)


def read_loss(text: str) -> str:
    """The run's --loss-kernel a Megatron configuration states (no --cross-entropy-loss-fusion: unfused)."""
    a = _parsed(text)
    return read_loss_kernel(a.cross_entropy_loss_fusion, a.cross_entropy_fusion_impl)


def recognises(text: str) -> bool:
    """Whether a configuration is Megatron-LM's: a list of its --flags naming the model or its parallelism."""
    return "--tensor-model-parallel-size" in text or "--micro-batch-size" in text or "--num-layers" in text


__all__ = ["arguments", "read", "read_overlap_args", "read_overlap", "read_loss", "recognises"]
