"""One body layer's time (estimate/layer_time.py; docs/formulas.md §7): the backward TP communication as each
trainer runs it. Without sequence parallelism the input-gradient all-reduces hide behind the weight-gradient GEMMs;
with it Megatron all-gathers the output gradients synchronously (exposed), re-gathers the column-parallel inputs
behind their input-gradient GEMMs and reduce-scatters the input gradients behind their weight-gradient GEMMs;
torchtitan's DTensor leaves all of it exposed; userbuffers price their own. A published profile of a MoE row
(docs/formulas.md §3.2, "Published component timings") bounds the compute and the all-to-alls the layers charge."""
from dataclasses import replace
from pathlib import Path

import pytest

from ndcp.estimate.keys import Degrees, LayerKey
from ndcp.estimate.layer_time import _moe_passes, _ub_blocks, _ub_linear, layer_time, tp_all_reduce_seconds
from ndcp.estimate.overlap import sp_backward_exposed, tp_overlapped
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.validation.runs import read_rows

LLAMA = load_model("llama3-70b")
MIXTRAL = load_model("mixtral-8x7b")
H100 = ClusterSpec(device_preset("h100"), 8)
H100_16 = ClusterSpec(device_preset("h100"), 16)
MEGATRON = RunSpec(global_batch=64, seq_len=8192)
TORCHTITAN = RunSpec(global_batch=64, seq_len=8192, trainer="torchtitan")
USERBUFFERS = frozenset({"tp"})


def _dense(run: RunSpec, tp: int, sp: bool, mbs: int = 1, hidden: frozenset = frozenset()):
    return layer_time(LLAMA, H100, run, LayerKey("dense", "none", Degrees(tp, 1, 1, 1, mbs, sp), "p2p", hidden))


def _forward_tp(t) -> float:
    return t.tp_comm - t.backward_comm  # no CP or EP in these layers: backward_comm is all TP


@pytest.mark.parametrize("tp,mbs", [(2, 1), (4, 1), (8, 1), (8, 4)])
def test_sequence_parallel_backward_never_hides_the_output_gradient_all_gathers(tp, mbs):
    """Megatron all-gathers each row-parallel layer's output gradient before its input gradient and waits
    (mappings.py @d98e8a6): at least half of the forward's traffic shows in the backward, whatever the GEMMs."""
    t = _dense(MEGATRON, tp, True, mbs)
    assert t.backward_comm >= _forward_tp(t) / 2 - 1e-12
    assert t.backward_comm > 0


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_plain_tp_backward_hides_behind_the_weight_gradients(tp):
    """Without SP the input-gradient all-reduces run behind the weight-gradient GEMMs (one forward of them)."""
    t = _dense(MEGATRON, tp, False)
    assert t.backward_comm == pytest.approx(max(0.0, _forward_tp(t) - t.wgrad))


def test_sequence_parallel_forward_is_priced_as_plain_tp_and_only_the_backward_differs():
    plain, sp = _dense(MEGATRON, 8, False), _dense(MEGATRON, 8, True)
    assert _forward_tp(sp) == pytest.approx(_forward_tp(plain))
    assert sp.backward_comm > plain.backward_comm


def test_megatron_hides_the_re_gather_and_the_reduce_scatter_behind_the_column_parallel_gemms():
    """Exposed = all-gathers + what the re-gather outlasts the input-gradient GEMM + what the reduce-scatter
    outlasts the weight-gradient GEMM (each half the layer's GEMMs): the extra all-gather shows only when the GEMMs
    are short."""
    assert sp_backward_exposed(1.0, 10.0, True) == pytest.approx(0.5)  # long GEMMs: only the all-gathers
    assert sp_backward_exposed(1.0, 0.0, True) == pytest.approx(1.5)  # no GEMMs: 1.5x the forward's traffic
    assert sp_backward_exposed(1.0, 0.6, True) == pytest.approx(0.5 + 2 * 0.2)
    assert sp_backward_exposed(1.0, 10.0, False) == pytest.approx(1.0)  # DTensor: all of it, nothing re-gathered


