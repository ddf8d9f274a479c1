"""Emitted = planned: for a matrix of plans (dense, MoE, MLA + MTP, CP, FP8, ZeRO 0-3, offload, interleaving,
DualPipe-V, uneven layouts, overlaps) and every trainer, the file `emit` writes reads back (its strategy values and
the run's overlaps, as `ndcp estimate --strategy-from FILE` reads them) as exactly the plan's step time and peak
memory, whenever the trainer runs the plan as it is (Emitted.same_as_plan); where it does not, the notes say why."""
import dataclasses

import pytest

from ndcp.cli.common import build_strategy
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, StageRecompute, Strategy, device_preset
from ndcp.specs.library import load_model
from ndcp.trainers import KINDS, emit, file_overlap, read_values

FULL, SELECTIVE = RecomputePlan.uniform("full"), RecomputePlan.uniform("selective")
BLOCK = RecomputePlan(mode="per-stage", stages=tuple(StageRecompute(none=18, full=2) for _ in range(4)))
PLANS = [  # (name, model, device, gpus, run, strategy)
    ("dense FSDP", "llama3-70b", "h100", 512, RunSpec(global_batch=1024, seq_len=8192),
     Strategy(dp=64, tp=8, mbs=2, mbn=8, zero=2, sp=True)),
    ("dense ZeRO-3 full", "llama3-70b", "h100", 512, RunSpec(global_batch=1024, seq_len=8192),
     Strategy(dp=64, tp=8, mbs=1, mbn=16, zero=3, sp=True, recompute=FULL)),
    ("dense DDP", "llama3-8b", "h100", 64, RunSpec(global_batch=256, seq_len=8192),
     Strategy(dp=64, mbs=1, mbn=4, zero=0, recompute=SELECTIVE)),
    ("block recompute, ZeRO-1", "llama3-70b", "h100", 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=BLOCK)),
    ("uneven layout", "llama3.1-405b", "h100", 2048, RunSpec(global_batch=2048, seq_len=8192),
     Strategy(dp=16, tp=8, pp=16, mbs=1, mbn=128, zero=1, sp=True, recompute=SELECTIVE,
              layers_per_stage=(6,) + (8,) * 15)),
    ("interleaved, accounted", "llama3.1-405b", "h100", 2048, RunSpec(global_batch=2048, seq_len=8192),
     Strategy(dp=32, tp=8, pp=8, vpp=8, schedule="interleaved", mbs=1, mbn=64, zero=1, sp=True,
              recompute=SELECTIVE)),
    ("interleaved, no p2p overlap", "llama3-70b", "h100", 64,
     RunSpec(global_batch=128, seq_len=8192, overlap="none"),
     Strategy(dp=2, tp=8, pp=4, vpp=2, schedule="interleaved", mbs=1, mbn=64, zero=1, sp=True,
              recompute=SELECTIVE)),
    ("TP overlap", "llama3-70b", "h100", 64, RunSpec(global_batch=128, seq_len=8192, overlap="tp+p2p"),
     Strategy(dp=2, tp=8, pp=4, vpp=2, schedule="interleaved", mbs=1, mbn=64, zero=1, sp=True,
              recompute=SELECTIVE)),
    ("MoE ZeRO-3", "mixtral-8x7b", "h100", 64, RunSpec(global_batch=256, seq_len=4096),
     Strategy(dp=32, tp=2, pp=1, ep=8, etp=1, mbs=1, mbn=8, zero=3, sp=True, recompute=FULL)),  # Megatron FSDP: pp 1
    ("MLA + MTP", "deepseek-v3", "h800", 1024, RunSpec(global_batch=4096, seq_len=4096),
     Strategy(dp=32, tp=2, pp=16, ep=64, mbs=1, mbn=128, zero=1, sp=True, recompute=FULL)),
    ("EP overlap", "deepseek-v3", "h800", 2048, RunSpec(global_batch=4096, seq_len=4096, overlap="ep+p2p"),
     Strategy(dp=64, tp=2, pp=16, vpp=2, schedule="interleaved", ep=64, mbs=1, mbn=64, zero=1, sp=True,
              recompute=SELECTIVE)),
    ("EP overlap beside full recompute", "deepseek-v3", "h800", 2048,
     RunSpec(global_batch=4096, seq_len=4096, overlap="ep+p2p"),
     Strategy(dp=64, tp=2, pp=16, vpp=2, schedule="interleaved", ep=64, mbs=1, mbn=64, zero=1, sp=True,
              recompute=FULL)),
    ("DualPipe-V", "llama3-70b", "h100", 128, RunSpec(global_batch=256, seq_len=8192),
     Strategy(dp=4, tp=8, pp=4, schedule="dualpipev", mbs=1, mbn=64, zero=3, sp=True, recompute=FULL)),
    ("FP8 tensorwise", "llama3-70b", "h100", 64,
     RunSpec(global_batch=128, seq_len=8192, precision="fp8", fp8_recipe="tensorwise"),
     Strategy(dp=4, tp=4, pp=4, mbs=1, mbn=32, zero=1, sp=True, recompute=SELECTIVE)),
    ("FP8 blockwise, 405B", "llama3.1-405b", "h100", 2048,
     RunSpec(global_batch=2048, seq_len=8192, precision="fp8", fp8_recipe="blockwise"),
     Strategy(dp=16, tp=8, pp=16, mbs=1, mbn=128, zero=3, sp=True, recompute=FULL)),
    ("MXFP8", "llama3-8b", "b200", 64, RunSpec(global_batch=256, seq_len=8192, precision="fp8", fp8_recipe="mxfp8"),
     Strategy(dp=64, mbs=1, mbn=4, zero=3, recompute=SELECTIVE)),
    ("CP a2a+p2p, ZeRO-3", "llama3-70b", "h100", 128, RunSpec(global_batch=128, seq_len=32768),
     Strategy(dp=8, tp=4, cp=4, cp_comm="a2a+p2p", mbs=1, mbn=16, zero=3, sp=True, recompute=FULL)),
    ("CP with data parallelism 1", "llama3-8b", "h100", 8, RunSpec(global_batch=8, seq_len=65536),
     Strategy(dp=1, tp=2, cp=4, mbs=1, mbn=8, zero=3, sp=True, recompute=FULL)),
    ("optimizer offload", "llama3-70b", "h100", 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=SELECTIVE, optimizer_offload=True)),
    ("activation offload", "llama3-70b", "h100", 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=RecomputePlan.uniform("offload"))),
]


