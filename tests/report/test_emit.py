"""Launch-config emitters: parse each trainer's text back and check it says what the strategy says."""
from __future__ import annotations

import argparse
import shlex
import tomllib

import pytest
import yaml

from ndcp.estimate.layout import partition
from ndcp.report.emit import KINDS, covers, emit, megatron_flags, mindformers_yaml, stage_plans, torchtitan_toml
from ndcp.specs.library import load_model
from ndcp.specs.run import RunSpec
from ndcp.specs.strategy import RECOMPUTE_MODES, RecomputePlan, StageRecompute, Strategy

LLAMA = load_model("llama3-70b")
MIXTRAL = load_model("mixtral-8x7b")
RUN = RunSpec(global_batch=1024, seq_len=8192)
SELECTIVE = RecomputePlan.uniform("selective")


def megatron_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pretrain_gpt.py")
    p.add_argument("--num-layers", type=int)
    p.add_argument("--tensor-model-parallel-size", type=int, default=1)
    p.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    p.add_argument("--context-parallel-size", type=int, default=1)
    p.add_argument("--cp-comm-type", choices=("p2p", "a2a", "allgather", "a2a+p2p"), default="p2p")
    p.add_argument("--expert-model-parallel-size", type=int, default=1)
    p.add_argument("--expert-tensor-parallel-size", type=int, default=None)
    p.add_argument("--num-layers-per-virtual-pipeline-stage", type=int, default=None)
    p.add_argument("--num-virtual-stages-per-pipeline-rank", type=int, default=None)
    p.add_argument("--microbatch-group-size-per-virtual-pipeline-stage", type=int, default=None,
                   dest="microbatch_group_size_per_vp_stage")
    p.add_argument("--decoder-first-pipeline-num-layers", type=int, default=None)
    p.add_argument("--decoder-last-pipeline-num-layers", type=int, default=None)
    p.add_argument("--account-for-embedding-in-pipeline-split", action="store_true")
    p.add_argument("--account-for-loss-in-pipeline-split", action="store_true")
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--micro-batch-size", type=int, required=True)
    p.add_argument("--global-batch-size", type=int, required=True)
    p.add_argument("--seq-length", type=int, required=True)
    p.add_argument("--use-distributed-optimizer", action="store_true")
    p.add_argument("--recompute-granularity", choices=("full", "selective"), default=None)
    p.add_argument("--recompute-method", choices=("uniform", "block"), default=None)
    p.add_argument("--recompute-num-layers", type=int, default=None)
    return p


def parse_megatron(text: str) -> argparse.Namespace:
    return megatron_parser().parse_args(shlex.split(text.replace("\\\n", " "), comments=True))


def megatron_plan(args, counts) -> list[StageRecompute]:
    """The per-virtual-stage recompute Megatron runs with these arguments."""
    if args.recompute_granularity is None:
        return [StageRecompute(none=n) for n in counts]
    if args.recompute_granularity == "selective":
        return [StageRecompute(selective=n) for n in counts]
    if args.recompute_method == "uniform":
        return [StageRecompute(full=n) for n in counts]
    k = args.recompute_num_layers
    return [StageRecompute(none=n - min(k, n), full=min(k, n)) for n in counts]


def llama_strategy(**changes) -> Strategy:
    base = dict(dp=16, tp=8, pp=4, vpp=5, schedule="interleaved", sp=True, mbs=1, mbn=64, zero=1, recompute=SELECTIVE)
    return Strategy(**{**base, **changes})


