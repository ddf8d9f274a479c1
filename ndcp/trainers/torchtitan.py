"""torchtitan 0.3: command-line arguments (`--module/--config` + overrides), reading them back, and its Trainer
(TRAINER, at the end: what it runs, and its behaviour as priced, specs/trainer_behaviour.py TORCHTITAN).

torchtitan 0.3 configures through a Python config registry (`--module llama3 --config llama3_70b`) and overrides
of its dataclass fields on the command line (`--parallelism.tensor-parallel-degree 8`); the activation-checkpoint
policy is a subcommand (`activation-checkpoint:full`). Names, types and choices are pinned in facts/torchtitan.yaml
(read from torchtitan 0.3.0's config/configs.py, distributed/parallel_dims.py and models/*/config_registry.py).
"""
from __future__ import annotations

import dataclasses
import shlex

from ..estimate.layout import partition
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import StageRecompute, Strategy
from ..specs.trainer_behaviour import TORCHTITAN
from . import checkpoints
from .base import (Emitted, Placeholder, Trainer, facts, fill_in_comment, nearest_optimizer_offload, nearest_schedule,
                   option_lines, partition_of, read_error, stage_plans, uniform_cover, unstated_overlaps, with_plan)

AC_MODES = {"none": "none", "selective": "selective", "full": "full"}  # ndcp mode -> activation-checkpoint:<mode>
# ndcp schedule -> --parallelism.pipeline-parallel-schedule (torchtitan pipeline_parallel_schedule; the
# torch.distributed.pipelining classes Schedule1F1B, ScheduleInterleaved1F1B, ScheduleDualPipeV)
SCHEDULE_NAMES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "dualpipev": "DualPipeV"}
V_SCHEDULE = "dualpipev"  # the V schedule: two model parts per rank (model_parts)
# ndcp model -> torchtitan 0.3 registry module and config, by precision (models/*/config_registry.py;
# facts/torchtitan.yaml, which also says what each config sets). The registry fixes the model's architecture
# (Trainer.Config.model_spec is not a command-line option) and its FP8: a Float8 or MXFP8 model converter in the
# config (components/quantization), none of it settable on the command line in 0.3.0.
CONFIGS = {("llama3-8b", "bf16"): ("llama3", "llama3_8b"), ("llama3-8b", "fp8"): ("llama3", "llama3_8b_mxfp8"),
           ("llama3-70b", "bf16"): ("llama3", "llama3_70b"), ("llama3.1-405b", "fp8"): ("llama3", "llama3_405b"),
           ("deepseek-v3", "bf16"): ("deepseek_v3", "deepseek_v3_671b"),
           ("deepseek-v3", "fp8"): ("deepseek_v3", "deepseek_v3_671b_float8")}
# What the user fills in: torchtitan's own options with placeholder values (trainer.py Trainer.Config,
# hf_datasets/text_datasets.py, config/configs.py TrainingConfig, components/optimizer/lr_scheduler.py,
# components/checkpointer/base.py). The learning rate is the registry config's: an optimizer param group, which
# 0.3.0 takes from no command-line option.
PLACEHOLDERS = (
    Placeholder("--hf-assets-path", "<HF_ASSETS_PATH>", "the Hugging Face tokenizer and config folder"),
    Placeholder("--dataloader.dataset", "<DATASET>", "a registered dataset name (e.g. c4)"),
    Placeholder("--dataloader.dataset-path", "<DATASET_PATH>", "where that dataset is stored"),
    Placeholder("--training.steps", "<TRAINING_STEPS>", "optimizer steps to run"),
    Placeholder("--lr-scheduler.warmup-steps", "<WARMUP_STEPS>", "warm-up steps"),
    Placeholder("--lr-scheduler.decay-type", "<DECAY_TYPE>", "linear, sqrt or cosine"),
    Placeholder("--lr-scheduler.min-lr-factor", "<MIN_LR_FACTOR>", "final learning rate / peak (0 to 1)"),
    Placeholder("--dump-folder", "<OUTPUT_DIR>", "where outputs and checkpoints are written"),
    Placeholder("--checkpoint.folder", "<CHECKPOINT_DIR>", "checkpoint folder, relative to the output folder"),
)


# The config name emitted for a model torchtitan has no registry config for: every setting `read` takes is then on
# the command line, so the file reads back as the run's model (the user's own config replaces it at launch).
PLACEHOLDER_CONFIG = "CONFIG"


