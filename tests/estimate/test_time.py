"""Step-time composition: pipeline bubble, parts that add up, monotonicity, per-layer physics and speed."""
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndcp.estimate.compute import attention_core_flops
from ndcp.estimate.gemm import attention_core_seconds
from ndcp.estimate.keys import Degrees, LayerKey, StageKey
from ndcp.estimate.layer_time import LayerTime, layer_time
from ndcp.estimate.time import PART_KEYS, estimate_time, loss_bytes_per_logit, stage_extra_time, stage_times
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs.library import load_model
from ndcp.specs import (ClusterSpec, ModelSpec, MoESpec, RecomputePlan, RunSpec, StageRecompute, Strategy,
                        device_preset)

GPT_22B = ModelSpec("gpt-22b", 48, 6144, 64, 24576, 51200, activation="gelu", position_embedding="learned",
                    norm="layernorm", linear_bias=True, tied_embeddings=True, max_positions=2048)
LLAMA_8B = ModelSpec("llama-8b", 32, 4096, 32, 14336, 128256, kv_heads=8, max_positions=8192)
SMALL_MOE = ModelSpec("moe", 8, 1024, 16, 4096, 32000, kv_heads=4,
                      moe=MoESpec(experts=16, top_k=2, expert_ffn_hidden=1024, shared_experts=1, first_dense_layers=1))


def cluster(device="h100", gpus=64, scale=1.0):
    base = ClusterSpec(device_preset(device), gpus)
    d = base.device
    return base.with_overrides(intra_node_bandwidth=d.intra_node_bandwidth * scale,
                               inter_node_bandwidth=d.inter_node_bandwidth * scale)


def llama_strategy(**changes):
    base = dict(dp=4, tp=4, pp=4, mbs=1, mbn=16, sp=True, zero=1, recompute=RecomputePlan.uniform("selective"))
    base.update(changes)
    return Strategy(**base)


@pytest.mark.parametrize("strategy", [
    llama_strategy(),
    llama_strategy(pp=4, vpp=2, schedule="interleaved", dp=2, cp=2),
    llama_strategy(pp=1, tp=8, dp=8, zero=3, recompute=RecomputePlan.uniform("full")),
    llama_strategy(recompute=RecomputePlan("per-stage", tuple(StageRecompute(none=4, selective=2, full=2)
                                                              for _ in range(4)))),
])
def test_parts_add_up_to_the_step(strategy):
    run = RunSpec(global_batch=strategy.global_batch, seq_len=8192)
    est = estimate_time(LLAMA_8B, cluster(gpus=strategy.devices), run, strategy)
    assert tuple(est.parts) == PART_KEYS
    assert sum(est.parts.values()) == pytest.approx(est.step_seconds, rel=1e-12)
    assert all(v >= 0 for v in est.parts.values())
    assert 0 < est.mfu <= est.hfu < 1
    assert est.as_dict()["parts"] == est.parts


def test_stages_with_the_same_layers_and_extra_work_are_timed_once_and_alike():
    from ndcp.estimate.layout import stage_mode_counts
    from ndcp.estimate.time import _stage_time, stage_times
    strategy = llama_strategy(pp=8, dp=2)  # 4 layers per stage; the six middle stages alike
    run = RunSpec(global_batch=256, seq_len=4096)
    times = stage_times(LLAMA_8B, cluster(), run, strategy)
    assert times == [_stage_time(LLAMA_8B, cluster(), run, strategy, i, counts)
                     for i, counts in enumerate(stage_mode_counts(LLAMA_8B, strategy))]
    assert all(t is times[1] for t in times[1:-1]) and times[0] != times[1] != times[-1]


def test_moe_model_has_expert_communication():
    strategy = Strategy(dp=8, tp=1, pp=2, ep=8, mbs=1, mbn=4)
    est = estimate_time(SMALL_MOE, cluster(gpus=16), RunSpec(global_batch=32, seq_len=4096), strategy)
    assert est.parts["ep_comm"] > 0
    assert sum(est.parts.values()) == pytest.approx(est.step_seconds, rel=1e-12)


