"""Matmul FLOPs per layer kind and the time they take on one device.

FLOPs count only matrix multiplies (2 per multiply-add), as Narayanan 2021 Eq. (3) and Korthikanti 2022 App. A do.

FLOPs are counted two ways (docs/formulas.md §2.6):
- model FLOPs (the MFU numerator) under a declared convention: the causal half of the s x s attention core
  ("causal", Megatron-LM `num_floating_point_operations` since core_r0.12) or the full score matrix ("full", PaLM
  App. B, torchtitan, older Megatron and the published A100 papers); no recompute, no MoE capacity padding;
- hardware FLOPs (HFU) are what the time model executes (estimate/time.py sums them per layer): flash attention
  skips the masked upper half (factor 1/2) and its backward runs 5 matmuls for the forward's 2 (Dao 2023,
  FlashAttention-2 §3.1.2) because it recomputes the scores; recompute reruns what it reruns; experts run padded.

GEMM and attention-core times live in estimate/gemm.py. Element-wise work (norms, activations, residual adds,
dropout, and the unfused softmax when flash attention is off) is memory-bound: bytes / HBM bandwidth.
The per-layer check is Korthikanti 2022 Table 4 (22B, TP 8): estimated layer times are within 10 % of the
measured 19.6 / 27.2 / 20.9 / 20.3 ms (tests/estimate/test_time.py).
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ..specs.device import DeviceSpec
from ..specs.model import ModelSpec
from ..specs.run import MFU_CONVENTIONS
from .mixers import scan_core_flops, scan_elementwise_bytes

FLASH_BACKWARD_RATIO = 2.5  # FlashAttention-2 backward: 5 matmuls vs 2 in forward (Dao 2023 §3.1.2)
# score-matrix passes without flash attention: write QK^T, softmax read/write, dropout read/write, read by attention x V
UNFUSED_SOFTMAX_PASSES = 6


class Gemm(NamedTuple):
    """`count` independent (m x k) @ (k x n) matrix multiplies on one device (a named tuple: GEMM times are cached by
    shape, and tuples hash and compare fast)."""

    m: float
    k: float
    n: float
    count: float = 1.0

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n * self.count

    def bytes_moved(self, dtype_bytes: int) -> float:
        return (self.m * self.k + self.k * self.n + self.m * self.n) * dtype_bytes * self.count


def attention_projection_gemms(model: ModelSpec, tokens: float, tp: int) -> tuple[Gemm, ...]:
    """Q/K/V (or MLA down/up) projections and the output projection, one device of a TP group, forward."""
    h, a = model.hidden, model.heads
    if model.mla is not None:
        m = model.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        # DeepSeek-V2 §2.1.2 Eqs. (9)-(17); Megatron MLA: down projections duplicated on TP ranks, up projections split
        q_up, kv_up = mla_up_projection_gemms(model, tokens, tp)
        q = (Gemm(tokens, h, m.q_lora_rank), q_up) if m.q_lora_rank else (Gemm(tokens, h, a * qk / tp),)
        kv = (Gemm(tokens, h, m.kv_lora_rank + m.qk_rope_head_dim), kv_up)
        return q + kv + (Gemm(tokens, a * m.v_head_dim / tp, h),)
    d, (q, g) = model.dim_per_head, _qkv_heads(model)
    # Megatron column-parallel QKV (a + 2g heads of d), row-parallel output projection (Shoeybi 2019 §3)
    return Gemm(tokens, h, (q + 2 * g) * d / tp), Gemm(tokens, a * d / tp, h)


def _qkv_heads(model: ModelSpec) -> tuple[int, int]:
    """(query, key) output heads of the fused QKV projection (a value's = a key's): a gated query projection also
    outputs the per-head gate, 2a heads; g key heads."""
    return (2 if model.gated_attention else 1) * model.heads, model.num_kv_heads


def _scaled(gemms: tuple[Gemm, ...], share: float) -> tuple[Gemm, ...]:
    """The GEMMs of a share of a kind's layers (an average layer's part of them): counts times the share."""
    return gemms if share == 1.0 else tuple(g._replace(count=g.count * share) for g in gemms) if share else ()


def mixer_gemms(model: ModelSpec, kind: str, tokens: float, tp: int) -> tuple[Gemm, ...]:
    """The token mixers' projections of an average body layer of `kind`, forward, one device: softmax attention's
    on its share of the layers, Gated DeltaNet's and Mamba-2's input (column-parallel) and output (row-parallel)
    projections on theirs (Megatron-Core gated_delta_net.py, mamba_mixer.py: heads split over TP)."""
    shares = model.mixer_shares(kind)
    if shares.plain:
        return attention_projection_gemms(model, tokens, tp)
    out = _scaled(attention_projection_gemms(model, tokens, tp), shares.attention)
    for share, spec in ((shares.linear_attention, model.linear_attention), (shares.mamba, model.mamba)):
        if share:
            into, inner = spec.projection_widths()
            out += (Gemm(tokens, model.hidden, into / tp, share), Gemm(tokens, inner / tp, model.hidden, share))
    return out


def mla_up_projection_gemms(model: ModelSpec, tokens: float, tp: int) -> tuple[Gemm, ...]:
    """MLA's up-projections of the latents (DeepSeek-V2 Eqs. (10), (12)-(13); TP-split): the query's (an empty GEMM
    without a query latent) and the keys'/values'; what Megatron's mla_up_proj recompute module re-runs."""
    m, a = model.mla, model.heads
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    return (Gemm(tokens, m.q_lora_rank, a * qk / tp if m.q_lora_rank else 0.0),
            Gemm(tokens, m.kv_lora_rank, a * (m.qk_nope_head_dim + m.v_head_dim) / tp))


