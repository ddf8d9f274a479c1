"""Validation against published runs (examples/published_runs.yaml) and user CSVs; statistics helpers."""
import json
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from ndcp.report.validation import render_validation
from ndcp.estimate.memory import estimate_memory
from ndcp.validation import SkipRun, pearson, ranks, spearman, top_k_agreement, validate_file
from ndcp.validation.runs import _yaml_rows

PUBLISHED = Path(__file__).resolve().parents[1] / "examples" / "published_runs.yaml"


@pytest.fixture(scope="module")
def published():
    return validate_file(PUBLISHED)


def test_published_runs_mfu_error_is_within_the_bar(published):
    s = published.summary
    assert s.runs >= 25
    assert s.mean_abs_mfu_points <= 5.0
    # 17.5, was 10: data-parallel rings across nodes use the NICs of all their ranks on a node (docs/formulas.md §7),
    # which takes from the Megatron-Core GPT 1.7B / 7.1B weak-scaling rows (tp 1, 2 on 48 H100) the exposed DP time
    # that had stood in for costs not modelled (+17.2 and +12.1 points); the lead refits after the per-step costs
    assert s.max_abs_mfu_points <= 17.5
    assert s.mean_abs_step_relative <= 0.15
    assert s.step_pearson > 0.95


def test_every_published_run_is_compared_or_skipped_with_a_reason(published):
    ids = {r.id for r in published.runs} | {s.id for s in published.skipped}
    assert len(ids) == len(published.runs) + len(published.skipped)
    assert all(s.reason for s in published.skipped)
    reasons = {s.id: s.reason for s in published.skipped}
    assert "torchtitan_l31_70b_fsdp32_tp8" in {r.id for r in published.runs}  # FP8 rows are compared (docs/formulas.md §3.1)
    assert "vocab" in reasons["megatron_readme_gpt3_175b_1024_a100"]


def test_narayanan_rows_compare_on_their_recompute_inclusive_basis(published):
    row = next(r for r in published.runs if r.id == "narayanan2021_t1_1t")
    assert row.basis == "narayanan-96"
    assert row.measured_mfu == pytest.approx(163 / 312)  # Table 1: 163 TFLOP/s per A100
    assert row.measured_step == pytest.approx(102.63, rel=0.01)  # derived.step_time_s


def test_result_is_json_and_renders(published):
    data = json.loads(json.dumps(published.as_dict()))
    assert set(data) == {"source", "complete", "runs", "skipped", "summary", "notes"}
    console = Console(file=StringIO(), width=200)
    render_validation(published, console)
    text = console.file.getvalue()
    assert "korthikanti2022_175b_present" in text and "Summary" in text


def test_csv_of_measured_runs(tmp_path):
    csv = tmp_path / "runs.csv"
    csv.write_text(
        "id,model,device,gpus,global_batch,seq_len,tp,pp,dp,cp,ep,vpp,mbs,zero,sp,recompute,step_seconds,mfu,"
        "grad_dtype,mfu_convention\n"
        "ok,llama3-8b,h100,8,128,8192,1,1,4,2,1,1,1,1,false,selective,12.27,0.6247,bf16,full\n"
        "bad-device,llama3-8b,tpu-v9,8,128,8192,1,1,4,2,1,1,1,1,false,selective,12.27,,bf16,full\n"
        "bad-shape,llama3-8b,h100,8,128,8192,2,1,4,2,1,1,1,1,true,selective,12.27,,bf16,full\n")
    result = validate_file(csv)
    assert [r.id for r in result.runs] == ["ok"]
    assert result.runs[0].basis == "model-full"  # NVIDIA's recipes count the full score matrix
    assert abs(result.runs[0].mfu_error_points) < 5
    reasons = {s.id: s.reason for s in result.skipped}
    assert "tpu-v9" in reasons["bad-device"] and "must equal --gpus 8" in reasons["bad-shape"]


