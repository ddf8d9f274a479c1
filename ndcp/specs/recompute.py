"""Recompute options as data, and the per-stage plans built from them.

An option says which of a layer's stored activations it keeps for backward and which forward work it re-runs to
get the rest; the estimators read these fields (estimate/activations.py keeps, estimate/time.py and compute.py
re-run) and never an option's name. Adding an option is a row of OPTIONS (plus its tests) when it keeps and re-runs
pieces the estimators already know; a new piece is also named in the estimator that prices it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from .fields import SpecError, non_negative_int, one_of, require

# What an option keeps of the layer's activation inventory (estimate/activations.py).
KEEPS_ALL = "inventory"  # every tensor of the inventory except the `drops` (tensor names or sharding tags)
KEEPS_LAYER_INPUT = "layer_input"  # only the layer's input (the checkpoint)
# Forward pieces an option re-runs in backward (estimate/layer_time.py prices them, estimate/compute.py counts FLOPs).
ATTENTION_CORE = "attention_core"  # softmax(QK^T)V and, without flash attention, its elementwise ops
LAYER_FORWARD = "layer_forward"  # the whole layer forward with its TP/CP/EP forward communication
NORMS = "norms"  # the layer's pre-norms that are separate modules (attention_norm_fused): one or two
MLP_FORWARD = "mlp_forward"  # the dense MLP (its fused pre-norm, fc1, activation, fc2) with its TP communication
MOE_FORWARD = "moe_forward"  # the MoE block: router, dispatch and combine all-to-alls, experts, shared experts
MOE_ACTIVATION = "moe_activation"  # the routed experts' activation function (SwiGLU)
MLP_ACTIVATION = "mlp_activation"  # the dense MLP's activation function (SwiGLU: SiLU and the gate product)
MLA_UP_PROJECTION = "mla_up_projection"  # MLA's query and key/value up-projections of the latents
HOST_OFFLOAD = "host_offload"  # not a re-run: the layer's activations copied to host memory and back
# torchtitan's op-level selective checkpoint, what its `selective` re-runs in place of the attention core
# (TrainerBehaviour.selective_reruns): every second weight GEMM of the block in its forward order
# (TrainerBehaviour.block_mm_order) and the block's element-wise forward; the attention kernel's output is saved
OP_LEVEL_SAC = "op_level_sac"


@dataclass(frozen=True)
class RecomputeModule:
    """One op-level recompute piece: one of Megatron-Core's --recompute-modules (transformer_config.py, core_r0.14;
    docs/formulas.md §5.2) or MindFormers' select_recompute set (§5.4): the stored tensors it discards (activation
    inventory names) and the forward piece it re-runs in backward."""

    name: str
    drops: tuple[str, ...]
    reruns: str
    needs: tuple[str, ...]  # the layers it acts on, any one of them: "dense", "moe", "mla" (MLA attention); () any
    code: str  # short label in plan summaries
    part_of: str = ""  # a module that drops and re-runs all this one does (and more): it covers this one
    # In a Megatron-Core hybrid model (ModelSpec.hybrid_blocks): the block it acts on (HYBRID_BLOCKS; "" none)
    block: str = ""
    # What of `drops` it keeps anyway where the attention norm is fused into the first linear (attention_norm_fused)
    kept_if_fused: tuple[str, ...] = ()
    why: str = ""  # why it needs those layers (the refusal says it)


def attention_norm_fused(mla: bool, hybrid_blocks: bool) -> bool:
    """Whether a layer's attention (or mixer) norm is fused into its first linear, so that Megatron-Core's layernorm
    module does not recompute it (docs/formulas.md §5.2). Megatron-Core's Transformer Engine layer spec (megatron/
    core/models/gpt/gpt_layer_specs.py get_gpt_layer_with_transformer_engine_spec/_submodules at core_v0.14.0
    23e00ed0, core_v0.17.0 9539a12e and d98e8a6): a non-MLA attention fuses its norm into linear_qkv
    (TELayerNormColumnParallelLinear, input_layernorm left IdentityOp); MLA keeps a separate input_layernorm (unless
    mla_down_proj_fusion, default False); a hybrid model's blocks fuse theirs (HYBRID_BLOCKS below).
    transformer_layer.py recomputes a norm only where it is not an IdentityOp."""
    return not mla or hybrid_blocks


# The blocks of a Megatron-Core hybrid model (one block a layer: ModelSpec.hybrid_blocks) a module can act on. Its
# layer specs (megatron/core/models/mamba/mamba_layer_specs.py mamba_stack_spec, core_v0.17.0 9539a12e, the 26.04
# container's; megatron/core/models/hybrid/hybrid_layer_specs.py, d98e8a6): a Mamba-2 block is a MambaLayer, whose
# forward honours no recompute module (ssm/mamba_layer.py) and whose norm is fused into its in_proj
# (TELayerNormColumnParallelLinear); an attention block a TransformerLayer with its norm fused into linear_qkv
# (input_layernorm IdentityOp), so only core_attn acts there (transformer/attention.py checkpoint_core_attention); a
# dense MLP block an MLPLayer (a TransformerLayer) with its norm fused into fc1: mlp acts (recompute_mlp); a MoE
# block a MoETransformerLayer with a separate pre_mlp_layernorm (TENorm): layernorm acts on that norm alone
# (transformer_layer.py recompute_pre_mlp_layernorm: an IdentityOp norm is never recomputed), moe on the MoE layer
# (moe/moe_layer.py moe_layer_recompute), moe_act on the experts' activation (moe/experts.py).
HYBRID_BLOCKS = {"attention": "attention blocks", "moe": "MoE blocks", "dense": "dense MLP blocks"}

MODULES: dict[str, RecomputeModule] = {m.name: m for m in (
    RecomputeModule("core_attn", ("core",), ATTENTION_CORE, (), "s", block="attention"),
    # Megatron-Core recomputes a norm only where it is a separate module (transformer_layer.py: recompute_input_
    # layernorm and recompute_pre_mlp_layernorm only for a norm that is not an IdentityOp): the pre-MLP norm of a MoE
    # layer (a separate TENorm; a dense MLP's is fused into fc1, which the mlp module re-runs) and MLA's input norm
    # (attention_norm_fused); a dense non-MLA layer has neither.
    RecomputeModule("layernorm", ("attention_input", "moe_input"), NORMS, ("moe", "mla"), "ln", block="moe",
                    kept_if_fused=("attention_input",),
                    why="Megatron fuses a dense layer's norms into its linears (TELayerNormColumnParallelLinear)"),
    RecomputeModule("mla_up_proj", ("mla_query", "mla_key", "mla_value"), MLA_UP_PROJECTION, ("mla",), "mla"),
    RecomputeModule("mlp", ("mlp_input", "mlp_fc1_output", "mlp_act_output"), MLP_FORWARD, ("dense",), "mlp",
                    block="dense"),
    RecomputeModule("moe_act", ("expert_act_output",), MOE_ACTIVATION, ("moe",), "act", part_of="moe", block="moe"),
    RecomputeModule("moe", ("router_logits", "expert_input", "expert_fc1_output", "expert_act_output",
                            "shared_fc1_output", "shared_act_output"), MOE_FORWARD, ("moe",), "moe", block="moe"),
    # MindFormers' select_recompute: mindformers/models/utils.py LayerSetting.__init__ default_patterns
    # (feed_forward\.mul, feed_forward\.w1\.activation\.silu; mindformers 1.6.0 fd4deebc) re-runs the dense SwiGLU's
    # SiLU and its product with the up projection (models/llama/llama_layer.py LlamaFeedForward.construct): the
    # product (fc2's input) is not kept. The dense counterpart of moe_act; Megatron's mlp module re-runs it too.
    RecomputeModule("mlp_act", ("mlp_act_output",), MLP_ACTIVATION, ("dense",), "mact", part_of="mlp"),
)}


def modules_cover(modules: tuple[str, ...] | set[str], wanted: tuple[str, ...] | set[str]) -> bool:
    """Whether recomputing `modules` recomputes at least every module of `wanted` (itself or one it is part of)."""
    return all(n in modules or (MODULES[n].part_of and MODULES[n].part_of in modules) for n in wanted)


@dataclass(frozen=True)
class RecomputeOption:
    """One way to run a layer's backward: what it keeps, what it re-runs, and how heavy it is."""

    name: str
    keeps: str  # KEEPS_ALL or KEEPS_LAYER_INPUT
    drops: tuple[str, ...]  # inventory tensor names or sharding tags (estimate.activations.Tensor) not kept
    reruns: tuple[str, ...]  # forward pieces re-run in backward
    # The kind rule's order: plans give MoE layers the heaviest options first (estimate/layout.py). An option that
    # recomputes a superset of another's modules keeps no more bytes and re-runs no less work (tests/specs/
    # test_recompute.py checks it on the estimators); full keeps the least of all (solver bounds rely on HEAVIEST).
    weight: int
    source: str  # where the option comes from (docs/formulas.md)
    modules: tuple[str, ...] = ()  # the Megatron recompute modules it is made of (MODULES), canonical order
    code: str = ""  # its short label in plan summaries ("n", "s", "f"; module options use their name)
    buffers: int = 1  # layers' worth of dropped activations on the device while one layer runs its backward

    @property
    def label(self) -> str:
        return self.code or self.name

    def dropped(self, attention_norm_fused: bool) -> tuple[str, ...]:
        """The inventory tensors (names or sharding tags) it does not keep; where the attention norm is fused into a
        linear (attention_norm_fused: a non-MLA attention, a hybrid model's blocks) less what its modules keep
        there (RecomputeModule.kept_if_fused: layernorm keeps the attention norm's output)."""
        if not attention_norm_fused or not self.modules or self.keeps != KEEPS_ALL:
            return self.drops
        return tuple(d for n in self.modules for d in MODULES[n].drops if d not in MODULES[n].kept_if_fused)


