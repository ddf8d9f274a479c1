"""torchtitan 0.3: command-line arguments (`--module/--config` + overrides), reading them back, and its Trainer
(TRAINER, at the end: what it runs, and its behaviour as priced, specs/trainer_behaviour.py TORCHTITAN).

torchtitan 0.3 configures through a Python config registry (`--module llama3 --config llama3_70b`) and overrides
of its dataclass fields on the command line (`--parallelism.tensor-parallel-degree 8`); the activation-checkpoint
policy is a subcommand (`activation-checkpoint:full`). Names, types and choices are pinned in facts/torchtitan.yaml
(read from torchtitan 0.3.0's config/configs.py, distributed/parallel_dims.py and models/*/config_registry.py).
"""
from __future__ import annotations

import shlex

from ..estimate.layout import partition
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import StageRecompute, Strategy
from ..specs.trainer_behaviour import TORCHTITAN
from .base import (Emitted, Trainer, facts, nearest_optimizer_offload, nearest_schedule, partition_of, read_error,
                   stage_plans, uniform_cover, with_plan)

AC_MODES = {"none": "none", "selective": "selective", "full": "full"}  # ndcp mode -> activation-checkpoint:<mode>
# ndcp schedule -> --parallelism.pipeline-parallel-schedule (torchtitan pipeline_parallel_schedule; the
# torch.distributed.pipelining classes Schedule1F1B, ScheduleInterleaved1F1B, ScheduleDualPipeV)
SCHEDULE_NAMES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "dualpipev": "DualPipeV"}
# ndcp model -> torchtitan 0.3 registry module and config (models/*/config_registry.py; facts/torchtitan.yaml).
# llama3_405b is not here: it converts the linear layers to Float8 (an FP8 plan ndcp does not emit for torchtitan).
CONFIGS = {"llama3-8b": ("llama3", "llama3_8b"), "llama3-70b": ("llama3", "llama3_70b"),
           "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b")}


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
    if run.fp8:
        notes.append(f"torchtitan 0.3 sets FP8 in a registry config's model converters, not on the command line: "
                     f"emitted the BF16 config (use or write a config with a {run.fp8_recipe} converter)")
    return s, notes


def _module_config(model: ModelSpec, run: RunSpec, notes: list[str]) -> tuple[str, str]:
    found = CONFIGS.get(model.name)
    if found is None:
        notes.append(f"torchtitan 0.3 has no registry config for {model.name}: register one (a config_registry "
                     "function) and replace MODULE and CONFIG")
        return "MODULE", PLACEHOLDER_CONFIG
    return found


def _layout(model: ModelSpec, s: Strategy) -> list[str]:
    counts = partition(model, s)
    if len(set(counts)) == 1:  # no embedding/output weighting: torchtitan splits the layers evenly
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
            # ndcp prices eager steps (TrainerBehaviour op_level_inventory); torchtitan refuses CUDA graphs with PP
            "--training.disable-cuda-graphs"]
    mode = s.recompute.mode if s.recompute.is_uniform else uniform_cover(stage_plans(model, s), tuple(AC_MODES))
    return out + [f"activation-checkpoint:{AC_MODES[mode]}"]  # a subcommand: after every other option


