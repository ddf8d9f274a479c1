"""MindFormers (MindSpore Transformers 1.6): YAML fragment, reading a YAML back, and its Trainer (TRAINER, at the
end: what it runs, and its behaviour as priced, specs/trainer_behaviour.py MINDFORMERS).

Keys are pinned in facts/mindformers.yaml (read from mindformers 1.6.0's configs/ and mindformers/modules, and
MindSpore's set_auto_parallel_context documentation for the optimizer-parallel level).
"""
from __future__ import annotations

import dataclasses

import yaml

from ..estimate.layout import partition
from ..specs.files import parse_yaml
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import StageRecompute, Strategy
from ..specs.recompute import HEAVIEST, MINDFORMERS_SELECT, NO_RECOMPUTE
from ..specs.trainer_behaviour import MINDFORMERS
from . import checkpoints
from .base import (Emitted, Trainer, nearest_optimizer_offload, nearest_schedule, option_words, read_error,
                   stage_plans, unstated_overlaps, used_options, with_plan)

CP_ALGOS = {"p2p": "colossalai_cp", "a2a": "ulysses_cp"}
# The select_recompute pattern whose output is what mlp_act drops (mindformers/models/utils.py LayerSetting
# default_patterns; as a YAML key, single-quoted, e.g. research/qwen2_5/finetune_qwen2.5_72B_32K.yaml)
SELECT_PATTERN = r"feed_forward\.mul"


class _Dumper(yaml.SafeDumper):
    """Block-style mappings, flow-style lists of scalars (per-stage counts on one line)."""


_Dumper.add_representer(list, lambda d, data: d.represent_sequence(
    "tag:yaml.org,2002:seq", data, flow_style=all(not isinstance(x, (list, dict)) for x in data)))


def nearest(model: ModelSpec, run: RunSpec, strategy: Strategy) -> tuple[Strategy, list[str]]:
    notes: list[str] = []
    s = nearest_optimizer_offload(TRAINER, nearest_schedule(TRAINER, strategy, notes), notes)
    if s.cp > 1 and s.cp_comm not in TRAINER.cp_comms:
        notes.append(f"cp_comm={s.cp_comm} has no MindFormers context_parallel_algo: emitted colossalai_cp (p2p)")
        s = s.with_(cp_comm="p2p")
    if s.zero not in TRAINER.zero_stages:
        notes.append(f"MindFormers' optimizer parallelism shards weights, gradients and optimizer states together: "
                     f"ZeRO-{s.zero} emitted as ZeRO-3, which shards more")
        s = s.with_zero(3)
    if s.dp_shard:  # parallel_optimizer.optimizer_weight_shard_size would shard over a subgroup: not read or emitted
        notes.append(f"HSDP (dp_shard {s.dp_shard}) is not emitted for MindFormers: its optimizer parallelism shards "
                     f"over all {s.dp} data-parallel ranks, which shards more")
        s = s.with_(dp_shard=0)
    plans = stage_plans(model, s)
    foreign = used_options(plans) - set(TRAINER.recompute_options)
    if foreign:  # e.g. Korthikanti's selective (the attention core) or Megatron's recompute modules
        notes.append(f"MindFormers recomputes a layer fully (recompute) or its SwiGLU activation (select_recompute: "
                     f"feed_forward.mul, .silu), not as ndcp's {option_words(foreign)} do: those layers are recomputed "
                     "fully, which recomputes at least as much")
        s = with_plan(model, s, [StageRecompute(**{
            NO_RECOMPUTE: p.count(NO_RECOMPUTE), MINDFORMERS_SELECT: p.count(MINDFORMERS_SELECT),
            HEAVIEST: p.layers - p.count(NO_RECOMPUTE) - p.count(MINDFORMERS_SELECT)}) for p in plans])
    if run.fp8:
        notes.append("MindFormers trains in BF16 here (no FP8 recipe): the FP8 plan's GEMMs run in BF16")
    return s, notes


def _per_stage(s: Strategy, values: list[int]):
    """[pp] for vpp = 1, else [vpp][pp] (chunk-major, as MindFormers and SAPP write them)."""
    grid = [[values[c * s.pp + st] for st in range(s.pp)] for c in range(s.vpp)]
    return grid[0] if s.vpp == 1 else grid


