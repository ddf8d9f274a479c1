"""Reading a measured run's cluster (ndcp/validation/runs.py): the preset, and the network a source states."""
from pathlib import Path

import pytest

from ndcp.estimate.overlap import requested
from ndcp.specs.device import device_preset
from ndcp.specs.fields import SpecError
from ndcp.validation.runs import read_rows
from ndcp.validation.values import SkipRun

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _one_row(tmp_path, model: str, cluster: str, training: str, strategy: str, outcome: str):
    """The one run of a runs file with these YAML flow mappings (model a name or a mapping), as read_rows builds it."""
    path = tmp_path / "runs.yaml"
    path.write_text(f"runs:\n- id: stated\n  model: {model}\n  cluster: {cluster}\n  training: {training}\n"
                    f"  strategy: {strategy}\n  outcome: {outcome}\n")
    return read_rows(path)[0][1]()


def _row(tmp_path, cluster: str):
    """fms-fsdp's Llama-2-7B-like FSDP row on 128 A100s, its cluster extended by `cluster`."""
    return _one_row(tmp_path, "{name: llama-like, layers: 32, hidden: 4096, heads: 32, kv_heads: 32, "
                    "ffn_hidden: 11008, vocab: 32000, seq_len: 4096, activation: swiglu}",
                    f"{{gpu: a100_80gb_sxm, num_gpus: 128, gpus_per_node: 8{cluster}}}",
                    "{global_batch: 256, precision: bf16, fsdp_version: fsdp1, grad_dtype: bf16}",
                    "{tp: 1, pp: 1, dp: 128, micro_batch: 2, zero_stage: 3, sp: null, recompute: none, dp_shard: 8}",
                    "{tokens_per_s_per_gpu: 3760}")


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
    """Mixtral-8x7B on 64 H100s with EP 8, stating `training` beside its batch and precision."""
    return _one_row(tmp_path, "mixtral-8x7b", "{gpu: h100_sxm_80gb, num_gpus: 64, gpus_per_node: 8}",
                    f"{{global_batch: 256, precision: bf16, seq_len: 4096{training}}}",
                    "{tp: 1, pp: 1, dp: 64, ep: 8, micro_batch: 1, zero_stage: 1, sp: null, recompute: none}",
                    "{tokens_per_s_per_gpu: 3000}")


def test_a_stated_weight_gradient_delay_is_read_under_the_expert_overlap(tmp_path):
    """training.delay_wgrad_compute (RunSpec.delay_wgrad_compute): what the row's recipe sets, read beside its
    `overlap: ep`; unstated, Megatron's default (off)."""
    assert _moe_row(tmp_path, ", overlap: ep, delay_wgrad_compute: true").run.delay_wgrad_compute is True
    assert _moe_row(tmp_path, ", overlap: ep").run.delay_wgrad_compute is False


def test_a_weight_gradient_delay_without_the_expert_overlap_is_the_rows_error(tmp_path):
    with pytest.raises(SpecError, match="delay_wgrad_compute=True is not valid; Megatron delays the weight gradients "
                                        "only under the expert all-to-all overlap"):
        _moe_row(tmp_path, ", delay_wgrad_compute: true")


def _fp8_row(tmp_path, training: str):
    """A Megatron row on 8 H100s stating `training` (its precision among it)."""
    return _one_row(tmp_path, "llama3-8b", "{gpu: h100_sxm_80gb, num_gpus: 8, gpus_per_node: 8}",
                    f"{{global_batch: 64, seq_len: 8192{training}}}",
                    "{tp: 1, pp: 2, dp: 4, micro_batch: 1, zero_stage: 1, sp: null, recompute: none}",
                    "{tokens_per_s_per_gpu: 9000}")


def test_a_row_states_the_layers_its_recipe_keeps_in_bf16(tmp_path):
    """training.first_layers_bf16 / last_layers_bf16 (RunSpec's: Megatron's --first-last-layers-bf16 counts), read
    once the FP8 recipe is: unstated, none; in a BF16 row or under delayed scaling, the row's error."""
    kept = _fp8_row(tmp_path, ", precision: fp8, fp8_recipe: tensorwise, first_layers_bf16: 1, last_layers_bf16: 2")
    assert kept.run.bf16_layers == (1, 2)
    assert _fp8_row(tmp_path, ", precision: fp8, fp8_recipe: tensorwise").run.bf16_layers == (0, 0)
    with pytest.raises(SpecError, match="first_layers_bf16=1 is not valid; BF16 first/last layers exist only inside "
                                        "an FP8 run"):
        _fp8_row(tmp_path, ", precision: bf16, first_layers_bf16: 1")
    with pytest.raises(SpecError, match="delayed scaling"):
        _fp8_row(tmp_path, ", precision: fp8, fp8_recipe: delayed, last_layers_bf16: 1")


def _training_row(tmp_path, training: str):
    """A Megatron row on 8 H100s stating `training` beside its batch and precision."""
    return _one_row(tmp_path, "{name: llama-like, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, "
                    "vocab: 128256, seq_len: 2048, activation: swiglu}",
                    "{gpu: h100_sxm_80gb, num_gpus: 8, gpus_per_node: 8}",
                    f"{{global_batch: 8, precision: bf16{training}}}",
                    "{tp: 4, pp: 1, dp: 2, micro_batch: 1, zero_stage: 1, sp: true, recompute: none}",
                    "{tflops_per_gpu: 400}")


