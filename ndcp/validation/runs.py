"""Reading measured runs (a published-runs YAML or a CSV of your own runs) into model, cluster, run and strategy.


Rules for fields a row leaves open (each use is recorded in the row's `assumptions`):
- micro_batch null -> 1; vpp null -> 1; ep null -> 1; etp -> tp (Megatron's default expert TP); zero_stage null -> 1
  (Megatron-Core distributed optimizer); sp null -> tp > 1 (Megatron-Core recipes enable SP with TP);
- recompute unknown -> full when the row reports Narayanan's recompute-inclusive 96-coefficient FLOPs (the basis
  itself counts one recompute forward per layer, i.e. full recompute: Narayanan 2021 Eq. 3), else the least
  recompute that fits the device (none, then selective, then full: RECOMPUTE_MODES' order; full if none fits).
  Guessing selective made runs published before selective recompute existed "estimated not to fit", and a run
  that fits without recompute had no reason to pay for it;
- model: kv_heads null -> heads; ffn_hidden null -> 4 x hidden for GELU (GPT) models; activation missing -> gelu for
  GPT-named models; gelu rows are GPT-style (learned positions, LayerNorm, biases, tied embeddings), swiglu rows
  Llama-style (RoPE, RMSNorm, no biases, untied); a null vocabulary or layer count cannot be filled: the row is
  skipped with that reason;
- precision: "fp16" -> fp16, anything naming fp8 -> fp8 (FP8 linear layers, docs/formulas.md §3.1) with the stated
  `fp8_recipe`, else the trainer's default (Trainer.default_fp8_recipe: delayed for Megatron/Transformer Engine,
  tensorwise for torchtitan's Float8 dynamic scaling), noted; FP8 on a device without FP8 is skipped; anything
  else 16-bit (including "bf16-assumed") -> bf16;
- trainer: torchtitan for rows whose source or recompute detail names torchtitan (their memory is FSDP2's, their
  selective AC torchtitan's op-level policy: estimate/activations.py), else Megatron;
- MFU convention: `outcome.mfu_convention` (YAML) or an `mfu_convention` column (CSV), "causal" or "full"
  (specs/run.py MFU_CONVENTIONS); unstated -> causal, as current Megatron-LM counts;
- MFU as written: a fraction (0.45), a percentage with its sign (45%), or a bare number above 1, which can only be
  a percentage (45 -> 0.45); above 100 % is refused as the row's error;
- gradient dtype: a stated `training.grad_dtype`, else bf16 for NVIDIA dgxc-benchmarking rows (NVIDIA's performance
  recipes reduce gradients in bf16: grad_reduce_in_fp32 = False in Megatron-Bridge scripts/performance/configs
  llama3/llama3_8b_llm_pretrain.py and llama31/llama31_405b_llm_pretrain.py, and in NeMo's
  pretrain_performance_optimizations, e.g. recipes/gpt3_175b.py), else fp32 main gradients (Megatron's default).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..estimate.fp8 import check_fp8
from ..estimate.memory import estimate_memory
from ..rules import check_strategy
from ..schedules import default_schedule
from ..specs.device import PRESETS, ClusterSpec, device_preset
from ..specs.fields import SpecError, from_mapping
from ..specs.library import parse_yaml
from ..specs.model import MLASpec, ModelSpec, MoESpec
from ..specs.recompute import CLASSIC_MODES, HEAVIEST, NO_RECOMPUTE, RECOMPUTE_MODES
from ..specs.run import MFU_CONVENTIONS, RunSpec
from ..specs.strategy import RecomputePlan, Strategy, accounted_partition, default_partition
from ..specs.units import GIB
from ..trainers import trainer_named
from .shape import check_runs_document, csv_records
from .values import as_bool, as_fraction, as_number, int_or, is_null, read_text

# published_runs.yaml hardware ids -> (ndcp preset, device overrides); source: the `hardware:` list of that file
GPU_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "a100_80gb_sxm": ("a100-80g", {}),
    "h100_sxm_80gb": ("h100", {}),
    "h100_96gb_hbm2e_500w": ("h100", {"memory_bytes": 96 * GIB, "hbm_bandwidth": 2.4e12}),
    "h200_sxm_141gb": ("h200", {}),
    "h800_sxm_80gb": ("h800", {}),
    "mi300x": ("mi300x", {}),
    "b200": ("b200", {}),
    "ascend_910b": ("ascend-910b", {}),
}


class SkipRun(Exception):
    """A measured run that ndcp cannot represent; the message is the reason shown to the user."""


# -- building specs from a row ---------------------------------------------------------------------------------------
def _model_from_fields(fields: dict, notes: list[str]) -> ModelSpec:
    """A ModelSpec from a published row's model fields (rules in the module docstring)."""
    name = str(fields.get("name") or "model")
    for key in ("layers", "hidden", "heads", "vocab"):
        if is_null(fields.get(key)):
            raise SkipRun(f"model.{key} is not published")
    activation = fields.get("activation")
    if is_null(activation):
        if not name.lower().startswith("gpt"):
            raise SkipRun("model.activation is not published")
        activation = "gelu"
        notes.append("activation gelu (GPT)")
    activation = str(activation).lower()
    if activation not in ("gelu", "swiglu"):
        raise SkipRun(f"model.activation={activation!r} is not modelled")
    hidden = int(fields["hidden"])
    ffn = fields.get("ffn_hidden")
    if is_null(ffn):
        if activation != "gelu":
            raise SkipRun("model.ffn_hidden is not published")
        ffn = 4 * hidden
        notes.append("ffn_hidden 4h")
    kv_heads = fields.get("kv_heads")
    if is_null(kv_heads):
        kv_heads = 0
        notes.append("kv_heads = heads")
    gpt = activation == "gelu"
    spec = {"name": name, "layers": int(fields["layers"]), "hidden": hidden, "heads": int(fields["heads"]),
            "kv_heads": int(kv_heads), "ffn_hidden": int(ffn), "vocab": int(fields["vocab"]), "activation": activation,
            "max_positions": int(fields.get("seq_len") or 4096), "position_embedding": "learned" if gpt else "rope",
            "norm": "layernorm" if gpt else "rmsnorm", "linear_bias": gpt, "tied_embeddings": gpt}
    if isinstance(fields.get("moe"), dict):
        spec["moe"] = from_mapping(MoESpec, fields["moe"], "model.moe.")
    if isinstance(fields.get("mla"), dict):
        spec["mla"] = from_mapping(MLASpec, fields["mla"], "model.mla.")
    return ModelSpec(**spec)


