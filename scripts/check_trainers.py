"""Feed ndcp's emitted launch configurations to the trainers' own parsers and validators, and check the pinned flag
facts (ndcp/trainers/facts/*.yaml) against the real parsers. Outside CI: torch, Megatron-LM and torchtitan are large.
docs/trainers.md says how to set up and read it; in short:

Scratch environment (Python 3.11 with the local CPU torch; Megatron-LM at the commit facts/megatron.yaml pins):
    python3.11 -m venv /tmp/trainers-venv
    /tmp/trainers-venv/bin/pip install torch==2.13.0 torchtitan==0.3.0 torchao triton numpy pyyaml
    mkdir /tmp/megatron-lm && cd /tmp/megatron-lm
    git --git-dir=<a Megatron-LM clone>/.git archive d98e8a64ddf34856e74b24714e3bedb2f5a39553 | tar -x
Run (ndcp itself runs in its own environment, --ndcp; the trainers in this script's interpreter):
    /tmp/trainers-venv/bin/python scripts/check_trainers.py --megatron-lm /tmp/megatron-lm [--ndcp .venv/bin/ndcp]
        [--cases REGEX] [--time-limit S] [--markdown FILE] [--readme FILE] [--facts DIR]
    /tmp/trainers-venv/bin/python scripts/check_trainers.py --megatron-lm /tmp/megatron-lm --dump-facts
    /tmp/trainers-venv/bin/python scripts/check_trainers.py --megatron-lm /tmp/megatron-lm --file launch.args \\
        --trainer torchtitan --gpus 64

Cases (each with --emit megatron and --emit torchtitan unless it names its trainer, always with --trainer given):
the pinned matrix below (CASES), every `ndcp search|estimate` command in the README, and scripts/bench_search.py's
searches. Each emitted file runs in a fresh process (scripts/trainer_checks.py): Megatron-LM's parse_args +
validate_args with WORLD_SIZE = the case's GPUs and the environment the file exports (or unsets); torchtitan's
ConfigManager, its fake process group, ParallelDims.build_mesh, and its Trainer, pipeline-stage and schedule checks
on a meta-device model. `<NAME>` placeholders are filled with dummies of the type each trainer's parser declares.
Per case: ACCEPTED with what the trainer parsed, REFUSED with the trainer's own message (and the source line that
raised it), DIFFERS when an FP8 plan's file parses without FP8, FORETOLD when a refusal or a difference is what ndcp
told the user (torchtitan has no registry config for the model or FP8 recipe: ndcp writes the file only under
--emit-anyway and says which config to register), or NO FILE when ndcp wrote none; ndcp's own exit status and last
message when it was not 0. Exit 0 when every case is ACCEPTED or FORETOLD and the facts match.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from bench_search import MATRIX as BENCH_MATRIX
from trainer_facts import check_facts

ROOT = Path(__file__).resolve().parent.parent
CHECKS = Path(__file__).resolve().parent / "trainer_checks.py"
TRAINERS = ("megatron", "torchtitan")


class Case(NamedTuple):
    name: str
    trainer: str
    command: str  # ndcp arguments: searches emit their winner, estimates the given strategy
    setup: str = ""  # ndcp arguments run first in the same directory: the README command that writes a file it reads


CASES = [
    Case("70B search, 512 H100", "megatron",
         "search llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192"),
    Case("405B tp8 pp16 uneven", "megatron",
         "estimate llama3.1-405b --device h100 --gpus 2048 --global-batch 2048 --seq-len 8192 "
         "--strategy tp=8,pp=16,mbs=1,zero=1,sp=on,recompute=selective,first_stage_layers=6"),
    Case("405B tp8 pp8 vpp8 accounted", "megatron",
         "estimate llama3.1-405b --device h100 --gpus 2048 --global-batch 2048 --seq-len 8192 "
         "--strategy tp=8,pp=8,vpp=8,mbs=1,zero=1,sp=on,recompute=selective"),
    Case("Mixtral-8x7B tp2 ep8", "megatron",
         "estimate mixtral-8x7b --device h100 --gpus 64 --global-batch 256 --seq-len 4096 "
         "--strategy tp=2,pp=2,ep=8,mbs=1,zero=1,sp=on,recompute=selective"),
    Case("Mixtral-8x7B folded ep8 etp1 on tp4", "megatron",
         "estimate mixtral-8x7b --device h100 --gpus 64 --global-batch 256 --seq-len 4096 "
         "--strategy tp=4,pp=2,ep=8,etp=1,mbs=1,zero=1,sp=on,recompute=full"),
    Case("70B per-stage plan, 60 GiB, 64 H100", "megatron",
         "search llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --memory-cap 60GiB"),
    Case("DeepSeek-V3 tp2 pp16 ep64, 1024 H100", "megatron",
         "estimate deepseek-v3 --device h100 --gpus 1024 --global-batch 4096 --seq-len 4096 "
         "--strategy tp=2,pp=16,ep=64,mbs=1,zero=1,sp=on,recompute=full"),
    Case("DeepSeek-V3 DualPipe-V, EP+P2P overlap, 2048 H800", "megatron",
         "search deepseek-v3 --device h800 --gpus 2048 --global-batch 4096 --seq-len 4096 --memory-cap 40GiB "
         "--schedules all --overlap ep+p2p"),
    Case("70B FP8, 64 H100", "megatron",
         "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --precision fp8 "
         "--fp8-recipe tensorwise --strategy tp=4,pp=4,mbs=1,zero=1,sp=on,recompute=selective"),
    Case("70B CP4 a2a+p2p, ZeRO-3", "megatron",
         "estimate llama3-70b --device h100 --gpus 128 --global-batch 128 --seq-len 32768 "
         "--strategy tp=4,cp=4,cp_comm=a2a+p2p,mbs=1,zero=3,sp=on,recompute=full"),
    Case("70B ZeRO-2 (Megatron FSDP), recompute module mlp", "megatron",
         "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 "
         "--strategy tp=8,mbs=1,zero=2,sp=on,recompute=mlp"),
    Case("70B optimizer offload, 64 H100", "megatron",
         "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 "
         "--strategy tp=8,pp=4,mbs=1,zero=1,sp=on,offload=optimizer"),
    Case("70B activation offload, 64 H100", "megatron",
         "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 "
         "--strategy tp=8,pp=4,mbs=1,zero=1,sp=on,offload=activations"),
    Case("Llama-3 8B search, torchtitan", "torchtitan",
         "search llama3-8b --device h100 --gpus 64 --global-batch 512 --seq-len 8192"),
    Case("Llama-3 70B search, torchtitan", "torchtitan",
         "search llama3-70b --device h100 --gpus 256 --global-batch 512 --seq-len 8192"),
    Case("Llama-3 70B tp8 pp4 uneven, torchtitan", "torchtitan",
         "estimate llama3-70b --device h100 --gpus 128 --global-batch 256 --seq-len 8192 "
         "--strategy tp=8,pp=4,mbs=1,zero=3,sp=on,recompute=full,first_stage_layers=18,last_stage_layers=18"),
    Case("Llama-3 8B cp2 pp2 vpp2, torchtitan", "torchtitan",
         "estimate llama3-8b --device h100 --gpus 64 --global-batch 256 --seq-len 8192 "
         "--strategy tp=2,cp=2,pp=2,vpp=2,mbs=1,zero=3,sp=on,recompute=selective"),
    Case("Llama-3 70B DualPipe-V pp4, torchtitan", "torchtitan",
         "estimate llama3-70b --device h100 --gpus 128 --global-batch 256 --seq-len 8192 "
         "--strategy tp=2,pp=4,mbs=1,zero=3,sp=on,recompute=full,schedule=dualpipev"),
    Case("Llama-3 70B FP8 tensorwise, torchtitan", "torchtitan",
         "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --precision fp8 "
         "--fp8-recipe tensorwise --strategy tp=8,pp=2,mbs=1,zero=3,sp=on,recompute=full"),
    Case("Llama-3.1 405B FP8 blockwise (llama3_405b's rowwise Float8), torchtitan", "torchtitan",
         "estimate llama3.1-405b --device h100 --gpus 512 --global-batch 512 --seq-len 8192 --precision fp8 "
         "--fp8-recipe blockwise --strategy tp=8,pp=8,mbs=1,zero=3,sp=on,recompute=full"),
    Case("Llama-3 8B FSDP (ZeRO-3) only, torchtitan", "torchtitan",
         "estimate llama3-8b --device h100 --gpus 64 --global-batch 256 --seq-len 8192 "
         "--strategy tp=1,mbs=2,zero=3,recompute=selective"),
    Case("Llama-3 8B DDP (ZeRO-0), torchtitan", "torchtitan",
         "estimate llama3-8b --device h100 --gpus 64 --global-batch 256 --seq-len 8192 "
         "--strategy tp=1,mbs=1,zero=0,recompute=full"),
    Case("Llama-3 8B cp8 dp1 (FSDP over the CP ranks), torchtitan", "torchtitan",
         "estimate llama3-8b --device h100 --gpus 8 --global-batch 8 --seq-len 65536 "
         "--strategy tp=1,cp=8,mbs=1,zero=3,recompute=full"),
    Case("Llama-3 70B tp4 cp4 dp1, torchtitan", "torchtitan",
         "estimate llama3-70b --device h100 --gpus 16 --global-batch 16 --seq-len 32768 "
         "--strategy tp=4,cp=4,mbs=1,zero=3,sp=on,recompute=full"),
    Case("DeepSeek-V3 ep64 pp8, torchtitan", "torchtitan",
         "estimate deepseek-v3 --device h800 --gpus 1024 --global-batch 4096 --seq-len 4096 "
         "--strategy tp=1,pp=8,ep=64,mbs=1,zero=3,recompute=full"),
    Case("DeepSeek-V3 FP8 blockwise ep64 pp8, torchtitan", "torchtitan",
         "estimate deepseek-v3 --device h800 --gpus 1024 --global-batch 4096 --seq-len 4096 --precision fp8 "
         "--fp8-recipe blockwise --strategy tp=1,pp=8,ep=64,mbs=1,zero=3,recompute=full"),
]
# HSDP (Megatron FSDP instances, torchtitan shard/replicate degrees): the search's choice, dp_shard 8, and with PP
# (torchtitan only: Megatron FSDP runs without pipeline stages, rule trainer_zero_pipeline)
CASES += [Case(f"Llama-3 8B HSDP {how}, 64 H100", t, command) for how, command, trainers in (
    ("search", "search llama3-8b --device h100 --gpus 64 --global-batch 512 --seq-len 8192 --hsdp on", TRAINERS),
    ("dp_shard 8", "estimate llama3-8b --device h100 --gpus 64 --global-batch 256 --seq-len 8192 "
                   "--strategy tp=1,mbs=1,zero=3,dp_shard=8,recompute=full", TRAINERS),
    ("dp_shard 8 pp2", "estimate llama3-8b --device h100 --gpus 64 --global-batch 256 --seq-len 8192 "
                       "--strategy tp=1,pp=2,mbs=1,zero=3,dp_shard=8,recompute=full", ("torchtitan",)))
          for t in trainers]
CASES += [Case("Llama-3 8B search, torch.compile with compiled loss, torchtitan", "torchtitan",
               "search llama3-8b --device h100 --gpus 64 --global-batch 512 --seq-len 8192 --torch-compile "
               "--compile-loss"),
          Case("70B pp4, deferred embedding wgrad (limit 4)", "megatron",
               "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --wgrad-deferral-limit 4 "
               "--strategy tp=8,pp=4,mbs=1,zero=1,sp=on,recompute=selective"),
          Case("8B tp2, Megatron-LM's own unfused loss (--loss-kernel unfused: no --cross-entropy-loss-fusion)",
               "megatron",
               "estimate llama3-8b --device h100 --gpus 8 --global-batch 32 --seq-len 8192 --loss-kernel unfused "
               "--strategy tp=2,mbs=1,zero=1,sp=on"),
          Case("8B tp2, Transformer Engine's loss (--loss-kernel te: emitted as native)", "megatron",
               "estimate llama3-8b --device h100 --gpus 8 --global-batch 32 --seq-len 8192 --loss-kernel te "
               "--strategy tp=2,mbs=1,zero=1,sp=on"),
          Case("Mixtral tp2 ep8, expert overlap with delayed wgrad (--delay-wgrad-compute)", "megatron",
               "estimate mixtral-8x7b --device h100 --gpus 64 --global-batch 256 --seq-len 4096 --overlap ep "
               "--delay-wgrad-compute --strategy tp=2,dp=32,ep=8,mbs=1,zero=1,sp=on,recompute=selective"),
          Case("8B tp2 pp2 FP8 tensorwise, first 2 and last layer in BF16 (--first-last-layers-bf16)", "megatron",
               "estimate llama3-8b --device h100 --gpus 16 --global-batch 64 --seq-len 8192 --precision fp8 "
               "--fp8-recipe tensorwise --first-layers-bf16 2 --last-layers-bf16 1 "
               "--strategy tp=2,pp=2,mbs=1,zero=1,sp=on")]
# ndcp options a case's own command may carry that the checker sets itself (option -> how many values follow)
OWN_OPTIONS = {"--quiet": 0, "--plot": 1, "--json": 1, "--csv": 1, "--emit": 1, "--emit-file": 1, "--trainer": 1,
               "--emit-anyway": 0}


def readme_cases(readme: Path) -> list[Case]:
    """Every `ndcp search|estimate ...` command of the README (console lines and continuations), for each trainer.
    A command that reads a file an earlier one writes (`--strategy-from F` after `--emit-file F`) runs after that
    one, in the same directory, as the README runs them, for the trainer that file is written for."""
    commands, writers, text = [], {}, re.sub(r"\\\n\s*", " ", readme.read_text())
    for line in text.splitlines():
        found = re.search(r"(?:^\$ |bin/|&& )ndcp ((?:search|estimate) [^`|&]*)", line)
        if found:
            words = shlex.split(found.group(1))
            reads = words[words.index("--strategy-from") + 1] if "--strategy-from" in words else None
            commands.append((without_own_options(found.group(1)), writers.get(reads, "")))
            if "--emit-file" in words:
                writers[words[words.index("--emit-file") + 1]] = found.group(1).strip()
    unique = list(dict.fromkeys(commands))
    return [Case(f"README: {c}", t, c, setup) for c, setup in unique for t in TRAINERS
            if not setup or t == _emitted_for(setup)]


def _emitted_for(command: str) -> str:
    """The trainer whose file `command` writes (its --emit): a command reading that file plans for it alone."""
    words = shlex.split(command)
    return words[words.index("--emit") + 1]


def bench_cases() -> list[Case]:
    """scripts/bench_search.py's searches, for each trainer."""
    out = []
    for model, device, gpus, batch, seq, cap in BENCH_MATRIX:
        command = f"search {model} --device {device} --gpus {gpus} --global-batch {batch} --seq-len {seq}"
        command += f" --memory-cap {cap}" if cap else ""
        out += [Case(f"bench: {model} {device} x{gpus} gbs {batch} seq {seq} {cap}".rstrip(), t, command)
                for t in TRAINERS]
    return out


