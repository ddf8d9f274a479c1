"""What the user launches (ndcp.launch): the --emit configuration, read back as --strategy-from reads it, is the plan
(same step time, same peak) and fits, or the check says why not."""
from ndcp.api import search_values
from ndcp.cli import build_parser
from ndcp.estimate.time import estimate_time
from ndcp.launch import check_launch, problem_line, stated_problem
from ndcp.policy import build_problem
from ndcp.report.emit import launch_lines
from ndcp.specs import RecomputePlan, StageRecompute, Strategy
from ndcp.trainers import stage_plans

PROBLEM = dict(device="h100", gpus=64, global_batch=128, seq_len=8192)


def problem(**options):
    values = search_values("llama3-70b", **PROBLEM, **options)
    return values, build_problem(values)


def test_a_plan_the_trainer_runs_reads_back_as_the_plan():
    values, found = problem()
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=RecomputePlan.uniform("full"))
    check = check_launch("megatron", values, found, strategy)
    assert check.ok and check.same_as_plan and check.fits and check.reasons == ()
    assert check.read_back.strategy == strategy
    assert launch_lines(check)[-1].endswith("(fits): the plan")
    assert set(check.document()) == {"trainer", "step_seconds", "peak_bytes", "fits", "same_as_plan", "launchable",
                                      "reasons"}


def test_a_plan_the_trainer_cannot_express_is_not_the_plan():
    values, found = problem()
    plan = RecomputePlan(mode="per-stage", stages=(StageRecompute(none=18, full=2), StageRecompute(none=20),
                                                   StageRecompute(none=20), StageRecompute(none=19, full=1)))
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=plan)
    check = check_launch("megatron", values, found, strategy)
    assert not check.ok and not check.same_as_plan
    assert "--recompute-num-layers 2" in check.text  # two full layers on every stage instead of three in all
    assert any("the file runs a" in reason for reason in check.reasons)
    model, cluster, run = found
    assert check.read_back.step_seconds > estimate_time(model, cluster, run, strategy).step_seconds  # recomputes more
    assert [p.count("full") for p in stage_plans(model, check.read_back.strategy)] == [2, 2, 2, 2]


def test_another_trainers_file_says_to_plan_for_it():
    values, found = problem()
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=3, sp=True)
    check = check_launch("torchtitan", values, found, strategy)
    assert not check.same_as_plan  # torchtitan with PP holds the stage's parameters gathered over the step
    assert any("plan with --trainer torchtitan" in reason for reason in check.reasons)


def test_a_file_that_does_not_fit_is_no_answer():
    values, found = problem(memory_cap="20GiB")
    strategy = Strategy(dp=8, tp=8, pp=1, mbs=1, mbn=16, zero=1, sp=True)
    check = check_launch("megatron", values, found, strategy)
    assert check.same_as_plan and not check.fits and not check.ok
    assert check.document()["fits"] is False and any("does not fit" in reason for reason in check.reasons)


def test_a_model_the_trainer_has_no_config_for_is_no_answer():
    values = search_values("mixtral-8x7b", device="h100", gpus=64, global_batch=256, seq_len=4096,
                           trainer="torchtitan")
    found = build_problem(values)
    strategy = Strategy(dp=8, tp=2, pp=4, ep=8, mbs=1, mbn=32, zero=3, sp=True)
    check = check_launch("torchtitan", values, found, strategy)
    assert check.same_as_plan and check.fits and not check.ok  # the file reads back, but torchtitan has no Mixtral
    assert check.missing and "no BF16 registry config for mixtral-8x7b" in check.missing[0]
    assert check.document()["launchable"] is False and check.missing[0] in check.reasons


def test_every_configuration_states_its_problem_and_the_line_reads_back_to_the_same_options():
    values, found = problem(memory_cap="70GiB", inter_node_bandwidth=25, no_flash_attention=True, precision="fp8")
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=RecomputePlan.uniform("full"))
    check = check_launch("megatron", values, found, strategy)
    words = stated_problem(check.text)
    assert check.text.startswith(problem_line(values)) and words[0] == "llama3-70b"
    assert "--no-flash-attention" in words and "--inter-node-bandwidth" in words and "--headroom" not in words
    assert build_problem(build_parser().parse_args(["search", *words])) == found  # the same model, cluster and run
    assert stated_problem("--num-layers 2\n") is None