def test_statistics():
    x = [1.0, 2.0, 3.0, 4.0]
    assert pearson(x, [2.0, 4.0, 6.0, 8.0]) == pytest.approx(1.0)
    assert pearson(x, [1.0, 1.0, 1.0, 1.0]) is None
    assert np.array_equal(ranks([10, 20, 20, 5]), [2.0, 3.5, 3.5, 1.0])
    assert spearman(x, [1.0, 10.0, 100.0, 1000.0]) == pytest.approx(1.0)
    assert spearman(x, [4.0, 3.0, 2.0, 1.0]) == pytest.approx(-1.0)
    assert top_k_agreement([5, 4, 3, 2, 1], [5, 1, 3, 2, 4], 2) == 0.5


def test_published_strategies_are_estimated_to_fit_their_devices():
    """Those runs really ran, so every estimated peak must fit its device (Llama-3.1-405B on 512 H100, tp8 pp8 cp2
    vpp8, was 0.3 % over before its bf16 main gradients -- NVIDIA's performance recipes -- were modelled)."""
    rows = dict(_yaml_rows(PUBLISHED))
    over = []
    for run_id, build in rows.items():
        try:
            row = build()
        except SkipRun:
            continue
        memory = estimate_memory(row.model, row.cluster, row.run, row.strategy)
        if not memory.fits:
            over.append((run_id, memory.peak_bytes / memory.capacity_bytes))
    assert over == []


@pytest.mark.parametrize("run_id", ["torchtitan_l31_8b_fsdp8_bf16", "dgxc_llama31_8b_h100_bf16_8"])
def test_measured_peak_memory_within_ten_percent(published, run_id):
    row = next(r for r in published.runs if r.id == run_id)
    assert abs(row.memory_relative_error) <= 0.10, row.memory_relative_error


def test_trainer_and_gradient_rules(published):
    runs = {r.id: r for r in published.runs}
    torchtitan = runs["torchtitan_l31_8b_fsdp8_bf16"]
    assert any("torchtitan" in a for a in torchtitan.assumptions) and torchtitan.strategy.endswith("selective")
    assert any("bf16 main gradients" in a for a in runs["dgxc_llama31_405b_h100_bf16_512"].assumptions)
    assert not any("bf16 main gradients" in a for a in runs["mcore_r080_h100_462b"].assumptions)
    # 6.5 % since the 405B 3-D rows run torchtitan's default 8 micro-batches of 4 and pipelining's held buffers are
    # priced (docs/formulas.md §5.5; the 1F1B row was 35 % under before)
    assert published.summary.mean_abs_memory_relative <= 0.10


@pytest.mark.parametrize("run_id", ["torchtitan_l31_405b_3d_1f1b", "torchtitan_l31_405b_3d_interleaved"])
def test_torchtitan_3d_rows_within_thirteen_percent(published, run_id):
    # docs/formulas.md §5.5: 1F1B -12.0 %, interleaved +10.4 %, on torchtitan's default micro-batches and split, with
    # torch.distributed.pipelining's held outputs and receive buffers (estimate/pipeline_buffers.py)
    row = next(r for r in published.runs if r.id == run_id)
    assert "mbs4" in row.strategy.split()
    assert abs(row.memory_relative_error) <= 0.13, row.memory_relative_error


def test_time_is_not_compared_on_a_device_without_a_published_peak(published):
    torchtitan = next(r for r in published.runs if r.id == "torchtitan_l31_8b_fsdp8_bf16")
    assert torchtitan.measured_mfu is None and torchtitan.measured_step is None
    assert torchtitan.measured_memory_gib == pytest.approx(82.4)
    assert any("no peak" in a for a in torchtitan.assumptions)


def test_csv_trainer_and_grad_dtype_columns(tmp_path):
    csv = tmp_path / "runs.csv"
    csv.write_text(
        "id,model,device,gpus,global_batch,seq_len,tp,pp,dp,zero,recompute,trainer,grad_dtype,step_seconds,memory_gib\n"
        "titan,llama3-8b,h100,8,16,8192,1,1,8,3,selective,torchtitan,,2.8,82.4\n"
        "mega,llama3-8b,h100,8,16,8192,1,1,8,3,selective,,,2.8,82.4\n"
        "bf16,llama3-8b,h100,8,16,8192,1,1,8,3,selective,,bf16,2.8,82.4\n"
        "bad,llama3-8b,h100,8,16,8192,1,1,8,3,selective,deepspeed,,2.8,82.4\n")
    result = validate_file(csv)
    memory = {r.id: r.estimated_memory_gib for r in result.runs}
    assert memory["titan"] != memory["mega"] and memory["bf16"] < memory["mega"]
    assert "trainer" in {s.id: s.reason for s in result.skipped}["bad"]


