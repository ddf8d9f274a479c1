"""Model architecture spec: transformer shape, MoE, MLA, MTP and hybrid token mixers, with exact parameter counts per
component."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .encoder import EncoderSpec
from .layer_variants import MAX_LAYERS, MLASpec, MoESpec
from .mixers import (ATTENTION, MLP_ONLY, LinearAttentionSpec, MambaSpec, MixerShares, check_layer_mixers,
                     mixer_shares)
from .rope import RopeScaling
from .fields import (SpecError, cached_hash, divisors, finite_number, non_negative_int, one_of, positive_int, require,
                     state_without_hash)

# MLP activations: GELU (GPT), ReLU (OPT), squared ReLU (Primer, So et al. 2021; Nemotron-4) have an up and a down
# projection; SwiGLU and GeGLU (Shazeer 2020, "GLU Variants Improve Transformer") add a gate projection.
ACTIVATIONS = ("gelu", "relu", "squared_relu", "swiglu", "geglu")
GATED_ACTIVATIONS = ("swiglu", "geglu")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")


def _printable(text: str) -> bool:
    """Text a terminal or a UTF-8 file can take: encodable, and no control characters (tabs and newlines aside)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return all(c.isprintable() or c in "\t\n" for c in text)


@dataclass(frozen=True)
class LayerParameters:
    """Parameters of one transformer layer, split by how they are sharded (dense vs expert)."""

    attention: int
    mlp: int  # dense MLP or the shared experts and router of a MoE layer (non-expert-parallel part)
    experts: int  # routed experts (expert-parallel part); 0 for dense layers
    norms: int
    active_experts: int  # routed-expert parameters a token actually uses (top-k of them)
    replicated: int = 0  # of attention + mlp, those every TP rank holds whole (ModelSpec.tp_replicated_params)

    def per_tp_rank(self, tp: int) -> float:
        """Attention and MLP parameters on one of `tp` tensor-parallel ranks: the split ones' share, the
        replicated ones whole."""
        return (self.attention + self.mlp - self.replicated) / tp + self.replicated

    @property
    def dense(self) -> int:
        """Parameters sharded like attention (by TP), i.e. everything except routed experts."""
        return self.attention + self.mlp + self.norms

    @property
    def total(self) -> int:
        return self.dense + self.experts


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer. Sizes in elements; dropout as probabilities."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    name: str
    """the library name, or the spec file's"""
    layers: int
    """transformer layers of the language model (MTP modules not counted)"""
    hidden: int
    """hidden size (model width)"""
    heads: int
    """attention (query) heads"""
    ffn_hidden: int
    """MLP width of a dense layer"""
    vocab: int
    """vocabulary size (embedding and output rows)"""
    kv_heads: int = 0
    """key/value heads (grouped-query attention; 0 = heads: multi-head attention)"""
    head_dim: int = 0
    """dims per attention head (0 = hidden / heads)"""
    activation: str = "swiglu"
    """MLP activation, one of ACTIVATIONS; swiglu and geglu add a gate projection"""
    max_positions: int = 4096
    """positions the model was trained for (rows of a learned position table)"""
    position_embedding: str = "rope"
    """rope (rotary, no parameters) or learned (a table of max_positions x hidden)"""
    rotary_base: float = 10000.0
    """RoPE base (theta; config.json rope_theta: Llama-3 500000); not priced, stated by the launch configurations"""
    rope_scaling: RopeScaling | None = None
    """RoPE scaling beyond the pretraining context (Llama-3.1 llama3, DeepSeek-V3 yarn; specs/rope.py), or None"""
    tied_embeddings: bool = False
    """the output projection shares the token embedding's weights"""
    norm: str = "rmsnorm"
    """rmsnorm or layernorm (which has a bias)"""
    norm_eps: float = 1e-5
    """epsilon of every normalisation (config.json rms_norm_eps); not priced, stated by the launch configurations"""
    qk_norm: bool = False
    """an RMSNorm on each head's queries and keys (Qwen3); its 2 x head_dim weights per layer are not counted"""
    linear_bias: bool = False
    """biases on every linear layer (GPT-2/3)"""
    qkv_bias: bool = False
    """biases on Q, K, V only (Qwen2)"""
    attention_dropout: float = 0.0
    """dropout probability on the attention scores (a mask kept for backward when > 0)"""
    hidden_dropout: float = 0.0
    """dropout probability after attention and after the MLP"""
    moe: MoESpec | None = None
    """the mixture of experts, or None for a dense model"""
    mla: MLASpec | None = None
    """multi-head latent attention (DeepSeek-V2/V3), or None for standard attention"""
    mtp_depth: int = 0
    """multi-token-prediction modules (DeepSeek-V3: 1)"""
    sliding_window: int = 0
    """sliding-window attention (Beltagy et al. 2020, Longformer; Mistral 7B): each query sees at most the last
    `sliding_window` keys (0 = full causal attention)"""
    attention_chunk: int = 0
    """chunked local attention (Llama 4): each query attends only to the keys of its own block of `attention_chunk`
    tokens, causally (0 = none; not with sliding_window)"""
    global_every: int = 0
    """with a sliding window or chunks, layers n-1, 2n-1, ... keep full attention (Gemma 2: 2, Gemma 3: 6, gpt-oss:
    2, Llama 4: 4); 0 = every layer is local (Mistral 7B v0.1, Phi-3, StarCoder2)"""
    layer_mixers: str = ""
    """the token mixer of each body layer, one character per layer (specs/mixers.py MIXER_CODES: A softmax
    attention, G Gated DeltaNet, M Mamba-2, - none); empty: softmax attention on every layer"""
    hybrid_blocks: bool = False
    """each body layer is one block, a mixer alone or ("-") the MLP alone (Megatron-Core hybrid models, Nemotron-H
    hybrid_override_pattern); false: every layer has its mixer and its MLP"""
    gated_attention: bool = False
    """softmax attention's output is gated per head by a sigmoid of a second query-sized projection (Qwen3-Next)"""
    linear_attention: LinearAttentionSpec | None = None
    """the Gated DeltaNet mixer of the G layers, or None"""
    mamba: MambaSpec | None = None
    """the Mamba-2 mixer of the M layers, or None"""
    causal: bool = True
    """a causal decoder; false: bidirectional attention (a ViT encoder's layers)"""
    encoder: EncoderSpec | None = None
    """a vision encoder and projector beside the language model (docs/models.md §5)"""
    source: str = ""
    """where the shape comes from (a config, a paper)"""
    assumptions: tuple[str, ...] = ()
    """what reading the source assumed or approximated, one line each (a Hugging Face config of a model_type ndcp
    does not know, read the Llama way; docs/models.md §1): every report's assumptions print them"""

    def __post_init__(self):
        require(isinstance(self.name, str) and self.name.strip() != "", "name", self.name, "expected a non-empty name")
        for name in ("name", "source"):
            text = getattr(self, name)
            require(isinstance(text, str) and _printable(text), name, text,
                    "expected printable text (no control characters or unpaired surrogates)")
        require(isinstance(self.assumptions, tuple) and all(isinstance(line, str) and _printable(line)
                                                            for line in self.assumptions),
                "assumptions", self.assumptions, "expected a list of printable lines")
        positive_int("layers", self.layers, MAX_LAYERS)
        for name in ("hidden", "heads", "ffn_hidden", "vocab", "max_positions"):
            positive_int(name, getattr(self, name))
        non_negative_int("kv_heads", self.kv_heads)
        non_negative_int("head_dim", self.head_dim)
        non_negative_int("mtp_depth", self.mtp_depth, MAX_LAYERS)
        non_negative_int("sliding_window", self.sliding_window)
        non_negative_int("attention_chunk", self.attention_chunk)
        require(not (self.attention_chunk and self.sliding_window), "attention_chunk", self.attention_chunk,
                f"expected 0 with a sliding_window ({self.sliding_window}): a layer attends within a window or a chunk")
        non_negative_int("global_every", self.global_every, MAX_LAYERS)
        require(self.global_every == 0 or self.sliding_window > 0 or self.attention_chunk > 0, "global_every",
                self.global_every, "needs a sliding_window or an attention_chunk > 0 (the other layers' attention); "
                                   "expected 0 without one")
        one_of("activation", self.activation, ACTIVATIONS)
        one_of("norm", self.norm, NORMS)
        one_of("position_embedding", self.position_embedding, POSITIONS)
        finite_number("rotary_base", self.rotary_base, 1.0, 1e12)
        finite_number("norm_eps", self.norm_eps, 0.0, 1.0, low_open=True)
        one_of("qk_norm", self.qk_norm, (False, True))
        finite_number("attention_dropout", self.attention_dropout, 0.0, 1.0)
        finite_number("hidden_dropout", self.hidden_dropout, 0.0, 1.0)
        require(self.kv_heads == 0 or self.heads % self.kv_heads == 0, "kv_heads", self.kv_heads,
                f"must divide heads ({self.heads}); valid: {', '.join(str(d) for d in divisors(self.heads))}")
        if self.head_dim == 0 and self.mla is None:
            require(self.hidden % self.heads == 0, "heads", self.heads,
                    f"must divide hidden ({self.hidden}) unless head_dim is given")
        if self.encoder is not None:
            require(self.encoder.output_hidden == self.hidden, "encoder.output_hidden", self.encoder.output_hidden,
                    f"must be the language model's hidden size ({self.hidden})")
        self._check_mixers()
        if self.moe is not None:
            require(self.moe.first_dense_layers < self.layers, "moe.first_dense_layers", self.moe.first_dense_layers,
                    f"must be < layers ({self.layers})")

    def _check_mixers(self) -> None:
        """The layer pattern and the mixer specs it names agree; hybrid layers are not combined with what their
        estimators do not model (local attention windows, MLA, MTP; docs/models.md §6)."""
        one_of("hybrid_blocks", self.hybrid_blocks, (False, True))
        one_of("gated_attention", self.gated_attention, (False, True))
        check_layer_mixers(self.layer_mixers, self.layers, self.hybrid_blocks)
        for code, spec, name in (("G", self.linear_attention, "linear_attention"), ("M", self.mamba, "mamba")):
            require((code in self.layer_mixers) == (spec is not None), name, spec,
                    f"give it exactly when layer_mixers has {code} layers ({self.layer_mixers or 'none'})")
        if set(self.layer_mixers) - {ATTENTION}:
            for name in ("sliding_window", "attention_chunk", "mtp_depth"):
                require(not getattr(self, name), name, getattr(self, name),
                        "expected 0 with linear-attention, Mamba or MLP-only layers (not modelled together)")
            require(self.mla is None, "mla", self.mla, "expected none with linear-attention or Mamba layers")
        require(not self.hybrid_blocks or self.layer_mixers, "hybrid_blocks", self.hybrid_blocks,
                "needs layer_mixers (which blocks are mixers and which are MLPs)")
        if self.hybrid_blocks and self.moe is not None:
            require(self.moe.first_dense_layers == 0 and self.moe.layer_frequency == 1, "moe.layer_frequency",
                    self.moe.layer_frequency, "expected 1 (and no dense prefix) with hybrid_blocks: every MLP block "
                                              "is a MoE block")

    @cached_property
    def report_assumptions(self) -> tuple[str, ...]:
        """What every report states about this model: `assumptions`, and for hybrid layers how they are priced
        (docs/models.md §6)."""
        mixed = [c for c in self.layer_mixers if c != ATTENTION]
        if not mixed:
            return self.assumptions
        return self.assumptions + (
            f"hybrid layers ({len(mixed)} of {self.layers} without softmax attention): Gated DeltaNet's scan core "
            "priced as unfused attention's per-head GEMMs, Mamba-2's mixer kernel by kernel (HBM bytes; matmuls at "
            "the Triton chunk scan's rate measured on Hopper, capped at it elsewhere); Gated DeltaNet unvalidated on "
            "measured runs, Mamba-2 hybrids measured on Nemotron-3 Nano only (steps estimated 24-36 % short, "
            "docs/formulas.md §2.7); each layer priced at its kind's average mixer (exact "
            "for the whole model and for stages holding whole repeats of the layer pattern)",)

    # -- shape helpers -------------------------------------------------------------------------------------------
    @property
    def num_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def gated(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    def is_local_layer(self, index: int) -> bool:
        """Whether body layer `index` (0-based) attends within the sliding window or its chunk (else: full causal
        attention)."""
        if not (self.sliding_window or self.attention_chunk):
            return False
        return not self.global_every or (index + 1) % self.global_every != 0

    @cached_property
    def local_layers(self) -> int:
        return sum(self.is_local_layer(i) for i in range(self.layers))

    @property
    def norm_params(self) -> int:
        """Parameters of one normalisation of width `hidden` (LayerNorm has a bias, RMSNorm does not)."""
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    @property
    def mtp_layer_kind(self) -> str:
        """The kind of the transformer layer in each MTP module: the MoE layer in a MoE model (DeepSeek-V3 §2.2)."""
        return "moe" if self.moe is not None else "dense"

    def mixer(self, index: int) -> str:
        """Body layer `index`'s token mixer (specs/mixers.py MIXER_CODES)."""
        return self.layer_mixers[index] if self.layer_mixers else ATTENTION

    def has_mlp(self, index: int) -> bool:
        """Whether body layer `index` has an MLP (dense or MoE): every layer, except a hybrid block's mixer."""
        return not self.hybrid_blocks or self.mixer(index) == MLP_ONLY

    def mixer_shares(self, kind: str) -> MixerShares:
        """The share of each mixer, and of layers with an MLP, among the body layers of `kind` ("dense" or "moe"):
        what a layer of that kind costs on average (the estimators price each kind at its average; docs/models.md
        §6)."""
        return self._kind_shares[kind == "moe"]

    @cached_property
    def _kind_shares(self) -> tuple[MixerShares, MixerShares]:
        kinds = [self.is_moe_layer(i) for i in range(self.layers)]
        return tuple(mixer_shares([self.mixer(i) for i in range(self.layers) if kinds[i] == moe],
                                  [self.has_mlp(i) for i in range(self.layers) if kinds[i] == moe])
                     for moe in (False, True))

    def is_moe_layer(self, index: int) -> bool:
        """Whether body layer `index` (0-based) is a MoE layer (with hybrid_blocks: every MLP block of a MoE
        model)."""
        if self.hybrid_blocks:
            return self.moe is not None and self.mixer(index) == MLP_ONLY
        if self.moe is None or index < self.moe.first_dense_layers:
            return False
        return (index - self.moe.first_dense_layers) % self.moe.layer_frequency == 0

    @cached_property
    def moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    # -- parameter counts (exact, from the layer definitions) ----------------------------------------------------
    def _mlp_params(self, ffn: int) -> int:
        """One MLP of width ffn: gated = gate+up+down (3hF), else up+down (2hF), plus biases if any."""
        weights = (3 if self.gated else 2) * self.hidden * ffn
        return weights + ((ffn * (2 if self.gated else 1) + self.hidden) if self.linear_bias else 0)

    @cached_property
    def attention_params(self) -> int:
        h, a = self.hidden, self.heads
        if self.mla is not None:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * qk) if m.q_lora_rank else h * a * qk
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + a * m.v_head_dim * h
        d, g = self.dim_per_head, self.num_kv_heads
        qkv_out = ((2 if self.gated_attention else 1) * a + 2 * g) * d  # a gated query projection is twice as wide
        params = h * qkv_out + a * d * h
        if self.linear_bias:
            params += qkv_out + h
        elif self.qkv_bias:
            params += qkv_out
        return params

    def mixer_params(self, mixer: str) -> int:
        """Parameters of one token mixer of `mixer`'s code (specs/mixers.py); none for an MLP-only block."""
        if mixer == ATTENTION:
            return self.attention_params
        if mixer == MLP_ONLY:
            return 0
        spec = self.linear_attention if mixer == "G" else self.mamba
        return spec.parameters(self.hidden)

    def _block(self, mixer: str, moe: bool, mlp: bool = True) -> LayerParameters:
        """One body layer: its mixer, its dense MLP or MoE (shared experts and router; routed experts apart), and a
        norm before each of the two (one in a hybrid block)."""
        norms = (1 if self.hybrid_blocks else 2) * self.norm_params
        replicated = self.tp_replicated_params(mixer, moe and mlp)
        if not mlp:
            return LayerParameters(self.mixer_params(mixer), 0, 0, norms, 0, replicated)
        if not moe:
            return LayerParameters(self.mixer_params(mixer), self._mlp_params(self.ffn_hidden), 0, norms, 0,
                                   replicated)
        m = self.moe
        expert = self._mlp_params(m.expert_ffn_hidden)
        shared = m.shared_experts * self._mlp_params(m.shared_hidden)
        return LayerParameters(self.mixer_params(mixer), shared + self.hidden * m.experts, m.experts * expert, norms,
                               m.top_k * expert, replicated)

    def tp_replicated_params(self, mixer: str, moe: bool) -> int:
        """Of a layer's attention and MLP parameters, those Megatron-Core keeps whole on every tensor-parallel rank:
        MLA's down projections and the norms of their latents (`linear_q_down_proj`, `linear_kv_down_proj` are
        TELinear layers built with parallel_mode "duplicated", the latent norms plain norms:
        megatron/core/transformer/multi_latent_attention.py and the DeepSeek layer specs), and the MoE router's
        hidden x experts weight (transformer/moe/router.py TopKRouter: one full weight per rank). The time model
        runs those GEMMs whole on each rank too (compute.mixer_gemms, router_gemm)."""
        router = self.hidden * self.moe.experts if moe else 0
        if mixer != ATTENTION or self.mla is None:
            return router
        m, h = self.mla, self.hidden
        q_down = h * m.q_lora_rank + m.q_lora_rank if m.q_lora_rank else 0  # without it Q is column-parallel
        return router + q_down + h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank

    @cached_property
    def _layers(self) -> tuple[LayerParameters, ...]:
        kinds = {}
        for i in range(self.layers):
            key = (self.mixer(i), self.is_moe_layer(i), self.has_mlp(i))
            kinds.setdefault(key, self._block(*key))
        return tuple(kinds[(self.mixer(i), self.is_moe_layer(i), self.has_mlp(i))] for i in range(self.layers))

    def _largest(self, moe: bool) -> LayerParameters:
        return max((p for i, p in enumerate(self._layers) if self.is_moe_layer(i) == moe), key=lambda p: p.total,
                   default=self._block(ATTENTION, moe))

    @cached_property
    def dense_layer(self) -> LayerParameters:
        """A dense layer (with hybrid layers: the largest one, what a ZeRO-3 gather or a stage's slope reads)."""
        return self._largest(False) if self.layer_mixers else self._block(ATTENTION, False)

    @cached_property
    def moe_layer(self) -> LayerParameters | None:
        """A MoE layer (with hybrid layers: the largest one), or None for a dense model."""
        if self.moe is None:
            return None
        return self._largest(True) if self.layer_mixers else self._block(ATTENTION, True)

    def layer(self, index: int) -> LayerParameters:
        if not self.layer_mixers:
            return self.moe_layer if self.is_moe_layer(index) else self.dense_layer
        return self._layers[index]

    @property
    def embedding_params(self) -> int:
        """Token embedding plus learned positions (if any)."""
        positions = self.max_positions * self.hidden if self.position_embedding == "learned" else 0
        return self.vocab * self.hidden + positions

    @property
    def output_params(self) -> int:
        """Final norm plus the output projection (0 extra weights when tied to the embedding)."""
        return self.norm_params + (0 if self.tied_embeddings else self.vocab * self.hidden)

    @cached_property
    def mtp_params(self) -> int:
        """One MTP module per depth: a transformer layer (MoE if the model has MoE), 2h->h projection, two norms."""
        if not self.mtp_depth:
            return 0
        block = (self.moe_layer or self.dense_layer).total
        return self.mtp_depth * (block + 2 * self.hidden * self.hidden + 2 * self.norm_params)

    @cached_property
    def language_parameters(self) -> int:
        """The language model (embeddings, body, output; MTP modules excluded, as papers count)."""
        body = sum(self.layer(i).total for i in range(self.layers))
        return self.embedding_params + body + self.output_params

    # -- submodules (docs/models.md §5) ----------------------------------------------------------------------------
    @cached_property
    def encoder_model(self) -> "ModelSpec | None":
        """The encoder's layers as a bidirectional ModelSpec, for the per-layer estimators (no vocabulary)."""
        e = self.encoder
        if e is None:
            return None
        return ModelSpec(name=f"{self.name} vision encoder", layers=e.layers, hidden=e.hidden, heads=e.heads,
                         ffn_hidden=e.ffn_hidden, vocab=1, activation=e.activation, norm=e.norm,
                         linear_bias=e.linear_bias, causal=False)

    @cached_property
    def submodules(self) -> tuple[tuple[str, int], ...]:
        """(name, parameters) of the language model and each submodule beside it, in pipeline order."""
        if self.encoder is None:
            return (("language_model", self.language_parameters),)
        e = self.encoder
        encoder = e.embedding_params(e.image_size) + e.layers * self.encoder_model.dense_layer.total
        return (("vision_encoder", encoder), ("projector", e.projector_params),
                ("language_model", self.language_parameters))

    @cached_property
    def parameters(self) -> int:
        """Total parameters: the language model and its submodules (MTP modules excluded, as papers count)."""
        return sum(n for _, n in self.submodules)

    @cached_property
    def active_parameters(self) -> int:
        """Parameters a token uses: routed experts count only top-k (MTP excluded)."""
        if self.moe is None:
            return self.parameters
        inactive = self.moe_layers * (self.moe_layer.experts - self.moe_layer.active_experts)
        return self.parameters - inactive


__all__ = ["ModelSpec", "MoESpec", "MLASpec", "LayerParameters", "LinearAttentionSpec", "MambaSpec", "SpecError"]
