"""The rulebook's rules for hybrid layers (docs/models.md §6): what Megatron-Core's Gated DeltaNet and Mamba-2
layers allow of tensor and context parallelism, the trainers that run them, and their recompute options. rules.py
lists them in RULEBOOK with the others."""
from __future__ import annotations

import math

from .schedules import Refusal
from .specs.fields import divisors
from .specs.mixers import ATTENTION, MLP_ONLY
from .specs.model import ModelSpec
from .specs.recompute import HYBRID_BLOCKS, KEEPS_ALL, MODULES, recompute_option


def tp_mixers(p, d: dict) -> Refusal | None:
    """tp divides what tensor parallelism splits of the scan mixers (their specs' tp_counts)."""
    m, tp = p.model, d["tp"]
    counts = {f"{name} {what}": n for name, spec in (("Gated DeltaNet", m.linear_attention), ("Mamba-2", m.mamba))
              if spec is not None for what, n in spec.tp_counts.items()}
    if all(n % tp == 0 for n in counts.values()):
        return None
    return Refusal("tp_mixers", "tp", "must divide the " + ", ".join(f"{n} {what}" for what, n in counts.items())
                   + "; valid tp: " + ", ".join(str(v) for v in divisors(math.gcd(*counts.values()))))


def scan_mixers(model: ModelSpec) -> list[str]:
    """The chunked-scan mixers a model's layers run (specs/mixers.py): what context parallelism, the trainers and
    the module recompute options do not run here."""
    return [name for code, name in (("G", "Gated DeltaNet"), ("M", "Mamba-2")) if code in model.layer_mixers]


def mamba_cp_ok(model: ModelSpec, tp: int, cp: int) -> bool:
    """Megatron-Core's Mamba-2 context parallelism (megatron/core/ssm/mamba_context_parallel.py): each CP rank gets
    whole heads (nheads divisible by tp x cp) and whole or evenly repeated groups (ngroups / tp and cp, one
    dividing the other)."""
    m = model.mamba
    groups = m.groups // tp if m.groups % tp == 0 else 0
    return m.heads % (tp * cp) == 0 and groups > 0 and (groups % cp == 0 or cp % groups == 0)


def cp_mixers(p, d: dict) -> Refusal | None:
    """No context parallelism with Gated DeltaNet layers; Mamba-2's within Megatron-Core's limits (mamba_cp_ok)."""
    m, tp, cp = p.model, d["tp"], d["cp"]
    if cp == 1 or not scan_mixers(m):
        return None
    if m.linear_attention is not None:
        return Refusal("cp_mixers", "cp", "expected 1 with Gated DeltaNet layers: Megatron-Core's Gated DeltaNet has "
                       "no context parallelism (megatron/core/ssm/gated_delta_net.py, core_r0.15)")
    if mamba_cp_ok(m, tp, cp):
        return None
    return Refusal("cp_mixers", "cp", (
        f"Mamba-2 context parallelism needs its {m.mamba.heads} heads divisible by tp x cp and its "
        f"{m.mamba.groups} groups / tp and cp dividing one another (mamba_context_parallel.py); valid cp at tp={tp}: "
        + ", ".join(str(c) for c in divisors(m.mamba.heads // tp if m.mamba.heads % tp == 0 else 1)
                    if mamba_cp_ok(m, tp, c))))


def trainer_mixers(p, d: dict) -> Refusal | None:
    """Scan mixers and hybrid blocks only under Megatron (torchtitan 0.3 and MindFormers have no such layers)."""
    scans = scan_mixers(p.model) + (["hybrid block"] if p.model.hybrid_blocks else [])
    if p.run.trainer == "megatron" or not scans:
        return None
    return Refusal("trainer_mixers", "tp", (
        f"{p.run.trainer} does not run {', '.join(scans)} layers here; the Megatron-Core hybrid models do "
        "(--trainer megatron)"))


def hybrid_block_kinds(model: ModelSpec) -> set[str]:
    """The kinds of block a hybrid model (hybrid_blocks) has that recompute modules can act on (specs/recompute.py
    HYBRID_BLOCKS): attention blocks, MoE blocks, dense MLP blocks; its Mamba-2 blocks take none."""
    mlp = [model.is_moe_layer(i) for i in range(model.layers) if model.mixer(i) == MLP_ONLY]
    return ({"attention"} if ATTENTION in model.layer_mixers else set()) | ({"moe"} if any(mlp) else set()) \
        | ({"dense"} if not all(mlp) else set())


def recompute_mixers_refusal(model: ModelSpec, mode: str) -> Refusal | None:
    """Scan layers recompute whole or not at all: Megatron-Core's recompute modules act on attention, MLP and MoE
    layers only. In a hybrid model of Mamba-2, attention and MLP blocks (Megatron-Core's hybrid stack) a module option
    runs where each of its modules acts on a block the model has (RecomputeModule.block: core_attn on the attention
    blocks, layernorm, moe and moe_act on the MoE blocks, mlp on the dense MLP blocks), the Mamba-2 blocks keeping
    everything (mamba_layer.py honours no module)."""
    scans = scan_mixers(model)
    if not scans or mode in ("none", "full"):
        return None
    option = recompute_option(mode)
    if model.hybrid_blocks and model.linear_attention is None and option.modules and option.keeps == KEEPS_ALL:
        present = hybrid_block_kinds(model)
        idle = [n for n in option.modules if MODULES[n].block not in present]
        if not idle:
            return None
        return Refusal("recompute_modules", "recompute", f"{mode} does not apply to {model.name}: " + ", ".join(
            f"{n} acts on {HYBRID_BLOCKS.get(MODULES[n].block, 'no block of a hybrid model')}" for n in idle)
            + f" (its blocks: {', '.join(HYBRID_BLOCKS[k] for k in HYBRID_BLOCKS if k in present)} and Mamba-2 "
            "blocks, which recompute whole or not at all)")
    return Refusal("recompute_modules", "recompute", f"{mode} does not apply to {model.name}: its "
                   f"{' and '.join(scans)} layers recompute whole (full) or not at all (none)")


__all__ = ["tp_mixers", "cp_mixers", "trainer_mixers", "scan_mixers", "mamba_cp_ok", "hybrid_block_kinds",
           "recompute_mixers_refusal"]
