"""What each trainer can run (its Trainer) and the nearest plan it runs for one it cannot express: never less
recompute or sharding than planned, and the search under --trainer takes only what the trainer runs."""
from dataclasses import replace

import pytest

from ndcp.rules import strategy_refusal
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, StageRecompute, Strategy, device_preset
from ndcp.specs.library import load_model
from ndcp.trainers import KINDS, REGISTRY, covers, emit, nearest, stage_plans, trainer_named
from ndcp.trainers.megatron import environment

LLAMA = load_model("llama3-70b")
TINY_MOE = load_model("tiny-moe")
RUN = RunSpec(global_batch=128, seq_len=8192)
TITAN = RunSpec(global_batch=128, seq_len=8192, trainer="torchtitan")


def per_stage(*stages: dict) -> RecomputePlan:
    return RecomputePlan(mode="per-stage", stages=tuple(StageRecompute(**s) for s in stages))


MIXED = per_stage({"none": 18, "full": 2}, {"none": 20}, {"none": 15, "selective": 5}, {"none": 19, "full": 1})
MODULES = per_stage({"none": 10, "mlp": 10}, {"none": 20}, {"none": 15, "selective": 5}, {"none": 20})
SELECT = per_stage({"none": 16, "mlp_act": 4}, {"none": 20}, {"none": 15, "selective": 5}, {"none": 19, "full": 1})
PLANS = [MIXED, MODULES, SELECT, per_stage(*({"none": 20 - v, "selective": v} for v in range(4))),
         per_stage(*({"none": 20 - v, "full": v} for v in range(4))),
         per_stage(*({"none": 20 - v, "mlp_act": v} for v in range(4)))]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("plan", PLANS)
def test_the_nearest_plan_recomputes_at_least_as_much_on_every_stage(kind, plan):
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=1, sp=True, recompute=plan)
    ran, notes = nearest(kind, LLAMA, RUN, strategy)
    assert covers(stage_plans(LLAMA, ran), stage_plans(LLAMA, strategy))
    assert (ran.recompute == plan) == (not any("recompute" in n for n in notes))


def test_megatron_runs_one_full_count_per_stage_or_one_module_set_everywhere():
    block = per_stage(*({"none": 18, "full": 2} for _ in range(4)))
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, sp=True, recompute=block)
    assert nearest("megatron", LLAMA, RUN, strategy) == (strategy, [])
    ran, _ = nearest("megatron", LLAMA, RUN, strategy.with_(recompute=MIXED))
    assert [p.count("full") for p in stage_plans(LLAMA, ran)] == [5, 5, 5, 5]  # max recomputed layers per stage
    ran, _ = nearest("megatron", LLAMA, RUN, strategy.with_(recompute=per_stage(
        {"none": 20}, {"none": 18, "selective": 2}, {"none": 20}, {"none": 20})))
    assert ran.recompute == RecomputePlan.uniform("selective")  # core_attn on every layer
    assert "--recompute-modules mlp" in emit("megatron", LLAMA, RUN, strategy.with_(
        recompute=RecomputePlan.uniform("mlp"))).text


def test_torchtitan_runs_fsdp_or_plain_ddp_and_no_expert_tensor_parallelism():
    ran, notes = nearest("torchtitan", LLAMA, TITAN, Strategy(dp=16, tp=8, mbs=1, mbn=8, zero=1, sp=True))
    assert ran.zero == 3 and "FSDP2" in notes[0]
    ddp = Strategy(dp=128, mbs=1, mbn=1, zero=0)
    assert nearest("torchtitan", LLAMA, TITAN, ddp) == (ddp, [])
    ran, _ = nearest("torchtitan", TINY_MOE, TITAN, Strategy(dp=4, tp=2, ep=4, etp=2, mbs=1, mbn=32, zero=3))
    assert ran.etp == 1


def test_megatron_fsdp_with_pipeline_stages_is_emitted_as_the_distributed_optimizer_and_says_so():
    # Megatron FSDP's device mesh has no pipeline dimension (rule trainer_zero_pipeline): the nearest plan Megatron
    # runs keeps the stages and shards less
    ran, notes = nearest("megatron", LLAMA, RUN, Strategy(dp=2, tp=8, pp=8, mbs=1, mbn=64, zero=3, sp=True))
    assert ran.zero == 1 and ran.pp == 8 and "without pipeline parallelism" in notes[0]
    single = Strategy(dp=16, tp=8, mbs=1, mbn=8, zero=3, sp=True)
    assert nearest("megatron", LLAMA, RUN, single) == (single, [])


def test_a_setting_megatron_keeps_off_its_command_line_is_a_note_not_a_flag():
    # activation_func_fp8_input_store is a TransformerConfig field Megatron-LM excludes from its argument parser
    run = replace(RUN, activation_func_fp8_input_store=True)
    emitted = emit("megatron", LLAMA, run, Strategy(dp=16, tp=8, mbs=1, mbn=8, zero=1, sp=True))
    assert not any("fp8-input-store" in line for line in emitted.text.splitlines() if not line.startswith("#"))
    assert any("TransformerConfig.activation_func_fp8_input_store" in n for n in emitted.notes)


