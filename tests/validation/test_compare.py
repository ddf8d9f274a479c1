"""A measured peak is compared on the allocator basis its row states (ndcp/validation/compare.py, runs.py
MEMORY_BASES): `reserved` with the estimate's allocator peak, `allocated` with its live tensors; unstated is reserved,
said in the row's assumptions; the basis is written per row."""
import pytest

from ndcp.estimate.memory import estimate_memory
from ndcp.specs.fields import SpecError
from ndcp.specs.units import GIB
from ndcp.validation import validate_file
from ndcp.validation.runs import read_rows

STRATEGY = "{tp: 2, pp: 1, dp: 4, micro_batch: 1, zero_stage: 1, recompute: none}"


def _memory_row(tmp_path, outcome: str, training: str = "global_batch: 32, precision: bf16, seq_len: 4096"):
    path = tmp_path / "runs.yaml"
    path.write_text("runs:\n- id: r\n"
                    "  model: llama3-8b\n"
                    "  cluster: {gpu: h100_sxm_80gb, num_gpus: 8, gpus_per_node: 8}\n"
                    f"  training: {{{training}}}\n"
                    f"  strategy: {STRATEGY}\n"
                    f"  outcome: {outcome}\n")
    return path


def test_an_allocated_peak_is_compared_with_the_live_tensors(tmp_path):
    path = _memory_row(tmp_path, "{memory_gib_per_gpu: 40.0, memory_basis: allocated}")
    row = read_rows(path)[0][1]()
    memory = estimate_memory(row.model, row.cluster, row.run, row.strategy)
    (run,) = validate_file(path).runs
    assert run.memory_basis == "allocated" and run.as_dict()["memory_basis"] == "allocated"
    assert run.estimated_memory_gib == pytest.approx(memory.allocated_peak_bytes / GIB)
    assert memory.allocated_peak_bytes < memory.allocator_peak_bytes  # fragmentation is left out


def test_an_unstated_basis_is_reserved_and_said(tmp_path):
    path = _memory_row(tmp_path, "{memory_gib_per_gpu: 40.0}")
    row = read_rows(path)[0][1]()
    memory = estimate_memory(row.model, row.cluster, row.run, row.strategy)
    (run,) = validate_file(path).runs
    assert run.memory_basis == "reserved" and "memory basis reserved (unstated)" in run.assumptions
    assert run.estimated_memory_gib == pytest.approx(memory.allocator_peak_bytes / GIB)


def test_a_row_without_a_peak_has_no_basis(tmp_path):
    (run,) = validate_file(_memory_row(tmp_path, "{step_time_s: 1.0}")).runs
    assert run.memory_basis is None and not any("memory basis" in a for a in run.assumptions)


def test_an_unknown_basis_is_the_rows_error(tmp_path):
    with pytest.raises(SpecError, match="memory_basis='peak': expected one of reserved, allocated"):
        read_rows(_memory_row(tmp_path, "{memory_gib_per_gpu: 40.0, memory_basis: peak}"))[0][1]()


def test_a_stated_optimizer_state_dtype_is_read(tmp_path):
    path = _memory_row(tmp_path, "{memory_gib_per_gpu: 40.0}",
                       "global_batch: 32, precision: bf16, seq_len: 4096, grad_dtype: bf16, "
                       "optimizer_state_dtype: bf16")
    run = read_rows(path)[0][1]().run
    assert (run.grad_dtype, run.optimizer_state_dtype, run.optimizer_state_bytes) == ("bf16", "bf16", 8)


def test_the_megatron_memory_settings_a_row_states_are_read(tmp_path):
    path = _memory_row(tmp_path, "{memory_gib_per_gpu: 40.0}",
                       "global_batch: 32, precision: bf16, seq_len: 4096, disable_parameter_transpose_cache: true, "
                       "wgrad_deferral_limit: 22")
    run = read_rows(path)[0][1]().run
    assert (run.disable_parameter_transpose_cache, run.wgrad_deferral_limit) == (True, 22)
    unstated = read_rows(_memory_row(tmp_path, "{memory_gib_per_gpu: 40.0}"))[0][1]().run
    assert (unstated.disable_parameter_transpose_cache, unstated.wgrad_deferral_limit) == (False, None)


def test_a_wrong_megatron_memory_setting_is_the_rows_error(tmp_path):
    path = _memory_row(tmp_path, "{memory_gib_per_gpu: 40.0}",
                       "global_batch: 32, precision: bf16, seq_len: 4096, wgrad_deferral_limit: -2")
    with pytest.raises(SpecError, match="wgrad_deferral_limit=-2 is not valid; expected an integer >= 0"):
        read_rows(path)[0][1]()


def test_the_data_parallel_settings_a_row_states_are_read(tmp_path):
    """An FSDP row names which FSDP reduced its gradients, when it synced and when it gathered its parameters (the
    NeMo AutoModel rows: FSDP2 with reshard_after_forward False); unstated, the trainer's own."""
    path = _memory_row(tmp_path, "{memory_gib_per_gpu: 40.0}",
                       "global_batch: 32, precision: bf16, seq_len: 4096, fsdp_version: fsdp2, "
                       "grad_sync: microbatch, param_gather: microbatch")
    run = read_rows(path)[0][1]().run
    assert (run.fsdp_version, run.grad_sync, run.param_gather) == ("fsdp2", "microbatch", "microbatch")
    unstated = read_rows(_memory_row(tmp_path, "{memory_gib_per_gpu: 40.0}"))[0][1]().run
    assert (unstated.fsdp_version, unstated.grad_sync, unstated.param_gather) == ("trainer", "trainer", "trainer")


def test_a_row_with_no_measurement_it_can_read_names_the_fields_measurements_go_in(tmp_path):
    """`outcome: {step_time: 1.7}` (for step_time_s) measures nothing ndcp reads: the skip says which fields would."""
    path = tmp_path / "runs.yaml"
    path.write_text("runs:\n- id: mine\n  model: llama3-8b\n  cluster: {gpu: h100, num_gpus: 16}\n"
                    "  training: {global_batch: 64, seq_len: 4096}\n  strategy: {tp: 2, pp: 1, dp: 8}\n"
                    "  outcome: {step_time: 1.7}\n")
    (skipped,) = validate_file(path).skipped
    assert skipped.id == "mine" and skipped.reason == (
        "no measured step time, MFU, TFLOP/s, tokens/s or peak memory (a YAML row's outcome: step_time_s, mfu, "
        "tflops_per_gpu, tokens_per_s_per_gpu or memory_gib_per_gpu; a CSV's columns: step_seconds, mfu or "
        "memory_gib)")
