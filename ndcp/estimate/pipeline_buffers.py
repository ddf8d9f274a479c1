"""What torch.distributed.pipelining holds for a whole step beside the activations (torchtitan with pipeline
parallelism; docs/formulas.md §5.5).

Read from PyTorch's torch/distributed/pipelining/stage.py as of torch 1963fc8 (2024-12-23, the nightly of
torchtitan's llama3_h100_202412 benchmark), one PipelineStage per virtual stage (model chunk):
- receive buffers: `_prepare_forward_infra` allocates one activation receive buffer per micro-batch on every
  stage but the first (`args_recv_info[chunk_id]`, `_make_tensor_from_meta`), `_prepare_backward_infra` one
  gradient receive buffer per micro-batch on every stage but the last (`grad_recv_info`); both persist across
  steps. PyTorch PR #143589's memory test (2024-12) counts them so: the first and last stage one batch of
  buffers, the stages between two. The forward receive buffer of a micro-batch in flight is the first layer's saved
  input, which the activations already count, so only the others are added here.
- stage outputs: `forward_one_chunk` appends every micro-batch's output to `output_chunks`, cleared only by the
  next step's `clear_runtime_states`; on every stage until PyTorch PR #153383 (2025-05) kept it to the last, whose
  outputs (the logits: torchtitan 9dec370 and v0.2.0 llama model.py return `self.output(h)` in the compute dtype,
  vocabulary-sharded by loss parallel) `step` merges and returns. Later the sent outputs stay alive to the end of
  the step through `fwd_cache` and the pending send works (PyTorch PR #193903's description, 2026), so every
  micro-batch's stage output is held at the step's peak either way.
Megatron frees a sent output's storage (schedules.py deallocate_output_tensor) and receives into fresh tensors, so
a trainer whose behaviour lacks `pipeline_keeps_buffers` holds none of this.
"""
from __future__ import annotations

from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import Strategy
from .layout import StageLayout
from .trainers import trainer_behaviour


def boundary_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy) -> float:
    """One micro-batch's stage input or output: mbs x s/cp x h in the compute dtype, sequence-sharded over TP under
    sequence parallelism (torchtitan's TP plan hands the blocks' Shard(1) local tensors from stage to stage)."""
    tokens = strategy.mbs * run.seq_len / strategy.cp
    return run.activation_bytes * tokens * model.hidden / (strategy.tp if strategy.sp else 1)


def held_logits_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy) -> float:
    """One micro-batch's output on the last stage: its logits in the compute dtype, vocabulary-sharded over TP
    (torchtitan's loss parallel: the output projection's Shard(-1) layout)."""
    return run.activation_bytes * strategy.mbs * run.seq_len / strategy.cp * model.vocab / strategy.tp


def pipeline_buffer_bytes(model: ModelSpec, run: RunSpec, strategy: Strategy, layout: StageLayout) -> float:
    """Bytes one device stage holds in pipelining's buffers at its peak (module docstring), with m = mbn micro-batches
    and b = boundary_bytes: each of its chunks but the model's last keeps m outputs and m gradient receive buffers,
    each but the model's first m activation receive buffers less the micro-batches in flight (already counted as
    layer inputs; in flight per chunk: the stage's in-flight chunks / vpp), and the model's last chunk keeps m
    micro-batches of logits. 1F1B: first stage 2mb, middle stages (3m - in flight)b, last (m - 1)b + m logits.
    0 without PP or for a trainer that frees them."""
    if strategy.pp == 1 or not trainer_behaviour(run).pipeline_keeps_buffers:
        return 0.0
    m, chunks = strategy.mbn, strategy.vpp
    held = layout.in_flight_chunks / chunks
    not_last = chunks - (1 if layout.holds_head else 0)
    not_first = chunks - (1 if layout.is_first else 0)
    buffers = not_last * 2 * m + not_first * (m - min(held, m))
    logits = m * held_logits_bytes(model, run, strategy) if layout.holds_head else 0.0
    return buffers * boundary_bytes(model, run, strategy) + logits


__all__ = ["boundary_bytes", "held_logits_bytes", "pipeline_buffer_bytes"]
