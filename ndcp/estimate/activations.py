"""Activation memory of one body layer for one micro-batch, from op-level inventories (the one place it is written).

Two trainers (RunSpec.trainer):
- megatron (default): Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4
  (docs/formulas.md §5): a GPT layer stores sbh(34 + 5as/h) bytes with 16-bit activations and 1-byte dropout masks. The
  same inventory is what Megatron-Core's Transformer Engine layer saves for a Llama layer: TELayerNormColumnParallel-
  Linear keeps the norm input and the (sequence-sharded) norm output, fused attention keeps Q, K, V, its output and
  the softmax statistics, the SwiGLU keeps the fc1 output (gate and up) and fc2 keeps the SwiGLU output; no masks
  without dropout. `selective` drops the attention core (Korthikanti §5); `full` keeps the layer input.
- torchtitan: eager PyTorch autograd on torchtitan's Llama 3 block (torchtitan 0.3.0 models/llama3/model.py,
  models/common/) for `none`; its op-level selective AC for `selective` (distributed/activation_checkpoint.py
  SelectiveAC: keep the outputs of the compute-intensive ops -- mm, the attention kernels -- and reduce_scatter,
  except every second mm of the block, recompute the rest); `full` keeps the block input. Both are measured, not
  only read: scripts/measure_saved_tensors.py runs torchtitan's own block on the meta device at real sizes and
  docs/saved_tensors.yaml is what it keeps, pinned by tests/estimate/test_saved_tensors.py.

Each stored tensor carries its sharding: `tp` tensors are split by tensor parallelism; `seq` tensors are full-width
activations that plain TP replicates and sequence parallelism splits by tp; `core` tensors are the attention core
that selective recompute drops; `rep` tensors are whole on every TP rank even with SP (torchtitan's all-gathered
linear inputs and row-parallel partial sums). Every tensor's sequence dimension is split by context parallelism.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ..specs.encoder import encoder_run, image_side
from ..specs.model import ModelSpec
from ..specs.recompute import (HOST_OFFLOAD, KEEPS_LAYER_INPUT, NO_RECOMPUTE, attention_norm_fused,
                               recompute_option)
from ..specs.run import FP32_BYTES, RunSpec
from .trainers import loss_kernel, trainer_behaviour
from .compute import ROW_PARALLEL_PROJECTIONS, block_projection_gemm
from .fp8 import linear_input_bytes
from .keys import Degrees
from .mixers import scan_saved

MASK_BYTES = 1  # dropout masks are stored as bytes (Korthikanti §4.1)


@dataclass(frozen=True)
class Tensor:
    """One stored activation: name, bytes per device before sharding, and how it is sharded."""

    name: str
    bytes: float
    shard: str  # "tp" | "seq" | "core" | "expert" | "rep"


def _attention_inventory(model: ModelSpec, run: RunSpec, tokens: int, seq: int) -> list[Tensor]:
    """Attention block. `tokens` = local tokens of the micro-batch (mbs * seq / cp); keys span the full sequence `seq`."""
    B, h, a = run.activation_bytes, model.hidden, model.heads
    F8 = linear_input_bytes(run)  # linear-layer inputs: cached in FP8 under fp8 (docs/formulas.md §3.1)
    items = [Tensor("norm1_input", B * tokens * h, "seq"), Tensor("attention_input", F8 * tokens * h, "seq")]
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            items += [Tensor("q_latent", 2 * B * tokens * m.q_lora_rank, "seq")]  # down-projection output + its norm
        items += [Tensor("kv_latent", B * tokens * (2 * m.kv_lora_rank + m.qk_rope_head_dim), "seq"),
                  Tensor("mla_query", B * tokens * a * qk, "tp"), Tensor("mla_key", B * tokens * a * qk, "tp"),
                  Tensor("mla_value", B * tokens * a * m.v_head_dim, "tp"),
                  Tensor("out_proj_input", F8 * tokens * a * m.v_head_dim, "tp")]
    else:
        d, g = model.dim_per_head, model.num_kv_heads
        items += [Tensor("query", B * tokens * a * d, "tp"), Tensor("key", B * tokens * g * d, "tp"),
                  Tensor("value", B * tokens * g * d, "tp"), Tensor("out_proj_input", F8 * tokens * a * d, "tp")]
    if F8 < B:  # FP8: the core's BF16 output, which fused attention saves for its backward, besides the FP8 copy the
        # output projection saves (in BF16 the two are one tensor; Transformer Engine FusedAttnFunc saves `out`)
        v = model.mla.v_head_dim if model.mla is not None else model.dim_per_head
        items.append(Tensor("attention_output", B * tokens * a * v, "core"))
    scores = a * tokens * seq  # local queries x all keys, per micro-batch (tokens already includes mbs)
    if run.flash_attention:
        items.append(Tensor("softmax_stats", FP32_BYTES * a * tokens, "core"))  # logsumexp kept by flash attention
    else:
        items.append(Tensor("softmax_output", B * scores, "core"))
        if model.attention_dropout > 0:
            items += [Tensor("attention_dropout_mask", MASK_BYTES * scores, "core"),
                      Tensor("attention_dropout_output", B * scores, "core")]
    if model.hidden_dropout > 0:
        items.append(Tensor("attention_output_dropout_mask", MASK_BYTES * tokens * h, "seq"))
    return items


def _mlp_inventory(model: ModelSpec, run: RunSpec, tokens: int, ffn: int, shard: str, prefix: str) -> list[Tensor]:
    """MLP of width ffn: fc1's output (GeLU: ffn; SwiGLU: gate and up, 2 x ffn) and the activation's output, fc2's
    input (FP8 under fp8); `prefix` names them (mlp, shared, expert: the recompute modules drop them by name)."""
    fc1 = 2 * ffn if model.gated else ffn
    # the activation's input in FP8 with Megatron's --activation-func-fp8-input-store (fused_bias_swiglu.py)
    fc1_bytes = 1 if run.activation_func_fp8_input_store else run.activation_bytes
    return [Tensor(f"{prefix}_fc1_output", fc1_bytes * fc1 * tokens, shard),
            Tensor(f"{prefix}_act_output", linear_input_bytes(run) * ffn * tokens, shard)]


def _mlp_block_inventory(model: ModelSpec, run: RunSpec, tokens: int, moe: bool, tp: int, sp: bool,
                         etp: int) -> list[Tensor]:
    """Norm, MLP input, and the dense MLP or the MoE (router, dispatched tokens, experts, shared experts)."""
    B, h = run.activation_bytes, model.hidden
    F8 = linear_input_bytes(run)  # the MoE router takes mlp_input in BF16
    items = [Tensor("norm2_input", B * tokens * h, "seq"),
             Tensor("moe_input", B * tokens * h, "seq") if moe else Tensor("mlp_input", F8 * tokens * h, "seq")]
    if not moe:
        items += _mlp_inventory(model, run, tokens, model.ffn_hidden, "tp", "mlp")
    else:
        m = model.moe
        # Tokens each rank routes: its sequence shard (SP splits it by tp); balanced routing gives every EP rank the
        # same number of token copies, top_k per token, padded to the capacity factor when one is set.
        routed = tokens / (tp if sp else 1) * m.top_k * (m.capacity_factor or 1.0)
        # No expert output is kept: Megatron-Core applies the routing probabilities inside the experts' activation
        # (experts.py, weighted_bias_swiglu_impl with permuted_probs) and unpermutes without them, so the combine
        # saves nothing for backward (docs/formulas.md §5).
        items += [Tensor("router_logits", FP32_BYTES * tokens * m.experts, "seq"),
                  Tensor("expert_input", F8 * routed * etp * h, "expert"),
                  *_mlp_inventory(model, run, routed, m.expert_ffn_hidden, "expert", "expert")]
        if m.shared_experts:
            items += _mlp_inventory(model, run, tokens, m.shared_experts * m.shared_hidden, "tp", "shared")
    if model.hidden_dropout > 0:
        items.append(Tensor("mlp_dropout_mask", MASK_BYTES * tokens * h, "seq"))
    return items


def layer_inventory(model: ModelSpec, run: RunSpec, moe: bool, tp: int, cp: int, etp: int, mbs: int,
                    sp: bool) -> list[Tensor]:
    """Every tensor one layer stores for backward, before sharding (except expert tensors, already per rank)."""
    tokens = mbs * run.seq_len // cp
    shares = model.mixer_shares("moe" if moe else "dense")
    if shares.plain:
        return (_attention_inventory(model, run, tokens, run.seq_len)
                + _mlp_block_inventory(model, run, tokens, moe, tp, sp, etp))
    return (_share(_attention_inventory(model, run, tokens, run.seq_len), shares.attention)
            + _scan_inventory(model, run, tokens, moe, shares.linear_attention + shares.mamba)
            + _share(_mlp_block_inventory(model, run, tokens, moe, tp, sp, etp), shares.mlp))


def _share(items: list[Tensor], share: float) -> list[Tensor]:
    """The tensors of a share of a kind's layers (an average layer's part of them)."""
    return [Tensor(t.name, t.bytes * share, t.shard) for t in items] if share else []


def _scan_inventory(model: ModelSpec, run: RunSpec, tokens: int, moe: bool, share: float) -> list[Tensor]:
    """The linear-attention and Mamba-2 layers' share of an average layer: the mixer's norm input and projection
    input (full width, as attention's), and what the scan mixers keep (estimate/mixers.py scan_saved, split by
    TP with their heads)."""
    B, h = run.activation_bytes, model.hidden
    saved = scan_saved(model, "moe" if moe else "dense", tokens, B)
    inputs = [Tensor("norm1_input", B * tokens * h, "seq"),
              Tensor("attention_input", linear_input_bytes(run) * tokens * h, "seq")]
    return _share(inputs, share) + [Tensor(name, nbytes, "tp") for name, nbytes in saved]


def sharded_bytes(tensor: Tensor, tp: int, sp: bool) -> float:
    """Bytes of one tensor on one device: TP splits `tp`/`core`; SP also splits `seq`; expert and `rep` tensors are
    per rank already."""
    if tensor.shard in ("tp", "core"):
        return tensor.bytes / tp
    if tensor.shard == "seq":
        return tensor.bytes / tp if sp else tensor.bytes
    return tensor.bytes


# -- torchtitan (eager autograd, op-level SAC) -------------------------------------------------------------------
def torchtitan_modelled(model: ModelSpec, kind: str) -> bool:
    """torchtitan's dense Llama block (MHA/GQA attention, dense MLP) is inventoried op by op; MLA and MoE layers
    fall back to the Megatron inventory."""
    return model.mla is None and kind != "moe"


def _torchtitan_norm(run: RunSpec, tokens: int, h: int, name: str) -> list[Tensor]:
    """torchtitan RMSNorm (models/common/nn_modules.py: nn.RMSNorm), then the linear that reads it. On CUDA F.rms_norm
    runs aten._fused_rms_norm (torch 2.13 torch/_native/ops/norm/rmsnorm_impl.py overrides that op on CUDA), whose
    autograd node FusedRmsNormBackward0 keeps the input and the fp32 per-token rstd; the linear keeps the norm output.
    Under TP the norm runs sequence-sharded and its output is all-gathered before the column-parallel linears
    (PrepareModuleInput Shard(1) -> Replicate()), so the linear keeps the whole one."""
    B = run.activation_bytes
    return [Tensor(f"{name}_input", B * tokens * h, "seq"), Tensor(f"{name}_rstd", FP32_BYTES * tokens, "seq"),
            Tensor(f"{name}_output", B * tokens * h, "rep")]


def _torchtitan_eager_inventory(model: ModelSpec, run: RunSpec, tokens: int) -> list[Tensor]:
    """What eager autograd keeps for one torchtitan Llama 3 block (models/common/attention.py GQAttention with
    FusedQKVLinear, models/common/feed_forward.py FeedForward), measured at real sizes on torchtitan 0.3.0
    (scripts/measure_saved_tensors.py; docs/saved_tensors.yaml, pinned by tests/estimate/test_saved_tensors.py).
    Attention: the RoPE'd Q and K (cast back from the complex product), V (the contiguous split of the fused QKV
    output), and the attention kernel's output (which wo reads as it is) and logsumexp; K and V are not expanded
    for GQA (the kernels take enable_gqa; separate projections, e7c0cae measured, expand them first: repeat_kv).
    MLP: w1 and w3 outputs, SiLU output and the product that w2 reads (SwiGLU); w1 output and the activation's output
    otherwise. The norms keep their inputs (_torchtitan_norm): the block input and the residual sum h. Under
    torch.compile (RunSpec.torch_compile) AOTAutograd's min-cut partitioner recomputes the MLP activation from its
    input instead of saving it: one ffn-wide tensor less (measured with SwiGLU; GeLU not); FP8 too: _compiled_fp8."""
    B, h, a = run.activation_bytes, model.hidden, model.heads
    d, g = model.dim_per_head, a if run.qkv_projections == "separate" else model.num_kv_heads
    items = _torchtitan_norm(run, tokens, h, "attention_norm")
    items += [Tensor("query", B * tokens * a * d, "tp"), Tensor("key", B * tokens * g * d, "tp"),
              Tensor("value", B * tokens * g * d, "tp"), Tensor("sdpa_output", B * tokens * a * d, "tp"),
              Tensor("softmax_stats", FP32_BYTES * a * tokens, "tp")]
    items += _torchtitan_norm(run, tokens, h, "ffn_norm")
    width = (4 if model.gated else 2) - (1 if run.torch_compile else 0)
    items.append(Tensor("mlp_hidden", B * tokens * width * model.ffn_hidden, "tp"))
    return _compiled_fp8(model, run, tokens, items) if run.torch_compile and run.fp8 else items


def _compiled_fp8(model: ModelSpec, run: RunSpec, tokens: int, items: list[Tensor]) -> list[Tensor]:
    """A compiled FP8 block without checkpointing (torchao 0.18.0 Float8Linear under torch.compile; measured on 0.3.0
    and e7c0cae, docs/saved_tensors.yaml): each linear's backward reads the FP8 cast of its input, and the partitioner
    recomputes both norm outputs (from the saved input and rstd) and a SwiGLU's product (w2's input, from w1's and
    w3's saved outputs) with their casts; it keeps wo's FP8 input (1 byte, a d wide) for wo's weight gradient."""
    kept = [t for t in items if t.name not in ("attention_norm_output", "ffn_norm_output")]
    if model.gated:  # the product: one ffn-wide tensor of mlp_hidden less (GeLU keeps no product)
        kept = [Tensor(t.name, t.bytes * 2 / 3, t.shard) if t.name == "mlp_hidden" else t for t in kept]
    return kept + [Tensor("wo_input_fp8", tokens * model.heads * model.dim_per_head, "tp")]


