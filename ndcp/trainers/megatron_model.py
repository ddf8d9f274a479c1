"""Megatron-LM's model arguments (pretrain_gpt.py on Megatron-Core): the architecture a ModelSpec states, and the
block of run settings the user fills in (tokenizer, data, iterations, learning-rate schedule, checkpoints).

Flag names, types and defaults are pinned in facts/megatron.yaml (Megatron-LM main d98e8a6: training/arguments.py,
and the flags it generates from core/transformer/transformer_config.py TransformerConfig and
training/config/training_config.py). Where Megatron has no flag for a model fact, a note says so.
"""
from __future__ import annotations

from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.trainer_behaviour import MEGATRON, MEGATRON_LM_LOSS_KERNEL
from .base import Placeholder

OFFLOAD = "offload"  # the activation-offload option (specs/recompute.py): Megatron's --fine-grained-activation-offloading

# Megatron's Llama-3.x RoPE scaling fixes everything but the factor (core/models/common/embeddings/
# rotary_pos_embedding.py RotaryEmbedding._apply_scaling: low_freq_factor 1, high_freq_factor 4, original 8192)
LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_positions": 8192}
# MLA's YaRN start context has no flag: MLATransformerConfig.original_max_position_embeddings = 4096
MLA_YARN_ORIGINAL = 4096

# What the user fills in: Megatron-LM's own flags with placeholder values (training/config/training_config.py
# TokenizerConfig, TrainingConfig, SchedulerConfig, CheckpointConfig; training/arguments.py --lr, --min-lr, --data-path)
PLACEHOLDERS = (
    Placeholder("--tokenizer-type", "<TOKENIZER_TYPE>", "a Megatron tokenizer class, e.g. HuggingFaceTokenizer"),
    Placeholder("--tokenizer-model", "<TOKENIZER_MODEL>", "the tokenizer (a Hugging Face model directory or name)"),
    Placeholder("--data-path", "<DATA_PATH>", "the prefix of the preprocessed dataset (.bin/.idx)"),
    Placeholder("--train-iters", "<TRAIN_ITERS>", "optimizer steps to run"),
    Placeholder("--lr", "<LR>", "peak learning rate"),
    Placeholder("--min-lr", "<MIN_LR>", "learning rate at the end of the decay"),
    Placeholder("--lr-decay-style", "<LR_DECAY_STYLE>", "constant, linear, cosine, inverse-square-root or WSD"),
    Placeholder("--lr-warmup-iters", "<LR_WARMUP_ITERS>", "warm-up steps"),
    Placeholder("--save", "<CHECKPOINT_DIR>", "where checkpoints are written"),
    Placeholder("--save-interval", "<SAVE_INTERVAL>", "steps between checkpoints (--save needs it)"),
    Placeholder("--load", "<CHECKPOINT_DIR>", "where a checkpoint is resumed from"),
)


def architecture(model: ModelSpec, run: RunSpec, notes: list[str]) -> list[str]:
    """The model's architecture as Megatron-LM flags (shape, attention, MLP, norms, positions, MoE, MLA, MTP)."""
    m = model
    flags = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden), "--ffn-hidden-size", str(m.ffn_hidden),
             "--num-attention-heads", str(m.heads)]
    if m.mla is None and m.num_kv_heads != m.heads:
        flags += ["--group-query-attention", "--num-query-groups", str(m.num_kv_heads)]
    if m.mla is None and m.head_dim and m.head_dim != m.hidden // m.heads:
        flags += ["--kv-channels", str(m.head_dim)]
    if m.activation == "swiglu":
        flags.append("--swiglu")
    flags += ["--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm", "--norm-epsilon", repr(m.norm_eps),
              "--max-position-embeddings", str(max(m.max_positions, run.seq_len)),
              "--vocab-size", str(m.vocab), "--make-vocab-size-divisible-by", "1",
              "--attention-dropout", str(m.attention_dropout), "--hidden-dropout", str(m.hidden_dropout)]
    if m.qk_norm:
        flags.append("--qk-layernorm")
    if not m.tied_embeddings:
        flags.append("--untie-embeddings-and-output-weights")
    if not m.linear_bias:
        flags.append("--disable-bias-linear")
    if m.qkv_bias and not m.linear_bias:
        flags.append("--add-qkv-bias")
    if set(m.layer_mixers) - {"A"} or m.gated_attention:
        notes.append(hybrid_note(m))
    return flags + _positions(m, notes) + _moe(m) + _mla(m)


