"""The limits, signals and internal-error categories of scripts/fuzz_cli.py (issue #36), each run in a process of
its own (`python -m ndcp`):

- limits: --time-limit on every search mode (default, uniform, exhaustive, greedy), on `ndcp recompute` and on
  `ndcp validate` (a runs file whose pinned searches are short), which must end within the limit plus
  PROCESS_START; `--points` and `--caps` past the frontier's maximum;
- signals: SIGINT or SIGTERM at a random moment of a search or a frontier (sometimes a second one 50 ms later):
  an answer (exit 0 or 1), `unknown` (4) or `interrupted` (130), no traceback, and the --json file whole or absent;
- internal errors: the probe's reproducers ("Why" 6: --recompute offload, runs files and Hugging Face configs of
  other shapes), each exit 0 or one `ndcp: error:` line.

fuzz_cli.py runs `--limits N` of these (mode `limits/KIND`); `judge` says why an outcome breaks the contract.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ["llama3-70b", "--device", "h100", "--gpus", "512", "--global-batch", "1024", "--seq-len", "8192"]
TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "512"]
MODES = ([], ["--recompute", "uniform"], ["--exhaustive", "--recompute", "uniform"], ["--recompute", "greedy"],
         ["--recompute", "per-layer"])
PROCESS_START = 4.0  # seconds a command may take beyond its --time-limit: Python, the imports, the report
ANSWERS = (0, 1, 4)  # found, proven infeasible, stopped before anything was verified
INTERRUPTED = 130
FIRST_MOMENT = 0.25  # seconds: earlier, the interpreter may still be starting, before ndcp's first instruction


@dataclass
class LimitCase:
    kind: str
    argv: list[str]
    files: dict[str, str] = field(default_factory=dict)  # placeholder -> text
    signals: tuple[float, ...] = ()  # seconds after the start at which SIGNAL is sent
    signum: int = signal.SIGINT
    seconds: float = 60.0  # how long the command may take (a hang past it is a failure)

    def describe(self) -> str:
        sent = f" {signal.Signals(self.signum).name} at {self.signals}" if self.signals else ""
        return f"[{self.kind}] argv={self.argv!r:.300}{sent} files={self.files!r:.200}"


def limits(rng: random.Random) -> LimitCase:
    limit = rng.choice([0.5, 1.0, 3.0])
    argv = rng.choice([["search", *LLAMA, *rng.choice(MODES), "--quiet"],
                       ["recompute", *LLAMA, "--strategy", "tp=4,pp=2,vpp=8,mbs=1,zero=2,sp=on", "--quiet"],
                       ["recompute", *TINY, "--points", str(rng.choice([201, 10**5, 10**9]))],
                       ["recompute", *TINY, "--caps", ",".join(["1GiB"] * rng.choice([201, 5000]))],
                       ["validate", str(ROOT / "examples" / "measured_runs_2.yaml"), "--quiet"]])
    return LimitCase("limits", argv + ["--time-limit", str(limit)], seconds=limit + PROCESS_START)


def signals(rng: random.Random) -> LimitCase:
    argv = rng.choice([["search", *LLAMA, *rng.choice(MODES)], ["search", *TINY, *rng.choice(MODES)],
                       ["recompute", *TINY]])
    first = rng.uniform(FIRST_MOMENT, 2.5)
    moments = (first, first + 0.05) if rng.random() < 0.25 else (first,)
    return LimitCase("signals", argv + ["--quiet", "--json", "{F0}.json"], signals=moments,
                     signum=rng.choice([signal.SIGINT, signal.SIGTERM]))


HF_SHAPES = [
    {"model_type": "llava", "text_config": {"model_type": ["llama"], "hidden_size": 64, "num_hidden_layers": 2,
                                            "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256},
     "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "intermediate_size": 128, "image_size": 224, "patch_size": 14}},
    {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
     "intermediate_size": 128, "vocab_size": 256, "layer_types": [{"a": 1}, {"b": 2}]},
    {"model_type": "qwen2_vl", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
     "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
     "vision_config": {"depth": 2, "embed_dim": 64, "mlp_ratio": "MLP", "num_heads": 4, "hidden_size": 64,
                       "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}},
]
RUNS_SHAPES = ["runs: [1, 2, 3]\n", "runs: [{id: x, model: 5, cluster: 7}]\n", "hardware: 5\nruns: []\n",
               "hardware: [5, null]\nruns: []\n"]


def internal_errors(rng: random.Random) -> LimitCase:
    shape = rng.random()
    if shape < 0.3:
        return LimitCase("internal-errors", ["search", *TINY, "--recompute", "offload", "--quiet"])
    if shape < 0.6:
        config = dict(rng.choice(HF_SHAPES))
        for key in ("mlp_ratio", "num_hidden_layers"):
            if rng.random() < 0.3 and "vision_config" in config:
                config["vision_config"] = {**config["vision_config"], key: rng.choice([1e308, float("nan"), [2]])}
        return LimitCase("internal-errors", ["estimate", "{F0}.json", *TINY[1:]], {"{F0}.json": json.dumps(config)})
    command = rng.choice([["validate", "{F0}.yaml"], ["calibrate", "{F0}.yaml", "--device", "h100",
                                                      "--output", "{F1}.yaml"]])
    return LimitCase("internal-errors", command, {"{F0}.yaml": rng.choice(RUNS_SHAPES)})


CATEGORIES = (limits, signals, internal_errors)


def generate_limit_case(rng: random.Random) -> LimitCase:
    return rng.choice(CATEGORIES)(rng)


def materialise(case: LimitCase, tmp: Path, index: int) -> tuple[list[str], dict[str, Path]]:
    """The case's argv with its placeholders replaced by paths under tmp (files written), and those paths."""
    paths = {name: tmp / name.replace("{F0}", f"limit{index}").replace("{F1}", f"limit{index}-out")
             for name in [a for a in case.argv if a.startswith("{F")] + list(case.files)}
    for name, text in case.files.items():
        paths[name].write_text(text)
    return [str(paths.get(a, a)) for a in case.argv], paths


