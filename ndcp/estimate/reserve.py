"""The reserve: memory a training process holds besides the model's own tensors, in named physical parts.

docs/formulas.md §5.1 has the sources and the fit. Per device stage:

- cuda_context: the CUDA context with its lazily loaded kernels (outside PyTorch's caching allocator);
- workspaces: PyTorch's cuBLAS and cuBLASLt workspaces (allocated through the caching allocator);
- communicators: NCCL's per-channel protocol buffers for every process group the rank communicates in (outside the
  allocator);
- fragmentation: what the caching allocator reserves beyond its live tensors at the peak, one fitted fraction of the
  stage's activations (linear in them, so the solvers' per-layer activation coefficients carry it:
  estimate/memory.resident_layer_bytes).

`RunSpec.reserve_bytes`, when set (`--reserve SIZE`), replaces the first three with one measured "reserve" part;
fragmentation is still added.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..specs.run import RunSpec
from ..specs.strategy import Strategy
from ..specs.units import MIB
from .parameters import expert_data_parallel

# CUDA context with lazy module loading (default since PyTorch 1.13 / CUDA 11.7): "around 400MB" (docs/formulas.md
# §5.1: pytorch/pytorch#109888; #86509 measured 287 MB for a single kernel).
CUDA_CONTEXT_BYTES = 400_000_000
# cuBLAS workspace per handle and stream: 32 MiB recommended on Hopper (4 MiB before), the size PyTorch >= 2.3 uses
# (cuBLAS API reference, cublasSetWorkspace; pytorch/pytorch#120925); one cuBLAS and one cuBLASLt handle on the
# compute stream. The larger size is taken: the reserve does not know the device generation.
CUBLAS_WORKSPACE_BYTES = 32 * MIB
CUBLAS_HANDLES = 2
# NCCL buffers of one peer connection on one channel, one per protocol (NCCL 2.18-2.21 src/init.cc defaults):
# Simple = NCCL_BUFFSIZE (documented default 4 MiB), LL128 = 120 x 640 x 8 steps x 8 B, LL = 8 x 512 x 8 x 16 B.
NCCL_SIMPLE_BYTES = 4 * MIB
NCCL_LL128_BYTES = 120 * 640 * 8 * 8
NCCL_LL_BYTES = 8 * 512 * 8 * 16
NCCL_CONNECTION_BYTES = NCCL_SIMPLE_BYTES + NCCL_LL128_BYTES + NCCL_LL_BYTES  # 9,633,792 B per channel
NCCL_CHANNELS = 32  # channels NCCL opens per peer on NVLink H100s (NVIDIA/nccl#1685 logs 32)
RING_CONNECTIONS = 2  # a ring (or a pipeline neighbour pair) connects each rank to two peers (NVIDIA/nccl#864)
# Point-to-point (send/receive: the pipeline neighbours, the EP all-to-all) runs only the Simple protocol on a few
# channels per peer: NCCL_NCHANNELS_PER_NET_PEER, documented default 2 (NCCL environment variables). Charging the 32
# collective channels per all-to-all peer would put 9.5 GB on an EP-32 rank.
P2P_CHANNELS_PER_PEER = 2
# Caching-allocator fragmentation: ONE fraction of the stage's activation bytes, fitted to the only two published
# runs with a measured allocator peak (docs/formulas.md §5.1; it splits their residuals evenly).
FRAGMENTATION_FRACTION = 0.27
# Parts the caching allocator does not see: torch.cuda.max_memory_reserved (what torchtitan and NeMo log) excludes them.
OUTSIDE_ALLOCATOR = ("cuda_context", "communicators")


@dataclass(frozen=True)
class ProcessGroup:
    """One NCCL communicator a rank uses: its name, its ranks and the peer connections each rank keeps in it."""

    name: str
    size: int
    connections: int
    point_to_point: bool = False  # send/receive (Simple protocol, P2P_CHANNELS_PER_PEER), else ring collectives

    @property
    def bytes(self) -> int:
        if self.point_to_point:
            return P2P_CHANNELS_PER_PEER * self.connections * NCCL_SIMPLE_BYTES
        return NCCL_CHANNELS * self.connections * NCCL_CONNECTION_BYTES


def process_groups(strategy: Strategy) -> tuple[ProcessGroup, ...]:
    """The communicators a rank of this strategy communicates in (groups of one rank need none).

    tp, cp: ring collectives (2 connections); dp: the gradient / ZeRO ring over dp x cp ranks (where memory.py shards
    the states), under HSDP over the dp_shard x cp ranks of the shard group, with `dp_replicate`, the all-reduce
    ring across the dp / dp_shard replicas, beside it (FSDP2 on a 2-D mesh and Megatron FSDP's outer group: one
    communicator per mesh dimension; docs/formulas.md §7.3); etp and edp (expert-data-parallel): the expert
    tensor-parallel and expert-gradient rings of MoE models; pp: send/receive with the two neighbours; ep: the token
    all-to-all, send/receive with each of the ep - 1 peers. Shared by the strategies with the same degrees (every
    memory estimate asks, often)."""
    s = strategy
    return _process_groups(s.tp, s.cp, s.dp, s.pp, s.ep, s.etp, expert_data_parallel(s), s.shard_ranks)


@lru_cache(maxsize=65536)
def _process_groups(tp: int, cp: int, dp: int, pp: int, ep: int, etp: int, edp: int,
                    shard: int) -> tuple[ProcessGroup, ...]:
    rings = [("tp", tp), ("cp", cp), ("dp", shard * cp), ("dp_replicate", dp // shard)]
    if ep > 1:
        rings += [("etp", etp), ("edp", edp)]
    groups = [ProcessGroup(name, size, RING_CONNECTIONS) for name, size in rings if size > 1]
    if pp > 1:
        groups.append(ProcessGroup("pp", pp, RING_CONNECTIONS, point_to_point=True))
    if ep > 1:
        groups.append(ProcessGroup("ep", ep, ep - 1, point_to_point=True))
    return tuple(groups)


def communicator_bytes(strategy: Strategy) -> int:
    """NCCL buffers of every process group the rank is in (cached with the groups: every stage's memory asks)."""
    s = strategy
    return _communicator_bytes(s.tp, s.cp, s.dp, s.pp, s.ep, s.etp, expert_data_parallel(s), s.shard_ranks)


@lru_cache(maxsize=65536)
def _communicator_bytes(*degrees: int) -> int:
    return sum(g.bytes for g in _process_groups(*degrees))


def fixed_reserve_parts(run: RunSpec, strategy: Strategy) -> dict[str, float]:
    """The parts that do not depend on the micro-batch or recompute: the modelled context, workspaces and
    communicators, or the run's measured reserve in their place."""
    if run.reserve_bytes is not None:
        return {"reserve": float(run.reserve_bytes)}
    return {"cuda_context": float(CUDA_CONTEXT_BYTES),
            "workspaces": float(CUBLAS_HANDLES * CUBLAS_WORKSPACE_BYTES),
            "communicators": float(communicator_bytes(strategy))}


def fragmentation_bytes(activation_bytes: float) -> float:
    """The caching allocator's fragmentation at the peak: a fixed fraction of the activations (linear)."""
    return FRAGMENTATION_FRACTION * activation_bytes


def reserve_parts(run: RunSpec, strategy: Strategy, activation_bytes: float) -> dict[str, float]:
    """Every reserve part of one device stage whose activations take `activation_bytes`."""
    return {**fixed_reserve_parts(run, strategy), "fragmentation": fragmentation_bytes(activation_bytes)}


__all__ = ["CUDA_CONTEXT_BYTES", "CUBLAS_WORKSPACE_BYTES", "CUBLAS_HANDLES", "NCCL_CONNECTION_BYTES",
           "NCCL_SIMPLE_BYTES", "NCCL_CHANNELS", "FRAGMENTATION_FRACTION", "OUTSIDE_ALLOCATOR",
           "P2P_CHANNELS_PER_PEER", "ProcessGroup", "process_groups", "communicator_bytes", "fixed_reserve_parts",
           "fragmentation_bytes", "reserve_parts"]
