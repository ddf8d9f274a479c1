"""Communication overlapped with compute (estimate/overlap.py; docs/formulas.md §7.1): each overlap applies only
where its trainer's condition holds, moves time from exposed to hidden (what userbuffers costs stays exposed: the
SMs its communication holds, its split GEMMs), and the time breakdown reports both."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndcp.estimate.overlap import (BULK, PIPELINE, RING_EXCHANGE, UbBlock, hidden_comms, layer_overlaps,
                                   requested, tp_overlapped, ub_pair_seconds)
from ndcp.estimate.keys import Degrees, LayerKey
from ndcp.estimate.layer_time import layer_time
from ndcp.estimate.time import estimate_time
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model

RUN = RunSpec(global_batch=64, seq_len=4096)


def _run(overlap: str) -> RunSpec:
    return RunSpec(global_batch=64, seq_len=4096, overlap=overlap)


def test_trainer_defaults_overlap_the_pipeline_sends_only_when_interleaving():
    assert requested(RUN) == {"p2p"}  # Megatron-LM: --overlap-p2p-communication on, the others off
    assert requested(RunSpec(global_batch=8, seq_len=1024, trainer="torchtitan")) == set()
    assert hidden_comms(RUN, "interleaved", 4, 2, 1, False, 1) == {"p2p"}
    assert hidden_comms(RUN, "1f1b", 4, 1, 1, False, 1) == set()  # Megatron turns it off without interleaving


def test_each_requested_overlap_needs_its_condition():
    run = _run("ep+tp+p2p")
    # EP all-to-all overlap: ep > 1, and the interleaved schedule once pp > 1 (Megatron-Core TransformerConfig)
    assert "ep" in hidden_comms(run, "interleaved", 4, 2, 2, True, 8)
    assert "ep" not in hidden_comms(run, "1f1b", 4, 1, 2, True, 8)
    assert "ep" in hidden_comms(run, "1f1b", 1, 1, 2, True, 8)
    assert "ep" not in hidden_comms(run, "interleaved", 4, 2, 2, True, 1)
    # TP userbuffers: sequence parallelism (and tp > 1)
    assert "tp" in hidden_comms(run, "1f1b", 1, 1, 2, True, 1)
    assert "tp" not in hidden_comms(run, "1f1b", 1, 1, 2, False, 1)
    assert hidden_comms(_run("none"), "interleaved", 4, 2, 2, True, 8) == set()


def test_dualpipe_hides_the_all_to_all_and_the_sends_whatever_the_run_asks():
    assert hidden_comms(_run("none"), "dualpipe", 4, 1, 1, False, 8) == {"ep", "p2p"}
    assert hidden_comms(_run("none"), "dualpipev", 4, 1, 1, False, 1) == {"p2p"}  # no experts, no all-to-all


def test_a_moe_layer_that_reruns_its_all_to_all_keeps_it_exposed():
    assert layer_overlaps(frozenset({"ep", "tp"}), "moe", "full") == {"tp"}
    assert layer_overlaps(frozenset({"ep"}), "moe", "moe") == set()  # Megatron: no "moe" recompute module
    assert layer_overlaps(frozenset({"ep", "tp"}), "moe", "selective") == {"ep", "tp"}
    assert layer_overlaps(frozenset({"ep"}), "dense", "none") == set()
    assert layer_overlaps(frozenset({"p2p", "tp"}), "dense", "none") == {"tp"}  # between stages, not in a layer


MIXTRAL = load_model("mixtral-8x7b")
CLUSTER = ClusterSpec(device_preset("h100"), 16)


@pytest.mark.parametrize("hidden,tp,sp", [("ep", 1, False), ("tp", 4, True)])
def test_overlap_moves_time_from_exposed_to_hidden(hidden, tp, sp):
    layer = LayerKey("moe", "none", Degrees(tp, 1, 4, 1, 1, sp))
    plain = layer_time(MIXTRAL, CLUSTER, RUN, layer)
    overlapped = layer_time(MIXTRAL, CLUSTER, RUN, layer._replace(hidden=frozenset({hidden})))
    key = f"{hidden}_comm"
    assert getattr(overlapped, f"{hidden}_hidden") > 0
    assert getattr(overlapped, key) + getattr(overlapped, f"{hidden}_hidden") == pytest.approx(getattr(plain, key))
    assert overlapped.total < plain.total
    assert (overlapped.forward, overlapped.backward, overlapped.wgrad) == (plain.forward, plain.backward, plain.wgrad)


def test_the_breakdown_reports_hidden_communication():
    strategy = Strategy(dp=2, tp=2, pp=4, vpp=2, ep=2, mbs=1, mbn=32, sp=True, schedule="interleaved")
    run = RunSpec(global_batch=64, seq_len=4096, overlap="ep+tp+p2p")
    plain, overlapped = estimate_time(MIXTRAL, CLUSTER, _run("none"), strategy), estimate_time(MIXTRAL, CLUSTER, run,
                                                                                                 strategy)
    out = overlapped.as_dict()["hidden_comm"]
    assert set(out) == {"tp_comm", "ep_comm", "pp_comm"} and out["ep_comm"] > 0 and out["pp_comm"] > 0
    # tp 2: userbuffers costs more than the little it hides (negative), reported as it is
    assert out["tp_comm"] == pytest.approx(plain.parts["tp_comm"] - overlapped.parts["tp_comm"]) != 0
    assert overlapped.parts["pp_comm"] == 0 and plain.as_dict()["hidden_comm"] == dict.fromkeys(out, 0.0)
    assert overlapped.step_seconds < plain.step_seconds


@pytest.mark.parametrize("value", ["ep+ep", "nvlink", "", "ep,tp"])
def test_overlap_setting_is_validated(value):
    with pytest.raises(SpecError, match="overlap"):
        RunSpec(global_batch=8, seq_len=1024, overlap=value)


SMS = 132  # H100 SXM


@pytest.mark.parametrize("method", [RING_EXCHANGE, PIPELINE, BULK])
def test_more_communication_to_hide_never_makes_a_pair_faster_than_its_gemm_on_the_sms_left(method):
    """A collective overlapped with its GEMM (1 ms unsplit, 1.1 ms split): the pair never ends before the collective,
    nor before the GEMM on the SMs the collective leaves it, and more to hide never makes it shorter."""
    gemm, split = 1e-3, 1.1e-3
    walls = [ub_pair_seconds(c * 1e-4, gemm, split, method, SMS, 8) for c in range(0, 40)]
    assert walls == sorted(walls)
    on_sms_left = (split if method.num_splits != 1 else gemm) * (SMS / (SMS - method.num_sm)
                                                                 if method.set_sm_margin else 1.0)
    for c, wall in enumerate(walls):
        assert wall >= max(c * 1e-4, on_sms_left) - 1e-15
        assert wall >= gemm + c * 1e-4 * method.num_sm / SMS - 1e-15  # bulk: the SMs held while the collective runs


def test_ring_exchange_holds_no_sms_and_pays_the_split_and_one_chunk():
    """Copy-engine ring exchange (TE use_ce): the GEMM keeps every SM; the pair costs its split GEMMs and the one
    chunk that runs alone (tp = 4 chunks)."""
    assert ub_pair_seconds(0.4e-3, 1e-3, 1.05e-3, RING_EXCHANGE, SMS, 4) == pytest.approx(1.05e-3 + 0.1e-3)
    assert ub_pair_seconds(2e-3, 1e-3, 1e-3, RING_EXCHANGE, SMS, 4) == pytest.approx(2e-3 + 0.25e-3)


def _block(collective: float, gemm: float, split: float = 1.0) -> UbBlock:
    """A block whose all-gather and reduce-scatter take `collective` seconds each and whose column- and row-parallel
    GEMMs `gemm` seconds a pass, `split` times that split."""
    return UbBlock(collective, collective, (gemm,) * 3, (gemm,) * 3, gemm * split, gemm * split, gemm * split)


def test_userbuffers_hides_most_of_a_large_collective_but_costs_more_than_a_small_one_it_hides():
    """TE's defaults hold 16 of 132 SMs for the pipelined reduce-scatters all through their GEMMs: a layer with
    little TP traffic runs slower overlapped than with it exposed; one with much gains (what TE users see)."""
    small_forward, small_backward = tp_overlapped((_block(0.025e-3, 1e-3),), SMS, 8)
    assert small_forward > 0.05e-3  # 16/116 of the row-parallel GEMMs outweighs 0.05 ms of collectives
    large_forward, large_backward = tp_overlapped((_block(0.6e-3, 1e-3, 1.02),), SMS, 8)
    assert large_forward < 0.6 * 1.2e-3  # forward: one all-gather and one reduce-scatter
    assert large_backward < 0.3 * 1.8e-3  # backward: two all-gathers (output gradient, input re-gather), one scatter


def test_each_collective_hides_only_behind_its_own_blocks_gemms():
    """TE pairs each collective with the GEMM it feeds or follows (qkv_fprop, proj_fprop, ...): the attention block
    of Llama-3-70B at tp 8 (GEMMs shorter than its collectives) leaves the difference exposed, however long the MLP's
    GEMMs are. Hand count, forward, collectives 0.2 ms, GEMMs 0.1 ms (split as fast as whole): the ring exchange
    takes max(0.2, 0.1) + 0.1 / 8 = 0.2125 ms (0.1125 exposed); the pipeline's GEMM runs on 116 of 132 SMs,
    0.1 x 132 / 116 = 0.11379 ms, and the pair max(0.2, 0.11379) + 0.11379 / 4 = 0.22845 ms (0.12845 exposed)."""
    attention, mlp = _block(0.2e-3, 0.1e-3), _block(0.2e-3, 1.0e-3)
    forward, _ = tp_overlapped((attention,), SMS, 8)
    assert forward == pytest.approx(0.1125e-3 + (0.2e-3 + 0.1e-3 * 132 / 116 / 4 - 0.1e-3))
    assert forward == pytest.approx(0.24095e-3, rel=1e-4)
    both = tp_overlapped((attention, mlp), SMS, 8)
    alone = tp_overlapped((mlp,), SMS, 8)
    assert both == pytest.approx((forward + alone[0], tp_overlapped((attention,), SMS, 8)[1] + alone[1]))


def _forward_tp(t) -> float:
    return t.tp_comm - (t.backward_comm - t.ep_comm / 2)  # backward_comm holds half the all-to-alls (none hidden)


def test_a_moe_layer_overlaps_its_mixers_collectives_and_not_its_shared_experts():
    """TE's linear layers carry userbuffers: Mixtral's MoE layer has only its mixer's TP pair (the routed tokens move
    in the dispatcher), so overlap hides most of it; DeepSeek-V3's shared experts keep their pair exposed (priced as
    without overlap: half of its layer's forward TP traffic)."""
    layer = LayerKey("moe", "none", Degrees(4, 1, 4, 1, 1, True))

    def forward_tp(model, hidden: frozenset) -> float:
        return _forward_tp(layer_time(model, CLUSTER, RUN, layer._replace(hidden=hidden)))

    assert forward_tp(MIXTRAL, frozenset({"tp"})) < 0.6 * forward_tp(MIXTRAL, frozenset())
    deepseek = load_model("deepseek-v3")
    assert forward_tp(deepseek, frozenset({"tp"})) >= 0.5 * forward_tp(deepseek, frozenset())


