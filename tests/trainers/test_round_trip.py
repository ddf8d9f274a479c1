"""Emit -> --strategy-from -> the same strategy and the same estimate, for every trainer: a launch script ndcp wrote
reads back as the plan the trainer runs (the nearest it can express), and so estimates exactly as that plan does."""
import pytest

from ndcp.cli.common import build_strategy
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, SpecError, StageRecompute, Strategy, device_preset
from ndcp.specs.library import load_model
from ndcp.trainers import emit, nearest, read_values, stage_plans

H100 = device_preset("h100")
LLAMA70 = load_model("llama3-70b")
LLAMA405 = load_model("llama3.1-405b")
MIXTRAL = load_model("mixtral-8x7b")
DEEPSEEK = load_model("deepseek-v3")
LLAMA8 = load_model("llama3-8b")
FULL, SELECTIVE = RecomputePlan.uniform("full"), RecomputePlan.uniform("selective")


def round_trip(tmp_path, kind, model, gpus, run, strategy):
    """(the strategy the trainer runs, the strategy read back from its emitted configuration)."""
    cluster = ClusterSpec(H100, gpus)
    path = tmp_path / f"{kind}.txt"
    path.write_text(emit(kind, model, run, strategy).text)
    back = build_strategy(model, cluster, run, read_values(str(path), model, run))
    ran, _ = nearest(kind, model, run, strategy)
    return cluster, ran, back


def same_estimate(model, cluster, run, a, b):
    assert estimate_time(model, cluster, run, a).step_seconds == estimate_time(model, cluster, run, b).step_seconds
    assert estimate_memory(model, cluster, run, a).peak_bytes == estimate_memory(model, cluster, run, b).peak_bytes


BLOCK = RecomputePlan(mode="per-stage", stages=tuple(StageRecompute(none=18, full=2) for _ in range(4)))
MEGATRON_CASES = [  # (model, gpus, run, strategy)
    (LLAMA70, 512, RunSpec(global_batch=1024, seq_len=8192),
     Strategy(dp=64, tp=8, mbs=2, mbn=8, zero=2, sp=True)),
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=BLOCK)),
    (LLAMA405, 2048, RunSpec(global_batch=2048, seq_len=8192),  # uneven: Megatron's layout notation
     Strategy(dp=16, tp=8, pp=16, mbs=1, mbn=128, sp=True, recompute=SELECTIVE,
              layers_per_stage=(6,) + (8,) * 15)),
    (LLAMA405, 2048, RunSpec(global_batch=2048, seq_len=8192),  # embedding+loss accounted, interleaved
     Strategy(dp=32, tp=8, pp=8, vpp=8, schedule="interleaved", mbs=1, mbn=64, sp=True, recompute=SELECTIVE)),
    (MIXTRAL, 64, RunSpec(global_batch=256, seq_len=4096),
     Strategy(dp=16, tp=2, pp=2, ep=8, etp=2, mbs=1, mbn=16, zero=3, sp=True, recompute=FULL)),
    (DEEPSEEK, 1024, RunSpec(global_batch=4096, seq_len=4096),
     Strategy(dp=32, tp=2, pp=16, ep=64, mbs=1, mbn=128, sp=True, recompute=FULL)),
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192, precision="fp8", fp8_recipe="tensorwise"),
     Strategy(dp=4, tp=4, pp=4, mbs=1, mbn=32, sp=True, recompute=SELECTIVE)),
    (LLAMA70, 128, RunSpec(global_batch=128, seq_len=32768),
     Strategy(dp=8, tp=4, cp=4, cp_comm="a2a+p2p", mbs=1, mbn=16, zero=3, sp=True, recompute=FULL)),
    # the optimizer on the host (--optimizer-cpu-offload), under ZeRO-1 and plain DDP
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=SELECTIVE, optimizer_offload=True)),
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192, optimizer_state_dtype="bf16"),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=0, sp=True, recompute=FULL, optimizer_offload=True)),
    # activation offload (--fine-grained-activation-offloading) and a recompute-module combination
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=RecomputePlan.uniform("offload"))),
    (LLAMA70, 64, RunSpec(global_batch=128, seq_len=8192),
     Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=RecomputePlan.uniform("layernorm+mlp"))),
]


