"""Parameters each device holds, per pipeline stage, split into the part ZeRO shards over data x context parallel
ranks (`dense`) and the routed experts it shards over the expert-data-parallel group (`expert`)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..specs.model import ModelSpec
from ..specs.strategy import Strategy
from ..schedules import schedule_named
from .compute import fp8_weight_elements
from .layout import stage_chunks


@dataclass(frozen=True)
class StageParameters:
    dense: float
    expert: float
    layers: int
    fp8_weights: float = 0.0  # weights of the FP8 GEMMs of the layers run in FP8 under fp8 (_fp8_weights): those
    # Transformer Engine casts (fp8.step_weight_cast_seconds) and keeps FP8 copies of (memory.model_state_bytes)


def expert_data_parallel(strategy: Strategy) -> int:
    """Ranks that hold the same experts: the TP x CP x DP ranks of a stage divided among EP x ETP (Megatron MoE)."""
    return max(1, strategy.dp * strategy.cp * strategy.tp // (strategy.ep * strategy.etp))


def dense_shard_ranks(strategy: Strategy) -> int:
    """Ranks ZeRO shards the dense parameters' states over: the DP x CP ranks (HSDP: the dp_shard x CP ranks of a
    replica)."""
    return strategy.shard_ranks * strategy.cp


def optimizer_shard(strategy: Strategy, params: StageParameters) -> float:
    """Parameters whose optimizer step this device runs: with ZeRO >= 1 its shard (dense over dense_shard_ranks,
    experts over the expert-data-parallel ranks), else every parameter of its stage."""
    if strategy.zero == 0:
        return params.dense + params.expert
    return params.dense / dense_shard_ranks(strategy) + params.expert / expert_data_parallel(strategy)


def _encoder_parameters(model: ModelSpec, tp: int) -> float:
    """Parameters of the vision encoder and projector on one device of the embedding stage (docs/models.md §5):
    linear layers split over TP as the language model's, patch embedding, positions and norms replicated."""
    e, layer = model.encoder, model.encoder_model.dense_layer
    return (e.layers * (layer.per_tp_rank(tp) + layer.norms) + e.projector_params / tp
            + e.embedding_params(e.image_size))


@lru_cache(maxsize=16384)
def _stage_parameters(model: ModelSpec, pp: int, vpp: int, layers_per_stage: tuple[int, ...], tp: int, ep: int,
                      etp: int, schedule: str = "1f1b", bf16: tuple[int, int] = (0, 0)) -> tuple[StageParameters, ...]:
    own = _own_parameters(model, pp, vpp, layers_per_stage, tp, ep, etp, schedule, bf16)
    if not schedule_named(schedule).mirrored:
        return own
    # DualPipe: device stage s also holds stage pp - 1 - s, the other direction's copy (DeepSeek-V3 §3.2.1)
    return tuple(StageParameters(a.dense + b.dense, a.expert + b.expert, a.layers, a.fp8_weights + b.fp8_weights)
                 for a, b in zip(own, reversed(own)))


def _own_parameters(model: ModelSpec, pp: int, vpp: int, layers_per_stage: tuple[int, ...], tp: int, ep: int,
                    etp: int, schedule: str, bf16: tuple[int, int]) -> tuple[StageParameters, ...]:
    out = []
    placement = schedule_named(schedule)
    for stage, chunks in enumerate(stage_chunks(model, pp, vpp, layers_per_stage)):
        embedding, head = placement.holds_ends(stage, pp) if not placement.mirrored else (stage == 0, stage == pp - 1)
        dense = expert = 0.0
        fp8_layers = {"dense": 0, "moe": 0}  # body layers run in FP8 under fp8, by kind (not those kept in BF16)
        for first, count in chunks:
            for i in range(first, first + count):
                layer = model.layer(i)
                dense += layer.per_tp_rank(tp) + layer.norms  # norms are replicated over TP
                expert += layer.experts / (ep * etp)
                if not (i < bf16[0] or i >= model.layers - bf16[1]):  # Megatron's global layer numbers
                    fp8_layers["moe" if model.is_moe_layer(i) else "dense"] += 1
        if embedding:  # vocabulary-parallel embedding; learned positions are replicated
            dense += model.vocab * model.hidden / tp + (model.embedding_params - model.vocab * model.hidden)
            if model.encoder is not None:  # beside the embedding: the vision encoder and projector
                dense += _encoder_parameters(model, tp)
        if head:  # output layer (a tied one keeps its own copy on another stage) and final norm
            output = model.vocab * model.hidden if (not model.tied_embeddings or not embedding) else 0
            dense += output / tp + model.norm_params
            if model.mtp_depth:  # DeepSeek-V3 §2.2: each MTP module is a projection, two norms and one layer
                block = model.moe_layer or model.dense_layer
                dense += model.mtp_depth * (block.per_tp_rank(tp) + block.norms
                                            + 2 * model.hidden * model.hidden / tp + 2 * model.norm_params)
                expert += model.mtp_depth * block.experts / (ep * etp)
        out.append(StageParameters(dense, expert, sum(n for _, n in chunks),
                                   _fp8_weights(model, fp8_layers, tp, ep, etp, embedding, head)))
    return tuple(out)


def _fp8_weights(model: ModelSpec, fp8_layers: dict[str, int], tp: int, ep: int, etp: int, embedding: bool,
                 head: bool) -> float:
    """Weight elements on one device of a stage's FP8 GEMMs (compute.fp8_weight_elements: every weight GEMM but
    the MoE router; no bias, norm, embedding or output layer) in the body layers it runs in FP8 (`fp8_layers` by
    kind), each at its kind's average layer (a hybrid model's mixers as the time model prices them), plus the MTP
    modules' layers beside the loss (`head`) and the vision encoder's beside the embedding (`embedding`), which the
    time model runs in FP8 too (estimate/time.py _mtp_time, _encoder_time; not their 16-bit projections)."""
    layers = dict(fp8_layers)
    if head and model.mtp_depth:
        layers[model.mtp_layer_kind] += model.mtp_depth
    total = sum(n * fp8_weight_elements(model, kind, tp, ep, etp) for kind, n in layers.items() if n)
    if embedding and model.encoder is not None:
        total += model.encoder.layers * fp8_weight_elements(model.encoder_model, "dense", tp)
    return total


def stage_parameters(model: ModelSpec, strategy: Strategy,
                     bf16: tuple[int, int] = (0, 0)) -> tuple[StageParameters, ...]:
    """Per device stage: parameters on one of its devices after TP, EP and ETP splits (before ZeRO); `bf16` (first,
    last) body layers left out of fp8_weights (RunSpec.bf16_layers)."""
    s = strategy
    return _stage_parameters(model, s.pp, s.vpp, s.layers_per_stage, s.tp, s.ep, s.etp, s.schedule, bf16)
