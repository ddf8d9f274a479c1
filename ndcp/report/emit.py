"""Trainer launch configurations for one strategy: Megatron-LM flags, a torchtitan TOML, a MindFormers YAML.

Pure functions of (model, run, strategy): nothing is estimated here. Where a trainer cannot express part of the
plan exactly, the emitter writes the closest configuration that uses at least as much memory saving (more
recompute, never less) so the plan still fits, and says what it changed in `notes`.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

import yaml

from ..estimate.layout import partition
from ..schedules import schedule_named
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import RecomputePlan, StageRecompute, Strategy, accounted_partition

KINDS = ("megatron", "torchtitan", "mindformers")


@dataclass(frozen=True)
class Emitted:
    """One trainer's configuration text and what it could not express exactly."""

    text: str
    notes: list[str] = field(default_factory=list)
    recompute: RecomputePlan | None = None  # the recompute plan the text actually expresses (None = the strategy's)


# -- shared helpers ----------------------------------------------------------------------------------------------
def stage_plans(model: ModelSpec, strategy: Strategy) -> list[StageRecompute]:
    """Recompute counts per virtual stage (uniform plans expanded to per-stage counts)."""
    counts = partition(model, strategy)
    return [strategy.recompute.for_stage(v, n) for v, n in enumerate(counts)]


def covers(plan: list[StageRecompute], original: list[StageRecompute]) -> bool:
    """Whether `plan` recomputes at least as much as `original` on every stage: at least as many fully recomputed
    layers, and at least as many layers recomputed at all (selective or full)."""
    def recomputed(p: StageRecompute) -> int:
        return p.count("full") + p.count("selective")

    return len(plan) == len(original) and all(
        p.count("full") >= o.count("full") and recomputed(p) >= recomputed(o) for p, o in zip(plan, original))


def _device_stage_counts(counts: tuple[int, ...], pp: int, vpp: int) -> list[list[int]]:
    """Layers of each device stage's chunks: [stage][chunk] (virtual stage v = chunk * pp + stage)."""
    return [[counts[c * pp + s] for c in range(vpp)] for s in range(pp)]


# -- Megatron-LM -------------------------------------------------------------------------------------------------
def _megatron_recompute(plans: list[StageRecompute], uniform: str) -> tuple[list[str], list[str], list[StageRecompute]]:
    """Flags, notes and the per-stage plan Megatron will run."""
    if uniform == "none":
        return [], [], plans
    if uniform == "selective":
        return ["--recompute-granularity", "selective"], [], plans
    if uniform == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"], [], plans
    fulls = {p.count("full") for p in plans}
    any_selective = any(p.count("selective") for p in plans)
    if not any_selective and fulls == {0}:
        return [], [], plans
    if not any_selective and len(fulls) == 1:
        n = fulls.pop()
        return ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", str(n)], \
            [], plans
    if all(p.count("full") == 0 for p in plans):
        # Megatron's selective recompute applies to every layer: it covers any none/selective mix.
        emitted = [StageRecompute(selective=p.layers) for p in plans]
        notes = [] if emitted == plans else [
            "Megatron cannot mix selective and no recompute per stage: emitted --recompute-granularity selective on "
            f"every layer (was {', '.join(str(p.count('selective')) for p in plans)} selective layers per stage); "
            "uses at least as much recompute, so it still fits, at some extra recompute time"]
        return ["--recompute-granularity", "selective"], notes, emitted
    # Full counts differ between stages, or full and selective are mixed: recompute the first N layers of every
    # (virtual) stage fully, with N large enough to cover each stage's full + selective layers.
    n = max(p.count("full") + p.count("selective") for p in plans)
    emitted = [StageRecompute(none=p.layers - min(n, p.layers), full=min(n, p.layers)) for p in plans]
    notes = [] if emitted == plans else ["Megatron's block recompute needs the same full-recompute count on every stage and no selective "
             f"mix; the plan had (selective, full) per stage {[(p.count('selective'), p.count('full')) for p in plans]}: emitted "
             f"--recompute-method block --recompute-num-layers {n} (the first {n} layers of every stage fully "
             "recomputed), which recomputes at least as much on every stage, so it still fits, at some extra "
             "recompute time"]
    return ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", str(n)], \
        notes, emitted


