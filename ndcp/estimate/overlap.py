"""Communication overlapped with compute: which overlaps a strategy runs, and how much of a collective each hides.

Each overlap has the condition its trainer checks before enabling it (docs/formulas.md §7.1):
- "ep", the MoE token all-to-all hidden behind another micro-batch's compute: DualPipe / DualPipe-V pair a forward
  chunk with a backward chunk of another micro-batch by construction (DeepSeek-V3 §3.2.1); Megatron-Core's
  --overlap-moe-expert-parallel-comm does the same in its combined 1F1B schedule and needs ep > 1 and, with pp > 1,
  the interleaved schedule (TransformerConfig.__post_init__), and neither full recompute nor the "moe" recompute
  module: a layer that re-runs its forward or its MoE block (with the all-to-alls) in the backward keeps its
  all-to-alls exposed.
- "tp", Transformer Engine's userbuffers (--tp-comm-overlap): each sequence-parallel all-gather / reduce-scatter
  split into chunks pipelined with its GEMM; needs tp > 1 and sequence parallelism (Megatron-LM arguments.py). It is
  not free: its SM-based methods (pipeline, bulk) hold `num_sm` of the device's SMs beside the GEMM, and the split
  GEMMs run as smaller GEMMs (tp_overlapped, priced at TE's initialize_ub defaults; Megatron-Bridge's per-model
  userbuffers_* configs, src/megatron/bridge/training/comm_overlap.py @21d102f5e, hold fewer SMs on H100 FP8).
- "p2p", the pipeline sends overlapped with the next chunk's compute: Megatron's --overlap-p2p-communication,
  which Megatron-LM enables by default and turns off without interleaving (arguments.py); DualPipe's own.
The run says which overlaps the trainer is asked for (RunSpec.overlap; "trainer": its defaults,
TrainerBehaviour.default_overlaps in specs/trainer_behaviour.py); a schedule's own (Schedule.hides) always apply.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ..schedules import schedule_named
from ..specs.recompute import LAYER_FORWARD, MOE_FORWARD, recompute_option
from ..specs.run import RunSpec
from .trainers import trainer_behaviour

NO_OVERLAP: frozenset = frozenset()
HIDDEN_KEYS = ("tp_comm", "ep_comm", "pp_comm")  # TimeEstimate.hidden, the JSON `hidden_comm`


def requested(run: RunSpec) -> frozenset:
    """The overlaps the run asks the trainer for (RunSpec.overlap resolved)."""
    return asked_overlaps(run.overlap, trainer_behaviour(run).default_overlaps)


def asked_overlaps(overlap: str, trainer_default: frozenset) -> frozenset:
    """The overlaps a RunSpec.overlap value asks for: the trainer's defaults for "trainer", none for "none"."""
    if overlap == "trainer":
        return trainer_default
    return NO_OVERLAP if overlap == "none" else frozenset(overlap.split("+"))


@lru_cache(maxsize=65536)
def hidden_comms(run: RunSpec, schedule: str, pp: int, vpp: int, tp: int, sp: bool, ep: int) -> frozenset:
    """The overlaps a strategy runs: the schedule's own, plus each requested one whose condition holds."""
    asked = requested(run)
    out = set(schedule_named(schedule).hides)
    if "ep" in asked and (pp == 1 or vpp > 1):
        out.add("ep")
    if "tp" in asked and sp:
        out.add("tp")
    if "p2p" in asked and vpp > 1:
        out.add("p2p")
    present = {"ep": ep > 1, "tp": tp > 1, "p2p": pp > 1}
    return frozenset(k for k in out if present[k])


def strategy_overlaps(run: RunSpec, strategy) -> frozenset:
    """hidden_comms of a whole strategy."""
    s = strategy
    return hidden_comms(run, s.schedule, s.pp, s.vpp, s.tp, s.sp, s.ep)


LAYER_OVERLAPS = frozenset({"tp", "ep"})  # the overlaps inside a body layer ("p2p" is between stages)


