"""Feed ndcp's emitted launch configurations to the trainers' own parsers and validators, and check the pinned flag
facts (ndcp/trainers/facts/*.yaml) against the real parsers. Outside CI: torch, Megatron-LM and torchtitan are large.

Scratch environment (Python >= 3.12: Megatron-LM main uses typing.override):
    python3.12 -m venv /tmp/trainers-venv
    /tmp/trainers-venv/bin/pip install torch==2.13.0 megatron-core torchtitan triton rich pyyaml
    git --git-dir=<a Megatron-LM clone>/.git archive HEAD | tar -x -C /tmp/megatron-lm
Run (ndcp's emissions come from this checkout's own environment, --ndcp):
    /tmp/trainers-venv/bin/python scripts/check_trainers.py --megatron-lm /tmp/megatron-lm [--ndcp .venv/bin/ndcp]
    /tmp/trainers-venv/bin/python scripts/check_trainers.py --megatron-lm /tmp/megatron-lm --dump-facts megatron

Each case runs in its own process: Megatron-LM's parse_args + validate_args with WORLD_SIZE = the case's GPUs and
the environment the emission exports; torchtitan's ConfigManager.parse_args + ParallelDims(world_size). Without a
GPU, validate_args' two device queries (get_device_arch_version for the CUDA_DEVICE_MAX_CONNECTIONS check, and
torch.cuda.get_device_capability for grouped-GEMM support) answer Hopper, 9.0 (the matrix's H100s); nothing else
is changed.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, trainer, ndcp arguments): the matrix. Searches emit their winner; estimates emit the given strategy.
MATRIX = [
    ("70B search, 512 H100", "megatron",
     "search llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192"),
    ("405B tp8 pp16 uneven", "megatron",
     "estimate llama3.1-405b --device h100 --gpus 2048 --global-batch 2048 --seq-len 8192 "
     "--strategy tp=8,pp=16,mbs=1,zero=1,sp=on,recompute=selective,first_stage_layers=6"),
    ("405B tp8 pp8 vpp8 accounted", "megatron",
     "estimate llama3.1-405b --device h100 --gpus 2048 --global-batch 2048 --seq-len 8192 "
     "--strategy tp=8,pp=8,vpp=8,mbs=1,zero=1,sp=on,recompute=selective"),
    ("Mixtral-8x7B tp2 ep8", "megatron",
     "estimate mixtral-8x7b --device h100 --gpus 64 --global-batch 256 --seq-len 4096 "
     "--strategy tp=2,pp=2,ep=8,mbs=1,zero=1,sp=on,recompute=selective"),
    ("Mixtral-8x7B folded ep8 etp1 on tp4", "megatron",
     "estimate mixtral-8x7b --device h100 --gpus 64 --global-batch 256 --seq-len 4096 "
     "--strategy tp=4,pp=2,ep=8,etp=1,mbs=1,zero=1,sp=on,recompute=full"),
    ("70B per-stage plan, 60 GiB, 64 H100", "megatron",
     "search llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --memory-cap 60GiB"),
    ("DeepSeek-V3 tp2 pp16 ep64, 1024 H100", "megatron",
     "estimate deepseek-v3 --device h100 --gpus 1024 --global-batch 4096 --seq-len 4096 "
     "--strategy tp=2,pp=16,ep=64,mbs=1,zero=1,sp=on,recompute=full"),
    ("70B FP8, 64 H100", "megatron",
     "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --precision fp8 "
     "--fp8-recipe tensorwise --strategy tp=4,pp=4,mbs=1,zero=1,sp=on,recompute=selective"),
    ("70B CP2 a2a+p2p, ZeRO-3", "megatron",
     "estimate llama3-70b --device h100 --gpus 128 --global-batch 128 --seq-len 32768 "
     "--strategy tp=4,cp=4,cp_comm=a2a+p2p,mbs=1,zero=3,sp=on,recompute=full"),
    ("70B ZeRO-2 (Megatron FSDP), recompute modules layernorm+mlp", "megatron",
     "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 "
     "--strategy tp=8,mbs=1,zero=2,sp=on,recompute=layernorm+mlp"),
    ("70B optimizer offload, 64 H100", "megatron",
     "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 "
     "--strategy tp=8,pp=4,mbs=1,zero=1,sp=on,offload=optimizer"),
    ("70B activation offload, 64 H100", "megatron",
     "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 "
     "--strategy tp=8,pp=4,mbs=1,zero=1,sp=on,offload=activations"),
    ("Llama-3 8B search, torchtitan", "torchtitan",
     "search llama3-8b --device h100 --gpus 64 --global-batch 512 --seq-len 8192 --trainer torchtitan"),
    ("Llama-3 70B search, torchtitan", "torchtitan",
     "search llama3-70b --device h100 --gpus 256 --global-batch 512 --seq-len 8192 --trainer torchtitan"),
    ("Llama-3 70B tp8 pp4 uneven, torchtitan", "torchtitan",
     "estimate llama3-70b --device h100 --gpus 128 --global-batch 256 --seq-len 8192 --trainer torchtitan "
     "--strategy tp=8,pp=4,mbs=1,zero=3,sp=on,recompute=full,first_stage_layers=18,last_stage_layers=18"),
    ("Llama-3 8B cp2 pp2 vpp2, torchtitan", "torchtitan",
     "estimate llama3-8b --device h100 --gpus 64 --global-batch 256 --seq-len 8192 --trainer torchtitan "
     "--strategy tp=2,cp=2,pp=2,vpp=2,mbs=1,zero=3,sp=on,recompute=selective"),
]

MEGATRON_CHILD = r"""
import json, os, sys
import megatron.training.arguments as A
import torch
if not torch.cuda.is_available():  # see the module docstring
    A.get_device_arch_version = lambda: 9
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
args_list = json.loads(sys.argv[1])
sys.argv = ["pretrain_gpt.py"] + args_list
args = A.parse_args()
A.validate_args(args)
print(json.dumps({"dp": args.data_parallel_size, "vpp": args.virtual_pipeline_model_parallel_size,
                  "recompute": [args.recompute_granularity, args.recompute_method, args.recompute_num_layers]}))
