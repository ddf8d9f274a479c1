"""Peak memory per pipeline stage, broken into named parts: model states, activations, transients, reserve
(CUDA context, workspaces, communicator buffers and allocator fragmentation: estimate/reserve.py).

Model states follow ZeRO (Rajbhandari et al. 2020, Table 1) and Megatron's distributed optimizer
(Megatron-LM's dist_optimizer.md; docs/formulas.md §6): parameters at the run precision, gradients at the
gradient dtype, optimizer states (fp32 master copy for 16-bit parameters + two fp32 Adam moments). ZeRO stage k
shards states (k>=1), gradients (k>=2) and parameters (k=3) over the data-parallel x context-parallel group; expert
parameters are sharded over the expert-data-parallel group instead. A torchtitan run (RunSpec.trainer) keeps FSDP2's
layout instead: fp32 parameters that are the optimizer's own (no separate master copy), bf16 only in the gathered
copies.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..schedules import schedule_named
from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.run import FP32_BYTES, RunSpec
from ..specs.recompute import NO_RECOMPUTE
from ..specs.strategy import RECOMPUTE_MODES, Strategy
from .confidence import plan_margin
from .activations import (deferred_wgrad_bytes, head_activation_bytes, layer_activation_bytes,
                          backward_workspace_bytes, offloaded_layer_bytes, recompute_workspace_bytes)
from .layout import StageLayout, stage_layouts, stage_mode_counts
from .reserve import OUTSIDE_ALLOCATOR, fixed_reserve_parts, fragmentation_bytes
from .trainers import data_parallel_sync, trainer_behaviour
from .data_parallel import host_optimizer_bytes_per_parameter
from .fp8 import bf16_layer_kinds, bf16_run, uncached_weight_copy_bytes_per_parameter, weight_copy_bytes_per_parameter
from .keys import Degrees
from .parameters import StageParameters, dense_shard_ranks, expert_data_parallel, optimizer_shard, stage_parameters
from .pipeline_buffers import pipeline_buffer_bytes
from .held_states import partly_held_bytes, releases_states, unheld_state_bytes


def state_bytes_per_param(run: RunSpec, zero: int, shard: int) -> dict[str, float]:
    """Bytes per parameter for parameters, gradients and optimizer states when ZeRO `zero` shards over `shard` ranks.

    bf16 params + fp32 grads + Adam: zero 0 -> 18, zero 1 -> 6 + 12/d (Megatron distributed optimizer table);
    16-bit grads: 16, 4 + 12/d, 2 + 14/d, 16/d (ZeRO Table 1).
    torchtitan: FSDP2 shards the fp32 parameters themselves and casts to bf16 only when it all-gathers
    (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), torchtitan parallelize_llama.apply_fsdp); AdamW steps
    those fp32 shards, so the states are 4 (params) + grad dtype + 8 (two moments): 16/d with fp32 grads.
    """
    if trainer_behaviour(run).fp32_sharded_parameters:
        params, states = FP32_BYTES, 2 * FP32_BYTES  # fp32 parameters, two fp32 moments
    else:
        params, states = run.param_bytes, run.optimizer_state_bytes
    return {
        "parameters": params / (shard if zero >= 3 else 1),
        "gradients": run.grad_bytes / (shard if zero >= 2 else 1),
        "optimizer_states": states / (shard if zero >= 1 else 1),
    }


def model_state_bytes(run: RunSpec, strategy: Strategy, params: StageParameters) -> dict[str, float]:
    """Parameters, gradients and optimizer states of one stage's device.

    The data-parallel sync settings (trainers.data_parallel_sync; docs/formulas.md §7) add: ZeRO-3 parameters kept
    gathered past one layer (from forward to backward, or over the step: torchtitan with PP) held unsharded in the
    compute dtype, counted with the parameters; ZeRO-2/3 gradients accumulated unsharded and reduced once per step,
    a full gradient buffer besides the shard, counted with the gradients."""
    dense = state_bytes_per_param(run, strategy.zero, dense_shard_ranks(strategy))
    expert = state_bytes_per_param(run, strategy.zero, expert_data_parallel(strategy))
    out = {k: params.dense * dense[k] + params.expert * expert[k] for k in dense}
    # fp8: Transformer Engine's FP8 weight copies (and transposes) of the FP8 GEMMs' weights, unsharded, next to the
    # BF16 weights or in their place under --fp8-param-gather (docs/formulas.md §3.1); none for the layers kept in
    # BF16 (their weights are made outside fp8_model_init: Megatron-Core get_fp8_context(..., is_init=True) @d98e8a6)
    # nor the router, which runs outside Transformer Engine (parameters.StageParameters.fp8_weights)
    out["parameters"] += weight_copy_bytes_per_parameter(run, strategy.zero) * params.fp8_weights
    sync = data_parallel_sync(run, strategy.zero, strategy.pp)
    if sync.gathered_parameters:
        out["parameters"] += run.param_bytes * (params.dense + params.expert)
    if sync.full_grad_buffer:
        out["gradients"] += run.grad_bytes * (params.dense + params.expert)
    if strategy.optimizer_offload:  # master weights and moments live on the host (host_optimizer_bytes)
        out["optimizer_states"] = 0.0
    return out


def host_optimizer_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout) -> float:
    """Host memory the offloaded optimizer of one device stage takes: the states and gradient copy of its optimizer
    shard (docs/formulas.md §6.1); 0 without optimizer offload."""
    if not strategy.optimizer_offload:
        return 0.0
    params = stage_parameters(model, strategy)[layout.stage]
    return optimizer_shard(strategy, params) * host_optimizer_bytes_per_parameter(run)


@dataclass(frozen=True)
class StageMemory:
    stage: int
    layers: int
    in_flight: float  # micro-batches (in units of the whole stage) whose activations are resident
    parts: dict[str, int]
    host_bytes: int = 0  # offloaded activations and optimizer states in host memory at the stage's peak

    @property
    def total_bytes(self) -> int:
        return sum(self.parts.values())

    def as_dict(self) -> dict:
        return {"stage": self.stage, "layers": self.layers, "in_flight": self.in_flight,
                "total_bytes": self.total_bytes, "parts": dict(self.parts), "host_bytes": self.host_bytes}


@dataclass(frozen=True)
class MemoryEstimate:
    capacity_bytes: int
    stages: tuple[StageMemory, ...]
    activation_bytes_per_layer: dict[str, int]
    host_capacity_bytes: int = 1 << 62  # host memory per device for offloaded activations
    margin_bytes: int = 0  # bytes of the capacity the peak's upper edge keeps free at the run's confidence
    # (estimate/confidence.py; 0 at confidence 0)
    confidence: float = 0.0  # the run's confidence, at which `fits` is judged

    @property
    def peak_bytes(self) -> int:
        return max(s.total_bytes for s in self.stages)

    @property
    def peak_stage(self) -> int:
        return max(self.stages, key=lambda s: s.total_bytes).stage

    @property
    def allocator_peak_bytes(self) -> int:
        """The peak without the parts PyTorch's caching allocator does not hold (CUDA context, NCCL buffers): what
        torch.cuda.max_memory_reserved reports, as torchtitan and NeMo log it."""
        return max(s.total_bytes - sum(s.parts.get(k, 0) for k in OUTSIDE_ALLOCATOR) for s in self.stages)

    @property
    def allocated_peak_bytes(self) -> int:
        """The allocator peak less its fragmentation: the live tensors, what torch.cuda.max_memory_allocated reports
        (Megatron's memory report prints both; docs/formulas.md §5.1)."""
        return max(s.total_bytes - sum(s.parts.get(k, 0) for k in (*OUTSIDE_ALLOCATOR, "fragmentation"))
                   for s in self.stages)

    @property
    def host_peak_bytes(self) -> int:
        return max(s.host_bytes for s in self.stages)

    @property
    def fit_bytes(self) -> int:
        """The largest peak that fits at the run's confidence: the capacity less the margin."""
        return self.capacity_bytes - self.margin_bytes

    @property
    def fits(self) -> bool:
        """The peak fits at the run's confidence (its upper edge within the capacity) and the host memory holds
        what is offloaded."""
        return self.peak_bytes <= self.fit_bytes and self.host_peak_bytes <= self.host_capacity_bytes

    def as_dict(self) -> dict:
        return {"capacity_bytes": self.capacity_bytes, "peak_bytes": self.peak_bytes, "fits": self.fits,
                "host_peak_bytes": self.host_peak_bytes, "host_capacity_bytes": self.host_capacity_bytes,
                "margin_bytes": self.margin_bytes, "peak_stage": self.peak_stage, "allocator_peak_bytes": self.allocator_peak_bytes,
                "allocated_peak_bytes": self.allocated_peak_bytes,
                "stages": [s.as_dict() for s in self.stages],
                "activation_bytes_per_layer": dict(self.activation_bytes_per_layer)}


def parts_total(parts: dict[str, float]) -> int:
    """Bytes of a set of parts as the estimate reports them: each part in whole bytes, then added."""
    return sum(int(v) for v in parts.values())


def stage_static_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout) -> dict[str, float]:
    """Parts that depend only on where layers sit and how ZeRO shards: model states and ZeRO-3 gather buffers;
    and, where Megatron does not cache BF16 weights' FP8 copies (fp8.uncached_weight_copy_bytes_per_parameter,
    ZeRO-0 only), the copies each further micro-batch in flight saves."""
    params = stage_parameters(model, strategy, run.bf16_layers)[layout.stage]
    parts = model_state_bytes(run, strategy, params)
    parts["parameter_gather_buffers"] = _parameter_gather_bytes(model, run, strategy)
    uncached = uncached_weight_copy_bytes_per_parameter(run, strategy.zero)
    if uncached:
        parts["fp8_weight_copies"] = uncached * params.fp8_weights * max(0.0, _in_flight(strategy, layout) - 1)
    return parts