def _torchtitan_sac_inventory(model: ModelSpec, run: RunSpec, tokens: int, tp: int, sp: bool) -> list[Tensor]:
    """torchtitan op-level SAC (distributed/activation_checkpoint.py SelectiveAC): the checkpoint keeps the block
    input, the outputs of the attention kernel (output and logsumexp), every reduce_scatter output (SP), and the
    outputs of the 1st, 3rd, 5th... mm of the block (the policy counts mms per block and recomputes every second
    one). mm order (block_mms): the fused wqkv (separate: wq, wk, wv), wo, then w1, w3, w2 (SwiGLU) or w1, w2; under
    FP8 torchao's Float8Linear is an aten.mm to the policy, so the same outputs, in bf16 (measured eager and
    compiled). Column-parallel outputs are TP-sharded; a row-parallel mm output is the partial sum before its
    all-reduce / reduce-scatter, whole on every rank. Measured on torchtitan 0.3.0 and, separate, on e7c0cae
    (docs/saved_tensors.yaml: wq, wv, w1, w2 kept). Under torch.compile (RunSpec.torch_compile) the policy tags the
    same ops, but AOTAutograd's partitioned forward returns only the tagged outputs its backward reads, and no
    gradient reads w2's output (the residual add passes its gradient through): it is not kept (measured on 0.3.0
    and on the Dec 2024 code, 3f20451b; docs/formulas.md §3.4). Under SP its reduce-scatter output, read by no
    gradient either, is still counted (not measured: conservative)."""
    B, h, a, d = run.activation_bytes, model.hidden, model.heads, model.dim_per_head
    items = [Tensor("block_input", B * tokens * h, "seq"), Tensor("sdpa_output", B * tokens * a * d, "tp"),
             Tensor("softmax_stats", FP32_BYTES * a * tokens, "tp")]
    items += [Tensor(f"{name}_output", B * tokens * block_projection_gemm(model, name, 1, 1).n,
                     "rep" if name in ROW_PARALLEL_PROJECTIONS else "tp")
              for name in op_sac_saved_mms(model, run) if not (run.torch_compile and name == "w2")]
    if tp > 1 and sp:  # wo and w2 outputs reduce-scattered to the sequence shard (c10d reduce_scatter_tensor)
        items += [Tensor("attention_reduce_scatter", B * tokens * h, "seq"),
                  Tensor("mlp_reduce_scatter", B * tokens * h, "seq")]
    return items


