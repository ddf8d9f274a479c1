"""The step's fixed costs (estimate/step_costs.py, docs/formulas.md §8.1): the gradient buffer zeroed over every
local parameter, under FP8 one cast of each local weight of the FP8 GEMMs, the scalar all-reduces of the gradient
norm and the loss; a part of the step of their own, the same whatever the micro-batch count."""
import pytest

from ndcp.estimate.parameters import stage_parameters
from ndcp.estimate.communication import few_byte_all_reduce_seconds
from ndcp.estimate.step_costs import STEP_SCALAR_SYNCS, step_cost_seconds
from ndcp.estimate.time import PART_KEYS, estimate_time
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model

H100 = device_preset("h100")
LLAMA_405B = load_model("llama3.1-405b")
# one Llama-3.1-405B layer's linear weights: QKV 16384 x (16384 + 2 x 8 x 128), output 16384 x 16384, gate, up and
# down 3 x 16384 x 53248
LLAMA_405B_LAYER_WEIGHTS = 16384 * (16384 + 2 * 1024 + 16384) + 3 * 16384 * 53248


def test_the_scalar_all_reduces_are_few_byte_all_reduces_over_the_whole_job():
    """Nothing to zero: the two syncs alone, each NCCL's few-byte all-reduce over every device (communication.py):
    on 128 nodes its LL tree, 6.8 + 2 x (7 x 0.6 + 7 x 5.0) = 85.2 us; one device syncs with nobody."""
    run = RunSpec(global_batch=512, seq_len=8192)
    cluster = ClusterSpec(H100, 1024)
    assert step_cost_seconds(run, cluster, 0, 0, 1024) == pytest.approx(STEP_SCALAR_SYNCS * 85.2e-6)
    assert step_cost_seconds(run, cluster, 0, 0, 1024) == STEP_SCALAR_SYNCS * few_byte_all_reduce_seconds(cluster, 1024)
    assert step_cost_seconds(run, ClusterSpec(H100, 1), 0, 0, 1) == 0.0


def test_the_step_zeroes_the_gradient_buffer_of_every_local_parameter():
    run = RunSpec(global_batch=512, seq_len=8192, grad_dtype="bf16")
    cluster = ClusterSpec(H100, 1024)
    # 6.3 B local parameters (405B over tp 8 x pp 8), 2-byte gradients at 3.35 TB/s, and two scalar syncs
    seconds = step_cost_seconds(run, cluster, 6.3e9, 6.2e9, 1024)  # a 16-bit run casts nothing
    assert seconds == pytest.approx(6.3e9 * 2 / 3.35e12 + STEP_SCALAR_SYNCS * 85.2e-6)


@pytest.mark.parametrize("global_batch", [512, 1536])
def test_step_costs_are_a_part_of_the_step_that_no_micro_batch_count_changes(global_batch):
    """The GBS sweep of Llama-3.1-405B on 1,024 H100 (Megatron-Bridge 25.11 and 26.04.01, tp 8 pp 8 cp 2 vpp 8):
    the fixed costs do not grow with the batch, and the parts still add up to the step."""
    run = RunSpec(global_batch=global_batch, seq_len=8192, precision="fp8", fp8_recipe="tensorwise",
                  grad_dtype="bf16")
    plan = Strategy(tp=8, pp=8, cp=2, dp=8, vpp=8, mbs=1, mbn=global_batch // 8, zero=1, sp=True)
    cluster = ClusterSpec(H100, 1024)
    estimate = estimate_time(LLAMA_405B, cluster, run, plan)
    assert "step_costs" in PART_KEYS and set(estimate.parts) == set(PART_KEYS)
    assert sum(estimate.parts.values()) == pytest.approx(estimate.step_seconds)
    stages = stage_parameters(LLAMA_405B, plan)
    local, cast = max(p.dense + p.expert for p in stages), max(p.fp8_weights for p in stages)
    assert cast == 16 * LLAMA_405B_LAYER_WEIGHTS / 8  # the fullest stage's 16 layers, tp 8; nothing else is cast
    assert estimate.parts["step_costs"] == pytest.approx(step_cost_seconds(run, cluster, local, cast, 1024), rel=0.05)


def test_fp8_casts_the_fp8_gemms_weights_once_a_step():
    """The FP8 run's fixed costs over the BF16 run's (both with 16-bit gradients): one tensorwise cast on Hopper
    (5 bytes, plus 1 for the transpose) of each local weight of an FP8 GEMM, the 16-bit embedding, output layer and
    norms not cast. Llama-3.1-405B tp 8 pp 8: 126 layers over 8 stages, the fullest holds 16."""
    from ndcp.estimate.data_parallel import data_parallel_terms
    plan = Strategy(tp=8, pp=8, dp=16, mbs=1, mbn=64, zero=1, sp=True)
    fp8, bf16 = (RunSpec(global_batch=1024, seq_len=8192, precision=p, fp8_recipe="tensorwise", grad_dtype="bf16")
                 for p in ("fp8", "bf16"))
    cluster = ClusterSpec(H100, 1024)
    extra = [a.step_costs - b.step_costs for a, b in zip(*(data_parallel_terms(LLAMA_405B, cluster, run, plan)
                                                           for run in (fp8, bf16)))]
    layers = [p.layers for p in stage_parameters(LLAMA_405B, plan)]
    assert max(layers) == 16 and sum(layers) == 126
    assert extra == pytest.approx([6.0 * n * LLAMA_405B_LAYER_WEIGHTS / 8 / H100.hbm_bandwidth for n in layers])