def test_split_gemms_cost_more_the_fewer_tokens_each_chunk_has():
    """userbuffers' chunks are smaller GEMMs (the tile model): Llama-3-70B tp 4 on H100 loses more splitting a
    4,096-token micro-batch than an 8,192-token one, and never runs faster split than whole."""
    from ndcp.estimate.layer_time import _ub_blocks
    model, cluster = load_model("llama3-70b"), ClusterSpec(device_preset("h100"), 8)

    def slowdowns(tokens: float) -> tuple[float, float]:
        blocks = _ub_blocks(model, cluster, RUN, "dense", 4, tokens)
        return (sum(b.column_forward_split for b in blocks) / sum(b.column[0] for b in blocks),
                sum(b.row_forward_split for b in blocks) / sum(b.row[0] for b in blocks))

    (short_tp, short_four), (long_tp, long_four) = slowdowns(4096.0), slowdowns(8192.0)
    assert short_tp > long_tp >= 1.0 and short_four >= long_four >= 1.0


def test_userbuffers_gather_fp8_under_fp8_and_reduce_scatter_the_bf16_output():
    """Megatron creates FP8 userbuffers under fp8 and TE casts before each all-gather overlap (fp8_buf): Llama-3-70B's
    blocks at tp 8 gather 1 byte an element, scatter 2; BF16 gathers 2. One block per pair: the mixer's
    (qkv column-parallel, proj row-parallel) and the MLP's (fc1, fc2)."""
    from dataclasses import replace
    from ndcp.estimate import communication as comm
    from ndcp.estimate.layer_time import _ub_blocks
    model, cluster = load_model("llama3-70b"), ClusterSpec(device_preset("h100"), 8)
    link = comm.tp_link(cluster, 8)
    fp8 = replace(RUN, precision="fp8", fp8_recipe="tensorwise")
    mixer, mlp = _ub_blocks(model, cluster, fp8, "dense", 8, 4096.0)
    assert mixer.gather == pytest.approx(comm.all_gather_seconds(4096 * 8192 * 1, 8, *link))
    assert mixer.scatter == pytest.approx(comm.reduce_scatter_seconds(4096 * 8192 * 2, 8, *link))
    assert _ub_blocks(model, cluster, RUN, "dense", 8, 4096.0)[0].gather == pytest.approx(mixer.scatter)
    # at tp 8 the output projection is shorter than its reduce-scatter, which fc2 would have covered
    assert mixer.row[0] < mixer.scatter < mlp.row[0]