def layer_overlaps(hidden: frozenset, kind: str, mode: str) -> frozenset:
    """The overlaps that apply to one body layer: TP's, and the all-to-all only on MoE layers that do not re-run
    their forward or their MoE block (with its dispatch and combine) in the backward. Only these, so the layer
    times cached by them are shared by strategies that differ in the others (Megatron overlaps the pipeline sends
    only when interleaving: the same layers with and without)."""
    hidden = hidden & LAYER_OVERLAPS
    if "ep" in hidden and (kind != "moe" or {LAYER_FORWARD, MOE_FORWARD} & set(recompute_option(mode).reruns)):
        return hidden - {"ep"}
    return hidden


class UbMethod(NamedTuple):
    """How Transformer Engine's userbuffers overlaps one collective with its GEMM (initialize_ub, module docstring):
    `num_sm` SMs its communication kernels hold (0: copy engines), whether the GEMM is launched on the SMs left
    (`set_sm_margin`) for its whole run, and the chunks the GEMM is split into (0: one per TP rank; 1: not split)."""

    method: str
    num_sm: int
    set_sm_margin: bool
    num_splits: int


# the split GEMMs run on up to 3 compute streams at once: initialize_ub passes num_max_streams=_NUM_MAX_UB_STREAMS
# = 3 (TE v2.9 transformer_engine/pytorch/module/base.py @70f5366; v2.12 pytorch/cpp_extensions/gemm.py @5671fd3)
# and CommOverlapCore::initialize makes min(num_max_streams, num_splits) of them (common/comm_gemm_overlap/
# comm_gemm_overlap.cpp): their tiles share the waves
UB_COMPUTE_STREAMS = 3

# TE v2.8 - v2.12 initialize_ub defaults (transformer_engine/pytorch/module/base.py @40c69e7 / @70f5366 / @5671fd3,
# `methods` and `default_cfg`): ring_exchange for qkv/fc1 fprop and proj/fc2 dgrad (point-to-point copies on the copy
# engines, use_ce=True: no SM held; tp_size splits), pipeline for proj/fc2 fprop (num_sm 16, set_sm_margin, 4
# splits), bulk for qkv/fc1 dgrad and wgrad (num_sm 16, the collective beside one unsplit GEMM).
RING_EXCHANGE = UbMethod("ring_exchange", 0, False, 0)
PIPELINE = UbMethod("pipeline", 16, True, 4)
BULK = UbMethod("bulk", 16, False, 1)


def sm_held(held_sms: int, sms: int) -> float:
    """The share of a device's `sms` SMs that communication kernels holding `held_sms` of them take from the compute
    beside them while they run (each of their CTAs holds a whole SM: NCCL's channels, data_parallel.NCCL_SMS;
    userbuffers' `num_sm`; the EP dispatch kernels' blocks, EP_COMM_SMS), all of them at most."""
    return min(1.0, held_sms / sms) if sms > 0 else 1.0


def beside_seconds(compute: float, comm: float, held: float) -> float:
    """Wall seconds of `compute` seconds of kernels with `comm` seconds of communication beside them on the other
    stream, the communication holding `held` of what the compute needs (sm_held; the data-parallel overlap's last
    bucket and HBM share too, DataParallelTerms.unhidden): the compute runs at 1 - held of its throughput while the
    communication runs, at full throughput after it, and the pair ends when both have: max(comm, compute + held x
    comm) (when the compute would end first, at compute / (1 - held) <= comm, the communication's end is the wall).
    The one statement of SM sharing: userbuffers' pairs without an SM margin (ub_pair_seconds), the EP all-to-alls
    (ep_overlapped) and the data-parallel collectives (data_parallel._exposed)."""
    return max(comm, compute + held * comm)


def ub_pair_seconds(comm: float, gemm: float, chunked: float, method: UbMethod, sms: int, tp: int) -> float:
    """Wall seconds of one collective of `comm` seconds overlapped with its GEMM (`gemm` seconds unsplit on all
    `sms` SMs, `chunked` split as `method` splits it): the GEMM runs on the SMs the communication leaves it, at
    (sms - num_sm) / sms of its throughput for its whole run under set_sm_margin, else only while the collective
    runs; a split pair is a two-stage pipeline of equal chunks, so the first chunk's GEMM or the last chunk's
    transfer runs alone (max + min / splits). Never less than the collective, nor than the GEMM at the SMs left (a
    margin of every SM leaves the GEMM none: it runs after the collective)."""
    splits = tp if method.num_splits == 0 else method.num_splits
    g = chunked if splits > 1 else gemm
    held = sm_held(method.num_sm, sms)
    if method.set_sm_margin and held < 1.0:
        g = g / (1.0 - held)
        wall = max(comm, g)
    else:
        wall = beside_seconds(g, comm, held)
    return wall + (min(comm, g) / splits if splits > 1 else 0.0)


