"""The fault categories of scripts/fuzz_cli.py (issue #36): what a planning job meets besides odd values.

- hostile files: FIFOs, character devices (/dev/zero, /dev/urandom, /dev/full) and files over the size caps as a
  model, a device, a strategy file, a trainer configuration, a runs file or a sweep journal (--resume);
- alias bombs (a few hundred bytes expanding to 10^6..10^10 nodes) in every YAML ndcp reads: model, device (its
  `base:`), strategy file, MindFormers configuration, runs file;
- hostile runs files (published-runs YAML of other shapes, CSVs with huge or NUL fields) and names with terminal
  escape sequences (a device name, a run id);
- a full disk: every output option pointed at /dev/full, and stdout itself on /dev/full;
- encodings: the reports under PYTHONIOENCODING=ascii and LC_ALL=C without Python's UTF-8 mode.

Each case is a FaultCase: the argv (file placeholders filled in by `materialise`), whether it needs a process of its
own (stdout on a device, another encoding), and its environment.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

SPEC_CAP, RUNS_CAP = 16 << 20, 64 << 20  # ndcp.specs.files' caps (docs/files.md §1)
PROBLEM = ["--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "256"]
DEVICES = ("/dev/zero", "/dev/urandom", "/dev/full")
ESC = "\x1b"


@dataclass
class FaultCase:
    kind: str
    argv: list[str]
    files: dict[str, bytes | str] = field(default_factory=dict)  # placeholder -> bytes, or "fifo" / "sparse:N"
    env: dict[str, str] = field(default_factory=dict)
    stdout: str | None = None  # a path stdout is opened on (a process of its own)

    @property
    def own_process(self) -> bool:
        return bool(self.env) or self.stdout is not None

    def describe(self) -> str:
        files = {k: (v[:80] if isinstance(v, bytes) else v) for k, v in self.files.items()}
        return f"[{self.kind}] argv={self.argv!r:.300} files={files!r:.300} env={self.env} stdout={self.stdout}"


def alias_bomb(rng: random.Random) -> tuple[str, str]:
    """(a YAML document of anchored lists, each the previous one repeated, the alias of the last)."""
    levels, width = rng.randint(6, 10), rng.randint(8, 12)
    lines = [f"l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n", f"*l{levels - 1}"


def _where(place: str, path: str) -> list[str]:
    """estimate/validate/sweep argv with `path` read as `place`."""
    return {"model": ["estimate", path, *PROBLEM],
            "device": ["estimate", "tiny", "--device", path, *PROBLEM[2:]],
            "strategy-file": ["estimate", "tiny", *PROBLEM, "--strategy-file", path],
            "strategy-from": ["estimate", "tiny", *PROBLEM, "--strategy-from", path],
            "runs": ["validate", path],
            "journal": ["sweep", "tiny", *PROBLEM, "--tokens", "1T", "--jsonl", path, "--resume", "--workers", "1",
                        "--quiet"]}[place]


PLACES = ("model", "device", "strategy-file", "strategy-from", "runs", "journal")


def hostile_file(rng: random.Random) -> FaultCase:
    place = rng.choice(PLACES)
    what = rng.choice(("fifo", "device", "oversize"))
    if what == "device":
        return FaultCase("hostile-file", _where(place, rng.choice(DEVICES)))
    cap = RUNS_CAP if place in ("runs", "journal") else SPEC_CAP
    return FaultCase("hostile-file", _where(place, "{F0}.yaml"),
                     {"{F0}.yaml": "fifo" if what == "fifo" else f"sparse:{cap + rng.randint(1, 1 << 20)}"})


def bomb(rng: random.Random) -> FaultCase:
    place = rng.choice(PLACES[:5])
    text, top = alias_bomb(rng)
    use = {"device": f"base: {top}\n", "strategy-from": f"parallel_config: {top}\n", "runs": f"runs: {top}\n",
           "model": f"layers: {top}\n", "strategy-file": f"tp: {top}\n"}[place]
    return FaultCase("alias-bomb", _where(place, "{F0}.yaml"), {"{F0}.yaml": (text + use).encode()})


RUNS_SHAPES = ["runs: [1, 2, 3]\n", "runs: [{id: x, model: 5, cluster: 7}]\n", "hardware: 5\nruns: []\n",
               "hardware: [5, null]\nruns: []\n", "runs: [{id: x, training: [1], outcome: 3}]\n",
               "runs: [{id: x, model: {seq_len: [1]}, training: {global_batch: {a: 1}}}]\n", "runs: {a: 1}\n",
               "runs: [null]\n", "hardware: [{id: h, peak_tflops: 7}]\nruns: []\n"]
CSV_HEADER = "id,model,device,gpus,global_batch,seq_len,tp,pp,dp,step_seconds\n"


def hostile_runs(rng: random.Random) -> FaultCase:
    if rng.random() < 0.5:
        return FaultCase("runs-file", ["validate", "{F0}.yaml"], {"{F0}.yaml": rng.choice(RUNS_SHAPES).encode()})
    row = rng.choice([f'"ev{ESC}[2Jil",tiny,h100,8,32,256,1,1,8,0.01', "x" * 200_000 + ",tiny,h100,8,32,256,1,1,8,1",
                      "a\x00b,tiny,h100,8,32,256,1,1,8,1", "r,tiny,h100,abc,32,256,1,1,8,1",
                      "r,tiny,h100,8,32,256,1,1,8,nan", f"r,{'../' * 40}x,h100,8,32,256,1,1,8,1"])
    return FaultCase("runs-file", ["validate", "{F0}.csv"], {"{F0}.csv": (CSV_HEADER + row + "\n").encode()})


def escaped_name(rng: random.Random) -> FaultCase:
    name = rng.choice([f"ev{ESC}[31mil", f"ev{ESC}]0;title\x07il", "ev\u202eil", f"{ESC}c", "a\x9bb"])
    device = f'base: h100\nname: "{name.encode("unicode_escape").decode()}"\n'
    return FaultCase("escapes", ["estimate", "tiny", "--device", "{F0}.yaml", *PROBLEM[2:]],
                     {"{F0}.yaml": device.encode()})


def full_disk(rng: random.Random) -> FaultCase:
    option = rng.choice(["--json", "--csv", "--emit-file", "stdout"])  # --plot needs .png/.svg: no device
    argv = ["search", "tiny", *PROBLEM, "--time-limit", "10", "--emit", "megatron"]
    if option == "stdout":
        return FaultCase("full-disk", argv + rng.choice([[], ["--quiet"], ["--json", "-"]]), stdout="/dev/full")
    return FaultCase("full-disk", argv + [option, "/dev/full"])


def encoding(rng: random.Random) -> FaultCase:
    env = rng.choice([{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0"},
                      {"PYTHONIOENCODING": "latin-1"}])
    argv = rng.choice([["estimate", "tiny", *PROBLEM], ["search", "tiny", *PROBLEM, "--time-limit", "10"],
                       ["devices"], ["estimate", "tiny", *PROBLEM, "--quiet"]])
    return FaultCase("encoding", argv, env=env)


CATEGORIES = (hostile_file, bomb, hostile_runs, escaped_name, full_disk, encoding)


def generate_fault(rng: random.Random) -> FaultCase:
    return rng.choice(CATEGORIES)(rng)


def materialise(case: FaultCase, tmp: Path, index: int) -> list[str]:
    """Create the case's files under tmp (FIFOs, sparse files, contents); argv with the placeholders replaced."""
    mapping = {}
    for name, data in case.files.items():
        real = tmp / name.replace("{F0}", f"fault{index}")
        if data == "fifo":
            os.mkfifo(real)
        elif isinstance(data, str) and data.startswith("sparse:"):
            with open(real, "wb") as stream:
                stream.truncate(int(data.split(":")[1]))
        else:
            real.write_bytes(data)
        mapping[name] = str(real)
    return [mapping.get(a, a) for a in case.argv]


def escape_problem(out: str) -> str | None:
    """A raw escape sequence on stdout (the in-process runs' stdout is no terminal: rich writes none itself)."""
    return "raw escape sequence printed" if ESC in out else None


__all__ = ["FaultCase", "generate_fault", "materialise", "escape_problem", "CATEGORIES"]