def test_ep_overlap_runs_megatrons_three_phases():
    """Megatron-Core's combined 1F1B (model_chunk_schedule_plan.py @d98e8a6): combine backward beside the attention
    forward, both dispatches beside the MLP's backward and forward, combine forward beside the attention backward.
    A combine longer than the attention beside it stays exposed by the difference."""
    from ndcp.estimate.overlap import MoEPasses, ep_overlapped
    passes = MoEPasses(attention_forward=1.0, attention_backward=2.0, mlp_forward=3.0, mlp_backward=6.0)
    assert sum(ep_overlapped(0.0, passes)) == 0.0
    assert sum(ep_overlapped(0.5, passes)) == pytest.approx(0.0)  # every all-to-all shorter than its partner
    # c = 1.5: the combine backward outlasts the attention forward by 0.5; the middle phase stays the MLP's 9
    assert sum(ep_overlapped(1.5, passes)) == pytest.approx(0.5)
    # a hybrid model's MoE block: nothing beside its combines
    hybrid = MoEPasses(0.0, 0.0, 3.0, 6.0)
    assert sum(ep_overlapped(1.0, hybrid)) == pytest.approx(2.0)


def test_the_dispatch_backward_waits_for_the_mlps_whole_backward():
    """Without delay_wgrad_compute (Megatron's default) the MLP node records its CUDA event after its autograd
    backward, weight gradients included (pipeline_parallel/utils.py @d98e8a6 ScheduleNode._backward): the dispatch
    backward starts with the MLP forward, and outlasts a shorter one. Attention 2 each way, MLP forward 1, backward
    4, all-to-alls 1.5: phases 2 | 4 + max(1.5, 1) | 2, 0.5 beyond the compute's 9."""
    from ndcp.estimate.overlap import MoEPasses, ep_overlapped
    passes = MoEPasses(attention_forward=2.0, attention_backward=2.0, mlp_forward=1.0, mlp_backward=4.0)
    assert ep_overlapped(1.5, passes) == pytest.approx((0.25, 0.25))


