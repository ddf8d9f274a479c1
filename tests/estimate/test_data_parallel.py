"""Data-parallel sync per trainer and ZeRO stage (docs/formulas.md §7): which collectives run every micro-batch and
which once per step, the window each hides behind (one link: a window's collectives hide as a sum), what the sync
options cost in memory, and that more sharding is never free in time; the solver still finds the estimators'
optimum with every trainer and option."""
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from ndcp.cli import main
from ndcp.estimate import communication as comm
from ndcp.estimate.data_parallel import DataParallelTerms, Windows, data_parallel_terms
from ndcp.estimate.memory import estimate_memory, model_state_bytes
from ndcp.estimate.parameters import stage_parameters
from ndcp.estimate.time import estimate_time
from ndcp.estimate.trainers import data_parallel_sync
from ndcp.rules import strategy_refusal
from ndcp.specs import ClusterSpec, ModelSpec, MoESpec, RecomputePlan, RunSpec, SpecError, Strategy, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.trainer_behaviour import BEHAVIOURS
from ndcp.specs.run import FSDP_VERSIONS, GRAD_SYNCS, PARAM_GATHERS

from ..cli_helpers import assert_one_line_error, run as run_cli
from ..solve.test_bounds import test_item_bounds_never_exceed_the_full_estimators as bounds_hold
from ..solve.oracle import assert_plan_search_matches_oracle, assert_uniform_search_matches_oracle
from ..solve.test_cpsat_vs_oracle import problems
from ..solve.test_plans_vs_oracle import small_problems


def step_and_peak(model, cluster, run, strategy) -> tuple[float, int]:
    return (estimate_time(model, cluster, run, strategy).step_seconds,
            estimate_memory(model, cluster, run, strategy).peak_bytes)


# -- when each collective runs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("trainer, zero, pp, grads_per_microbatch, gather", [
    ("megatron", 0, 1, False, "none"),  # DDP: all-reduce of the main-grad buffer at the last micro-batch
    ("megatron", 1, 4, False, "step"),  # distributed optimizer: reduce-scatter and gather once per step
    ("megatron", 2, 1, True, "step"),  # Megatron FSDP optim_grads / DeepSpeed ZeRO-2: no no_sync
    ("megatron", 3, 4, True, "forward-backward"),  # optim_grads_params / ZeRO-3: re-gathered for backward
    ("torchtitan", 0, 1, True, "none"),  # train_step leaves gradient sync on for every micro-batch
    ("torchtitan", 3, 1, True, "forward-backward"),  # FSDP2 reshard_after_forward=True
    ("torchtitan", 0, 2, False, "none"),  # pipelining: no_sync until the last backward
    ("torchtitan", 3, 2, False, "step"),  # pipelining + reshard_after_forward=False: held over the step
])
def test_trainer_defaults(trainer, zero, pp, grads_per_microbatch, gather):
    sync = data_parallel_sync(RunSpec(global_batch=8, seq_len=1024, trainer=trainer), zero, pp)
    assert (sync.grads_per_microbatch, sync.gather) == (grads_per_microbatch, gather)
    # memory follows: a full gradient buffer only for ZeRO-2/3 reducing once per step, gathered parameters only for
    # ZeRO-3 not re-gathering for backward
    assert sync.full_grad_buffer == (zero >= 2 and not grads_per_microbatch)
    assert sync.gathered_parameters == (zero == 3 and gather != "forward-backward")


@pytest.mark.parametrize("grad_sync", GRAD_SYNCS[1:])
@pytest.mark.parametrize("param_gather", PARAM_GATHERS[1:])
def test_explicit_settings_override_every_trainer(grad_sync, param_gather):
    for trainer in ("megatron", "torchtitan"):
        for pp in (1, 2):
            sync = data_parallel_sync(RunSpec(8, 1024, trainer=trainer, grad_sync=grad_sync,
                                              param_gather=param_gather), 3, pp)
            assert (sync.grads_per_microbatch, sync.gather) == (grad_sync == "microbatch", param_gather)
    # ZeRO-1/2 gather the updated parameters once per step whatever the setting
    assert data_parallel_sync(RunSpec(8, 1024, param_gather=param_gather), 2, 1).gather == "step"


def test_unknown_settings_are_refused():
    with pytest.raises(SpecError, match="grad_sync"):
        RunSpec(8, 1024, grad_sync="never")
    with pytest.raises(SpecError, match="param_gather"):
        RunSpec(8, 1024, param_gather="forward")