# The config name emitted for a model torchtitan has no registry config for: every setting `read` takes is then on
# the command line, so the file reads back as the run's model (the user's own config replaces it at launch).
PLACEHOLDER_CONFIG = "CONFIG"


def runs_ddp(strategy: Strategy) -> bool:
    """Whether torchtitan runs this strategy's data parallelism as DDP: ZeRO-0 with no other parallelism."""
    s = strategy
    return s.zero == 0 and s.tp == s.pp == s.cp == s.ep == 1


def nearest(model: ModelSpec, run: RunSpec, strategy: Strategy) -> tuple[Strategy, list[str]]:
    """The strategy torchtitan runs for this plan, and what changed."""
    notes: list[str] = []
    s = nearest_optimizer_offload(TRAINER, nearest_schedule(TRAINER, strategy, notes), notes)
    if s.zero not in TRAINER.zero_stages or (s.zero == 0 and not runs_ddp(s)):
        notes.append(f"torchtitan has no ZeRO-{s.zero} here (DDP only without TP/PP/CP/EP, else FSDP2): "
                     "emitted FSDP2 (ZeRO-3), which shards more")
        s = s.with_zero(3)
    if s.etp != 1:
        notes.append(f"torchtitan 0.3 has no expert tensor parallelism: etp {s.etp} -> 1 (experts over EP only)")
        s = s.with_(etp=1)
    if s.cp_comm not in TRAINER.cp_comms:
        notes.append(f"cp_comm={s.cp_comm} is Megatron-Core's: torchtitan's context parallelism runs p2p")
        s = s.with_(cp_comm="p2p")
    if not s.recompute.is_uniform or s.recompute.mode not in AC_MODES:
        mode = uniform_cover(stage_plans(model, s), tuple(AC_MODES))
        notes.append(f"torchtitan checkpoints every block alike: the plan's recompute ({s.recompute.summary()}) "
                     f"became {mode} on every layer, which recomputes at least as much")
        s = with_plan(model, s, [StageRecompute(**{mode: p.layers}) for p in stage_plans(model, s)])
    return s, notes


def _emitted_run(model: ModelSpec, run: RunSpec, s: Strategy, notes: list[str]) -> RunSpec | None:
    """The run the file runs when it differs from the plan's (Emitted.run): its registry config's precision and
    FP8 recipe, 0.3.0's fused Q/K/V projection, and torchtitan's own overlaps (it has no setting for the others in
    eager mode)."""
    out = run
    config = configured(model.name, run.precision)
    pinned = facts("torchtitan")["configs"][config[1]] if config else {}
    if run.fp8 and (not pinned or pinned.get("fp8_recipe") != run.fp8_recipe):
        fp8 = next((facts("torchtitan")["configs"][c]["fp8_recipe"] for (n, p), (_, c) in CONFIGS.items()
                    if n == model.name and p == "fp8"), None)
        notes.append(f"torchtitan 0.3 sets FP8 in a registry config's model converter, not on the command line, and "
                     f"has {'a ' + fp8 + ' config' if fp8 else 'no FP8 config'} for {model.name}, not "
                     f"{run.fp8_recipe}: emitted its BF16 config (register a config with a {run.fp8_recipe} converter)")
        out = dataclasses.replace(out, precision="bf16")
    if run.qkv_projections != "fused":
        notes.append("torchtitan 0.3.0 projects Q, K and V with one fused wqkv (models/common/attention.py "
                     "FusedQKVLinear): the emitted run is priced with it (qkv_projections fused)")
        out = dataclasses.replace(out, qkv_projections="fused")
    if unstated_overlaps(TRAINER, run, s, notes):
        out = dataclasses.replace(out, overlap="trainer")
    return None if out == run else out


def configured(name: str, precision: str) -> tuple[str, str] | None:
    """The registry (module, config) that trains this model at this precision (fp8: a config whose converter
    runs the run's FP8), or None."""
    return CONFIGS.get((name, "fp8" if precision == "fp8" else "bf16"))


def missing_config(model: ModelSpec, run: RunSpec) -> str:
    """Why torchtitan cannot launch the model as emitted ("" when a pinned registry config trains it)."""
    if configured(model.name, run.precision) is not None:
        return ""
    others = [c for (n, _), (_, c) in CONFIGS.items() if n == model.name]
    return (f"torchtitan 0.3 has no {run.precision.upper()} registry config for {model.name}"
            + (f" ({', '.join(others)} train{'s' if len(others) == 1 else ''} it in another precision)"
               if others else "") + ": register one (a config_registry function) and replace MODULE and CONFIG")


