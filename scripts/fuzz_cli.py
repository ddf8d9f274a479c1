#!/usr/bin/env python3
"""Fuzz the real `ndcp` CLI: model YAMLs, Hugging Face config.json files, strategy files and CLI arguments, and the
fault categories of scripts/fuzz_faults.py (hostile files, FIFOs, devices, alias bombs, hostile runs files, escape
sequences in names, a full disk, encodings without µ), the sweep's of scripts/fuzz_sweep.py (corrupt, locked and
hostile journals, killed workers, a signalled sweep then resumed) and scripts/fuzz_limits.py's (time limits on every
search mode and the frontier, SIGINT/SIGTERM at random moments, the probe's internal-error reproducers).

Every case must end in exit 2 with ONE `ndcp: error: ...` line on stderr (no traceback), or a valid result (exit 0/1);
never exit 3 (internal error), never a traceback, never a hang. Cases run in-process through `ndcp.cli.main` with a
per-case wall-clock guard (SIGALRM), plus a few true subprocess runs (`python -m ndcp`).

Usage: PYTHONPATH=. python scripts/fuzz_cli.py [--cases 1000] [--subprocess 50] [--faults 200] [--sweep-faults 40]
    [--limits 30] [--seed 0] [--guard 20] [--show 5]
Exit status: 0 when every case behaved, 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzz_faults  # noqa: E402 - scripts/ is no package
import fuzz_sweep  # noqa: E402
import fuzz_limits  # noqa: E402

# -- nasty values ------------------------------------------------------------------------------------------------
NASTY = [0, -1, 1, 2, 3, 7, 2**31, 2**63, 2**70, 10**30, 1e30, -1e30, 1e308, 0.5, -0.0, float("nan"), float("inf"),
         float("-inf"), "abc", "", " ", "4", "1e3", "0x10", None, True, False, [], {}, [1, 2], {"a": 1}, "１",
         "\u202e", "x" * 300, [[[[[]]]]]]

TINY = {"name": "fz", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 128, "vocab": 256,
        "activation": "swiglu", "max_positions": 512}
TINY_MOE = {**TINY, "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 64, "first_dense_layers": 1}}
TINY_MLA = {**TINY, "mla": {"kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16}}

HF = {
    "llama": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "hidden_act": "silu",
              "max_position_embeddings": 512},
    "gpt2": {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256, "n_positions": 512},
    "mixtral": {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen2_moe": {"model_type": "qwen2_moe", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "num_experts": 4,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "decoder_sparse_step": 1,
                  "mlp_only_layers": [], "shared_expert_intermediate_size": 64},
    "deepseek_v3": {"model_type": "deepseek_v3", "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4,
                    "intermediate_size": 128, "vocab_size": 256, "kv_lora_rank": 16, "q_lora_rank": 16,
                    "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1,
                    "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_nextn_predict_layers": 1},
    "glm4_moe": {"model_type": "glm4_moe", "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 6,
                 "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 256,
                 "attention_bias": True, "n_routed_experts": 4, "num_experts_per_tok": 2,
                 "moe_intermediate_size": 32, "n_shared_experts": 1, "first_k_dense_replace": 1,
                 "num_nextn_predict_layers": 1},
    "llama4_text": {"model_type": "llama4_text", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32, "intermediate_size_mlp": 128,
                    "vocab_size": 256, "num_local_experts": 4, "num_experts_per_tok": 1,
                    "interleave_moe_layer_step": 2, "attention_chunk_size": 128, "no_rope_layers": [1, 1, 1, 0]},
}

RAW_TEXTS = [
    b"", b"\n", b"~", b"null", b"42", b"- 1\n- 2\n", b"'just a string'", b"{", b"[", b"::::", b"\t\tlayers: 2",
    b"\xff\xfe\x00\x01garbage", b"name: \xe9t\xe9\n", b"\xef\xbb\xbfname: bom\n",
    b"!!python/object/apply:os.system ['echo pwned']\n",
    b"layers: !!python/object/apply:os.system ['echo pwned']\n",
    b"name: !!python/name:os.system\n",
    # billion laughs (aliases are shared, but a repr of them is exponential)
    b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    b"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
    b"f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nlayers: *g\n",
    b"base: &base {layers: 2, hidden: 64}\n<<: *base\nheads: 4\nffn_hidden: 128\nvocab: 256\n",
    b"layers: " + b"9" * 5000 + b"\n",
    b"layers: 2\nhidden: 64\nheads: 4\nffn_hidden: 128\nvocab: 256\nname: \"\\udcff\"\n",
    b"layers: 2\nhidden: 64\nheads: 4\nffn_hidden: 128\nvocab: 256\nname: \"a\\x00b\"\n",
    b"[" * 50000 + b"]" * 50000,
    b"{\"model_type\": \"llama\", \"num_hidden_layers\": " + b"9" * 5000 + b"}",
    b"{\"model_type\": \"llama\", \"num_hidden_layers\": NaN}",
    b"{\"model_type\": \"llama\", \"num_hidden_layers\": 1e400}",
    b"{\"model_type\": \"llama\", \"_name_or_path\": \"\\udcff\"}",
    b"&a [*a]", b"a: &a {b: *a}\n", b"? [a, b]\n: 1\n", b"{[1]: 2}", b"1: 2\n", b"null: 1\n",
]

def _bomb(key: str, levels: int = 9) -> bytes:
    """A billion-laughs YAML: `key` holds 9**levels leaves through aliases (cheap to load, exponential to print)."""
    parts = ["&l0 [x, x, x, x, x, x, x, x, x]"]
    parts += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return f"{key}: [{', '.join(parts)}]\n".encode()


RAW_TEXTS += [_bomb("tp"), _bomb("layers"), _bomb("layers_per_stage"), _bomb("recompute"), _bomb("model_type"),
              _bomb("name"), _bomb("moe")]

STRATEGY_KEYS = ["dp", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "mbn", "zero", "sp", "recompute", "schedule",
                 "layers_per_stage", "bogus"]


def _nasty(rng: random.Random):
    return rng.choice(NASTY)


def _mutate_mapping(rng: random.Random, base: dict) -> object:
    data = json.loads(json.dumps(base))
    for _ in range(rng.randint(1, 3)):
        what = rng.random()
        keys = list(data)
        if what < 0.25 and keys:
            data.pop(rng.choice(keys))
        elif what < 0.75 and keys:
            key = rng.choice(keys)
            if isinstance(data[key], dict) and rng.random() < 0.6:
                sub = data[key]
                if sub:
                    sub[rng.choice(list(sub))] = _nasty(rng)
            else:
                data[key] = _nasty(rng)
        elif what < 0.85:
            data[rng.choice(["bogus", "Layers", "moe", "mla", "rope_scaling", "1"])] = _nasty(rng)
        elif what < 0.9:
            return rng.choice([[], [data], "text", 7, None])
    return data


def _yaml_text(data) -> bytes:
    import yaml

    try:
        return yaml.safe_dump(data, allow_unicode=True).encode("utf-8", "surrogatepass")
    except Exception:  # noqa: BLE001 - a value YAML will not dump: fall back to JSON (also YAML)
        return json.dumps(data, default=str).encode()


def _json_text(data) -> bytes:
    return json.dumps(data, default=str).encode()


def _problem(rng: random.Random, fuzz: bool) -> list[str]:
    gpus, gbs, seq = rng.choice([(8, 32, 256), (4, 16, 128), (16, 64, 512), (2, 8, 128)])
    args = {"--device": rng.choice(["h100", "a100-80g", "mi300x"]), "--gpus": str(gpus),
            "--global-batch": str(gbs), "--seq-len": str(seq)}
    extra: dict[str, str] = {}
    if fuzz:
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(["--device", "--gpus", "--global-batch", "--seq-len", "--memory-cap", "--reserve",
                              "--device-memory", "--devices-per-node", "--intra-node-bandwidth",
                              "--inter-node-bandwidth", "--precision", "--grad-dtype", "--attention-kernel",
                              "--wgrad-deferral-limit", "--trainer"])
            value = rng.choice(["0", "-1", "1", "3", "1000", "1e30", "nan", "inf", "-inf", "2" * 30, "9" * 5000,
                                "abc", "", " ", "70GiB", "1e400GB", "0.5", "1.5TiB", "80000MiB", "1 GiB", "NaN",
                                "1e-300", "H100", "bf16", "fp32", "\udcff", "٣", "0x10"])
            (args if key in args else extra)[key] = value
    out = []
    for key, value in {**args, **extra}.items():
        out += [key, value]
    if fuzz:  # run switches, valid only for some trainers
        switches = ["--torch-compile", "--compile-loss", "--disable-parameter-transpose-cache"]
        out += rng.sample(switches, rng.randint(0, 2))
    return out


def _strategy_string(rng: random.Random) -> str:
    items = []
    for _ in range(rng.randint(0, 4)):
        key = rng.choice(STRATEGY_KEYS + ["", "TP", "tp "])
        value = rng.choice(["1", "2", "4", "0", "-1", "on", "off", "selective", "full", "none", "interleaved",
                            "1f1b", "2" * 40, "9" * 5000, "nan", "1.5", "", "x", "=", "[1,2]"])
        items.append(rng.choice([f"{key}={value}", key, f"{key}=={value}", f"{key}:{value}"]))
    return rng.choice([",", ", ", ",,"]).join(items)


def _strategy_file_data(rng: random.Random) -> object:
    data = {}
    for key in rng.sample(STRATEGY_KEYS, rng.randint(0, 4)):
        data[key] = _nasty(rng) if rng.random() < 0.6 else rng.choice([1, 2, "on", "selective", [1, 1], [2, 2],
                                                                       {"stages": [{"none": 1, "full": 1}]},
                                                                       {"stages": [{"none": -1}, 3]}])
    if rng.random() < 0.1:
        return {"strategy": data}
    return data if rng.random() > 0.05 else rng.choice([[], "x", None])


class Case:
    def __init__(self, kind: str, argv: list[str], files: dict[str, bytes]):
        self.kind, self.argv, self.files = kind, argv, files

    def describe(self) -> str:
        files = {k: (v[:120] + b"..." if len(v) > 120 else v) for k, v in self.files.items()}
        return f"[{self.kind}] argv={self.argv!r:.400} files={files!r:.400}"


def generate(rng: random.Random) -> Case:
    """One random case. File paths are placeholders `{F0}`, `{F1}` filled in by `materialise`."""
    kind = rng.choices(["model-yaml", "hf-json", "raw-file", "cli-args", "strategy", "strategy-file", "search"],
                       weights=[20, 15, 10, 15, 15, 10, 15])[0]
    files: dict[str, bytes] = {}
    model = "tiny"
    if kind == "model-yaml":
        files["{F0}.yaml"] = _yaml_text(_mutate_mapping(rng, rng.choice([TINY, TINY_MOE, TINY_MLA])))
        model = "{F0}.yaml"
    elif kind == "hf-json":
        files["{F0}/config.json"] = _json_text(_mutate_mapping(rng, HF[rng.choice(list(HF))]))
        model = "{F0}/config.json"
    elif kind == "raw-file":
        suffix = rng.choice([".yaml", ".json", ".yml"])
        files["{F0}" + suffix] = rng.choice(RAW_TEXTS)
        model = "{F0}" + suffix
    command = "search" if kind == "search" else "estimate"
    argv = [command, model if kind != "cli-args" or rng.random() < 0.8 else rng.choice(
        ["", "nope", "tiny ", "/", ".", "x.yaml", "/dev/null", "\udcff.yaml", "tiny-moe", "../" * 50])]
    argv += _problem(rng, fuzz=kind in ("cli-args", "search") and rng.random() < 0.7)
    if command == "estimate":
        if kind in ("strategy", "cli-args") or rng.random() < 0.3:
            argv += ["--strategy", _strategy_string(rng) if kind == "strategy" else rng.choice(
                ["", "tp=2", "tp=2,pp=2,sp=on", "recompute=selective", "zero=3"])]
        if kind == "strategy-file":
            files["{F1}.yaml"] = _yaml_text(_strategy_file_data(rng)) if rng.random() < 0.85 else rng.choice(RAW_TEXTS)
            argv += ["--strategy-file", "{F1}.yaml"]
        argv += ["--json", "-"] if rng.random() < 0.5 else []
    else:
        argv += ["--time-limit", "5", "--top", "1", "--json", "-"]
        for _ in range(rng.randint(0, 3)):
            opt = rng.choice(["--fix", "--max", "--zero", "--sp", "--recompute", "--max-offset", "--seed", "--workers",
                              "--tp-cp-bound", "--top", "--time-limit", "--hsdp"])
            value = rng.choice(["tp=2", "pp=2,tp=1", "zero=4", "sp=on", "dp=0", "tp=" + "9" * 40, "0,1", "5", "",
                                "both", "on", "off", "per-layer", "uniform", "full", "0", "-1", "1", "2", "3", "2" * 25,
                                "1e30", "nan", "inf", "0.001", "bogus=1", "9" * 5000])
            if opt == "--top" and value.isdigit() and len(value) > 3:
                value = "2"  # a huge top-K on a valid problem verifies the whole space: valid but slow
            argv += [opt, value]
    return Case(kind, argv, files)


def materialise(case: Case, tmp: Path, index: int) -> list[str]:
    """Write the case's files under tmp and return argv with the placeholders replaced."""
    mapping = {}
    for name, data in case.files.items():
        real = name.replace("{F0}", str(tmp / f"c{index}_m")).replace("{F1}", str(tmp / f"c{index}_s"))
        Path(real).parent.mkdir(parents=True, exist_ok=True)
        Path(real).write_bytes(data)
        mapping[name] = real
    return [mapping.get(a, a) for a in case.argv]