def without_own_options(command: str) -> str:
    """`command` less the options the checker sets itself (OWN_OPTIONS) and their values."""
    words, out = shlex.split(command), []
    while words:
        word = words.pop(0)
        if word in OWN_OPTIONS:
            del words[:OWN_OPTIONS[word]]
        else:
            out.append(word)
    return shlex.join(out)


class Emission(NamedTuple):
    text: str | None  # the file ndcp wrote, None when it wrote none
    status: int
    message: str  # ndcp's last line on stderr
    foretold: str = ""  # ndcp's own word that the file needs the user's registry config (torchtitan), if it said so


# How ndcp says that a torchtitan file needs a registry config it cannot write (ndcp/trainers/torchtitan.py notes:
# "register one (a config_registry function) ...", "register a config with a tensorwise converter").
FORETOLD = re.compile(r"\bregister (?:one|a config)\b")


def emit(args: argparse.Namespace, case: Case, anyway: bool) -> Emission:
    """ndcp's --emit file for one case, with --trainer the case's (and --emit-anyway where ndcp has it)."""
    with tempfile.TemporaryDirectory() as tmp:
        if case.setup:  # the command that writes the file this one reads, as the README runs it
            subprocess.run([*shlex.split(args.ndcp), *shlex.split(case.setup), "--quiet"], capture_output=True,
                           cwd=tmp)
        path = Path(tmp) / "emitted"
        cmd = [*shlex.split(args.ndcp), *shlex.split(case.command), "--quiet", "--trainer", case.trainer,
               "--emit", case.trainer, "--emit-file", str(path), *(["--emit-anyway"] if anyway else [])]
        if case.command.startswith("search") and "--time-limit" not in case.command:
            cmd += ["--time-limit", str(args.time_limit)]
        # run from the temporary directory: `python -m ndcp` would import an ndcp/ in the working directory first
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        foretold = next((line.strip() for line in lines if FORETOLD.search(line)), "")
        return Emission(path.read_text() if path.exists() else None, done.returncode, lines[-1] if lines else "",
                        foretold)


