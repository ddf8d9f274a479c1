"""The rulebook: one set of named rules, so the space walk, a single strategy check and `ndcp estimate` agree."""
import dataclasses
import re

import pytest
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

from .cli_helpers import assert_one_line_error, run
from ndcp.rules import RULEBOOK, RULES, check_positions, check_strategy, strategy_refusal
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs.strategy import CP_COMM_TYPES, accounted_partition, default_partition
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, SpecError, StageRecompute, Strategy, device_preset
from ndcp.specs.library import load_model

LLAMA = load_model("llama3-8b")  # 32 heads, 8 KV heads, 32 layers
DENSE = {"llama3-8b": LLAMA, "llama3.1-405b": load_model("llama3.1-405b")}  # 126 + 2 = 128: the accounted split
TINY_MOE = load_model("tiny-moe")
H100 = device_preset("h100")


def test_check_names_the_field_and_valid_values():
    cluster, run_spec = ClusterSpec(H100, 8), RunSpec(global_batch=8, seq_len=2048)
    with pytest.raises(SpecError, match=r"tp=3 .*valid tp: 1, 2, 4, 8"):
        check_strategy(LLAMA, cluster, run_spec, Strategy(dp=1, tp=3, mbn=8))
    with pytest.raises(SpecError, match="must equal --gpus 8"):
        check_strategy(LLAMA, cluster, run_spec, Strategy(dp=2, tp=2, mbn=4))
    with pytest.raises(SpecError, match="global batch"):
        check_strategy(LLAMA, cluster, run_spec, Strategy(dp=8, mbn=2))
    with pytest.raises(SpecError, match="vpp=2 is not valid: interleaving .* needs pp > 1"):
        check_strategy(LLAMA, cluster, run_spec, Strategy(dp=8, mbn=1, vpp=2, schedule="interleaved"))
    with pytest.raises(SpecError, match="schedule=zb is not valid: valid: 1f1b, interleaved"):
        check_strategy(LLAMA, cluster, run_spec, Strategy(dp=8, mbn=1, schedule="zb"))
    with pytest.raises(SpecError, match="sp=on is not valid: sequence parallelism needs tp > 1"):
        check_strategy(LLAMA, cluster, run_spec, Strategy(dp=8, mbn=1, sp=True))


def test_a_per_stage_plan_must_cover_each_stage():
    cluster, run_spec = ClusterSpec(H100, 8), RunSpec(global_batch=8, seq_len=2048)
    plan = RecomputePlan(mode="per-stage", stages=(StageRecompute(none=16), StageRecompute(full=15)))
    with pytest.raises(SpecError, match=r"recompute.stages\[1\] covers 15 layers but virtual stage 1 holds 16"):
        check_strategy(LLAMA, cluster, run_spec, Strategy(dp=4, pp=2, mbn=2, recompute=plan))


@pytest.mark.parametrize("tp,cp,dp,ep,etp,ok", [
    (4, 1, 2, 8, 1, True),  # folded: ep = 8 > dp*cp = 2, over the stage's tp*cp*dp = 8 ranks
    (2, 2, 2, 8, 1, True),
    (4, 1, 2, 4, 2, True),  # etp*ep = 8 = tp*dp
    (4, 1, 2, 8, 2, False),  # etp*ep = 16 > 8 ranks
    (2, 1, 3, 4, 1, False),  # 4 does not divide 6
])
def test_moe_parallel_folding(tp, cp, dp, ep, etp, ok):
    """Megatron-Core's folding: etp*ep divides tp*cp*dp, whatever dp*cp alone is (the walk agrees)."""
    cluster, run_spec = ClusterSpec(H100, tp * cp * dp), RunSpec(global_batch=dp * 4, seq_len=2048)
    strategy = Strategy(dp=dp, tp=tp, cp=cp, ep=ep, etp=etp, mbn=4, sp=tp > 1)
    refusal = strategy_refusal(TINY_MOE, cluster, run_spec, strategy)
    assert (refusal is None) == ok and (ok or refusal.rule == "ep_ranks"), refusal
    walked = SearchSpace(TINY_MOE, cluster, run_spec, SpaceOptions(tp_cp_bound=tp * cp)).walk()
    assert any((l.tp, l.cp, l.ep, l.etp, l.vpp) == (tp, cp, ep, etp, 1) for l, _, _ in walked.batches) == ok


