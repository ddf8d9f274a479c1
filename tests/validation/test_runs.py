"""Reading a measured run's cluster (ndcp/validation/runs.py): the preset, and the network a source states."""
import pytest

from ndcp.specs.device import device_preset
from ndcp.specs.fields import SpecError
from ndcp.validation.runs import read_rows


def _row(tmp_path, cluster: str):
    path = tmp_path / "runs.yaml"
    path.write_text(
        "runs:\n"
        "- id: stated\n"
        "  model: {name: llama-like, layers: 32, hidden: 4096, heads: 32, kv_heads: 32, ffn_hidden: 11008,\n"
        "          vocab: 32000, seq_len: 4096, activation: swiglu}\n"
        f"  cluster: {{gpu: a100_80gb_sxm, num_gpus: 128, gpus_per_node: 8{cluster}}}\n"
        "  training: {global_batch: 256, precision: bf16, fsdp_version: fsdp1, grad_dtype: bf16}\n"
        "  strategy: {tp: 1, pp: 1, dp: 128, micro_batch: 2, zero_stage: 3, sp: null, recompute: none, dp_shard: 8}\n"
        "  outcome: {tokens_per_s_per_gpu: 3760}\n")
    return read_rows(path)[0][1]()


def test_a_stated_node_network_is_shared_by_the_nodes_devices(tmp_path):
    """cluster.scale_out_gbps_per_node: 400 Gb/s over a node of 8 GPUs is 50 Gb/s = 6.25 GB/s per GPU (the fms-fsdp
    A100 cluster), where the a100 preset has one HDR 200 Gb/s NIC per GPU (25 GB/s); nothing else of the device
    changes, and an unstated figure keeps the preset's."""
    preset = device_preset("a100-80g")
    stated, unstated = _row(tmp_path, ", scale_out_gbps_per_node: 400"), _row(tmp_path, "")
    assert stated.cluster.device.inter_node_bandwidth == pytest.approx(6.25e9)
    assert unstated.cluster.device.inter_node_bandwidth == preset.inter_node_bandwidth == 25e9
    assert stated.cluster.device.intra_node_bandwidth == preset.intra_node_bandwidth
    assert stated.cluster.device.scale_out_efficiency == preset.scale_out_efficiency


@pytest.mark.parametrize("value", ["0", "-400", "fast"])
def test_a_node_network_that_is_not_a_positive_rate_is_the_rows_error(tmp_path, value):
    with pytest.raises(SpecError, match="cluster.scale_out_gbps_per_node.*positive number of Gb/s"):
        _row(tmp_path, f", scale_out_gbps_per_node: {value}")


def _moe_row(tmp_path, training: str):
    path = tmp_path / "moe.yaml"
    path.write_text(
        "runs:\n"
        "- id: delayed\n"
        "  model: mixtral-8x7b\n"
        "  cluster: {gpu: h100_sxm_80gb, num_gpus: 64, gpus_per_node: 8}\n"
        f"  training: {{global_batch: 256, precision: bf16, seq_len: 4096{training}}}\n"
        "  strategy: {tp: 1, pp: 1, dp: 64, ep: 8, micro_batch: 1, zero_stage: 1, sp: null, recompute: none}\n"
        "  outcome: {tokens_per_s_per_gpu: 3000}\n")
    return read_rows(path)[0][1]()


def test_a_stated_weight_gradient_delay_is_read_under_the_expert_overlap(tmp_path):
    """training.delay_wgrad_compute (RunSpec.delay_wgrad_compute): what the row's recipe sets, read beside its
    `overlap: ep`; unstated, Megatron's default (off)."""
    assert _moe_row(tmp_path, ", overlap: ep, delay_wgrad_compute: true").run.delay_wgrad_compute is True
    assert _moe_row(tmp_path, ", overlap: ep").run.delay_wgrad_compute is False


def test_a_weight_gradient_delay_without_the_expert_overlap_is_the_rows_error(tmp_path):
    with pytest.raises(SpecError, match="delay_wgrad_compute=True is not valid; Megatron delays the weight gradients "
                                        "only under the expert all-to-all overlap"):
        _moe_row(tmp_path, ", delay_wgrad_compute: true")