def test_a_row_states_the_overlaps_its_recipe_ran(tmp_path):
    """training.overlap (runs.py): RunSpec.overlap's syntax, what the row's recipe turns on (the Megatron-Bridge
    Llama rows: tp_comm_overlap with the pipeline sends); unstated, the trainer's defaults; an unknown one is the
    row's error, naming the field."""
    assert requested(_training_row(tmp_path, ", overlap: tp+p2p").run) == {"tp", "p2p"}
    assert requested(_training_row(tmp_path, "").run) == {"p2p"}  # Megatron's default
    with pytest.raises(SpecError, match="overlap"):
        _training_row(tmp_path, ", overlap: userbuffers")
    measured = dict(read_rows(EXAMPLES / "measured_runs_2.yaml"))
    assert requested(measured["mbr26041_llama31_405b_h100_fp8_1024_gbs1536"]().run) == {"tp", "p2p"}


def test_a_row_states_the_loss_kernel_its_recipe_ran(tmp_path):
    """training.loss_kernel (RunSpec.loss_kernel): what the row's recipe runs (Megatron-Bridge's performance recipes:
    Transformer Engine's); unstated, a Megatron row ran Megatron-LM's own default, unfused, stated as its kernel (ndcp's
    Megatron files default to the fused one) and said in the row's assumptions; another trainer's row its trainer's;
    an unknown kernel is the row's error, naming the field and the valid kernels."""
    stated, unstated = _training_row(tmp_path, ", loss_kernel: te"), _training_row(tmp_path, "")
    assert stated.run.loss_kernel == "te" and not any("loss kernel" in a for a in stated.assumptions)
    assert unstated.run == _training_row(tmp_path, ", loss_kernel: unfused").run
    assert "loss kernel unfused (Megatron-LM's default; unstated)" in unstated.assumptions
    titan = dict(read_rows(EXAMPLES / "published_runs.yaml"))["torchtitan_l31_8b_fsdp8_bf16"]()
    assert titan.run.loss_kernel == "trainer" and "loss kernel eager (the trainer's; unstated)" in titan.assumptions
    with pytest.raises(SpecError, match="loss_kernel='fused'.*valid: trainer, unfused, native, te, flash, eager"):
        _training_row(tmp_path, ", loss_kernel: fused")


def test_the_measured_rows_state_the_loss_their_stack_runs():
    """The rows whose source or recipe tells the loss state it (examples/*.yaml, each with the file and line it read):
    Megatron-Bridge Transformer Engine's, NeMo 2 (dgxc-benchmarking Llama 3.1) Megatron-Core's native fused one,
    Megatron-LM's own rows and its functional tests the unfused default, llm-foundry flash-attn's, AutoModel and
    fms-fsdp PyTorch's eager loss; the Megatron-Core r0.8.0 and NeMo 24.07 rows cannot tell and keep Megatron-LM's
    default, unfused."""
    rows = dict(read_rows(EXAMPLES / "published_runs.yaml")) | dict(read_rows(EXAMPLES / "measured_runs_2.yaml"))
    expect = {"mbr2511_llama3_8b_h100_fp8cs_8": "te", "dgxc_llama31_8b_h100_bf16_8": "native",
              "narayanan2021_t1_1.7b": "unfused", "mlmft_gpt7b_h100_bf16_8_tp4pp1": "unfused",
              "mpt_h100_1b_s2048_64": "flash", "automodel_llama3_70b_h100_bf16_64": "eager",
              "fmsfsdp_llama2_7b_a100_128": "eager", "mcore_r080_h100_1.7b": "unfused",
              "nemo2407_gpt3_5b_h100_fp8_64": "unfused"}
    assert {run_id: rows[run_id]().run.loss_kernel for run_id in expect} == expect


def _csv_row(tmp_path, cells: str):
    """The one run of a runs CSV whose columns after the required ones are step_seconds and memory_gib."""
    path = tmp_path / "runs.csv"
    path.write_text(f"id,model,device,gpus,global_batch,seq_len,tp,pp,dp,step_seconds,memory_gib\nr1,{cells}\n")
    return read_rows(path)[0][1]()


@pytest.mark.parametrize("cells, message", [
    ("llama3-8b,h100,16,64,4096,2,1,8,1.7,50GiB", "memory_gib='50GiB' is not valid; expected a number"),
    ("llama3-8b,h100,16,64,4096,2,1,8,1.7s,50", "step_seconds='1.7s' is not valid; expected a number"),
    ("llama3-8b,h100,16x,64,4096,2,1,8,1.7,50", "gpus='16x' is not valid; expected a whole number >= 1"),
    ("llama3-8b,h100,16,64,4k,2,1,8,1.7,50", "seq_len='4k' is not valid; expected a whole number >= 1"),
])
def test_a_csv_cell_that_is_not_a_number_names_its_column(tmp_path, cells, message):
    with pytest.raises(SpecError, match=message):
        _csv_row(tmp_path, cells)


def test_an_unknown_device_is_skipped_with_the_devices_that_are_known(tmp_path):
    with pytest.raises(SkipRun) as reason:
        _csv_row(tmp_path, "llama3-8b,h1000,16,64,4096,2,1,8,1.7,50")
    assert str(reason.value).startswith("device 'h1000' has no ndcp preset (did you mean h100?); valid: a100-40g, ")
    assert "h100_sxm_80gb" in str(reason.value)  # the published runs' hardware ids are valid too


def test_a_csv_row_of_plain_numbers_reads_its_measurements(tmp_path):
    row = _csv_row(tmp_path, "llama3-8b,h100,16,64,4096,2,1,8,1.7,50")
    assert (row.step_seconds, row.memory_gib, row.cluster.count, row.run.seq_len) == (1.7, 50.0, 16, 4096)
