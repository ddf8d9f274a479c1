"""Every flag or key an emitter writes is one the trainer has, with a value of its pinned type and choices
(ndcp/trainers/facts/*.yaml, read from the trainers' own parsers; scripts/check_trainers.py re-checks the pins)."""
import shlex

import pytest
import yaml

from ndcp.specs import RecomputePlan, RunSpec, StageRecompute, Strategy
from ndcp.specs.library import load_model
from ndcp.trainers import emit, facts

SELECTIVE, FULL = RecomputePlan.uniform("selective"), RecomputePlan.uniform("full")
BLOCK = RecomputePlan(mode="per-stage", stages=(StageRecompute(none=38, full=2), StageRecompute(none=39, full=1)))
CASES = [  # (model, run, strategy): dense, uneven, MoE with folding, MLA + MTP, per-stage, FP8, CP, each ZeRO stage
    ("llama3-70b", RunSpec(global_batch=1024, seq_len=8192), Strategy(dp=64, tp=8, mbs=2, mbn=8, zero=2, sp=True)),
    ("llama3-70b", RunSpec(global_batch=1024, seq_len=8192),
     Strategy(dp=64, tp=8, mbs=2, mbn=8, zero=1, sp=True, optimizer_offload=True)),
    ("llama3-70b", RunSpec(global_batch=128, seq_len=8192, precision="fp8", fp8_recipe="blockwise",
                           optimizer_state_dtype="bf16"),
     Strategy(dp=4, tp=8, pp=2, mbs=1, mbn=32, zero=1, sp=True, recompute=BLOCK)),
    ("llama3.1-405b", RunSpec(global_batch=2048, seq_len=8192),
     Strategy(dp=16, tp=8, pp=16, mbs=1, mbn=128, zero=0, sp=True, recompute=SELECTIVE,
              layers_per_stage=(6,) + (8,) * 15)),
    ("llama3.1-405b", RunSpec(global_batch=2048, seq_len=8192),
     Strategy(dp=32, tp=8, pp=8, vpp=8, schedule="interleaved", mbs=1, mbn=60, zero=1, sp=True, recompute=FULL)),
    ("mixtral-8x7b", RunSpec(global_batch=256, seq_len=4096),
     Strategy(dp=16, tp=4, pp=1, ep=8, etp=1, mbs=1, mbn=16, zero=3, sp=True, recompute=FULL)),
    ("deepseek-v3", RunSpec(global_batch=4096, seq_len=4096),
     Strategy(dp=32, tp=2, pp=16, ep=64, mbs=1, mbn=128, zero=1, sp=True, recompute=FULL)),
    ("llama3-70b", RunSpec(global_batch=128, seq_len=32768),
     Strategy(dp=8, tp=4, cp=4, cp_comm="a2a+p2p", mbs=1, mbn=16, zero=3, sp=True, recompute=FULL)),
    ("gpt3-175b", RunSpec(global_batch=1536, seq_len=2048), Strategy(dp=8, tp=8, pp=12, mbs=1, mbn=192, zero=1)),
    # the output layer's weight gradient deferred (--defer-embedding-wgrad-compute --wgrad-deferral-limit)
    ("llama3-70b", RunSpec(global_batch=32, seq_len=4096, precision="fp8", fp8_recipe="tensorwise",
                           wgrad_deferral_limit=22, disable_parameter_transpose_cache=True),
     Strategy(dp=2, tp=4, pp=4, vpp=5, schedule="interleaved", mbs=1, mbn=16, zero=1, sp=True, recompute=SELECTIVE)),
]


def options(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """(option, its values) in order."""
    out: list[tuple[str, list[str]]] = []
    for token in tokens:
        if token.startswith("--"):
            out.append((token, []))
        elif out:
            out[-1][1].append(token)
    return out


def is_placeholder(values: list[str]) -> bool:
    """A value the user fills in (`<NAME>`): the option is pinned, its value is not one yet."""
    return len(values) == 1 and values[0].startswith("<") and values[0].endswith(">")


def check_value(name: str, fact: dict, values: list[str]) -> None:
    if is_placeholder(values):
        return
    if fact["type"] == "flag":
        assert values == [], name
        return
    count = fact.get("nargs")
    assert len(values) >= 1 if count == "+" else len(values) == 1, (name, values)
    for value in values:
        {"int": int, "float": float, "str": str, "list": str}[fact["type"]](value)
        assert value in fact.get("choices", [value]), (name, value)


@pytest.mark.parametrize("name,run,strategy", CASES)
def test_every_megatron_flag_is_pinned_with_its_type_and_choices(name, run, strategy):
    text = emit("megatron", load_model(name), run, strategy).text
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    start = next(i for i, t in enumerate(tokens) if t.startswith("--"))
    environment = tokens[:start]  # export NAME=VALUE / unset NAME lines before the flags
    assert all(t in ("export", "unset") or t.split("=")[0] in ("CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_CPU_OFFLOAD_V1")
               for t in environment), environment
    flags = facts("megatron")["flags"]
    for option, values in options(tokens[start:]):
        assert option in flags, option
        check_value(option, flags[option], values)


@pytest.mark.parametrize("name,run,strategy", [c for c in CASES if c[0] in ("llama3-70b", "deepseek-v3")])
def test_every_torchtitan_option_is_pinned_and_the_config_exists(name, run, strategy):
    tokens = shlex.split(emit("torchtitan", load_model(name), run, strategy).text.replace("\\\n", " "),
                         comments=True)
    pinned = facts("torchtitan")
    assert tokens[tokens.index("--config") + 1] in pinned["configs"]
    assert tokens[-1].split(":")[1] in ("none", "selective", "full")  # the activation-checkpoint subcommand
    for option, values in options(tokens[:-1]):
        if option in ("--module", "--config"):
            continue
        positive = option.replace(".no-", ".")
        assert positive in pinned["flags"], option
        fact = pinned["flags"][positive]
        check_value(option, {**fact, "nargs": "+" if fact["type"] == "list" else None}, values)


def keys(doc: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key, value in doc.items():
        name = prefix + key
        out += keys(value, name + ".") if isinstance(value, dict) else [(name, value)]
    return out


@pytest.mark.parametrize("name,run,strategy", CASES)
def test_every_mindformers_key_is_pinned_with_its_type(name, run, strategy):
    doc = yaml.safe_load(emit("mindformers", load_model(name), run, strategy).text)
    pinned = facts("mindformers")["flags"]
    for key, value in keys(doc):
        assert key in pinned, key
        kind = pinned[key]["type"]
        if kind == "stages":
            rows = value if strategy.vpp > 1 else [value]
            assert len(rows) == strategy.vpp and all(len(r) == strategy.pp for r in rows), key
        else:
            assert isinstance(value, {"int": int, "bool": bool, "str": str}[kind]), key
            assert value in pinned[key].get("choices", [value]), key