def hybrid_note(m: ModelSpec) -> str:
    """What the GPT-model arguments cannot state of a hybrid model (docs/models.md §6): its layer pattern and mixer
    shapes, which Megatron-Core's hybrid model (pretrain_mamba.py, megatron/core/ssm) takes; not emitted because
    facts/megatron.yaml does not pin those flags."""
    parts = [f"layer pattern {m.layer_mixers}" + (" (one block per layer)" if m.hybrid_blocks else "")]
    if m.linear_attention is not None:
        g = m.linear_attention
        parts.append(f"Gated DeltaNet {g.key_heads} key / {g.value_heads} value heads of {g.key_head_dim} / "
                     f"{g.value_head_dim}, convolution {g.conv_kernel}")
    if m.mamba is not None:
        parts.append(f"Mamba-2 {m.mamba.heads} heads of {m.mamba.head_dim}, state {m.mamba.state}, "
                     f"{m.mamba.groups} groups")
    if m.gated_attention:
        parts.append("gated attention output")
    return (f"{m.name} has hybrid layers the GPT-model arguments above do not state ({'; '.join(parts)}): set them "
            "for Megatron-Core's hybrid model (pretrain_mamba.py) before launching")


def _positions(m: ModelSpec, notes: list[str]) -> list[str]:
    """Position embedding, RoPE base and scaling (training/arguments.py _add_network_size_args, _add_mla_args)."""
    if m.position_embedding != "rope":
        return ["--position-embedding-type", "learned_absolute"]
    scaling = m.rope_scaling
    kind = "yarn" if scaling is not None and scaling.kind == "yarn" and m.mla is None else "rope"
    flags = ["--position-embedding-type", kind, "--rotary-base", str(round(m.rotary_base))]
    if m.rotary_base != round(m.rotary_base):
        notes.append(f"--rotary-base takes an integer: {m.name}'s base {m.rotary_base:g} became "
                     f"{round(m.rotary_base)}")
    if m.mla is not None:  # MLA takes yarn unless told (MLATransformerConfig.rope_type; argument_utils.py)
        flags += ["--rope-type", "yarn" if scaling is not None and scaling.kind == "yarn" else "rope"]
    if scaling is None:
        return flags
    if scaling.kind == "llama3":
        differs = [f"{k} {getattr(scaling, k):g}" for k, v in LLAMA3_FIXED.items() if getattr(scaling, k) != v]
        if differs:
            notes.append(f"Megatron's Llama-3 RoPE scaling fixes {', '.join(f'{k} {v:g}' for k, v in LLAMA3_FIXED.items())}"
                         f": {m.name}'s {', '.join(differs)} cannot be stated")
        return flags + ["--use-rope-scaling", "--rope-scaling-factor", repr(scaling.factor)]
    flags += ["--rotary-scaling-factor", repr(scaling.factor), "--mscale", repr(scaling.mscale),
              "--mscale-all-dim", repr(scaling.mscale_all_dim)]
    if m.mla is not None:
        if scaling.original_max_positions != MLA_YARN_ORIGINAL:
            notes.append(f"Megatron's MLA YaRN starts from {MLA_YARN_ORIGINAL} positions and has no flag for "
                         f"{m.name}'s {scaling.original_max_positions}: set MLATransformerConfig."
                         "original_max_position_embeddings in the model provider")
        return flags
    return flags + ["--yarn-original-max-position-embeddings", str(scaling.original_max_positions)]


def _moe(m: ModelSpec) -> list[str]:
    """Experts, their layers and the router (TransformerConfig moe_* fields; --moe-layer-freq)."""
    if m.moe is None:
        return []
    moe = m.moe
    flags = ["--num-experts", str(moe.experts), "--moe-router-topk", str(moe.top_k),
             "--moe-ffn-hidden-size", str(moe.expert_ffn_hidden), "--moe-grouped-gemm",
             "--moe-router-score-function", moe.router_score]  # the dispatcher: a run setting (megatron.flags)
    if moe.shared_experts:
        flags += ["--moe-shared-expert-intermediate-size", str(moe.shared_experts * moe.shared_hidden)]
    if moe.first_dense_layers or moe.layer_frequency != 1:
        flags += ["--moe-layer-freq", moe_layer_pattern([int(m.is_moe_layer(i)) for i in range(m.layers)])]
    if moe.capacity_factor:
        flags += ["--moe-expert-capacity-factor", str(moe.capacity_factor)]
    if moe.router_groups:
        flags += ["--moe-router-num-groups", str(moe.router_groups), "--moe-router-group-topk",
                  str(moe.router_group_topk)]
    if moe.router_expert_bias:
        flags.append("--moe-router-enable-expert-bias")
    if moe.routed_scaling != 1.0:
        flags += ["--moe-router-topk-scaling-factor", repr(moe.routed_scaling)]
    return flags