def test_every_rule_is_named_for_reports():
    assert all(rule.name in RULES for rule in RULEBOOK)
    assert {"vpp_layers", "vpp_mbn", "tp_cp_node", "fixed", "bounded"} <= set(RULES)  # schedules' rules, restrictions


DEGREES = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 1, 2, 2, 4, 4, 8, 3, 16]), "pp": st.sampled_from([1, 1, 2, 2, 4, 3, 8]), "cp": st.sampled_from([1, 2, 4]),
    "dp": st.sampled_from([1, 2, 3, 4, 8]), "ep": st.sampled_from([1, 2, 4, 8]), "etp": st.sampled_from([1, 2, 4]),
    "vpp": st.sampled_from([1, 1, 1, 2, 3, 4]), "mbs": st.sampled_from([1, 2, 4]), "mbn": st.sampled_from([1, 2, 3, 4, 8, 8, 16, 16]),
    "sp": st.booleans(), "cp_comm": st.sampled_from(["p2p", "p2p", "allgather", "a2a", "a2a+p2p"]),
})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(moe=st.booleans(), dense=st.sampled_from(["llama3-8b", "llama3-8b", "llama3.1-405b"]), d=DEGREES,
       dense_ep=st.sampled_from([False] * 4 + [True]),
       gpus_off=st.sampled_from([1] * 6 + [2]), batch_off=st.sampled_from([0] * 6 + [1]),
       seq=st.sampled_from([2048, 2048, 2048, 4098]))
@example(moe=False, dense="llama3.1-405b", dense_ep=False, gpus_off=1, batch_off=0, seq=2048,  # accounted split
         d={"tp": 8, "pp": 4, "cp": 1, "dp": 2, "ep": 1, "etp": 1, "vpp": 2, "mbs": 1, "mbn": 8, "sp": True,
            "cp_comm": "p2p"})
def test_walked_iff_checked_iff_estimate_accepts(capsys, moe, dense, d, dense_ep, gpus_off, batch_off, seq):
    """A random strategy is in the walked space (search restrictions lifted) exactly when the rulebook accepts it,
    and exactly when `ndcp estimate --strategy` accepts it."""
    model = TINY_MOE if moe else DENSE[dense]
    if not moe and not dense_ep:  # mostly valid expert degrees on the dense model, so most rules get exercised
        d = {**d, "ep": 1, "etp": 1}
    gpus = d["dp"] * d["tp"] * d["pp"] * d["cp"] * gpus_off
    gbs = d["dp"] * d["mbs"] * d["mbn"] + batch_off
    cluster, run_spec = ClusterSpec(H100, gpus), RunSpec(global_batch=gbs, seq_len=seq)
    strategy = Strategy(**d, schedule="interleaved" if d["vpp"] > 1 else "1f1b")

    space = SearchSpace(model, cluster, run_spec, SpaceOptions(tp_cp_bound=gpus, cp_comms=CP_COMM_TYPES))  # no node restriction
    walked = any(layout.tp == d["tp"] and layout.pp == d["pp"] and layout.cp == d["cp"] and layout.dp == d["dp"]
                 and layout.ep == d["ep"] and layout.etp == d["etp"] and layout.vpp == d["vpp"]
                 and layout.cp_comm == d["cp_comm"]
                 and mbs == d["mbs"] and mbn == d["mbn"] for layout, mbs, mbn in space.walk().batches)
    walked = walked and d["sp"] in space.inner_choices(d["tp"])[1]
    refusal = strategy_refusal(model, cluster, run_spec, strategy)
    accepted = refusal is None
    event("accepted" if accepted else f"refused: {refusal.rule}")
    if accepted and strategy.layout_note(model.layers):
        event("accepted: embedding+loss accounted split")
    assert walked == accepted, strategy_refusal(model, cluster, run_spec, strategy)

    text = ",".join(f"{k}={'on' if v is True else 'off' if v is False else v}" for k, v in d.items())
    code, _, err = run(capsys, "estimate", "tiny-moe" if moe else dense, "--device", "h100", "--gpus", gpus,
                       "--global-batch", gbs, "--seq-len", seq, "--strategy", text, "--json", "-")
    assert (code == 0) == accepted, err
    if not accepted:
        assert code == 2 and err.startswith("ndcp: error: ")