def _in_flight(strategy: Strategy, layout: StageLayout) -> float:
    """Micro-batches (in units of the whole stage) whose activations the stage holds at its peak."""
    return layout.in_flight_chunks / strategy.vpp


def _resident_activation_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout, kind: str,
                               mode: str) -> float:
    return _in_flight(strategy, layout) * layer_activation_bytes(model, run, kind, mode, Degrees.of_strategy(strategy))


def _with_fragmentation(activations: float) -> float:
    return activations + fragmentation_bytes(activations)


def resident_layer_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout, kind: str,
                         mode: str) -> float:
    """Bytes one body layer of (kind, recompute mode) costs this stage: its activations per micro-batch times the
    micro-batches in flight, plus the allocator fragmentation they bring (a fixed fraction, reserve.py), so that
    the linear coefficient of the per-layer recompute plans matches stage_dynamic_bytes."""
    return _with_fragmentation(_resident_activation_bytes(model, run, strategy, layout, kind, mode))


def resident_layer_table(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout,
                         keys: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], float]:
    """resident_layer_bytes of each (kind, mode) of `keys` on this stage, the same numbers at a fraction of the
    cost: the per-micro-batch bytes are shared by every stage and strategy with the same degrees."""
    in_flight = _in_flight(strategy, layout)
    per_microbatch = _per_layer_table(layer_activation_bytes, model, run, keys, Degrees.of_strategy(strategy))
    return {key: _with_fragmentation(in_flight * b) for key, b in per_microbatch.items()}


