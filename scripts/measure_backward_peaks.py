"""What is alive at the peak of one transformer layer's forward and backward, and which phase made it: the
`backward_peaks` sections of docs/saved_tensors.yaml, the inventory ndcp's backward workspace prices
(ndcp/estimate/activations.py backward_workspace_bytes; docs/formulas.md §5.5). Run by
scripts/measure_saved_tensors.py's main (same environment, same method: its _Timeline records, on the meta device,
every storage an op makes and which are alive after every op; weights, their gradients, the layer output and the
leaf input are left out, as in its _peak), at two token counts, to show the terms are linear in the tokens.

- `backward_peaks`: torchtitan 0.3.0's eager Llama-3-8B bf16 block under each of its activation-checkpoint
  policies (the blocks measure_saved_tensors builds).
- `megatron_backward_peaks` (only with MEGATRON_LM set to a Megatron-LM checkout; d98e8a6 was measured): Megatron-
  Core's local-spec TransformerLayer (core/models/gpt/gpt_layer_specs.py get_gpt_layer_local_spec) at Llama-3-8B's
  sizes, tp 1, bf16, no recompute, RMSNorm as CUDA runs it (measure_saved_tensors' stand-in), SwiGLU with
  bias_activation_fusion (SwiGLUFunction), no RoPE (its tensors do not reach the MLP's peak). Its core attention is
  the flash stand-in measure_saved_tensors uses (the local spec's unfused DotProductAttention keeps a·T² softmax
  bytes no Megatron run uses). On the meta device
  swiglu_back runs eagerly, so its two halves are separate tensors before torch.cat; on a GPU Megatron compiles it
  (core/jit.py jit_fuser = torch.compile) and Inductor writes the halves into the concatenated output.

    MEGATRON_LM=/path/to/Megatron-LM python scripts/measure_saved_tensors.py > docs/saved_tensors.yaml
"""
from __future__ import annotations

import os
import sys

import torch

from measure_saved_tensors import MICRO_BATCH, _build, _cuda_rms_norm, _key, _sizes, _Timeline

PEAK_TOKENS = (8192, 4096)
MEGATRON_SOURCE = os.environ.get("MEGATRON_LM", "")


def alive_at_peak(block, leaf: torch.Tensor, call) -> tuple[int, int, list[tuple[str, str, int]]]:
    """(bytes the forward saved, peak bytes, [(phase, op, bytes)] of every storage alive at the peak), phase
    `forward` for what the forward made (kept for backward, or the output gradient the script makes) and `backward`
    for what the backward made (a recompute and the backward's temporaries). `call(block, x)` runs the forward."""
    timeline = _Timeline()
    with timeline:
        x = leaf * 1.0
        out = call(block, x)
        grad = torch.empty_like(out)
    for t in (x, grad):
        timeline.record(t)
    forward = set(timeline.snapshots[-1]) | {_key(x), _key(grad)}
    del x
    with timeline:
        out.backward(grad)
    held = [*block.parameters(), *block.buffers(), out, leaf]
    exclude = {_key(t) for t in held} | {_key(p.grad) for p in block.parameters() if p.grad is not None}
    peak, _, alive = timeline.at_peak(exclude)
    saved = sum(timeline.outputs[k][1] for k in forward if k not in exclude and k != _key(grad))
    rows = [("forward" if k in forward else "backward", timeline.outputs[k][2], timeline.outputs[k][1])
            for k in alive]
    return saved, peak, sorted(rows, key=lambda r: (r[0] != "backward", -r[2]))


def _torchtitan(policy: str, tokens: int):
    block = _build("0.3.0", "llama3", "8B", "bf16", policy)[0]
    leaf = torch.empty(MICRO_BATCH, tokens, _sizes(block)["hidden"], dtype=torch.bfloat16, device="meta",
                       requires_grad=True)
    return alive_at_peak(block, leaf, lambda b, x: b(x, None))


class _FlashCore(torch.nn.Module):
    """Megatron core attention ([s, b, heads, d] q and [s, b, groups, d] k, v -> [s, b, heads * d]) through the
    flash op, GQA not expanded, as the fused backends keep it."""

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None, **kwargs):
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False)[0]
        return out.permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1], -1)


def _megatron_layer():
    """Megatron-Core's local-spec layer at Llama-3-8B sizes (module docstring), in a one-rank gloo group."""
    sys.path.insert(0, MEGATRON_SOURCE)
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("gloo", rank=0, world_size=1)
        parallel_state.initialize_model_parallel(1, 1)
    config = TransformerConfig(num_layers=1, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                               ffn_hidden_size=14336, gated_linear_unit=True, activation_func=torch.nn.functional.silu,
                               bias_activation_fusion=True, add_bias_linear=False, normalization="RMSNorm",
                               bf16=True, params_dtype=torch.bfloat16, use_cpu_initialization=True,
                               perform_initialization=False, hidden_dropout=0.0, attention_dropout=0.0,
                               masked_softmax_fusion=False, bias_dropout_fusion=False, apply_rope_fusion=False)
    with torch.device("meta"):
        layer = build_module(get_gpt_layer_local_spec(normalization="RMSNorm"), config=config, layer_number=1)
    layer.self_attention.core_attention = _FlashCore()
    # its RMSNorm is torch.nn.RMSNorm (core/transformer/torch_norm.py): F.rms_norm as CUDA runs it, the stand-in
    # measure_saved_tensors uses (fused, no fp32 copies kept)
    torch.nn.functional.rms_norm = _cuda_rms_norm
    return layer.to(torch.bfloat16)


def _megatron(tokens: int):
    layer = _megatron_layer()
    leaf = torch.empty(tokens, MICRO_BATCH, 4096, dtype=torch.bfloat16, device="meta", requires_grad=True)
    return alive_at_peak(layer, leaf, lambda b, x: b(x, attention_mask=None)[0])


def _print(head: str, rows) -> None:
    print(f"{head}:")
    for keys, (saved, peak, alive) in rows:
        print("- " + "\n  ".join(f"{k}: {v}" for k, v in keys.items()))
        print(f"  saved_bytes: {saved}\n  peak_bytes: {peak}\n  alive:  # [phase, the op that made it, bytes]")
        for phase, op, nbytes in alive:
            print(f"  - [{phase}, '{op}', {nbytes}]")


def main() -> None:
    print("# scripts/measure_backward_peaks.py: what is alive at the peak of one layer's forward and backward")
    _print("backward_peaks", [({"tokens": t, "policy": p}, _torchtitan(p, t))
                              for t in PEAK_TOKENS for p in ("none", "selective", "full")])
    if not MEGATRON_SOURCE:
        print("# megatron_backward_peaks left out: MEGATRON_LM not set (module docstring)", file=sys.stderr)
        return
    _print("megatron_backward_peaks", [({"code": "'d98e8a6'", "spec": "local", "model": "llama3-8b",
                                         "tokens": t, "policy": "none"}, _megatron(t)) for t in PEAK_TOKENS])
