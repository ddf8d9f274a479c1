"""Recompute options are data: each row says what it keeps and re-runs, and the estimators honour its weight."""
import pytest
from hypothesis import given, settings, strategies as st

from ndcp.estimate.activations import layer_activation_bytes
from ndcp.estimate.keys import Degrees, LayerKey
from ndcp.estimate.layer_time import layer_time
from ndcp.specs import ClusterSpec, RecomputePlan, RunSpec, SpecError, StageRecompute, device_preset
from ndcp.specs.library import load_model
from ndcp.estimate.activations import layer_inventory
from ndcp.specs.recompute import (CLASSIC_MODES, HEAVIEST, HEAVIEST_FIRST, MLP_ACTIVATION, MODULES, NO_RECOMPUTE,
                                  OPTION_BY_NAME, OPTIONS, RECOMPUTE_MODES, modules_cover, option_for_modules)
from ndcp.specs.run import TRAINERS

CLUSTER = ClusterSpec(device_preset("h100"), 64)


def test_options_are_rows_with_distinct_names_and_weights():
    assert RECOMPUTE_MODES[:2] == ("none", "selective") and RECOMPUTE_MODES[-1] == "full"
    assert CLASSIC_MODES == ("none", "selective", "full")
    assert len({o.weight for o in OPTIONS}) == len({o.label for o in OPTIONS}) == len(OPTIONS)
    assert (NO_RECOMPUTE, HEAVIEST) == ("none", "full")
    assert HEAVIEST_FIRST[0] == "full" and HEAVIEST_FIRST[-1] == "none"


def test_module_options_are_megatron_module_combinations():
    # DeepSeek-V3 technical report §3.3: RMSNorm, MLA up-projection and the SwiGLU output recomputed in backward.
    assert option_for_modules("moe_act+layernorm+mla_up_proj") == "layernorm+mla_up_proj+moe_act"
    assert OPTION_BY_NAME["layernorm+mla_up_proj+moe_act"].label == "ln+mla+act"
    assert OPTION_BY_NAME["selective"].modules == ("core_attn",)
    with pytest.raises(SpecError, match="unknown module 'attention'"):
        option_for_modules("attention")
    with pytest.raises(SpecError, match="not an offered combination"):
        option_for_modules("mlp+moe")


def test_stage_counts_by_option_name():
    stage = StageRecompute(selective=7, full=1, **{"layernorm+mlp": 2})
    assert stage.layers == 10 and stage.count("full") == 1 and stage.count("layernorm+mlp") == 2
    assert stage.as_dict() == {"none": 0, "selective": 7, "layernorm+mlp": 2, "full": 1}
    with pytest.raises(SpecError, match="recompute option"):
        StageRecompute(swap=3)
    with pytest.raises(SpecError, match="recompute.full"):
        StageRecompute(full=-1)
    # the solver's own counts, already in option order, build the same (equal, hashing alike) stage unchecked
    same = StageRecompute.from_counts(stage.counts)
    assert same == stage and hash(same) == hash(stage) and same.count("selective") == 7


def test_per_stage_plan_json_and_summary():
    plan = RecomputePlan(mode="per-stage", stages=(StageRecompute(none=3), StageRecompute(selective=2, full=1)))
    assert plan.summary() == "per-stage 3n/2s/1f"
    assert plan.as_json() == {"stages": [{"stage": 0, "layers": 3, "none": 3, "selective": 0, "full": 0},
                                         {"stage": 1, "layers": 3, "none": 0, "selective": 2, "full": 1}]}


def _comparable_pairs():
    """(lighter, heavier): the heavier recomputes a superset of the lighter's modules, a module counting as the one
    it is part of (mlp_act: mlp; full: every module)."""
    recomputing = [o for o in OPTIONS if o.name != "offload"]  # offload re-runs nothing: it copies (test_rerun.py)
    return [(a.name, b.name) for a in recomputing for b in recomputing
            if a.name != b.name and modules_cover(b.modules, a.modules)]


def test_mlp_act_is_covered_by_the_dense_mlp_module_and_full():
    pairs = _comparable_pairs()
    assert {("mlp_act", "mlp"), ("mlp_act", "layernorm+mlp"), ("mlp_act", "full")} <= set(pairs)
    assert ("mlp", "mlp_act") not in pairs and ("moe_act", "mlp_act") not in pairs