def test_dgxc_model_states_match_the_logged_allocated_memory():
    """The dgxc Llama-3.1-8B log line reports memory_allocated after forward/backward (NeMo MegatronStrategy logs
    torch.cuda.memory_allocated): that is the model states, 2 + 2 + 12/8 bytes per parameter with bf16 main
    gradients (4 + ... with fp32 ones would be 15 GiB more)."""
    from ndcp.estimate.layout import stage_layouts
    from ndcp.estimate.memory import model_state_bytes
    from ndcp.estimate.parameters import stage_parameters
    from ndcp.specs.library import parse_yaml

    entry = next(e for e in parse_yaml(PUBLISHED.read_text(encoding="utf-8"), str(PUBLISHED))["runs"]
                 if e["id"] == "dgxc_llama31_8b_h100_bf16_8")
    row = dict(_yaml_rows(PUBLISHED))["dgxc_llama31_8b_h100_bf16_8"]()
    assert len(stage_layouts(row.model, row.strategy)) == 1
    states = sum(model_state_bytes(row.run, row.strategy, stage_parameters(row.model, row.strategy)[0]).values())
    assert states == pytest.approx(entry["memory_observation"]["memory_allocated_bytes"], rel=0.01)


UNKNOWN_RECOMPUTE_CSV = (
    "id,model,device,gpus,global_batch,seq_len,tp,pp,dp,mbs,zero,flash_attention,recompute,step_seconds\n"
    "light,llama3-8b,h100,8,8,2048,1,1,8,1,3,true,,1.0\n"  # fits without recompute
    "no-flash,llama3-8b,h100,8,8,4096,1,1,8,1,3,false,unknown,1.0\n"  # scores materialised: selective must drop them
    "long,llama3-8b,h100,8,16,8192,1,1,8,2,3,true,,1.0\n"  # only the layer inputs fit
    "huge,llama3-8b,h100,8,256,8192,1,1,8,32,3,true,,1.0\n")  # nothing fits: full, flagged as not fitting


def test_unknown_recompute_is_the_pinned_searchs_lightest_fastest(tmp_path):
    """An unknown recompute is what ndcp's search finds with the published fields pinned: a uniform option that
    fits, no allowed option that fits is faster, and no lighter one is as fast; where nothing fits, full, said."""
    from ndcp.estimate.time import estimate_time
    from ndcp.rules import strategy_refusal
    from ndcp.specs import RecomputePlan
    from ndcp.specs.recompute import RECOMPUTE_MODES
    from ndcp.validation.runs import read_rows

    csv = tmp_path / "runs.csv"
    csv.write_text(UNKNOWN_RECOMPUTE_CSV)
    chosen = {}
    for run_id, build in read_rows(csv):
        row = build()
        mode = row.strategy.recompute.mode
        chosen[run_id] = mode
        step = estimate_time(row.model, row.cluster, row.run, row.strategy).step_seconds
        for index, other in enumerate(RECOMPUTE_MODES):
            strategy = row.strategy.with_(recompute=RecomputePlan.uniform(other))
            if strategy_refusal(row.model, row.cluster, row.run, strategy) is not None or \
                    not estimate_memory(row.model, row.cluster, row.run, strategy).fits:
                continue
            assert run_id != "huge", other  # nothing fits there
            other_step = estimate_time(row.model, row.cluster, row.run, strategy).step_seconds
            assert other_step >= step * (1 - 1e-9), (run_id, other)
            if index < RECOMPUTE_MODES.index(mode):
                assert other_step > step * (1 + 1e-9), (run_id, other)
        searched = "ndcp's pinned search" if run_id != "huge" else "nothing"
        assert any(a.startswith(f"recompute {mode} (unknown: {searched}") for a in row.assumptions), row.assumptions
        assert estimate_memory(row.model, row.cluster, row.run, row.strategy).fits is (run_id != "huge")
    # no recompute where it fits; Megatron's mlp module recompute where flash-less scores or long sequences bind
    assert chosen == {"light": "none", "no-flash": "mlp", "long": "mlp", "huge": "full"}