def _cluster(gpu_id: str, gpus: int, per_node: Any) -> ClusterSpec:
    if gpu_id in GPU_PRESETS:
        preset, overrides = GPU_PRESETS[gpu_id]
    elif gpu_id.strip().lower() in PRESETS:
        preset, overrides = gpu_id.strip().lower(), {}
    else:
        raise SkipRun(f"device {gpu_id!r} has no ndcp preset")
    if not is_null(per_node):
        overrides = {**overrides, "devices_per_node": int(per_node)}
    return ClusterSpec(device_preset(preset), int(gpus)).with_overrides(**overrides)


def _precision(value: Any, notes: list[str]) -> str:
    text = "" if is_null(value) else str(value).lower()
    if "fp8" in text:
        if text != "fp8":
            notes.append(f"precision {value!r} -> fp8")
        return "fp8"
    if text == "fp16":
        return "fp16"
    if text not in ("bf16", ""):
        notes.append(f"precision {value!r} -> bf16")
    return "bf16"


def _fp8_run(run: RunSpec, recipe: Any, cluster: ClusterSpec, notes: list[str]) -> RunSpec:
    """An fp8 run with its stated recipe (else the trainer's default, noted), refused where the device has no FP8."""
    if not run.fp8:
        return run
    if is_null(recipe):
        recipe = trainer_named(run.trainer).default_fp8_recipe
        notes.append(f"fp8 recipe unstated -> {recipe}")
    try:
        run = replace(run, fp8_recipe=str(recipe).strip().lower())
        check_fp8(run, cluster.device)
    except SpecError as error:
        raise SkipRun(str(error)) from None
    return run


def _recompute_unknown(value: Any) -> bool:
    return ("" if value is None else str(value).strip().lower()) not in RECOMPUTE_MODES


def _recompute(value: Any, narayanan_basis: bool, notes: list[str]) -> str:
    """The stated mode; unknown -> full on Narayanan's basis, else none until `_least_recompute_that_fits` decides."""
    if not _recompute_unknown(value):
        return str(value).strip().lower()
    if narayanan_basis:
        notes.append("recompute full (unknown: the 96-coefficient FLOPs count a recompute forward)")
        return "full"
    return NO_RECOMPUTE


