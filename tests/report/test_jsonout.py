"""The `--json` documents (ndcp.report.jsonout): the `run` object carries every RunSpec field."""
from __future__ import annotations

import dataclasses
import json

from ndcp.cli import main
from ndcp.estimate.evidence import Evidence
from ndcp.report.jsonout import RUN_KEYS, estimate_document, run_document, with_evidence
from ndcp.specs.device import PRESETS, ClusterSpec
from ndcp.specs.run import RunSpec

FIELDS = [f.name for f in dataclasses.fields(RunSpec)]
CLUSTER = ClusterSpec(PRESETS["h100"], 8)
# A value other than the default for each field (optimizer has one: adam).
OTHER = {"global_batch": 64, "seq_len": 8192, "precision": "fp16", "grad_dtype": "bf16", "flash_attention": False,
         "attention_kernel": "triton", "torch_compile": True, "compile_loss": True, "loss_kernel": "te",
         "qkv_projections": "separate",
         "memory_cap_bytes": 40 * 2**30, "reserve_bytes": 2 * 2**30, "trainer": "torchtitan", "grad_sync": "step",
         "param_gather": "step", "fsdp_version": "fsdp1", "mfu_convention": "full", "headroom_fraction": 0.1,
         "fp8_recipe": "blockwise",
         "optimizer_state_dtype": "bf16", "activation_func_fp8_input_store": True,
         "disable_parameter_transpose_cache": True, "wgrad_deferral_limit": 22, "images_per_sample": 2,
         "image_size": 336, "overlap": "tp+p2p", "moe_dispatcher": "allgather", "moe_load_imbalance": 1.5,
         "confidence": 0.5, "delay_wgrad_compute": True, "first_layers_bf16": 2, "last_layers_bf16": 1}

# fields valid only with another field's value
REQUIRES = {"torch_compile": {"trainer": "torchtitan"}, "compile_loss": {"trainer": "torchtitan"},
            "qkv_projections": {"trainer": "torchtitan"},
            "delay_wgrad_compute": {"overlap": "ep"}}


def test_every_run_field_reaches_the_json_run_object(capsys):
    argv = ["estimate", "llama3-8b", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "4096",
            "--overlap", "tp", "--strategy", "tp=2,sp=on", "--json", "-"]
    assert main(argv) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert set(FIELDS) <= set(run)
    assert run["overlap"] == "tp"
    assert list(run) == list(RUN_KEYS)  # in the order --json has written them


def test_each_run_field_is_written_from_its_value():
    base = RunSpec(global_batch=32, seq_len=4096, precision="fp8")  # fp8: its recipe is written
    assert sorted(OTHER) == sorted(set(FIELDS) - {"optimizer"})
    for field, value in OTHER.items():
        start = dataclasses.replace(base, **REQUIRES.get(field, {}))
        changed = dataclasses.replace(start, **{field: value})
        before, after = run_document(start, CLUSTER), run_document(changed, CLUSTER)
        assert before[field] != after[field] and after[field] == value, field


def test_a_field_not_in_the_key_order_still_reaches_the_run_object(monkeypatch):
    import ndcp.report.jsonout as jsonout

    monkeypatch.setattr(jsonout, "RUN_KEYS", tuple(k for k in RUN_KEYS if k != "overlap"))
    assert jsonout.run_document(RunSpec(32, 4096, overlap="p2p"), CLUSTER)["overlap"] == "p2p"


def _estimate(confidence: float, recompute: str = "selective") -> dict:
    from ndcp.estimate.memory import estimate_memory
    from ndcp.estimate.time import estimate_time
    from ndcp.specs.library import load_model
    from ndcp.specs.recompute import RecomputePlan
    from ndcp.specs.strategy import Strategy

    model, run = load_model("llama3-8b"), RunSpec(global_batch=32, seq_len=4096, confidence=confidence)
    strategy = Strategy(dp=4, tp=2, mbn=8, sp=True, recompute=RecomputePlan(recompute))
    return estimate_document(model, CLUSTER, run, strategy, estimate_memory(model, CLUSTER, run, strategy),
                             estimate_time(model, CLUSTER, run, strategy))


def test_a_strategy_object_carries_its_band_and_evidence():
    doc = _estimate(0.9)
    low, high = doc["time"]["step_seconds_band"]
    assert low < doc["time"]["step_seconds"] < high
    assert isinstance(doc["memory"]["peak_bytes_band_high"], int)
    assert doc["memory"]["peak_bytes_band_high"] > doc["memory"]["peak_bytes"]
    assert doc["evidence"]["confidence"] == 0.9 and doc["evidence"]["features_without_evidence"] == []
    offloading = _estimate(0.9, "offload")
    assert offloading["evidence"]["features_without_evidence"] == ["activation offload"]


def test_at_confidence_zero_the_bands_are_the_point_estimate():
    doc = _estimate(0.0)
    assert doc["time"]["step_seconds_band"] == [doc["time"]["step_seconds"]] * 2
    assert doc["memory"]["peak_bytes_band_high"] == doc["memory"]["peak_bytes"]
    assert doc["evidence"]["confidence"] == 0.0


def test_with_evidence_scales_the_point_by_the_factors_and_leaves_the_rest():
    evidence = Evidence(3, (0.5, 2.0), 1.25, 2, ("dualpipev",), 0.8)
    entry = {"rank": 1, "memory": {"peak_bytes": 1000, "fits": True}, "time": {"step_seconds": 4.0}}
    out = with_evidence(entry, evidence)
    assert out["time"] == {"step_seconds": 4.0, "step_seconds_band": [2.0, 8.0]}
    assert out["memory"] == {"peak_bytes": 1000, "fits": True, "peak_bytes_band_high": 1250}
    assert out["evidence"] == {"runs": 3, "memory_rows": 2, "features_without_evidence": ["dualpipev"],
                               "confidence": 0.8}
    assert entry == {"rank": 1, "memory": {"peak_bytes": 1000, "fits": True}, "time": {"step_seconds": 4.0}}
    assert "time" not in with_evidence({"memory": {"peak_bytes": 10}}, evidence)  # no time estimate: no step band