def flag_lines(text: str) -> str:
    """A configuration without its comments (the notes name flags too)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


def read_back(tmp_path, kind, model, cluster, run, emitted):
    """(the run, the strategy) `ndcp estimate --strategy-from FILE` reads from an emitted file: the run's overlaps
    the file's (--overlap left out), the strategy its values."""
    path = tmp_path / f"{kind}.txt"
    path.write_text(emitted.text)
    back_run = dataclasses.replace(run, overlap=file_overlap(str(path)))
    return back_run, build_strategy(model, cluster, back_run, read_values(str(path), model, back_run))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name,model,device,gpus,run,strategy", PLANS, ids=[p[0] for p in PLANS])
def test_the_file_reads_back_as_the_plan_or_says_why_not(tmp_path, kind, name, model, device, gpus, run, strategy):
    model, cluster = load_model(model), ClusterSpec(device_preset(device), gpus)
    run = dataclasses.replace(run, trainer=kind)  # planned for this trainer's behaviour
    emitted = emit(kind, model, run, strategy)
    if not emitted.same_as_plan:
        assert emitted.notes, "a file that is not the plan says why"
        return
    if "--config CONFIG" in emitted.text:  # torchtitan has no registry config for the model: the user writes one
        assert any("register one" in n for n in emitted.missing)
    back_run, back = read_back(tmp_path, kind, model, cluster, run, emitted)
    assert back == strategy
    assert estimate_time(model, cluster, back_run, back).step_seconds == \
        estimate_time(model, cluster, run, strategy).step_seconds
    assert estimate_memory(model, cluster, back_run, back).peak_bytes == \
        estimate_memory(model, cluster, run, strategy).peak_bytes


@pytest.mark.parametrize("kind,name", [
    ("megatron", "EP overlap"), ("megatron", "TP overlap"), ("megatron", "interleaved, no p2p overlap"),
    ("megatron", "FP8 tensorwise"), ("megatron", "MLA + MTP"), ("torchtitan", "DualPipe-V"),
    ("torchtitan", "CP with data parallelism 1"), ("torchtitan", "FP8 blockwise, 405B"), ("torchtitan", "MXFP8"),
])
def test_these_plans_are_emitted_as_they_are(kind, name):
    """The cases the matrix checks for equality, not only for a note: each trainer runs these plans exactly."""
    _, model, device, gpus, run, strategy = next(p for p in PLANS if p[0] == name)
    assert emit(kind, load_model(model), dataclasses.replace(run, trainer=kind), strategy).same_as_plan


def test_megatron_states_the_expert_overlap_and_drops_it_beside_full_recompute():
    _, model, _, _, run, strategy = next(p for p in PLANS if p[0] == "EP overlap")
    assert "--overlap-moe-expert-parallel-comm" in flag_lines(emit("megatron", load_model(model), run, strategy).text)
    _, model, _, _, run, strategy = next(p for p in PLANS if p[0] == "EP overlap beside full recompute")
    emitted = emit("megatron", load_model(model), run, strategy)
    assert "--overlap-moe-expert-parallel-comm" not in flag_lines(emitted.text)
    assert emitted.run is not None and emitted.run.overlap == "trainer"  # p2p only: Megatron's default
    assert any("without full or moe recompute" in n for n in emitted.notes)


def test_torchtitan_without_an_fp8_config_for_the_model_emits_bf16_and_says_so():
    _, model, _, _, run, strategy = next(p for p in PLANS if p[0] == "FP8 tensorwise")
    emitted = emit("torchtitan", load_model(model), dataclasses.replace(run, trainer="torchtitan"), strategy)
    assert emitted.run is not None and emitted.run.precision == "bf16"
    assert "--config llama3_70b" in flag_lines(emitted.text)
    assert any("no FP8 config for llama3-70b" in n for n in emitted.notes)