def _modules_option(names: tuple[str, ...], weight: int, source: str = "") -> RecomputeOption:
    modules = [MODULES[n] for n in names]
    return RecomputeOption("+".join(names), KEEPS_ALL, tuple(d for m in modules for d in m.drops),
                           tuple(m.reruns for m in modules), weight,
                           source or "Megatron-Core --recompute-granularity selective --recompute-modules "
                           + " ".join(names), names, "+".join(m.code for m in modules))


# Megatron-Core's module combinations offered (rows; weight = the kind rule's order): the single modules and the
# combinations published runs use, e.g. DeepSeek-V3 §3.3 (RMSNorm, MLA up-projection and the SwiGLU output
# recomputed), Megatron-Bridge's DeepSeek-V3 recipes (recompute_modules [mla_up_proj, mlp]) and its Nemotron-3 Nano
# H100 FP8 recipe (core_attn, layernorm, moe and moe_act, which moe covers:
# scripts/performance/configs/nemotronh/nemotron_3_workload_base_configs.py @21d102f5e).
MODULE_COMBINATIONS = (("layernorm",), ("mla_up_proj",), ("layernorm", "mla_up_proj"), ("moe_act",),
                       ("layernorm", "moe_act"), ("layernorm", "mla_up_proj", "moe_act"), ("mlp",),
                       ("layernorm", "mlp"), ("mla_up_proj", "mlp"), ("moe",), ("layernorm", "moe"),
                       ("core_attn", "layernorm", "moe"))