def host_offload_table(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout,
                       keys: tuple[tuple[str, str], ...]) -> dict[tuple[str, str], float]:
    """host_offload_bytes of one body layer of each (kind, mode) of `keys` on this stage (same numbers, shared
    per-micro-batch bytes as resident_layer_table)."""
    in_flight = _in_flight(strategy, layout)
    per_microbatch = _per_layer_table(offloaded_layer_bytes, model, run, keys, Degrees.of_strategy(strategy))
    return {key: in_flight * b for key, b in per_microbatch.items()}


@lru_cache(maxsize=32768)
def _per_layer_table(per_layer, model: ModelSpec, run: RunSpec, keys: tuple, degrees: Degrees) -> dict:
    """per_layer(model, run, kind, mode, degrees) for each (kind, mode) of `keys` (layer_activation_bytes or
    offloaded_layer_bytes; a cached dict: callers must not change it)."""
    return {(k, m): per_layer(model, run, k, m, degrees) for k, m in keys}


def stage_dynamic_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout,
                        counts: dict[tuple[str, str], int] | None = None) -> dict[str, float]:
    """Parts that depend on the micro-batch and recompute: in-flight activations, logits, recompute and backward
    workspace (one layer's, stage_layer_workspace), collective buffers and the reserve (reserve.py: context,
    workspaces, communicators, and fragmentation in proportion to the activations), and the pipeline runtime's held
    outputs and receive buffers where the trainer keeps them (pipeline_buffers.py), and Megatron's deferred
    output-layer weight gradients on the last stage (activations.deferred_wgrad_bytes). Independent of the ZeRO
    stage. `counts` ((kind, mode) -> body layers) defaults to the strategy's own plan; {} gives the parts that do not
    depend on the body layers."""
    degrees = Degrees.of_strategy(strategy)
    in_flight = _in_flight(strategy, layout)
    if counts is None:
        counts = dict(stage_mode_counts(model, strategy)[layout.stage])
    body = sum(n * _resident_activation_bytes(model, run, strategy, layout, kind, mode)
               for (kind, mode), n in counts.items())
    head = head_activation_bytes(model, run, degrees.tp, degrees.cp, degrees.mbs, degrees.sp)
    last = layout.holds_head
    activations = body + in_flight * ((head["embedding"] if layout.is_first else 0.0)
                                      + _bf16_layer_bytes(model, run, degrees, layout))
    if last:
        activations += head["output_inputs"]
        if model.mtp_depth:
            activations += model.mtp_depth * layer_activation_bytes(model, run, model.mtp_layer_kind, NO_RECOMPUTE,
                                                                    degrees)
    logits = head["logits"] * (1 + model.mtp_depth) if last else 0.0
    recompute, backward = _layer_workspace(model, run, strategy, layout, counts, logits)
    # the vision encoder's activations sit beside the embedding's (docs/models.md §5), a part of their own
    encoder = {"encoder_activations": in_flight * head["encoder"] if layout.is_first else 0.0} if model.encoder else {}
    # torch.distributed.pipelining's outputs and receive buffers (pipeline_buffers.py), a part where it holds any
    pipeline = pipeline_buffer_bytes(model, run, strategy, layout)
    # Megatron's deferred output-layer weight gradient (RunSpec.wgrad_deferral_limit; it needs pp > 1)
    deferred = deferred_wgrad_bytes(model, run, degrees.tp, degrees.cp, degrees.mbs, degrees.sp,
                                    strategy.mbn) if last and strategy.pp > 1 else 0.0
    return {
        "activations": activations,
        **encoder,
        **({"pipeline_buffers": pipeline} if pipeline else {}),
        **({"deferred_wgrad": deferred} if deferred else {}),
        "logits": logits,
        "recompute_workspace": recompute,
        **({"backward_workspace": backward} if backward else {}),
        "comm_buffers": _comm_buffer_bytes(model, run, strategy),
        **fixed_reserve_parts(run, strategy),
        "fragmentation": fragmentation_bytes(activations + sum(encoder.values())),
    }