def _module_config(model: ModelSpec, run: RunSpec, notes: list[str]) -> tuple[str, str]:
    found = configured(model.name, run.precision)
    if found is None:  # missing_config says so
        return "MODULE", PLACEHOLDER_CONFIG
    pinned = compiled_components(facts("torchtitan")["configs"][found[1]])
    if pinned and not run_components(run):
        notes.append(f"{found[1]} compiles the {' and '.join(pinned)} (torch.compile); the plan is eager: emitted "
                     "--compile.no-enable (plan with " + " ".join(OPTION[c] for c in pinned) + " to keep it)")
    return found


OPTION = {"model": "--torch-compile", "loss": "--compile-loss"}  # ndcp's option for each compiled component


def compiled_components(options: dict) -> tuple[str, ...]:
    """What torchtitan options (a pinned config's, or read ones) compile, of the two components ndcp prices: none
    without compile.enable, else those named in compile.components (config/configs.py CompileConfig, default
    [model, loss]): "model", torch.compile on each TransformerBlock (distributed/compile.py apply_compile), and
    "loss", the loss function (components/loss.py BaseLoss._maybe_compile)."""
    if not options.get("--compile.enable"):
        return ()
    named = {part for item in options.get("--compile.components", ["model", "loss"]) for part in str(item).split(",")}
    return tuple(c for c in OPTION if c in named)


def run_components(run: RunSpec) -> tuple[str, ...]:
    """The components the run compiles: model (RunSpec.torch_compile) and loss (RunSpec.compile_loss)."""
    return tuple(c for c, on in (("model", run.torch_compile), ("loss", run.compile_loss)) if on)


def _compile_arguments(run: RunSpec, config: str) -> list[str]:
    """torch.compile as the run states it: compile.components the blocks (RunSpec.torch_compile, estimate/fusion.py)
    and the loss (RunSpec.compile_loss, activations.py logit_bytes_per_logit) it compiles, what is not named left
    eager as ndcp prices it; or compile off where the pinned config would compile what the plan runs eager. The
    0.3.0 parser reads a list[str] option as one comma-separated value (config/manager.py list_str_rule)."""
    wanted = run_components(run)
    if wanted:
        return ["--compile.enable", "--compile.components", ",".join(wanted)]  # list[str]: A,B (config/manager.py)
    pinned = {} if config == PLACEHOLDER_CONFIG else facts("torchtitan")["configs"][config]
    return ["--compile.no-enable"] if compiled_components(pinned) else []