def _megatron(model: ModelSpec, run: RunSpec, strategy: Strategy) -> tuple[list[str], list[str], list[StageRecompute]]:
    s = strategy
    flags = ["--num-layers", str(model.layers),
             "--tensor-model-parallel-size", str(s.tp),
             "--pipeline-model-parallel-size", str(s.pp),
             "--context-parallel-size", str(s.cp)]
    notes: list[str] = []
    if s.cp > 1:
        flags += ["--cp-comm-type", s.cp_comm]
        if s.cp_comm == "a2a+p2p":
            notes.append("a2a+p2p also needs --hierarchical-context-parallel-sizes A B: planned with A = the CP ranks "
                         f"of one node, B = {s.cp} / A")
    if run.trainer != "megatron":
        notes.append(f"planned with {run.trainer}'s memory behaviour, not Megatron's: plan with --trainer megatron")
    if model.moe is not None:
        flags += ["--expert-model-parallel-size", str(s.ep), "--expert-tensor-parallel-size", str(s.etp)]
    counts = partition(model, s)
    per_device = _device_stage_counts(counts, s.pp, s.vpp)
    if s.vpp > 1 and s.mbn % s.pp:  # Megatron's default group (pp) needs mbn a multiple of pp (docs/formulas.md §4)
        flags += ["--microbatch-group-size-per-virtual-pipeline-stage",
                  str(schedule_named("interleaved").group_size(s.pp, s.mbn))]
    even = len(set(counts)) == 1
    if not even and counts == accounted_partition(model.layers, s.pp * s.vpp):
        # layers + 2 split evenly, the embedding and the loss counted as layers (Megatron-LM arguments.py; core
        # transformer_block.py get_num_layers_to_build; docs/formulas.md §4)
        flags += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
        if s.vpp > 1:
            flags += ["--num-virtual-stages-per-pipeline-rank", str(s.vpp)]
    elif even:
        if s.vpp > 1:
            flags += ["--num-layers-per-virtual-pipeline-stage", str(counts[0])]
    else:
        # Megatron: the first/last device stage may hold a different number of layers (split evenly over its
        # chunks); every other stage gets the same count.
        chunk_even = all(len(set(chunks)) == 1 for chunks in per_device)
        totals = [sum(chunks) for chunks in per_device]
        middle = set(totals[1:-1])
        if s.pp >= 2 and chunk_even and len(middle) <= 1:
            m = middle.pop() if middle else None
            if s.vpp > 1:
                flags += ["--num-virtual-stages-per-pipeline-rank", str(s.vpp)]
            if m is None or totals[0] != m:
                flags += ["--decoder-first-pipeline-num-layers", str(totals[0])]
            if m is None or totals[-1] != m:
                flags += ["--decoder-last-pipeline-num-layers", str(totals[-1])]
        else:
            notes.append(f"Megatron cannot express the layer partition {list(counts)} (per virtual stage; only the "
                         "first and last pipeline stages may differ, evenly split over their chunks): set it by "
                         "hand, e.g. with --pipeline-model-parallel-layout")
            if s.vpp > 1:
                flags += ["--num-virtual-stages-per-pipeline-rank", str(s.vpp)]
    if s.sp:
        flags.append("--sequence-parallel")
    flags += ["--micro-batch-size", str(s.mbs), "--global-batch-size", str(s.global_batch),
              "--seq-length", str(run.seq_len)]
    if s.zero >= 1:
        flags.append("--use-distributed-optimizer")
    if s.zero >= 2:
        notes.append(f"ZeRO-{s.zero} has no Megatron equivalent: emitted --use-distributed-optimizer (ZeRO-1: "
                     "optimizer states sharded), which keeps full gradients"
                     + (" and parameters" if s.zero == 3 else "") + " per rank, so it needs more memory than the "
                     "plan; Megatron-core FSDP (--use-custom-fsdp --data-parallel-sharding-strategy "
                     + ("optim_grads" if s.zero == 2 else "optim_grads_params") + ") is the closest")
    rflags, rnotes, emitted = _megatron_recompute(stage_plans(model, s), s.recompute.mode)
    return flags + rflags, notes + rnotes, emitted


def megatron_flags(model: ModelSpec, run: RunSpec, strategy: Strategy) -> list[str]:
    """Megatron-LM (pretrain_gpt.py) arguments for the strategy's parallelism, batch and recompute."""
    return _megatron(model, run, strategy)[0]


def _flag_lines(flags: list[str]) -> str:
    """Flags as a shell continuation block, one option (with its value) per line."""
    lines: list[list[str]] = []
    for flag in flags:
        if flag.startswith("--") or not lines:
            lines.append([flag])
        else:
            lines[-1].append(flag)
    return " \\\n".join(" ".join(shlex.quote(x) for x in line) for line in lines) + "\n"