def test_layer_time_fields_and_cache():
    run = RunSpec(global_batch=8, seq_len=8192)
    c = cluster()
    t = layer_time(LLAMA_8B, c, run, LayerKey("dense", "none", Degrees(2, 1, 1, 1, 1, True)))
    assert t.total == pytest.approx(t.forward + t.backward + t.recompute + t.tp_comm + t.cp_comm + t.ep_comm)
    assert layer_time(LLAMA_8B, c, run, LayerKey("dense", "none", Degrees(2, 1, 1, 1, 1, True))) is t  # lru_cache
    assert isinstance(stage_extra_time(LLAMA_8B, c, run, "only", StageKey(Degrees(2, 1, 1, 1, 1, True))), LayerTime)


def test_recompute_modes_rerun_what_they_drop():
    run, c = RunSpec(global_batch=8, seq_len=8192), cluster()
    none = layer_time(LLAMA_8B, c, run, LayerKey("dense", "none", Degrees(4, 1, 1, 1, 1, True)))
    full = layer_time(LLAMA_8B, c, run, LayerKey("dense", "full", Degrees(4, 1, 1, 1, 1, True)))
    selective = layer_time(LLAMA_8B, c, run, LayerKey("dense", "selective", Degrees(4, 1, 1, 1, 1, True)))
    assert none.recompute == 0
    tp_forward = full.recompute - full.forward  # full = the layer forward plus its forward TP all-reduces
    assert 0 < tp_forward <= full.tp_comm * (1 + 1e-12)  # tp_forward is a difference: allow its rounding
    core, _ = attention_core_seconds(attention_core_flops(LLAMA_8B, 8192, 8192, 4, causal=True), c.device, True)
    assert selective.recompute == pytest.approx(core)


def test_context_parallel_ring_hides_behind_attention_when_it_can():
    run = RunSpec(global_batch=8, seq_len=32768)
    t = layer_time(LLAMA_8B, cluster(), run, LayerKey("dense", "none", Degrees(1, 2, 1, 1, 1, False)))
    assert t.cp_comm == 0  # 2 ranks in a node, 32k tokens: the K/V exchange is shorter than the attention it feeds
    slow = layer_time(LLAMA_8B, cluster("a100-80g"), RunSpec(global_batch=8, seq_len=4096),
                      LayerKey("dense", "none", Degrees(8, 4, 1, 1, 1, True)))
    assert slow.cp_comm > 0  # across nodes on HDR with short chunks


def test_korthikanti_table4_layer_time_within_10_percent():
    # Korthikanti 2022 Table 4 (22B, A100, TP 8, s 2048, b 4; pre-flash-attention Megatron): forward + backward of
    # one layer 19.6 ms without recompute, 27.2 ms with full, 20.9 ms selective, 20.3 ms selective + SP
    c, run = cluster("a100-80g", 8), RunSpec(global_batch=4, seq_len=2048, flash_attention=False)
    for mode, sp, published in (("none", False, 19.6e-3), ("full", False, 27.2e-3), ("selective", False, 20.9e-3),
                                ("selective", True, 20.3e-3)):
        layer = LayerKey("dense", mode, Degrees(8, 1, 1, 1, 4, sp))
        assert layer_time(GPT_22B, c, run, layer).total == pytest.approx(published, rel=0.1)


STRATEGIES = st.builds(
    lambda tp, pp, cp, vpp, mbs, mbn, zero, mode: Strategy(
        dp=2, tp=tp, pp=pp, cp=cp, vpp=vpp if pp > 1 else 1, mbs=mbs, mbn=mbn, zero=zero, sp=tp > 1,
        schedule="interleaved" if vpp > 1 and pp > 1 else "1f1b", recompute=RecomputePlan.uniform(mode)),
    st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2]),
    st.sampled_from([1, 2]), st.integers(1, 16), st.sampled_from([0, 1, 3]),
    st.sampled_from(["none", "selective", "full"]))