def block_mms(model: ModelSpec, run: RunSpec) -> tuple[str, ...]:
    """The trainer's dense block's weight GEMMs in forward order (TrainerBehaviour.block_mm_order; w3, the SwiGLU's
    up projection, only in a gated MLP); with separate projections (RunSpec.qkv_projections) wq, wk, wv in the fused
    wqkv's place, in the order e7c0cae's Attention.forward calls them (models/llama3/model.py: `xq, xk, xv =
    self.wq(x), self.wk(x), self.wv(x)`)."""
    order = trainer_behaviour(run).block_mm_order
    if run.qkv_projections == "separate":
        order = tuple(p for name in order for p in (("wq", "wk", "wv") if name == "wqkv" else (name,)))
    return tuple(name for name in order if model.gated or name != "w3")


def op_sac_saved_mms(model: ModelSpec, run: RunSpec) -> tuple[str, ...]:
    """The mms whose outputs torchtitan's op-level SAC saves: the 1st, 3rd, 5th... of the block (its policy counts
    aten.mm per block and recomputes every second one; TrainerBehaviour.selective_reruns' source)."""
    return block_mms(model, run)[0::2]


def op_sac_recomputed_mms(model: ModelSpec, run: RunSpec) -> tuple[str, ...]:
    """The mms torchtitan's op-level SAC re-runs in backward: the 2nd, 4th... of the block (estimate/rerun.py)."""
    return block_mms(model, run)[1::2]