class UbBlock(NamedTuple):
    """One tensor-parallel block of a layer (its mixer, or its MLP) as userbuffers pairs it, seconds on one device:
    `gather`, one all-gather of its sequence-parallel input (the output gradient's in the backward moves the same
    bytes); `scatter`, one reduce-scatter of its output (the input gradient's likewise); its column-parallel and its
    row-parallel GEMMs' (forward, input gradient, weight gradient) seconds; and those that userbuffers splits, as
    split: the column-parallel forward into tp chunks (ring exchange), the row-parallel forward into 4 (pipeline),
    the row-parallel input gradient into tp (ring exchange)."""

    gather: float
    scatter: float
    column: tuple[float, float, float]
    row: tuple[float, float, float]
    column_forward_split: float
    row_forward_split: float
    row_backward_split: float


def _exposed(comm: float, gemm: float, split: float, method: UbMethod, sms: int, tp: int) -> float:
    """What one pair takes beyond its GEMM alone."""
    return max(0.0, ub_pair_seconds(comm, gemm, split, method, sms, tp) - gemm)


def tp_overlapped(blocks: tuple[UbBlock, ...], sms: int, tp: int) -> tuple[float, float]:
    """Exposed (forward, backward) TP seconds of a layer under userbuffers (TE defaults above): what its overlapped
    GEMM pairs take beyond the GEMMs alone, each collective beside the GEMM of its own block that TE pairs it with
    (initialize_ub's layer names, TE v2.12 pytorch/module/base.py @5671fd3: qkv_fprop, proj_fprop, ...). Forward:
    the input all-gather with the column-parallel GEMMs (ring exchange), the output reduce-scatter with the
    row-parallel ones (pipeline); backward: the output-gradient all-gather with the row-parallel input gradients
    (ring exchange), the re-gather of the saved input with the column-parallel input gradients (`qkv_dgrad` /
    `fc1_dgrad`, bulk) and the input-gradient reduce-scatter with their weight gradients (`*_wgrad`, bulk).
    A block whose GEMMs are shorter than its collectives (the attention block at tp 8: hidden 8,192 over 8 ranks)
    leaves the difference exposed, whatever the other block could have hidden. Overlap can cost more than the
    collectives it hides (split GEMMs, SMs held): with little to hide a layer is slower than with its collectives
    exposed."""
    forward = backward = 0.0
    for b in blocks:
        forward += (_exposed(b.gather, b.column[0], b.column_forward_split, RING_EXCHANGE, sms, tp)
                    + _exposed(b.scatter, b.row[0], b.row_forward_split, PIPELINE, sms, tp))
        backward += (_exposed(b.gather, b.row[1], b.row_backward_split, RING_EXCHANGE, sms, tp)
                     + _exposed(b.gather, b.column[1], b.column[1], BULK, sms, tp)
                     + _exposed(b.scatter, b.column[2], b.column[2], BULK, sms, tp))
    return forward, backward


def sp_backward_exposed(pairs: float, linear: float, asynchronous: bool) -> float:
    """Exposed backward seconds of a layer's sequence-parallel TP traffic without userbuffers (docs/formulas.md §7).
    `pairs`: its all-gather + reduce-scatter pairs' seconds, as in the forward (half each); `linear`: the GEMMs those
    collectives serve, one pass, each of the column-parallel layers' input- and weight-gradient GEMMs taken as half
    of it (as tp_overlapped takes them). Megatron (`asynchronous`, TrainerBehaviour.sp_backward_async): the
    row-parallel layers' output gradients are all-gathered before their input gradients and waited on (Megatron-LM
    core/tensor_parallel/mappings.py @d98e8a6 _ReduceScatterToSequenceParallelRegion.backward): exposed, half of
    `pairs`; each column-parallel layer re-gathers its saved input shard behind its input-gradient GEMM and
    reduce-scatters its input gradient behind its weight-gradient GEMM (layers.py @d98e8a6
    LinearWithGradAccumulationAndAsyncCommunication.backward): what outlasts them. Without (DTensor): all of it
    exposed, nothing re-gathered. Never less than the output-gradient all-gathers."""
    half = pairs / 2
    if not asynchronous:
        return pairs
    return half + 2.0 * max(0.0, half - linear / 2)