def _least_recompute_that_fits(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy,
                               notes: list[str]) -> Strategy:
    """Unknown recompute: the lightest of none, selective, full (CLASSIC_MODES) whose estimated peak fits the device
    and that the rulebook allows (the run's trainer runs it); the heaviest when none fits."""
    for mode in CLASSIC_MODES:
        candidate = strategy.with_(recompute=RecomputePlan.uniform(mode))
        try:
            check_strategy(model, cluster, run, candidate)
        except SpecError:
            continue
        if estimate_memory(model, cluster, run, candidate).fits:
            break
    else:
        candidate = _checked(model, cluster, run, strategy.with_(recompute=RecomputePlan.uniform(HEAVIEST)))
    notes.append(f"recompute {candidate.recompute.mode} (unknown: least that fits)")
    return candidate


def _flash_attention(entry: dict, training: dict, notes: list[str]) -> bool:
    """Stated `training.flash_attention`, else False for runs published up to 2022 (FlashAttention, Dao et al.,
    appeared mid-2022 and reached Megatron in 2023), else True."""
    stated = as_bool(training.get("flash_attention"))
    if stated is not None:
        return stated
    years = [int(y) for y in re.findall(r"\b(20\d\d)\b", str((entry.get("source") or {}).get("title") or ""))]
    if years and max(years) <= 2022:
        notes.append("no flash attention (published before 2023)")
        return False
    return True


def _trainer(entry: dict, notes: list[str]) -> str:
    """torchtitan when the row's source or recompute detail names it (its selective AC is then torchtitan's op-level
    policy and its model states FSDP2's), else megatron."""
    source = entry.get("source") or {}
    text = " ".join(str(v) for v in (source.get("title"), source.get("repo_files"),
                                     (entry.get("strategy") or {}).get("recompute_detail")))
    if "torchtitan" in text.lower():
        notes.append("trainer torchtitan (FSDP2, op-level selective AC)")
        return "torchtitan"
    return "megatron"


def _grad_dtype(entry: dict, training: dict, notes: list[str]) -> str:
    """Main-gradient dtype: stated, else bf16 for NVIDIA dgxc-benchmarking rows (their performance recipes set
    grad_reduce_in_fp32 = False; module docstring), else fp32."""
    stated = str(training.get("grad_dtype") or "").strip().lower()
    if stated in ("bf16", "fp16", "fp32"):
        return stated
    source = entry.get("source") or {}
    if "dgxc-benchmarking" in f"{source.get('title')} {source.get('repo_files')}":
        notes.append("bf16 main gradients (NVIDIA performance recipes)")
        return "bf16"
    return "fp32"


def _strategy(model: ModelSpec, fields: dict, gpus: int, global_batch: int, narayanan_basis: bool,
              notes: list[str]) -> Strategy:
    """A Strategy from a row's strategy fields (defaults in the module docstring); errors become SkipRun."""
    degrees = {}
    for key in ("tp", "pp", "dp", "cp"):
        if is_null(fields.get(key)):
            if key == "cp":
                degrees[key] = 1
                continue
            raise SkipRun(f"strategy.{key} is not published")
        degrees[key] = int(fields[key])
    tp, pp, dp, cp = degrees["tp"], degrees["pp"], degrees["dp"], degrees["cp"]
    if tp * pp * dp * cp != gpus:
        raise SkipRun(f"tp*pp*dp*cp = {tp * pp * dp * cp} does not match {gpus} GPUs")
    ep = int_or(fields.get("ep"), 1, "ep", notes)
    vpp = int_or(fields.get("vpp"), 1, "vpp", notes)
    mbs = int_or(fields.get("micro_batch", fields.get("mbs")), 1, "mbs", notes)
    zero = int_or(fields.get("zero_stage", fields.get("zero")), 1, "zero", notes)
    sp = as_bool(fields.get("sp"))
    if sp is None:
        sp = tp > 1
        notes.append(f"sp {str(sp).lower()}")
    if global_batch % (dp * mbs):
        raise SkipRun(f"global batch {global_batch} is not a multiple of dp*mbs = {dp * mbs}")
    if model.layers < pp * vpp:
        raise SkipRun(f"{model.layers} layers cannot fill pp*vpp = {pp * vpp} stages")
    per_stage = fields.get("layers_per_virtual_stage")
    layers_per_stage = (int(per_stage),) * (pp * vpp) if not is_null(per_stage) and \
        int(per_stage) * pp * vpp == model.layers else ()
    if vpp > 1 and model.layers % (pp * vpp) and not layers_per_stage:
        # Megatron runs these by counting the embedding and the loss as layers (--account-for-embedding-in-pipeline-
        # split, --account-for-loss-in-pipeline-split): the default partition where layers + 2 splits evenly
        # (accounted_partition); any other uneven count is given to the interleaved schedule explicitly.
        if accounted_partition(model.layers, pp * vpp) is None:
            layers_per_stage = default_partition(model.layers, pp * vpp)
        counts = layers_per_stage or default_partition(model.layers, pp * vpp)
        notes.append(f"layers per virtual stage {counts[0]}-{max(counts)}-{counts[-1]} "
                     "(embedding and loss counted as layers)")
    recompute = RecomputePlan.uniform(_recompute(fields.get("recompute"), narayanan_basis, notes))
    try:
        strategy = Strategy(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=tp if ep > 1 else 1, vpp=vpp, mbs=mbs,
                            mbn=global_batch // (dp * mbs), zero=zero, sp=sp and tp > 1, recompute=recompute,
                            layers_per_stage=layers_per_stage)
        return replace(strategy, schedule=default_schedule(vpp))  # after Strategy has checked vpp >= 1
    except SpecError as error:
        raise SkipRun(f"strategy: {error}") from None


