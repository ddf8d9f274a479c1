"""Megatron-LM (pretrain_gpt.py on Megatron-Core): launch arguments and its Trainer (TRAINER, at the end: what it
runs, and its behaviour as priced, specs/trainer_behaviour.py MEGATRON); reading arguments back: megatron_read.py.

Flag names, types and choices are pinned in facts/megatron.yaml (read from Megatron-LM's parse_args at the commit
named there); tests check every emitted flag against it and scripts/check_trainers.py feeds the emitted arguments to
Megatron-LM's own parse_args + validate_args.
"""
from __future__ import annotations

import dataclasses

from ..estimate.layout import partition
from ..schedules import schedule_named
from ..specs.model import ModelSpec
from ..specs.pipeline_layout import megatron_layout
from ..specs.run import RunSpec
from ..specs.strategy import StageRecompute, Strategy, accounted_partition, cp_a2a_size
from ..specs.recompute import (CLASSIC_MODES, HEAVIEST, LAYER_FORWARD, MEGATRON_MODULE_OPTIONS, MOE_FORWARD,
                               NO_RECOMPUTE, recompute_option)
from ..specs.trainer_behaviour import MEGATRON
from . import checkpoints
from .base import (Emitted, Trainer, fill_in_comment, nearest_optimizer_offload, nearest_schedule, option_lines,
                   option_words, overlap_value, planned_overlaps, stage_plans, uniform_cover, used_options, with_plan)
from .megatron_read import read, read_loss, read_overlap, recognises
from .megatron_model import (LOSS_KERNEL_FLAGS, OFFLOAD, PLACEHOLDERS, architecture, loss_kernel_note,
                             loss_kernel_ran)

# Transformer Engine's FP8 recipes by ndcp's names (Megatron-LM --fp8-recipe choices, facts/megatron.yaml)
FP8_RECIPE_FLAGS = {"delayed": "delayed", "tensorwise": "tensorwise", "blockwise": "blockwise", "mxfp8": "mxfp8"}
ZERO_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}  # Megatron FSDP --data-parallel-sharding-strategy


# -- the plan Megatron runs --------------------------------------------------------------------------------------
def _expressible(plans: list[StageRecompute], counts: tuple[int, ...]) -> tuple[list[StageRecompute], str | None]:
    """The nearest per-stage plan Megatron runs (covering `plans`) and why it differs (None: it is the plan).
    Megatron recomputes either one module set on every layer (--recompute-granularity selective
    --recompute-modules), or the first N layers of every (virtual) stage fully (--recompute-method block)."""
    used = used_options(plans)
    foreign = used - set(TRAINER.recompute_options)  # e.g. MindFormers' select set: covered below
    if len(used) <= 1 and not foreign and (not used or all(p.count(next(iter(used))) == c
                                                           for p, c in zip(plans, counts))):
        return plans, None  # one option on every layer, or none at all
    if OFFLOAD in used:  # --offload-modules acts on every layer: offload them all (it keeps what full keeps)
        return [StageRecompute(**{OFFLOAD: c}) for c in counts], (
            f"Megatron offloads the same modules on every layer: the plan's {option_words(used)} per stage became "
            "offload on every layer")
    if HEAVIEST not in used:
        mode = uniform_cover(plans, TRAINER.recompute_options)
        if mode != HEAVIEST:
            return [StageRecompute(**{mode: c}) for c in counts], (
                f"Megatron recomputes one module set on every layer: the plan's {option_words(used)} per stage became "
                f"{mode} on every layer")
    n = max(p.layers - p.count(NO_RECOMPUTE) for p in plans)
    block = [StageRecompute(**{NO_RECOMPUTE: c - min(n, c), HEAVIEST: min(n, c)}) for c in counts]
    if block == plans:
        return plans, None
    return block, ("Megatron applies one --recompute-num-layers to every (virtual) stage and cannot mix full with "
                   f"other recompute: the plan ({option_words(used)} per stage) became the first {n} layers of every "
                   "stage fully recomputed")