"""

TORCHTITAN_CHILD = r"""
import json, sys
from torchtitan.config.manager import ConfigManager
from torchtitan.distributed.parallel_dims import ParallelDims
args_list, world = json.loads(sys.argv[1]), int(sys.argv[2])
config = ConfigManager().parse_args(args_list)
dims = ParallelDims.from_config(config.parallelism, world)
p = config.parallelism
print(json.dumps({"dp_shard": dims.dp_shard, "tp": dims.tp, "pp": dims.pp, "cp": dims.cp,
                  "ac": type(config.activation_checkpoint).__qualname__,
                  "parts": len(p.module_fqns_per_model_part or []) or None}))
"""


def emitted(ndcp: str, command: str, trainer: str) -> str:
    """ndcp's --emit output for one matrix case."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "emitted"
        cmd = [ndcp, *shlex.split(command), "--quiet", "--emit", trainer, "--emit-file", str(path)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"ndcp failed: {done.stderr.strip() or done.stdout.strip()}")
        return path.read_text()


def split_emission(text: str) -> tuple[dict[str, str], list[str]]:
    """(exported environment, argument tokens) of an emission."""
    env, tokens = {}, shlex.split(text.replace("\\\n", " "), comments=True)
    while tokens and tokens[0] == "export":
        key, _, value = tokens[1].partition("=")
        env[key] = value
        tokens = tokens[2:]
    return env, tokens


def gpus(command: str) -> int:
    words = shlex.split(command)
    return int(words[words.index("--gpus") + 1])


def run_case(name: str, trainer: str, command: str, args: argparse.Namespace) -> tuple[bool, str]:
    try:
        text = emitted(args.ndcp, command, trainer)
    except RuntimeError as error:
        return False, str(error)
    env, tokens = split_emission(text)
    child_env = {**os.environ, **env, "WORLD_SIZE": str(gpus(command)), "RANK": "0"}
    child_env.pop("PYTHONPATH", None)
    if trainer == "megatron":
        child_env["PYTHONPATH"] = args.megatron_lm
        if "CUDA_DEVICE_MAX_CONNECTIONS" not in env:
            child_env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        cmd = [sys.executable, "-c", MEGATRON_CHILD, json.dumps(tokens)]
    else:
        cmd = [sys.executable, "-c", TORCHTITAN_CHILD, json.dumps(tokens), str(gpus(command))]
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env, timeout=600)
    if done.returncode == 0:
        return True, done.stdout.strip().splitlines()[-1]
    lines = [l for l in done.stderr.strip().splitlines() if l.strip()]
    return False, lines[-1] if lines else f"exit {done.returncode}"


# -- facts -------------------------------------------------------------------------------------------------------
def megatron_facts(source: str, pinned: dict) -> dict:
    """Type, choices and nargs of each pinned flag, read from Megatron-LM's own parser."""
    sys.path.insert(0, source)
    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    actions = {o: a for a in parser._actions for o in a.option_strings}
    out = {}
    for name in pinned:
        action = actions.get(name)
        if action is None:
            out[name] = None
            continue
        if action.nargs == 0:
            fact = {"type": "flag"}
        else:
            kind = getattr(action.type, "__name__", "str")
            fact = {"type": kind if kind in ("int", "float") else "str"}
            if action.choices:
                fact["choices"] = [str(c) for c in action.choices]
            if action.nargs not in (None, 1):
                fact["nargs"] = action.nargs
        out[name] = fact
    return out


