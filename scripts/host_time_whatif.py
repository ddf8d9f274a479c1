"""What a host-bound MoE layer would do to the measured MoE rows: each stretch between Megatron-Core's per-layer
host-device syncs taking the longer of its host issue time (docs/host_time.yaml, scripts/measure_host_time.py) and
ndcp's own GPU time for it (ndcp/estimate/layer_time.py LayerTime). A check, not a model: nothing here is fitted to
the rows and nothing in ndcp uses it (docs/formulas.md §3.2, "host issue time").

    PYTHONPATH=$PWD .venv/bin/python scripts/host_time_whatif.py [--scale 1.0] > /tmp/whatif.md

Per micro-batch on the slowest stage of each MoE row (n MoE layers, the stage's other body layers spread over
them; the dispatcher waits once per MoE layer forward, so each segment is one MoE layer and its share of the others):
- forward: n x max(0, H_f - G_f), H_f = the MoE layer's host forward (the table's fit at the row's local experts,
  E / ep; `low`: the fit's fixed part only, as if the experts' GEMMs cost the host nothing per expert, as Transformer
  Engine's grouped GEMM issues them from C++) plus the other layers' share (the dense row's forward), G_f = the
  layers' forward windows (LayerTime.forward_window); once more under full recompute, whose re-run forward syncs too;
- backward (variant `fb`): no sync in the backward, so the host runs ahead and only the stage's whole backward is
  bounded: max(0, H_b - G_b) over the stage's layers.
The stage's extra time enters the step as the schedule's critical path scales the slowest stage (pipeline seconds /
stage time). `--scale` multiplies every host time (the cluster's CPU against the measured one). Rows without MoE
layers are printed too: they have no per-layer sync, so only their whole forward and backward per micro-batch are
bounded by the host (the dense row's host times).
Columns: G_f, one segment's GPU forward (a MoE layer with its share of the stage's other layers; full recompute's
re-run forwards counted as segments); H_f, the MoE layer's host forward alone, low (fixed part) and high (with the
per-expert loop); "H_f to close", the host time per segment that would make the forward-only variant meet the
measured step; then the signed step errors.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import NamedTuple

import yaml

from ndcp.estimate.keys import Degrees, StageKey
from ndcp.estimate.layer_time import layer_time
from ndcp.estimate.layout import stage_mode_counts
from ndcp.estimate.overlap import strategy_overlaps
from ndcp.estimate.time import estimate_time, p2p_per_microbatch, stage_times
from ndcp.specs.recompute import LAYER_FORWARD, recompute_option
from ndcp.validation.compare import compare_row, measured_row
from ndcp.validation.runs import SkipRun, read_rows

ROOT = Path(__file__).resolve().parent.parent
FILES = ("examples/measured_runs_2.yaml", "examples/measured_runs_nvl72.yaml")
TABLE = ROOT / "docs" / "host_time.yaml"


def host_table(path: Path = TABLE) -> dict:
    """The microseconds the what-if needs: the table's fit on the minima (moe_fit_min: fixed, per local expert, per
    segment) and the dense row's minima."""
    table = yaml.safe_load(path.read_text(encoding="utf-8"))
    fit = {seg: (v["fixed_us"], v["per_expert_us"]) for seg, v in table["moe_fit_min"].items()}
    dense = next(row for row in table["rows"] if row["layer"] == "dense")
    return {"fit": fit, "dense_forward": dense["forward"]["min_us"], "dense_backward": dense["backward"]["min_us"]}


def _host(table: dict, local_experts: float, low: bool) -> tuple[float, float]:
    """(forward, backward) host seconds of one MoE layer with `local_experts` experts on the device."""
    fit, per = table["fit"], 0.0 if low else local_experts
    forward = sum(fit[s][0] + fit[s][1] * per for s in ("forward_before_sync", "forward_after_sync"))
    backward = fit["backward"][0] + fit["backward"][1] * per
    return forward * 1e-6, backward * 1e-6


class Stage(NamedTuple):
    """The slowest stage's body layers for one micro-batch: MoE layers, the others, their forward and backward
    windows (G, seconds), the full-recompute re-run forwards of MoE layers and their seconds."""

    moe: int
    other: int
    forward: float
    backward: float
    reruns: int
    rerun_seconds: float