def _bf16_layer_bytes(model: ModelSpec, run: RunSpec, degrees: Degrees, layout: StageLayout) -> float:
    """What the body layers kept in BF16 under fp8 (RunSpec.bf16_layers; fp8.bf16_layer_kinds: the first ones with
    the embedding, the last with the loss) save per micro-batch over the same layers in FP8: Transformer Engine
    saves an unquantized linear layer's input in BF16, not FP8 (activations.py at fp8.bf16_run). Without
    recompute: an upper bound where they are recomputed, whose larger re-run (BF16 inputs rematerialised, the
    recompute workspace's difference, not in the stage's workspace part) it covers once per micro-batch in flight.
    Unvalidated: no measured run keeps layers in BF16."""
    if not any(run.bf16_layers):
        return 0.0
    roles = ("first",) * layout.is_first + ("last",) * layout.holds_head
    bf16 = bf16_run(run)
    return sum(n * (layer_activation_bytes(model, bf16, kind, NO_RECOMPUTE, degrees)
                    - layer_activation_bytes(model, run, kind, NO_RECOMPUTE, degrees))
               for role in roles for kind, n in bf16_layer_kinds(model, run, role))


def _layer_workspace(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout,
                     counts: dict[tuple[str, str], int], logits: float) -> tuple[float, float]:
    """(recompute workspace, backward temporaries) the stage pays for its layer whose backward adds the most (one
    layer runs its backward at a time; stage_layer_workspace)."""
    paid = [stage_layer_workspace(model, run, strategy, layout, *key, logits) for key in counts]
    return max(paid, key=sum, default=(0.0, 0.0))