# A dense block's weight GEMMs by projection name (TrainerBehaviour.block_mm_order): parts of the fused GEMMs
# (block_projection_gemm); TP splits k of the row-parallel ones (wo, w2), n of the column-parallel others
BLOCK_PROJECTIONS = ("wqkv", "wq", "wk", "wv", "wo", "w1", "w3", "w2")
ROW_PARALLEL_PROJECTIONS = ("wo", "w2")


def block_projection_gemm(model: ModelSpec, name: str, tokens: float, tp: int) -> Gemm:
    """One projection of BLOCK_PROJECTIONS of a dense MHA/GQA block, forward, one device of a TP group: a part of the
    fused GEMMs attention_projection_gemms and mlp_gemms return, so each shape is written once. wqkv, wo and w2 are
    theirs; wq, wk and wv the fused QKV's column slices (its query heads, with the gate's under gated attention, and
    its key heads; _qkv_heads); w1 and w3 each half a gated MLP's fused up projection (w1 the whole one otherwise)."""
    if name not in BLOCK_PROJECTIONS:
        raise ValueError(f"block projection {name!r} unknown; valid: {', '.join(BLOCK_PROJECTIONS)}")
    if model.mla is not None:
        raise ValueError(f"block projection {name!r}: MHA/GQA attention only; MLA's projections are "
                         "attention_projection_gemms'")
    if name in ("w1", "w3", "w2"):
        up, down = mlp_gemms(model, model.ffn_hidden, tokens, tp)
        return down if name == "w2" else up._replace(n=up.n / 2) if model.gated else up
    qkv, wo = attention_projection_gemms(model, tokens, tp)
    if name in ("wqkv", "wo"):
        return qkv if name == "wqkv" else wo
    heads = _qkv_heads(model)[0 if name == "wq" else 1]
    return qkv._replace(n=heads * model.dim_per_head / tp)


def separate_qkv_gemms(model: ModelSpec, kind: str, gemms: tuple[Gemm, ...], tokens: float,
                       tp: int) -> tuple[Gemm, ...]:
    """A layer's weight GEMMs (layer_gemms) with the fused Q/K/V projection run as three GEMMs of their own shapes,
    wq, wk, wv (block_projection_gemm), as torchtitan before 0.3.0 runs them (RunSpec.qkv_projections separate;
    torchtitan e7c0cae models/llama3/model.py Attention: three nn.Linear, `xq, xk, xv = self.wq(x), self.wk(x),
    self.wv(x)`): the same FLOPs, each priced by the tile model (estimate/gemm.py) at its own narrower width. A layer
    whose attention is not one plain MHA/GQA block (MLA, a gated query, a hybrid's mixers) is returned as it is."""
    if model.mla is not None or model.gated_attention or not model.mixer_shares(kind).plain:
        return gemms
    fused = attention_projection_gemms(model, tokens, tp)[0]
    i = gemms.index(fused)
    separate = tuple(block_projection_gemm(model, name, tokens, tp) for name in ("wq", "wk", "wv"))
    return gemms[:i] + separate + gemms[i + 1:]


def fp8_gemms(model: ModelSpec, kind: str, gemms: tuple[Gemm, ...], tokens: float) -> tuple[Gemm, ...]:
    """The weight GEMMs of a layer of `kind` that run in FP8 under --precision fp8: all but the MoE router, which
    stays in BF16 (docs/formulas.md §3.1)."""
    router = router_gemm(model, tokens) if kind == "moe" else None
    return tuple(g for g in gemms if g != router)