def _with_notes(text: str, notes: list[str]) -> str:
    return "".join(f"# note: {n}\n" for n in notes) + text


# -- torchtitan --------------------------------------------------------------------------------------------------
def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def _torchtitan(model: ModelSpec, run: RunSpec, strategy: Strategy) -> tuple[str, list[str], list[StageRecompute]]:
    s = strategy
    notes: list[str] = []
    if run.trainer != "torchtitan":
        notes.append(f"planned with {run.trainer}'s memory behaviour; torchtitan's differs (FSDP2 states, op-level "
                     "selective AC): plan with --trainer torchtitan")
    parallelism: dict = {}
    if s.zero == 3:
        parallelism.update(data_parallel_replicate_degree=1, data_parallel_shard_degree=s.dp)
    else:
        parallelism.update(data_parallel_replicate_degree=s.dp, data_parallel_shard_degree=1)
        if s.zero in (1, 2) and s.dp > 1:
            notes.append(f"torchtitan has no ZeRO-{s.zero}: data_parallel_replicate_degree = {s.dp} (DDP) keeps full "
                         "optimizer states and gradients per rank, more memory than the plan; set "
                         f"data_parallel_shard_degree = {s.dp} (FSDP, ZeRO-3) instead if it does not fit")
    parallelism.update(tensor_parallel_degree=s.tp, pipeline_parallel_degree=s.pp, context_parallel_degree=s.cp)
    if s.cp > 1 and s.cp_comm != "p2p":
        notes.append(f"cp_comm={s.cp_comm} is Megatron-Core's --cp-comm-type; torchtitan's context parallelism is "
                     "ring attention (priced as cp_comm=p2p): estimate the strategy with cp_comm=p2p")
    if model.moe is not None:
        parallelism["expert_parallel_degree"] = s.ep
        if s.etp != 1:
            parallelism["expert_tensor_parallel_degree"] = s.etp
    if s.tp > 1 and not s.sp:
        notes.append("torchtitan's tensor parallelism always shards norms along the sequence (sequence "
                     "parallelism on): it uses less activation memory than the plan")
    if s.pp > 1:
        counts = partition(model, s)
        parallelism["pipeline_parallel_schedule"] = schedule_named(s.schedule).trainer_names["torchtitan"]
        if len(set(counts)) == 1:
            parallelism["pipeline_parallel_layers_per_stage"] = counts[0]
        else:
            starts, total = [], 0
            for n in counts[:-1]:
                total += n
                starts.append(f"layers.{total}")
            parallelism["pipeline_parallel_split_points"] = starts
        parallelism["pipeline_parallel_microbatch_size"] = s.mbs
    plans = stage_plans(model, s)
    mode = s.recompute.mode
    emitted = plans
    if not s.recompute.is_uniform:
        if any(p.count("full") for p in plans):
            mode, emitted = "full", [StageRecompute(full=p.layers) for p in plans]
        elif any(p.count("selective") for p in plans):
            mode, emitted = "selective", [StageRecompute(selective=p.layers) for p in plans]
        else:
            mode = "none"
        if emitted != plans:
            notes.append(f"torchtitan cannot express per-stage recompute ({s.recompute.summary()}): emitted "
                         f'mode = "{mode}" on every layer, which covers the plan (it still fits, at some extra '
                         "recompute time)")
    ac: dict = {"mode": mode}
    if mode == "selective":
        ac["selective_ac_option"] = "op"
    training = {"local_batch_size": s.mbs * s.mbn if s.pp > 1 else s.mbs, "global_batch_size": s.global_batch,
                "seq_len": run.seq_len}
    if s.pp == 1 and s.mbn > 1:
        notes.append(f"no pipeline: torchtitan accumulates gradients over global_batch_size / (local_batch_size * "
                     f"dp) = {s.mbn} micro-batches")
    sections = {"parallelism": parallelism, "activation_checkpoint": ac, "training": training}
    text = "\n".join(f"[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in body.items())
                     for name, body in sections.items())
    return text, notes, emitted


def torchtitan_toml(model: ModelSpec, run: RunSpec, strategy: Strategy) -> str:
    """torchtitan job-config TOML sections ([parallelism], [activation_checkpoint], [training])."""
    return _torchtitan(model, run, strategy)[0]


# -- MindFormers -------------------------------------------------------------------------------------------------
class _YamlDumper(yaml.SafeDumper):
    """Block-style mappings, flow-style lists of scalars (per-stage counts on one line)."""