@pytest.mark.parametrize("strategy", [
    llama_strategy(),
    llama_strategy(vpp=1, schedule="1f1b", recompute=RecomputePlan.uniform("full"), mbs=2, mbn=32),
    llama_strategy(dp=8, cp=2, recompute=RecomputePlan.uniform("none"), zero=0),
    llama_strategy(dp=8, cp=2, recompute=RecomputePlan.uniform("none"), cp_comm="allgather"),
])
def test_megatron_round_trip(strategy):
    args = parse_megatron(emit("megatron", LLAMA, RUN, strategy).text)
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.context_parallel_size) == \
        (strategy.tp, strategy.pp, strategy.cp)
    assert args.cp_comm_type == strategy.cp_comm
    dp = strategy.devices // (args.tensor_model_parallel_size * args.pipeline_model_parallel_size
                              * args.context_parallel_size)
    assert dp == strategy.dp
    assert args.micro_batch_size == strategy.mbs and args.global_batch_size == strategy.global_batch
    assert args.global_batch_size // (args.micro_batch_size * dp) == strategy.mbn
    assert args.seq_length == RUN.seq_len
    assert args.sequence_parallel == strategy.sp
    assert args.use_distributed_optimizer == (strategy.zero >= 1)
    if strategy.vpp > 1:
        assert args.num_layers // (args.pipeline_model_parallel_size * args.num_layers_per_virtual_pipeline_stage) \
            == strategy.vpp
    else:
        assert args.num_layers_per_virtual_pipeline_stage is None
    counts = partition(LLAMA, strategy)
    assert megatron_plan(args, counts) == stage_plans(LLAMA, strategy)
    assert megatron_flags(LLAMA, RUN, strategy) == shlex.split(emit("megatron", LLAMA, RUN, strategy).text.replace("\\\n", " "))


def test_megatron_interleaving_with_mbn_not_a_multiple_of_pp_sets_the_group_size():
    # pp=4, mbn=6: Megatron-Core's default group (pp) would leave a last group of 2 < pp and raise
    args = parse_megatron(emit("megatron", LLAMA, RunSpec(global_batch=96, seq_len=8192), llama_strategy(mbn=6)).text)
    assert args.microbatch_group_size_per_vp_stage == 6
    assert parse_megatron(emit("megatron", LLAMA, RUN, llama_strategy()).text).microbatch_group_size_per_vp_stage is None


def test_megatron_moe_and_zero_notes():
    s = Strategy(dp=8, tp=2, pp=4, ep=8, etp=1, mbs=1, mbn=32, zero=3, sp=True, recompute=SELECTIVE)
    out = emit("megatron", MIXTRAL, RunSpec(global_batch=256, seq_len=4096), s)
    args = parse_megatron(out.text)
    assert args.expert_model_parallel_size == 8 and args.expert_tensor_parallel_size == 1
    assert any("ZeRO-3" in n for n in out.notes)
    # a dense model gets no expert flags
    assert "--expert-tensor-parallel-size" not in megatron_flags(LLAMA, RUN, llama_strategy())


def test_megatron_uneven_first_last_stage():
    s = llama_strategy(vpp=1, schedule="1f1b", pp=6, dp=8, mbn=128, layers_per_stage=(12, 14, 14, 14, 14, 12))
    out = emit("megatron", LLAMA, RUN, s)
    args = parse_megatron(out.text)
    assert (args.decoder_first_pipeline_num_layers, args.decoder_last_pipeline_num_layers) == (12, 12)
    assert not out.notes
    bad = s.with_(layers_per_stage=(12, 15, 13, 14, 14, 12))
    assert any("partition" in n for n in emit("megatron", LLAMA, RUN, bad).notes)


def test_megatron_all_full_per_stage_is_exact_without_note():
    s = llama_strategy(vpp=1, schedule="1f1b", layers_per_stage=(18, 22, 20, 20), recompute=RecomputePlan(
        mode="per-stage", stages=tuple(StageRecompute(full=n) for n in (18, 22, 20, 20))))
    out = emit("megatron", LLAMA, RUN, s)
    assert not any("recompute" in n for n in out.notes)
    args = parse_megatron(out.text)
    assert megatron_plan(args, partition(LLAMA, s)) == stage_plans(LLAMA, s)


def test_megatron_block_recompute_exact():
    plan = RecomputePlan(mode="per-stage", stages=tuple(StageRecompute(none=17, full=3) for _ in range(4)))
    s = llama_strategy(vpp=1, schedule="1f1b", recompute=plan)
    out = emit("megatron", LLAMA, RUN, s)
    args = parse_megatron(out.text)
    assert (args.recompute_granularity, args.recompute_method, args.recompute_num_layers) == ("full", "block", 3)
    assert not out.notes and out.recompute == plan