@lru_cache(maxsize=65536)
def layer_activation_bytes(model: ModelSpec, run: RunSpec, kind: str, mode: str, degrees: Degrees) -> float:
    """Bytes one body layer of `kind` keeps for one micro-batch split by `degrees` under recompute `mode` (none |
    selective | full, or a module option: specs/recompute.py).

    Megatron: selective drops the attention core (Korthikanti §5, "selective activation recomputation"); full keeps
    only the layer input, sequence-sharded when SP is on (Megatron keeps the checkpoint in the SP layout): 2sbh(/t).
    layernorm drops the output of a norm that is a separate module only (specs/recompute.py attention_norm_fused):
    a MoE layer's pre-MLP norm and MLA's input norm; a dense MLP's norm is fused into fc1, a non-MLA attention's
    into linear_qkv. In a hybrid model's blocks a module drops its tensors in the blocks it acts on (specs/recompute.py
    RecomputeModule.block): each kind's inventory is its blocks' shares, so core_attn drops the attention blocks'
    cores, layernorm the MoE blocks' norm outputs only (the other blocks' norms are fused into their first linear),
    and the Mamba-2 blocks keep everything.
    torchtitan: eager autograd, op-level SAC, and the block input (Shard(1) under SP) respectively.
    """
    option = recompute_option(mode)  # what it keeps (specs/recompute.py)
    tp, cp, _, etp, mbs, sp = degrees
    if option.keeps == KEEPS_LAYER_INPUT:
        return run.activation_bytes * mbs * run.seq_len / cp * model.hidden / (tp if sp else 1)
    if trainer_behaviour(run).op_level_inventory and torchtitan_modelled(model, kind):
        # torchtitan keeps what its eager autograd keeps, or what its op-level SAC policy keeps when the option
        # drops anything (its own selective policy, not a tag filter: module docstring)
        tokens = mbs * run.seq_len // cp
        items = (_torchtitan_sac_inventory(model, run, tokens, tp, sp) if option.drops
                 else _torchtitan_eager_inventory(model, run, tokens))
        return sum(sharded_bytes(t, tp, sp) for t in items)
    drops = option.dropped(attention_norm_fused(model.mla is not None, model.hybrid_blocks))
    return sum(b for name, shard, b in _sharded_inventory(model, run, kind == "moe", tp, cp, etp, mbs, sp)
               if shard not in drops and name not in drops)