def _represent_list(dumper: yaml.SafeDumper, data: list):
    flow = all(not isinstance(x, (list, dict)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_YamlDumper.add_representer(list, _represent_list)


def _mindformers(model: ModelSpec, run: RunSpec, strategy: Strategy) -> tuple[str, list[str]]:
    s = strategy
    notes: list[str] = []
    counts = partition(model, s)
    naive = model.layers // s.virtual_stages
    plans = stage_plans(model, s)

    def per_stage(values: list[int]):
        """[pp] for vpp = 1, else [vpp][pp] (chunk-major, as MindFormers and SAPP write them)."""
        grid = [[values[c * s.pp + st] for st in range(s.pp)] for c in range(s.vpp)]
        return grid[0] if s.vpp == 1 else grid

    parallel_config = {
        "data_parallel": s.dp, "model_parallel": s.tp, "pipeline_stage": s.pp, "context_parallel": s.cp,
        "expert_parallel": s.ep, "micro_batch_num": s.mbn if s.pp > 1 else 1, "vocab_emb_dp": False,
        "use_seq_parallel": s.sp,
    }
    runner_config = {"batch_size": s.mbs}
    if s.pp == 1 and s.mbn > 1:
        runner_config["gradient_accumulation_steps"] = s.mbn
    if model.moe is not None and s.etp != 1:
        notes.append(f"expert tensor parallelism (etp = {s.etp}) is not set here: check the MindFormers moe_config "
                     "of your version")
    if s.zero >= 2:
        notes.append(f"ZeRO-{s.zero}: enable_parallel_optimizer shards optimizer states; also shard gradients"
                     + (" and parameters" if s.zero == 3 else "") + " with parallel_optimizer_config "
                     "(MindSpore optimizer_level) if your version supports it, else it needs more memory than the plan")
    config = {
        "parallel": {"enable_parallel_optimizer": s.zero >= 1},
        "parallel_config": parallel_config,
        "runner_config": runner_config,
        "model": {"model_config": {
            "num_layers": model.layers, "seq_length": run.seq_len,
            **({"pp_interleave_num": s.vpp} if s.vpp > 1 else {}),
            "offset": per_stage([n - naive for n in counts]),
        }},
        "recompute_config": {
            # MindFormers recomputes the first N layers of each stage; select_recompute counts SLCT + BOTH + FULL
            # layers (docs/reference-planner.md §3.4), full wins over select.
            "recompute": per_stage([p.count("full") for p in plans]),
            "select_recompute": per_stage([p.count("selective") + p.count("full") for p in plans]),
        },
    }
    header = (f"# MindFormers config fragment: micro batch size = runner_config.batch_size = {s.mbs}, "
              f"global batch = {s.global_batch}\n"
              f"# offset = layers per stage - {naive} (= floor({model.layers} / {s.virtual_stages}))"
              + ("; lists are [chunk][stage]" if s.vpp > 1 else "") + "\n")
    return header + yaml.dump(config, Dumper=_YamlDumper, sort_keys=False, default_flow_style=False, width=120), notes


def mindformers_yaml(model: ModelSpec, run: RunSpec, strategy: Strategy) -> str:
    """MindFormers YAML: parallel_config, micro batch, per-stage offset / recompute / select_recompute lists."""
    return _mindformers(model, run, strategy)[0]


# -- common entry point ------------------------------------------------------------------------------------------
def emit(kind: str, model: ModelSpec, run: RunSpec, strategy: Strategy) -> Emitted:
    """The launch configuration of `kind` (megatron, torchtitan, mindformers) for one strategy, with notes on
    anything the trainer cannot express exactly. Notes are also written as comments at the top of the text."""
    plans = stage_plans(model, strategy)
    if kind == "megatron":
        flags, notes, emitted = _megatron(model, run, strategy)
        text = _flag_lines(flags)
    elif kind == "torchtitan":
        text, notes, emitted = _torchtitan(model, run, strategy)
    elif kind == "mindformers":
        (text, notes), emitted = _mindformers(model, run, strategy), plans
    else:
        raise ValueError(f"unknown launch-config kind {kind!r}; valid: {', '.join(KINDS)}")
    recompute = strategy.recompute if emitted == plans else RecomputePlan(mode="per-stage", stages=tuple(emitted))
    return Emitted(_with_notes(text, notes), list(notes), recompute)


__all__ = ["Emitted", "KINDS", "emit", "megatron_flags", "torchtitan_toml", "mindformers_yaml", "stage_plans",
           "covers"]