MEGATRON_MODULE_OPTIONS = tuple("+".join(names) for names in MODULE_COMBINATIONS)
# MindFormers' op-level select sets (recompute_config.select_recompute; docs/formulas.md §5.4). Its
# select_comm_recompute (`.*\.norm`) is no row: mindformers/models/utils.py LayerSetting.set_pattern_recompute only
# marks the norm primitive recompute_comm_op (MindSpore then recomputes the redistribution communication next to it,
# not the norm), and the tensor that saves (the all-gathered norm output under sequence parallelism) is not in the
# activation inventory, which already keeps the norm outputs sequence-sharded as Transformer Engine does.
MINDFORMERS_SELECT = "mlp_act"

OPTIONS: tuple[RecomputeOption, ...] = (
    RecomputeOption("none", KEEPS_ALL, (), (), 0, "no recompute", (), "n"),
    RecomputeOption("selective", KEEPS_ALL, ("core",), (ATTENTION_CORE,), 1,
                    "Korthikanti et al. 2022 §5, selective activation recomputation (docs/formulas.md §5); "
                    "Megatron-Core --recompute-modules core_attn", ("core_attn",), "s"),
    *(_modules_option(names, 2 + i) for i, names in enumerate(MODULE_COMBINATIONS)),
    _modules_option((MINDFORMERS_SELECT,), 2 + len(MODULE_COMBINATIONS),
                    "MindFormers recompute_config.select_recompute with its default patterns (mindformers/models/"
                    "utils.py LayerSetting.__init__ default_patterns; docs/formulas.md §5.4)"),
    # Activations in host memory: kept on the device is the layer input; the rest goes to the host in forward and
    # comes back in backward, the next layer's prefetched while this one runs (two layers' worth on the device).
    RecomputeOption("offload", KEEPS_LAYER_INPUT, (), (HOST_OFFLOAD,), 3 + len(MODULE_COMBINATIONS),
                    "activation offloading to host memory: Megatron-Core fine-grained activation offloading; "
                    "MindFormers swap (docs/formulas.md §5.3)", (), "o", 2),
    RecomputeOption("full", KEEPS_LAYER_INPUT, (), (LAYER_FORWARD,), 4 + len(MODULE_COMBINATIONS),
                    "Chen et al. 2016, checkpointing every layer; Megatron --recompute-granularity full",
                    tuple(MODULES), "f"),
)
OPTION_BY_NAME = {o.name: o for o in OPTIONS}
RECOMPUTE_MODES = tuple(o.name for o in OPTIONS)  # model order: lightest first
CLASSIC_MODES = ("none", "selective", "full")  # Korthikanti's three options (summaries always show them)
HEAVIEST_FIRST = tuple(o.name for o in sorted(OPTIONS, key=lambda o: -o.weight))
NO_RECOMPUTE = HEAVIEST_FIRST[-1]  # weight 0, keeps everything: the plan every layer starts from
HEAVIEST = HEAVIEST_FIRST[0]  # keeps the least and re-runs the most (bounds in solve/ rely on it)
RECOMPUTING = tuple(m for m in RECOMPUTE_MODES if m != NO_RECOMPUTE)