# -- running -----------------------------------------------------------------------------------------------------
class CaseTimeout(BaseException):
    """Raised by the wall-clock guard (a BaseException so `main`'s last-line handler cannot swallow it)."""


def _alarm(signum, frame):
    raise CaseTimeout()


def run_in_process(argv: list[str], guard: float) -> tuple[int | str, str, str, float]:
    """(exit code or 'timeout'/'raised', stdout, stderr, seconds) for `ndcp.cli.main(argv)`."""
    from ndcp.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, guard)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code: int | str = main(list(argv))
    except CaseTimeout:
        code = "timeout"
    except BaseException as error:  # noqa: BLE001 - anything escaping main is a bug
        code = "raised"
        err.write(f"escaped main: {type(error).__name__}: {error}\n")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - t0


def run_subprocess(argv: list[str], guard: float, env: dict | None = None,
                   stdout: str | None = None) -> tuple[int | str, str, str, float]:
    """As run_in_process, in a process of its own: `env` over this one's, stdout opened on `stdout` if given."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    t0 = time.perf_counter()
    try:
        with open(stdout, "wb") if stdout else contextlib.nullcontext(subprocess.PIPE) as out:
            done = subprocess.run([sys.executable, "-m", "ndcp", *argv], stdout=out, stderr=subprocess.PIPE,
                                  timeout=guard, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return "timeout", "", "", time.perf_counter() - t0
    except ValueError as error:  # e.g. an embedded NUL the OS cannot pass as an argument
        return "skipped", "", str(error), 0.0
    return (done.returncode, (done.stdout or b"").decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"),
            time.perf_counter() - t0)


def problem_with(code, out: str, err: str) -> str | None:
    """Why this outcome breaks the contract, or None when it is fine."""
    if code in ("timeout", "raised"):
        return f"{code}: {err.strip()[-300:]}"
    if "Traceback" in err or "Traceback" in out:
        return "traceback printed"
    if code == 3 or "internal error" in err:
        return f"internal error: {err.strip()[-300:]}"
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("ndcp: note: ")]
        if len(lines) != 1 or not lines[0].startswith("ndcp: error: "):
            return f"exit 2 without exactly one `ndcp: error:` line: {err!r:.300}"
        return None
    if code in (0, 1):
        return fuzz_faults.escape_problem(out)
    return f"unexpected exit {code!r}"


def _cases(rng: random.Random, args: argparse.Namespace, tmp: Path):
    """(mode, case, argv) of every case in turn: the random ones in-process and in processes of their own, then the
    fault cases (mode `fault/KIND`, `+process` for those that need a process of their own)."""
    for i in range(args.cases + args.subprocess):
        case = generate(rng)
        yield ("in-process" if i < args.cases else "subprocess"), case, materialise(case, tmp, i)
    for i in range(args.faults):
        case = fuzz_faults.generate_fault(rng)
        mode = f"fault/{case.kind}" + ("+process" if case.own_process else "")
        yield mode, case, fuzz_faults.materialise(case, tmp, i)
    yield from _sweep_cases(rng, args.sweep_faults, tmp)


def _sweep_cases(rng: random.Random, count: int, tmp: Path):
    """(mode `sweep/KIND`, case, argv) of the sweep fault cases (scripts/fuzz_sweep.py; Linux: they read /proc)."""
    for i in range(count if sys.platform == "linux" else 0):
        case = fuzz_sweep.generate_sweep_fault(rng)
        yield f"sweep/{case.kind}", case, fuzz_sweep.materialise(case, tmp, i)


def _run(mode: str, case, argv: list[str], guard: float) -> tuple[int | str, str, str, float]:
    if mode.startswith("sweep/"):
        return fuzz_sweep.run_case(case, argv, guard, run_in_process)
    if mode == "subprocess":
        return run_subprocess(argv, guard)
    if mode.endswith("+process"):
        return run_subprocess(argv, guard, case.env, case.stdout)
    return run_in_process(argv, guard)


@dataclass
class Tally:
    """What the cases did: exit codes by mode, the contract failures, the slowest case."""

    codes: collections.Counter = field(default_factory=collections.Counter)
    failures: list[tuple[str, str]] = field(default_factory=list)
    slowest: tuple[float, str] = (0.0, "")
    tracebacks: int = 0
    internal: int = 0

    def add(self, mode: str, case, code, out: str, err: str, seconds: float, why: str | None) -> None:
        self.codes[f"{mode}:{code}"] += 1
        if seconds > self.slowest[0]:
            self.slowest = (seconds, f"{mode} {case.describe()}")
        self.tracebacks += "Traceback" in err or "Traceback" in out
        self.internal += code == 3 or "internal error" in err
        if why:
            self.failures.append((why, f"{mode} {case.describe()}"))


def _limit_cases(rng: random.Random, args: argparse.Namespace, tmp: Path, tally: Tally) -> None:
    """The limits, signals and internal-error cases (scripts/fuzz_limits.py), each in a process of its own."""
    for i in range(args.limits):
        case = fuzz_limits.generate_limit_case(rng)
        argv, paths = fuzz_limits.materialise(case, tmp, i)
        code, out, err, seconds = fuzz_limits.run_limit_case(case, argv, args.guard)
        tally.add(f"limits/{case.kind}", case, code, out, err, seconds,
                  fuzz_limits.judge(case, paths, code, out, err, seconds))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000, help="in-process cases (default 1000)")
    parser.add_argument("--subprocess", type=int, default=50, help="true subprocess cases (default 50)")
    parser.add_argument("--faults", type=int, default=200, help="fault cases (scripts/fuzz_faults.py; default 200)")
    parser.add_argument("--sweep-faults", type=int, default=40,
                        help="sweep fault cases (scripts/fuzz_sweep.py; default 40)")
    parser.add_argument("--limits", type=int, default=30,
                        help="limits, signals and internal-error cases (scripts/fuzz_limits.py; default 30)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--guard", type=float, default=20.0, help="per-case wall-clock limit in seconds (default 20)")
    parser.add_argument("--show", type=int, default=5, help="failing cases to print (default 5)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    tally = Tally()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ndcp-fuzz-") as tmpdir:
        for mode, case, argv in _cases(rng, args, Path(tmpdir)):
            code, out, err, seconds = _run(mode, case, argv, args.guard)
            if code != "skipped":
                tally.add(mode, case, code, out, err, seconds, problem_with(code, out, err))
        _limit_cases(rng, args, Path(tmpdir), tally)
    total = sum(tally.codes.values())
    print(f"cases: {total} ({args.cases} in-process, {args.subprocess} subprocess, {args.faults} fault, "
          f"{args.sweep_faults} sweep fault, {args.limits} limit cases requested; seed {args.seed}) "
          f"in {time.perf_counter() - t_start:.1f} s")
    print(f"tracebacks: {tally.tracebacks}   internal errors (exit 3): {tally.internal}   "
          f"contract failures: {len(tally.failures)}")
    print("exit codes: " + ", ".join(f"{k}={v}" for k, v in sorted(tally.codes.items())))
    print(f"slowest: {tally.slowest[0]:.2f} s  {tally.slowest[1]:.500}")
    for why, what in tally.failures[: args.show]:
        print(f"FAIL {why}\n     {what:.800}")
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