def test_interleaving_any_layer_count_with_a_layer_per_chunk():
    # Llama-3.1-405B's 126 layers on pp=8 x vpp=8: NVIDIA's recipe counts the embedding and the loss as layers
    # (126 + 2 = 128 = 64 chunks x 2), which is the default partition; pp=8 x vpp=3 (24 chunks) splits neither way:
    # the default uneven partition (Megatron runs it through --pipeline-model-parallel-layout), or an explicit one.
    model = load_model("llama3.1-405b")
    cluster, run_spec = ClusterSpec(H100, 512), RunSpec(global_batch=256, seq_len=8192)
    accounted = Strategy(tp=8, pp=8, cp=2, dp=4, vpp=8, mbn=64, schedule="interleaved")
    check_strategy(model, cluster, run_spec, accounted)
    assert default_partition(126, 64) == accounted_partition(126, 64) == (1,) + (2,) * 62 + (1,)
    assert accounted.layout_note(126) == "embedding+loss accounted"
    three = accounted.with_(vpp=3)
    check_strategy(model, cluster, run_spec, three)
    assert three.layout_note(126) is None and sorted(set(default_partition(126, 24))) == [5, 6]
    check_strategy(model, cluster, run_spec, three.with_(layers_per_stage=(5,) * 18 + (6,) * 6))
    # A chunk may be empty (only the embedding or the loss), a device stage may not: stage 0 runs chunks 0, 8, 16.
    check_strategy(model, cluster, run_spec, three.with_(layers_per_stage=(0,) + (6,) * 7 + (5,) * 12 + (6,) * 4))
    no_stage_zero = tuple(0 if v % 8 == 0 else 6 for v in range(24))
    with pytest.raises(SpecError, match="leaves device stage 0 without a layer"):
        check_strategy(model, cluster, run_spec, three.with_(layers_per_stage=no_stage_zero))


def test_learned_positions_bound_the_sequence_rope_does_not(capsys):
    args = ["estimate", "gpt3-175b", "--device", "h100", "--gpus", "8", "--global-batch", "8", "--strategy", "tp=8"]
    assert_one_line_error(*run(capsys, *args, "--seq-len", "4096"), "2,048 learned positions", "--seq-len 2048")
    check_positions(load_model("gpt3-175b"), RunSpec(global_batch=8, seq_len=2048))  # at the bound: fine
    llama = load_model("llama3-8b")  # RoPE: training past max_positions is context extension
    check_positions(llama, RunSpec(global_batch=8, seq_len=4 * llama.max_positions))


@pytest.mark.parametrize("trainer,mode,refused", [
    ("mindformers", "mlp_act", False), ("megatron", "mlp_act", True), ("torchtitan", "mlp_act", True),
    ("mindformers", "selective", True), ("mindformers", "mlp", True), ("megatron", "mlp", False)])
def test_a_strategy_runs_only_its_trainers_recompute_options(trainer, mode, refused):
    """The trainer profiles name the recompute options each trainer runs (ndcp/trainers); the rule names the field,
    the value and the trainer's options."""
    cluster, run_spec = ClusterSpec(H100, 8), RunSpec(global_batch=8, seq_len=2048, trainer=trainer)
    strategy = Strategy(dp=1, tp=8, mbn=8, zero=3, sp=True, recompute=RecomputePlan.uniform(mode))
    if not refused:
        check_strategy(LLAMA, cluster, run_spec, strategy)
        return
    valid = r".*runs (none, selective, full|none, mlp_act, full|none, selective, layernorm)"
    with pytest.raises(SpecError, match=rf"recompute={mode} is not valid: {trainer} does not run recompute={mode}"
                                        + valid):
        check_strategy(LLAMA, cluster, run_spec, strategy)


