"""--emit's report: when the trainer runs another plan than the one estimated, both estimates are shown."""
from ndcp.report.emit import comparison, emit
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, StageRecompute, Strategy, device_preset
from ndcp.specs.library import load_model

LLAMA = load_model("llama3-70b")
CLUSTER = ClusterSpec(device_preset("h100"), 64)
RUN = RunSpec(global_batch=128, seq_len=8192)


def test_no_comparison_when_the_trainer_runs_the_plan():
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=RecomputePlan.uniform("full"))
    assert comparison("megatron", LLAMA, CLUSTER, RUN, strategy) == []


def test_a_plan_the_trainer_cannot_express_is_estimated_as_it_runs():
    plan = RecomputePlan(mode="per-stage", stages=(StageRecompute(none=18, full=2), StageRecompute(none=20),
                                                   StageRecompute(none=20), StageRecompute(none=19, full=1)))
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=plan)
    planned, emitted = comparison("megatron", LLAMA, CLUSTER, RUN, strategy)
    assert planned.startswith("as planned (megatron): step ") and emitted.startswith("as emitted for megatron: step ")
    seconds = [float(line.split("step ")[1].split(" s")[0]) for line in (planned, emitted)]
    assert seconds[1] > seconds[0]  # two full layers on every stage instead of three in all
    assert "--recompute-num-layers 2" in emit("megatron", LLAMA, RUN, strategy).text


def test_another_trainers_plan_is_estimated_with_that_trainers_memory():
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=3, sp=True)
    planned, emitted = comparison("torchtitan", LLAMA, CLUSTER, RUN, strategy)
    gib = [float(line.split("peak ")[1].split(" GiB")[0]) for line in (planned, emitted)]
    assert gib[1] > gib[0]  # torchtitan with PP holds the stage's parameters gathered over the step