def test_delayed_weight_gradients_run_beside_the_dispatch_backward():
    """Under delay_wgrad_compute the MLP node records its event after its input gradient (TransformerLayerNode.
    backward_dw runs the weight gradient outside the event, model_chunk_schedule_plan.py @d98e8a6 issues it after the
    dispatch forward): the dispatch backward waits for the input gradient only, the weight gradient runs beside it
    before the MLP forward; the attention's weight gradient moves beside the next combine backward. The case above
    (MLP backward 4 of which 2 weight gradient, attention backward 2 of which 0.5): phases 2.5 | 2 + 3 | 1.5, all
    hidden where the default exposed 0.5."""
    from ndcp.estimate.overlap import MoEPasses, ep_overlapped
    passes = MoEPasses(attention_forward=2.0, attention_backward=2.0, mlp_forward=1.0, mlp_backward=4.0,
                       attention_weight_gradient=0.5, mlp_weight_gradient=2.0)
    assert sum(ep_overlapped(1.5, passes)) == pytest.approx(0.5)
    assert sum(ep_overlapped(1.5, passes, delay_wgrad=True)) == pytest.approx(0.0)


def test_a_delayed_weight_gradient_waits_for_the_dispatch_forward():
    """The host issues the MLP's weight gradient only when the flex dispatcher's dispatch forward returns, which
    blocks until its kernel ends: an input gradient shorter than the dispatch forward leaves the compute stream idle
    until then. MLP input gradient 0.5, weight gradient 0.5, forward 1, all-to-alls 1: the default pairs the whole
    backward (1) with the dispatch forward and hides everything; delayed, 0.5 idles beside the dispatch forward and the
    weight gradient and MLP forward (1.5) outlast the dispatch backward: 0.5 exposed."""
    from ndcp.estimate.overlap import MoEPasses, ep_overlapped
    passes = MoEPasses(attention_forward=2.0, attention_backward=2.0, mlp_forward=1.0, mlp_backward=1.0,
                       mlp_weight_gradient=0.5)
    assert sum(ep_overlapped(1.0, passes)) == pytest.approx(0.0)
    assert sum(ep_overlapped(1.0, passes, delay_wgrad=True)) == pytest.approx(0.5)


