"""The step's fixed costs (estimate/step_costs.py, docs/formulas.md §8.1): the gradient buffer zeroed over every
local parameter, the scalar all-reduces of the gradient norm and the loss; a part of the step of their own, the same
whatever the micro-batch count."""
import pytest

from ndcp.estimate.parameters import stage_parameters
from ndcp.estimate.communication import few_byte_all_reduce_seconds
from ndcp.estimate.step_costs import STEP_SCALAR_SYNCS, step_cost_seconds
from ndcp.estimate.time import PART_KEYS, estimate_time
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model

H100 = device_preset("h100")
LLAMA_405B = load_model("llama3.1-405b")


def test_the_scalar_all_reduces_are_few_byte_all_reduces_over_the_whole_job():
    """Nothing to zero: the two syncs alone, each NCCL's few-byte all-reduce over every device (communication.py):
    on 128 nodes its LL tree, 6.8 + 2 x (7 x 0.6 + 7 x 5.0) = 85.2 us; one device syncs with nobody."""
    run = RunSpec(global_batch=512, seq_len=8192)
    cluster = ClusterSpec(H100, 1024)
    assert step_cost_seconds(run, cluster, 0, 1024) == pytest.approx(STEP_SCALAR_SYNCS * 85.2e-6)
    assert step_cost_seconds(run, cluster, 0, 1024) == STEP_SCALAR_SYNCS * few_byte_all_reduce_seconds(cluster, 1024)
    assert step_cost_seconds(run, ClusterSpec(H100, 1), 0, 1) == 0.0


def test_the_step_zeroes_the_gradient_buffer_of_every_local_parameter():
    run = RunSpec(global_batch=512, seq_len=8192, grad_dtype="bf16")
    cluster = ClusterSpec(H100, 1024)
    # 6.3 B local parameters (405B over tp 8 x pp 8), 2-byte gradients at 3.35 TB/s, and two scalar syncs
    seconds = step_cost_seconds(run, cluster, 6.3e9, 1024)
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
    local = max(p.dense + p.expert for p in stage_parameters(LLAMA_405B, plan))
    assert estimate.parts["step_costs"] == pytest.approx(step_cost_seconds(run, cluster, local, 1024), rel=0.05)