@settings(max_examples=60, deadline=None)
@given(STRATEGIES, st.floats(1.0, 8.0))
def test_more_bandwidth_never_slows_a_step(strategy, scale):
    run = RunSpec(global_batch=strategy.global_batch, seq_len=4096)
    slow = estimate_time(LLAMA_8B, cluster(gpus=strategy.devices), run, strategy)
    fast = estimate_time(LLAMA_8B, cluster(gpus=strategy.devices, scale=scale), run, strategy)
    assert fast.step_seconds <= slow.step_seconds * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(STRATEGIES, st.integers(1, 64))
def test_more_microbatches_never_raise_the_bubble_fraction(strategy, extra):
    if strategy.pp == 1:
        strategy = strategy.with_(pp=2)
    bigger = strategy.with_(mbn=strategy.mbn + extra)
    fractions = []
    for s in (strategy, bigger):
        est = estimate_time(LLAMA_8B, cluster(gpus=s.devices), RunSpec(global_batch=s.global_batch, seq_len=4096), s)
        fractions.append(est.parts["bubble"] / est.step_seconds)
    assert fractions[1] <= fractions[0] * (1 + 1e-12)


def test_layer_times_add_and_scale_part_by_part():
    # a named tuple for speed: `+` must add the parts, never concatenate the tuples
    a = LayerTime(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, flops=7.0, backward_comm=0.5, wgrad=0.25, tp_hidden=8.0, ep_hidden=9.0)
    b = LayerTime(10.0, 20.0, 30.0, 40.0, 50.0, 60.0, flops=70.0)
    total = a + b
    assert len(total) == len(a) and total == LayerTime(11.0, 22.0, 33.0, 44.0, 55.0, 66.0, 77.0, 0.5, 0.25, 8.0, 9.0)
    assert total.total == a.total + b.total == 21.0 + 210.0
    assert a.scaled(2.0) == LayerTime(2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 1.0, 0.5, 16.0, 18.0)
    assert a.forward_window + a.backward_window == a.total


def _topology_problem(model_name: str, gpus: int):
    """Clusters of GB200 trays (4 devices, one NIC each): the trays as the scale-up domains, and a space of valid
    strategies on them (one recompute option and ZeRO stage, to keep it small)."""
    trays = replace(device_preset("gb200-nvl72"), devices_per_domain=0)
    space = SearchSpace(load_model(model_name), ClusterSpec(trays, gpus), RunSpec(global_batch=32, seq_len=1024),
                        SpaceOptions(recompute_modes=("none",), zero_stages=(1,)))
    return space, trays


@settings(max_examples=60, deadline=None)
@given(data=st.data(), model_name=st.sampled_from(["tiny", "tiny-moe"]), gpus=st.sampled_from([8, 16, 32]),
       domain=st.sampled_from([8, 16, 72]), taper=st.floats(1.0, 8.0))
def test_a_group_kept_in_its_domain_never_slows_a_step_and_oversubscription_never_speeds_one(data, model_name, gpus,
                                                                                            domain, taper):
    """The same strategy on trays joined into NVLink domains of `domain` devices is never slower than on trays that
    are their own domains (every group that stays in a domain leaves the NIC for NVLink); on a network tapered
    between pods of one tray, never faster."""
    space, trays = _topology_problem(model_name, gpus)
    candidates = list(space.candidates())
    strategy = candidates[data.draw(st.integers(0, len(candidates) - 1))]
    model, run = space.model, space.run
    step = estimate_time(model, space.cluster, run, strategy).step_seconds
    wide = ClusterSpec(replace(trays, devices_per_domain=domain), gpus)
    tapered = ClusterSpec(replace(trays, pod_size=trays.devices_per_node, oversubscription=taper), gpus)
    assert estimate_time(model, wide, run, strategy).step_seconds <= step * (1 + 1e-12)
    assert estimate_time(model, tapered, run, strategy).step_seconds >= step * (1 - 1e-12)