def test_the_weight_gradients_change_nothing_unless_delayed():
    """Without delay_wgrad_compute the split of each backward into its gradients does not enter the phases."""
    from ndcp.estimate.overlap import MoEPasses, ep_overlapped
    plain = MoEPasses(1.0, 2.0, 3.0, 6.0)
    split = MoEPasses(1.0, 2.0, 3.0, 6.0, attention_weight_gradient=1.0, mlp_weight_gradient=3.0)
    for c in (0.5, 1.5, 4.0):
        assert ep_overlapped(c, plain, 0.2) == ep_overlapped(c, split, 0.2)


def test_communication_beside_compute_takes_its_share_of_the_sms():
    """The all-to-all kernels hold `held` of the SMs while they run; the compute beside them runs at 1 - held
    meanwhile. Compute 1, 2, 3, 6 outlasting every 0.5-second all-to-all, a quarter of the SMs held: each phase ends
    0.25 x 0.5 after its compute, 0.5 in all. Compute shorter than the all-to-all beside it ends inside it
    (0.3 s at half throughput: 0.6 s of the 1 s combine), which stays exposed by what outlasts its partner."""
    from ndcp.estimate.overlap import MoEPasses, ep_overlapped
    passes = MoEPasses(attention_forward=1.0, attention_backward=2.0, mlp_forward=3.0, mlp_backward=6.0)
    assert sum(ep_overlapped(0.5, passes, held=0.25)) == pytest.approx(4 * 0.5 * 0.25)
    short = MoEPasses(attention_forward=0.3, attention_backward=3.0, mlp_forward=3.0, mlp_backward=6.0)
    # phases: max(1, 0.6) | 6.5 + 3.5 | 3.5, less the compute's 12.3
    assert sum(ep_overlapped(1.0, short, held=0.5)) == pytest.approx(1.0 + 10.0 + 3.5 - 12.3)