def test_unknown_recompute_on_narayanans_basis_stays_full(tmp_path):
    """Narayanan's 96-coefficient TFLOP/s count one recompute forward per layer: the published figure itself says
    full recompute, so the row keeps it even where no recompute would fit."""
    from ndcp.specs import RecomputePlan
    from ndcp.validation.runs import read_rows

    path = tmp_path / "runs.yaml"
    path.write_text(
        "runs:\n"
        "- id: basis\n"
        "  model: {name: llama-like, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336,\n"
        "          vocab: 128256, seq_len: 2048, activation: swiglu}\n"
        "  cluster: {gpu: h100_sxm_80gb, num_gpus: 8, gpus_per_node: 8}\n"
        "  training: {global_batch: 8, precision: bf16}\n"
        "  strategy: {tp: 1, pp: 1, dp: 8, micro_batch: 1, zero_stage: 3, recompute: unknown}\n"
        "  outcome: {tflops_per_gpu: 400, tflops_basis: hardware-incl-recompute (96-coefficient formula)}\n")
    row = read_rows(path)[0][1]()
    assert row.narayanan_basis and row.strategy.recompute.mode == "full"
    assert any("96-coefficient" in a for a in row.assumptions)
    lightest = row.strategy.with_(recompute=RecomputePlan.uniform("none"))
    assert estimate_memory(row.model, row.cluster, row.run, lightest).fits  # least-that-fits would have said none


def test_csv_on_words_read_as_true():
    """`sp=on` in a runs CSV is sequence parallelism on, as --strategy reads it."""
    from ndcp.validation.values import as_bool
    assert [as_bool(w) for w in ("on", "true", "1", "yes", "y")] == [True] * 5
    assert [as_bool(w) for w in ("off", "false", "0", "no")] == [False] * 4 and as_bool("") is None


def test_torch_compile_rows_read_as_compiled_and_their_estimate_is_faster_than_the_eager_row():
    """training.torch_compile (runs.py): the torchtitan Dec 2024 8B rows of one table, eager and compiled. The
    device has no published peak, so the rows are compared on memory only; the estimated compile gain (+6.7 %)
    is short of the measured +15.7 % (docs/formulas.md §3.4), but points the same way."""
    from ndcp.estimate.time import estimate_time
    from ndcp.validation.runs import read_rows
    rows = {run_id: build for run_id, build in read_rows(PUBLISHED) if run_id.startswith("torchtitan_l31_8b")}
    eager, compiled = (rows[f"torchtitan_l31_8b_fsdp8_{k}bf16"]() for k in ("", "compile_"))
    assert (eager.run.torch_compile, compiled.run.torch_compile) == (False, True)
    assert compiled.strategy == eager.strategy
    steps = [estimate_time(r.model, r.cluster, r.run, r.strategy).step_seconds for r in (eager, compiled)]
    measured = eager.tokens_per_second_per_gpu / compiled.tokens_per_second_per_gpu
    assert measured < steps[1] / steps[0] < 1.0


def test_the_torchtitan_fp8_speed_up_over_compiled_bf16_is_the_measured_one_within_three_and_a_half_percent():
    """The Dec 2024 8B tables 1 and 3 (compile + Float8 against compile, same 500 W H100s; time not compared on that
    device): measured FP8 speed-ups 8532/6667 = 1.280 and 8380/6514 = 1.286. torchao's casts (estimate/fp8.py
    torchao_cast_bytes) gave 1.296 and 1.289 with selective priced as an attention-core re-run (the same in both
    precisions); torchtitan's op-level SAC re-runs the wo and w3 GEMMs at each precision's rate (docs/formulas.md
    §5.7), which widens the estimated speed-up to 1.318 and 1.311 (+3.0 / +1.9 %): what keeps the measured FP8 gain
    lower on this power-capped device is not priced. Transformer Engine's count gave 1.332 and 1.324 (§3.1)."""
    from ndcp.estimate.time import estimate_time
    from ndcp.validation.runs import read_rows
    rows = dict(read_rows(PUBLISHED)) | dict(read_rows(PUBLISHED.parent / "measured_runs_2.yaml"))
    for gpus in (8, 128):
        bf16, fp8 = (rows[f"torchtitan_l31_8b_fsdp{gpus}_compile_{p}"]() for p in ("bf16", "fp8"))
        measured = fp8.tokens_per_second_per_gpu / bf16.tokens_per_second_per_gpu
        steps = [estimate_time(r.model, r.cluster, r.run, r.strategy).step_seconds for r in (bf16, fp8)]
        assert steps[0] / steps[1] == pytest.approx(measured, rel=0.035)