def option_for_modules(text: str) -> str:
    """The option recomputing exactly these modules ("layernorm+mla_up_proj+moe_act", any order; a module named with
    the one it is part of adds nothing: moe+moe_act is moe); SpecError listing the offered combinations otherwise."""
    names = [n.strip().lower() for n in str(text).replace(" ", "+").split("+") if n.strip()]
    unknown = [n for n in names if n not in MODULES]
    if unknown:
        raise SpecError(f"recompute_modules={text!r}: unknown module {unknown[0]!r}; modules: {', '.join(MODULES)}")
    wanted = {n for n in names if MODULES[n].part_of not in names}
    for option in OPTIONS:
        if set(option.modules) == wanted and option.keeps == KEEPS_ALL:
            return option.name
    offered = ", ".join(o.name for o in OPTIONS if o.modules and o.keeps == KEEPS_ALL)
    raise SpecError(f"recompute_modules={text!r} is not an offered combination; offered: {offered} "
                    "(core_attn is recompute=selective)")


def modules_without_layers(option: RecomputeOption, has_dense: bool, has_moe: bool, has_mla: bool) -> list[str]:
    """The modules of a module option that act on no layer of a model with these layers (none for the classic
    options: selective and full act on every layer)."""
    if option.keeps != KEEPS_ALL or option.name == "selective":
        return []
    present = {"dense": has_dense, "moe": has_moe, "mla": has_mla}
    return [n for n in option.modules if MODULES[n].needs and not any(present[k] for k in MODULES[n].needs)]


