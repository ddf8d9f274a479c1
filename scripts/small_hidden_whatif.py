"""What each candidate for the small-hidden-size gap (issue #34) would do to the measured rows: the step error of
every row with the candidate priced at a published figure, and the value the candidate would need to close a row.
A check, not a model: nothing here is fitted to the rows and nothing in ndcp uses it (docs/formulas.md §3,
"Small hidden sizes: candidates checked").

    PYTHONPATH=$PWD .venv/bin/python scripts/small_hidden_whatif.py > /tmp/small_hidden.md
    PYTHONPATH=$PWD .venv/bin/python scripts/small_hidden_whatif.py --calibrate   # the ceilings refitted

`--calibrate` refits the GEMM ceilings with each candidate priced (scripts/calibrate.py, nothing written) and prints
the fitted ceilings and the leave-one-source-out figures: does the candidate help once the ceilings take it in?

Candidates (VARIANTS), each a patch of one ndcp function, applied in a fresh process per variant (ndcp caches its
terms per process):
- hbm: element-wise work (estimate/compute.py memory_seconds) at a fraction of the datasheet HBM bandwidth instead of
  all of it; the published figure: 2,903 GB/s device-to-device copy on H100 SXM of 3,350 (86.7 %, Voltage Park /
  AI @ Georgia Tech cluster benchmark, github.com/aigatech/vpbenchmarking README);
- loss: the passes over the fp32 logits of the eager cross-entropy loss (estimate/time.py EAGER_LOSS_PASSES: 3
  forward, 2 backward; since RunSpec.loss_kernel, Megatron-LM's kernels are priced per run and this patches only the
  runs on the eager kernel) as Megatron-LM's unfused vocab-parallel cross entropy runs them (its default: --cross-entropy-loss-fusion
  off), megatron/core/tensor_parallel/cross_entropy.py @core_r0.8.0: forward .float() (read 2 bytes, write 4: 1.5
  passes), max (1), in-place subtract (2), exp in place (2), sum (1), in-place divide (2) = 9.5; backward in-place
  multiply (2) and the bf16 cast of the gradient (1.5) = 3.5;
- gap: a GPU-side gap per kernel between back-to-back kernels, times the kernels of one dense layer as Megatron-Core
  issues them (docs/host_time.yaml, dense row: 34 forward, 81 backward), 1 us;
- gemm: the GEMM ceiling (DeviceSpec.compute_efficiency, and the FP8 one that defaults to it) times 0.9;
- fp8: the FP8 GEMM ceiling alone (DeviceSpec.fp8_compute_efficiency, unfitted: the BF16 one) times the ratio of
  the published maximum achievable matmul rates, FP8 over BF16, on Hopper: 73.4 % (H200 SXM, float8_e4m3fn) over
  80.3 % (H100 SXM, BF16) = 0.914 (stas00/ml-engineering @744d01e, compute/accelerator/README.md, "Maximum
  Achievable Matmul FLOPS comparison table");
- grads: Megatron-Core's gradient bytes that no term prices, every micro-batch: each weight-gradient GEMM accumulates
  into the fp32 main-grad buffer (gradient_accumulation_fusion: fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32,
  megatron/core/tensor_parallel/layers.py @core_r0.8.0; Transformer Engine's fuse_wgrad_accumulation the same),
  reading and writing 4 bytes per weight where the GEMM model writes the 2-byte result (6 bytes more per weight on
  the device, the output layer's included); the vocab-parallel embedding's F.embedding backward fills a dense
  vocab x hidden / tp gradient (zeroed, 2 bytes) that DDP's hook adds into main_grad (read 2 + 4, write 4:
  distributed_data_parallel.py @core_r0.8.0, main_grad.add_): 12 bytes per embedding element; `value` scales both.
"To close" is linear in the candidate's time: value = base + (variant - base) x (measured - estimated) / (variant's
estimate - estimated), in the candidate's own units (a fraction of HBM bandwidth, passes, microseconds, a ceiling).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ("examples/published_runs.yaml", "examples/measured_runs_2.yaml", "examples/measured_runs_nvl72.yaml")
DENSE_KERNELS = (34, 81)  # docs/host_time.yaml: kernel_ops of the dense layer, forward and backward
# name: (what the value is, the base value, the published or trial value)
VARIANTS = {"hbm": ("achievable HBM fraction", 1.0, 0.867), "loss": ("fp32 passes over the logits", 5.0, 13.0),
            "gap": ("GPU gap per kernel, us", 0.0, 1.0), "gemm": ("GEMM ceiling scale", 1.0, 0.9),
            "fp8": ("FP8 GEMM ceiling scale", 1.0, 0.914), "grads": ("gradient bytes scale", 0.0, 1.0)}
GRAD_BYTES = (6, 12)  # per weight element (fp32 accumulate less the 2-byte write), per embedding element
ROWS = ("mcore_r080_h100_1.7b", "mcore_r080_h100_7.1b", "mcore_r080_h100_16b", "mcore_r080_h100_70b",
        "nemo2407_gpt3_5b_h100_fp8_64", "nemo2407_llama3_8b_h100_fp8_8", "nemo2407_llama2_7b_h100_fp8_8",
        "nemo2407_gpt3_20b_h100_fp8_64", "nemo2407_llama2_70b_h100_fp8_64", "mpt_h100_1b_s2048_64",
        "mpt_h100_fp8_3b_s2048_8", "mpt_h100_7b_s2048_8", "mpt_a100_7b_s2048_8", "narayanan2021_t1_1.7b",
        "dgxc_llama31_8b_h100_bf16_8", "mbr2511_llama3_8b_h100_fp8cs_8")


def apply(variant: str, value: float) -> None:
    """Patch ndcp for `variant` at `value` (before any estimate: the terms are cached per process)."""
    if variant == "hbm":
        import ndcp.estimate.compute as compute
        original = compute.memory_seconds

        def at_fraction(nbytes, device):
            return nbytes / (device.hbm_bandwidth * value)
        for name, module in list(sys.modules.items()):
            if name.startswith("ndcp") and getattr(module, "memory_seconds", None) is original:
                module.memory_seconds = at_fraction
    elif variant == "loss":
        import ndcp.estimate.time as time
        time.EAGER_LOSS_PASSES = (value * 9.5 / 13, value * 3.5 / 13)
    elif variant == "gap":
        import ndcp.estimate.layer_time as layer_time
        passes, (forward, backward) = layer_time._layer_passes, DENSE_KERNELS

        def with_gaps(*args, **kwargs):
            p = passes(*args, **kwargs)
            return p._replace(forward=p.forward + forward * value * 1e-6, backward=p.backward + backward * value * 1e-6)
        layer_time._layer_passes = with_gaps
    elif variant == "gemm":
        import ndcp.specs.device as device
        for name, spec in device.PRESETS.items():
            device.PRESETS[name] = replace(spec, compute_efficiency=spec.compute_efficiency * value,
                                           fp8_compute_efficiency=spec.fp8_compute_efficiency * value)
    elif variant == "fp8":
        import ndcp.specs.device as device
        for name, spec in device.PRESETS.items():
            if spec.fp8_peak_flops:
                device.PRESETS[name] = replace(spec, fp8_compute_efficiency=spec.fp8_ceiling * value)
    elif variant == "grads":
        _gradient_bytes(value)
    elif variant != "base":
        raise ValueError(f"variant {variant!r}: expected base or one of {', '.join(VARIANTS)}")


def _gradient_bytes(value: float) -> None:
    """The grads variant: GRAD_BYTES x `value` added to the backward of each body layer, the output layer and the
    embedding, at HBM speed."""
    import ndcp.estimate.layer_time as layer_time
    import ndcp.estimate.time as time
    from ndcp.estimate.compute import layer_gemms, memory_seconds, output_layer_gemm
    per_weight, per_embedding = (b * value for b in GRAD_BYTES)
    passes, head, embedding = layer_time._layer_passes, time._output_head_time, time._embedding_time

    def body(model, cluster, run, kind, degrees, *rest):
        p = passes(model, cluster, run, kind, degrees, *rest)
        gemms = layer_gemms(model, kind, 1.0, degrees.tp, degrees.ep, degrees.etp)
        weights = sum(g.k * g.n * g.count for g in gemms)
        return p._replace(backward=p.backward + memory_seconds(per_weight * weights, cluster.device))

    def output(model, cluster, run, tokens, tp, sp):
        t, g = head(model, cluster, run, tokens, tp, sp), output_layer_gemm(model, 1.0, tp)
        return t._replace(backward=t.backward + memory_seconds(per_weight * g.k * g.n, cluster.device))

    def embed(model, cluster, run, tokens, tp, sp):
        t = embedding(model, cluster, run, tokens, tp, sp)
        extra = memory_seconds(per_embedding * model.vocab * model.hidden / tp, cluster.device)
        return t._replace(backward=t.backward + extra)
    layer_time._layer_passes, time._output_head_time, time._embedding_time = body, output, embed


def steps(files, ids=None) -> dict:
    """{row id: (measured step, estimated step)} of the rows with a measured step (of `ids` only, if given)."""
    from ndcp.validation.compare import compare_row, measured_row
    from ndcp.validation.runs import SkipRun, read_rows
    out = {}
    for path in files:
        for rid, build in read_rows(ROOT / path):
            if ids and rid not in ids:
                continue
            try:
                c = compare_row(measured_row(build))
            except SkipRun:
                continue
            if c.measured_step:
                out[rid] = (c.measured_step, c.estimated_step)
    return out


def to_close(variant: str, base: tuple[float, float], moved: float, value: float) -> float:
    """The candidate's value that meets the measured step, linear in its time (module docstring): hbm and gemm act
    on the time as 1 / value (fp8 on its GEMMs'), loss and gap as value."""
    measured, estimated = base
    if moved == estimated:
        return float("inf")
    _, start, _ = VARIANTS[variant]
    inverse = variant in ("hbm", "gemm", "fp8")
    x0, x1 = (1 / start, 1 / value) if inverse else (start, value)
    x = x0 + (x1 - x0) * (measured - estimated) / (moved - estimated)
    return (1 / x if x > 0 else float("inf")) if inverse else x


def _worker(variant: str, value: float, ids) -> dict:
    return json.loads(subprocess.run(
        [sys.executable, __file__, "--worker", variant, "--value", str(value)] + (["--rows", *ids] if ids else []),
        check=True, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout)


def _calibrated(variant: str, value: float) -> dict:
    """scripts/calibrate.py's JSON with `variant` at `value` priced (in this process: call it in a worker)."""
    import contextlib
    import io
    import runpy
    apply(variant, value)
    calibrate, out = runpy.run_path(str(ROOT / "scripts" / "calibrate.py"), run_name="calibrate"), io.StringIO()
    with contextlib.redirect_stdout(out):
        calibrate["main"](["--json"])
    return json.loads(out.getvalue())


def calibration_report() -> str:
    """Markdown: per variant, the refitted ceilings and the held-out figures of all runs (step %, MFU points)."""
    lines = ["| variant (value) | ceilings refitted (Ampere, Hopper, Hopper FP8) | held out, all runs: step % / MFU "
             "points | leave-one-source-out MFU points, mean / max |", "|---|---|---|---|"]
    for v in ("base", *VARIANTS):
        if v in ("gemm", "fp8"):  # the ceilings are what calibrate fits
            continue
        value = VARIANTS[v][2] if v in VARIANTS else 0.0
        d = json.loads(subprocess.run([sys.executable, __file__, "--calibrate-worker", v, "--value", str(value)],
                                      check=True, capture_output=True, text=True, cwd=ROOT,
                                      env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout)
        p, every = d["parameters"], next(s for s in d["sources"] if s["source"] == "all")["held_out"]
        loso = d["leave_one_source_out"]
        lines.append(f"| {v}" + (f" ({value:g})" if v in VARIANTS else "") + f" | {p['ampere_compute_efficiency']:g}, "
                     f"{p['hopper_compute_efficiency']:g}, {p['hopper_fp8_compute_efficiency']:g} | "
                     f"{every['step_pct']:.1f} / {every['mfu_points']:.2f} | {loso['mean']:.2f} / {loso['max']:.2f} |")
    return "\n".join(lines)


def _mean(errors) -> str:
    return f"{100 * sum(abs(e) for e in errors) / len(errors):.2f}" if errors else "-"


def report(ids=ROWS) -> str:
    """Markdown: the file means of |step error| per variant, then each row's signed errors and values to close."""
    runs = {v: _worker(v, VARIANTS[v][2] if v in VARIANTS else 0.0, None) for v in ("base", *VARIANTS)}
    lines = ["| variant (value) | " + " | ".join(Path(f).stem for f in FILES) + " |", "|---" * (len(FILES) + 1) + "|"]
    for v, rows in runs.items():
        value = f" ({VARIANTS[v][2]:g})" if v in VARIANTS else ""
        lines.append(f"| {v}{value} | " + " | ".join(_mean([e / m - 1 for rid, (m, e) in rows.items()
                                                             if rid in _file_ids(f)]) for f in FILES) + " |")
    lines += ["", "| row | base | " + " | ".join(f"{v} ({VARIANTS[v][2]:g})" for v in VARIANTS) + " | "
              + " | ".join(f"{v} to close" for v in VARIANTS) + " |", "|---" * (2 + 2 * len(VARIANTS)) + "|"]
    base = runs["base"]
    for rid in (r for r in ids if r in base):
        m, e = base[rid]
        moved = [runs[v][rid][1] for v in VARIANTS]
        close = [to_close(v, base[rid], x, VARIANTS[v][2]) for v, x in zip(VARIANTS, moved)]
        lines.append(f"| `{rid}` | {100 * (e / m - 1):+.1f} | " + " | ".join(f"{100 * (x / m - 1):+.1f}" for x in moved)
                     + " | " + " | ".join(f"{c:.3g}" for c in close) + " |")
    return "\n".join(lines)


_IDS: dict = {}


def _file_ids(path: str) -> set:
    if path not in _IDS:
        from ndcp.validation.runs import read_rows
        _IDS[path] = {rid for rid, _ in read_rows(ROOT / path)}
    return _IDS[path]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("base", *VARIANTS), help="(internal) one variant's steps as JSON")
    parser.add_argument("--value", type=float, default=0.0)
    parser.add_argument("--rows", nargs="*", default=None)
    parser.add_argument("--calibrate", action="store_true", help="refit the ceilings with each candidate priced")
    parser.add_argument("--calibrate-worker", choices=("base", *VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.calibrate_worker:
        print(json.dumps(_calibrated(args.calibrate_worker, args.value)))
        return
    if args.calibrate:
        print(calibration_report())
        return
    if args.worker:
        apply(args.worker, args.value)
        print(json.dumps(steps(FILES, set(args.rows) if args.rows else None)))
        return
    print(report(tuple(args.rows) if args.rows else ROWS))


if __name__ == "__main__":
    main()