# -- windows and the shared link ---------------------------------------------------------------------------------
def test_a_windows_collectives_hide_as_a_sum():
    # ZeRO-3: each of 4 micro-batches reduce-scatters 0.6 s and re-gathers 0.6 s in a 1 s backward window, and
    # gathers 0.6 s in a 0.5 s forward. Hidden separately nothing of the backward pair would show; on one link 0.2 s
    # of each window does.
    terms = DataParallelTerms(gradients=0.6, grads_per_microbatch=True, backward_gather=0.6, forward_gather=0.6,
                              gathers_per_microbatch=True, last_bucket=0.01, optimizer=0.0)
    assert terms.exposed(Windows(forward=0.5, backward=1.0), 4) == pytest.approx(4 * (1.2 - 1.0) + 4 * (0.6 - 0.5))


def test_per_step_sync_uses_one_window_and_the_last_bucket_always_shows():
    # Megatron ZeRO-1: one reduce-scatter behind the last backward, one gather behind the next first forward.
    terms = DataParallelTerms(gradients=2.0, grads_per_microbatch=False, backward_gather=0.0, forward_gather=1.0,
                              gathers_per_microbatch=False, last_bucket=0.1, optimizer=0.0)
    assert terms.exposed(Windows(forward=0.75, backward=1.5), 8) == pytest.approx((2.0 - 1.5) + (1.0 - 0.75))
    assert terms.exposed(Windows(50.0, 100.0), 8) == pytest.approx(0.1 * (2.0 + 1.0))  # the last bucket waits for the last layer


def test_hidden_collectives_cost_the_compute_the_sms_nccl_holds():
    # NCCL's CTAs hold 16 SMs while a collective runs (NVIDIA/nccl #689): behind a 10 s backward, a 1.32 s
    # reduce-scatter whose last bucket is 1 % leaves that bucket (0.0132 s) with no compute beside it, and the other
    # 1.3068 s leave the compute 116 of 132 SMs, 0.1584 s more: 0.1716 s. A 10 s one the whole window's share.
    terms = DataParallelTerms(gradients=1.32, grads_per_microbatch=False, backward_gather=0.0, forward_gather=0.0,
                              gathers_per_microbatch=False, last_bucket=0.01, optimizer=0.0, sm_share=16 / 132)
    assert terms.exposed(Windows(forward=5.0, backward=10.0), 1) == pytest.approx(0.0132 + 1.3068 * 16 / 132)
    longer = replace(terms, gradients=11.0)
    assert longer.exposed(Windows(forward=5.0, backward=10.0), 1) == pytest.approx(
        max(1.0, 0.11 + 10.89 * 16 / 132))
    # the share in use is the device's: 16 of its SMs
    (h100,) = data_parallel_terms(load_model("llama3-8b"), ClusterSpec(device_preset("h100"), 64),
                                  RunSpec(global_batch=64, seq_len=4096), Strategy(dp=64, mbs=1, mbn=1, zero=1))
    assert h100.sm_share == pytest.approx(16 / 132)


def test_the_last_bucket_and_the_sm_share_both_show():
    # The last bucket runs alone (no compute beside it) and the other buckets slow the compute they run beside:
    # the unhidden share is their sum, more than either, and the last bucket alone without an SM cost.
    terms = DataParallelTerms(gradients=1.0, grads_per_microbatch=False, backward_gather=0.0, forward_gather=0.0,
                              gathers_per_microbatch=False, last_bucket=0.1, optimizer=0.0, sm_share=0.2)
    assert terms.unhidden == pytest.approx(0.1 + 0.9 * 0.2)
    assert terms.unhidden > max(terms.last_bucket, terms.sm_share)
    assert replace(terms, sm_share=0.0).exposed(Windows(5.0, 10.0), 1) == pytest.approx(0.1)