@lru_cache(maxsize=4096)
def fp8_weight_elements(model: ModelSpec, kind: str, tp: int, ep: int = 1, etp: int = 1) -> float:
    """Weight elements on one device of the FP8 GEMMs (fp8_gemms) of an average body layer of `kind`: k x n of
    each, times its count (the local experts of a grouped GEMM); what Transformer Engine casts to FP8 where it casts
    a layer's weights (estimate/fp8.py step_weight_cast_seconds): the te.Linear-family weights (Transformer Engine
    docs, "Using FP8 with Transformer Engine"), not their biases, the norms, a mixer's convolution or state
    parameters, nor the router (Megatron-Core transformer/moe/moe_utils.py router_gating_linear: torch.mm at the
    router dtype, outside Transformer Engine)."""
    gemms = layer_gemms(model, kind, 1.0, tp, ep, etp, padded=False)
    return sum(g.k * g.n * g.count for g in fp8_gemms(model, kind, gemms, 1.0))


def mlp_gemms(model: ModelSpec, ffn: int, tokens: float, tp: int, count: float = 1.0) -> tuple[Gemm, ...]:
    """One MLP of width ffn: gated = gate and up (h->2F) then down (F->h); else up (h->F) then down."""
    up = (2 if model.gated else 1) * ffn / tp
    return Gemm(tokens, model.hidden, up, count), Gemm(tokens, ffn / tp, model.hidden, count)


def router_gemm(model: ModelSpec, tokens: float) -> Gemm:
    """The MoE router, hidden -> experts scores; replicated on TP ranks (and kept in BF16 under FP8)."""
    return Gemm(tokens, model.hidden, model.moe.experts)


def moe_gemms(model: ModelSpec, tokens: float, tp: int, ep: int, etp: int, padded: bool = True,
              imbalance: float = 1.0) -> tuple[Gemm, ...]:
    """Router, routed experts and shared experts of one MoE layer on one device, forward.

    Routed work is balanced over the stage's tp*cp*dp = etp*ep*edp devices, so each device runs tokens*top_k/tp
    token-expert pairs of full width; its E/ep local experts see tokens*top_k*etp*ep/(tp*E) rows each at width
    F/etp (sets the GEMM shape), each expert its own group of the grouped GEMM (estimate/gemm.py). What runs
    (padded=True, the time model) is the busiest device's: `imbalance` times the even share (RunSpec
    moe_load_imbalance), or with a capacity factor every expert padded to that factor (the busiest cut to it); model
    FLOPs (padded=False, the MFU numerator) count the even share.
    """
    m = model.moe
    pairs = tokens * m.top_k * ((m.capacity_factor or imbalance) if padded else 1.0)
    rows_per_expert = pairs * etp * ep / (tp * m.experts)
    routed = mlp_gemms(model, m.expert_ffn_hidden, rows_per_expert, etp, count=m.experts / ep)
    router = (router_gemm(model, tokens),)
    shared = mlp_gemms(model, m.shared_hidden * m.shared_experts, tokens, tp) if m.shared_experts else ()
    return router + routed + shared


def layer_gemms(model: ModelSpec, kind: str, tokens: float, tp: int, ep: int = 1, etp: int = 1,
                padded: bool = True, imbalance: float = 1.0) -> tuple[Gemm, ...]:
    """All weight GEMMs of one body layer of `kind` ("dense" or "moe"), forward, one device; `padded`: MoE experts
    as they run (padded to the capacity factor, or the busiest device's `imbalance` x share) or not (model FLOPs)."""
    mlp = (moe_gemms(model, tokens, tp, ep, etp, padded, imbalance) if kind == "moe"
           else mlp_gemms(model, model.ffn_hidden, tokens, tp))
    return mixer_gemms(model, kind, tokens, tp) + _scaled(mlp, model.mixer_shares(kind).mlp)


def attended_keys(model: ModelSpec, keys: float, causal: bool) -> float:
    """Keys one query attends to, on average over positions and body layers (docs/models.md §3): all `keys` for the
    full score matrix or a bidirectional (encoder) model; keys/2 under the causal mask; on the local layers, within a
    sliding window w < keys the band sum_i min(i, w) / keys = w - w^2 / (2 keys), within chunks of c < keys tokens
    (Llama 4) the causal half of each chunk, (n c^2 + r^2) / (2 keys) for n whole chunks and r tokens left."""
    if not causal or not model.causal:  # the full score matrix, or a bidirectional encoder's
        return keys
    window, chunk = model.sliding_window, model.attention_chunk
    if window and window < keys:
        local = window - window * window / (2 * keys)
    elif chunk and chunk < keys:
        whole = keys // chunk
        local = (whole * chunk * chunk + (keys - whole * chunk) ** 2) / (2 * keys)
    else:
        return keys / 2
    count = model.local_layers
    return (count * local + (model.layers - count) * keys / 2) / model.layers