def run_limit_case(case: LimitCase, argv: list[str], guard: float) -> tuple[int | str, str, str, float]:
    """(exit code or 'timeout', stdout, stderr, seconds): `python -m ndcp ARGV`, sent the case's signals."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "ndcp", *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=ROOT)
    for moment in case.signals:
        time.sleep(max(0.0, moment - (time.perf_counter() - start)))
        if process.poll() is None:
            process.send_signal(case.signum)
    try:
        out, err = process.communicate(timeout=max(guard, case.seconds))
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return "timeout", "", "", time.perf_counter() - start
    return process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), \
        time.perf_counter() - start


def judge(case: LimitCase, paths: dict[str, Path], code, out: str, err: str, seconds: float) -> str | None:
    """Why this outcome breaks the contract, or None when it is fine."""
    if code == "timeout":
        return "hang: still running at the guard"
    if "Traceback" in err or "Traceback" in out:
        return "traceback printed"
    if code == 3 or "internal error" in err:
        return f"internal error: {err.strip()[-300:]}"
    if case.kind == "limits" and seconds > case.seconds:
        return f"took {seconds:.1f} s, allowed {case.seconds:.1f} s"
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("ndcp: note: ")]
        ok = len(lines) == 1 and lines[0].startswith("ndcp: error: ")
        return None if ok else f"exit 2 without exactly one `ndcp: error:` line: {err!r:.300}"
    if code not in ANSWERS + ((INTERRUPTED,) if case.signals else ()):
        return f"unexpected exit {code!r}: {err.strip()[-200:]}"
    written = paths.get("{F0}.json")
    if written is not None and written.exists():
        try:
            json.loads(written.read_text())
        except ValueError:
            return "the --json file is not whole"
    return None


__all__ = ["LimitCase", "CATEGORIES", "generate_limit_case", "materialise", "run_limit_case", "judge"]
