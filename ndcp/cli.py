"""The `ndcp` command line.

Adding a subcommand (e.g. `search`, `recompute`): write `register_<name>(subparsers)` that calls
`_subparser(subparsers, name, help, description, example)`, then `add_problem_arguments(parser)` for the shared
problem arguments and `add_json_argument(parser)` for `--json`, and sets `func=<handler>`; append it to
`COMMANDS`. A handler takes the parsed args, uses `build_problem(args) -> (model, cluster, run)`, and returns the
exit code. Raise SpecError for anything the user can fix; `main` turns it into one `ndcp: error: ...` line, exit 2.

Exit codes: 0 success (an estimate that does not fit is still a success), 1 infeasible (search), 2 user error,
3 internal error.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from . import __version__
from .specs.device import ClusterSpec, PRESETS, device_preset
from .specs.fields import SpecError, divisors, from_mapping, show
from .specs.model import ModelSpec
from .specs.run import TRAINERS, RunSpec
from .specs.strategy import RECOMPUTE_MODES, SCHEDULES, RecomputePlan, StageRecompute, Strategy

EXIT_OK, EXIT_INFEASIBLE, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
GIB = 2**30


class UsageError(Exception):
    """A command-line mistake found by argparse (unknown option, missing argument, bad value)."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line through `main` instead of usage + exit."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(message)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog):
        super().__init__(prog, max_help_position=34)


# -- argument value types ----------------------------------------------------------------------------------------
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e([+-]?[0-9]+))?\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes from "70GiB", "75GB", "80000MiB", "1.5TiB" or plain "85899345920" (decimal and binary units)."""
    match = _SIZE_RE.match(str(text))
    unit = match.group(3).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: expected e.g. 70GiB, 75GB, 80000MiB or bytes")
    try:  # a huge exponent (1e400GB) overflows the float: too large, not a crash
        number = float(match.group(1)) * (10.0 ** int(match.group(2)) if match.group(2) else 1)
        value = number * _SIZE_UNITS[unit]
    except (OverflowError, ValueError):
        value = math.inf
    if not value <= 1 << 60:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: too large")
    return int(round(value))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected an integer >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected an integer >= 1")
    return value


def _bandwidth(text: str) -> float:
    """GB/s (decimal) -> bytes/s."""
    try:
        value = float(str(text).lower().removesuffix("gb/s").strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid bandwidth {text!r}: expected GB/s, e.g. 450") from None
    if not (value > 0 and value < 1e9):
        raise argparse.ArgumentTypeError(f"invalid bandwidth {text!r}: expected a positive number of GB/s")
    return value * 1e9


# -- shared arguments --------------------------------------------------------------------------------------------
def add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every planning command shares: the model, the cluster and the run."""
    parser.add_argument("model", metavar="MODEL",
                        help="library model name (see `ndcp models`), a model YAML spec, or a Hugging Face config.json")
    group = parser.add_argument_group("cluster")
    group.add_argument("--device", metavar="NAME", required=True, type=str.lower,
                       help=f"device preset (see `ndcp devices`): {', '.join(PRESETS)}")
    group.add_argument("--gpus", metavar="N", required=True, type=_positive_int, help="number of devices")
    group.add_argument("--devices-per-node", metavar="N", type=_positive_int,
                       help="override the preset's devices per node (scale-up domain)")
    group.add_argument("--intra-node-bandwidth", metavar="GB/s", type=_bandwidth,
                       help="override the per-device intra-node bandwidth, one way, in GB/s")
    group.add_argument("--inter-node-bandwidth", metavar="GB/s", type=_bandwidth,
                       help="override the per-device inter-node bandwidth, one way, in GB/s")
    group.add_argument("--device-memory", metavar="SIZE", type=parse_size,
                       help="override the device memory, e.g. 80GiB")
    group = parser.add_argument_group("run")
    group.add_argument("--global-batch", metavar="GBS", required=True, type=_positive_int,
                       help="global batch in sequences per optimizer step")
    group.add_argument("--seq-len", metavar="S", required=True, type=_positive_int, help="sequence length in tokens")
    group.add_argument("--memory-cap", metavar="SIZE", type=parse_size,
                       help="usable memory per device (default: all of it), e.g. 70GiB, 75GB, 80000MiB or bytes")
    group.add_argument("--reserve", metavar="SIZE", type=parse_size, default=GIB,
                       help="memory set aside per device for allocator fragmentation, context and workspaces "
                            "(default 1GiB)")
    group.add_argument("--precision", choices=("bf16", "fp16"), default="bf16",
                       help="parameter and activation dtype (default bf16)")
    group.add_argument("--grad-dtype", choices=("fp32", "bf16"), default="fp32",
                       help="gradient buffer dtype (default fp32)")
    group.add_argument("--no-flash-attention", dest="flash_attention", action="store_false",
                       help="materialise the attention scores (no FlashAttention)")
    group.add_argument("--trainer", choices=TRAINERS, default="megatron",
                       help="whose memory behaviour to model (default megatron: Megatron-Core + Transformer Engine; "
                            "torchtitan: FSDP2 states, op-level selective AC, eager autograd)")


def build_problem(args: argparse.Namespace) -> tuple[ModelSpec, ClusterSpec, RunSpec]:
    """The model, cluster (preset + overrides) and run the shared arguments describe. Raises SpecError."""
    from .specs.library import load_model

    model = load_model(args.model)
    cluster = ClusterSpec(device_preset(args.device), args.gpus).with_overrides(
        memory_bytes=args.device_memory,
        devices_per_node=args.devices_per_node,
        intra_node_bandwidth=args.intra_node_bandwidth,
        inter_node_bandwidth=args.inter_node_bandwidth,
    )
    memory = cluster.device.memory_bytes
    cap = args.memory_cap
    if cap is not None:
        if cap <= 0:
            raise SpecError(f"--memory-cap={cap} bytes is not valid; expected a positive size, e.g. 70GiB")
        if cap > memory:
            raise SpecError(f"--memory-cap={_gib(cap)} exceeds the {cluster.device.name} device memory "
                            f"({_gib(memory)}); lower the cap or override --device-memory")
    capacity = cap or memory
    if args.reserve >= capacity:
        raise SpecError(f"--reserve={_gib(args.reserve)} leaves no memory: the capacity per device is {_gib(capacity)}")
    run = RunSpec(global_batch=args.global_batch, seq_len=args.seq_len, precision=args.precision,
                  grad_dtype=args.grad_dtype, flash_attention=args.flash_attention,
                  memory_cap_bytes=cap or 0, reserve_bytes=args.reserve, trainer=args.trainer)
    return model, cluster, run


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH|-", dest="json",
                        help="also write the result as JSON to PATH; `-` writes only the JSON to stdout")