def nearest(model: ModelSpec, run: RunSpec, strategy: Strategy) -> tuple[Strategy, list[str]]:
    """The strategy Megatron runs for this plan, and what changed."""
    notes: list[str] = []
    s = nearest_optimizer_offload(TRAINER, nearest_schedule(TRAINER, strategy, notes), notes)
    if s.pp > 1 and s.zero in TRAINER.zero_without_pipeline:
        notes.append(f"Megatron FSDP (ZeRO-{s.zero}) runs without pipeline parallelism (its device mesh leaves the "
                     "stages out): emitted the distributed optimizer (ZeRO-1), which shards less")
        s = s.with_(zero=1, dp_shard=0)
    plans, why = _expressible(stage_plans(model, s), partition(model, s))
    if why is None:
        return s, notes
    return with_plan(model, s, plans), notes + [why + ", which recomputes at least as much on every stage"]


# -- emitting ----------------------------------------------------------------------------------------------------
def _layout(model: ModelSpec, s: Strategy) -> list[str]:
    counts = partition(model, s)
    if s.pp == 1:
        return []
    flags = []
    if s.vpp > 1 and s.mbn % s.pp:  # Megatron's default group (pp) needs mbn a multiple of pp (docs/formulas.md §4)
        flags += ["--microbatch-group-size-per-virtual-pipeline-stage",
                  str(schedule_named(s.schedule).group_size(s.pp, s.mbn))]
    if len(set(counts)) == 1:
        return flags + (["--num-layers-per-virtual-pipeline-stage", str(counts[0])] if s.vpp > 1 else [])
    if counts == accounted_partition(model.layers, s.virtual_stages):
        # layers + 2 split evenly, the embedding and the loss counted as layers (Megatron-LM arguments.py; core
        # transformer_block.py get_num_layers_to_build; docs/formulas.md §4)
        flags += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
        return flags + (["--num-virtual-stages-per-pipeline-rank", str(s.vpp)] if s.vpp > 1 else [])
    # Any other partition: Megatron's layout notation (docs/formulas.md §4; ndcp/specs/pipeline_layout.py)
    return flags + ["--pipeline-model-parallel-layout", megatron_layout(counts, model.mtp_depth)]


def _recompute(model: ModelSpec, s: Strategy) -> list[str]:
    """Recompute flags for a plan Megatron runs (nearest() first): one option everywhere, or full block N."""
    plans, counts = stage_plans(model, s), partition(model, s)
    used = used_options(plans)
    if not used:
        return []
    if used == {HEAVIEST} and any(p.count(HEAVIEST) != c for p, c in zip(plans, counts)):
        n = max(p.count(HEAVIEST) for p in plans)
        return ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", str(n)]
    (mode,) = used
    if mode == OFFLOAD:  # Megatron-Core fine-grained activation offloading (transformer_config.py)
        return ["--fine-grained-activation-offloading", "--offload-modules", *offload_modules(model)]
    if mode == HEAVIEST:
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    modules = list(recompute_option(mode).modules)
    # selective = core_attn, Megatron's default module set (transformer_config.py recompute_modules)
    return ["--recompute-granularity", "selective"] + (["--recompute-modules", *modules]
                                                       if modules != ["core_attn"] else [])


def _data_parallel(run: RunSpec, s: Strategy, notes: list[str]) -> list[str]:
    flags = ["--overlap-grad-reduce"]  # the estimate hides the gradient sync behind the backward (docs/formulas.md §7)
    if s.zero == 1:
        flags += ["--use-distributed-optimizer", "--overlap-param-gather"]
    elif s.zero >= 2:
        flags += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", ZERO_SHARDING[s.zero],
                  "--ckpt-format", "fsdp_dtensor", "--overlap-param-gather"]
    if s.dp_shard:  # HSDP: Megatron FSDP sharded inside each of R instances, replicated across them (Trainer.hsdp)
        flags += ["--num-distributed-optimizer-instances", str(s.dp_replicate), "--outer-dp-sharding-strategy",
                  "no_shard"]
    if run.grad_sync != "trainer" or run.param_gather != "trainer":
        notes.append(f"--grad-sync {run.grad_sync} / --param-gather {run.param_gather} have no Megatron flag: "
                     "Megatron runs its own schedule for the ZeRO stage (plan with trainer)")
    return flags