@lru_cache(maxsize=16384)
def _sharded_inventory(model: ModelSpec, run: RunSpec, moe: bool, tp: int, cp: int, etp: int, mbs: int,
                       sp: bool) -> tuple[tuple[str, str, float], ...]:
    """(name, shard, bytes on one device) of each tensor of layer_inventory: every recompute option of a layer
    filters the same inventory."""
    return tuple((t.name, t.shard, sharded_bytes(t, tp, sp))
                 for t in layer_inventory(model, run, moe, tp, cp, etp, mbs, sp))


@lru_cache(maxsize=65536)
def recompute_workspace_bytes(model: ModelSpec, run: RunSpec, kind: str, mode: str, degrees: Degrees) -> float:
    """Extra bytes while one recomputed layer runs its backward: what the recompute rematerialises (SAPP ND's
    backward overhead, docs/reference-planner.md §2.3)."""
    if mode == NO_RECOMPUTE:
        return 0.0
    # compiled FP8's smaller no-AC set (_compiled_fp8) is measured without a checkpoint only: a recompute rebuilds
    # compiled BF16's, the larger (unvalidated; torchtitan's FP8 keeps BF16 inputs: nothing else differs)
    keep = layer_activation_bytes(model, replace(run, precision="bf16") if run.fp8 and run.torch_compile else run,
                                  kind, NO_RECOMPUTE, degrees)
    return recompute_option(mode).buffers * (keep - layer_activation_bytes(model, run, kind, mode, degrees))