def model_parts(model: ModelSpec, s: Strategy) -> list[int]:
    """Layers per torchtitan model part, in model order. A V schedule (DualPipe-V) runs two parts per rank, rank r
    holding parts r and 2 pp - 1 - r (distributed/pipeline_parallel.py: "v" stage style; it refuses one part per
    rank): each rank's layers split in two, the first (larger) half on the way down."""
    counts = partition(model, s)
    if s.schedule != V_SCHEDULE:
        return list(counts)
    down = [(n + 1) // 2 for n in counts]
    return down + [n - d for n, d in zip(reversed(counts), reversed(down))]


def _layout(model: ModelSpec, s: Strategy) -> list[str]:
    counts = model_parts(model, s)
    if len(set(counts)) == 1 and s.schedule != V_SCHEDULE:  # no embedding/output weighting: torchtitan splits the layers evenly
        return ["--parallelism.pipeline-parallel-layers-per-stage", str(counts[0]),
                "--parallelism.pipeline-parallel-first-stage-less-layers", "0",
                "--parallelism.pipeline-parallel-last-stage-less-layers", "0"]
    parts, first = [], 0
    for v, n in enumerate(counts):  # module FQNs per model chunk (distributed/pipeline_parallel.py)
        names = (["tok_embeddings"] if v == 0 else []) + [f"layers.{i}" for i in range(first, first + n)]
        parts.append(",".join(names + (["norm", "lm_head"] if v == len(counts) - 1 else [])))
        first += n
    return ["--parallelism.module-fqns-per-model-part", *parts]


def arguments(model: ModelSpec, run: RunSpec, strategy: Strategy, notes: list[str] | None = None) -> list[str]:
    """torchtitan's command-line arguments for the strategy as given (nearest() first)."""
    s, notes = strategy, notes if notes is not None else []
    module, config = _module_config(model, run, notes)
    out = ["--module", module, "--config", config,
           "--parallelism.data-parallel-replicate-degree", str(s.dp if runs_ddp(s) else s.dp_replicate),
           "--parallelism.data-parallel-shard-degree", str(1 if runs_ddp(s) else s.shard_ranks),
           "--parallelism.tensor-parallel-degree", str(s.tp),
           "--parallelism.pipeline-parallel-degree", str(s.pp),
           "--parallelism.context-parallel-degree", str(s.cp)]
    if s.tp > 1:
        out.append("--parallelism.enable-sequence-parallel" if s.sp else "--parallelism.no-enable-sequence-parallel")
    if model.moe is not None:
        out += ["--parallelism.expert-parallel-degree", str(s.ep)]
    if s.pp > 1:
        out += ["--parallelism.pipeline-parallel-schedule", TRAINER.schedule_names[s.schedule],
                "--parallelism.pipeline-parallel-microbatch-size", str(s.mbs)] + _layout(model, s)
    out += ["--training.local-batch-size", str(s.mbs * s.mbn if s.pp > 1 else s.mbs),
            "--training.global-batch-size", str(s.global_batch), "--training.seq-len", str(run.seq_len),
            # ndcp prices no CUDA graphs (per-op launches are not priced); torchtitan refuses them with PP
            "--training.disable-cuda-graphs"]
    out += _compile_arguments(run, config)
    if config != PLACEHOLDER_CONFIG and facts("torchtitan")["configs"][config].get("--compile.enable-async-tensor-parallel"):
        out.append("--compile.no-enable-async-tensor-parallel")  # TP overlap: not planned
    out += [x for p in PLACEHOLDERS for x in (p.option, p.value)]
    mode = s.recompute.mode if s.recompute.is_uniform else uniform_cover(stage_plans(model, s), tuple(AC_MODES))
    return out + [f"activation-checkpoint:{AC_MODES[mode]}"]  # a subcommand: after every other option


def emit(model: ModelSpec, run: RunSpec, strategy: Strategy, domain_ranks: int = 8) -> Emitted:
    """torchtitan 0.3 arguments (`torchrun ... -m torchtitan.train ARGS`) for the strategy, or the nearest plan it
    runs."""
    s, notes = nearest(model, run, strategy)
    if run.trainer != TRAINER.name:
        notes.append(f"planned with {run.trainer}'s memory behaviour; torchtitan's differs (FSDP2 states, op-level "
                     "selective AC): plan with --trainer torchtitan")
    if s.pp == 1 and s.mbn > 1:
        notes.append(f"no pipeline: torchtitan accumulates gradients over global / (local batch x dp) = {s.mbn} "
                     "micro-batches")
    emitted_run = _emitted_run(model, run, s, notes)
    args = arguments(model, emitted_run or run, s, notes)
    text = fill_in_comment(PLACEHOLDERS) + ARCHITECTURE_COMMENT + option_lines(
        args, lambda a: a.startswith("--") or a.startswith("activation-checkpoint:"))
    missing = missing_config(model, emitted_run or run)
    return Emitted(text, notes, None if s == strategy else s, emitted_run, (missing,) if missing else ())


ARCHITECTURE_COMMENT = ("# The registry config (--module/--config) fixes the model's architecture and FP8 (torchtitan "
                        "0.3.0 takes neither on the command line)\n")


# -- reading (--strategy-from) -----------------------------------------------------------------------------------
def _options(tokens: list[str]) -> tuple[dict[str, list[str]], str | None]:
    """Option name (dots and underscores, no dashes: `parallelism.tensor_parallel_degree`) -> its values, and the
    activation-checkpoint subcommand's mode."""
    out: dict[str, list[str]] = {}
    mode, key = None, None
    for token in tokens:
        if token.startswith("activation-checkpoint:") or token.startswith("activation_checkpoint:"):
            mode, key = token.split(":", 1)[1].replace("-", "_"), None
        elif token.startswith("--"):
            name, eq, value = token[2:].partition("=")
            key = name.replace("-", "_")
            if key.split(".")[-1].startswith("no_"):  # tyro's --section.no-flag
                section, _, flag = key.rpartition(".")
                out[(section + "." if section else "") + flag[3:]] = ["false"]
                key = None
                continue
            out[key] = [value] if eq else []
        elif key is not None:
            out[key].append(token)
    return out, mode


def read(text: str, model: ModelSpec) -> dict:
    """Strategy values from torchtitan arguments: the registry config's pinned defaults, then the overrides."""
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as error:
        raise read_error("torchtitan", f"cannot split the arguments: {error}") from None
    options, mode = _options(tokens)
    config = (options.get("config") or [None])[0]
    defaults = ({"model": model.name} if config == PLACEHOLDER_CONFIG
                else facts("torchtitan")["configs"].get(config))
    if defaults is None:
        raise read_error("torchtitan", f"--config {config}: not a pinned torchtitan 0.3 config; known: "
                         + ", ".join(facts("torchtitan")["configs"]))
    if defaults["model"] != model.name:
        raise read_error("torchtitan", f"--config {config} trains {defaults['model']}, not {model.name}")
    known = facts("torchtitan")["flags"]

    def value(name: str):
        fact = known[name]
        given = options.get(name[2:].replace("-", "_"))
        if given is None:
            return defaults.get(name, fact.get("default"))
        if fact["type"] == "flag":
            return given != ["false"]
        try:
            return int(given[0]) if fact["type"] == "int" else given if fact["type"] == "list" else given[0]
        except (IndexError, ValueError):
            raise read_error("torchtitan", f"{name} {' '.join(given)}: expected {fact['type']}") from None

    replicate, shard = value("--parallelism.data-parallel-replicate-degree"), value(
        "--parallelism.data-parallel-shard-degree")
    if replicate > 1 and shard < 1:
        raise read_error("torchtitan", f"HSDP with a replicate degree of {replicate}: give "
                         "--parallelism.data-parallel-shard-degree (ndcp reads no leftover shard degree)")
    v = {"dp_shard": shard} if replicate > 1 and shard > 1 else {}  # HSDP: FSDP2 over a 2-D mesh
    v |= {"tp": value("--parallelism.tensor-parallel-degree"), "pp": value("--parallelism.pipeline-parallel-degree"),
         "cp": value("--parallelism.context-parallel-degree"),
         "ep": value("--parallelism.expert-parallel-degree") if model.moe is not None else 1, "etp": 1,
         "seq_len": value("--training.seq-len"), "global_batch": value("--training.global-batch-size")}
    # FSDP shards over dp_shard x cp (parallel_dims.py fsdp_enabled: dp_shard or cp enabled): ZeRO-0 only as
    # data parallelism alone (runs_ddp), as emitted
    v["zero"] = 0 if shard == 1 and v["tp"] == v["pp"] == v["cp"] == v["ep"] == 1 else 3
    if replicate > 1 or shard > 1:
        v["dp"] = replicate * shard
    v["sp"] = v["tp"] > 1 and value("--parallelism.enable-sequence-parallel")
    _read_pipeline(value, v, model)
    v["recompute"] = {"none": "none", "selective": "selective", "full": "full"}.get(
        mode or defaults.get("activation_checkpoint", "selective"), None)
    if v["recompute"] is None:
        raise read_error("torchtitan", f"activation-checkpoint:{mode}: ndcp prices none, selective and full")
    v["fp8_recipe"] = defaults.get("fp8_recipe")  # the config's FP8 converter, if any
    v["precision"] = "fp8" if v["fp8_recipe"] else "bf16"
    v["overlap"] = "trainer"
    compiled = compiled_components({name: value(name) for name in ("--compile.enable", "--compile.components")})
    v["torch_compile"], v["compile_loss"] = "model" in compiled, "loss" in compiled
    return v


def _read_pipeline(value, v: dict, model: ModelSpec) -> None:
    """The micro-batch split, schedule and layout with PP (the local batch is a PP rank's micro-batches), else the
    local batch as the micro-batch."""
    local = value("--training.local-batch-size")
    if v["pp"] == 1:
        v["mbs"] = local
        return
    v["mbs"] = value("--parallelism.pipeline-parallel-microbatch-size")
    v["mbn"] = local // v["mbs"]
    names = {own: name for name, own in TRAINER.schedule_names.items()}
    schedule = value("--parallelism.pipeline-parallel-schedule")
    if schedule not in names:
        raise read_error("torchtitan", f"pipeline schedule {schedule}: ndcp prices " + ", ".join(names))
    v["schedule"] = names[schedule]
    _read_layout(value, v, model)


def _read_layout(value, v: dict, model: ModelSpec) -> None:
    parts = value("--parallelism.module-fqns-per-model-part")
    if parts:
        counts = [sum(1 for name in part.split(",") if name.startswith("layers.")) for part in parts]
        if v["schedule"] == V_SCHEDULE:  # rank r holds parts r and 2 pp - 1 - r (model_parts)
            v["layers_per_stage"] = tuple(counts[r] + counts[-1 - r] for r in range(len(counts) // 2))
            return
        v["layers_per_stage"] = tuple(counts)
        v["vpp"] = len(parts) // v["pp"]
        return
    per = value("--parallelism.pipeline-parallel-layers-per-stage")
    less = (value("--parallelism.pipeline-parallel-first-stage-less-layers"),
            value("--parallelism.pipeline-parallel-last-stage-less-layers"))
    if per is None or less != (0, 0) or model.layers % per:
        raise read_error("torchtitan", "ndcp reads the partition from module_fqns_per_model_part or from "
                         "pipeline_parallel_layers_per_stage dividing the layers with first/last_stage_less_layers 0")
    v["vpp"] = 1 if v["schedule"] == V_SCHEDULE else model.layers // per // v["pp"]
    partition_of(v, model)


def recognises(text: str) -> bool:
    """Whether a configuration is torchtitan's: it names a registry module and config (--module, --config)."""
    return "--module" in text and "--config" in text


TRAINER = Trainer(
    behaviour=TORCHTITAN, version="torchtitan 0.3.0",
    # FSDP2 (ZeRO-3: data_parallel_shard_degree = dp); replicated (ZeRO-0: data_parallel_replicate_degree = dp, shard
    # degree 1, which 0.3.0 runs as fully_shard over one rank: models/llama3/parallelize.py "with shard_degree=1 it
    # is a no-op for the all-gather") emitted only without TP, PP, CP or EP, as earlier releases ran DDP. 0.3.0
    # could replicate beside them too (HSDP with shard degree 1): not searched
    zero_stages=(0, 3), zero_how=("DDP (data parallel only)", "FSDP2 (fully_shard)"),
    zero_dp_alone=(0,),  # DDP only without TP, PP, CP or EP (above)
    zero_without_pipeline=(),
    # FSDP2 on the 2-D mesh [dp_replicate, dp_shard] (distributed/parallel_dims.py; parallelize.py apply_fsdp)
    hsdp="--parallelism.data-parallel-replicate-degree R --parallelism.data-parallel-shard-degree N",
    recompute="uniform",  # activation-checkpoint:none|selective|full on every transformer block
    recompute_options=tuple(AC_MODES),  # activation-checkpoint:<mode>
    # FP8 is a model converter in a registry config (CONFIGS: llama3_8b_mxfp8, llama3_405b,
    # deepseek_v3_671b_float8; they need torchao and an FP8 GPU to build), not a command-line option
    precisions=("bf16", "fp8"), fp8_recipes=("blockwise", "mxfp8"),
    # torchao Float8 dynamic (tensorwise) scaling, the float8 default of the torchtitan releases measured runs used;
    # 0.3.0's Float8LinearConverter defaults to rowwise (emitted as the configs' blockwise, facts/torchtitan.yaml)
    default_fp8_recipe="tensorwise",
    cp_comms=("p2p",), expert_tensor_parallel=False,  # no expert TP degree in 0.3: EP borrows from FSDP and TP
    layouts="any",  # --parallelism.module-fqns-per-model-part places any partition
    schedules=tuple(SCHEDULE_NAMES), schedule_names=SCHEDULE_NAMES,
    optimizer_offload_zero=(), optimizer_offload_fp8_recipes=(),  # no optimizer offload in 0.3
    config_kind="torchtitan arguments (--module/--config)",
    recognises=recognises, nearest=nearest, emit=emit, read=read,
    read_overlap=lambda text: "trainer",  # its arguments state no overlaps: it runs its own (none, eager)
    read_loss_kernel=lambda text: "trainer",  # it states no loss kernel: it runs its own
    reshard=checkpoints.torchtitan,
)

__all__ = ["TRAINER", "CONFIGS", "PLACEHOLDERS", "SCHEDULE_NAMES", "configured", "compiled_components",
           "run_components", "model_parts", "nearest", "emit", "arguments", "read", "runs_ddp", "recognises"]