def _mla(m: ModelSpec) -> list[str]:
    """Multi-latent attention and multi-token prediction (_add_mla_args; TransformerConfig mtp_num_layers)."""
    flags = []
    if m.mla is not None:
        mla = m.mla
        flags += ["--multi-latent-attention", "--kv-lora-rank", str(mla.kv_lora_rank),
                  "--qk-head-dim", str(mla.qk_nope_head_dim), "--qk-pos-emb-head-dim", str(mla.qk_rope_head_dim),
                  "--v-head-dim", str(mla.v_head_dim)]
        if mla.q_lora_rank:
            flags += ["--q-lora-rank", str(mla.q_lora_rank)]
    if m.mtp_depth:
        flags += ["--mtp-num-layers", str(m.mtp_depth)]
    return flags


def moe_layer_pattern(pattern: list[int]) -> str:
    """A MoE layer pattern in Megatron's --moe-layer-freq list expression, runs written as [x]*n."""
    runs: list[list[int]] = []
    for x in pattern:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    return "(" + "+".join(f"[{x}]*{n}" for x, n in runs) + ")"


__all__ = ["OFFLOAD", "architecture", "hybrid_note", "moe_layer_pattern", "PLACEHOLDERS", "LLAMA3_FIXED", "MLA_YARN_ORIGINAL"]


# -- the output layer's loss kernel (RunSpec.loss_kernel) --------------------------------------------------------
# What selects each kernel Megatron-LM runs (core/models/common/language_module/language_module.py
# compute_language_model_loss @d98e8a6, the main loss and MTP's, multi_token_prediction.py): no
# --cross-entropy-loss-fusion, tensor_parallel.vocab_parallel_cross_entropy (unfused, Megatron-LM's default); with it,
# fused_vocab_parallel_cross_entropy (--cross-entropy-fusion-impl native, its default) or Transformer Engine's
# parallel cross entropy (te), which training/arguments.py validate_args refuses at d98e8a6 ("disabled due to
# stability issues", since 168cb15d70, 2026-06-03). The native kernel takes the TP group (vocabulary-parallel
# logits) and nothing else: validate_args and ModelParallelConfig.__post_init__ @d98e8a6 tie the flag to no
# precision, FP8 recipe, context parallelism, MTP or tensor parallelism; only --deterministic-mode
# (training/determinism.py ARG_VALUES_REQUIRED_FOR_DETERMINISM) requires it off, and ndcp never writes that flag
LOSS_KERNEL_FLAGS = {"unfused": [], "native": ["--cross-entropy-loss-fusion"]}
# How a file states each kernel read_loss_kernel reads, for a refusal to name
LOSS_KERNEL_STATED = {"unfused": "no --cross-entropy-loss-fusion", "native": "--cross-entropy-loss-fusion",
                      "te": "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te"}


def loss_kernel_ran(run: RunSpec) -> str:
    """The loss kernel the emitted file runs for the plan's (RunSpec.loss_kernel): unfused (no flag) when the run
    asks for it; else Megatron's fused native loss (trainer: MEGATRON.loss_kernel; te, refused at the pinned
    Megatron-LM, and flash or eager, not Megatron's losses, as native)."""
    return "unfused" if run.loss_kernel == "unfused" else MEGATRON.loss_kernel


def loss_kernel_note(run: RunSpec) -> str | None:
    """Why the file runs another loss kernel than the plan's, or None."""
    if run.loss_kernel == "te":
        return ("--loss-kernel te: Megatron-LM (d98e8a6) refuses --cross-entropy-fusion-impl te; the file runs its "
                "native fused loss (--cross-entropy-loss-fusion), priced as --loss-kernel native")
    if run.loss_kernel in ("flash", "eager"):
        return (f"--loss-kernel {run.loss_kernel} is not a Megatron loss: the file runs Megatron's native fused loss "
                "(--cross-entropy-loss-fusion), priced as --loss-kernel native")
    return None


def read_loss_kernel(fusion: bool, impl: str | None) -> str:
    """The loss kernel parsed --cross-entropy-loss-fusion / --cross-entropy-fusion-impl run: without the fusion
    flag Megatron-LM's default, unfused (whatever ndcp's own files default to)."""
    return ("te" if impl == "te" else "native") if fusion else MEGATRON_LM_LOSS_KERNEL