def mixer_core_flops(model: ModelSpec, kind: str, queries: float, keys: float, tp: int, causal: bool) -> float:
    """The token-mixing cores of an average body layer of `kind`, forward: the attention core on the kind's
    attention share of its layers, the chunked scans on the others (estimate/mixers.py, no s^2 term)."""
    share = model.mixer_shares(kind).attention
    attention = share * attention_core_flops(model, queries, keys, tp, causal) if share else 0.0
    return attention + scan_core_flops(model, kind, queries, tp)


def attention_core_flops(model: ModelSpec, queries: float, keys: float, tp: int, causal: bool) -> float:
    """QK^T plus attention x V for `queries` query tokens against `keys` key tokens, forward (Korthikanti App. A:
    4*b*s^2*h for MHA); causal=True keeps only the unmasked pairs (the causal half, and within a sliding window the
    band), as flash attention computes; causal=False the whole score matrix."""
    if model.mla is not None:
        qk, v = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim, model.mla.v_head_dim
    else:
        qk = v = model.dim_per_head
    return 2.0 * queries * attended_keys(model, keys, causal) * model.heads / tp * (qk + v)


def output_layer_gemm(model: ModelSpec, tokens: float, tp: int) -> Gemm:
    """Logits: hidden -> vocab (vocab-parallel over TP), forward (Narayanan Eq. 3: 2*B*s*h*V)."""
    return Gemm(tokens, model.hidden, model.vocab / tp)


def mtp_projection_gemm(model: ModelSpec, tokens: float) -> Gemm:
    """An MTP module's 2h -> h projection of [norm(h_i); norm(emb(t_{i+k}))] (DeepSeek-V3 §2.2 Eq. 21)."""
    return Gemm(tokens, 2 * model.hidden, model.hidden)


def encoder_gemms(model: ModelSpec, images: float, side: int, tp: int) -> tuple[Gemm, ...]:
    """Outside the vision encoder's layers, `images` images of side x side pixels, forward, one device: the patch
    embedding (replicated) and the projector over each image's language-model tokens (its linear layers split over
    TP as Megatron's MultimodalProjector splits them; docs/models.md §5)."""
    e = model.encoder
    patch = Gemm(images * e.patches(side), e.patch_width, e.hidden)
    rows = images * e.image_tokens(side)
    if e.projector == "linear":
        return patch, Gemm(rows, e.projector_input, e.output_hidden / tp)
    return (patch, Gemm(rows, e.projector_input, e.projector_width / tp),
            Gemm(rows, e.projector_width / tp, e.output_hidden))


def total_flops(gemms) -> float:
    return sum(g.flops for g in gemms)


# -- model FLOPs (the MFU numerator, under a declared convention; docs/formulas.md §2.6) ----------------------------
# Hardware FLOPs (HFU) are not counted here: they are what the time model executes, summed by estimate/time.py.
@lru_cache(maxsize=1024)
def layer_forward_flops(model: ModelSpec, kind: str, seq: int, convention: str) -> float:
    """Model forward FLOPs of one body layer for one sequence, unsharded, no capacity padding: the attention core
    counts the causal half (convention "causal", Megatron-LM since core_r0.12) or the full s x s scores ("full",
    PaLM App. B, torchtitan, Megatron before core_r0.12)."""
    return (total_flops(layer_gemms(model, kind, seq, 1, padded=False))
            + mixer_core_flops(model, kind, seq, seq, 1, causal=_causal(convention)))


def _causal(convention: str) -> bool:
    if convention not in MFU_CONVENTIONS:
        raise ValueError(f"mfu convention {convention!r}: expected one of {', '.join(MFU_CONVENTIONS)}")
    return convention == "causal"


@lru_cache(maxsize=256)
def mtp_forward_flops(model: ModelSpec, seq: int, convention: str) -> float:
    """Forward FLOPs of all MTP modules for one sequence: projection, one transformer layer, shared output head."""
    if not model.mtp_depth:
        return 0.0
    per_module = (mtp_projection_gemm(model, seq).flops
                  + layer_forward_flops(model, model.mtp_layer_kind, seq, convention)
                  + output_layer_gemm(model, seq, 1).flops)
    return model.mtp_depth * per_module


def body_forward_flops(model: ModelSpec, seq: int, convention: str) -> float:
    """Forward FLOPs of all body layers for one sequence."""
    body = model.dense_layers * layer_forward_flops(model, "dense", seq, convention)
    if model.moe is not None:
        body += model.moe_layers * layer_forward_flops(model, "moe", seq, convention)
    return body