@lru_cache(maxsize=65536)
def backward_workspace_bytes(model: ModelSpec, run: RunSpec, kind: str, degrees: Degrees) -> float:
    """Bytes the backward of one layer allocates beyond what the layer keeps (and, recomputed, rebuilds) at its
    peak, inventoried for dense layers with a gated (SwiGLU) MLP and MHA/GQA attention, both trainers; 0 where no
    inventory is measured (MoE, MLA, scan mixers, non-gated MLPs: today's pricing, docs/formulas.md §5.5).

    The peak is in the MLP's backward, at the SwiGLU's backward. Alive beside the saved (or rebuilt) set: the
    layer's output gradient (T·h, sequence-sharded under SP), the gradient of the SwiGLU output that fc2's (w2's)
    backward returned (T·F), and the gradients of the gate and up projections (2·T·F); the SwiGLU output itself,
    fc2's saved input, is freed with fc2's backward node: B·T·(h + 2F) (16-bit) in all.
    - torchtitan 0.3.0 (models/common/feed_forward.py, w2(silu(w1(x)) * w3(x)), eager autograd): SiLU-multiply's
      backward (MulBackward0) makes the two T·F gradients. Measured at 8,192 and 4,096 tokens (linear) without AC,
      with op-level SAC and with full AC, whose peaks are the same (scripts/measure_saved_tensors.py
      `backward_peaks`, docs/saved_tensors.yaml, pinned by tests/estimate/test_saved_tensors.py). Under
      torch.compile the same inventory is priced (the node-by-node bound adds the recomputed SiLU output, which
      Inductor fuses into the multiply's backward).
    - Megatron-Core (d98e8a6 core/fusions/fused_bias_swiglu.py SwiGLUFunction.backward, swiglu_back under
      jit_fuser = torch.compile): one [T, 2F] gradient, the two halves written into it by Inductor's one kernel
      (checked in torch 2.13's generated code: it allocates only the output). Measured eager on the local-spec
      TransformerLayer at tp 1 (docs/formulas.md §5.5), where the halves are separate tensors too (2·T·F more).
    The attention backward's dQ, dK, dV come after the MLP's saved tensors are freed and stay below it (measured
    for Llama-3-8B). TP splits the F-wide gradients (column-parallel fc1) and SP the output gradient; neither is
    measured under TP."""
    if kind == "moe" or model.mla is not None or not model.gated or not model.mixer_shares(kind).plain:
        return 0.0
    tp, cp, _, _, mbs, sp = degrees
    tokens = mbs * run.seq_len // cp
    B = run.activation_bytes
    f = B * tokens * model.ffn_hidden
    alive = [Tensor("layer_output_grad", B * tokens * model.hidden, "seq"), Tensor("fc2_input_grad", f, "tp"),
             Tensor("fc1_output_grad", 2 * f, "tp")]
    freed = [Tensor("fc2_input", f, "tp")]  # the SwiGLU output, counted in the saved set
    return sum(sharded_bytes(t, tp, sp) for t in alive) - sum(sharded_bytes(t, tp, sp) for t in freed)


