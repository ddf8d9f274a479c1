"""A measured run's strategy takes every --strategy key (ndcp/validation/run_strategy.py); unknown knobs are the
pinned search's (ndcp/validation/unknowns.py); runs below their pipeline depth and memory-only runs are compared."""
from pathlib import Path

from ndcp.validation import validate_file
from ndcp.validation.runs import read_rows

ROOT = Path(__file__).resolve().parents[2]
MOE = ("{name: moe, layers: 8, hidden: 1024, heads: 16, kv_heads: 4, head_dim: 128, ffn_hidden: 4096, vocab: 32000,"
       " activation: swiglu, seq_len: 4096, moe: {experts: 8, top_k: 2, expert_ffn_hidden: 512}}")


def _row(tmp_path, strategy: str, model: str = MOE, outcome: str = "{step_time_s: 1.0}", gbs: int = 64):
    path = tmp_path / "runs.yaml"
    path.write_text("runs:\n- id: r\n"
                    f"  model: {model}\n"
                    "  cluster: {gpu: h100_sxm_80gb, num_gpus: 16, gpus_per_node: 8}\n"
                    f"  training: {{global_batch: {gbs}, precision: bf16}}\n"
                    f"  strategy: {strategy}\n"
                    f"  outcome: {outcome}\n")
    return path


def test_etp_is_read_not_forced_to_tp(tmp_path):
    row = read_rows(_row(tmp_path, "{tp: 2, pp: 1, dp: 8, ep: 8, etp: 1, recompute: none}"))[0][1]()
    assert (row.strategy.tp, row.strategy.ep, row.strategy.etp) == (2, 8, 1)
    assert row.model.dim_per_head == 128


def test_etp_unstated_is_megatrons_default_noted(tmp_path):
    row = read_rows(_row(tmp_path, "{tp: 2, pp: 1, dp: 8, ep: 4, recompute: none}"))[0][1]()
    assert row.strategy.etp == 2 and "etp 2 (Megatron's default: etp = tp)" in row.assumptions


def test_strategy_keys_of_the_strategy_parser(tmp_path):
    row = read_rows(_row(tmp_path, "{tp: 1, pp: 2, dp: 8, micro_batch: 2, zero_stage: 1, "
                                   "recompute_modules: layernorm+moe_act, pp_schedule: 1F1B, "
                                   "recompute_detail: documentation only}"))[0][1]()
    s = row.strategy
    assert (s.pp, s.mbs, s.mbn, s.recompute.mode, s.schedule) == (2, 2, 4, "layernorm+moe_act", "1f1b")


def test_fewer_micro_batches_than_stages_is_estimated_at_its_bubble(tmp_path):
    dense = "llama3-8b"
    path = _row(tmp_path, "{tp: 1, pp: 4, dp: 4, micro_batch: 1, recompute: full}", model=dense, gbs=8)
    path.write_text(path.read_text().replace("precision: bf16", "precision: bf16, seq_len: 4096"))
    result = validate_file(path)
    assert not result.skipped and result.runs[0].estimated_step > 0
    assert any("2 micro-batches < pp 4" in a for a in result.runs[0].assumptions)


def test_fsdp_beside_pipeline_stages_on_another_stack_is_estimated_with_a_note(tmp_path):
    # NeMo AutoModel runs FSDP2 with pipeline stages; priced with Megatron's behaviour, whose launch cannot state it
    row = read_rows(_row(tmp_path, "{tp: 1, pp: 2, dp: 8, ep: 8, zero_stage: 3, recompute: full}"))[0][1]()
    assert (row.strategy.pp, row.strategy.zero) == (2, 3)
    assert any("ZeRO 3 with pp 2 ran on its own stack" in a for a in row.assumptions)


def test_unknown_micro_batch_is_searched_with_the_rest_pinned(tmp_path):
    row = read_rows(_row(tmp_path, "{tp: 1, pp: 1, dp: 16, ep: 8, micro_batch: unknown, recompute: none}"))[0][1]()
    s = row.strategy
    assert (s.tp, s.pp, s.dp, s.ep, s.recompute.mode) == (1, 1, 16, 8, "none")  # published: as published
    assert s.mbs * s.mbn * s.dp == 64
    assert f"mbs {s.mbs} (unknown: ndcp's pinned search, optimal)" in row.assumptions


def test_a_run_publishing_only_its_peak_memory_is_compared_on_memory(tmp_path):
    result = validate_file(_row(tmp_path, "{tp: 2, pp: 1, dp: 8, ep: 8, etp: 1, recompute: none}",
                                outcome="{memory_gib_per_gpu: 30.0}"))
    (run,) = result.runs
    assert run.measured_step is None and run.measured_mfu is None
    assert run.memory_relative_error is not None and result.summary.mean_abs_memory_relative is not None


def test_every_run_of_the_second_set_is_read():
    result = validate_file(ROOT / "examples" / "measured_runs_2.yaml")
    assert not result.skipped and len(result.runs) == 74
    qwen = next(r for r in result.runs if r.id == "mbr26041_qwen3_235b_h100_fp8_256_gbs8192")
    assert "ep32" in qwen.strategy
    # Its 20 peak rows are compared on the allocator figure their trainer logs: Megatron-Bridge's report_memory and
    # Megatron-LM's tensorboard mem-max-allocated-bytes the allocated peak, torchtitan's DeviceMemoryMonitor the
    # reserved one (docs/calibration.md §3).
    peaks = {r.id: r.memory_basis for r in result.runs if r.memory_relative_error is not None}
    assert len(peaks) == 20
    assert {basis for i, basis in peaks.items() if i.startswith(("mbr_", "mlmft_"))} == {"allocated"}
    assert {basis for i, basis in peaks.items() if i.startswith(("torchtitan_", "trainy_"))} == {"reserved"}


def test_every_nvl72_run_is_read_and_an_ep64_rack_is_priced_on_nvlink():
    """examples/measured_runs_nvl72.yaml (docs/formulas.md §7.4): DeepSeek-V3 on 256 GB200 with EP 64 over 16 trays
    of one NVL72 rack, within 10 % of its measured step (it is +185 % with each tray as its own domain)."""
    result = validate_file(ROOT / "examples" / "measured_runs_nvl72.yaml")
    assert not result.skipped and len(result.runs) == 21
    rack = next(r for r in result.runs if r.id == "mbr26041_deepseekv3_gb200_mxfp8_256")
    assert "ep64" in rack.strategy and abs(rack.step_relative_error) < 0.10


def test_what_the_search_filled_is_in_the_json_and_the_report(tmp_path):
    import io

    from rich.console import Console

    from ndcp.report.validation import render_validation

    result = validate_file(_row(tmp_path, "{tp: 1, pp: 1, dp: 16, ep: 8, micro_batch: unknown, recompute: none}"))
    (run,) = result.runs
    assert run.searched.startswith("mbs ") and run.as_dict()["searched"] == run.searched
    out = io.StringIO()
    render_validation(result, Console(file=out, width=80))
    assert "Knobs the sources do not publish" in out.getvalue()
    published = validate_file(_row(tmp_path, "{tp: 1, pp: 1, dp: 16, ep: 8, micro_batch: 2, recompute: none}"))
    assert published.runs[0].searched == ""  # nothing unknown: nothing searched