def _checked(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> Strategy:
    """The strategy, or SkipRun naming the first rule of the rulebook (ndcp.rules) it breaks."""
    try:
        check_strategy(model, cluster, run, strategy)
    except SpecError as error:
        raise SkipRun(f"strategy: {error}") from None
    return strategy


def _states_narayanan_basis(outcome: dict, notes_text: str) -> bool:
    basis = str(outcome.get("tflops_basis") or "").lower()
    return "recompute" in basis or "96" in basis or "96-coefficient" in notes_text.lower()


@dataclass(frozen=True)
class MeasuredRun:
    """A measured run, normalised: specs plus whatever outcome figures it states."""

    id: str
    model: ModelSpec
    cluster: ClusterSpec
    run: RunSpec
    strategy: Strategy
    narayanan_basis: bool
    step_seconds: float | None
    mfu: float | None
    tflops_per_gpu: float | None
    tokens_per_second_per_gpu: float | None
    memory_gib: float | None
    assumptions: tuple[str, ...]
    peak_known: bool = True  # the source publishes the device's peak FLOP/s


# -- YAML (published_runs.yaml shape, docs/calibration.md) --------------------------------------------------------
def _yaml_row(entry: dict, unknown_peaks: frozenset[str] = frozenset()) -> MeasuredRun:
    notes: list[str] = []
    model_fields, cluster_fields = entry.get("model") or {}, entry.get("cluster") or {}
    training, strategy_fields = entry.get("training") or {}, entry.get("strategy") or {}
    outcome = entry.get("outcome") or {}
    narayanan = _states_narayanan_basis(outcome, str(entry.get("notes") or ""))
    if is_null(model_fields.get("seq_len")) or is_null(training.get("global_batch")):
        raise SkipRun("sequence length or global batch is not published")
    model = _model_from_fields(model_fields, notes)
    gpus = int(cluster_fields.get("num_gpus") or 0)
    if gpus <= 0:
        raise SkipRun("cluster.num_gpus is not published")
    cluster = _cluster(str(cluster_fields.get("gpu")), gpus, cluster_fields.get("gpus_per_node"))
    global_batch, seq = int(training["global_batch"]), int(model_fields["seq_len"])
    run = RunSpec(global_batch, seq, precision=_precision(training.get("precision"), notes),
                  flash_attention=_flash_attention(entry, training, notes),
                  grad_dtype=_grad_dtype(entry, training, notes), trainer=_trainer(entry, notes),
                  mfu_convention=_mfu_convention(outcome.get("mfu_convention"), notes))
    run = _fp8_run(run, training.get("fp8_recipe"), cluster, notes)
    strategy = _checked(model, cluster, run, _strategy(model, strategy_fields, gpus, global_batch, narayanan, notes))
    if _recompute_unknown(strategy_fields.get("recompute")) and not narayanan:
        strategy = _least_recompute_that_fits(model, cluster, run, strategy, notes)
    memory = as_number(outcome.get("memory_gib_per_gpu"))
    observed = (entry.get("memory_observation") or {}).get("peak_memory_usage_bytes")
    if memory is None and not is_null(observed):
        memory = float(observed) / GIB
    return MeasuredRun(str(entry.get("id")), model, cluster, run, strategy, narayanan,
                       as_number(outcome.get("step_time_s")), as_fraction(outcome.get("mfu"), "outcome.mfu"),
                       as_number(outcome.get("tflops_per_gpu")), as_number(outcome.get("tokens_per_s_per_gpu")), memory,
                       tuple(notes), str(cluster_fields.get("gpu")) not in unknown_peaks)


def _mfu_convention(value: Any, notes: list[str]) -> str:
    """The convention the source's MFU (or TFLOP/s) counts causal attention in; unstated -> "causal" (current
    Megatron-LM), recorded in the row's assumptions."""
    if is_null(value):
        notes.append("mfu convention causal (unstated)")
        return "causal"
    convention = str(value).strip().lower()
    if convention not in MFU_CONVENTIONS:
        raise SpecError(f"mfu_convention={value!r}: expected one of {', '.join(MFU_CONVENTIONS)}")
    return convention


def _unknown_peaks(data: dict) -> frozenset[str]:
    """Hardware ids whose `peak_tflops` publishes neither a BF16 nor an FP16 dense figure."""
    unknown = set()
    for hw in data.get("hardware") or []:
        peaks = (hw or {}).get("peak_tflops") or {}
        if isinstance(hw, dict) and all(is_null(peaks.get(k)) for k in ("bf16_dense", "fp16_dense")):
            unknown.add(str(hw.get("id")))
    return frozenset(unknown)


def _yaml_rows(path: Path) -> list[tuple[str, Any]]:
    data = parse_yaml(read_text(path), str(path))
    check_runs_document(data, path)
    unknown = _unknown_peaks(data)
    return [(str(entry.get("id", f"run{i}")), lambda entry=entry: _yaml_row(entry, unknown))
            for i, entry in enumerate(data["runs"])]


# -- CSV of measured runs -------------------------------------------------------------------------------------------
CSV_REQUIRED = ("model", "device", "gpus", "global_batch", "seq_len", "tp", "pp", "dp")


def _csv_model(name: str, folder: Path) -> ModelSpec:
    from ..specs.library import library_names, load_model

    if name in library_names() or Path(name).is_absolute():
        return load_model(name)
    relative = folder / name
    return load_model(str(relative) if relative.exists() else name)


def _csv_row(index: int, record: dict, folder: Path) -> MeasuredRun:
    notes: list[str] = []
    missing = [c for c in CSV_REQUIRED if is_null(record.get(c))]
    if missing:
        raise SkipRun(f"missing column value(s): {', '.join(missing)}")
    try:
        model = _csv_model(record["model"].strip(), folder)
    except SpecError as error:
        raise SkipRun(str(error)) from None
    gpus, global_batch = int(record["gpus"]), int(record["global_batch"])
    cluster = _cluster(record["device"], gpus, record.get("devices_per_node"))
    flash = as_bool(record.get("flash_attention"))
    optional = {k: str(record[k]).strip().lower() for k in ("grad_dtype", "trainer") if not is_null(record.get(k))}
    run = RunSpec(global_batch, int(record["seq_len"]), precision=_precision(record.get("precision"), notes),
                  flash_attention=True if flash is None else flash,
                  mfu_convention=_mfu_convention(record.get("mfu_convention"), notes), **optional)
    run = _fp8_run(run, record.get("fp8_recipe"), cluster, notes)
    fields = {k: record.get(k) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "zero", "sp", "recompute")}
    strategy = _checked(model, cluster, run, _strategy(model, fields, gpus, global_batch, False, notes))
    if _recompute_unknown(fields.get("recompute")):
        strategy = _least_recompute_that_fits(model, cluster, run, strategy, notes)
    return MeasuredRun(record.get("id") or f"row{index + 1}", model, cluster, run, strategy, False,
                       as_number(record.get("step_seconds")), as_fraction(record.get("mfu"), "mfu"), None, None,
                       as_number(record.get("memory_gib")), tuple(notes))


def _csv_rows(path: Path) -> list[tuple[str, Any]]:
    header, records = csv_records(read_text(path), path)
    missing = [c for c in CSV_REQUIRED if c not in header]
    if missing:
        raise SpecError(f"{path}: the header lacks the column(s) {', '.join(missing)}; a runs CSV needs "
                        f"{', '.join(CSV_REQUIRED)}")
    return [(record.get("id") or f"row{i + 1}", lambda i=i, record=record: _csv_row(i, record, path.parent))
            for i, record in enumerate(records)]


def read_rows(path: Path) -> list[tuple[str, Any]]:
    """(run id, builder) per run of a measured-runs CSV or a published-runs YAML; a builder returns the run's
    MeasuredRun or raises SkipRun."""
    return _csv_rows(path) if path.suffix.lower() == ".csv" else _yaml_rows(path)


__all__ = ["GPU_PRESETS", "SkipRun", "MeasuredRun", "CSV_REQUIRED", "read_rows"]