def stage_layer_workspace(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout, kind: str,
                          mode: str, logits: float) -> tuple[float, float]:
    """(recompute workspace, backward temporaries) a layer of (kind, mode) adds to the stage's peak while it runs
    its backward (activations.layer_workspace_bytes). The loss's logits peak (`logits`, at the start of the loss's
    backward) and a body layer's backward temporaries cannot coexist where the loss's backward of a micro-batch ends
    before any body layer's backward begins on this stage (no pipeline, or 1F1B without interleaving: the last
    stage runs F then B of one micro-batch); there the stage pays max(logits, temporaries), so the temporaries only
    beyond the logits (Schedule.loss_backward_alone). The recompute workspace is still added to the logits, as
    before (docs/formulas.md §5.5)."""
    degrees = Degrees.of_strategy(strategy)
    recompute = recompute_workspace_bytes(model, run, kind, mode, degrees)
    backward = backward_workspace_bytes(model, run, kind, degrees)
    if strategy.pp == 1 or schedule_named(strategy.schedule).loss_backward_alone:
        backward = max(0.0, backward - logits)
    return recompute, backward


def host_offload_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout,
                       counts: dict | None = None) -> float:
    """Host memory one device stage's offloaded activations take at its peak: each offloaded layer's moved bytes
    (what it would keep, less its input) for every in-flight micro-batch (docs/formulas.md §5.3)."""
    if counts is None:
        counts = dict(stage_mode_counts(model, strategy)[layout.stage])
    in_flight = _in_flight(strategy, layout)
    degrees = Degrees.of_strategy(strategy)
    return sum(n * in_flight * offloaded_layer_bytes(model, run, kind, mode, degrees)
               for (kind, mode), n in counts.items())


def _per_micro_batch_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout,
                           counts: dict[tuple[str, str], int]) -> float:
    """The stage's activations per in-flight micro-batch (those stage_dynamic_bytes multiplies by the in-flight
    count: its body layers, and the embedding's and the vision encoder's on the first stage)."""
    degrees = Degrees.of_strategy(strategy)
    body = sum(n * layer_activation_bytes(model, run, kind, mode, degrees) for (kind, mode), n in counts.items())
    if not layout.is_first:
        return body
    head = head_activation_bytes(model, run, degrees.tp, degrees.cp, degrees.mbs, degrees.sp)
    return body + head["embedding"] + (head["encoder"] if model.encoder else 0.0)


def _partly_held(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout) -> tuple[float, float]:
    """The stage's gathered-parameter and unsharded-gradient bytes held only part of the step (0, 0 where the
    trainer holds them all step: estimate/held_states.py)."""
    if not releases_states(run, strategy):
        return 0.0, 0.0
    params = stage_parameters(model, strategy)[layout.stage]
    return partly_held_bytes(run, strategy, params.dense + params.expert)


def unheld_states(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout,
                  counts: dict[tuple[str, str], int] | None = None) -> float:
    """Bytes of gathered parameters and unsharded gradients that the stage does not hold at its peak though
    model_state_bytes counts them for the whole step (estimate/held_states.py: torchtitan with PP); 0 otherwise."""
    parameters, gradients = _partly_held(model, run, strategy, layout)
    if not parameters and not gradients:
        return 0.0
    if counts is None:
        counts = dict(stage_mode_counts(model, strategy)[layout.stage])
    return unheld_state_bytes(strategy, layout, _per_micro_batch_bytes(model, run, strategy, layout, counts),
                              parameters, gradients)


def unheld_state_bound(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout,
                       extra_layers: int = 0) -> float:
    """An upper bound of unheld_states over every recompute plan and ZeRO stage of the strategy's degrees and
    micro-batches, and up to `extra_layers` more layers on the stage, for the solver, whose memory is linear in the
    plan and must stay a relaxation: the states not held grow with the activations and the states (each point of
    the order is a sum of them), so the bound takes every layer without recompute, the states of ZeRO-3, and per
    extra layer its in-flight activations and states."""
    heaviest = strategy.with_zero(3)
    parameters, gradients = _partly_held(model, run, heaviest, layout)
    if not parameters and not gradients:
        return 0.0
    kinds: dict[tuple[str, str], int] = {}
    for (kind, _), n in stage_mode_counts(model, strategy)[layout.stage]:
        kinds[(kind, NO_RECOMPUTE)] = kinds.get((kind, NO_RECOMPUTE), 0) + n
    per_micro_batch = _per_micro_batch_bytes(model, run, strategy, layout, kinds)
    bound = unheld_state_bytes(heaviest, layout, per_micro_batch, parameters, gradients)
    if not extra_layers:
        return bound
    heaviest_layer = max((layer_activation_bytes(model, run, kind, NO_RECOMPUTE, Degrees.of_strategy(strategy))
                          for kind, _ in kinds), default=0.0)
    per_layer = _in_flight(strategy, layout) * heaviest_layer + (parameters + gradients) / max(1, layout.layers)
    return bound + extra_layers * per_layer