@pytest.mark.parametrize("stages", [
    [(15, 0, 5), (17, 0, 3), (20, 0, 0), (20, 0, 0)],  # full counts differ by stage
    [(10, 8, 2), (12, 8, 0), (20, 0, 0), (0, 20, 0)],  # selective and full mixed
    [(10, 10, 0), (20, 0, 0), (0, 20, 0), (5, 15, 0)],  # selective on some layers only
])
def test_megatron_inexpressible_plan_is_covered(stages):
    plan = RecomputePlan(mode="per-stage", stages=tuple(StageRecompute(**dict(zip(RECOMPUTE_MODES, c))) for c in stages))
    s = llama_strategy(vpp=1, schedule="1f1b", recompute=plan)
    out = emit("megatron", LLAMA, RUN, s)
    assert out.notes, "an inexpressible plan must say what it changed"
    args = parse_megatron(out.text)
    emitted = megatron_plan(args, partition(LLAMA, s))
    assert emitted == list(out.recompute.stages)
    original = stage_plans(LLAMA, s)
    assert covers(emitted, original)
    for e, o in zip(emitted, original):
        assert e.count("full") >= o.count("full") and e.layers == o.layers
        assert e.count("full") + e.count("selective") >= o.count("full") + o.count("selective")


@pytest.mark.parametrize("strategy,shard", [(llama_strategy(), False), (llama_strategy(zero=3), True)])
def test_torchtitan_toml(strategy, shard):
    cfg = tomllib.loads(emit("torchtitan", LLAMA, RUN, strategy).text)
    par = cfg["parallelism"]
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"], par["context_parallel_degree"]) == \
        (strategy.tp, strategy.pp, strategy.cp)
    assert par["data_parallel_shard_degree" if shard else "data_parallel_replicate_degree"] == strategy.dp
    assert par["data_parallel_replicate_degree" if shard else "data_parallel_shard_degree"] == 1
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert par["pipeline_parallel_layers_per_stage"] * strategy.pp * strategy.vpp == LLAMA.layers
    assert par["pipeline_parallel_microbatch_size"] == strategy.mbs
    assert cfg["activation_checkpoint"]["mode"] == "selective"
    tr = cfg["training"]
    assert tr["seq_len"] == RUN.seq_len and tr["global_batch_size"] == strategy.global_batch
    assert tr["local_batch_size"] // par["pipeline_parallel_microbatch_size"] == strategy.mbn


def test_torchtitan_per_stage_plan_and_split_points():
    plan = RecomputePlan(mode="per-stage", stages=(StageRecompute(none=10, selective=8), StageRecompute(none=22),
                                                    StageRecompute(none=18, full=2), StageRecompute(selective=20)))
    s = llama_strategy(vpp=1, schedule="1f1b", recompute=plan, layers_per_stage=(18, 22, 20, 20))
    out = emit("torchtitan", LLAMA, RUN, s)
    cfg = tomllib.loads(out.text)
    assert cfg["activation_checkpoint"]["mode"] == "full"
    assert any("per-stage" in n for n in out.notes)
    assert cfg["parallelism"]["pipeline_parallel_schedule"] == "1F1B"
    assert cfg["parallelism"]["pipeline_parallel_split_points"] == ["layers.18", "layers.40", "layers.60"]
    assert covers(list(out.recompute.stages), stage_plans(LLAMA, s))
    selective_only = s.with_(recompute=RecomputePlan(mode="per-stage", stages=tuple(
        StageRecompute(none=n - 2, selective=2) for n in (18, 22, 20, 20))))
    assert tomllib.loads(torchtitan_toml(LLAMA, RUN, selective_only))["activation_checkpoint"]["mode"] == "selective"


def _flat(x):
    return [v for row in x for v in row] if x and isinstance(x[0], list) else list(x)