def split_emission(text: str) -> tuple[dict[str, str | None], list[str]]:
    """(the environment the file exports, or unsets: None; its argument tokens)."""
    env: dict[str, str | None] = {}
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    while tokens and tokens[0] in ("export", "unset"):
        statement, operand, tokens = tokens[0], tokens[1], tokens[2:]
        key, _, value = operand.partition("=")
        env[key] = value if statement == "export" else None
    return env, tokens


def gpus(command: str) -> int:
    """The world size of a case: its --gpus."""
    words = shlex.split(command)
    return int(words[words.index("--gpus") + 1])


class Verdict(NamedTuple):
    outcome: str  # ACCEPTED, REFUSED, DIFFERS (accepted, but an FP8 plan parsed without FP8), FORETOLD (refused or
    # differing as ndcp told the user it would: the model or recipe needs a registry config) or NO FILE
    detail: str  # what the trainer parsed, or its message


def check(args: argparse.Namespace, trainer: str, world: int, text: str) -> Verdict:
    """One emitted file through the trainer's own checks on `world` GPUs, in a fresh process
    (scripts/trainer_checks.py)."""
    exported, tokens = split_emission(text)
    env = {k: v for k, v in {**os.environ, **exported}.items() if v is not None and k != "PYTHONPATH"}
    env.update(WORLD_SIZE=str(world), RANK="0")
    if trainer == "megatron":
        env["PYTHONPATH"] = args.megatron_lm
    with tempfile.TemporaryDirectory() as cwd:  # torchtitan may write its dump folder under the working directory
        done = subprocess.run([sys.executable, str(CHECKS), trainer, str(world), json.dumps(tokens)],
                              capture_output=True, text=True, env=env, cwd=cwd, timeout=900)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    answer = json.loads(last) if last.startswith("{") else {}
    if done.returncode == 0 and answer:
        return Verdict("ACCEPTED", json.dumps(answer))
    if "refused" in answer:
        return Verdict("REFUSED", f"{answer['refused']} [at {answer['at']}]")
    return Verdict("REFUSED", parser_message(done.stderr) or f"exit {done.returncode}")