def layer_workspace_bytes(model: ModelSpec, run: RunSpec, kind: str, mode: str, degrees: Degrees) -> float:
    """What one layer's backward adds at its peak beyond what it keeps: the recompute workspace and the backward's
    temporaries (one layer runs its backward at a time: a stage pays the largest of its layers' once)."""
    return (recompute_workspace_bytes(model, run, kind, mode, degrees)
            + backward_workspace_bytes(model, run, kind, degrees))


def offloaded_layer_bytes(model: ModelSpec, run: RunSpec, kind: str, mode: str, degrees: Degrees) -> float:
    """Bytes one layer under `mode` moves to the host per micro-batch: what it would keep, less what it keeps on the
    device (0 unless the option offloads; docs/formulas.md §5.3)."""
    if HOST_OFFLOAD not in recompute_option(mode).reruns:
        return 0.0
    return (layer_activation_bytes(model, run, kind, NO_RECOMPUTE, degrees)
            - layer_activation_bytes(model, run, kind, mode, degrees))


@lru_cache(maxsize=16384)
def head_activation_bytes(model: ModelSpec, run: RunSpec, tp: int, cp: int, mbs: int, sp: bool) -> dict[str, float]:
    """Per micro-batch: embedding-side bytes kept per in-flight micro-batch on the first stage, and the output side
    on the last stage: final-norm and output-projection inputs, and the logits' loss path.

    Megatron: norm and projection inputs 4sbh/t, fp32 logits s*b*V/t (Korthikanti §4.3; Megatron-Core's vocab-
    parallel cross entropy casts the logits to fp32 once and computes the softmax and its gradient in place).
    torchtitan: the final RMSNorm keeps what a block's norm keeps (_torchtitan_norm); the model returns
    `self.output(h).float()` (fp32 logits), the loss is `cross_entropy(pred.float(), labels)` and train.py deletes
    `pred` before backward, so at the start of backward log_softmax's saved fp32 output, nll_loss's fp32 gradient
    and log_softmax's fp32 input gradient coexist: 3 x 4 bytes per logit (vocabulary-sharded under TP's loss
    parallel). Under a compiled loss (RunSpec.compile_loss) the loss holds 16-bit logit copies instead
    (logit_bytes_per_logit)."""
    B, h = run.activation_bytes, model.hidden
    tokens = mbs * run.seq_len / cp
    seq_shard = tp if sp else 1
    embedding = (MASK_BYTES * tokens * h / seq_shard) if model.hidden_dropout > 0 else 0.0
    profile = trainer_behaviour(run)
    if profile.op_level_inventory:
        output_inputs = sum(sharded_bytes(t, tp, sp) for t in _torchtitan_norm(run, tokens, h, "norm"))
    else:
        output_inputs = 2 * B * tokens * h / seq_shard
    logits = logit_bytes_per_logit(run) * tokens * model.vocab / tp
    return {"embedding": embedding, "output_inputs": output_inputs, "logits": logits,
            "encoder": _encoder_activation_bytes(model, run, tp, mbs, sp)}


COMPILED_LOSS_LOGIT_COPIES = 2  # the saved 16-bit logits and their 16-bit gradient (logit_bytes_per_logit)