def test_hidden_collectives_take_the_hbm_bandwidth_their_traffic_needs():
    # NCCL stores what arrives over the link and reads it back, twice the ring's bandwidth through HBM (S. Jeaugey,
    # NVIDIA/nccl #1428). Eight A100s on one NVLink ring (240 GB/s reached, 2039 GB/s HBM): 2 x 240 / 2039 = 23.5 %
    # of HBM, more than the 16 of 108 SMs NCCL holds, so that share is what a hidden collective costs.
    model, run = load_model("llama3-8b"), RunSpec(global_batch=8, seq_len=4096)
    (a100,) = data_parallel_terms(model, ClusterSpec(device_preset("a100-80g"), 8), run,
                                  Strategy(dp=8, mbs=1, mbn=1, zero=3))
    assert a100.hbm_share == pytest.approx(2 * 0.8 * 300e9 / 2039e9)
    assert a100.unhidden == pytest.approx(1 / 32 + 31 / 32 * a100.hbm_share)
    # tp = 8 leaves each data-parallel ring one 50 GB/s NIC (47 GB/s reached): 2.8 % of HBM, so the SMs bind
    (one_nic,) = data_parallel_terms(model, ClusterSpec(device_preset("h100"), 64),
                                     RunSpec(global_batch=8, seq_len=4096), Strategy(dp=8, tp=8, mbs=1, mbn=1, zero=3))
    assert one_nic.hbm_share < one_nic.sm_share == pytest.approx(16 / 132)
    assert one_nic.unhidden == pytest.approx(1 / 32 + 31 / 32 * 16 / 132)
    # what the share costs is the collective's bytes through HBM, whatever the link: twice as fast a ring, the same
    terms = DataParallelTerms(gradients=1.0, grads_per_microbatch=False, backward_gather=0.0, forward_gather=0.0,
                              gathers_per_microbatch=False, last_bucket=0.0, optimizer=0.0, hbm_share=0.3)
    faster = replace(terms, gradients=0.5, hbm_share=0.6)
    assert faster.exposed(Windows(5.0, 10.0), 1) == pytest.approx(terms.exposed(Windows(5.0, 10.0), 1))


def test_collectives_are_ring_volumes():
    # ZeRO §7.2: one gradient sync is a reduce-scatter of the fp32 gradients (ZeRO-0: an all-reduce), one gather
    # an all-gather of the bf16 parameters, over the data x context parallel ranks of a stage.
    model, cluster = load_model("llama3-8b"), ClusterSpec(device_preset("h100"), 64)
    run = RunSpec(global_batch=64, seq_len=4096)
    for zero in (0, 2):
        s = Strategy(dp=16, tp=2, pp=2, mbs=1, mbn=4, zero=zero, sp=True)
        terms, params = data_parallel_terms(model, cluster, run, s), stage_parameters(model, s)
        bandwidth, latency = comm.ring_link(cluster, ("cp", "dp"), {"tp": 2, "cp": 1, "dp": 16})
        for t, p in zip(terms, params):
            sync = comm.all_reduce_seconds if zero == 0 else comm.reduce_scatter_seconds
            assert t.gradients == pytest.approx(sync(4 * p.dense, 16, bandwidth, latency))
            assert t.forward_gather == (0 if zero == 0 else pytest.approx(
                comm.all_gather_seconds(2 * p.dense, 16, bandwidth, latency)))



def test_the_terms_of_chosen_stages_are_those_stages_terms():
    # the solver's data-parallel floor reads the end stages only (solve/coefficients.py)
    model, cluster = load_model("deepseek-v3"), ClusterSpec(device_preset("h800"), 256)
    s = Strategy(dp=4, tp=4, pp=16, ep=8, mbs=1, mbn=64, zero=1, sp=True)
    run = RunSpec(global_batch=256, seq_len=4096)
    every = data_parallel_terms(model, cluster, run, s)
    assert len(every) == 16 and every[0] != every[7]
    assert data_parallel_terms(model, cluster, run, s, (0, 15)) == (every[0], every[15])
    assert data_parallel_terms(model, cluster, run, s, (7,)) == (every[7],)