def parser_message(stderr: str) -> str:
    """A command-line parser's refusal: argparse's `error:` line, or the text of tyro's last panel."""
    lines = stderr.splitlines()
    errors = [line for line in lines if "error:" in line]
    if errors:
        return errors[-1].strip()
    panels = [i for i, line in enumerate(lines) if line.startswith("╭")]
    if not panels:
        return lines[-1].strip() if lines else ""
    body = [lines[panels[-1]].strip(" ─╭╮") + ":"]  # the panel's title
    for line in lines[panels[-1] + 1:]:
        text = line.strip(" │╰╯")
        if text.startswith("─") or text.startswith("For full helptext"):
            break
        body.append(text)
    if len(body) > 1 and body[1].startswith(body[0][:-1]):  # a panel whose first line repeats its title
        body = body[1:]
    return " ".join(t for t in body if t)


def run_case(args: argparse.Namespace, case: Case, anyway: bool) -> Verdict:
    """Emit one case's file and check it; ndcp's exit status and message follow when it was not 0."""
    emission = emit(args, case, anyway)
    ndcp = f" [ndcp exit {emission.status}: {emission.message}]" if emission.status else ""
    if emission.text is None:
        return Verdict("NO FILE", ndcp.strip(" []"))
    verdict = check(args, case.trainer, gpus(case.command), emission.text)
    if verdict.outcome == "ACCEPTED" and "--precision fp8" in case.command and not runs_fp8(case.trainer, verdict):
        verdict = Verdict("DIFFERS", f"the plan is FP8, the trainer parsed no FP8: {verdict.detail}")
    if verdict.outcome in ("REFUSED", "DIFFERS") and emission.foretold:
        verdict = Verdict("FORETOLD", f"{verdict.outcome.lower()} as ndcp said ({emission.foretold}): {verdict.detail}")
    return Verdict(verdict.outcome, verdict.detail + ndcp)