def test_megatron_fsdp_and_the_cuda_queue_setting():
    fsdp = Strategy(dp=16, tp=8, mbs=1, mbn=8, zero=3, sp=True)
    text = emit("megatron", LLAMA, RUN, fsdp).text
    assert "--use-megatron-fsdp" in text and "--data-parallel-sharding-strategy optim_grads_params" in text
    assert "--ckpt-format fsdp_dtensor" in text and "--overlap-param-gather" in text
    # Megatron FSDP needs more than one hardware queue: the launch unsets a launcher's CUDA_DEVICE_MAX_CONNECTIONS=1
    assert environment(fsdp) == {"CUDA_DEVICE_MAX_CONNECTIONS": None}
    assert [line for line in text.splitlines() if not line.startswith("#")][0] == "unset CUDA_DEVICE_MAX_CONNECTIONS"
    assert environment(fsdp.with_zero(1)) == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert environment(Strategy(dp=128, mbs=1, mbn=1)) == {}


def test_under_torchtitan_the_rules_and_the_search_take_what_it_runs():
    cluster = ClusterSpec(device_preset("h100"), 8)
    run = RunSpec(global_batch=32, seq_len=2048, trainer="torchtitan")
    refusal = strategy_refusal(TINY_MOE, cluster, run, Strategy(dp=4, tp=2, mbs=1, mbn=8, zero=1, sp=True))
    assert refusal.rule == "trainer_zero"
    refusal = strategy_refusal(TINY_MOE, cluster, run, Strategy(dp=4, tp=2, ep=4, etp=2, mbs=1, mbn=8, zero=3))
    assert refusal.rule == "trainer_etp"
    assert strategy_refusal(TINY_MOE, cluster, run, Strategy(dp=8, mbs=1, mbn=4, zero=0)) is None
    space = SearchSpace(TINY_MOE, cluster, run, SpaceOptions())
    assert space.inner_choices(2)[0] == [3]
    assert all(layout.etp == 1 for layout, _, _ in space.walk().batches)
    assert trainer_named("megatron").zero_stages == (0, 1, 2, 3)


@pytest.mark.parametrize("kind", KINDS)
def test_hsdp_is_planned_only_under_a_trainer_that_runs_it_and_its_configuration_states_it(kind):
    """Trainer.hsdp: Megatron FSDP instances (--num-distributed-optimizer-instances, the outer group replicated) and
    torchtitan's 2-D FSDP2 mesh run HSDP; MindFormers' optimizer parallelism shards over all data-parallel ranks, so
    its rules refuse HSDP and a search under it offers none."""
    llama8 = load_model("llama3-8b")
    cluster, run = ClusterSpec(device_preset("h100"), 64), replace(RUN, trainer=kind)
    hsdp = Strategy(dp=64, dp_shard=8, mbs=1, mbn=2, zero=3, recompute=RecomputePlan.uniform("full"))
    refusal = strategy_refusal(llama8, cluster, run, hsdp)
    space = SearchSpace(llama8, cluster, run, SpaceOptions(hsdp=(False, True), recompute_modes=("full",)))
    searched = {layout.dp_shard for layout, _, _ in space.walk().batches}
    if not trainer_named(kind).hsdp:
        assert refusal.rule == "dp_shard" and "does not run it" in refusal.message and searched == {0}
        return
    assert refusal is None and {0, 8} <= searched  # 8 at tp 1: one node's data-parallel ranks
    text = emit(kind, llama8, run, hsdp).text
    words = {"megatron": ["--num-distributed-optimizer-instances 8", "--outer-dp-sharding-strategy no_shard"],
             "torchtitan": ["--parallelism.data-parallel-replicate-degree 8",
                            "--parallelism.data-parallel-shard-degree 8"]}[kind]
    assert all(word in text for word in words)


def test_each_trainer_names_the_recompute_options_it_runs():
    from ndcp.specs.recompute import OPTION_BY_NAME
    assert set(trainer_named("torchtitan").recompute_options) == {"none", "selective", "full"}
    assert trainer_named("mindformers").recompute_options == ("none", "mlp_act", "full")
    megatron = set(trainer_named("megatron").recompute_options)
    assert {"selective", "layernorm", "moe_act", "mlp", "offload", "full"} <= megatron and "mlp_act" not in megatron
    assert all(o in OPTION_BY_NAME for t in REGISTRY.values() for o in t.recompute_options)


def test_a_select_plan_runs_as_the_lightest_option_covering_it():
    """Megatron re-runs the SwiGLU activation only inside its mlp module (the whole dense MLP); torchtitan only in a
    fully recomputed block."""
    strategy = Strategy(dp=2, tp=8, pp=4, mbs=1, mbn=64, zero=3, sp=True, recompute=RecomputePlan.uniform("mlp_act"))
    assert nearest("mindformers", LLAMA, RUN, strategy) == (strategy, [])
    ran, notes = nearest("megatron", LLAMA, RUN, strategy)
    assert ran.recompute == RecomputePlan.uniform("mlp") and "mlp on every layer" in notes[-1]
    assert "--recompute-modules mlp" in emit("megatron", LLAMA, RUN, strategy).text
    ran, _ = nearest("torchtitan", LLAMA, TITAN, strategy)
    assert ran.recompute == RecomputePlan.uniform("full")


def test_the_search_offers_each_trainer_its_own_recompute_options():
    from ndcp.specs.recompute import RECOMPUTE_MODES
    cluster = ClusterSpec(device_preset("h100"), 64)
    offered = {t: SearchSpace(LLAMA, cluster, replace(RUN, trainer=t), SpaceOptions(recompute_modes=RECOMPUTE_MODES)
                              )._recompute_modes for t in KINDS}
    assert offered["mindformers"] == ["none", "mlp_act", "full"]
    assert offered["torchtitan"] == ["none", "selective", "full"]
    # Megatron on Llama: no layernorm option (its norms are fused into linear_qkv and fc1), no MoE or MLA module
    assert offered["megatron"] == ["none", "selective", "mlp", "offload", "full"]