def recompute_option(name: str) -> RecomputeOption:
    return OPTION_BY_NAME[name]


MODE_INDEX = {name: i for i, name in enumerate(RECOMPUTE_MODES)}  # an option's place in RECOMPUTE_MODES


@dataclass(frozen=True, init=False)
class StageRecompute:
    """How many of one (virtual) pipeline stage's layers run each recompute option, in RECOMPUTE_MODES order.
    Built by option name: StageRecompute(selective=7, full=1)."""

    counts: tuple[int, ...] = field(default=(0,) * len(OPTIONS))

    def __init__(self, **by_option: int):
        for name, value in by_option.items():
            one_of("recompute option", name, RECOMPUTE_MODES)
            non_negative_int(f"recompute.{name}", value)
        object.__setattr__(self, "counts", tuple(by_option.get(name, 0) for name in RECOMPUTE_MODES))

    @classmethod
    def from_counts(cls, counts: tuple[int, ...]) -> "StageRecompute":
        """From counts already in RECOMPUTE_MODES order, checked by the caller (the solver's own plans)."""
        stage = cls.__new__(cls)
        object.__setattr__(stage, "counts", counts)
        return stage

    @property
    def layers(self) -> int:
        return sum(self.counts)

    def count(self, mode: str) -> int:
        return self.counts[MODE_INDEX[mode]]

    def as_dict(self) -> dict[str, int]:
        """Layers per option: the classic three always, module options where used."""
        return {m: n for m, n in zip(RECOMPUTE_MODES, self.counts) if n or m in CLASSIC_MODES}


@dataclass(frozen=True)
class RecomputePlan:
    """Either one option for every layer, or explicit per-stage counts (which grow into per-layer plans)."""

    mode: str = NO_RECOMPUTE
    stages: tuple[StageRecompute, ...] = ()

    def __post_init__(self):
        one_of("recompute", self.mode, RECOMPUTE_MODES + ("per-stage",))
        require((self.mode == "per-stage") == bool(self.stages), "recompute", self.mode,
                "per-stage plans need stage counts and uniform plans must not have them")

    @classmethod
    def uniform(cls, mode: str) -> "RecomputePlan":
        return cls(mode=mode)

    @property
    def is_uniform(self) -> bool:
        return self.mode != "per-stage"

    def for_stage(self, stage: int, layers: int) -> StageRecompute:
        """Counts for a (virtual) stage holding `layers` body layers."""
        if self.is_uniform:
            return _uniform_stage(self.mode, layers)
        return self.stages[stage]

    def key(self) -> tuple:
        """An orderable identity (for deterministic tie-breaking)."""
        return (self.mode, tuple(s.counts for s in self.stages))

    def summary(self) -> str:
        if self.is_uniform:
            return self.mode
        totals = {m: sum(s.count(m) for s in self.stages) for m in RECOMPUTE_MODES}
        shown = [m for m in RECOMPUTE_MODES if m in CLASSIC_MODES or totals[m]]
        return "per-stage " + "/".join(f"{totals[m]}{OPTION_BY_NAME[m].label}" for m in shown)

    def as_json(self):
        """The JSON `recompute` value: the mode string, or per-stage counts."""
        if self.is_uniform:
            return self.mode
        return {"stages": [{"stage": i, "layers": s.layers, **s.as_dict()} for i, s in enumerate(self.stages)]}


@lru_cache(maxsize=4096)
def _uniform_stage(mode: str, layers: int) -> StageRecompute:
    """A stage whose `layers` layers all run `mode` (uniform plans ask for it per stage, often)."""
    return StageRecompute(**{mode: layers})