def emit(model: ModelSpec, run: RunSpec, strategy: Strategy, devices_per_node: int = 8) -> Emitted:
    """torchtitan 0.3 arguments (`torchrun ... -m torchtitan.train ARGS`) for the strategy, or the nearest plan it
    runs."""
    s, notes = nearest(model, run, strategy)
    if run.trainer != TRAINER.name:
        notes.append(f"planned with {run.trainer}'s memory behaviour; torchtitan's differs (FSDP2 states, op-level "
                     "selective AC): plan with --trainer torchtitan")
    if s.pp == 1 and s.mbn > 1:
        notes.append(f"no pipeline: torchtitan accumulates gradients over global / (local batch x dp) = {s.mbn} "
                     "micro-batches")
    args = arguments(model, run, s, notes)
    lines: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or arg.startswith("activation-checkpoint:") or not lines:
            lines.append([arg])
        else:
            lines[-1].append(arg)
    text = " \\\n".join(" ".join(shlex.quote(x) for x in line) for line in lines) + "\n"
    return Emitted(text, notes, None if s == strategy else s)


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
         "cp": value("--parallelism.context-parallel-degree"), "zero": 0 if shard == 1 else 3,
         "ep": value("--parallelism.expert-parallel-degree") if model.moe is not None else 1, "etp": 1,
         "seq_len": value("--training.seq-len"), "global_batch": value("--training.global-batch-size")}
    if replicate > 1 or shard > 1:
        v["dp"] = replicate * shard
    v["sp"] = v["tp"] > 1 and value("--parallelism.enable-sequence-parallel")
    local = value("--training.local-batch-size")
    if v["pp"] > 1:
        v["mbs"] = value("--parallelism.pipeline-parallel-microbatch-size")
        v["mbn"] = local // v["mbs"]
        names = {own: name for name, own in TRAINER.schedule_names.items()}
        schedule = value("--parallelism.pipeline-parallel-schedule")
        if schedule not in names:
            raise read_error("torchtitan", f"pipeline schedule {schedule}: ndcp prices " + ", ".join(names))
        v["schedule"] = names[schedule]
        _read_layout(value, v, model)
    else:
        v["mbs"] = local
    v["recompute"] = {"none": "none", "selective": "selective", "full": "full"}.get(
        mode or defaults.get("activation_checkpoint", "selective"), None)
    if v["recompute"] is None:
        raise read_error("torchtitan", f"activation-checkpoint:{mode}: ndcp prices none, selective and full")
    v["precision"] = "bf16"
    return v


def _read_layout(value, v: dict, model: ModelSpec) -> None:
    parts = value("--parallelism.module-fqns-per-model-part")
    if parts:
        v["layers_per_stage"] = tuple(sum(1 for name in part.split(",") if name.startswith("layers."))
                                      for part in parts)
        v["vpp"] = len(parts) // v["pp"]
        return
    per = value("--parallelism.pipeline-parallel-layers-per-stage")
    less = (value("--parallelism.pipeline-parallel-first-stage-less-layers"),
            value("--parallelism.pipeline-parallel-last-stage-less-layers"))
    if per is None or less != (0, 0) or model.layers % per:
        raise read_error("torchtitan", "ndcp reads the partition from module_fqns_per_model_part or from "
                         "pipeline_parallel_layers_per_stage dividing the layers with first/last_stage_less_layers 0")
    v["vpp"] = model.layers // per // v["pp"]
    partition_of(v, model)


def recognises(text: str) -> bool:
    """Whether a configuration is torchtitan's: it names a registry module and config (--module, --config)."""
    return "--module" in text and "--config" in text


TRAINER = Trainer(
    behaviour=TORCHTITAN, version="torchtitan 0.3.0",
    # FSDP2 (ZeRO-3: data_parallel_shard_degree = dp); DDP (ZeRO-0) only without TP, PP, CP or EP: torchtitan
    # applies DDP only when no other parallelism is on (parallelize_llama: `elif parallel_dims.dp_replicate_enabled`)
    zero_stages=(0, 3), zero_how=("DDP (data parallel only)", "FSDP2 (fully_shard)"),
    zero_dp_alone=(0,),  # DDP only without TP, PP, CP or EP (above)
    recompute="uniform",  # activation-checkpoint:none|selective|full on every transformer block
    recompute_options=tuple(AC_MODES),  # activation-checkpoint:<mode>
    # FP8 is a model converter in a registry config (llama3_8b_mxfp8, deepseek_v3_671b_float8; they need torchao and
    # an FP8 GPU to build), not a command-line option: ndcp emits BF16 configs
    precisions=("bf16",), fp8_recipes=(),
    default_fp8_recipe="tensorwise",  # torchao Float8 dynamic scaling, torchtitan's float8 converter default
    cp_comms=("p2p",), expert_tensor_parallel=False,  # no expert TP degree in 0.3: EP borrows from FSDP and TP
    layouts="any",  # --parallelism.module-fqns-per-model-part places any partition
    schedules=tuple(SCHEDULE_NAMES), schedule_names=SCHEDULE_NAMES,
    optimizer_offload_zero=(), optimizer_offload_fp8_recipes=(),  # no optimizer offload in 0.3
    config_kind="torchtitan arguments (--module/--config)",
    recognises=recognises, nearest=nearest, emit=emit, read=read,
)

__all__ = ["TRAINER", "CONFIGS", "SCHEDULE_NAMES", "nearest", "emit", "arguments", "read", "runs_ddp", "recognises"]