def emit_json(args: argparse.Namespace, doc: Any) -> bool:
    """Write `doc` if --json was given. Returns True when it went to stdout (print nothing else there then)."""
    from .report.jsonout import write_json

    path = getattr(args, "json", None)
    if not path:
        return False
    write_json(doc, path)
    return path == "-"


def console_for(args: argparse.Namespace):
    """The console for human-readable output (stdout)."""
    from rich.console import Console

    return Console(highlight=False)


# -- strategy parsing --------------------------------------------------------------------------------------------
STRATEGY_INT_KEYS = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "mbn", "zero")
STRATEGY_KEYS = STRATEGY_INT_KEYS + ("sp", "recompute", "schedule")
FILE_ONLY_KEYS = ("layers_per_stage",)
_TRUE, _FALSE = ("on", "true", "1", "yes"), ("off", "false", "0", "no")


def _strategy_value(key: str, value: Any) -> Any:
    """Check and convert one strategy value (from the --strategy string or the YAML file)."""
    if key in STRATEGY_INT_KEYS:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise SpecError(f"{key}={show(value)} is not valid; expected an integer")
        try:
            number = int(str(value).strip())
        except ValueError:
            raise SpecError(f"{key}={show(value)} is not valid; expected an integer") from None
        low = 0 if key == "zero" else 1
        if number < low or (key == "zero" and number > 3):
            valid = "valid: 0, 1, 2, 3" if key == "zero" else "expected an integer >= 1"
            raise SpecError(f"{key}={number} is not valid; {valid}")
        return number
    if not isinstance(value, (str, int, float, dict, list, tuple)) or (
            key in ("sp", "schedule") and not isinstance(value, (str, int))):
        raise SpecError(f"{key}={show(value)} is not valid")  # before str(value): a YAML alias bomb must not print
    if key == "sp":
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise SpecError(f"sp={show(value)} is not valid; valid: on, off, true, false, 1, 0")
    if key == "schedule":
        word = str(value).strip().lower()
        if word not in SCHEDULES:
            raise SpecError(f"schedule={show(value)} is not valid; valid: {', '.join(SCHEDULES)}")
        return word
    if key == "recompute":
        if isinstance(value, str):
            word = value.strip().lower()
            if word not in RECOMPUTE_MODES:
                raise SpecError(f"recompute={show(value)} is not valid; valid: {', '.join(RECOMPUTE_MODES)} "
                                "(per-stage plans go in --strategy-file)")
            return word
        return value  # a per-stage mapping from the file, checked by _recompute_plan
    if key == "layers_per_stage":
        if not isinstance(value, (list, tuple)) or not value:
            raise SpecError(f"layers_per_stage={show(value)} is not valid; expected a list of layer counts per stage")
        return tuple(_layer_count(i, v) for i, v in enumerate(value))
    raise SpecError(f"{key}: unknown strategy key; valid keys: {', '.join(STRATEGY_KEYS)}")


def _layer_count(index: int, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"layers_per_stage[{index}]={show(value)} is not valid; expected an integer >= 1")
    return value


def parse_strategy_string(text: str) -> dict[str, Any]:
    """`tp=8,pp=16,dp=8,mbs=1,zero=1,sp=on,recompute=selective` -> checked values by key."""
    out: dict[str, Any] = {}
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or not value.strip():
            raise SpecError(f"--strategy: {item!r} is not key=value; valid keys: {', '.join(STRATEGY_KEYS)}")
        if key not in STRATEGY_KEYS:
            raise SpecError(f"--strategy: unknown key {key!r}; valid keys: {', '.join(STRATEGY_KEYS)}")
        if key in out:
            raise SpecError(f"--strategy: {key} is given twice")
        out[key] = _strategy_value(key, value.strip())
    return out