@pytest.mark.parametrize("strategy", [
    llama_strategy(),
    llama_strategy(vpp=1, schedule="1f1b", pp=6, dp=8, mbn=128, recompute=RecomputePlan.uniform("full")),
    llama_strategy(vpp=1, schedule="1f1b", layers_per_stage=(18, 22, 20, 20), recompute=RecomputePlan(
        mode="per-stage", stages=(StageRecompute(none=10, selective=6, full=2), StageRecompute(none=22), StageRecompute(full=20),
                                  StageRecompute(none=5, selective=15)))),
])
def test_mindformers_yaml(strategy):
    cfg = yaml.safe_load(emit("mindformers", LLAMA, RUN, strategy).text)
    pc = cfg["parallel_config"]
    assert (pc["data_parallel"], pc["model_parallel"], pc["pipeline_stage"], pc["context_parallel"]) == \
        (strategy.dp, strategy.tp, strategy.pp, strategy.cp)
    assert pc["micro_batch_num"] == strategy.mbn and pc["vocab_emb_dp"] is False
    assert pc["use_seq_parallel"] == strategy.sp
    assert cfg["runner_config"]["batch_size"] == strategy.mbs
    mc = cfg["model"]["model_config"]
    offset = _flat(mc["offset"])
    naive = LLAMA.layers // strategy.virtual_stages
    assert len(offset) == strategy.virtual_stages
    assert sum(offset) + naive * strategy.virtual_stages == LLAMA.layers
    rc = cfg["recompute_config"]
    full, select = _flat(rc["recompute"]), _flat(rc["select_recompute"])
    counts = partition(LLAMA, strategy)
    for v, (n, plan) in enumerate(zip(counts, stage_plans(LLAMA, strategy))):
        stage = v % strategy.pp
        chunk = v // strategy.pp
        idx = chunk * strategy.pp + stage
        assert naive + offset[idx] == n
        assert full[idx] == plan.count("full") and select[idx] == plan.count("selective") + plan.count("full") <= n
    if strategy.vpp > 1:
        assert mc["pp_interleave_num"] == strategy.vpp
        assert len(mc["offset"]) == strategy.vpp and all(len(row) == strategy.pp for row in mc["offset"])
    assert mindformers_yaml(LLAMA, RUN, strategy) in emit("mindformers", LLAMA, RUN, strategy).text


def test_unknown_kind():
    assert set(KINDS) == {"megatron", "torchtitan", "mindformers"}
    with pytest.raises(ValueError):
        emit("deepspeed", LLAMA, RUN, llama_strategy())


@pytest.mark.parametrize("vpp", [8, 1])
def test_megatron_embedding_and_loss_accounted_split(vpp):
    # Llama-3.1-405B's 126 layers on pp=8 (x vpp=8): 126 + 2 = 128 splits evenly with the embedding and the loss
    # counted as layers; Megatron builds (126 + 2) / (pp * vpp) layers per chunk, one fewer on the first and the last
    # (core transformer_block.py get_num_layers_to_build).
    model = load_model("llama3.1-405b")
    s = Strategy(dp=16, tp=8, pp=8, cp=2, vpp=vpp, schedule="interleaved" if vpp > 1 else "1f1b", sp=True, mbs=1,
                 mbn=128, zero=1, recompute=SELECTIVE)
    out = emit("megatron", model, RunSpec(global_batch=2048, seq_len=8192), s)
    args = parse_megatron(out.text)
    assert args.account_for_embedding_in_pipeline_split and args.account_for_loss_in_pipeline_split
    assert args.num_layers == 126 and args.num_layers_per_virtual_pipeline_stage is None
    assert args.num_virtual_stages_per_pipeline_rank == (vpp if vpp > 1 else None)
    assert args.decoder_first_pipeline_num_layers is None and args.decoder_last_pipeline_num_layers is None
    per_chunk = (args.num_layers + 2) // (args.pipeline_model_parallel_size * vpp)
    megatron = [per_chunk] * (8 * vpp)
    megatron[0] -= 1
    megatron[-1] -= 1
    assert tuple(megatron) == partition(model, s)
    assert not any("cannot express" in n for n in out.notes)