def test_a_stated_compiled_loss_reads_as_one_and_lowers_only_the_logits():
    """training.compile_loss (runs.py): the Trainy H200 8B rows (torchtitan e7c0cae, whose --training.compile also
    compiles the loss) read as compiled blocks and loss, the Dec 2024 rows (9dec370, loss compile commented out)
    as compiled blocks only; the loss's logits go from 3 x 4 to 2 x 2 bytes per logit, nothing else moves."""
    from dataclasses import replace
    from ndcp.validation.runs import read_rows
    measured = PUBLISHED.parent / "measured_runs_2.yaml"
    rows = {run_id: build for run_id, build in read_rows(measured) if "l31_8b" in run_id}
    trainy = rows["trainy_l31_8b_h200_fsdp32_compile_fp8"]()
    assert (trainy.run.torch_compile, trainy.run.compile_loss) == (True, True)
    assert not rows["torchtitan_l31_8b_fsdp128_compile_bf16"]().run.compile_loss
    eager_loss = replace(trainy.run, compile_loss=False)
    saved = (estimate_memory(trainy.model, trainy.cluster, eager_loss, trainy.strategy).peak_bytes
             - estimate_memory(trainy.model, trainy.cluster, trainy.run, trainy.strategy).peak_bytes)
    assert saved == (3 * 4 - 2 * 2) * 2 * 8192 * 128_256  # 15.66 GiB: the logits are the peak's, exactly


MCORE_WEAK = ("1.7b", "7.1b", "16b", "32b", "70b", "119b", "177b", "314b", "462b")


def test_the_megatron_core_r080_weak_scaling_rows_read_as_their_source_implies(published):
    """The nine rows of NVIDIA/Megatron-LM's model table (images/model_table.png, core_r0.8.0; issue 34 audit):
    the table's columns agree (TFLOP/s x GPUs = aggregate PFLOP/s; MFU = TFLOP/s over the H100 dense BF16 peak,
    989, rounded to the whole per cent), the size label is the untied count (the row's model, read untied, is
    within 3.5 % of it and nearer than the tied count), and the pipelined rows' interleaving depth is searched
    (the README overlaps the pipeline sends, which core_r0.8.0 runs only with interleaving)."""
    from dataclasses import replace

    from ndcp.specs.library import parse_yaml
    from ndcp.validation.runs import read_rows

    entries = {e["id"]: e for e in parse_yaml(PUBLISHED.read_text(), str(PUBLISHED))["runs"]}
    builds = dict(read_rows(PUBLISHED))
    compared = {r.id: r for r in published.runs}
    for size in MCORE_WEAK:
        run_id = f"mcore_r080_h100_{size}"
        entry, row = entries[run_id], builds[run_id]()
        outcome, gpus = entry["outcome"], entry["cluster"]["num_gpus"]
        assert outcome["tflops_per_gpu"] * gpus / 1000 == pytest.approx(outcome["aggregate_pflops"], abs=0.06)
        assert round(outcome["tflops_per_gpu"] / 989, 2) == outcome["mfu"], run_id
        label = entry["model"]["params_b"] * 1e9
        untied = row.model.parameters
        tied = replace(row.model, tied_embeddings=True).parameters
        assert not row.model.tied_embeddings and abs(untied / label - 1) <= 0.035, run_id
        assert abs(untied - label) < abs(tied - label), run_id
        searched = compared[run_id].searched
        assert ("vpp" in searched) == (row.strategy.pp > 1), (run_id, searched)