def _precision(run: RunSpec, s: Strategy) -> list[str]:
    flags = ["--fp16"] if run.precision == "fp16" else ["--bf16"]
    if run.fp8:
        flags += ["--fp8-format", "hybrid", "--fp8-recipe", FP8_RECIPE_FLAGS[run.fp8_recipe]]
        if s.zero >= 1:
            flags.append("--fp8-param-gather")  # ZeRO/FSDP gathers FP8 parameters (RunSpec.param_gather_bytes)
        first, last = run.bf16_layers  # TransformerConfig fields on the command line (facts/megatron.yaml)
        if first or last:  # both counts written: Megatron-Core's default for each is 1
            flags += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", str(first),
                      "--num-layers-at-end-in-bf16", str(last)]
    if run.optimizer_state_dtype == "bf16":
        flags += ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    if s.optimizer_offload:  # HybridDeviceOptimizer, all of it on the host; it needs the precision-aware optimizer
        flags += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0"]
        if run.optimizer_state_dtype != "bf16":
            flags.append("--use-precision-aware-optimizer")
    return flags


def offload_modules(model: ModelSpec) -> list[str]:
    """Megatron's --offload-modules that move a layer's activations to the host (transformer_config.py
    offload_modules; the input of each): the attention's, the MLP norm's, and the experts' where the model has them.
    Megatron has no module for the dense MLP's hidden activations, which ndcp's offload option also moves."""
    return ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"] + (
        ["expert_fc1", "moe_act"] if model.moe is not None else [])


def environment(s: Strategy) -> dict[str, str | None]:
    """Environment variables the launch sets (None: unsets). One CUDA hardware queue so TP/CP communication overlaps
    compute in issue order (Megatron-LM arguments.py validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for tp > 1
    or cp > 1 before Blackwell); Megatron FSDP (ZeRO 2/3) needs it unset or above one (arguments.py validate_args:
    "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.", d98e8a6), so it is unset there, as many launch
    scripts set it. Activation offloading with Transformer Engine >= 2.10 needs NVTE_CPU_OFFLOAD_V1=1 (validate_args)."""
    env: dict[str, str | None] = {}
    if s.zero >= 2:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = None
    elif s.tp > 1 or s.cp > 1:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if s.recompute.mode == OFFLOAD or any(p.count(OFFLOAD) for p in s.recompute.stages):
        env["NVTE_CPU_OFFLOAD_V1"] = "1"
    return env


def _environment_lines(env: dict[str, str | None]) -> str:
    return "".join(f"unset {k}\n" if v is None else f"export {k}={v}\n" for k, v in env.items())


def overlaps(model: ModelSpec, run: RunSpec, s: Strategy, notes: list[str]) -> tuple[frozenset, bool]:
    """The overlaps the file tells Megatron to run (what `read` gives back as the run's --overlap) for the plan's
    (estimate/overlap.py: the run's, where their conditions hold), and whether that changed what the plan runs:
    Megatron refuses --overlap-moe-expert-parallel-comm beside full recompute, the moe recompute module or more
    than one MTP layer, and --no-overlap-p2p-communication under interleaving with pp = 2 (TransformerConfig.
    __post_init__, arguments.py validate_args)."""
    runs = set(planned_overlaps(run, s))
    changed = False
    reruns = {r for m in used_options(stage_plans(model, s)) for r in recompute_option(m).reruns}
    if "ep" in runs and ({LAYER_FORWARD, MOE_FORWARD} & reruns or model.mtp_depth > 1):
        runs.discard("ep")
        changed = True
        notes.append("Megatron runs --overlap-moe-expert-parallel-comm without full or moe recompute and with at "
                     "most one MTP layer: emitted without the expert all-to-all overlap")
    if s.pp > 1 and s.vpp > 1 and "p2p" not in runs:
        if s.pp == 2:
            runs.add("p2p")
            changed = True
            notes.append("Megatron interleaves with pp = 2 only with --overlap-p2p-communication (its default): "
                         "emitted with the pipeline sends overlapped")
    else:
        runs.add("p2p")  # Megatron's default; it takes effect only when interleaving
    return frozenset(runs), changed


def _overlap_flags(runs: frozenset) -> list[str]:
    flags = ["--overlap-moe-expert-parallel-comm"] if "ep" in runs else []
    if "tp" in runs:
        flags.append("--tp-comm-overlap")
    if "p2p" not in runs:
        flags.append("--no-overlap-p2p-communication")
    return flags