def test_torchtitan_sequence_parallel_backward_exposes_all_its_traffic():
    t = _dense(TORCHTITAN, 8, True)
    assert t.backward_comm == pytest.approx(_forward_tp(t))
    assert t.backward_comm > _dense(MEGATRON, 8, True).backward_comm


def test_userbuffers_price_their_own_backward_whatever_the_trainer_runs_without_them():
    """The userbuffers path (tp_overlapped at TE's defaults) is what the layer exposes under overlap; its hidden
    time is measured against the SP backward without it."""
    tokens = Degrees(8, 1, 1, 1, 1, True).tokens(MEGATRON.seq_len)
    expected = tp_overlapped(_ub_blocks(LLAMA, H100, MEGATRON, "dense", 8, tokens), H100.device.sm_count, 8)
    for run in (MEGATRON, TORCHTITAN):
        overlapped = _dense(run, 8, True, hidden=USERBUFFERS)
        assert (_forward_tp(overlapped), overlapped.backward_comm) == pytest.approx(expected)
        assert overlapped.tp_comm + overlapped.tp_hidden == pytest.approx(_dense(run, 8, True).tp_comm)


def _moe_layer(model, sp: bool, run: RunSpec = MEGATRON, hidden: frozenset = frozenset()):
    degrees = Degrees(4, 1, 4, 1, 1, sp)
    return layer_time(model, H100_16, run, LayerKey("moe", "none", degrees, "p2p", hidden))


@pytest.mark.parametrize("name,pairs", [("mixtral-8x7b", 1), ("deepseek-v3", 2)])
def test_a_moe_layers_tp_collectives_are_its_mixers_and_its_shared_experts(name, pairs):
    """Megatron's token dispatchers move the routed tokens over the expert-TP x EP ranks (token_dispatcher.py
    @d98e8a6; priced in ep_comm, estimate/moe.py): the TP group reduces the mixer's output and, where the model has
    them, the shared experts' (a tensor-parallel MLP). Mixtral's MoE layer has one pair, DeepSeek-V3's two."""
    model = load_model(name)
    tokens = Degrees(4, 1, 4, 1, 1, False).tokens(MEGATRON.seq_len)
    one = tp_all_reduce_seconds(H100_16, tokens * model.hidden * MEGATRON.activation_bytes, 4)
    t = _moe_layer(model, False)
    assert t.tp_comm - _tp_backward(t) == pytest.approx(pairs * one)


def test_a_moe_layers_mixer_pairs_are_priced_as_sequence_parallel():
    """The mixer's pair goes through TE's linear layers: under SP at least its all-gathers show in the backward."""
    sp, plain = _moe_layer(MIXTRAL, True), _moe_layer(MIXTRAL, False)
    assert _tp_backward(sp) >= (sp.tp_comm - _tp_backward(sp)) / 2 - 1e-12 > 0
    assert _tp_backward(sp) >= _tp_backward(plain)


def test_the_ep_overlap_leaves_hybrideps_kernels_out_of_the_compute_that_hides_the_all_to_alls():
    """HybridEP's permute, unpermute and metadata scans (moe.flex_kernel_bytes) run on the communication stream with
    grids that fill the device: nothing computes beside them, so the passes the all-to-alls hide behind are the
    layer's forward and backward less their seconds, the mixer's share unchanged and the MLP's the rest."""
    run = replace(MEGATRON, moe_dispatcher="flex")
    tokens = 8192.0
    mixer = _ub_linear(MIXTRAL, H100, run, "moe", 1, tokens)
    plain = _moe_passes(MIXTRAL, H100, run, "moe", 1, tokens, 10.0, 20.0, 1.0, 2.0, 0.5)
    passes = _moe_passes(MIXTRAL, H100, run, "moe", 1, tokens, 10.0, 20.0, 1.0, 2.0, 0.5, (3.0, 2.0))
    assert plain.compute() == pytest.approx(30.0)
    assert passes.compute() == pytest.approx(30.0 - 5.0)
    assert passes.attention_forward == plain.attention_forward == pytest.approx(mixer + 1.0 + 0.5)
    assert passes.mlp_forward == pytest.approx(plain.mlp_forward - 3.0)
    assert passes.mlp_backward == pytest.approx(plain.mlp_backward - 2.0)