@pytest.mark.parametrize("model,gpus,run,strategy", MEGATRON_CASES)
def test_megatron_arguments_read_back_as_the_plan(tmp_path, model, gpus, run, strategy):
    cluster, ran, back = round_trip(tmp_path, "megatron", model, gpus, run, strategy)
    assert ran == strategy  # Megatron expresses each of these exactly
    assert back == strategy
    same_estimate(model, cluster, run, strategy, back)


TITAN = RunSpec(global_batch=256, seq_len=8192, trainer="torchtitan")


@pytest.mark.parametrize("model,strategy", [
    (LLAMA8, Strategy(dp=64, mbs=2, mbn=2, zero=3, recompute=SELECTIVE)),
    (LLAMA8, Strategy(dp=64, mbs=1, mbn=4, zero=0)),  # DDP: data parallelism alone
    (LLAMA70, Strategy(dp=4, tp=8, pp=2, mbs=1, mbn=64, zero=3, sp=True, recompute=FULL,
                       layers_per_stage=(38, 42))),
    (LLAMA70, Strategy(dp=2, tp=4, pp=4, cp=2, vpp=2, schedule="interleaved", mbs=1, mbn=128, zero=3, sp=True,
                       recompute=SELECTIVE)),
])
def test_torchtitan_arguments_read_back_as_the_plan(tmp_path, model, strategy):
    cluster, ran, back = round_trip(tmp_path, "torchtitan", model, 64, TITAN, strategy)
    assert ran == strategy and back == strategy
    same_estimate(model, cluster, TITAN, strategy, back)


def test_torchtitan_reads_back_the_nearest_plan_it_runs(tmp_path):
    plan = RecomputePlan(mode="per-stage", stages=(StageRecompute(none=30, full=10), StageRecompute(none=40)))
    strategy = Strategy(dp=4, tp=8, pp=2, mbs=1, mbn=64, zero=1, sp=True, recompute=plan)
    cluster, ran, back = round_trip(tmp_path, "torchtitan", LLAMA70, 64, TITAN, strategy)
    assert (ran.zero, ran.recompute) == (3, FULL)  # FSDP2 and full AC on every block
    assert back == ran
    same_estimate(LLAMA70, cluster, TITAN, ran, back)


@pytest.mark.parametrize("model,gpus,strategy", [
    (LLAMA70, 64, Strategy(dp=2, tp=8, pp=4, vpp=2, schedule="interleaved", mbs=1, mbn=64, zero=3, sp=True,
                           recompute=RecomputePlan(mode="per-stage", stages=tuple(
                               StageRecompute(none=10 - v % 3, selective=v % 3) for v in range(7)) + (
                               StageRecompute(none=7, full=3),)))),
    (MIXTRAL, 64, Strategy(dp=16, tp=2, pp=2, ep=8, etp=1, mbs=1, mbn=8, zero=0, sp=True, recompute=SELECTIVE,
                           layers_per_stage=(15, 17))),
    (LLAMA70, 128, Strategy(dp=16, tp=2, cp=4, cp_comm="a2a", mbs=1, mbn=4, zero=3, sp=True, recompute=FULL)),
])
def test_mindformers_yaml_reads_back_as_the_plan(tmp_path, model, gpus, strategy):
    # MindFormers' select sets are not ndcp's selective (they re-run the SwiGLU activation): selective layers are
    # emitted fully recomputed, and the YAML reads back as what MindFormers runs
    run = RunSpec(global_batch=strategy.global_batch, seq_len=8192)
    cluster, ran, back = round_trip(tmp_path, "mindformers", model, gpus, run, strategy)
    selective = any(p.count("selective") for p in stage_plans(model, strategy))
    assert (ran == strategy) == (not selective)
    assert not any(p.count("selective") for p in stage_plans(model, ran))
    assert back == ran
    same_estimate(model, cluster, run, ran, back)


def test_a_file_for_another_batch_or_model_is_refused(tmp_path):
    run = RunSpec(global_batch=1024, seq_len=8192)
    path = tmp_path / "m.sh"
    path.write_text(emit("megatron", LLAMA70, run, MEGATRON_CASES[0][3]).text)
    with pytest.raises(SpecError, match="global batch is 1024, the run's --global-batch is 512"):
        read_values(str(path), LLAMA70, RunSpec(global_batch=512, seq_len=8192))
    with pytest.raises(SpecError, match="--num-layers 80 does not match llama3-8b"):
        read_values(str(path), LLAMA8, run)
    path.write_text("echo hello\n")
    with pytest.raises(SpecError, match="cannot tell the trainer"):
        read_values(str(path), LLAMA70, run)