def stage_memory(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout) -> StageMemory:
    """All parts of one device stage's peak, and the host memory its offloaded activations and optimizer take."""
    parts = {**stage_static_bytes(model, run, strategy, layout), **stage_dynamic_bytes(model, run, strategy, layout)}
    unheld = unheld_states(model, run, strategy, layout)
    if unheld:  # states released part of the step (held_states.py), a negative part
        parts["unheld_states"] = -unheld
    host = host_offload_bytes(model, run, strategy, layout) + host_optimizer_bytes(model, run, strategy, layout)
    return StageMemory(layout.stage, layout.layers, _in_flight(strategy, layout),
                       {k: int(v) for k, v in parts.items()}, int(host))


def _comm_buffer_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy) -> float:
    """Transient collective buffers: the SP all-gathered layer input and the EP all-to-all send/receive of routed
    tokens."""
    tokens = strategy.mbs * run.seq_len / strategy.cp
    B, h = run.activation_bytes, model.hidden
    buffers = B * tokens * h if strategy.sp else 0.0
    if model.moe is not None and strategy.ep > 1:
        buffers += 2 * B * tokens / (strategy.tp if strategy.sp else 1) * model.moe.top_k * h
    return buffers


def _parameter_gather_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy) -> float:
    """ZeRO-3 gathers each layer's parameters before use: two layers resident (current + prefetch).

    torchtitan (FSDP2): the root module (embedding, final norm, output) is not resharded after forward (fully_shard
    docs: the root's reshard_after_forward is set to False, its parameters being all-gathered again at once for
    backward), so with one pipeline stage its gathered copy stays resident too. Parameters kept gathered
    (trainers.data_parallel_sync: with PP in torchtitan) are already all counted in model_state_bytes."""
    if strategy.zero < 3 or data_parallel_sync(run, strategy.zero, strategy.pp).gathered_parameters:
        return 0.0
    layer = model.moe_layer or model.dense_layer
    blocks = 2 * run.param_bytes * (layer.per_tp_rank(strategy.tp) + layer.experts / (strategy.ep * strategy.etp))
    if not trainer_behaviour(run).keeps_root_gathered or strategy.pp > 1:
        return blocks
    vocab = model.vocab * model.hidden  # vocabulary-parallel embedding and output projection
    root = vocab / strategy.tp + (model.embedding_params - vocab) + (model.output_params - model.norm_params) \
        / strategy.tp + model.norm_params
    return blocks + run.param_bytes * root


@lru_cache(maxsize=4096)
def _majority_kind(model: ModelSpec) -> str:
    return "moe" if model.moe_layers > model.dense_layers else "dense"


def estimate_memory(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> MemoryEstimate:
    """Peak bytes per device stage and whether the worst one fits the capacity (device memory or the run's cap) at
    the run's confidence (estimate/confidence.py)."""
    stages = tuple(stage_memory(model, run, strategy, layout) for layout in stage_layouts(model, strategy))
    kind = _majority_kind(model)
    degrees = Degrees.of_strategy(strategy)
    per_layer = {mode: int(layer_activation_bytes(model, run, kind, mode, degrees)) for mode in RECOMPUTE_MODES}
    capacity = run.capacity(cluster.device.memory_bytes)
    return MemoryEstimate(capacity, stages, per_layer, cluster.device.host_memory_bytes,
                          plan_margin(model, cluster.device.name, run, strategy, capacity), run.confidence)


__all__ = ["estimate_memory", "MemoryEstimate", "StageMemory", "state_bytes_per_param", "model_state_bytes",
           "host_optimizer_bytes",
           "stage_static_bytes", "stage_dynamic_bytes", "resident_layer_bytes", "resident_layer_table",
           "host_offload_table", "parts_total", "stage_layer_workspace", "unheld_states", "unheld_state_bound"]