@lru_cache(maxsize=256)
def forward_flops_per_sequence(model: ModelSpec, seq: int, convention: str) -> float:
    """Forward FLOPs of the whole model for one sequence: body layers, logits and MTP modules (embedding: none)."""
    return (body_forward_flops(model, seq, convention) + output_layer_gemm(model, seq, 1).flops
            + mtp_forward_flops(model, seq, convention))


def model_flops_per_sequence(model: ModelSpec, seq: int, convention: str) -> float:
    """Model FLOPs (no recompute) for one sequence: forward + backward = 3 x forward (Korthikanti Eq. 7)."""
    return 3.0 * forward_flops_per_sequence(model, seq, convention)


@lru_cache(maxsize=256)
def encoder_forward_flops(model: ModelSpec, images: int, side: int, convention: str) -> float:
    """Forward FLOPs of the vision encoder (bidirectional layers over each image's patches) and its projector for
    one sample of `images` images (docs/models.md §5)."""
    if model.encoder is None or not images:
        return 0.0
    e = model.encoder
    layers = e.layers * layer_forward_flops(model.encoder_model, "dense", e.patches(side), convention)
    return images * layers + total_flops(encoder_gemms(model, images, side, 1))


def model_flops_per_step(model: ModelSpec, seq: int, global_batch: int, convention: str, images: int = 0,
                         image_size: int = 0) -> float:
    """Model FLOPs of one optimizer step, whole cluster (the MFU numerator times the step time), with the vision
    encoder's for `images` images per sample of `image_size` pixels."""
    encoder = 3.0 * encoder_forward_flops(model, images, image_size, convention)
    return global_batch * (model_flops_per_sequence(model, seq, convention) + encoder)


def narayanan_flops_per_step(model: ModelSpec, seq: int, global_batch: int) -> float:
    """Narayanan 2021 Eq. (3), 96 B s l h^2 (1 + s/6h + V/16lh): full-convention model FLOPs plus one more forward
    of every body layer (full recompute). The basis some published runs state their TFLOP/s on."""
    return (model_flops_per_step(model, seq, global_batch, "full")
            + global_batch * body_forward_flops(model, seq, "full"))


def elementwise_bytes(model: ModelSpec, kind: str, tokens: float, keys: float, tp: int, sp: bool,
                      flash: bool, dtype_bytes: int) -> float:
    """HBM bytes of one layer's memory-bound forward ops on one device (reads + writes, fused as Megatron fuses them).

    Two norms (read + write h) and two bias-dropout-add residuals (read 2h, write h) run on tokens/tp with sequence
    parallelism, else on every TP rank (Korthikanti §4.2.2); the MLP activation reads its input(s) and writes F/tp;
    without flash attention the score matrix makes UNFUSED_SOFTMAX_PASSES passes per head.
    """
    h, shares = model.hidden, model.mixer_shares(kind)
    norm_tokens = tokens / tp if sp else tokens
    norms_and_residuals = norm_tokens * (2 * 2 * h + 2 * 3 * h) / (2 if model.hybrid_blocks else 1)  # one per block
    if kind == "moe":
        m = model.moe
        width = m.expert_ffn_hidden * m.top_k + m.shared_hidden * m.shared_experts
    else:
        width = model.ffn_hidden
    activation = shares.mlp * tokens * width / tp * (3 if model.gated else 2)
    scores = 0.0 if flash else shares.attention * tokens * keys * model.heads / tp * UNFUSED_SOFTMAX_PASSES
    return ((norms_and_residuals + activation + scores) * dtype_bytes
            + scan_elementwise_bytes(model, kind, tokens, tp, dtype_bytes))


def memory_seconds(nbytes: float, device: DeviceSpec) -> float:
    return nbytes / device.hbm_bandwidth


__all__ = ["Gemm", "BLOCK_PROJECTIONS", "ROW_PARALLEL_PROJECTIONS", "block_projection_gemm", "layer_gemms",
           "fp8_gemms", "fp8_weight_elements", "separate_qkv_gemms", "mixer_gemms", "router_gemm",
           "attention_core_flops", "mixer_core_flops",
           "output_layer_gemm", "mtp_projection_gemm",
           "layer_forward_flops", "body_forward_flops", "forward_flops_per_sequence", "model_flops_per_sequence",
           "model_flops_per_step", "narayanan_flops_per_step", "encoder_gemms", "encoder_forward_flops",
           "elementwise_bytes", "memory_seconds", "FLASH_BACKWARD_RATIO"]