class MoEPasses(NamedTuple):
    """One MoE layer's compute for one micro-batch, seconds, split where Megatron-Core's EP overlap splits it: the
    pre-dispatch part (attention, norm, router) and the MLP part (the experts), forward and backward (input and
    weight gradients); of each backward, its weight gradients (`*_weight_gradient`, part of it: what
    delay_wgrad_compute runs apart, ep_overlapped)."""

    attention_forward: float
    attention_backward: float
    mlp_forward: float
    mlp_backward: float
    attention_weight_gradient: float = 0.0
    mlp_weight_gradient: float = 0.0

    def compute(self) -> float:
        """The four passes' seconds (the weight gradients are inside the backwards)."""
        return self.attention_forward + self.attention_backward + self.mlp_forward + self.mlp_backward


# SMs the EP all-to-all kernels hold while they run: the flex dispatcher's HybridEP dispatch and combine kernels
# take 32 blocks, one per SM, when the EP group sits in one NVLink domain (8 across domains; DeepEP
# deep_ep/hybrid_ep_buffer.py @098da2a HybridEPBuffer.__init__, num_sms_dispatch_api / num_sms_combine_api, which
# Megatron-Core leaves at None: moe_flex_dispatcher_num_sms, transformer_config.py @d98e8a6); its DeepEP backend's
# normal kernels 20 (token_dispatcher.py @d98e8a6 _DeepepManager, Buffer.set_num_sms); the alltoall dispatcher's NCCL
# send/receive kernels one CTA per p2p channel, min(nChannels, NCCL_MAX_P2P_NCHANNELS) (NCCL src/graph/paths.cc
# ncclTopoComputeP2pChannels; nChannels is the topology search's). Megatron-Bridge's Qwen3-30B-A3B 16-H100 recipe sets
# moe_hybridep_num_sms = 32 (recipes/qwen/h100/qwen3_moe.py @04eb4f8d). ndcp does not tell the flex backends apart: 32
# for every dispatcher, the largest (conservative for DeepEP; unvalidated for NCCL).
EP_COMM_SMS = 32


def _phase_compute(passes: MoEPasses, delay_wgrad: bool) -> tuple[float, float, float, float]:
    """The compute beside each all-to-all of ep_overlapped's phases, in order: the combine backward's, the dispatch
    forward's, the dispatch backward's, the combine forward's. Megatron's default: the attention forward, the MLP's
    whole backward, the MLP forward, the attention backward.
    Under delay_wgrad_compute (TransformerConfig; model_chunk_schedule_plan.py @d98e8a6 TransformerLayerSchedulePlan.
    run issues `b_layer.mlp.backward_dw()` after `f_layer.moe_dispatch.forward` and before `b_layer.moe_dispatch.
    backward`, and `pre_dispatch_computation.backward_dw()` last) the MLP and the attention record their event after
    their input gradients: TransformerLayerNode.backward_dw (models/common/utils.py @d98e8a6) runs the weight
    gradients on the node's stream outside ScheduleNode.stream_acquire_context, recording nothing. So the dispatch
    backward waits only for the MLP's input gradient; the MLP's weight gradient is issued by the host after the
    dispatch forward returns, and the flex dispatcher's dispatch forward blocks the host until its kernel ends
    (HybridEP's dropless tokens_per_expert copy, DeepEP's receive counts: ep_overlapped), so it starts with the
    dispatch backward and runs before the MLP forward, beside it. The attention's weight gradient follows its input
    gradient, after the combine forward's event: the next layer's combine backward waits on that event only, so it
    runs beside the next layer's attention forward (the same average layer: this one's phase). Conservative for the
    alltoall dispatcher, whose host sync comes before the dispatch forward (its weight gradient could start earlier),
    and for the attention's weight gradient, taken to start only when the combine forward ends."""
    p = passes
    if not delay_wgrad:
        return p.attention_forward, p.mlp_backward, p.mlp_forward, p.attention_backward
    mlp_w = min(p.mlp_weight_gradient, p.mlp_backward)
    attention_w = min(p.attention_weight_gradient, p.attention_backward)
    return (attention_w + p.attention_forward, p.mlp_backward - mlp_w, mlp_w + p.mlp_forward,
            p.attention_backward - attention_w)


