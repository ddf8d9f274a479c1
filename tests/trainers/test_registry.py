"""The trainer registry (ndcp/trainers): every trainer a run may name is one Trainer that supplies every part (its
behaviour as priced, what it runs, its schedules' names, its FP8 default, how its configuration is recognised,
nearest, emit and read), and every part is one the rest of ndcp knows."""
from dataclasses import fields

import pytest

from ndcp.estimate.overlap import requested
from ndcp.estimate.trainers import trainer_behaviour
from ndcp.schedules import SCHEDULES
from ndcp.specs import RunSpec, SpecError, Strategy
from ndcp.specs.library import load_model
from ndcp.specs.recompute import OPTION_BY_NAME
from ndcp.specs.run import FP8_RECIPES, OVERLAPS, PRECISIONS, TRAINERS
from ndcp.specs.strategy import CP_COMM_TYPES
from ndcp.specs.trainer_behaviour import BEHAVIOURS
from ndcp.trainers import KINDS, REGISTRY, Trainer, detect, emit, facts, read_values, trainer_named
from ndcp.validation.runs import read_rows

LLAMA = load_model("llama3-8b")
TRAINERS_OF_REGISTRY = list(REGISTRY.values())


def test_every_trainer_a_run_may_name_is_registered_under_its_own_name():
    assert KINDS == TRAINERS == tuple(BEHAVIOURS)  # one list of names, in one order (--trainer's, --emit's choices)
    assert all(trainer_named(name).name == name for name in TRAINERS)


@pytest.mark.parametrize("trainer", TRAINERS_OF_REGISTRY, ids=KINDS)
def test_each_trainer_supplies_every_part(trainer):
    for part in fields(Trainer):
        value = getattr(trainer, part.name)
        assert value is not None, part.name
        if "Callable" in str(part.type):
            assert callable(value), part.name
    assert trainer.behaviour is BEHAVIOURS[trainer.name]  # the estimators price the trainer the registry holds
    assert trainer_behaviour(RunSpec(global_batch=8, seq_len=1024, trainer=trainer.name)) is trainer.behaviour
    assert trainer.version and trainer.config_kind
    assert facts(trainer.name)["flags"]  # its pinned flags or keys (facts/NAME.yaml)


@pytest.mark.parametrize("trainer", TRAINERS_OF_REGISTRY, ids=KINDS)
def test_each_part_names_only_what_ndcp_knows(trainer):
    t = trainer
    assert len(t.zero_how) == len(t.zero_stages) and set(t.zero_stages) <= {0, 1, 2, 3}
    assert set(t.zero_dp_alone) < set(t.zero_stages)  # some stage runs with the other parallelisms
    assert set(t.optimizer_offload_zero) <= set(t.zero_stages)
    assert t.recompute in ("uniform", "count", "per-stage") and set(t.recompute_options) <= set(OPTION_BY_NAME)
    assert "none" in t.recompute_options and "full" in t.recompute_options
    assert set(t.precisions) <= set(PRECISIONS) and set(t.fp8_recipes) <= set(FP8_RECIPES)
    assert t.default_fp8_recipe in FP8_RECIPES and set(t.optimizer_offload_fp8_recipes) <= set(FP8_RECIPES)
    assert set(t.cp_comms) <= set(CP_COMM_TYPES) and "p2p" in t.cp_comms
    assert t.layouts in ("any", "even")
    assert set(t.schedules) <= set(SCHEDULES) and set(t.schedule_names) <= set(t.schedules)
    assert set(t.behaviour.default_overlaps) <= set(OVERLAPS)


@pytest.mark.parametrize("kind", KINDS)
def test_the_default_overlaps_are_the_trainers_own(kind):
    """RunSpec.overlap "trainer" asks for the trainer's default overlaps: every registered trainer has them (no
    table a new trainer could be missing from)."""
    run = RunSpec(global_batch=8, seq_len=1024, trainer=kind)
    assert requested(run) == trainer_named(kind).behaviour.default_overlaps
    assert requested(RunSpec(global_batch=8, seq_len=1024, trainer=kind, overlap="none")) == frozenset()


STRATEGY = Strategy(dp=2, tp=2, pp=2, mbs=1, mbn=8, zero=1, sp=True)


@pytest.mark.parametrize("kind", KINDS)
def test_each_trainer_alone_recognises_its_own_configuration(tmp_path, kind):
    run = RunSpec(global_batch=STRATEGY.global_batch, seq_len=4096, trainer=kind)
    emitted = emit(kind, LLAMA, run, STRATEGY)
    assert detect(emitted.text) is trainer_named(kind)
    path = tmp_path / "config"
    path.write_text(emitted.text)
    ran = emitted.strategy or STRATEGY
    assert read_values(str(path), LLAMA, run)["tp"] == ran.tp


def test_a_configuration_no_trainer_or_two_trainers_recognise_is_refused():
    with pytest.raises(SpecError, match="expected Megatron-LM arguments, torchtitan arguments "
                                        r"\(--module/--config\) or a MindFormers YAML \(parallel_config\)"):
        detect("hello")
    with pytest.raises(SpecError, match="reads as Megatron-LM arguments and as a MindFormers YAML"):
        detect("--num-layers 32\nparallel_config:\n  data_parallel: 2\n")


@pytest.mark.parametrize("kind", KINDS)
def test_a_measured_fp8_run_without_a_recipe_takes_its_trainers_default(tmp_path, kind):
    csv = tmp_path / "runs.csv"
    csv.write_text("id,model,device,gpus,global_batch,seq_len,tp,pp,dp,zero,recompute,trainer,precision,"
                   "step_seconds\n"
                   f"fp8,llama3-8b,h100,8,16,8192,1,1,8,3,full,{kind},fp8,2.8\n")
    ((_, build),) = read_rows(csv)
    measured = build()
    assert measured.run.fp8_recipe == trainer_named(kind).default_fp8_recipe
    assert f"fp8 recipe unstated -> {measured.run.fp8_recipe}" in measured.assumptions