def test_a_compiled_loss_reads_the_bf16_logits_in_fewer_passes():
    """The output head's loss at HBM speed: eager, 3 forward and 2 backward passes over fp32 logits (4 bytes);
    compiled (RunSpec.compile_loss, Inductor's kernels: docs/formulas.md §5.6), 2 forward reads and a backward read
    and write of the bf16 logits (2 bytes). Per micro-batch of 8192 tokens x 128,256 logits on one H100 the
    difference is exactly those bytes at the device's HBM bandwidth; the GEMM and the norm are unchanged."""
    c = cluster("h100", 8)
    eager = RunSpec(global_batch=8, seq_len=8192, trainer="torchtitan", torch_compile=True)
    compiled = replace(eager, compile_loss=True)
    key = StageKey(Degrees(1, 1, 1, 1, 1, False))
    e, k = (stage_extra_time(LLAMA_8B, c, run, "last", key) for run in (eager, compiled))
    logits, hbm = 8192 * 128_256, c.device.hbm_bandwidth
    assert e.forward - k.forward == pytest.approx((3 * 4 - 2 * 2) * logits / hbm)
    assert e.backward - k.backward == pytest.approx((2 * 4 - 2 * 2) * logits / hbm)
    assert (e.flops, e.tp_comm) == (k.flops, k.tp_comm)


# Bytes per logit each loss kernel moves, counted by hand from its code (docs/formulas.md §3.5), bf16 logits:
# (forward, backward)
HAND_COUNTED_LOSS_BYTES = {
    # .float() reads 2 writes 4; max reads 4; in-place subtract, exp and divide read and write 4 each; sum reads 4 |
    # in-place multiply by the output gradient reads and writes 4; autograd's cast to bf16 reads 4 writes 2
    "unfused": (6 + 4 + 8 + 8 + 4 + 8, 8 + 6),
    # three fused kernels: cast and max (2 + 4), subtract-exp-sum (4 + 4), divide (4 + 4) | one: read 4, write 2
    "native": (6 + 8 + 8, 6),
    # online softmax reads 2; the loss kernel reads 2 and writes the fp32 gradient 4 | scale in place 8; cast 6
    "te": (2 + 2 + 4, 8 + 6),
    # one online-softmax read | read the logits, write their bf16 gradient
    "flash": (2, 2 + 2),
    # 3 forward and 2 backward passes over fp32 logits (the eager PyTorch loss as priced before)
    "eager": (3 * 4, 2 * 4),
}


@pytest.mark.parametrize("kernel", sorted(HAND_COUNTED_LOSS_BYTES))
def test_each_loss_kernel_moves_its_hand_counted_bytes_per_logit(kernel):
    """RunSpec.loss_kernel prices the loss by the bytes its kernels move: Megatron-LM's default unfused loss 52 bytes
    per bf16 logit (13 fp32 passes), its native fused one 28, Transformer Engine's 22, flash-attn's 6, the eager
    PyTorch loss 20."""
    assert loss_bytes_per_logit(RunSpec(8, 4096, loss_kernel=kernel)) == HAND_COUNTED_LOSS_BYTES[kernel]
    assert sum(HAND_COUNTED_LOSS_BYTES["unfused"]) == 52 and sum(HAND_COUNTED_LOSS_BYTES["native"]) == 28


def test_the_trainer_default_loss_kernel_is_megatrons_fused_mindformers_unfused_and_torchtitans_eager():
    """loss_kernel "trainer" is what the trainer's files run: ndcp's Megatron files write --cross-entropy-loss-fusion
    (the native fused loss); MindFormers runs Megatron-LM's own default (unfused, not verified); torchtitan the eager
    loss, or under compile_loss its compiled one (2 + 2 passes over the bf16 logits)."""
    run = RunSpec(8, 4096)
    assert loss_bytes_per_logit(run) == HAND_COUNTED_LOSS_BYTES["native"]
    assert loss_bytes_per_logit(replace(run, trainer="mindformers")) == HAND_COUNTED_LOSS_BYTES["unfused"]
    assert loss_bytes_per_logit(replace(run, trainer="torchtitan")) == HAND_COUNTED_LOSS_BYTES["eager"]
    assert loss_bytes_per_logit(replace(run, trainer="torchtitan", compile_loss=True)) == (4, 4)