def ep_overlapped(all_to_all: float, passes: MoEPasses, held: float = 0.0,
                  delay_wgrad: bool = False) -> tuple[float, float]:
    """Exposed (forward, backward) seconds of a MoE layer's four all-to-alls of `all_to_all` seconds each (dispatch
    and combine, each way) when one micro-batch's forward of the layer runs with another's backward of it, as
    Megatron-Core schedules them (--overlap-moe-expert-parallel-comm; model_chunk_schedule_plan.py @d98e8a6
    TransformerLayerSchedulePlan.run), in three phases of two streams:

        communication: combine backward   | dispatch forward, dispatch backward | combine forward
        computation:   attention forward  | MLP backward, MLP forward           | attention backward

    What orders them (pipeline_parallel/utils.py @d98e8a6): each node waits on its micro-batch's one CUDA event,
    recorded when its previous node ends (ScheduleNode.stream_acquire_context), and each stream runs in issue order.
    So a phase starts when both streams finished the last; the dispatch backward waits for the MLP's whole backward
    (the node records its event after the autograd backward, weight gradients included) and starts with the MLP
    forward, which waits for the dispatch forward. Under `delay_wgrad` (RunSpec.delay_wgrad_compute) the weight
    gradients move (_phase_compute): the MLP's from beside the dispatch forward to beside the dispatch backward, the
    attention's from beside the combine forward to beside the next combine backward. Where the host blocks without
    it, it only delays work issued after the dispatch forward that waits for it anyway, so it costs nothing here:
    HybridEP's dropless dispatch (num_permuted_tokens None: non_blocking False, transformer/moe/fused_a2a.py @d98e8a6
    HybridEPDispatch) copies tokens_per_expert to the host after its dispatch kernel (DeepEP csrc/hybrid_ep/executor/
    executor.cu @0237ba6 dispatch_postprocess), DeepEP's normal dispatch waits for its receive counts (FusedDispatch),
    the alltoall dispatcher syncs its split sizes after the attention's preprocessing (token_dispatcher.py @d98e8a6
    _maybe_dtoh_and_synchronize); the MLP backward was issued before all of them.
    The communication kernels hold `held` of the SMs while they run (sm_held of EP_COMM_SMS): the compute beside
    them runs at 1 - held of its throughput meanwhile (beside_seconds). Kernels on the communication stream that
    fill the device (HybridEP's permute, unpermute and metadata scans: moe.flex_kernel_bytes) are in no pass:
    nothing runs beside them, so they add whole to their phase and to the layer (layer_time._moe_passes leaves
    them out).
    What the phases take beyond the compute they hold is exposed, split evenly between the passes: a combine
    outlasting the attention beside it stays exposed (a hybrid model's MoE block has no attention beside its
    combines: both exposed). Never less than what outlasts all the compute, never more than the four all-to-alls
    without the overlap."""
    c, h = all_to_all, held
    phases = sum(beside_seconds(compute, c, h) for compute in _phase_compute(passes, delay_wgrad))
    exposed = min(4 * c, max(0.0, phases - passes.compute()))
    return exposed / 2, exposed / 2


__all__ = ["NO_OVERLAP", "HIDDEN_KEYS", "requested", "asked_overlaps", "hidden_comms", "strategy_overlaps",
           "layer_overlaps", "UbMethod", "UB_COMPUTE_STREAMS", "RING_EXCHANGE", "PIPELINE", "BULK", "sm_held",
           "beside_seconds", "ub_pair_seconds", "UbBlock", "tp_overlapped", "sp_backward_exposed", "MoEPasses",
           "EP_COMM_SMS", "ep_overlapped"]