def flags(model: ModelSpec, run: RunSpec, strategy: Strategy, domain_ranks: int = 8,
          notes: list[str] | None = None) -> list[str]:
    """pretrain_gpt.py arguments for the model, the strategy as given (nearest() first) and the run, without the
    overlaps (`overlaps`) and the placeholders."""
    s, notes = strategy, notes if notes is not None else []
    out = architecture(model, run, notes)
    out += ["--tensor-model-parallel-size", str(s.tp), "--pipeline-model-parallel-size", str(s.pp),
            "--context-parallel-size", str(s.cp)]
    if s.cp > 1:
        out += ["--cp-comm-type", s.cp_comm]
    if s.cp_comm == "a2a+p2p":  # a2a inside a scale-up domain, p2p across (ndcp.specs.strategy.cp_a2a_size)
        inner = cp_a2a_size(domain_ranks, s.tp, s.cp)
        out += ["--hierarchical-context-parallel-sizes", str(inner), str(s.cp // inner)]
    if model.moe is not None:
        out += ["--expert-model-parallel-size", str(s.ep), "--expert-tensor-parallel-size", str(s.etp)]
    if s.sp:
        out.append("--sequence-parallel")
    out += _layout(model, s)
    out += ["--micro-batch-size", str(s.mbs), "--global-batch-size", str(s.global_batch),
            "--seq-length", str(run.seq_len)]
    out += _precision(run, s) + _data_parallel(run, s, notes) + _recompute(model, s)
    out += LOSS_KERNEL_FLAGS[loss_kernel_ran(run)]  # the output layer's loss: fused unless the run asks for unfused
    for field in ("activation_func_fp8_input_store", "disable_parameter_transpose_cache"):  # TransformerConfig
        if getattr(run, field):  # fields Megatron-LM keeps off its command line (arguments.py `exclude`)
            notes.append(f"--{field.replace('_', '-')} has no Megatron-LM flag: set TransformerConfig.{field}=True "
                         "in the model provider")
    return out + _deferral(run, s, notes)


def _deferral(run: RunSpec, s: Strategy, notes: list[str]) -> list[str]:
    """The output layer's deferred weight gradient (RunSpec.wgrad_deferral_limit): ModelParallelConfig fields on
    the command line; Megatron refuses it without PP (model_parallel_config.py __post_init__)."""
    if run.wgrad_deferral_limit is None:
        return []
    if s.pp == 1:
        notes.append("Megatron defers the output layer's weight gradient only with pp > 1: emitted without "
                     "--defer-embedding-wgrad-compute")
        return []
    return ["--defer-embedding-wgrad-compute", "--wgrad-deferral-limit", str(run.wgrad_deferral_limit)]


def _delay_wgrad(run: RunSpec, runs: frozenset, notes: list[str]) -> bool:
    """Whether the file asks for --delay-wgrad-compute (RunSpec.delay_wgrad_compute): Megatron-Core refuses it without
    --overlap-moe-expert-parallel-comm (TransformerConfig.__post_init__ @d98e8a6), so not where the plan runs none."""
    if run.delay_wgrad_compute and "ep" not in runs:
        notes.append("Megatron delays the weight gradients only with --overlap-moe-expert-parallel-comm, which this "
                     "plan does not run: emitted without --delay-wgrad-compute")
    return run.delay_wgrad_compute and "ep" in runs


def emit(model: ModelSpec, run: RunSpec, strategy: Strategy, domain_ranks: int = 8) -> Emitted:
    """The environment and pretrain_gpt.py arguments that run `strategy` (or the nearest plan Megatron runs), the
    user's settings last, as placeholders."""
    s, notes = nearest(model, run, strategy)
    if run.trainer != TRAINER.name:
        notes.append(f"planned with {run.trainer}'s memory behaviour, not Megatron's: plan with --trainer megatron")
    out = flags(model, run, s, domain_ranks, notes)
    runs, changed = overlaps(model, run, s, notes)
    # the token dispatcher the plan priced (RunSpec.moe_dispatcher; flex: DeepEP, TransformerConfig's default backend)
    out += ["--moe-token-dispatcher-type", run.moe_dispatcher] if model.moe is not None else []
    delay = _delay_wgrad(run, runs, notes)
    changed = changed or delay != run.delay_wgrad_compute
    out += _overlap_flags(runs) + ["--delay-wgrad-compute"] * delay
    out += [x for p in PLACEHOLDERS for x in (p.option, p.value)]
    text = fill_in_comment(PLACEHOLDERS) + _environment_lines(environment(s)) + option_lines(out)
    emitted_run = (dataclasses.replace(run, overlap=overlap_value(runs, MEGATRON.default_overlaps),
                                       delay_wgrad_compute=delay) if changed else None)
    if run.fsdp_version != "trainer" and s.zero >= 2:  # what --use-megatron-fsdp runs instead (RunSpec.fsdp_version)
        notes.append(f"--fsdp-version {run.fsdp_version} is not what --use-megatron-fsdp runs: Megatron FSDP reduces "
                     "from its main-grad buffer with no pass over the gradients (plan with trainer)")
        emitted_run = dataclasses.replace(emitted_run or run, fsdp_version="trainer")
    if loss_kernel_note(run):  # the loss kernel the file runs instead (RunSpec.loss_kernel): Megatron's native one,
        notes.append(loss_kernel_note(run))  # stated for a Megatron plan; else the trainer's (read back as Megatron)
        kernel = loss_kernel_ran(run) if run.trainer == MEGATRON.name else "trainer"
        emitted_run = dataclasses.replace(emitted_run or run, loss_kernel=kernel)
    return Emitted(text, notes, None if s == strategy else s, emitted_run)


TRAINER = Trainer(
    behaviour=MEGATRON, version="Megatron-LM main (Megatron-Core 0.16+)",
    zero_stages=(0, 1, 2, 3),
    # ZeRO-0: DDP; 1: the distributed optimizer; 2/3: Megatron FSDP (arguments.py --data-parallel-sharding-strategy)
    zero_how=("DDP", "--use-distributed-optimizer", "--use-megatron-fsdp optim_grads",
              "--use-megatron-fsdp optim_grads_params"),
    zero_dp_alone=(),
    # Megatron FSDP builds its device mesh over dp x cp x tp ranks (HSDP: outer x dp x cp x tp) and leaves the
    # pipeline out (megatron/core/distributed/fsdp/mcore_fsdp_adapter.py at d98e8a6): with pp > 1 the model set-up
    # fails ("EinopsError ... Shape mismatch"), though validate_args accepts the flags (scripts/check_trainers.py,
    # docs/trainers.md §5). The distributed optimizer (ZeRO-1) and DDP run with any pipeline.
    zero_without_pipeline=(2, 3),
    # Megatron FSDP with R instances (verified at d98e8a6): core/parallel_state.py builds the intra-partial dp-cp
    # groups as consecutive slices of dp*cp/R ranks, distributed/fsdp/mcore_fsdp_adapter.py _init_dist_index shards
    # over that group (dp_shard_dim) and replicates over the inter-instance group (dp_outer_dim), and
    # megatron_fsdp/param_and_grad_buffer.py reduce-scatters the gradients in the shard group, then all-reduces the
    # shard across DP-Outer under outer_dp_sharding_strategy's default no_shard
    hsdp="--use-megatron-fsdp optim_grads_params --num-distributed-optimizer-instances R",
    recompute="count",  # --recompute-num-layers: one count, applied to every (virtual) stage; or selective everywhere
    # --recompute-granularity full/selective, --recompute-modules (transformer_config.py recompute_modules) and
    # --fine-grained-activation-offloading (the offload option)
    recompute_options=CLASSIC_MODES + MEGATRON_MODULE_OPTIONS + (OFFLOAD,),
    precisions=("bf16", "fp16", "fp8"), fp8_recipes=tuple(FP8_RECIPE_FLAGS),
    default_fp8_recipe="delayed",  # Transformer Engine's DelayedScaling, --fp8-recipe's default
    cp_comms=("p2p", "allgather", "a2a", "a2a+p2p"), expert_tensor_parallel=True,
    layouts="any",  # --pipeline-model-parallel-layout places any per-stage partition
    # 1F1B when pp > 1 without virtual stages, interleaved with them (--num-layers-per-virtual-pipeline-stage)
    schedules=("1f1b", "interleaved"), schedule_names={},
    # --optimizer-cpu-offload (HybridDeviceOptimizer) under DDP or the distributed optimizer; Megatron FSDP refuses
    # it (megatron/core/optimizer/fully_sharded_optimizer.py: "does not currently support optimizer CPU offload")
    optimizer_offload_zero=(0, 1),
    # arguments.py validate_args refuses --optimizer-cpu-offload with --fp8-param-gather unless the recipe is delayed
    optimizer_offload_fp8_recipes=("delayed",),
    config_kind="Megatron-LM arguments", recognises=recognises, nearest=nearest, emit=emit, read=read,
    read_overlap=read_overlap, read_loss_kernel=read_loss, reshard=checkpoints.megatron,
)

__all__ = ["TRAINER", "nearest", "emit", "flags", "environment", "overlaps", "read", "read_overlap", "recognises"]