def config(model: ModelSpec, run: RunSpec, s: Strategy) -> dict:
    """The MindFormers YAML keys for the strategy as given (nearest() first)."""
    counts, plans = partition(model, s), stage_plans(model, s)
    naive = model.layers // s.virtual_stages
    parallel_config = {"data_parallel": s.dp, "model_parallel": s.tp, "pipeline_stage": s.pp,
                       "context_parallel": s.cp, "expert_parallel": s.ep,
                       "micro_batch_num": s.mbn if s.pp > 1 else 1, "vocab_emb_dp": False, "use_seq_parallel": s.sp}
    if s.cp > 1:
        parallel_config["context_parallel_algo"] = CP_ALGOS[s.cp_comm]
    parallel = {"enable_parallel_optimizer": s.zero == 3}
    if s.zero == 3:
        parallel["parallel_optimizer_config"] = {"gradient_accumulation_shard": True}
    runner_config = {"batch_size": s.mbs}
    if s.pp == 1 and s.mbn > 1:
        runner_config["gradient_accumulation_steps"] = s.mbn
    out = {"parallel": parallel, "parallel_config": parallel_config, "runner_config": runner_config,
           "model": {"model_config": {
               "num_layers": model.layers, "seq_length": run.seq_len,
               **({"pp_interleave_num": s.vpp} if s.vpp > 1 else {}),
               "offset": _per_stage(s, [n - naive for n in counts])}},
           # MindFormers recomputes the first `recompute` layers of each stage fully and applies select_recompute
           # to the first `select_recompute` layers that are not (mindformers/models/utils.py LayerSetting.set,
           # _check_layer_rule, _set_select_recompute): the select lists count full + select layers, as the
           # reference planner writes them (docs/reference-planner.md §3.4). select_comm_recompute (`.*\\.norm`:
           # the communication next to the norms) is no ndcp option (specs/recompute.py MINDFORMERS_SELECT)
           "recompute_config": {
               "recompute": _per_stage(s, [p.count(HEAVIEST) for p in plans]),
               "select_recompute": _per_stage(s, [p.count(HEAVIEST) + p.count(MINDFORMERS_SELECT) for p in plans]),
               "select_comm_recompute": False}}
    if model.moe is not None:
        out["moe_config"] = {"expert_num": model.moe.experts, "num_experts_chosen": model.moe.top_k,
                             "expert_model_parallel": s.etp}
    return out


def emit(model: ModelSpec, run: RunSpec, strategy: Strategy, domain_ranks: int = 8) -> Emitted:
    """A MindFormers YAML fragment: parallel, parallel_config, per-stage offsets and recompute lists."""
    s, notes = nearest(model, run, strategy)
    ran = dataclasses.replace(run, precision="bf16") if run.fp8 else run  # no FP8 here (nearest's note)
    if unstated_overlaps(TRAINER, run, s, notes):
        ran = dataclasses.replace(ran, overlap="trainer")
    naive = model.layers // s.virtual_stages
    header = (f"# MindFormers config fragment: micro batch size = runner_config.batch_size = {s.mbs}, "
              f"global batch = {s.global_batch}\n"
              f"# offset = layers per stage - {naive} (= floor({model.layers} / {s.virtual_stages}))"
              + ("; lists are [chunk][stage]" if s.vpp > 1 else "") + "\n")
    text = header + yaml.dump(config(model, run, s), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                              width=120)
    return Emitted(text, notes, None if s == strategy else s, None if ran == run else ran)


# -- reading (--strategy-from) -----------------------------------------------------------------------------------
def _flat(value, pp: int, vpp: int, name: str) -> list[int]:
    """A per-stage list ([pp] or [vpp][pp]) in virtual-stage order (v = chunk x pp + stage)."""
    rows = value if vpp > 1 else [value]
    if (not isinstance(rows, list) or len(rows) != vpp
            or any(not isinstance(r, list) or len(r) != pp or not all(isinstance(x, int) for x in r) for r in rows)):
        shape = f"[{vpp}][{pp}]" if vpp > 1 else f"[{pp}]"
        raise read_error("mindformers", f"{name} must be a {shape} list of integers (pipeline_stage = {pp}"
                         + (f", pp_interleave_num = {vpp}" if vpp > 1 else "") + ")")
    return [x for row in rows for x in row]