def test_hybrid_layers_tp_cp_trainer_and_recompute_rules():
    """Megatron-Core's hybrid layers (docs/models.md §6): TP splits the Gated DeltaNet key/value heads and Mamba-2's
    heads and groups; no context parallelism with Gated DeltaNet, Mamba-2's within its head and group split; only
    Megatron runs them; Gated DeltaNet layers recompute whole or not at all."""
    qwen, nemotron = load_model("qwen3-next-80b-a3b"), load_model("nemotron-h-8b")
    cluster, run_spec = ClusterSpec(H100, 16), RunSpec(global_batch=16, seq_len=4096)
    check_strategy(qwen, cluster, run_spec, Strategy(dp=8, tp=2, mbn=2, ep=8, recompute=RecomputePlan("full")))
    narrow = dataclasses.replace(qwen, kv_heads=16, linear_attention=dataclasses.replace(
        qwen.linear_attention, key_heads=4, value_heads=8))
    with pytest.raises(SpecError, match=r"tp=8 .*4 Gated DeltaNet key heads, 8 Gated DeltaNet value heads; valid tp: "
                                        r"1, 2, 4$"):
        check_strategy(narrow, cluster, run_spec, Strategy(dp=2, tp=8, mbn=8))
    with pytest.raises(SpecError, match=r"tp=16 .*128 Mamba-2 heads, 8 Mamba-2 groups; valid tp: 1, 2, 4, 8$"):
        check_strategy(dataclasses.replace(nemotron, kv_heads=32), cluster, run_spec, Strategy(dp=1, tp=16, mbn=16))
    with pytest.raises(SpecError, match=r"cp=2 .*Gated DeltaNet has no context parallelism"):
        check_strategy(qwen, cluster, run_spec, Strategy(dp=8, cp=2, mbn=2))
    check_strategy(nemotron, cluster, run_spec, Strategy(dp=8, cp=2, mbn=2))  # Mamba-2: all-to-all CP
    odd = dataclasses.replace(nemotron, mamba=dataclasses.replace(nemotron.mamba, heads=24, groups=3))
    with pytest.raises(SpecError, match=r"cp=2 .*24 heads divisible by tp x cp and its 3 groups.*valid cp at tp=1: "
                                        r"1, 3, 6, 12, 24$"):
        check_strategy(odd, cluster, run_spec, Strategy(dp=8, cp=2, mbn=2))
    with pytest.raises(SpecError, match="recompute.*Gated DeltaNet layers recompute whole \\(full\\) or not at all"):
        check_strategy(qwen, cluster, run_spec, Strategy(dp=8, tp=2, mbn=2, ep=8,
                                                         recompute=RecomputePlan("selective")))
    titan = RunSpec(global_batch=16, seq_len=4096, trainer="torchtitan")
    with pytest.raises(SpecError, match="torchtitan does not run Mamba-2, hybrid block layers"):
        check_strategy(nemotron, cluster, titan, Strategy(dp=16, mbn=1))


@pytest.mark.parametrize("name,mode,refusal", [
    # Nemotron-3 Nano: 23 Mamba-2, 6 attention and 23 MoE blocks
    ("nemotron-3-nano", "core_attn+layernorm+moe", None),  # Megatron-Bridge's H100 FP8 recipe
    ("nemotron-3-nano", "selective", None), ("nemotron-3-nano", "layernorm+moe_act", None),
    ("nemotron-3-nano", "mlp", "mlp acts on dense MLP blocks"),  # every MLP block is a MoE block
    ("nemotron-3-nano", "offload", "Mamba-2 layers recompute whole"),
    # full: the pinned Megatron-LM d98e8a6's HybridStack checkpoints whole blocks, Mamba-2 ones too
    # (models/hybrid/hybrid_block.py l. 360-372 -> core/recompute.py checkpointed_forward l. 112)
    ("nemotron-3-nano", "full", None), ("nemotron-h-8b", "full", None),
    # Nemotron-H 8B: 24 Mamba-2, 4 attention and 24 dense MLP blocks; every norm is fused into a linear
    ("nemotron-h-8b", "selective", None), ("nemotron-h-8b", "mlp", None),
    ("nemotron-h-8b", "layernorm", "layernorm acts on MoE blocks \\(its blocks: attention blocks, dense MLP blocks and "
                                   "Mamba-2 blocks"),
    ("nemotron-h-8b", "layernorm+mlp", "layernorm acts on MoE blocks"),
])
def test_a_hybrid_model_runs_the_module_options_whose_modules_act_on_its_blocks(name, mode, refusal):
    """Megatron-Core's hybrid stack (mamba_layer_specs.py, core_v0.17.0): core_attn acts on the attention blocks,
    layernorm on the MoE blocks' pre-MLP norm (the only norm not fused into a linear), moe and moe_act on the MoE
    blocks, mlp on the dense MLP blocks; the Mamba-2 blocks honour no module, and recompute whole under full."""
    cluster, run_spec = ClusterSpec(H100, 16), RunSpec(global_batch=16, seq_len=4096)
    strategy = Strategy(dp=16, mbn=1, ep=8 if name == "nemotron-3-nano" else 1, recompute=RecomputePlan(mode))
    if refusal is None:
        check_strategy(load_model(name), cluster, run_spec, strategy)
        return
    with pytest.raises(SpecError, match=rf"recompute={re.escape(mode)} is not valid: .*{refusal}"):
        check_strategy(load_model(name), cluster, run_spec, strategy)