def test_moe_act_is_covered_by_the_moe_module():
    """Megatron-Core's moe module checkpoints the whole MoE layer (moe/moe_layer.py), so it re-runs the experts'
    activation too: Megatron-Bridge's Nemotron-3 Nano H100 FP8 recipe (moe, layernorm, core_attn, moe_act) is the
    option core_attn+layernorm+moe."""
    pairs = set(_comparable_pairs())
    assert {("moe_act", "moe"), ("layernorm+moe_act", "layernorm+moe"), ("selective", "core_attn+layernorm+moe"),
            ("layernorm+moe", "core_attn+layernorm+moe")} <= pairs
    assert option_for_modules("moe+layernorm+core_attn+moe_act") == "core_attn+layernorm+moe"
    assert OPTION_BY_NAME["core_attn+layernorm+moe"].label == "s+ln+moe"


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-175b", "nemotron-3-nano"]),
       kind=st.sampled_from(["dense", "moe"]), tp=st.sampled_from([1, 2, 8]), cp=st.sampled_from([1, 2]),
       mbs=st.sampled_from([1, 2]), sp=st.booleans(), flash=st.booleans(), fp8=st.booleans(),
       trainer=st.sampled_from(TRAINERS), seq=st.sampled_from([2048, 8192]))
def test_heavier_options_keep_no_more_and_rerun_no_less(name, kind, tp, cp, mbs, sp, flash, fp8, trainer, seq):
    """The order the solver's bounds rely on: an option recomputing more modules keeps no more bytes and re-runs no
    less work; none keeps the most and re-runs nothing, full keeps the least (specs/recompute.py)."""
    model = load_model(name)
    if kind == "moe" and model.moe is None:
        kind = "dense"
    run = RunSpec(global_batch=64, seq_len=seq, flash_attention=flash, trainer=trainer,
                  precision="fp8" if fp8 else "bf16")
    sp = sp and tp > 1
    degrees = Degrees(tp, cp, 1, 1, mbs, sp)
    kept = {o.name: layer_activation_bytes(model, run, kind, o.name, degrees) for o in OPTIONS}
    rerun = {o.name: layer_time(model, CLUSTER, run, LayerKey(kind, o.name, degrees)).recompute for o in OPTIONS}
    for lighter, heavier in _comparable_pairs():
        assert kept[lighter] >= kept[heavier] * (1 - 1e-12), (lighter, heavier)
        assert rerun[lighter] <= rerun[heavier] * (1 + 1e-12), (lighter, heavier)
    assert rerun[NO_RECOMPUTE] == 0.0 and max(kept.values()) == kept[NO_RECOMPUTE]
    assert min(kept.values()) == kept[HEAVIEST] == kept["offload"]
    assert max(v for k, v in rerun.items() if k != "offload") == rerun[HEAVIEST]


@pytest.mark.parametrize("name,kind,option,saved", [
    # per layer, tp=8 with SP, mbs 1, seq 8192 on H100, BF16; the MiB each option saves against none
    ("llama3-70b", "dense", "mlp", 184.0),
    # layernorm: the norm outputs of the separate norms, 2sbh/t each: Mixtral's MoE pre-MLP norm (8192 x 4096 / 8 x 2
    # bytes = 8 MiB; its attention norm is fused into linear_qkv), DeepSeek-V3's MLA input norm (8192 x 7168 / 8 x 2
    # = 14 MiB) on a dense layer (its MLP norm fused into fc1) and both norms on a MoE layer
    ("mixtral-8x7b", "moe", "layernorm", 8.0), ("deepseek-v3", "dense", "layernorm", 14.0),
    ("deepseek-v3", "moe", "layernorm", 28.0),
    # with mlp: the dense MLP's input (14 MiB), fc1 output (2 x 18432 x 8192 / 8 x 2 = 72) and activation output (36)
    ("deepseek-v3", "dense", "layernorm+mlp", 14.0 + 14.0 + 72.0 + 36.0),
    ("deepseek-v3", "moe", "layernorm+mla_up_proj+moe_act", 188.0), ("deepseek-v3", "moe", "mla_up_proj", 128.0),
    # MindFormers' select set: the SwiGLU product, ffn x s x b / t x 2 bytes = 28672 x 8192 / 8 x 2 = 56 MiB
    ("llama3-70b", "dense", "mlp_act", 56.0), ("deepseek-v3", "dense", "mlp_act", 18432 * 8192 / 8 * 2 / 2**20),
    ("deepseek-v3", "moe", "mlp_act", 0.0)])