# -- FSDP's passes over the gradients (docs/formulas.md §7.3) -----------------------------------------------------
def test_fsdp1_moves_18_bytes_a_parameter_every_microbatch_before_an_fp32_reduction():
    # torch 2.1 FSDP1, bf16 parameters: autograd concatenates the views' gradients into the flat gradient (read 2 B,
    # write 2 B), _post_backward_hook casts it to the fp32 reduce dtype (read 2, write 4) and _reduce_grad divides
    # it in place (read 4, write 4): 18 B a local parameter, at HBM speed, every micro-batch it reduce-scatters.
    # With a bf16 reduction no cast: 2 + 2 + 2 + 2 = 8 B. Megatron's own reduces from its main-grad buffer: none.
    s = Strategy(dp=64, mbs=1, mbn=4, zero=3)
    (params,) = stage_parameters(LLAMA_8B, s)
    local = params.dense + params.expert
    hbm = H100_64.device.hbm_bandwidth
    for grad_dtype, per_parameter in (("fp32", 18), ("bf16", 8)):
        run = RunSpec(global_batch=256, seq_len=4096, grad_dtype=grad_dtype, fsdp_version="fsdp1")
        (terms,) = data_parallel_terms(LLAMA_8B, H100_64, run, s)
        assert terms.gradient_passes(4) == pytest.approx(4 * per_parameter * local / hbm)
        (megatron,) = data_parallel_terms(LLAMA_8B, H100_64, replace(run, fsdp_version="trainer"), s)
        assert megatron.gradient_passes(4) == 0
        # the step pays them whole, on top of what it paid before: they hide behind nothing
        assert estimate_time(LLAMA_8B, H100_64, run, s).step_seconds == pytest.approx(
            estimate_time(LLAMA_8B, H100_64, replace(run, fsdp_version="trainer"), s).step_seconds
            + 4 * per_parameter * local / hbm)
    # no sharded data parallelism, no FSDP: ZeRO-0/1 pay nothing
    run = RunSpec(global_batch=256, seq_len=4096, fsdp_version="fsdp1")
    assert all(data_parallel_terms(LLAMA_8B, H100_64, run, s.with_zero(z))[0].gradient_passes(4) == 0
               for z in (0, 1))


def test_fsdp1_concatenates_every_microbatch_and_casts_and_divides_once_per_reduction():
    # under no_sync (grad_sync step) the flat gradient still forms every micro-batch (4 B), the fp32 cast and the
    # divide (14 B) run once, before the one reduce-scatter
    s = Strategy(dp=64, mbs=1, mbn=4, zero=3)
    (params,) = stage_parameters(LLAMA_8B, s)
    run = RunSpec(global_batch=256, seq_len=4096, fsdp_version="fsdp1", grad_sync="step")
    (terms,) = data_parallel_terms(LLAMA_8B, H100_64, run, s)
    assert terms.gradient_passes(4) == pytest.approx((4 * 4 + 14) * (params.dense + params.expert)
                                                     / H100_64.device.hbm_bandwidth)


def test_fsdp2_copies_the_gradients_into_the_reduce_scatter_input_in_the_reduce_dtype():
    # torch 2.4+ foreach_reduce: _chunk_cat of the bf16 gradients into the fp32 reduce-scatter input (read 2 B,
    # write 4 B); NCCL's ReduceOp.AVG divides, no pass of its own. torchtitan's FSDP is FSDP2.
    s = Strategy(dp=64, mbs=1, mbn=4, zero=3)
    (params,) = stage_parameters(LLAMA_8B, s)
    for run in (RunSpec(global_batch=256, seq_len=4096, trainer="torchtitan"),
                RunSpec(global_batch=256, seq_len=4096, fsdp_version="fsdp2")):
        (terms,) = data_parallel_terms(LLAMA_8B, H100_64, run, s)
        assert terms.gradient_passes(4) == pytest.approx(4 * 6 * (params.dense + params.expert)
                                                         / H100_64.device.hbm_bandwidth)


# -- what each setting costs -------------------------------------------------------------------------------------
LLAMA_8B, H100_64 = load_model("llama3-8b"), ClusterSpec(device_preset("h100"), 64)