def load_strategy_file(path: str) -> dict[str, Any]:
    """A YAML (or JSON) strategy: the --strategy keys plus `layers_per_stage` and a per-stage `recompute`. A document
    with a top-level `strategy` mapping (an `ndcp estimate --json` output) is read from that mapping."""
    from .specs.library import parse_yaml

    where = f"--strategy-file {path}"
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{where}: cannot read: not UTF-8 text") from None
    except (OSError, ValueError) as error:  # ValueError: a path with an embedded NUL
        raise SpecError(f"{where}: cannot read: {getattr(error, 'strerror', None) or type(error).__name__}") from None
    data = parse_yaml(text, where)  # YAML errors, nesting too deep, 4300+-digit integers -> SpecError
    if isinstance(data, dict) and isinstance(data.get("strategy"), dict):
        data = data["strategy"]
    if not isinstance(data, dict):
        got = type(data).__name__ if data is not None else "an empty file"
        raise SpecError(f"{where}: expected a mapping of strategy keys, got {got}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).strip().lower().replace("-", "_")
        if name not in STRATEGY_KEYS + FILE_ONLY_KEYS:
            raise SpecError(f"{where}: unknown key {show(key)}; valid keys: {', '.join(STRATEGY_KEYS + FILE_ONLY_KEYS)}")
        try:
            out[name] = _strategy_value(name, value)
        except SpecError as error:
            raise SpecError(f"{where}: {error}") from None
    return out


def _recompute_plan(value: Any) -> RecomputePlan:
    """A uniform mode string, or `{stages: [{none: .., selective: .., full: ..}, ...]}` per virtual stage."""
    if isinstance(value, str):
        return RecomputePlan.uniform(value)
    stages = value.get("stages") if isinstance(value, dict) else value if isinstance(value, list) else None
    if isinstance(value, dict) and set(value) - {"stages", "mode"}:
        extra = show(sorted(set(value) - {"stages", "mode"}, key=str)[0])
        raise SpecError(f"recompute.{extra}: unknown key; valid keys: stages")
    if not isinstance(stages, list) or not stages:
        raise SpecError("recompute is not valid; expected none|selective|full or {stages: [{none: N, selective: N, "
                        "full: N}, ...]} with one entry per virtual stage")
    plan = []
    for i, entry in enumerate(stages):
        if not isinstance(entry, dict):
            raise SpecError(f"recompute.stages[{i}] must be a mapping of none/selective/full layer counts")
        counts = {k: v for k, v in entry.items() if k not in ("stage", "layers")}
        stage = from_mapping(StageRecompute, counts, f"recompute.stages[{i}].")
        if "layers" in entry and entry["layers"] != stage.layers:
            raise SpecError(f"recompute.stages[{i}]: layers={show(entry['layers'])} but none+selective+full = "
                            f"{stage.layers}")
        plan.append(stage)
    return RecomputePlan(mode="per-stage", stages=tuple(plan))


def build_strategy(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, values: dict[str, Any]) -> Strategy:
    """A checked Strategy from parsed keys: tp, pp, cp, ep, etp, vpp, mbs default to 1 and zero to 1; dp is the rest
    of the GPUs, mbn the rest of the global batch; schedule is interleaved when vpp > 1."""
    from .space import check_strategy

    v = dict(values)
    for key in ("tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "zero"):
        v.setdefault(key, 1)
    n, tp = cluster.count, v["tp"]
    if model.heads % tp or model.num_kv_heads % tp:
        valid = [d for d in divisors(model.heads) if model.num_kv_heads % d == 0 and n % d == 0]
        raise SpecError(f"tp={tp} is not valid: must divide {model.heads} attention heads and {model.num_kv_heads} KV "
                        f"heads (and --gpus {n}); valid tp: {', '.join(map(str, valid))}")
    if v["vpp"] > 1 and v["pp"] == 1:
        raise SpecError(f"vpp={v['vpp']} is not valid: interleaving (vpp > 1) needs pp > 1")
    if "dp" in v and v["dp"] * v["tp"] * v["pp"] * v["cp"] != n:
        raise SpecError(f"dp*tp*pp*cp = {v['dp'] * v['tp'] * v['pp'] * v['cp']} is not valid: must equal --gpus {n} "
                        f"(dp={v['dp']}, tp={v['tp']}, pp={v['pp']}, cp={v['cp']}); omit dp to derive it")
    if "dp" not in v:
        model_parallel = v["tp"] * v["pp"] * v["cp"]
        if n % model_parallel:
            raise SpecError(f"tp*pp*cp = {model_parallel} (tp={v['tp']}, pp={v['pp']}, cp={v['cp']}) does not divide "
                            f"--gpus {n}, so dp cannot take the rest; valid tp*pp*cp: "
                            f"{', '.join(map(str, divisors(n)))}")
        v["dp"] = n // model_parallel
    if "mbn" not in v:
        per_microbatch = v["dp"] * v["mbs"]
        if run.global_batch % per_microbatch:
            valid_mbs = [d for d in divisors(run.global_batch) if (run.global_batch // d) % v["dp"] == 0]
            raise SpecError(f"mbs={v['mbs']} is not valid: dp*mbs = {per_microbatch} (dp={v['dp']}) does not divide "
                            f"the global batch {run.global_batch}, so mbn cannot take the rest; valid mbs: "
                            f"{', '.join(map(str, valid_mbs)) or 'none (dp does not divide the global batch)'}")
        v["mbn"] = run.global_batch // per_microbatch
    v.setdefault("schedule", "interleaved" if v["vpp"] > 1 else "1f1b")
    v["recompute"] = _recompute_plan(v.get("recompute", "none"))
    if "layers_per_stage" in v:
        v["layers_per_stage"] = tuple(v["layers_per_stage"])
    strategy = Strategy(**v)
    check_strategy(model, cluster, run, strategy)
    if not strategy.recompute.is_uniform:
        from .estimate.layout import partition

        for i, (stage, layers) in enumerate(zip(strategy.recompute.stages, partition(model, strategy))):
            if stage.layers != layers:
                raise SpecError(f"recompute.stages[{i}] covers {stage.layers} layers but virtual stage {i} holds "
                                f"{layers}; the counts must add up to each stage's layers")
    return strategy


# -- commands ----------------------------------------------------------------------------------------------------
def _subparser(subparsers, name: str, help: str, description: str, example: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help, description=description, formatter_class=_Formatter,
                                   epilog="example:\n  " + example.replace("\n", "\n  "))
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks for errors")
    return parser


ESTIMATE_EXAMPLE = ("ndcp estimate llama3-8b --device h100 --gpus 16 --global-batch 64 --seq-len 4096 \\\n"
                    "    --strategy tp=2,pp=2,mbs=1,zero=1,sp=on,recompute=selective\n"
                    "ndcp estimate gpt3-175b --device a100-80g --gpus 1024 --global-batch 1536 --seq-len 2048 \\\n"
                    "    --strategy tp=8,pp=16,mbs=1,sp=on,recompute=selective --memory-cap 75GB --json plan.json")


def register_estimate(subparsers) -> None:
    parser = _subparser(
        subparsers, "estimate", "memory and step time of one given strategy",
        "Estimate per-device memory (per pipeline stage) and step time of one parallel strategy.\n\n"
        "--strategy is comma-separated key=value over dp, tp, pp, cp, ep, etp, vpp, mbs, mbn, zero (0-3),\n"
        "sp (on/off), recompute (none|selective|full) and schedule (1f1b|interleaved). Unspecified: tp, pp, cp,\n"
        "ep, etp, vpp, mbs = 1, zero = 1, sp off, recompute none; dp = gpus / (tp*pp*cp); mbn = global batch /\n"
        "(dp*mbs); schedule interleaved when vpp > 1. --strategy-file is a YAML with the same keys plus\n"
        "`layers_per_stage: [...]` and `recompute: {stages: [{none: N, selective: N, full: N}, ...]}`;\n"
        "keys given in --strategy override the file. Exit 0 even when the strategy does not fit.",
        ESTIMATE_EXAMPLE)
    add_problem_arguments(parser)
    group = parser.add_argument_group("strategy")
    group.add_argument("--strategy", metavar="K=V,...", default="",
                       help="e.g. tp=8,pp=16,dp=8,mbs=1,vpp=1,zero=1,sp=on,recompute=selective")
    group.add_argument("--strategy-file", metavar="PLAN.yaml", help="strategy as YAML (per-stage plans allowed)")
    add_json_argument(parser)
    add_emit_arguments(parser, "the strategy")
    parser.set_defaults(func=cmd_estimate)


def _time_estimator():
    """`ndcp.estimate.time.estimate_time`, or (None, why) while it is not available."""
    try:
        from .estimate.time import estimate_time
    except ImportError as error:
        return None, f"step time not estimated: ndcp.estimate.time is not available ({error})"
    return estimate_time, None


def cmd_estimate(args: argparse.Namespace) -> int:
    from .estimate.memory import estimate_memory
    from .report.jsonout import estimate_document

    model, cluster, run = build_problem(args)
    values = load_strategy_file(args.strategy_file) if args.strategy_file else {}
    values.update(parse_strategy_string(args.strategy))
    strategy = build_strategy(model, cluster, run, values)
    memory = estimate_memory(model, cluster, run, strategy)
    estimate_time, why = _time_estimator()
    time = estimate_time(model, cluster, run, strategy) if estimate_time else None
    notes = [why] if why else []
    doc = estimate_document(model, cluster, run, strategy, memory, time, notes)
    check_emit_arguments(args, stdout_taken=getattr(args, "json", None) == "-")
    if emit_json(args, doc):
        for note in notes:
            print(f"ndcp: note: {note}", file=sys.stderr)
        if args.emit:
            write_emitted(args, model, run, strategy)
        return EXIT_OK
    from .report.terminal import render_estimate

    render_estimate(console_for(args), model, cluster, run, strategy, memory, time, notes)
    if args.emit:
        write_emitted(args, model, run, strategy)
    return EXIT_OK


def register_models(subparsers) -> None:
    parser = _subparser(subparsers, "models", "list the library models",
                        "List the models shipped with ndcp: parameters, shape, experts and source.\n"
                        "Any of these names can be passed as MODEL; so can a YAML spec or a Hugging Face config.json.",
                        "ndcp models\nndcp models --json -")
    add_json_argument(parser)
    parser.set_defaults(func=cmd_models)


def cmd_models(args: argparse.Namespace) -> int:
    from .report.jsonout import model_document
    from .specs.library import list_models

    models = list_models()
    if emit_json(args, [model_document(m) for m in models]):
        return EXIT_OK
    columns = (("name", "left"), ("params", "right"), ("active", "right"), ("layers", "right"),
               ("hidden", "right"), ("heads", "right"), ("experts", "left"))
    rows = []
    for m in models:
        experts = "-"
        if m.moe:
            experts = f"{m.moe.experts} top-{m.moe.top_k}"
            experts += f" +{m.moe.shared_experts} shared" if m.moe.shared_experts else ""
        rows.append((m.name, _billions(m.parameters), _billions(m.active_parameters), str(m.layers), str(m.hidden),
                     f"{m.heads}/{m.num_kv_heads}", experts))
    _print_listing(console_for(args), "Library models (parameters in billions; heads = attention/KV)", columns, rows,
                   [m.source for m in models])
    return EXIT_OK


def _print_listing(console, title: str, columns, rows, sources) -> None:
    """A table with a `source` column when the console is wide enough, else the sources as lines below it."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    def table(with_source: bool) -> Table:
        t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for name, justify in columns:
            t.add_column(name, justify=justify, no_wrap=name != "experts")
        if with_source:
            t.add_column("source", overflow="fold", ratio=1)
        for row, source in zip(rows, sources):
            t.add_row(*row, *((source,) if with_source else ()))
        return t

    plain = table(False)
    if console.width - console.measure(plain).maximum >= 40:
        console.print(table(True))
        return
    console.print(plain)
    for row, source in zip(rows, sources):
        console.print(Text.assemble((f"{row[0]}: ", "bold"), source or "-"))


def _billions(n: int) -> str:
    return f"{n / 1e9:.2f}" if n >= 1e8 else f"{n / 1e9:.4f}"


def _device_row(d) -> dict:
    from .report.jsonout import device_document

    return device_document(d)


def register_devices(subparsers) -> None:
    parser = _subparser(subparsers, "devices", "list the device presets",
                        "List the accelerator presets: memory, peak dense BF16 TFLOP/s, HBM bandwidth, per-device\n"
                        "intra/inter-node bandwidth (one way), devices per node and the source of each figure.",
                        "ndcp devices\nndcp devices --json -")
    add_json_argument(parser)
    parser.set_defaults(func=cmd_devices)


def cmd_devices(args: argparse.Namespace) -> int:
    devices = list(PRESETS.values())
    if emit_json(args, [_device_row(d) for d in devices]):
        return EXIT_OK
    columns = (("name", "left"), ("mem GiB", "right"), ("TFLOP/s", "right"), ("HBM TB/s", "right"),
               ("intra GB/s", "right"), ("inter GB/s", "right"), ("/node", "right"))
    rows = [(d.name, f"{d.memory_bytes / GIB:.1f}", f"{d.peak_flops / 1e12:g}", f"{d.hbm_bandwidth / 1e12:g}",
             f"{d.intra_node_bandwidth / 1e9:g}", f"{d.inter_node_bandwidth / 1e9:g}", str(d.devices_per_node))
            for d in devices]
    _print_listing(console_for(args), "Device presets (peak dense BF16; bandwidths per device, one way)", columns,
                   rows, [d.source for d in devices])
    return EXIT_OK


def register_validate(subparsers) -> None:
    parser = _subparser(subparsers, "validate", "compare estimates with measured runs",
                        "Estimate every run in a file of measured training runs (YAML or CSV) and report how far the\n"
                        "memory and step-time estimates are from the measurements.",
                        "ndcp validate runs.yaml\nndcp validate runs.csv --json report.json")
    parser.add_argument("runs", metavar="RUNS.yaml|RUNS.csv", help="measured runs")
    add_json_argument(parser)
    parser.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        from .report.validation import render_validation
        from .validation import validate_file
    except ImportError as error:
        raise InternalError(f"validate is not available in this build ({error})") from error
    result = validate_file(args.runs)
    if emit_json(args, result.as_dict()):
        return EXIT_OK
    render_validation(result, console_for(args))
    return EXIT_OK


SEARCH_EXAMPLE = ("ndcp search llama3-70b --device h100 --gpus 1024 --global-batch 1024 --seq-len 8192 \\\n"
                  "    --memory-cap 75GiB --top 10\n"
                  "ndcp search tiny --device h100 --gpus 8 --global-batch 32 --seq-len 1024 --fix tp=2 --json -")
def _search_keys() -> tuple[str, ...]:
    from .space import DIMENSIONS

    return DIMENSIONS + ("sp",)


def parse_degree_bounds(option: str, text: str) -> tuple[tuple[str, int], ...]:
    """`--fix tp=8,pp=16` / `--max tp=8` -> ((name, value), ...) over the space dimensions and sp (on/off = 1/0)."""
    keys = _search_keys()
    out: dict[str, int] = {}
    for item in str(text or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().lower().replace("-", "_"), value.strip()
        if not sep or not value:
            raise SpecError(f"{option}: {item!r} is not key=value; valid keys: {', '.join(keys)}")
        if key not in keys:
            raise SpecError(f"{option}: unknown key {key!r}; valid keys: {', '.join(keys)}")
        if key in out:
            raise SpecError(f"{option}: {key} is given twice")
        if key == "sp":
            word = value.lower()
            if word not in _TRUE + _FALSE:
                raise SpecError(f"{option}: sp={value!r} is not valid; valid: on, off")
            out[key] = int(word in _TRUE)
            continue
        try:
            number = int(value)
        except ValueError:
            raise SpecError(f"{option}: {key}={value!r} is not valid; expected an integer") from None
        if key == "zero" and not 0 <= number <= 3:
            raise SpecError(f"{option}: zero={number} is not valid; valid: 0, 1, 2, 3")
        if key != "zero" and number < 1:
            raise SpecError(f"{option}: {key}={number} is not valid; expected an integer >= 1")
        out[key] = number
    return tuple(out.items())


def _zero_stages(text: str) -> tuple[int, ...]:
    stages = set()
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        if item not in ("0", "1", "2", "3"):
            raise argparse.ArgumentTypeError(f"invalid ZeRO stage {item!r}: valid stages 0, 1, 2, 3 (e.g. 0,1,2,3)")
        stages.add(int(item))
    if not stages:
        raise argparse.ArgumentTypeError("no ZeRO stage given: valid stages 0, 1, 2, 3 (e.g. 0,1,2,3)")
    return tuple(sorted(stages))


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a positive number of seconds") from None
    if not (value > 0 and value < 1e7):
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a positive number of seconds")
    return value


def _int(text: str) -> int:
    """A 32-bit integer (CP-SAT seeds are int32; larger values are never meaningful here)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected an integer") from None
    if not -(2**31) <= value < 2**31:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a 32-bit integer")
    return value


MAX_WORKERS = 256


def _workers(text: str) -> int:
    """CP-SAT search workers: 1..256 (CP-SAT starts one thread per worker)."""
    value = _positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected at most {MAX_WORKERS} workers")
    return value


def register_search(subparsers) -> None:
    parser = _subparser(
        subparsers, "search", "the fastest strategy that fits, with a proof",
        "Search the parallel strategies (tp, pp, cp, dp, ep, etp, vpp, mbs, mbn, ZeRO, SP, recompute) for the\n"
        "fastest step time that fits in memory. CP-SAT solves a relaxation and verifies its best points with the\n"
        "full estimators until no unverified strategy can enter the top K (status `optimal`); at the time limit\n"
        "it reports the best verified strategies with the proven bound and the gap (status `feasible`).\n"
        "--exhaustive prices every valid strategy instead (the reference oracle).\n\n"
        "--fix and --max take comma-separated key=value over tp, pp, cp, dp, ep, etp, vpp, mbs, mbn, zero, sp.\n"
        "Exit 0 when a strategy is found, 1 when none fits (the reason is printed), 2 for usage errors.",
        SEARCH_EXAMPLE)
    add_problem_arguments(parser)
    group = parser.add_argument_group("search space")
    group.add_argument("--fix", metavar="K=V,...", default="", help="pin dimensions, e.g. tp=8,pp=16")
    group.add_argument("--max", metavar="K=V,...", default="", dest="max_", help="bound dimensions, e.g. tp=8")
    group.add_argument("--recompute", choices=("uniform", "per-layer", "greedy", "none", "selective", "full"),
                       default="per-layer",
                       help="activation recompute: `per-layer` (default) decides per stage how many layers keep, "
                            "selectively or fully recompute activations, jointly with the degrees (never slower than "
                            "uniform); `uniform` searches none/selective/full applied to every layer (faster); "
                            "`greedy` gives every candidate the reference planner's greedy per-stage plan "
                            "(status `heuristic`: no proof, for comparison); or one mode for every layer")
    group.add_argument("--max-offset", metavar="N", type=_int, default=0,
                       help="per-layer: layers a stage may hold above or below the even partition (default 0: the "
                            "even partition; each unit widens the plan models and slows the proof)")
    group.add_argument("--zero", metavar="STAGES", type=_zero_stages, default=(0, 1, 2, 3),
                       help="ZeRO stages to search (default 0,1,2,3)")
    group.add_argument("--sp", choices=("on", "off", "both"), default="both",
                       help="sequence parallelism (only with tp > 1; default both)")
    group.add_argument("--tp-cp-bound", metavar="N", type=_positive_int, default=0,
                       help="bound tp x cp (default: tp within a node, cp unbounded)")
    group = parser.add_argument_group("solver")
    group.add_argument("--top", metavar="K", type=_positive_int, default=10, help="strategies to rank (default 10)")
    group.add_argument("--exhaustive", action="store_true", help="price every valid strategy (no solver)")
    group.add_argument("--time-limit", metavar="SECONDS", type=_positive_float, default=60.0,
                       help="CP-SAT time limit (default 60)")
    group.add_argument("--workers", metavar="N", type=_workers, default=1,
                       help="CP-SAT search workers (default 1: deterministic)")
    group.add_argument("--seed", metavar="S", type=_int, default=0, help="CP-SAT random seed (default 0)")
    group = parser.add_argument_group("output")
    add_json_argument(parser)
    group.add_argument("--csv", metavar="PATH|-", help="also write the ranked strategies as CSV; `-` writes only the "
                                                       "CSV to stdout")
    group.add_argument("--quiet", "-q", action="store_true", help="print only the one-line result")
    add_emit_arguments(group, "the winner")
    group.add_argument("--plot", metavar="PATH", help="plot the ranking and the winner's memory (.png or .svg; needs "
                                                      "matplotlib)")
    parser.set_defaults(func=cmd_search)


def build_space_options(args: argparse.Namespace):
    """SpaceOptions from the search arguments. Raises SpecError for contradictions."""
    from .space import SpaceOptions
    from .specs.strategy import RECOMPUTE_MODES as modes

    fix = parse_degree_bounds("--fix", args.fix)
    bounds = parse_degree_bounds("--max", args.max_)
    fixed = dict(fix)
    if "zero" in fixed and fixed["zero"] not in args.zero:
        raise SpecError(f"--fix zero={fixed['zero']} is not among the searched stages --zero "
                        f"{','.join(map(str, args.zero))}")
    sp_choices = {"on": (True,), "off": (False,), "both": (False, True)}[args.sp]
    if "sp" in fixed and bool(fixed["sp"]) not in sp_choices:
        raise SpecError(f"--fix sp={'on' if fixed['sp'] else 'off'} contradicts --sp {args.sp}")
    recompute = modes if args.recompute in ("uniform", "per-layer", "greedy") else (args.recompute,)
    return SpaceOptions(fix=fix, max=bounds, recompute_modes=recompute, zero_stages=tuple(args.zero),
                        sp_choices=sp_choices, tp_cp_bound=args.tp_cp_bound)


class _SearchProgress:
    """The `progress` callback: a rich live status line on a terminal, plain lines at most every ~2 s otherwise."""

    INTERVAL = 2.0

    def __init__(self, enabled: bool, method: str):
        import time

        self.enabled, self.method = enabled, method
        self.clock = time.perf_counter
        self.start = self.clock()
        self.last = None  # the latest Progress
        self.printed = self.start
        self.live = self.spinner = None
        self.tty = enabled and sys.stderr.isatty()

    def __enter__(self):
        if self.tty:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(self, console=Console(stderr=True), refresh_per_second=8, transient=True)
            self.live.start()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.stop()
        return False

    def line(self) -> str:
        """`cp-sat 1.2 s | incumbent | bound | gap | done | phase`: the numbers first, so a narrow line keeps them."""
        from .report.terminal import format_seconds

        p = self.last
        parts = [f"{self.method} {self.clock() - self.start:.1f} s"]
        if p is None:
            return " | ".join(parts + ["solving"])
        parts.append(f"incumbent {format_seconds(p.incumbent_seconds)}")
        if p.lower_bound_seconds is not None:
            parts.append(f"bound {format_seconds(p.lower_bound_seconds)}")
        if p.gap is not None:
            parts.append(f"gap {100 * p.gap:.2f} %")
        if p.total:
            parts.append(f"{p.done:,}/{p.total:,} priced")
        elif p.done:
            parts.append(f"{p.done:,} verified")
        parts.append(p.phase)
        return " | ".join(parts)

    def __rich__(self):
        from rich.spinner import Spinner
        from rich.text import Text

        if self.spinner is None:
            self.spinner = Spinner("dots", style="cyan")
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        text.append_text(self.spinner.render(self.clock()))
        text.append(" " + self.line())
        return text

    def __call__(self, progress) -> None:
        if not self.enabled:
            return
        self.last = progress
        if self.tty:
            return  # the live display redraws itself
        now = self.clock()
        if now - self.printed >= self.INTERVAL:
            self.printed = now
            print(f"ndcp: {self.line()}", file=sys.stderr, flush=True)


def search_document(model, cluster, run, space, result) -> dict:
    """The `ndcp search --json` document: the estimate's model/device/gpus/run objects plus the search result."""
    from .report.jsonout import device_document, model_document, run_document

    o = space.options
    return {
        "model": model_document(model),
        "device": device_document(cluster.device),
        "gpus": cluster.count,
        "nodes": cluster.nodes,
        "run": run_document(run, cluster),
        "search": {"fix": dict(o.fix), "max": dict(o.max), "recompute_modes": list(o.recompute_modes),
                   "zero_stages": list(o.zero_stages), "sp_choices": list(o.sp_choices),
                   "tp_cp_bound": o.tp_cp_bound or None},
        **result.as_dict(),
        **({"gap": None, "lower_bound_seconds": None,
            "note": "greedy recompute plans (reference planner heuristic): not proven, no bound"}
           if result.status == "heuristic" else {}),
    }


def cmd_search(args: argparse.Namespace) -> int:
    from .solve.certificate import cpsat_search, plan_search
    from .solve.exhaustive import exhaustive_plan_search, exhaustive_search
    from .space import SearchSpace

    model, cluster, run = build_problem(args)
    space = SearchSpace(model, cluster, run, build_space_options(args))
    json_only, csv_only = getattr(args, "json", None) == "-", args.csv == "-"
    if json_only and csv_only:
        raise SpecError("--json - and --csv - both write to stdout; give one of them a file path")
    show_progress = not (json_only or csv_only or args.quiet)
    per_layer = args.recompute == "per-layer"
    if not 0 <= args.max_offset <= model.layers:
        raise SpecError(f"--max-offset={args.max_offset} is not valid; expected an integer from 0 to the "
                        f"{model.layers} layers of {model.name}")
    greedy = args.recompute == "greedy"
    if greedy and args.exhaustive:
        raise SpecError("--recompute greedy prices every candidate's greedy plan already; drop --exhaustive")
    check_emit_arguments(args, stdout_taken=json_only or csv_only)
    check_plot_path(getattr(args, "plot", None))
    with _SearchProgress(show_progress, "exhaustive" if args.exhaustive else "greedy" if greedy else "cp-sat") \
            as progress:
        if greedy:
            from .solve.greedy import greedy_search

            result = greedy_search(space, top=args.top, progress=progress, time_limit=args.time_limit)
        elif args.exhaustive and per_layer:
            result = exhaustive_plan_search(space, top=args.top, max_offset=args.max_offset, progress=progress)
        elif args.exhaustive:
            result = exhaustive_search(space, top=args.top, progress=progress)
        elif per_layer:
            result = plan_search(space, top=args.top, time_limit=args.time_limit, seed=args.seed,
                                 workers=args.workers, max_offset=args.max_offset, progress=progress)
        else:
            result = cpsat_search(space, top=args.top, time_limit=args.time_limit, seed=args.seed,
                                  workers=args.workers, progress=progress)
    found = bool(result.strategies)
    if getattr(args, "plot", None):
        write_plot(args.plot, lambda path: __import__("ndcp.report.plots", fromlist=["plot_search"]).plot_search(
            result, path))
    if found and args.emit and args.emit_file:
        write_emitted(args, model, run, result.best.strategy)
    if args.csv:
        from .report.csvout import write_ranking_csv

        write_ranking_csv(result, args.csv)
    if csv_only:
        if getattr(args, "json", None):
            emit_json(args, search_document(model, cluster, run, space, result))
        if not found:
            print(f"ndcp: {result.status}: {_one_line(result.explanation or 'no strategy found')}", file=sys.stderr)
        return EXIT_OK if found else EXIT_INFEASIBLE
    if emit_json(args, search_document(model, cluster, run, space, result)):
        if not found:
            print(f"ndcp: {result.status}: {_one_line(result.explanation or 'no strategy found')}", file=sys.stderr)
        return EXIT_OK if found else EXIT_INFEASIBLE
    from .report.search import one_line, render_search

    if args.quiet:
        print(one_line(result))
    else:
        render_search(console_for(args), model, cluster, run, space, result)
    if found and args.emit and not args.emit_file:
        write_emitted(args, model, run, result.best.strategy)
    return EXIT_OK if found else EXIT_INFEASIBLE


# -- trainer configs and plots (search, estimate, recompute) ----------------------------------------------------
EMIT_KINDS = ("megatron", "torchtitan", "mindformers")


def add_emit_arguments(parser, what: str) -> None:
    parser.add_argument("--emit", choices=EMIT_KINDS,
                        help=f"print the launch configuration of {what} for a trainer: Megatron-LM flags, a "
                             "torchtitan TOML or a MindFormers YAML")
    parser.add_argument("--emit-file", metavar="PATH", help="write the --emit configuration to PATH instead of stdout")


def check_emit_arguments(args: argparse.Namespace, stdout_taken: bool) -> None:
    emit_kind, emit_file = getattr(args, "emit", None), getattr(args, "emit_file", None)
    if emit_file and not emit_kind:
        raise SpecError("--emit-file needs --emit megatron|torchtitan|mindformers")
    if emit_kind and not emit_file and stdout_taken:
        raise SpecError("--emit writes to stdout, which --json -/--csv - already use; add --emit-file PATH")


def write_emitted(args: argparse.Namespace, model, run, strategy) -> None:
    """The --emit configuration of `strategy`, to --emit-file or stdout; notes go to stderr."""
    from .report.emit import emit

    emitted = emit(args.emit, model, run, strategy)
    if args.emit_file:
        try:
            Path(args.emit_file).expanduser().write_text(emitted.text, encoding="utf-8")
        except OSError as error:
            raise SpecError(f"--emit-file {args.emit_file}: cannot write: {error.strerror or error}") from None
        print(f"ndcp: wrote the {args.emit} configuration to {args.emit_file}", file=sys.stderr)
    else:
        sys.stdout.write(emitted.text)  # its notes are comments at the top of the text
        sys.stdout.flush()
        return
    for note in emitted.notes:
        print(f"ndcp: note: {note}", file=sys.stderr)


def check_plot_path(path: str | None) -> None:
    if path and Path(path).suffix.lower() not in (".png", ".svg"):
        raise SpecError(f"--plot {path}: the file name must end in .png or .svg")


def write_plot(path: str, draw: Callable) -> None:
    try:
        draw(path)
    except (RuntimeError, ValueError, OSError) as error:
        raise SpecError(f"--plot {path}: {_one_line(error)}") from None
    print(f"ndcp: wrote the plot to {path}", file=sys.stderr)


# -- recompute: the memory-time frontier of one strategy ---------------------------------------------------------
RECOMPUTE_EXAMPLE = ("ndcp recompute llama3-8b --device h100 --gpus 64 --global-batch 256 --seq-len 8192 \\\n"
                     "    --strategy tp=2,pp=4,mbs=2,zero=1,sp=on\n"
                     "ndcp recompute llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192 \\\n"
                     "    --caps 40GiB,50GiB,60GiB,70GiB --emit megatron --json frontier.json")


def _size_list(text: str) -> list[int]:
    sizes = [parse_size(item) for item in str(text).split(",") if item.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError(f"invalid caps {text!r}: expected e.g. 40GiB,50GiB,60GiB")
    return sizes


def register_recompute(subparsers) -> None:
    parser = _subparser(
        subparsers, "recompute", "memory-time frontier of one strategy's recompute plans",
        "For one strategy (degrees, SP and ZeRO fixed), the fastest per-stage recompute plan and layer partition\n"
        "under a sweep of memory caps, each solved exactly by CP-SAT and verified with the full estimators.\n"
        "Default caps: 12 from the least memory any plan needs up to the capacity (--memory-cap or the device).\n"
        "Without --strategy, the strategy is the best `ndcp search --recompute uniform` finds.\n"
        "Exit 0 when every cap has a plan, 1 when some cap is below the least memory, 2 for usage errors.",
        RECOMPUTE_EXAMPLE)
    add_problem_arguments(parser)
    group = parser.add_argument_group("strategy")
    group.add_argument("--strategy", metavar="K=V,...", default="",
                       help="as in `ndcp estimate` (its recompute is ignored); omitted: the best uniform search result")
    group.add_argument("--strategy-file", metavar="PLAN.yaml", help="strategy as YAML")
    group = parser.add_argument_group("frontier")
    group.add_argument("--caps", metavar="SIZE,...", type=_size_list,
                       help="memory caps to solve under, e.g. 40GiB,50GiB,60GiB (default: 12 caps, least to capacity)")
    group.add_argument("--points", metavar="N", type=_positive_int, default=12, help="default caps (default 12)")
    group.add_argument("--max-offset", metavar="N", type=_int, default=2,
                       help="layers a stage may hold above or below the even partition (default 2)")
    group.add_argument("--time-limit", metavar="SECONDS", type=_positive_float, default=10.0,
                       help="CP-SAT time limit per plan solve (default 10)")
    group.add_argument("--workers", metavar="N", type=_workers, default=1, help="CP-SAT workers (default 1)")
    group.add_argument("--seed", metavar="S", type=_int, default=0, help="CP-SAT random seed (default 0)")
    group = parser.add_argument_group("output")
    add_json_argument(group)
    group.add_argument("--csv", metavar="PATH|-", help="also write the frontier as CSV; `-` writes only the CSV")
    group.add_argument("--plot", metavar="PATH", help="plot step time vs cap (.png or .svg; needs matplotlib)")
    add_emit_arguments(group, "the fastest plan of the frontier")
    parser.set_defaults(func=cmd_recompute)


def cmd_recompute(args: argparse.Namespace) -> int:
    from .report.frontier import frontier_document, render_frontier, write_frontier_csv
    from .report.search import degrees_text
    from .solve.frontier import frontier
    from .space import SearchSpace

    model, cluster, run = build_problem(args)
    json_only, csv_only = getattr(args, "json", None) == "-", args.csv == "-"
    if json_only and csv_only:
        raise SpecError("--json - and --csv - both write to stdout; give one of them a file path")
    if not 0 <= args.max_offset <= model.layers:
        raise SpecError(f"--max-offset={args.max_offset} is not valid; expected an integer from 0 to the "
                        f"{model.layers} layers of {model.name}")
    check_emit_arguments(args, stdout_taken=json_only or csv_only)
    check_plot_path(args.plot)
    capacity = run.capacity(cluster.device.memory_bytes)
    for cap in args.caps or ():
        if cap <= 0 or cap > cluster.device.memory_bytes:
            raise SpecError(f"--caps: {_gib(cap)} is not valid; expected a size up to the {cluster.device.name} "
                            f"device memory ({_gib(cluster.device.memory_bytes)})")
    space = SearchSpace(model, cluster, run)
    if args.strategy or args.strategy_file:
        values = load_strategy_file(args.strategy_file) if args.strategy_file else {}
        values.update(parse_strategy_string(args.strategy))
        values.pop("layers_per_stage", None)
        values["recompute"] = "none"
        strategy = build_strategy(model, cluster, run, values)
    else:
        from .solve.certificate import cpsat_search

        best = cpsat_search(space, top=1, time_limit=60.0, seed=args.seed, workers=args.workers).best
        if best is None:
            print("ndcp: infeasible: no uniform-recompute strategy fits; give one with --strategy", file=sys.stderr)
            return EXIT_INFEASIBLE
        strategy = best.strategy
    result = frontier(space, strategy, caps=args.caps, max_cap=capacity, count=args.points,
                      max_offset=args.max_offset, seconds=args.time_limit, seed=args.seed, workers=args.workers)
    if args.csv:
        write_frontier_csv(model, result, args.csv)
    quiet = emit_json(args, frontier_document(model, result)) or csv_only
    if not quiet:
        render_frontier(console_for(args), model, result, degrees_text(strategy.with_(recompute=RecomputePlan())))
    if result.points and args.plot:
        from .report.plots import plot_frontier

        points = [(p.cap_bytes, p.peak_bytes, p.step_seconds) for p in result.points] + [
            (c, None, None) for c in result.infeasible_caps]
        write_plot(args.plot, lambda path: plot_frontier(points, path))
    if result.points and args.emit:
        write_emitted(args, model, run, result.points[-1].strategy)
    if result.least_bytes is None:
        print(f"ndcp: infeasible: no recompute plan of this strategy fits under {_gib(max(args.caps or [capacity]))}",
              file=sys.stderr)
        return EXIT_INFEASIBLE
    if result.infeasible_caps:
        caps = ", ".join(_gib(c) for c in result.infeasible_caps)
        print(f"ndcp: infeasible: cap {caps} is below the least memory any recompute plan of this strategy needs "
              f"({_gib(result.least_bytes)})", file=sys.stderr)
        return EXIT_INFEASIBLE
    return EXIT_OK


class InternalError(RuntimeError):
    """Something in ndcp itself went wrong (not the user's input)."""


# Registration functions, in the order `ndcp --help` lists them.
COMMANDS: list[Callable] = [register_estimate, register_search, register_recompute, register_models,
                            register_devices, register_validate]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ndcp", formatter_class=_Formatter,
                     description="Find (or check) the fastest LLM-training parallel strategy that fits in memory.",
                     epilog="examples:\n  ndcp models\n  ndcp devices\n  " + ESTIMATE_EXAMPLE.replace("\n", "\n  ")
                            + "\n\nrun `ndcp COMMAND --help` for each command's options.")
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks for errors")
    parser.add_argument("--version", action="version", version=f"ndcp {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    for register in COMMANDS:
        register(subparsers)
    return parser


def _one_line(message: Any) -> str:
    return " ".join(str(message).split()) or "unknown error"


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 1 infeasible, 2 user error, 3 internal error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        debug = debug or getattr(args, "debug", False)
        return int(args.func(args) or EXIT_OK)
    except UsageError as error:
        print(f"ndcp: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    except SpecError as error:
        if debug:
            traceback.print_exc()
        print(f"ndcp: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exit_:  # --help / --version
        code = exit_.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_USAGE)
    except KeyboardInterrupt:
        print("ndcp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as error:  # noqa: BLE001 - the last line of defence
        if debug:
            traceback.print_exc()
        what = _one_line(error) if isinstance(error, InternalError) else f"{type(error).__name__}: {_one_line(error)}"
        print(f"ndcp: internal error: {what}" + ("" if debug else " (rerun with --debug for the traceback)"),
              file=sys.stderr)
        return EXIT_INTERNAL


__all__ = ["main", "add_problem_arguments", "build_problem", "add_json_argument", "emit_json", "parse_size",
           "parse_strategy_string", "load_strategy_file", "build_strategy", "build_parser", "COMMANDS",
           "parse_degree_bounds", "build_space_options", "search_document"]