def slowest_stage(row) -> Stage:
    """The row's slowest stage (as estimate_time picks it), layer by layer."""
    model, cluster, run, s = row.model, row.cluster, row.run, row.strategy
    times = stage_times(model, cluster, run, s)
    p2p = p2p_per_microbatch(model, cluster, run, s)
    slowest = max(range(len(times)), key=lambda i: times[i].total + p2p)
    key = StageKey(Degrees.of_strategy(s), s.cp_comm, strategy_overlaps(run, s))
    moe = other = reruns = 0
    forward = backward = rerun_seconds = 0.0
    for (kind, mode), n in stage_mode_counts(model, s)[slowest]:
        lt = layer_time(model, cluster, run, key.layer(kind, mode))
        forward += n * lt.forward_window
        backward += n * lt.backward_window
        rerun = LAYER_FORWARD in recompute_option(mode).reruns
        if kind == "moe":
            moe += n
            reruns += n if rerun else 0
            rerun_seconds += n * lt.recompute if rerun else 0.0
        else:
            other += n
    return Stage(moe, other, forward, backward, reruns, rerun_seconds)


def stage_extra(row, stage: Stage, table: dict, low: bool, backward: bool, scale: float) -> float:
    """Seconds a host-bound MoE layer adds to one micro-batch of the row's slowest stage (module docstring); a stage
    without MoE layers has no per-layer sync: only its whole forward and backward are bounded by the host."""
    experts = row.model.moe.experts / row.strategy.ep if row.model.moe else 0.0
    h_moe_f, h_moe_b = _host(table, experts, low)
    h_dense_f, h_dense_b = table["dense_forward"] * 1e-6, table["dense_backward"] * 1e-6
    extra = max(0.0, scale * (stage.moe * h_moe_f + stage.other * h_dense_f) - stage.forward)
    if stage.reruns:  # the re-run forwards sync too: their segments
        extra += max(0.0, scale * stage.reruns * h_moe_f - stage.rerun_seconds)
    if backward or not stage.moe:
        extra += max(0.0, scale * (stage.moe * h_moe_b + stage.other * h_dense_b)
                     - (stage.backward - stage.rerun_seconds))
    return extra


def _rows():
    for name in FILES:
        for _, build in read_rows(ROOT / name):
            try:
                row = measured_row(build)
            except SkipRun:
                continue
            yield row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    table = host_table()
    print("| row | source | device | E/ep | tokens | MoE layers x mbn | G_f ms | H_f ms low / high | H_f to close | "
          "measured s | ndcp | +H fwd (low) | +H fwd | +H fwd+bwd |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in _rows():
        cmp = compare_row(row)
        measured, step = cmp.measured_step, cmp.estimated_step
        if not measured:
            continue
        est = estimate_time(row.model, row.cluster, row.run, row.strategy)
        stage_max = sum(est.parts[k] for k in ("compute_forward", "compute_backward", "recompute", "tp_comm",
                                               "cp_comm", "ep_comm", "pp_comm")) / row.strategy.mbn
        factor = (row.strategy.mbn * stage_max + est.parts["bubble"]) / stage_max
        stage = slowest_stage(row)
        news = [step + factor * stage_extra(row, stage, table, low, bwd, args.scale)
                for low, bwd in ((True, False), (False, False), (False, True))]
        cells = [f"{100 * (new / measured - 1):+.1f} %" for new in news]
        experts = row.model.moe.experts // row.strategy.ep if row.model.moe else 0
        if stage.moe:
            per = stage.moe * (1 + stage.reruns / stage.moe)
            g_f = (stage.forward + stage.rerun_seconds) / per
            close = g_f + (measured - step) / (factor * per)
            layer = (f"{1e3 * g_f:.2f} | {1e3 * args.scale * _host(table, experts, True)[0]:.1f} / "
                     f"{1e3 * args.scale * _host(table, experts, False)[0]:.1f} | {1e3 * close:.1f}")
        else:
            layer = "- | - | -"
        tokens = Degrees.of_strategy(row.strategy).tokens(row.run.seq_len)
        print(f"| {row.id} | {row.source} | {row.cluster.device.name} | {experts or '-'} | {tokens:g} | "
              f"{stage.moe} x {row.strategy.mbn} | {layer} | {measured:.2f} | {100 * (step / measured - 1):+.1f} % | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
