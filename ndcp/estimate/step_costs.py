"""Work a training step does once, whatever its micro-batch count, besides the optimizer's update of the local
shard (docs/formulas.md §8.1): what the step does over the local parameters, and the step's scalar synchronisations
across all devices. The optimizer update itself and its gradient-norm pass over the shard are priced with it
(estimate/data_parallel.py `_optimizer_bytes_per_parameter`); the pipeline's fill and drain are the schedule's
bubble (ndcp/schedules).
"""
from __future__ import annotations

from ..specs.device import ClusterSpec
from ..specs.run import RunSpec
from .communication import few_byte_all_reduce_seconds
from .compute import memory_seconds
from .fp8 import step_weight_cast_seconds

# Scalar all-reduces across every device each step: the global gradient norm of gradient clipping (Megatron-Core
# optimizer/clip_grads.py get_grad_norm_fp32: the squared norms of the local shards summed over the whole job)
# and the loss averaged over the data-parallel ranks for the step's report (megatron/training/training.py
# train_step, the loss reduction of the last pipeline stage). Each a few bytes: latency-bound, as NCCL prices it
# (communication.few_byte_all_reduce_seconds over the job's consecutive ranks).
STEP_SCALAR_SYNCS = 2


def gradient_buffer_seconds(run: RunSpec, cluster: ClusterSpec, local_parameters: float) -> float:
    """Zeroing the gradient buffer of every local parameter at the start of a step (Megatron-Core
    DistributedDataParallel.zero_grad_buffer, called by train_step before the first micro-batch), in the gradient
    dtype at HBM bandwidth. Trainers that drop the gradients instead (PyTorch zero_grad(set_to_none=True)) let the
    first micro-batch write them rather than accumulate: the same traffic, so it is priced for every trainer."""
    return memory_seconds(local_parameters * run.grad_bytes, cluster.device)


def step_cost_seconds(run: RunSpec, cluster: ClusterSpec, local_parameters: float, cast_weights: float,
                      devices: int) -> float:
    """The step's fixed work on one device of a stage holding `local_parameters` parameters, `cast_weights` of them
    the weights of its FP8 GEMMs (parameters.StageParameters.fp8_weights), in a job of `devices` devices: the
    gradient buffer's zeroing, the FP8 weights' casts Transformer Engine does once a step
    (fp8.step_weight_cast_seconds) and the scalar synchronisations."""
    return (gradient_buffer_seconds(run, cluster, local_parameters)
            + step_weight_cast_seconds(run, cluster.device, cast_weights)
            + STEP_SCALAR_SYNCS * few_byte_all_reduce_seconds(cluster, devices))


__all__ = ["STEP_SCALAR_SYNCS", "gradient_buffer_seconds", "step_cost_seconds"]
