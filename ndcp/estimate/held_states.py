"""Model states a pipeline stage holds for only part of the step: FSDP2's unsharded gradients and gathered
parameters under torch.distributed.pipelining (torchtitan with PP; docs/formulas.md §5.5).

With pipeline parallelism torchtitan keeps each model chunk's parameters gathered from its first forward
(torchtitan 0.3.0 distributed/fsdp.py get_fsdp_reshard_after_forward_policy: "default" -> not pp_enabled; at
9dec370, the rows' version, parallelize_llama.apply_fsdp: reshard_after_forward=False when pp_enabled) and
accumulates unsharded gradients over the micro-batches (stage.py backward_maybe_with_nosync:
set_requires_gradient_sync(False)). Read at torch 2.13 (the rows' torch 1963fc8 not read):
- the unsharded gradient of a parameter is created by its chunk's first backward (autograd, then FSDPParam
  .to_accumulated_grad_if_needed casts it to the fp32 reduce dtype, fsdp/_fully_shard/_fsdp_param.py);
- after the chunk's last backward its gradients are reduce-scattered, the unsharded ones dropped
  (FSDPParamGroup.post_backward: unsharded_accumulated_grad = None) and its parameters resharded
  (set_reshard_after_backward(True)): stage.py perform_reduce_grad, which schedules.py _add_reduce_grad places "just
  after the last backward" of each stage ("reduce_grad frees memory").
So a chunk's gathered parameters live from its first forward to its last backward and its unsharded gradients from
its first backward to its last; the estimate holds both for the whole step. The stage's peak is the largest, over
the schedule's order (Schedule.step_order), of the live chunks' activations plus the states held then. The gradient
shard is held throughout (torchtitan 0.3.0 train_step: zero_grad(set_to_none=False) by default keeps it).
The chunks' activations are taken as the estimate takes them (each chunk 1/vpp of the stage's in-flight
activations); each chunk's states in proportion to its layers (the embedding and output head are not apportioned
to their chunk)."""
from __future__ import annotations

from functools import lru_cache

from ..schedules import schedule_named
from ..specs.run import RunSpec
from ..specs.strategy import Strategy
from .layout import StageLayout
from .trainers import data_parallel_sync, trainer_behaviour


def releases_states(run: RunSpec, strategy: Strategy) -> bool:
    """Whether the stages hold gathered parameters or an unsharded gradient buffer for part of the step only: the
    trainer's pipeline holds them over the step (torchtitan; Megatron's gradient buffer is allocated once) and the
    ZeRO stage has them (data_parallel_sync)."""
    if strategy.pp == 1 or not trainer_behaviour(run).pipeline_holds_step:
        return False
    sync = data_parallel_sync(run, strategy.zero, strategy.pp)
    return sync.gathered_parameters or sync.full_grad_buffer


def partly_held_bytes(run: RunSpec, strategy: Strategy, params: float) -> tuple[float, float]:
    """(gathered parameters, unsharded gradient buffer) of a stage of `params` parameters that the pipeline
    runtime releases part of the step: the parts of model_state_bytes that data_parallel_sync adds; (0, 0) where
    releases_states is False."""
    if not releases_states(run, strategy):
        return 0.0, 0.0
    sync = data_parallel_sync(run, strategy.zero, strategy.pp)
    return (run.param_bytes * params if sync.gathered_parameters else 0.0,
            run.grad_bytes * params if sync.full_grad_buffer else 0.0)


def unheld_state_bytes(strategy: Strategy, layout: StageLayout, per_micro_batch: float, parameters: float,
                       gradients: float) -> float:
    """Bytes the stage's peak is below (its in-flight activations + all `parameters` and `gradients` held): the
    least, over the step order, of what is not held at each point. `per_micro_batch`: the stage's activations per
    in-flight micro-batch (all its chunks); `parameters`, `gradients`: partly_held_bytes. 0 when nothing is partly
    held or the schedule states no order."""
    if (not parameters and not gradients) or not layout.layers:
        return 0.0
    shares = tuple(n / layout.layers for _, n in layout.chunks)
    points = _order_points(strategy.schedule, layout.stage, strategy.pp, strategy.vpp, strategy.mbn, shares,
                           layout.in_flight_chunks)
    if not points:
        return 0.0
    least = min(fewer * per_micro_batch / strategy.vpp + (1 - p) * parameters + (1 - g) * gradients
                for fewer, p, g in points)
    return max(0.0, least)


@lru_cache(maxsize=4096)
def _order_points(schedule: str, stage: int, pp: int, vpp: int, mbn: int, shares: tuple[float, ...],
                  peak_live: float) -> tuple[tuple[float, float, float], ...]:
    """The distinct points of the stage's step order after each op (before a chunk's last backward releases its
    states): (chunks fewer than the in-flight peak, share of the parameters held, share of the gradients held);
    () where the schedule states no order."""
    order = schedule_named(schedule).step_order(stage, pp, vpp, mbn)
    if order is None:
        return ()
    live, forwards, backwards = 0, [0] * vpp, [0] * vpp
    held = {"F": 0.0, "B": 0.0}  # shares of the parameters (from a chunk's first forward) and gradients held
    points = set()
    for kind, chunk in order:
        live += 1 if kind == "F" else -1
        done = forwards if kind == "F" else backwards
        if not done[chunk]:
            held[kind] += shares[chunk]
        done[chunk] += 1
        points.add((peak_live - live, held["F"], held["B"]))
        if kind == "B" and backwards[chunk] == mbn:  # reduce-scattered and resharded
            forwards[chunk] = backwards[chunk] = 0
            held["F"] -= shares[chunk]
            held["B"] -= shares[chunk]
    return tuple(sorted(points))


__all__ = ["releases_states", "partly_held_bytes", "unheld_state_bytes"]