@pytest.mark.parametrize("trainer,zero,pp,ok", [
    ("megatron", 3, 2, False), ("megatron", 2, 2, False),  # Megatron FSDP's mesh has no pipeline dimension
    ("megatron", 3, 1, True), ("megatron", 1, 2, True), ("megatron", 0, 2, True),  # no stages; dist. optimizer; DDP
    ("torchtitan", 3, 2, True),  # FSDP2 beside torch.distributed.pipelining
])
def test_megatron_fsdp_runs_without_pipeline_stages(trainer, zero, pp, ok):
    cluster, run_spec = ClusterSpec(H100, 8), RunSpec(global_batch=16, seq_len=2048, trainer=trainer)
    strategy = Strategy(dp=8 // pp, pp=pp, mbn=16 * pp // 8, zero=zero)
    refusal = strategy_refusal(LLAMA, cluster, run_spec, strategy)
    assert (refusal is None) == ok, refusal
    if not ok:
        assert refusal.rule == "trainer_zero_pipeline"
        with pytest.raises(SpecError, match=rf"zero={zero} is not valid: megatron runs ZeRO 2, 3 only without "
                                            rf"pipeline parallelism \(pp=1, not 2\); with pp > 1 it runs ZeRO 0, 1"):
            check_strategy(LLAMA, cluster, run_spec, strategy)


@pytest.mark.parametrize("trainer", ["megatron", "torchtitan"])
def test_a_search_offers_megatron_fsdp_to_single_stage_layouts_only(trainer):
    cluster, run_spec = ClusterSpec(H100, 16), RunSpec(global_batch=32, seq_len=2048, trainer=trainer)
    space = SearchSpace(LLAMA, cluster, run_spec, SpaceOptions(recompute_modes=("none",), sp_choices=(False,)))
    offered = {(s.pp > 1, s.zero) for s in space.candidates()}  # (with stages, ZeRO stage)
    if trainer == "torchtitan":
        assert {(True, 3), (False, 3)} <= offered
    else:
        assert not offered & {(True, 2), (True, 3)} and {(False, 2), (False, 3), (True, 1)} <= offered


@pytest.mark.parametrize("first, last, pp, ok", [(8, 1, 4, True), (9, 1, 4, False), (1, 9, 4, False),
                                                 (16, 0, 2, True), (2, 2, 32, False), (1, 1, 32, True)])
def test_bf16_first_and_last_layers_fit_in_layers_over_pp(first, last, pp, ok):
    """Megatron-Core keeps at most layers // pp layers at each end in BF16 (TransformerConfig.__post_init__ @d98e8a6,
    max_bf16_layers_per_pipeline_stage); the search walks no pp beyond it."""
    cluster = ClusterSpec(H100, 64)
    run_spec = RunSpec(global_batch=64, seq_len=2048, precision="fp8", fp8_recipe="tensorwise",
                       first_layers_bf16=first, last_layers_bf16=last)
    strategy = Strategy(dp=64 // pp, pp=pp, mbn=pp)
    refusal = strategy_refusal(LLAMA, cluster, run_spec, strategy)
    assert (refusal is None) == ok, refusal
    if not ok:
        assert refusal.rule == "bf16_layers_pp" and f"valid pp: at most {32 // max(first, last)}" in refusal.message
