"""Reading measured runs (a published-runs YAML or a CSV of your own runs) into model, cluster, run and strategy.

The model is read by validation/run_model.py (the library's schema, `model: NAME`, `model_file:`), the strategy by
validation/run_strategy.py (the --strategy parser, every key) and the knobs a row leaves `unknown` are filled by
ndcp's own search with the published fields pinned (validation/unknowns.py). Rules for the run's other fields (each
use is recorded in the row's `assumptions`):
- precision: "fp16" -> fp16, anything naming fp8 -> fp8 (FP8 linear layers, docs/formulas.md §3.1) with the stated
  `fp8_recipe`, else the trainer's default (Trainer.default_fp8_recipe: delayed for Megatron/Transformer Engine,
  tensorwise for torchtitan's Float8 dynamic scaling), noted; FP8 on a device without FP8 is skipped; anything
  else 16-bit (including "bf16-assumed") -> bf16;
- trainer: a stated `training.trainer`, else torchtitan for rows whose source or recompute detail names torchtitan
  (their memory is FSDP2's, their selective AC torchtitan's op-level policy: estimate/activations.py), else Megatron;
- MFU convention: `outcome.mfu_convention` (YAML) or an `mfu_convention` column (CSV), "causal" or "full"
  (specs/run.py MFU_CONVENTIONS); unstated -> causal, as current Megatron-LM counts;
- MFU as written: a fraction (0.45), a percentage with its sign (45%), or a bare number above 1, which can only be
  a percentage (45 -> 0.45); above 100 % is refused as the row's error;
- gradient dtype: a stated `training.grad_dtype`, else bf16 for NVIDIA dgxc-benchmarking rows (NVIDIA's performance
  recipes reduce gradients in bf16: grad_reduce_in_fp32 = False in Megatron-Bridge scripts/performance/configs
  llama3/llama3_8b_llm_pretrain.py and llama31/llama31_405b_llm_pretrain.py, and in NeMo's
  pretrain_performance_optimizations, e.g. recipes/gpt3_175b.py), else fp32 main gradients (Megatron's default);
- torch.compile: a stated `training.torch_compile` (true/false; torchtitan only, RunSpec.torch_compile), else eager;
  the loss compiled too where `training.compile_loss` says so (RunSpec.compile_loss), else an eager loss;
- torchtitan's attention projections: a stated `training.qkv_projections` (RunSpec.qkv_projections: separate for
  the torchtitan before 0.3.0 that every torchtitan row ran), else fused (0.3.0's);
- loss kernel: a stated `training.loss_kernel` (RunSpec.loss_kernel: unfused, native, te or eager, what the row's
  recipe runs), else what the trainer's own default runs: Megatron-LM's unfused, stated as the row's loss kernel
  (ndcp's Megatron files run the fused one), torchtitan's eager; noted;
- FSDP: a stated `training.fsdp_version` (RunSpec.fsdp_version: fsdp1 for PyTorch FullyShardedDataParallel, as
  Composer / llm-foundry and fms-fsdp run it; fsdp2 for fully_shard, as NeMo AutoModel runs it), and its
  `training.grad_sync` / `training.param_gather` (RunSpec's: e.g. FSDP2 with reshard_after_forward False gathers
  once per micro-batch, `microbatch`), else the trainer's own;
- overlaps: a stated `training.overlap` (RunSpec.overlap's syntax, e.g. "tp+p2p": what the row's recipe turns on,
  estimate/overlap.py), else the trainer's defaults; with `ep`, a stated `training.delay_wgrad_compute`
  (RunSpec.delay_wgrad_compute), else Megatron's default, off;
- BF16 first/last layers in an FP8 run: a stated `training.first_layers_bf16` / `last_layers_bf16` (RunSpec's:
  Megatron's --first-last-layers-bf16 with its two counts, as the row's recipe leaves them), else none;
- scale-out network: a stated `cluster.scale_out_gbps_per_node` (Gb/s one way over a node's NICs, as sources
  state it) replaces the preset's per-device `inter_node_bandwidth` by the node's figure over its devices, else the
  preset's (one NIC per GPU: HDR 200 Gb/s on A100, NDR 400 Gb/s on H100);
- sequence length: `training.seq_len`, else the model mapping's `seq_len` (published rows);
- peak-memory basis: `outcome.memory_basis`, `reserved` (torch.cuda.max_memory_reserved: the allocator's segments,
  what torchtitan and NeMo log) or `allocated` (torch.cuda.max_memory_allocated: the live tensors); unstated ->
  reserved, noted when the row has a peak (validation/compare.py compares the matching estimate).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..estimate.fp8 import check_fp8
from ..estimate.trainers import loss_kernel
from ..specs.device import PRESETS, ClusterSpec, device_preset
from ..specs.fields import SpecError, near_key
from ..specs.library import parse_yaml
from ..specs.model import ModelSpec
from ..specs.run import MFU_CONVENTIONS, RunSpec
from ..specs.strategy import Strategy
from ..specs.strategy_input import STRATEGY_KEYS
from ..specs.trainer_behaviour import MEGATRON, MEGATRON_LM_LOSS_KERNEL
from ..specs.units import GIB
from ..trainers import trainer_named
from .run_model import read_model, row_seq_len
from .run_strategy import checked_strategy, read_strategy
from .shape import check_runs_document, csv_records
from .unknowns import Filled, fill_unknowns
from .values import SkipRun, as_bool, as_count, as_fraction, as_number, is_null, read_text

# A measured run did fit: it is estimated (and its unknown knobs searched, unknowns.py) at the point estimate, the
# confidence 0 its residuals feed the evidence table with (estimate/evidence.py; docs/confidence.md §1).
MEASURED_CONFIDENCE = 0.0
MEMORY_BASES = ("reserved", "allocated")  # torch.cuda.max_memory_reserved / max_memory_allocated

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


# -- building specs from a row ---------------------------------------------------------------------------------------
def _cluster(gpu_id: str, gpus: int, per_node: Any, scale_out_gbps: Any = None) -> ClusterSpec:
    if gpu_id in GPU_PRESETS:
        preset, overrides = GPU_PRESETS[gpu_id]
    elif gpu_id.strip().lower() in PRESETS:
        preset, overrides = gpu_id.strip().lower(), {}
    else:
        hint = near_key(gpu_id.strip().lower(), [*PRESETS, *GPU_PRESETS], cutoff=0.6)
        raise SkipRun(f"device {gpu_id!r} has no ndcp preset{hint}; valid: {', '.join(PRESETS)} (or a hardware id "
                      f"of examples/published_runs.yaml: {', '.join(GPU_PRESETS)})")
    if not is_null(per_node):
        overrides = {**overrides, "devices_per_node": int(per_node)}
    cluster = ClusterSpec(device_preset(preset), int(gpus)).with_overrides(**overrides)
    if is_null(scale_out_gbps):
        return cluster
    return cluster.with_overrides(inter_node_bandwidth=_node_scale_out(scale_out_gbps, cluster.device.devices_per_node))


def _node_scale_out(gbps: Any, per_node: int) -> float:
    """`cluster.scale_out_gbps_per_node`: a node's scale-out network as a source states it, Gb/s one way over all its
    NICs (the fms-fsdp A100 rows: "400Gbps inter-node interconnect"), as ndcp's per-device share of it, bytes/s:
    gbps x 1e9 / 8 / the node's devices (DeviceSpec.inter_node_bandwidth: one NIC's worth per device)."""
    try:
        value = float(str(gbps).strip())
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise SpecError(f"cluster.scale_out_gbps_per_node: {gbps!r} is not a positive number of Gb/s (e.g. 400 for "
                        "a node with 400 Gb/s of NICs)")
    return value * 1e9 / 8 / per_node


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


# torch.compile switches a row states (true: torchtitan's compile.enable for the blocks, the loss compiled too;
# RunSpec checks the trainer), else eager
COMPILE_SWITCHES = ("torch_compile", "compile_loss")


def _trainer(entry: dict, training: dict, notes: list[str]) -> str:
    """The stated `training.trainer`; else torchtitan when the row's source or recompute detail names it (its
    selective AC is then torchtitan's op-level policy and its model states FSDP2's), else megatron."""
    if not is_null(training.get("trainer")):
        return str(training["trainer"]).strip().lower()
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
    source: str = ""  # the publication (a YAML row's source.group, else its id before the first "_")
    searched: str = ""  # what the pinned search filled (the knobs the row leaves unknown), else ""
    memory_basis: str = "reserved"  # which allocator peak memory_gib is: MEMORY_BASES



# -- YAML (published_runs.yaml shape, docs/calibration.md) --------------------------------------------------------
def _row_strategy(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, fields: dict, narayanan: bool,
                  notes: list[str]) -> Filled:
    """The row's strategy (run_strategy.py) with its unknown knobs filled by the pinned search (unknowns.py), that
    note also in `notes`."""
    if not isinstance(fields, dict):
        raise SkipRun("strategy is not published (a mapping of strategy keys)")
    published = read_strategy(fields, model, narayanan, notes)
    strategy = checked_strategy(model, cluster, run, published.values, notes)
    filled = fill_unknowns(model, cluster, run, strategy, published.unknown)
    notes += [filled.note] if filled.note else []
    return filled


# Megatron run settings a row states as written (RunSpec checks them): the memory settings, a bool and an integer
# (0: every micro-batch deferred; docs/calibration.md §3), and training.delay_wgrad_compute (RunSpec
# .delay_wgrad_compute, under training.overlap ep), and training.first_layers_bf16 / last_layers_bf16 (RunSpec: the
# layers Megatron's --first-last-layers-bf16 keeps in BF16 under fp8, checked once the FP8 recipe is read)
MEGATRON_SETTINGS = ("disable_parameter_transpose_cache", "wgrad_deferral_limit", "delay_wgrad_compute",
                     "first_layers_bf16", "last_layers_bf16")


def _stated(fields: dict, keys: tuple[str, ...]) -> dict[str, str]:
    """The run settings among `keys` a row states (RunSpec checks their values; the rest keep RunSpec's defaults)."""
    return {k: str(fields[k]).strip().lower() for k in keys if not is_null(fields.get(k))}


def _yaml_row(entry: dict, folder: Path, unknown_peaks: frozenset[str] = frozenset()) -> MeasuredRun:
    notes: list[str] = []
    cluster_fields, training = entry.get("cluster") or {}, entry.get("training") or {}
    outcome = entry.get("outcome") or {}
    narayanan = _states_narayanan_basis(outcome, str(entry.get("notes") or ""))
    seq = row_seq_len(entry)
    if seq is None or is_null(training.get("global_batch")):
        raise SkipRun("sequence length or global batch is not published")
    model = read_model(entry, seq, folder, notes)
    gpus = int(cluster_fields.get("num_gpus") or 0)
    if gpus <= 0:
        raise SkipRun("cluster.num_gpus is not published")
    cluster = _cluster(str(cluster_fields.get("gpu")), gpus, cluster_fields.get("gpus_per_node"),
                       cluster_fields.get("scale_out_gbps_per_node"))
    run = RunSpec(int(training["global_batch"]), seq, precision=_precision(training.get("precision"), notes),
                  flash_attention=_flash_attention(entry, training, notes),
                  grad_dtype=_grad_dtype(entry, training, notes), trainer=_trainer(entry, training, notes),
                  mfu_convention=_mfu_convention(outcome.get("mfu_convention"), notes), confidence=MEASURED_CONFIDENCE,
                  **{k: bool(as_bool(training.get(k))) for k in COMPILE_SWITCHES},
                  **_stated(training, ("attention_kernel", "moe_dispatcher", "optimizer_state_dtype", "overlap",
                                       "fsdp_version", "grad_sync", "param_gather", "loss_kernel",
                                       "qkv_projections")),
                  **{k: training[k] for k in MEGATRON_SETTINGS if not is_null(training.get(k))})
    run = _fp8_run(run, training.get("fp8_recipe"), cluster, notes)
    run.check_as_read()  # once the FP8 recipe is read: BF16 first/last layers depend on it
    run = _unstated_loss_kernel(run, training, notes)
    strategy, searched = _row_strategy(model, cluster, run, entry.get("strategy") or {}, narayanan, notes)
    memory = as_number(outcome.get("memory_gib_per_gpu"), "outcome.memory_gib_per_gpu", "50.2")
    observed = (entry.get("memory_observation") or {}).get("peak_memory_usage_bytes")
    if memory is None and not is_null(observed):
        memory = float(observed) / GIB
    basis = _memory_basis(outcome.get("memory_basis"), memory is not None, notes)
    return MeasuredRun(str(entry.get("id")), model, cluster, run, strategy, narayanan,
                       as_number(outcome.get("step_time_s"), "outcome.step_time_s", "1.7"),
                       as_fraction(outcome.get("mfu"), "outcome.mfu"),
                       as_number(outcome.get("tflops_per_gpu"), "outcome.tflops_per_gpu", "420"),
                       as_number(outcome.get("tokens_per_s_per_gpu"), "outcome.tokens_per_s_per_gpu", "3760"), memory,
                       tuple(notes), str(cluster_fields.get("gpu")) not in unknown_peaks, _publication(entry),
                       searched, basis)


def _unstated_loss_kernel(run: RunSpec, training: dict, notes: list[str]) -> RunSpec:
    """The run with the loss kernel a row that states no `training.loss_kernel` ran, said in the notes (none under a
    compiled loss, its own kernel): a Megatron row Megatron-LM's own default (MEGATRON_LM_LOSS_KERNEL, unfused),
    stated, since ndcp's Megatron files run the fused loss (TrainerBehaviour.loss_kernel); another the trainer's."""
    if not is_null(training.get("loss_kernel")) or run.compile_loss:
        return run
    if run.trainer == MEGATRON.name:
        notes.append(f"loss kernel {MEGATRON_LM_LOSS_KERNEL} (Megatron-LM's default; unstated)")
        return replace(run, loss_kernel=MEGATRON_LM_LOSS_KERNEL)
    notes.append(f"loss kernel {loss_kernel(run)} (the trainer's; unstated)")
    return run


def _publication(entry: dict) -> str:
    """The publication a YAML row belongs to: `source.group`, else the id before the first "_"."""
    group = (entry.get("source") or {}).get("group") if isinstance(entry.get("source"), dict) else None
    return str(group) if not is_null(group) else str(entry.get("id")).split("_", 1)[0]


def _stated_choice(value: Any, field: str, label: str, choices: tuple[str, ...], default: str,
                   notes: list[str]) -> str:
    """One of `choices` as the row states it in `field`; unstated -> `default`, said in `notes` as "<label> <default>
    (unstated)". Raises SpecError naming the field for any other value."""
    if is_null(value):
        notes.append(f"{label} {default} (unstated)")
        return default
    chosen = str(value).strip().lower()
    if chosen not in choices:
        raise SpecError(f"{field}={value!r}: expected one of {', '.join(choices)}")
    return chosen


def _mfu_convention(value: Any, notes: list[str]) -> str:
    """The convention the source's MFU (or TFLOP/s) counts causal attention in; unstated -> "causal" (current
    Megatron-LM), recorded in the row's assumptions."""
    return _stated_choice(value, "mfu_convention", "mfu convention", MFU_CONVENTIONS, "causal", notes)


def _memory_basis(value: Any, has_peak: bool, notes: list[str]) -> str:
    """Which allocator figure the row's peak memory is (MEMORY_BASES); unstated -> reserved, noted for a row with a
    peak."""
    return _stated_choice(value, "outcome.memory_basis", "memory basis", MEMORY_BASES, "reserved",
                          notes if has_peak else [])


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
    return [(str(entry.get("id", f"run{i}")), lambda entry=entry: _yaml_row(entry, path.parent, unknown))
            for i, entry in enumerate(data["runs"])]


# -- CSV of measured runs -------------------------------------------------------------------------------------------
CSV_REQUIRED = ("model", "device", "gpus", "global_batch", "seq_len", "tp", "pp", "dp")
# strategy columns: every --strategy key (an empty cell: not published)
CSV_STRATEGY_COLUMNS = STRATEGY_KEYS


def _csv_row(index: int, record: dict, folder: Path) -> MeasuredRun:
    notes: list[str] = []
    missing = [c for c in CSV_REQUIRED if is_null(record.get(c))]
    if missing:
        raise SkipRun(f"missing column value(s): {', '.join(missing)}")
    seq = as_count(record["seq_len"], "seq_len", "4096")
    model = read_model({"model": record["model"].strip()}, seq, folder, notes)
    gpus = as_count(record["gpus"], "gpus", "16")
    global_batch = as_count(record["global_batch"], "global_batch", "64")
    cluster = _cluster(record["device"], gpus, record.get("devices_per_node"))
    flash = as_bool(record.get("flash_attention"))
    run = RunSpec(global_batch, seq, precision=_precision(record.get("precision"), notes),
                  flash_attention=True if flash is None else flash,
                  mfu_convention=_mfu_convention(record.get("mfu_convention"), notes), confidence=MEASURED_CONFIDENCE,
                  **_stated(record, ("grad_dtype", "trainer", "loss_kernel")))
    run = _fp8_run(run, record.get("fp8_recipe"), cluster, notes)
    run = _unstated_loss_kernel(run, record, notes)
    fields = {k: v for k, v in record.items() if k in CSV_STRATEGY_COLUMNS}
    strategy, searched = _row_strategy(model, cluster, run, fields, False, notes)
    memory = as_number(record.get("memory_gib"), "memory_gib", "50.2")
    basis = _memory_basis(record.get("memory_basis"), memory is not None, notes)
    return MeasuredRun(record.get("id") or f"row{index + 1}", model, cluster, run, strategy, False,
                       as_number(record.get("step_seconds"), "step_seconds", "1.7"), as_fraction(record.get("mfu"), "mfu"),
                       None, None, memory, tuple(notes), searched=searched, memory_basis=basis)


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