TITAN_FLAGS = ("parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
               "parallelism.tensor_parallel_degree", "parallelism.enable_sequence_parallel",
               "parallelism.pipeline_parallel_degree", "parallelism.module_fqns_per_model_part",
               "parallelism.pipeline_parallel_first_stage_less_layers",
               "parallelism.pipeline_parallel_last_stage_less_layers", "parallelism.pipeline_parallel_layers_per_stage",
               "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_microbatch_size",
               "parallelism.context_parallel_degree", "parallelism.expert_parallel_degree",
               "training.local_batch_size", "training.global_batch_size", "training.seq_len",
               "training.disable_cuda_graphs")
TITAN_AC = {"SelectiveAC": "selective", "FullAC": "full", "NoAC": "none"}


def torchtitan_facts(configs: dict) -> dict:
    """Type and default of each option ndcp emits or reads (torchtitan's config dataclasses), and each pinned
    registry config's own values where they differ (models/*/config_registry.py)."""
    import dataclasses
    import importlib

    from torchtitan.config import configs as titan

    classes = {"parallelism": titan.ParallelismConfig, "training": titan.TrainingConfig}
    flags = {}
    for dotted in TITAN_FLAGS:
        section, name = dotted.split(".")
        field = {f.name: f for f in dataclasses.fields(classes[section])}[name]
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        kind = {"int": "int", "bool": "flag", "str": "str"}.get(getattr(field.type, "__name__", ""), None)
        kind = kind or ("int" if "int" in str(field.type) else "list" if "list" in str(field.type) else "str")
        flags["--" + section + "." + name.replace("_", "-")] = {"type": kind, "default": default}
    out_configs = {}
    for config, pinned in configs.items():
        registry = importlib.import_module(f"torchtitan.models.{pinned['module']}.config_registry")
        built = getattr(registry, config)()
        entry = {"model": pinned["model"], "module": pinned["module"]}
        for flag, fact in flags.items():
            section, name = flag[2:].split(".")
            value = getattr(getattr(built, section), name.replace("-", "_"))
            if value != fact["default"]:
                entry[flag] = value
        ac = type(built.activation_checkpoint).__qualname__.split(".")[0]
        entry["activation_checkpoint"] = TITAN_AC.get(ac, ac)
        if pinned.get("fp8_recipe"):
            entry["fp8_recipe"] = pinned["fp8_recipe"]
        out_configs[config] = entry
    return {"flags": flags, "configs": out_configs}


def check_facts(args: argparse.Namespace) -> int:
    """Pinned facts equal to what the real parser says (flags ndcp emits or reads)."""
    import yaml

    pinned = yaml.safe_load((ROOT / "ndcp/trainers/facts/megatron.yaml").read_text())["flags"]
    titan = yaml.safe_load((ROOT / "ndcp/trainers/facts/torchtitan.yaml").read_text())
    real, real_titan = megatron_facts(args.megatron_lm, pinned), torchtitan_facts(titan["configs"])
    if args.dump_facts:
        print(yaml.safe_dump({"megatron": {"flags": real}, "torchtitan": real_titan}, sort_keys=False,
                             default_flow_style=None, width=120))
        return 0
    wrong = 0
    for trainer, have, want in (("megatron", pinned, real), ("torchtitan", titan["flags"], real_titan["flags"]),
                                ("torchtitan configs", titan["configs"], real_titan["configs"])):
        bad = [n for n in have if want.get(n) != have[n]]
        for n in bad:
            print(f"facts: {trainer} {n}: pinned {have[n]}, the real one says {want.get(n)}")
        print(f"facts: {trainer} {len(have) - len(bad)}/{len(have)} pinned entries match")
        wrong += len(bad)
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron-lm", required=True, help="a Megatron-LM source tree")
    parser.add_argument("--ndcp", default=str(ROOT / ".venv/bin/ndcp"), help="the ndcp command (default: .venv's)")
    parser.add_argument("--dump-facts", action="store_true", help="print the pinned Megatron flags as the parser says")
    args = parser.parse_args()
    if args.dump_facts:
        return check_facts(args)
    results: dict[str, list[bool]] = {}
    for name, trainer, command in MATRIX:
        ok, detail = run_case(name, trainer, command, args)
        results.setdefault(trainer, []).append(ok)
        print(f"{'ACCEPTED' if ok else 'REFUSED '} {trainer:10s} {name}: {detail}", flush=True)
    for trainer, oks in results.items():
        print(f"{trainer}: {sum(oks)}/{len(oks)} accepted")
    wrong = check_facts(args)
    return 0 if all(all(v) for v in results.values()) and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