def test_the_loss_kernel_moves_the_output_head_by_its_bytes_at_hbm_speed():
    """Per micro-batch of 8192 tokens x 128,256 logits on one H100 (TP 1), the unfused loss's last stage is slower
    than Transformer Engine's by exactly the bytes between them at the device's HBM bandwidth (30 forward, 0
    backward); the GEMM, norm and collectives are the same."""
    c = cluster("h100", 8)
    key = StageKey(Degrees(1, 1, 1, 1, 1, False))
    unfused, te = (stage_extra_time(LLAMA_8B, c, RunSpec(8, 8192, loss_kernel=k), "last", key)
                   for k in ("unfused", "te"))
    logits, hbm = 8192 * 128_256, c.device.hbm_bandwidth
    assert unfused.forward - te.forward == pytest.approx((38 - 8) * logits / hbm)
    assert unfused.backward - te.backward == pytest.approx(0.0, abs=1e-12)
    assert (unfused.flops, unfused.tp_comm) == (te.flops, te.tp_comm)


# -- BF16 first and last layers in an FP8 run (Megatron --first-last-layers-bf16; docs/formulas.md §3.1) ----------
FP8_CS = RunSpec(global_batch=64, seq_len=8192, precision="fp8", fp8_recipe="tensorwise")
TWO_STAGES = Strategy(dp=4, tp=1, pp=2, mbs=1, mbn=16, zero=1)


def _gemms_and_casts(model, c, kind: str, tokens: int):
    """(weight GEMMs one pass at BF16, the same at FP8, FP8 cast seconds forward, backward) of one layer at tp 1."""
    from ndcp.estimate.compute import fp8_gemms, layer_gemms, memory_seconds
    from ndcp.estimate.fp8 import layer_cast_bytes
    from ndcp.estimate.gemm import weight_gemm_seconds
    gemms = layer_gemms(model, kind, tokens, 1, 1, 1)
    bf16 = weight_gemm_seconds(model, kind, gemms, tokens, c.device, replace(FP8_CS, precision="bf16"))
    fp8 = weight_gemm_seconds(model, kind, gemms, tokens, c.device, FP8_CS)
    forward, backward = layer_cast_bytes(FP8_CS, c.device, fp8_gemms(model, kind, gemms, tokens))
    return bf16, fp8, memory_seconds(forward, c.device), memory_seconds(backward, c.device)


@pytest.mark.parametrize("field, stage", [("first_layers_bf16", 0), ("last_layers_bf16", 1)])
def test_a_bf16_layer_adds_its_bf16_minus_fp8_gemm_time_and_drops_its_casts_on_its_stage(field, stage):
    """Hand count, Llama-3 8B at tp 1 (no TP collectives, no amax reductions), two stages: keeping the first (last)
    layer in BF16 adds to the first (last) stage's forward exactly its weight GEMMs at the BF16 rate less at the FP8
    rate less its FP8 casts (input and weight), to its backward twice the GEMM difference (input and weight
    gradients) less the output-gradient cast; the executed FLOPs and the other stage do not change."""
    c = cluster(gpus=8)
    before = stage_times(LLAMA_8B, c, FP8_CS, TWO_STAGES)
    after = stage_times(LLAMA_8B, c, replace(FP8_CS, **{field: 1}), TWO_STAGES)
    bf16, fp8, cast_forward, cast_backward = _gemms_and_casts(LLAMA_8B, c, "dense", 8192)
    assert bf16 > fp8 + cast_forward  # the physics: a BF16 layer is slower on H100
    assert after[stage].forward - before[stage].forward == pytest.approx(bf16 - fp8 - cast_forward, rel=1e-9)
    assert after[stage].backward - before[stage].backward == pytest.approx(2 * (bf16 - fp8) - cast_backward,
                                                                           rel=1e-9)
    assert after[stage].wgrad - before[stage].wgrad == pytest.approx(bf16 - fp8, rel=1e-9)
    assert after[stage].flops == pytest.approx(before[stage].flops, rel=1e-12)
    assert after[1 - stage] == before[1 - stage]