def logit_bytes_per_logit(run: RunSpec) -> float:
    """Bytes per logit the loss path holds at its peak, the start of the loss's backward.

    Eager: the trainer's fp32 copies (TrainerBehaviour.fp32_logit_copies). Compiled (RunSpec.compile_loss,
    torchtitan compile.components "loss"; torchtitan e7c0cae components/loss.py build_cross_entropy_loss and 0.3.0
    BaseLoss._maybe_compile wrap `cross_entropy(pred.flatten(0, 1).float(), labels)` in torch.compile): AOTAutograd's
    min-cut partitioner saves the 16-bit `pred` itself and two fp32 values per token (the row max and log-sum-exp),
    recomputing the fp32 cast, shift and exp in backward, and Inductor's one backward kernel reads those logits and
    writes the 16-bit logit gradient, the only logit-sized buffer it allocates (checked with torch 2.13 Inductor's
    generated code: docs/formulas.md §5.6). So the saved logits (kept alive though train.py deletes `pred`) and
    their gradient: 2 x 2 bytes per logit, against the eager 3 x 4 (torchtitan). Megatron's kernels (RunSpec.loss_kernel
    unfused, native, te) each hold one fp32 logit-sized tensor from forward to backward: the softmax, computed in
    place in the fp32 copy (tensor_parallel/cross_entropy.py, fusions/fused_cross_entropy.py save_for_backward
    exp_logits), or Transformer Engine's fp32 gradient written in forward (pytorch/cross_entropy.py
    save_for_backward(grad_input)): the trainer's one copy. flash-attn's (flash) saves the 16-bit logits themselves
    (flash_attn/ops/triton/cross_entropy.py save_for_backward(logits, lse, labels)): the activation dtype."""
    if run.compile_loss:
        return COMPILED_LOSS_LOGIT_COPIES * run.activation_bytes
    if loss_kernel(run) == "flash":
        return run.activation_bytes
    return trainer_behaviour(run).fp32_logit_copies * FP32_BYTES


@lru_cache(maxsize=4096)
def deferred_wgrad_bytes(model: ModelSpec, run: RunSpec, tp: int, cp: int, mbs: int, sp: bool, mbn: int) -> float:
    """Bytes the last pipeline stage holds for Megatron's deferred output-layer weight gradient
    (RunSpec.wgrad_deferral_limit; --defer-embedding-wgrad-compute --wgrad-deferral-limit N; 0 when not deferred).
    Megatron-LM (17a67b9a and d98e8a6) core/tensor_parallel/layers.py: `ColumnParallelLinear.forward` appends the
    output layer's input (`[s/t, b, h]` under SP) to `embedding_activation_buffer` while the buffer holds fewer
    than N (0: no limit), and `LinearWithGradAccumulationAndAsyncCommunication.backward` appends its output gradient
    (`[s, b, V/t]`, the activation dtype) to `grad_output_buffer` instead of computing the weight gradient;
    core/pipeline_parallel/schedules.py `finish_embedding_wgrad_compute` drains both at the pipeline flush. So the
    step's first min(N, passes) output-layer passes (1 + MTP depth a micro-batch) keep both. Counted on top of the
    stage's full in-flight activations (an upper bound: the last is buffered while the stage is still in its steady
    state, docs/formulas.md §5.5)."""
    limit = run.wgrad_deferral_limit
    if limit is None:
        return 0.0
    passes = mbn * (1 + model.mtp_depth)
    tokens = mbs * run.seq_len / cp
    per_pass = run.activation_bytes * tokens * (model.hidden / (tp if sp else 1) + model.vocab / tp)
    return (min(limit, passes) if limit else passes) * per_pass


def _encoder_activation_bytes(model: ModelSpec, run: RunSpec, tp: int, mbs: int, sp: bool) -> float:
    """What the vision encoder and projector keep per micro-batch on the embedding stage (docs/models.md §5): each
    encoder layer's inventory over mbs x images_per_sample images of its patches (CP does not split an image; the
    per-layer plans do not recompute it), and the projector's input and (MLP) hidden activation."""
    images_run = encoder_run(model.encoder, run)
    if images_run is None:
        return 0.0
    e = model.encoder
    images = mbs * run.images_per_sample
    layers = e.layers * layer_activation_bytes(model.encoder_model, images_run, "dense", NO_RECOMPUTE,
                                               Degrees(tp, 1, 1, 1, images, sp))
    rows = images * e.image_tokens(image_side(e, run))
    hidden = 2 * e.projector_width / tp if e.projector == "mlp" else 0  # pre- and post-GELU
    return layers + run.activation_bytes * rows * (e.projector_input + hidden)