def test_module_options_drop_the_tensors_of_their_modules(name, kind, option, saved):
    """layernorm drops the outputs of the norms that are separate modules (2sbh/t each under SP: MLA's input norm, a
    MoE layer's pre-MLP norm), mlp the dense MLP's input, fc1 output and
    activation output, mlp_act only the activation output (nothing on a MoE layer), mla_up_proj MLA's up-projected
    queries, keys and values (DeepSeek-V3: 128 heads x (192 + 192 + 128) / tp), moe_act the experts' activation
    output."""
    model = load_model(name)
    run = RunSpec(global_batch=64, seq_len=8192)
    ep = 8 if kind == "moe" else 1
    none = layer_activation_bytes(model, run, kind, "none", Degrees(8, 1, ep, 1, 1, True))
    kept = layer_activation_bytes(model, run, kind, option, Degrees(8, 1, ep, 1, 1, True))
    assert (none - kept) / 2**20 == pytest.approx(saved, rel=1e-3)


def test_module_options_the_model_cannot_run_are_refused():
    from ndcp.rules import recompute_option_refusal
    dense, moe = load_model("llama3-70b"), load_model("deepseek-v3")
    run = RunSpec(global_batch=64, seq_len=8192)
    assert recompute_option_refusal(dense, run, "moe_act").message.endswith("moe_act needs moe layers")
    assert recompute_option_refusal(dense, run, "mla_up_proj") is not None
    # Megatron-Core fuses a dense non-MLA layer's norms into linear_qkv and fc1 (gpt_layer_specs.py): layernorm
    # would save nothing there, so neither it nor an option holding it runs on Llama; mlp alone does
    for mode in ("layernorm", "layernorm+mlp"):
        assert recompute_option_refusal(dense, run, mode).message.endswith(
            "layernorm needs moe or mla layers: Megatron fuses a dense layer's norms into its linears "
            "(TELayerNormColumnParallelLinear)")
    assert recompute_option_refusal(dense, run, "mlp") is None
    assert recompute_option_refusal(load_model("mixtral-8x7b"), run, "layernorm") is None
    assert recompute_option_refusal(moe, run, "layernorm+mla_up_proj+moe_act") is None
    assert recompute_option_refusal(moe, RunSpec(global_batch=64, seq_len=8192, trainer="torchtitan"),
                                    "layernorm") is not None
    assert recompute_option_refusal(dense, RunSpec(global_batch=64, seq_len=8192, trainer="torchtitan"),
                                    "selective") is None


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_the_mindformers_select_row_drops_inventory_tensors_and_reruns_the_activation(kind):
    """mlp_act (MindFormers' select_recompute default patterns: feed_forward.mul and the SiLU) drops tensors of the
    activation inventory, all of them the dense MLP's activation output, and re-runs only the activation."""
    option, module = OPTION_BY_NAME["mlp_act"], MODULES["mlp_act"]
    assert option.modules == ("mlp_act",) and option.reruns == (MLP_ACTIVATION,) and option.label == "mact"
    assert "mindformers/models/utils.py" in option.source and module.needs == ("dense",) and module.part_of == "mlp"
    model = load_model("deepseek-v3")
    names = {t.name for t in layer_inventory(model, RunSpec(global_batch=8, seq_len=4096), kind == "moe", 8, 1, 1, 1,
                                             True)}
    assert (set(option.drops) <= names) == (kind == "dense")  # a MoE layer has no dense MLP: nothing to drop
    assert set(option.drops) < set(OPTION_BY_NAME["mlp"].drops)
    assert option_for_modules("mlp_act") == "mlp_act"


def test_the_select_option_is_offered_to_mindformers_only():
    from ndcp.rules import recompute_option_refusal
    dense, moe_only, deepseek = load_model("llama3-70b"), load_model("mixtral-8x7b"), load_model("deepseek-v3")
    runs = {t: RunSpec(global_batch=64, seq_len=8192, trainer=t) for t in TRAINERS}
    assert recompute_option_refusal(dense, runs["mindformers"], "mlp_act") is None
    assert recompute_option_refusal(deepseek, runs["mindformers"], "mlp_act") is None  # its first 3 layers are dense
    assert "mlp_act needs dense layers" in recompute_option_refusal(moe_only, runs["mindformers"], "mlp_act").message
    for trainer in ("megatron", "torchtitan"):
        refusal = recompute_option_refusal(dense, runs[trainer], "mlp_act")
        assert f"{trainer} does not run recompute=mlp_act (MindFormers" in refusal.message
    for mode in ("selective", "mlp", "offload"):  # MindFormers runs none, its select set, full
        assert "runs none, mlp_act, full" in recompute_option_refusal(dense, runs["mindformers"], mode).message
