"""Element-wise HBM bytes of one layer as its trainer runs it: torchtitan's dense block op by op, eager or under
torch.compile (RunSpec.torch_compile); every other layer as Megatron's fused kernels (compute.py elementwise_bytes).

torchtitan eager (pytorch/torchtitan 0.3.0 line, main @b5bcd76c, models/common/): every op between two GEMMs (or
the attention kernel) reads its inputs from HBM and writes its output, fp32 intermediates at 4 bytes:
- RMSNorm (nn_modules.py RMSNorm = nn.RMSNorm): F.rms_norm runs one fused kernel on CUDA (aten._fused_rms_norm, as
  activations.py _torchtitan_norm reads it): read and write h; the fp32 per-token rstd is negligible;
- residual adds (x + attention(...), h + feed_forward(...)): read 2 h, write h each;
- the fused QKV output's split (attention.py FusedQKVLinear `_split`, since #3714): Q, K and V each made contiguous,
  read a and write a per element (V is the "contiguous split" activations.py saves);
- RoPE on Q and K (rope.py ComplexRoPE.apply_rotary_emb): query.float() (read a, write 4), the complex product
  (read 4, write 4; the per-position cache is not per token and head), .type_as(query) (read 4, write a): 2 a + 16
  bytes per element of Q and K; the attention output is a view (the kernel takes enable_gqa: no repeat_kv);
- SwiGLU (feed_forward.py FeedForward: w2(F.silu(w1(x)) * w3(x))): silu (read F, write F), the product (read 2 F,
  write F): 5 F; a non-gated activation: read F, write F.

torch.compile (torchtitan distributed/compile.py apply_compile: torch.compile on each TransformerBlock, backend
inductor, config/configs.py CompileConfig; Ansel et al., "PyTorch 2", ASPLOS 2024, §4 TorchInductor: its scheduler
fuses the pointwise and reduction nodes between extern kernels such as matmuls and attention into generated Triton
kernels): each fused region reads its inputs once and writes its outputs once. The GEMMs and the attention kernel
stay extern kernels, unchanged. Regions of one block: norm 1 (read x, write its output); RoPE of Q and K (read a,
write a per element); residual 1 + norm 2 (read x and the attention output, write h and norm 2's output); the
activation (SwiGLU: read 2 F, write F); residual 2 (read 2 h, write h: the block's output, the graph's end). RoPE
reads Q and K from the split's strided views, so their copies fuse away; V's copy (read a, write a) is kept, the
attention kernel's input (conservative: no credit for a layout Inductor might choose).
AOTAutograd's min-cut partitioner recomputes the SwiGLU product in the backward instead of saving it
(activations.py): fused into the backward kernel that already reads w1 and w3's outputs, it adds no HBM pass.

The backward of either is priced, as all element-wise work (layer_time.py), at twice its forward's bytes. Per-op
overheads (kernel launches, Python dispatch) are priced nowhere in ndcp, eager or compiled: compile's launch savings
stay unpriced. torchao's FP8 casts are priced eager op by op or fused under compile in estimate/fp8.py
(torchao_cast_bytes).
Layers torchtitan does not build as a dense Llama block (MoE, MLA, hybrid and scan mixers) keep Megatron's fused
count, eager and compiled alike: no compile gain is priced for them (unvalidated, conservative).
"""
from __future__ import annotations

from typing import NamedTuple

from ..specs.model import ModelSpec
from ..specs.run import FP32_BYTES, RunSpec
from .activations import torchtitan_modelled
from .compute import elementwise_bytes
from .trainers import trainer_behaviour


class BlockBytes(NamedTuple):
    """Bytes per token of one torchtitan dense block's forward element-wise work on one device, by region (rope:
    the QKV split's copies and RoPE)."""

    norms_residuals: float
    rope: float
    activation: float

    @property
    def total(self) -> float:
        return self.norms_residuals + self.rope + self.activation


def torchtitan_block_bytes(model: ModelSpec, tp: int, sp: bool, dtype_bytes: int, compiled: bool) -> BlockBytes:
    """Forward element-wise HBM bytes per token of one torchtitan dense block on one TP rank (module docstring):
    the norms and residual adds run on tokens/tp under sequence parallelism, RoPE on the rank's heads, the
    activation on ffn_hidden/tp."""
    a, h = dtype_bytes, model.hidden
    q = model.heads * model.dim_per_head / tp
    k = model.num_kv_heads * model.dim_per_head / tp
    per_token_norm = 1.0 / tp if sp else 1.0
    if compiled:  # norm 1 (2 a h) + residual 1 with norm 2 (4 a h) + residual 2 (3 a h)
        norms_residuals = 9 * a * h
        rope = 2 * a * (q + k) + 2 * a * k  # RoPE reads the split's views; V's copy stays
        gate = 3 if model.gated else 2
    else:  # two fused RMSNorms (2 a h each) + two residual adds (3 a h each)
        norms_residuals = 10 * a * h
        rope = 2 * a * (q + 2 * k) + (2 * a + 4 * FP32_BYTES) * (q + k)  # Q, K, V copies; RoPE on Q and K
        gate = 5 if model.gated else 2
    return BlockBytes(norms_residuals * per_token_norm, rope, gate * a * model.ffn_hidden / tp)


def torchtitan_counted(model: ModelSpec, run: RunSpec, kind: str) -> bool:
    """Whether the layer is counted as torchtitan's dense block (else Megatron's fused count prices it)."""
    return (trainer_behaviour(run).op_level_inventory and torchtitan_modelled(model, kind)
            and model.mixer_shares(kind).plain and not model.hybrid_blocks)


def layer_elementwise_bytes(model: ModelSpec, run: RunSpec, kind: str, tokens: float, keys: float, tp: int,
                            sp: bool) -> float:
    """HBM bytes of one layer's forward element-wise work on one device, as the run's trainer runs it: torchtitan's
    dense block op by op (eager, or fused under RunSpec.torch_compile), else compute.py elementwise_bytes. Without
    flash attention the score matrix's passes are added as elementwise_bytes counts them."""
    flash, dtype = run.flash_attention, run.activation_bytes
    if not torchtitan_counted(model, run, kind):
        return elementwise_bytes(model, kind, tokens, keys, tp, sp, flash, dtype)
    scores = 0.0 if flash else (elementwise_bytes(model, kind, tokens, keys, tp, sp, False, dtype)
                                - elementwise_bytes(model, kind, tokens, keys, tp, sp, True, dtype))
    return tokens * torchtitan_block_bytes(model, tp, sp, dtype, run.torch_compile).total + scores


__all__ = ["BlockBytes", "torchtitan_block_bytes", "torchtitan_counted", "layer_elementwise_bytes"]