def _llama(zero, pp=1, **run_fields):
    run = RunSpec(global_batch=128, seq_len=4096, **run_fields)
    return run, Strategy(dp=64 // (2 * pp), tp=2, pp=pp, mbs=1, mbn=4, zero=zero, sp=True)


def test_one_gradient_reduction_per_step_costs_a_full_buffer():
    run, s = _llama(2, grad_sync="step")
    base_run, _ = _llama(2)
    params = stage_parameters(LLAMA_8B, s)[0]
    full = model_state_bytes(run, s, params)["gradients"] - model_state_bytes(base_run, s, params)["gradients"]
    assert full == pytest.approx(run.grad_bytes * (params.dense + params.expert))
    # ... and ZeRO-2 then syncs exactly as the distributed optimizer does
    assert step_and_peak(LLAMA_8B, H100_64, run, s)[0] == pytest.approx(
        step_and_peak(LLAMA_8B, H100_64, base_run, s.with_zero(1))[0], rel=1e-12)
    assert step_and_peak(LLAMA_8B, H100_64, run, s)[0] < step_and_peak(LLAMA_8B, H100_64, base_run, s)[0]


@pytest.mark.parametrize("pp", [1, 2])
def test_keeping_parameters_gathered_trades_memory_for_gathers(pp):
    times, peaks = [], []
    for gather in ("forward-backward", "microbatch", "step"):
        run, s = _llama(3, pp, param_gather=gather)
        time, peak = step_and_peak(LLAMA_8B, H100_64, run, s)
        times.append(time)
        peaks.append(peak)
    assert times[0] > times[1] > times[2]  # 2 gathers per micro-batch, 1, 1 per step
    assert peaks[0] < peaks[1] == peaks[2]  # the stage's parameters unsharded instead of two layers' buffers


def test_torchtitan_with_pipeline_holds_gradients_and_parameters_over_the_step():
    # torch.distributed.pipelining + apply_fsdp: ZeRO-3 then syncs as ZeRO-2 would with one gather per step, and
    # holds both a full gradient buffer and the gathered parameters (fp32 shards + bf16 copy, fp32 gradients). Its
    # reduce-scatter and gather run per layer (one fully_shard unit per block), each paying the ring's latency
    # (docs/formulas.md §7.2): L - 1 more latencies of the n-1 step ring than ZeRO-2's one collective each
    run, s = _llama(3, pp=2, trainer="torchtitan")
    params, d = stage_parameters(LLAMA_8B, s)[0], s.dp * s.cp
    states = model_state_bytes(run, s, params)
    assert states["parameters"] == pytest.approx(params.dense * (4 / d + 2))
    assert states["gradients"] == pytest.approx(params.dense * (4 / d + 4))
    three, two = (data_parallel_terms(LLAMA_8B, H100_64, run, s.with_zero(z))[0] for z in (3, 2))
    latency = comm.ring_link(H100_64, ("cp", "dp"), {"tp": s.tp, "cp": s.cp, "dp": s.dp})[1]
    extra = (params.layers - 1) * (d - 1) * latency
    assert three.gradients == pytest.approx(two.gradients + extra, rel=1e-12)
    assert three.forward_gather == pytest.approx(two.forward_gather + extra, rel=1e-12)
    assert step_and_peak(LLAMA_8B, H100_64, run, s)[0] >= step_and_peak(LLAMA_8B, H100_64, run, s.with_zero(2))[0]


def test_one_microbatch_makes_zero2_sync_like_zero1():
    run = RunSpec(global_batch=32, seq_len=4096)
    s = Strategy(dp=32, tp=2, pp=1, mbs=1, mbn=1, zero=1, sp=True)
    assert step_and_peak(LLAMA_8B, H100_64, run, s.with_zero(2))[0] == pytest.approx(
        step_and_peak(LLAMA_8B, H100_64, run, s)[0], rel=1e-12)


def test_llama3_70b_on_512_h100_sharding_is_not_free_over_one_nic():
    # The README question (GBS 1024, seq 8192), tp=8: one rank of each DP group per node, so its rings cross between
    # nodes over one 50 GB/s NIC. ZeRO-2 reduce-scatters 8.8B fp32 gradients every micro-batch, ZeRO-3 also gathers
    # twice. With tp=4 the group has two ranks per node and its rings two NICs: ZeRO-2's 7 extra reduce-scatters hide
    # behind the backward, all but their last bucket (1 of 80 layers) and what the 16 of 132 SMs NCCL holds while
    # the rest run take from it.
    model, cluster = load_model("llama3-70b"), ClusterSpec(device_preset("h100"), 512)
    run = RunSpec(global_batch=1024, seq_len=8192)
    for tp, dp, mbn, cost in ((8, 64, 16, 1.05), (4, 128, 8, 1.0)):
        base = Strategy(dp=dp, tp=tp, pp=1, mbs=1, mbn=mbn, zero=1, sp=True, recompute=RecomputePlan.uniform("none"))
        (t1, m1), (t2, m2), (t3, m3) = (step_and_peak(model, cluster, run, base.with_zero(z)) for z in (1, 2, 3))
        assert t2 >= cost * t1
        assert t3 >= t2
        assert m1 > m2 > m3  # what the time buys
        if tp == 4:
            (zero2,) = data_parallel_terms(model, cluster, run, base.with_zero(2))
            assert t2 - t1 == pytest.approx((mbn - 1) * zero2.gradients * (1 / 80 + 79 / 80 * 16 / 132))


# -- more sharding is never free in time -------------------------------------------------------------------------
@st.composite
def dp_problems(draw):
    heads = draw(st.sampled_from([8, 16]))
    moe = None
    if draw(st.booleans()):
        moe = MoESpec(experts=draw(st.sampled_from([4, 8])), top_k=2, expert_ffn_hidden=heads * 64)
    model = ModelSpec("random", draw(st.sampled_from([2, 4, 8])), heads * 64, heads, heads * 256,
                      draw(st.sampled_from([1000, 32000])), kv_heads=draw(st.sampled_from([heads, heads // 4])),
                      moe=moe)
    tp, pp, cp = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    dp, mbs, mbn = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2])), draw(st.integers(1, 8))
    ep = draw(st.sampled_from([1, 2, 4])) if moe else 1
    strategy = Strategy(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, mbs=mbs, mbn=mbn, zero=1, sp=tp > 1,
                        recompute=RecomputePlan.uniform(draw(st.sampled_from(["none", "selective", "full"]))))
    device = device_preset(draw(st.sampled_from(["a100-80g", "h100", "mi300x"])))
    cluster = ClusterSpec(device, dp * tp * pp * cp).with_overrides(
        devices_per_node=draw(st.sampled_from([1, 2, 8])))  # 1 and 2: DP across nodes
    run = RunSpec(global_batch=dp * mbs * mbn, seq_len=draw(st.sampled_from([1024, 4096])),
                  trainer=(trainer := draw(st.sampled_from(["megatron", "torchtitan"]))),
                  grad_sync=draw(st.sampled_from(GRAD_SYNCS)), param_gather=draw(st.sampled_from(PARAM_GATHERS)),
                  fsdp_version=draw(st.sampled_from(("trainer",) + BEHAVIOURS[trainer].fsdp_versions)))
    return model, cluster, run, strategy


@settings(max_examples=150, deadline=None)
@given(dp_problems())
def test_more_sharding_is_never_faster(problem):
    model, cluster, run, strategy = problem
    try:
        assume(strategy_refusal(model, cluster, run, strategy) is None)
    except SpecError:
        assume(False)
    t1, t2, t3 = (estimate_time(model, cluster, run, strategy.with_zero(z)).step_seconds for z in (1, 2, 3))
    assert t2 >= t1 * (1 - 1e-12)
    assert t3 >= t2 * (1 - 1e-12)
    defaults = run.trainer == "megatron" and run.grad_sync == "trainer"
    if defaults and strategy.mbn > 1 and strategy.dp * strategy.cp > 1:
        assert t2 > t1  # ZeRO-2 reduces every micro-batch; at least the last buckets show


# -- the solver still proves the estimators' optimum ---------------------------------------------------------------
SYNC_RUNS = st.fixed_dictionaries({"trainer": st.sampled_from(["megatron", "torchtitan"]),
                                   "grad_sync": st.sampled_from(GRAD_SYNCS),
                                   "param_gather": st.sampled_from(PARAM_GATHERS),
                                   "fsdp_version": st.sampled_from(FSDP_VERSIONS),
                                   # nodes of 1 or 2 devices on a slow network: DP sync that shows
                                   "devices_per_node": st.sampled_from([1, 2, 8]),
                                   "inter_node_bandwidth": st.sampled_from([1e9, 25e9])}).filter(
    lambda fields: fields["fsdp_version"] != "fsdp1" or fields["trainer"] == "megatron")


def _with_sync(space, fields):
    fields = dict(fields)
    # the nodes are the scale-up domains here (the drawn space may have wider domains: tests/solve)
    cluster = space.cluster.with_overrides(devices_per_node=fields.pop("devices_per_node"), devices_per_domain=0,
                                           pod_size=0, inter_node_bandwidth=fields.pop("inter_node_bandwidth"))
    return replace(space, cluster=cluster, run=replace(space.run, **fields),
                   options=replace(space.options, zero_stages=(0, 1, 2, 3)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(space=problems(), fields=SYNC_RUNS)
def test_uniform_search_equals_the_oracle_for_every_sync_setting(space, fields):
    space = _with_sync(space, fields)
    assert_uniform_search_matches_oracle(space, top=2)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=small_problems(), fields=SYNC_RUNS, offset=st.sampled_from([0, 1]))
def test_plan_search_equals_the_oracle_for_every_sync_setting(space, fields, offset):
    space = _with_sync(space, fields)
    space = replace(space, options=replace(space.options, max_offset=offset))
    assert_plan_search_matches_oracle(space, top=2)


def _proven_on_one_gpu_per_node(layers: int, activation: str, device: str, bandwidth: float, modes: tuple, run: dict,
                                host_memory: int | None = None):
    """The plan search on a small model over 4 GPUs, one per node (every DP sync crosses the network), ZeRO 0-3,
    uneven partitions within 1 layer: it must prove the oracle's top 2."""
    from ndcp.space import SearchSpace, SpaceOptions
    model = ModelSpec(name="small", layers=layers, hidden=256, heads=4, kv_heads=1, ffn_hidden=512, vocab=1000,
                      activation=activation)
    overrides = {"host_memory_bytes": host_memory} if host_memory else {}
    cluster = ClusterSpec(device_preset(device), 4).with_overrides(devices_per_node=1, inter_node_bandwidth=bandwidth,
                                                                   **overrides)
    options = SpaceOptions(zero_stages=(0, 1, 2, 3), max=(("pp", 2), ("cp", 1), ("vpp", 1)), recompute_modes=modes,
                           max_offset=1)
    space = SearchSpace(model, cluster, RunSpec(global_batch=4, seq_len=1024, reserve_bytes=2**20, **run), options)
    _, solved = assert_plan_search_matches_oracle(space, top=2)
    assert solved.status == "optimal"


def test_uneven_partitions_price_the_sync_of_the_layers_a_stage_holds():
    # Found by CI (hypothesis): on a 1 GB/s network a layer's gradients take 2 ms of a 7 ms step. The plan model once
    # priced every stage's sync at its fewest layers, 5 % below the plans it verified, and enumerated plan after
    # plan until its time ran out ("feasible"); with the sync affine in the stage's layers it proves the oracle's top 2.
    _proven_on_one_gpu_per_node(4, "gelu", "a100-80g", 1e9, ("none", "selective", "mlp", "full"), {})


def test_a_sub_model_the_tuned_search_stalls_on_is_proven_by_the_default_branching():
    # Found by hypothesis: ZeRO-3 gathering in forward and backward over a 1 GB/s network, uneven partitions. On the
    # first sub-model (43 variables) the LP-guided search stalled 2.7 % above the optimum for the whole 60 s
    # ("feasible", one strategy of the oracle's two); after TUNED_DETERMINISTIC_SECONDS the default branching proves
    # it at once.
    _proven_on_one_gpu_per_node(4, "swiglu", "a100-80g", 1e9, ("none", "selective", "mlp", "full"),
                                {"trainer": "megatron", "grad_sync": "microbatch", "param_gather": "forward-backward"})


def test_uneven_partitions_price_the_last_bucket_of_the_layers_a_stage_holds():
    # Found by hypothesis: gradients synced after every micro-batch on 1 GPU per node; the last bucket (1/L of a
    # stage's sync, never hidden) was priced at the most layers a stage may hold, 1/4 where a stage of 2 layers
    # pays 1/2: the plan model sat 6 % below every plan it verified and enumerated plans until the 60 s limit
    # ("feasible"). Bounded by the lines through 1/L x the sync at each layer count, it proves the oracle's top 2.
    _proven_on_one_gpu_per_node(5, "gelu", "h100", 25e9, ("none", "selective", "mlp", "offload"),
                                {"trainer": "megatron", "grad_sync": "microbatch", "param_gather": "step"},
                                host_memory=2**30)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(space=problems(), fields=SYNC_RUNS)
def test_bounds_stay_below_the_estimators_for_every_sync_setting(space, fields):
    bounds_hold.hypothesis.inner_test(space=_with_sync(space, fields))


# -- command line ------------------------------------------------------------------------------------------------
TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "512"]


def test_cli_settings_reach_the_run_and_its_json(capsys):
    code = main(["estimate", *TINY, "--strategy", "tp=2,zero=3", "--grad-sync", "step", "--param-gather", "microbatch",
                 "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    run = json.loads(out)["run"]
    assert (run["grad_sync"], run["param_gather"]) == ("step", "microbatch")
    assert_one_line_error(*run_cli(capsys, "estimate", *TINY, "--grad-sync", "sometimes"), "--grad-sync")