def test_the_ep_overlap_splits_each_backward_into_its_gradients():
    """What delay_wgrad_compute runs apart (overlap.ep_overlapped): one pass of each part's weight GEMMs, the mixer's
    and the rest of the layer's (`linear`), never more than the backward it is part of."""
    tokens = 8192.0
    mixer = _ub_linear(MIXTRAL, H100, MEGATRON, "moe", 1, tokens)
    passes = _moe_passes(MIXTRAL, H100, MEGATRON, "moe", 1, tokens, 10.0, 20.0, 1.0, 2.0, 0.5, linear=mixer + 3.0)
    assert passes.attention_weight_gradient == pytest.approx(mixer)
    assert passes.mlp_weight_gradient == pytest.approx(3.0)
    tight = _moe_passes(MIXTRAL, H100, MEGATRON, "moe", 1, tokens, 10.0, 20.0, 1.0, 2.0, 0.5, linear=mixer + 100.0)
    assert tight.mlp_weight_gradient == pytest.approx(tight.mlp_backward)


def _tp_backward(t) -> float:
    return t.backward_comm - t.ep_comm / 2  # backward_comm holds half of the EP all-to-alls too (no overlap asked)

# Megatron-Bridge skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md @067f987d, "HybridEP production-shape
# validation" (docs/formulas.md §3.2, "Published component timings"): Qwen3-30B-A3B on 16 H100, flex + HybridEP, one
# step's rank-0 Nsight capture. EP overlap off: step 24.714 s, GPU-active union 22.821 s, 9.079 ms of communication
# concurrent with GEMM/attention = 0.11 % of the communication time; on: union 21.221 s, 3,958.997 ms = 36.55 %.
MEASURED_2 = Path(__file__).resolve().parents[2] / "examples" / "measured_runs_2.yaml"
HYBRIDEP_PROFILE = {"none": (24.714, 22.821, 9.079e-3, (0.00105, 0.00115)),
                    "ep": (20.992, 21.221, 3.958997, (0.36545, 0.36555))}


@pytest.mark.parametrize("overlap", sorted(HYBRIDEP_PROFILE))
def test_a_published_moe_profile_bounds_the_compute_and_the_all_to_alls(overlap):
    """What the GPU ran besides communication (the union less the communication, their quotient giving the latter)
    is at least ndcp's compute of the same step, which prices ideal kernels, and ndcp's is within 20 % of it; the
    all-to-alls ndcp charges are no longer than the communication kernels measured without the overlap (with it
    they share SMs and bandwidth with the compute and run 1.25-1.37 times longer) and within 30 % of them."""
    step, union, concurrent, shares = HYBRIDEP_PROFILE[overlap]
    row = dict(read_rows(MEASURED_2))["mbr_qwen3_30b_h100_bf16_16_epoverlap"]()
    estimate = estimate_time(row.model, row.cluster, replace(row.run, overlap=overlap), row.strategy)
    communication = [concurrent / share for share in reversed(shares)]  # low, high
    other = [union - c + concurrent for c in reversed(communication)]
    compute = estimate.parts["compute_forward"] + estimate.parts["compute_backward"]
    assert 0.8 * other[0] <= compute <= other[1]
    all_to_alls = estimate.parts.get("ep_comm", 0.0) + (estimate.hidden or {}).get("ep_comm", 0.0)
    assert all_to_alls <= communication[1]
    if overlap == "none":
        assert 0.7 * communication[0] <= all_to_alls
    assert estimate.step_seconds <= step