def test_two_bf16_layers_cost_twice_one_and_the_step_grows_by_the_slowest_stages_share():
    c = cluster(gpus=8)
    base = stage_times(LLAMA_8B, c, FP8_CS, TWO_STAGES)[0].total
    one = stage_times(LLAMA_8B, c, replace(FP8_CS, first_layers_bf16=1), TWO_STAGES)[0].total - base
    two = stage_times(LLAMA_8B, c, replace(FP8_CS, first_layers_bf16=2), TWO_STAGES)[0].total - base
    assert two == pytest.approx(2 * one, rel=1e-9) and one > 0
    slower = estimate_time(LLAMA_8B, c, replace(FP8_CS, first_layers_bf16=1, last_layers_bf16=1), TWO_STAGES)
    assert slower.step_seconds > estimate_time(LLAMA_8B, c, FP8_CS, TWO_STAGES).step_seconds


def test_bf16_layers_change_nothing_outside_fp8():
    """RunSpec.bf16_layers is (0, 0) without FP8 (a derived BF16 run): the same stage times."""
    c = cluster(gpus=8)
    plain = RunSpec(global_batch=64, seq_len=8192)
    derived = replace(replace(FP8_CS, first_layers_bf16=1), precision="bf16")
    assert stage_times(LLAMA_8B, c, derived, TWO_STAGES) == stage_times(LLAMA_8B, c, plain, TWO_STAGES)


# A recomputed BF16 layer re-runs at the BF16 rate (time.bf16_rerun_time; Megatron-LM d98e8a6 core/recompute.py)
def _bf16_minus_fp8(run_fields: dict, mode: str, stage: int) -> float:
    """One stage's per-micro-batch time with the BF16 layers of `run_fields` less the all-FP8 run's, under uniform
    recompute `mode` (Llama-3 8B, tp 1, two stages)."""
    c, strategy = cluster(gpus=8), replace(TWO_STAGES, recompute=RecomputePlan.uniform(mode))
    after = stage_times(LLAMA_8B, c, replace(FP8_CS, **run_fields), strategy)[stage]
    return after.total - stage_times(LLAMA_8B, c, FP8_CS, strategy)[stage].total


@pytest.mark.parametrize("field, stage", [("first_layers_bf16", 0), ("last_layers_bf16", 1)])
def test_a_fully_recomputed_bf16_layer_re_runs_its_forward_at_the_bf16_rate(field, stage):
    """Full recompute re-runs a BF16 layer's forward in BF16 (its own get_fp8_context is nullcontext): the BF16 run's
    extra over the FP8 run grows, against no recompute, by exactly the forward's BF16-vs-FP8 difference counted by
    hand at tp 1: its weight GEMMs at the BF16 rate less at the FP8 rate less its forward FP8 casts."""
    bf16, fp8, cast_forward, _ = _gemms_and_casts(LLAMA_8B, cluster(gpus=8), "dense", 8192)
    grown = _bf16_minus_fp8({field: 1}, "full", stage) - _bf16_minus_fp8({field: 1}, "none", stage)
    assert grown == pytest.approx(bf16 - fp8 - cast_forward, rel=1e-9) and grown > 0


def test_a_bf16_layers_mlp_module_re_runs_its_gemms_at_the_bf16_rate():
    """The `mlp` recompute module re-runs the MLP's GEMMs (rerun.py MLP_FORWARD): for the BF16 layer at the BF16
    rate (Transformer Engine's checkpoint re-enters the forward's FP8 state: off) and without the FP8 run's input
    casts (fp8.layer_cast_bytes' forward), the difference counted from the MLP's GEMMs and their inputs alone."""
    from ndcp.estimate.compute import memory_seconds, mlp_gemms
    from ndcp.estimate.fp8 import layer_cast_bytes
    from ndcp.estimate.gemm import weight_gemm_seconds
    c = cluster(gpus=8)
    gemms = mlp_gemms(LLAMA_8B, LLAMA_8B.ffn_hidden, 8192, 1)
    bf16, fp8 = (weight_gemm_seconds(LLAMA_8B, "dense", gemms, 8192, c.device, r)
                 for r in (replace(FP8_CS, precision="bf16"), FP8_CS))
    casts = memory_seconds(layer_cast_bytes(FP8_CS, c.device, gemms)[0], c.device)
    grown = _bf16_minus_fp8({"first_layers_bf16": 1}, "mlp", 0) - _bf16_minus_fp8({"first_layers_bf16": 1}, "none", 0)
    assert grown == pytest.approx(bf16 - fp8 - casts, rel=1e-9) and grown > 0