def test_the_ep_kernels_hold_32_sms():
    """HybridEP's dispatch and combine within one NVLink domain, the largest of the dispatchers' defaults
    (overlap.EP_COMM_SMS): 32 of an H100's 132 SMs; a device with fewer never gives more than all of them."""
    from ndcp.estimate.overlap import EP_COMM_SMS, sm_held
    assert sm_held(EP_COMM_SMS, 132) == pytest.approx(32 / 132)
    assert sm_held(EP_COMM_SMS, 16) == 1.0


def test_compute_beside_a_collective_runs_on_the_sms_it_leaves():
    """The one statement of SM sharing (overlap.sm_held, beside_seconds), which the userbuffers pairs, the EP
    all-to-alls and the data-parallel collectives all use: NCCL's 16 SMs of an H100's 132 beside 2 s of compute
    and a 1 s ring: the compute loses 16/132 of the ring's second; beside 0.5 s the ring is the wall; a collective
    holding every SM runs before the compute, not beside it."""
    from ndcp.estimate.overlap import beside_seconds, sm_held
    held = sm_held(16, 132)
    assert held == pytest.approx(16 / 132)
    assert beside_seconds(2.0, 1.0, held) == pytest.approx(2.0 + 16 / 132)
    assert beside_seconds(0.5, 1.0, held) == 1.0
    assert beside_seconds(2.0, 1.0, sm_held(200, 132)) == 3.0


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 10), st.floats(0, 10), st.floats(0, 0.99))
def test_beside_is_the_compute_slowed_while_the_communication_runs(compute, comm, held):
    """Against the two-phase timeline itself: the compute runs at 1 - held until the communication ends, then at full
    speed; the pair ends when both have."""
    from ndcp.estimate.overlap import beside_seconds
    done_during = (1.0 - held) * comm  # compute seconds done while the communication runs
    end = compute / (1.0 - held) if compute <= done_during else comm + (compute - done_during)
    assert beside_seconds(compute, comm, held) == pytest.approx(max(comm, end), abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 10), st.floats(0, 10), st.floats(0, 10), st.floats(0, 10), st.floats(0, 10), st.floats(0, 1),
       st.floats(0, 1), st.floats(0, 1), st.booleans())
def test_ep_overlap_exposes_between_full_hiding_and_none(c, attention_forward, attention_backward, mlp_forward,
                                                         mlp_backward, held, attention_w, mlp_w, delay):
    """Never more than the four all-to-alls unoverlapped, never less than what outlasts all the compute nor than the
    SMs' share of each all-to-all (each costs the compute beside it held x its time, or runs past it); the more SMs
    the communication holds, the less it hides. With the weight gradients delayed or not (any share of each
    backward)."""
    from ndcp.estimate.overlap import MoEPasses, ep_overlapped
    passes = MoEPasses(attention_forward, attention_backward, mlp_forward, mlp_backward,
                       attention_w * attention_backward, mlp_w * mlp_backward)
    exposed = sum(ep_overlapped(c, passes, held, delay))
    assert max(0.0, 4 * c - passes.compute(), 4 * c * held) - 1e-9 <= exposed <= 4 * c + 1e-9
    assert sum(ep_overlapped(c, passes, held / 2, delay)) <= exposed + 1e-9
