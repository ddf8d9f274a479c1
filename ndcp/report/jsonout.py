"""JSON documents for the command line: result objects turned into plain dicts, and `--json PATH|-` writing.

Sizes are integer bytes, times seconds, bandwidths bytes/s and FLOP/s as floats. These helpers only copy and
rename what the specs and estimators return; they never recompute an estimate.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Iterable

from ..estimate.evidence import Evidence, plan_evidence
from ..estimate.layout import layout_document
from ..space import SearchSpace
from ..specs.device import ClusterSpec, DeviceSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import Strategy
from .output import write_output


def model_document(model: ModelSpec) -> dict:
    """The `model` object: identity, size and shape."""
    doc = {
        "name": model.name,
        "parameters": int(model.parameters),
        "active_parameters": int(model.active_parameters),
        "layers": model.layers,
        "hidden": model.hidden,
        "heads": model.heads,
        "kv_heads": model.num_kv_heads,
        "ffn_hidden": model.ffn_hidden,
        "vocab": model.vocab,
        "experts": model.moe.experts if model.moe else 0,
        "top_k": model.moe.top_k if model.moe else 0,
        "shared_experts": model.moe.shared_experts if model.moe else 0,
        "mla": model.mla is not None,
        "mtp_depth": model.mtp_depth,
        # the language model and the submodules beside it, in pipeline order (docs/models.md §5)
        "submodules": [{"name": name, "parameters": int(n)} for name, n in model.submodules],
        "source": model.source,
        "assumptions": list(model.report_assumptions),  # what reading the source assumed, one line each
    }
    return doc


def device_document(device: DeviceSpec) -> dict:
    """The `device` object (one accelerator after any overrides): bytes, FLOP/s and bytes/s."""
    return {
        "name": device.name,
        "memory_bytes": int(device.memory_bytes),
        "peak_flops": float(device.peak_flops),
        "hbm_bandwidth": float(device.hbm_bandwidth),
        "intra_node_bandwidth": float(device.intra_node_bandwidth),
        "inter_node_bandwidth": float(device.inter_node_bandwidth),
        "devices_per_node": device.devices_per_node,
        "intra_node_latency": float(device.intra_node_latency),
        "inter_node_latency": float(device.inter_node_latency),
        "scale_up_efficiency": float(device.scale_up_efficiency),  # what NCCL reaches of intra_node_bandwidth
        "scale_out_efficiency": float(device.scale_out_efficiency),  # and of inter_node_bandwidth
        "devices_per_domain": device.domain_size,  # the scale-up (NVLink) domain; intra_node_* is its link
        "pod_size": device.pod_size or None,  # devices per pod of the scale-out network; null: one flat network
        "oversubscription": float(device.oversubscription),  # scale-out taper between pods
        "fp8_peak_flops": float(device.fp8_peak_flops),
        "fp4_peak_flops": float(device.fp4_peak_flops),
        "compute_efficiency": float(device.compute_efficiency),
        "calibrated": bool(device.calibrated),  # compute_efficiency fitted on measured runs of this chip
        "fp8_compute_efficiency": float(device.fp8_ceiling),  # the FP8 GEMM ceiling in use
        "fp8_calibrated": device.fp8_calibrated,  # fitted on FP8 runs; false: the BF16 ceiling assumed
        "source": device.source,
    }


def run_settings(run: RunSpec) -> dict:
    """Run settings reported with every strategy (not searched): the GEMM precision and the FP8 recipe (null unless
    fp8)."""
    return {"precision": run.precision, "fp8_recipe": run.fp8_recipe if run.fp8 else None}


# The `run` object's keys in the order --json writes them: the RunSpec fields and what is derived from them
# (tokens_per_step, headroom_bytes, capacity_bytes). A field missing here follows them (run_document), so every
# field reaches --json.
RUN_KEYS = ("global_batch", "seq_len", "tokens_per_step", "precision", "grad_dtype", "optimizer", "flash_attention",
            "attention_kernel", "torch_compile", "compile_loss", "qkv_projections", "loss_kernel", "trainer", "grad_sync", "param_gather",
            "fsdp_version", "overlap", "delay_wgrad_compute", "mfu_convention", "fp8_recipe", "optimizer_state_dtype",
            "first_layers_bf16", "last_layers_bf16", "activation_func_fp8_input_store",
            "disable_parameter_transpose_cache", "wgrad_deferral_limit",
            "images_per_sample", "image_size", "moe_dispatcher", "moe_load_imbalance", "memory_cap_bytes",
            "reserve_bytes", "headroom_fraction", "headroom_bytes", "capacity_bytes", "confidence")


def run_document(run: RunSpec, cluster: ClusterSpec) -> dict:
    """The `run` object: every RunSpec field as it is, except those written otherwise below (null: the default
    meaning), with the tokens per step and the per-device capacity the estimators compare against."""
    memory = cluster.device.memory_bytes
    written = {
        "tokens_per_step": run.global_batch * run.seq_len,
        # grad_sync, param_gather, overlap "trainer": the trainer's default for the strategy (docs/formulas.md §7)
        **run_settings(run),
        "image_size": run.image_size or None,  # None: the vision encoder's own
        "memory_cap_bytes": int(run.memory_cap_bytes) or None,
        "reserve_bytes": None if run.reserve_bytes is None else int(run.reserve_bytes),  # None: modelled per stage
        "headroom_fraction": float(run.headroom_fraction),
        "headroom_bytes": int(run.headroom_bytes(memory)),
        "capacity_bytes": int(run.capacity(memory)),
    }
    keys = RUN_KEYS + tuple(f.name for f in dataclasses.fields(RunSpec) if f.name not in RUN_KEYS)
    return {key: written[key] if key in written else getattr(run, key) for key in keys}


def _layout(model: ModelSpec, strategy: Strategy) -> dict:
    """{"layout": layers per device stage and chunk, where the embedding and the loss sit, Megatron's notation}."""
    return {"layout": layout_document(model, strategy)}


def with_evidence(entry: dict, evidence: Evidence) -> dict:
    """A strategy object (its `memory`, and `time` when estimated) with its band at the evidence's confidence:
    time.step_seconds_band [low, high] seconds, memory.peak_bytes_band_high bytes and the `evidence` object
    (docs/evidence.md)."""
    out = {**entry, "memory": {**entry["memory"],
                               "peak_bytes_band_high": evidence.peak_bytes_high(entry["memory"]["peak_bytes"])}}
    if "time" in entry:
        out["time"] = {**entry["time"],
                       "step_seconds_band": list(evidence.step_seconds_band(entry["time"]["step_seconds"]))}
    return {**out, "evidence": evidence.document()}


def estimate_document(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy, memory,
                      time=None, notes: Iterable[str] = ()) -> dict:
    """The `ndcp estimate --json` document, its bands at the run's confidence. `time` is omitted when no time estimate is
    available."""
    doc: dict[str, Any] = {
        "model": model_document(model),
        "device": device_document(cluster.device),
        "gpus": cluster.count,
        "nodes": cluster.nodes,
        "domain_ranks": cluster.domain_ranks,  # consecutive ranks per scale-up domain (ClusterSpec.domain_ranks)
        "run": run_document(run, cluster),
        "strategy": {**strategy.as_dict(), **_layout(model, strategy), **run_settings(run)},
        "memory": memory.as_dict(),
    }
    if time is not None:
        doc["time"] = time.as_dict()
    doc = with_evidence(doc, plan_evidence(model, cluster.device.name, run, strategy, run.confidence))
    notes = list(notes)
    if notes:
        doc["notes"] = notes
    return doc


def strategy_entry(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, entry: dict, strategy: Strategy) -> dict:
    """A ranked strategy object of `search --json` (Evaluated.as_dict's `entry`): its layout, the run settings and
    its band at the run's confidence."""
    return with_evidence({**entry, "strategy": {**entry["strategy"], **_layout(model, strategy), **run_settings(run)}},
                         plan_evidence(model, cluster.device.name, run, strategy, run.confidence))


def validated_document(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, result, validated) -> dict:
    """`validated_alternative` (the best strategy resting only on evidenced features, a strategy object like the
    winner's; null when the winner is validated or none was found) and `validated_alternative_search` (null when
    the winner is validated; else the winner's features without evidence, the restricted search's status and
    proven bound, and how much slower its best is than the winner: docs/confidence.md §3)."""
    found = validated.result if validated is not None else None
    best = found.best if found is not None else None
    alternative = (strategy_entry(model, cluster, run, best.as_dict(rank=1), best.strategy)
                   if best is not None else None)
    search = None if validated is None else {
        "winner_features_without_evidence": list(validated.missing),
        "status": found.status if found is not None else None,
        "lower_bound_seconds": found.lower_bound_seconds if found is not None else None,
        "slower_by": (best.step_seconds / result.best.step_seconds - 1) if best is not None else None}
    return {"validated_alternative": alternative, "validated_alternative_search": search}


def search_document(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, space: SearchSpace, result) -> dict:
    """The `ndcp search --json` document: the estimate's model/device/gpus/run objects plus the search result, each
    strategy with its band at the run's confidence."""
    o = space.options
    found = result.as_dict()
    found["strategies"] = [strategy_entry(model, cluster, run, entry, point.strategy)
                           for entry, point in zip(found["strategies"], result.strategies)]
    return {
        "model": model_document(model),
        "device": device_document(cluster.device),
        "gpus": cluster.count,
        "nodes": cluster.nodes,
        "domain_ranks": cluster.domain_ranks,  # consecutive ranks per scale-up domain (ClusterSpec.domain_ranks)
        "run": run_document(run, cluster),
        "search": {"fix": dict(o.fix), "max": dict(o.max), "recompute_modes": list(o.recompute_modes),
                   "zero_stages": list(o.zero_stages), "sp_choices": list(o.sp_choices),
                   "tp_cp_bound": o.tp_cp_bound or None, "hsdp": list(o.hsdp)},
        **found,
        **({"gap": None, "lower_bound_seconds": None,
            "note": "greedy recompute plans (reference planner heuristic): not proven, no bound"}
           if result.status == "heuristic" else {}),
    }


def plain(value: Any) -> Any:
    """JSON-safe copy: tuples to lists, non-finite floats to null, numpy-like scalars to Python numbers (what
    `--json` writes, and what the Python API returns)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item"):  # numpy scalar
        return plain(value.item())
    return str(value)


def dumps(doc: Any) -> str:
    return json.dumps(plain(doc), indent=2, allow_nan=False)


def write_json(doc: Any, path: str | Path) -> None:
    """Write `doc` as JSON to `path`, or to stdout when path is "-" (one document, nothing else)."""
    write_output(dumps(doc) + "\n", path, "--json")


__all__ = ["model_document", "device_document", "run_document", "estimate_document", "search_document", "with_evidence",
           "strategy_entry", "validated_document", "write_json", "dumps", "plain", "RUN_KEYS"]