def test_a_bf16_layers_selective_re_run_is_its_attention_core_the_same_in_either_precision():
    """Selective recompute re-runs the attention core only, a BF16 kernel in both runs: nothing added."""
    grown = _bf16_minus_fp8({"first_layers_bf16": 1}, "selective", 0) - _bf16_minus_fp8({"first_layers_bf16": 1},
                                                                                         "none", 0)
    assert grown == pytest.approx(0.0, abs=1e-12)


def test_the_bf16_layers_take_their_stages_heaviest_recompute_options_first():
    """A stage's plan is counts, not places: each kind's BF16 layers take the heaviest options first (an upper bound
    of their re-run; Megatron's block method recomputes a chunk's first layers), across both ends where one stage
    holds both (pp = 1), leaving the rest to the other layers."""
    from ndcp.estimate.time import bf16_layer_modes
    run = replace(FP8_CS, first_layers_bf16=2, last_layers_bf16=1)
    left = {("dense", "none"): 29, ("dense", "full"): 1, ("dense", "selective"): 2}
    assert bf16_layer_modes(LLAMA_8B, run, "only", left) == ((("dense", "full"), 1), (("dense", "selective"), 1),
                                                             (("dense", "selective"), 1))
    assert left == {("dense", "none"): 29, ("dense", "full"): 0, ("dense", "selective"): 0}
    assert bf16_layer_modes(LLAMA_8B, run, "last", {("dense", "none"): 16}) == ((("dense", "none"), 1),)


def test_a_per_stage_plan_charges_the_bf16_re_run_only_where_the_bf16_layers_are_recomputed():
    """Two stages, only the second recomputing (one layer fully): the first BF16 layer adds no re-run on stage 0; the
    last BF16 layer takes stage 1's one full recompute, as much as under the uniform full plan."""
    c = cluster(gpus=8)
    plan = RecomputePlan("per-stage", (StageRecompute(none=16), StageRecompute(none=15, full=1)))
    strategy, run = replace(TWO_STAGES, recompute=plan), replace(FP8_CS, first_layers_bf16=1, last_layers_bf16=1)
    after, before = stage_times(LLAMA_8B, c, run, strategy), stage_times(LLAMA_8B, c, FP8_CS, strategy)
    assert after[0].recompute == before[0].recompute
    full = _bf16_minus_fp8({"last_layers_bf16": 1}, "full", 1) - _bf16_minus_fp8({"last_layers_bf16": 1}, "none", 1)
    assert after[1].recompute - before[1].recompute == pytest.approx(full, rel=1e-9) and full > 0


def test_a_bf16_layers_re_run_hides_no_data_parallel_collective():
    """Conservatively (and so the per-layer plan form, which leaves the re-run premium out, stays a lower bound) the
    data-parallel windows are the stages' without the BF16 layers' BF16-rate re-run: on a slow scale-out link
    (gradient sync exposed) the step's dp_comm is the one of windows less each stage's premium, not of the whole."""
    from ndcp.estimate.data_parallel import Windows, data_parallel_seconds
    c, s = cluster(gpus=8, scale=0.01), replace(TWO_STAGES, recompute=RecomputePlan.uniform("full"))
    run = replace(FP8_CS, first_layers_bf16=1, last_layers_bf16=1)
    after, before = stage_times(LLAMA_8B, c, run, s), stage_times(LLAMA_8B, c, FP8_CS, s)
    premium = [a.recompute - b.recompute for a, b in zip(after, before)]
    assert min(premium) > 0
    less = [Windows(t.forward_window, t.backward_window - p) for t, p in zip(after, premium)]
    whole = [Windows(t.forward_window, t.backward_window) for t in after]
    dp = estimate_time(LLAMA_8B, c, run, s).parts["dp_comm"]
    assert dp == pytest.approx(data_parallel_seconds(LLAMA_8B, c, run, s, less).communication, rel=1e-12)
    assert dp > data_parallel_seconds(LLAMA_8B, c, run, s, whole).communication
