"""Activation memory of one body layer for one micro-batch, from an op-level inventory (the one place it is written).

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4 (formulas.md §5): a GPT
layer stores sbh(34 + 5as/h) bytes with 16-bit activations and 1-byte dropout masks. Each stored tensor below carries
its sharding: `tp` tensors are split by tensor parallelism; `seq` tensors are full-width activations that plain TP
replicates and sequence parallelism splits by tp; `core` tensors are the attention core that selective recompute drops.
Every tensor's sequence dimension is split by context parallelism. Full recompute keeps only the layer input.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..specs.model import ModelSpec
from ..specs.run import RunSpec

MASK_BYTES = 1  # dropout masks are stored as bytes (Korthikanti §4.1)
FP32 = 4


@dataclass(frozen=True)
class Tensor:
    """One stored activation: name, bytes per device before sharding, and how it is sharded."""

    name: str
    bytes: float
    shard: str  # "tp" | "seq" | "core" | "expert"


def _attention_inventory(model: ModelSpec, run: RunSpec, tokens: int, seq: int) -> list[Tensor]:
    """Attention block. `tokens` = local tokens of the micro-batch (mbs * seq / cp); keys span the full sequence `seq`."""
    B, h, a = run.activation_bytes, model.hidden, model.heads
    items = [Tensor("norm1_input", B * tokens * h, "seq"), Tensor("attention_input", B * tokens * h, "seq")]
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            items += [Tensor("q_latent", 2 * B * tokens * m.q_lora_rank, "seq")]  # down-projection output + its norm
        items += [Tensor("kv_latent", B * tokens * (2 * m.kv_lora_rank + m.qk_rope_head_dim), "seq"),
                  Tensor("query", B * tokens * a * qk, "tp"), Tensor("key", B * tokens * a * qk, "tp"),
                  Tensor("value", B * tokens * a * m.v_head_dim, "tp"),
                  Tensor("out_proj_input", B * tokens * a * m.v_head_dim, "tp")]
    else:
        d, g = model.dim_per_head, model.num_kv_heads
        items += [Tensor("query", B * tokens * a * d, "tp"), Tensor("key", B * tokens * g * d, "tp"),
                  Tensor("value", B * tokens * g * d, "tp"), Tensor("out_proj_input", B * tokens * a * d, "tp")]
    scores = a * tokens * seq  # local queries x all keys, per micro-batch (tokens already includes mbs)
    if run.flash_attention:
        items.append(Tensor("softmax_stats", FP32 * a * tokens, "core"))  # logsumexp kept by flash attention
    else:
        items.append(Tensor("softmax_output", B * scores, "core"))
        if model.attention_dropout > 0:
            items += [Tensor("attention_dropout_mask", MASK_BYTES * scores, "core"),
                      Tensor("attention_dropout_output", B * scores, "core")]
    if model.hidden_dropout > 0:
        items.append(Tensor("attention_output_dropout_mask", MASK_BYTES * tokens * h, "seq"))
    return items


def _mlp_inventory(model: ModelSpec, run: RunSpec, tokens: int, ffn: int, shard: str) -> list[Tensor]:
    """MLP of width ffn: GeLU stores fc1 output and fc2 input (2 x ffn); SwiGLU stores gate+up (2 x ffn) and fc2 input."""
    B = run.activation_bytes
    width = 3 * ffn if model.gated else 2 * ffn
    return [Tensor("mlp_hidden", B * tokens * width, shard)]


def _mlp_block_inventory(model: ModelSpec, run: RunSpec, tokens: int, moe: bool, tp: int, sp: bool,
                         etp: int) -> list[Tensor]:
    """Norm, MLP input, and the dense MLP or the MoE (router, dispatched tokens, experts, shared experts)."""
    B, h = run.activation_bytes, model.hidden
    items = [Tensor("norm2_input", B * tokens * h, "seq"), Tensor("mlp_input", B * tokens * h, "seq")]
    if not moe:
        items += _mlp_inventory(model, run, tokens, model.ffn_hidden, "tp")
    else:
        m = model.moe
        # Tokens each rank routes: its sequence shard (SP splits it by tp); balanced routing gives every EP rank the
        # same number of token copies, top_k per token, padded to the capacity factor when one is set.
        routed = tokens / (tp if sp else 1) * m.top_k * (m.capacity_factor or 1.0)
        items += [Tensor("router_logits", FP32 * tokens * m.experts, "seq"),
                  Tensor("expert_input", B * routed * etp * h, "expert"),
                  Tensor("expert_hidden", B * routed * (3 if model.gated else 2) * m.expert_ffn_hidden, "expert"),
                  Tensor("expert_output", B * routed * h, "expert")]
        if m.shared_experts:
            items += _mlp_inventory(model, run, tokens, m.shared_experts * m.shared_hidden, "tp")
    if model.hidden_dropout > 0:
        items.append(Tensor("mlp_dropout_mask", MASK_BYTES * tokens * h, "seq"))
    return items


def layer_inventory(model: ModelSpec, run: RunSpec, moe: bool, tp: int, cp: int, etp: int, mbs: int,
                    sp: bool) -> list[Tensor]:
    """Every tensor one layer stores for backward, before sharding (except expert tensors, already per rank)."""
    tokens = mbs * run.seq_len // cp
    return (_attention_inventory(model, run, tokens, run.seq_len)
            + _mlp_block_inventory(model, run, tokens, moe, tp, sp, etp))


def sharded_bytes(tensor: Tensor, tp: int, sp: bool) -> float:
    """Bytes of one tensor on one device: TP splits `tp`/`core`; SP also splits `seq`; expert tensors are per rank."""
    if tensor.shard in ("tp", "core"):
        return tensor.bytes / tp
    if tensor.shard == "seq":
        return tensor.bytes / tp if sp else tensor.bytes
    return tensor.bytes


@lru_cache(maxsize=65536)
def layer_activation_bytes(model: ModelSpec, run: RunSpec, kind: str, mode: str, tp: int, cp: int, ep: int, etp: int,
                           mbs: int, sp: bool) -> float:
    """Bytes one body layer keeps for one micro-batch under recompute `mode` (none | selective | full).

    selective drops the attention core (Korthikanti §5, "selective activation recomputation"); full keeps only the
    layer input, sequence-sharded when SP is on (Megatron keeps the checkpoint in the SP layout): 2sbh(/t).
    """
    if mode == "full":
        return run.activation_bytes * mbs * run.seq_len / cp * model.hidden / (tp if sp else 1)
    items = layer_inventory(model, run, kind == "moe", tp, cp, etp, mbs, sp)
    return sum(sharded_bytes(t, tp, sp) for t in items if not (mode == "selective" and t.shard == "core"))


@lru_cache(maxsize=65536)
def recompute_workspace_bytes(model: ModelSpec, run: RunSpec, kind: str, mode: str, tp: int, cp: int, ep: int,
                              etp: int, mbs: int, sp: bool) -> float:
    """Extra bytes while one recomputed layer runs its backward: what the recompute rematerialises (SAPP ND's
    backward overhead, sapp.md §2.3)."""
    if mode == "none":
        return 0.0
    keep = layer_activation_bytes(model, run, kind, "none", tp, cp, ep, etp, mbs, sp)
    return keep - layer_activation_bytes(model, run, kind, mode, tp, cp, ep, etp, mbs, sp)


@lru_cache(maxsize=16384)
def head_activation_bytes(model: ModelSpec, run: RunSpec, tp: int, cp: int, mbs: int, sp: bool) -> dict[str, float]:
    """Per micro-batch: embedding-side bytes kept per in-flight micro-batch on the first stage, and the output side
    on the last stage (final norm and output-projection inputs, fp32 logits s*b*V/t; Korthikanti §4.3)."""
    B, h = run.activation_bytes, model.hidden
    tokens = mbs * run.seq_len / cp
    seq_shard = tp if sp else 1
    embedding = (MASK_BYTES * tokens * h / seq_shard) if model.hidden_dropout > 0 else 0.0
    output_inputs = 2 * B * tokens * h / seq_shard
    logits = FP32 * tokens * model.vocab / tp
    return {"embedding": embedding, "output_inputs": output_inputs, "logits": logits}