def _select_value(value):
    """The layers select_recompute covers for the pattern ndcp's mlp_act stands for: a bool or count lists apply to
    the default patterns; a list of patterns to every layer; a {pattern: bool or counts} mapping by its
    feed_forward\\.mul entry (the product, fc2's input: the tensor mlp_act drops), other patterns read as keeping
    (mindformers/models/utils.py LayerSetting._format_recompute_dict)."""
    if isinstance(value, dict):
        return value.get(SELECT_PATTERN, False)
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        return SELECT_PATTERN in value
    return value


def _covered(value, counts: list[int], pp: int, vpp: int, name: str) -> list[int]:
    """The first-N layer counts per virtual stage (v = chunk x pp + stage) of a recompute_config entry, read as
    mindformers/models/utils.py LayerSetting._format_recompute_list reads it: a bool (every layer, or none); [pp]
    counts or bools per stage, spread over the chunks one layer at a time (_alloc_recompute_layer); or [chunk][stage]
    counts or bools, each capped at the chunk's layers."""
    grid = [counts[c * pp:(c + 1) * pp] for c in range(vpp)]
    if isinstance(value, bool):
        return [n if value else 0 for n in counts]
    ok = isinstance(value, list) and all(isinstance(x, int) and (x is True or x is False or x >= 0) for x in value)
    if ok and len(value) == pp:
        out = [[0] * pp for _ in range(vpp)]
        for j, x in enumerate(value):
            left = min(sum(row[j] for row in grid) if x is True else int(x), sum(row[j] for row in grid))
            while left:
                for c in range(vpp):
                    if left and out[c][j] < grid[c][j]:
                        out[c][j], left = out[c][j] + 1, left - 1
        return [x for row in out for x in row]
    rows = value if isinstance(value, list) and len(value) == vpp else None
    if rows is None or any(not isinstance(r, list) or len(r) != pp
                           or any(not isinstance(x, int) or (x is not True and x is not False and x < 0) for x in r)
                           for r in rows):
        raise read_error("mindformers", f"recompute_config.{name} must be a bool, a [{pp}] list or a [{vpp}][{pp}] "
                         f"list of non-negative integers or bools (pipeline_stage = {pp}, pp_interleave_num = {vpp}); "
                         f"got {value!r}")
    return [grid[c][j] if x is True else min(int(x), grid[c][j]) for c, r in enumerate(rows) for j, x in enumerate(r)]