def runs_fp8(trainer: str, accepted: Verdict) -> bool:
    """Whether what the trainer parsed runs FP8: Megatron-LM's --fp8 format, torchtitan's FP8/MX linear layers."""
    parsed = json.loads(accepted.detail)
    return bool(parsed["fp8"] if trainer == "megatron" else parsed["quantized"])


def all_cases(args: argparse.Namespace) -> list[Case]:
    """The pinned cases, the README's and bench_search.py's, less those --cases does not match."""
    cases = CASES + readme_cases(Path(args.readme)) + bench_cases()
    return [c for c in cases if re.search(args.cases, f"{c.trainer} {c.name}")]


def markdown(rows: list[tuple[Case, Verdict]]) -> str:
    """The results as a Markdown table."""
    lines = ["| trainer | case | outcome | detail |", "|---|---|---|---|"]
    for case, verdict in rows:
        detail = verdict.detail.replace("|", "\\|")
        lines.append(f"| {case.trainer} | {case.name} | {verdict.outcome} | {detail} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron-lm", required=True, help="a Megatron-LM source tree")
    parser.add_argument("--ndcp", default=str(ROOT / ".venv/bin/ndcp"),
                        help="the ndcp command, split like a shell line (default: .venv's)")
    parser.add_argument("--readme", default=str(ROOT / "README.md"), help="the README whose commands are cases")
    parser.add_argument("--facts", default=str(ROOT / "ndcp/trainers/facts"), help="the pinned facts to compare")
    parser.add_argument("--cases", default="", help="only the cases whose 'trainer name' matches this regex")
    parser.add_argument("--time-limit", type=float, default=60, help="each search's --time-limit (seconds)")
    parser.add_argument("--markdown", help="also write the results as a Markdown table to this file")
    parser.add_argument("--dump-facts", action="store_true", help="print the pinned flags as the parsers say")
    parser.add_argument("--file", help="check only this emitted file (with --trainer and --gpus)")
    parser.add_argument("--trainer", choices=TRAINERS, default="megatron", help="--file's trainer")
    parser.add_argument("--gpus", type=int, default=8, help="--file's world size")
    args = parser.parse_args()
    if args.dump_facts:
        return check_facts(args)
    if args.file:
        verdict = check(args, args.trainer, args.gpus, Path(args.file).read_text())
        print(f"{verdict.outcome:8s} {args.trainer:10s} {args.file}: {verdict.detail}")
        return 0 if verdict.outcome == "ACCEPTED" else 1
    help_text = subprocess.run([*shlex.split(args.ndcp), "search", "--help"], capture_output=True, text=True,
                               cwd=tempfile.gettempdir()).stdout
    anyway = "--emit-anyway" in help_text
    rows = []
    for case in all_cases(args):
        verdict = run_case(args, case, anyway)
        rows.append((case, verdict))
        print(f"{verdict.outcome:8s} {case.trainer:10s} {case.name}: {verdict.detail}", flush=True)
    for trainer in TRAINERS:
        outcomes = [v.outcome for c, v in rows if c.trainer == trainer]
        print(f"{trainer}: {outcomes.count('ACCEPTED')}/{len(outcomes)} accepted, {outcomes.count('REFUSED')} "
              f"refused, {outcomes.count('DIFFERS')} FP8 plans parsed without FP8, {outcomes.count('FORETOLD')} "
              f"foretold by ndcp (registry config needed), {outcomes.count('NO FILE')} without a file")
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows))
    wrong = check_facts(args) if not args.cases else 0
    return 0 if all(v.outcome in ("ACCEPTED", "FORETOLD") for _, v in rows) and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
