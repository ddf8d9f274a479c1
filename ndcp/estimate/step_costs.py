"""Work a training step does once, whatever its micro-batch count, besides the optimizer's update of the local
shard (docs/formulas.md §8.1): what the step does over every local parameter, and the step's scalar synchronisations
across all devices. The optimizer update itself and its gradient-norm pass over the shard are priced with it
(estimate/data_parallel.py `_optimizer_bytes_per_parameter`); the pipeline's fill and drain are the schedule's
bubble (ndcp/schedules).
"""
from __future__ import annotations

import math

from ..specs.device import ClusterSpec
from ..specs.run import RunSpec
from .compute import memory_seconds

# Scalar all-reduces across every device each step: the global gradient norm of gradient clipping (Megatron-Core
# optimizer/clip_grads.py get_grad_norm_fp32: the squared norms of the local shards summed over the whole job)
# and the loss averaged over the data-parallel ranks for the step's report (megatron/training/training.py
# train_step, the loss reduction of the last pipeline stage).
STEP_SCALAR_SYNCS = 2


def tree_all_reduce_latency(cluster: ClusterSpec, devices: int) -> float:
    """A latency-bound all-reduce of a few bytes over `devices` devices: NCCL's tree algorithm, up a tree and back
    down (NCCL src/graph/tuning.cc: tree latency grows with the tree's depth), log2 hops across the scale-up
    domains and log2 inside one, at the per-hop latencies of the device (DeviceSpec inter/intra_node_latency)."""
    if devices <= 1:
        return 0.0
    device = cluster.device
    per_domain = min(devices, cluster.domain_ranks)
    domains = -(-devices // per_domain)
    return 2 * (math.ceil(math.log2(domains)) * device.inter_node_latency
                + math.ceil(math.log2(per_domain)) * device.intra_node_latency)


def gradient_buffer_seconds(run: RunSpec, cluster: ClusterSpec, local_parameters: float) -> float:
    """Zeroing the gradient buffer of every local parameter at the start of a step (Megatron-Core
    DistributedDataParallel.zero_grad_buffer, called by train_step before the first micro-batch), in the gradient
    dtype at HBM bandwidth. Trainers that drop the gradients instead (PyTorch zero_grad(set_to_none=True)) let the
    first micro-batch write them rather than accumulate: the same traffic, so it is priced for every trainer."""
    return memory_seconds(local_parameters * run.grad_bytes, cluster.device)


def step_cost_seconds(run: RunSpec, cluster: ClusterSpec, local_parameters: float, devices: int) -> float:
    """The step's fixed work on one device of a stage holding `local_parameters` parameters, in a job of
    `devices` devices: the gradient buffer's zeroing and the scalar synchronisations."""
    return (gradient_buffer_seconds(run, cluster, local_parameters)
            + STEP_SCALAR_SYNCS * tree_all_reduce_latency(cluster, devices))


__all__ = ["STEP_SCALAR_SYNCS", "tree_all_reduce_latency", "gradient_buffer_seconds", "step_cost_seconds"]