def read(text: str, model: ModelSpec) -> dict:
    """Strategy values from a MindFormers YAML (its parallel_config, model_config and recompute_config)."""
    data = parse_yaml(text, "--strategy-from (mindformers)")
    if not isinstance(data, dict) or not isinstance(data.get("parallel_config"), dict):
        raise read_error("mindformers", "expected a mapping with parallel_config")
    pc, mc = data["parallel_config"], (data.get("model") or {}).get("model_config") or {}
    runner, parallel = data.get("runner_config") or {}, data.get("parallel") or {}
    if mc.get("num_layers", model.layers) != model.layers:
        raise read_error("mindformers", f"num_layers {mc['num_layers']} does not match {model.name} ({model.layers})")
    pp, vpp = pc.get("pipeline_stage", 1), mc.get("pp_interleave_num", 1)
    v = {"dp": pc.get("data_parallel", 1), "tp": pc.get("model_parallel", 1), "pp": pp, "vpp": vpp,
         "cp": pc.get("context_parallel", 1), "ep": pc.get("expert_parallel", 1) if model.moe else 1,
         "etp": ((data.get("moe_config") or {}).get("expert_model_parallel") or pc.get("model_parallel", 1))
         if model.moe else 1, "sp": bool(pc.get("use_seq_parallel", False)), "mbs": runner.get("batch_size", 1),
         "mbn": pc.get("micro_batch_num", 1) if pp > 1 else runner.get("gradient_accumulation_steps", 1),
         "seq_len": mc.get("seq_length")}
    algo = pc.get("context_parallel_algo", "colossalai_cp")
    v["cp_comm"] = {a: c for c, a in CP_ALGOS.items()}.get(algo, "p2p") if v["cp"] > 1 else "p2p"
    v["zero"] = 3 if parallel.get("enable_parallel_optimizer") else 0
    naive = model.layers // (pp * vpp)
    offset = mc.get("offset", 0)
    offsets = _flat(offset, pp, vpp, "offset") if isinstance(offset, list) else [offset] * (pp * vpp)
    counts = [naive + o for o in offsets]
    if sum(counts) != model.layers:  # MindFormers gives the remainder to... nothing: offsets must place it
        raise read_error("mindformers", f"offsets place {sum(counts)} of {model.layers} layers")
    v["layers_per_stage"] = tuple(counts)
    rc = data.get("recompute_config") or {}
    full = _covered(rc.get("recompute", False), counts, pp, vpp, "recompute")
    select = _covered(_select_value(rc.get("select_recompute", False)), counts, pp, vpp, "select_recompute")
    if model.moe is not None and model.dense_layers == 0:
        select = [0] * len(counts)  # no dense SwiGLU for the select set to act on (mlp_act needs dense layers)
    # select_comm_recompute (the communication next to the norms) is no ndcp option and is not read: the activation
    # inventory keeps the norm outputs sequence-sharded either way (docs/formulas.md §5.4, not verified)
    stages = []
    for n, f, a in zip(counts, full, select):
        f, a = min(f, n), min(max(a, f), n) - min(f, n)  # full wins over select on the first layers
        stages.append({NO_RECOMPUTE: n - f - a, MINDFORMERS_SELECT: a, HEAVIEST: f})
    v["recompute"] = {"stages": stages}
    return v


def recognises(text: str) -> bool:
    """Whether a configuration is MindFormers': a YAML with a parallel_config."""
    return "parallel_config:" in text


TRAINER = Trainer(
    behaviour=MINDFORMERS, version="MindFormers 1.6.0 on MindSpore 2.5+",
    # parallel.enable_parallel_optimizer shards the weights and their optimizer states over data_parallel, and
    # parallel_optimizer_config.gradient_accumulation_shard the accumulated gradients (configs/README.md): ZeRO-3
    zero_stages=(0, 3), zero_how=("enable_parallel_optimizer off", "enable_parallel_optimizer + "
                                  "gradient_accumulation_shard"),
    zero_dp_alone=(),
    zero_without_pipeline=(),
    hsdp="",  # parallel_optimizer_config.optimizer_weight_shard_size (a shard subgroup) is not read or emitted
    recompute="per-stage",  # recompute_config.recompute / select_recompute: per-stage lists
    # recompute_config.recompute (the whole layer) and select_recompute with its default patterns (the dense SwiGLU
    # activation: specs/recompute.py mlp_act), each on the first N layers of a stage (mindformers/models/utils.py
    # LayerSetting.set, _check_layer_rule, _set_select_recompute)
    recompute_options=(NO_RECOMPUTE, MINDFORMERS_SELECT, HEAVIEST),
    precisions=("bf16", "fp16"), fp8_recipes=(),
    default_fp8_recipe="delayed",  # as Megatron's (MindFormers emits no FP8 recipe here)
    cp_comms=("p2p", "a2a"),  # context_parallel_algo colossalai_cp (ring) / ulysses_cp (all-to-all)
    expert_tensor_parallel=True,  # moe_config.expert_model_parallel (modules/transformer/moe.py)
    layouts="any",  # model_config.offset per stage (per chunk with pp_interleave_num)
    # 1F1B when pipeline_stage > 1, interleaved with pp_interleave_num > 1
    schedules=("1f1b", "interleaved"), schedule_names={},
    optimizer_offload_zero=(), optimizer_offload_fp8_recipes=(),  # no optimizer offload modelled
    config_kind="a MindFormers YAML (parallel_config)", recognises=recognises, nearest=nearest, emit=emit, read=read,
    read_overlap=lambda text: "trainer",  # its YAML states no overlaps: it runs its own
    read_loss_kernel=lambda text: "trainer",  # it states no loss kernel: it runs its own
    reshard=checkpoints.mindformers,
)

__all__ = ["TRAINER", "nearest", "emit", "config", "read", "recognises"]
