"""What every `ndcp` command shares: exit codes and errors, argument value types, the problem arguments (model,
cluster, run) and building the problem from them, and reading a strategy from --strategy / --strategy-file."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rich.console import Console

from ..estimate.reserve import (CUBLAS_HANDLES, CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, FRAGMENTATION_FRACTION,
                                NCCL_CHANNELS, NCCL_CONNECTION_BYTES, RING_CONNECTIONS)
from ..rules import check_given_degrees, check_images, check_positions, check_strategy
from ..schedules import default_schedule
from ..specs import strategy_input
from ..specs.device import PRESETS, ClusterSpec, load_device
from ..specs.fields import SpecError
from ..specs.library import load_model
from ..specs.model import ModelSpec
from ..specs.run import (FP8_RECIPES, GRAD_SYNCS, MFU_CONVENTIONS, OPTIMIZER_STATE_DTYPES, PARAM_GATHERS, TRAINERS,
                         RunSpec)
from ..estimate.fp8 import check_fp8
from ..specs.recompute import NO_RECOMPUTE
from ..specs.strategy import Strategy
from ..specs.units import GIB, parse_length
from ..trainers import file_trainer, read_values

EXIT_OK, EXIT_INFEASIBLE, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
MAX_WORKERS = 256
# The modelled reserve, for --reserve's help: context + workspaces, and one ring communicator (estimate/reserve.py).
RESERVE_FLOOR = CUDA_CONTEXT_BYTES + CUBLAS_HANDLES * CUBLAS_WORKSPACE_BYTES
RING_GROUP = NCCL_CHANNELS * RING_CONNECTIONS * NCCL_CONNECTION_BYTES


class UsageError(Exception):
    """A command-line mistake found by argparse (unknown option, missing argument, bad value)."""


class InternalError(RuntimeError):
    """Something in ndcp itself went wrong (not the user's input)."""


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line through `main` instead of usage + exit."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(message)


class Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog):
        super().__init__(prog, max_help_position=34)


def one_line(message: Any) -> str:
    return " ".join(str(message).split()) or "unknown error"


def gib_text(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


# -- argument value types ----------------------------------------------------------------------------------------
def size_argument(text: str) -> int:
    """A size such as 70GiB (specs.strategy_input.parse_size) as an argparse type."""
    try:
        return strategy_input.parse_size(text)
    except SpecError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def length_argument(text: str) -> int:
    """A sequence length such as 4096, 8k or 1M (specs.units.parse_length) as an argparse type."""
    try:
        return parse_length(text)
    except SpecError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def size_list(text: str) -> list[int]:
    sizes = [size_argument(item) for item in str(text).split(",") if item.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError(f"invalid caps {text!r}: expected e.g. 40GiB,50GiB,60GiB")
    return sizes


def _checked_number(text: str, convert, in_range, expected: str, expected_type: str | None = None):
    """`convert(text)` as an argparse value, refused with what was expected when it does not parse or is out of
    range (`expected_type`: the message when it does not parse, if it differs)."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected {expected_type or expected}") from None
    if not in_range(value):
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected {expected}")
    return value


def positive_int(text: str) -> int:
    return _checked_number(text, int, lambda v: v >= 1, "an integer >= 1")


def headroom_fraction(text: str) -> float:
    return _checked_number(text, float, lambda v: 0 <= v < 1, "a fraction >= 0 and < 1, e.g. 0.1", "a number")


def int32(text: str) -> int:
    """A 32-bit integer (CP-SAT seeds are int32; larger values are never meaningful here)."""
    return _checked_number(text, int, lambda v: -(2**31) <= v < 2**31, "a 32-bit integer", "an integer")


def positive_seconds(text: str) -> float:
    return _checked_number(text, float, lambda v: 0 < v < 1e7, "a positive number of seconds")


def workers(text: str) -> int:
    """CP-SAT search workers: 1..256 (CP-SAT starts one thread per worker)."""
    value = positive_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected at most {MAX_WORKERS} workers")
    return value


def bandwidth(text: str) -> float:
    """GB/s (decimal) -> bytes/s."""
    try:
        value = float(str(text).lower().removesuffix("gb/s").strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid bandwidth {text!r}: expected GB/s, e.g. 450") from None
    if not (value > 0 and value < 1e9):
        raise argparse.ArgumentTypeError(f"invalid bandwidth {text!r}: expected a positive number of GB/s")
    return value * 1e9


# -- parsers and the problem arguments ---------------------------------------------------------------------------
def subparser(subparsers, name: str, help: str, description: str, example: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help, description=description, formatter_class=Formatter,
                                   epilog="example:\n  " + example.replace("\n", "\n  "))
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks for errors")
    return parser


def add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every planning command shares: the model, the cluster and the run."""
    parser.add_argument("model", metavar="MODEL",
                        help="library model name (see `ndcp models`), a model YAML spec, or a Hugging Face config.json")
    group = parser.add_argument_group("cluster")
    group.add_argument("--device", metavar="NAME|FILE", required=True,
                       help=f"device preset (see `ndcp devices`): {', '.join(PRESETS)}; or a device YAML file "
                            "(`ndcp devices --show h100` prints one to start from)")
    group.add_argument("--gpus", metavar="N", required=True, type=positive_int, help="number of devices")
    group.add_argument("--devices-per-node", metavar="N", type=positive_int,
                       help="override the preset's devices per node (scale-up domain)")
    group.add_argument("--intra-node-bandwidth", metavar="GB/s", type=bandwidth,
                       help="override the per-device intra-node bandwidth, one way, in GB/s")
    group.add_argument("--inter-node-bandwidth", metavar="GB/s", type=bandwidth,
                       help="override the per-device inter-node bandwidth, one way, in GB/s")
    group.add_argument("--device-memory", metavar="SIZE", type=size_argument,
                       help="override the device memory, e.g. 80GiB")
    group = parser.add_argument_group("run")
    group.add_argument("--global-batch", metavar="GBS", required=True, type=positive_int,
                       help="global batch in sequences per optimizer step")
    group.add_argument("--seq-len", metavar="S", required=True, type=length_argument,
                       help="sequence length in tokens: 4096, or with a suffix 8k (8,192), 128k, 1M (1,048,576)")
    group.add_argument("--memory-cap", metavar="SIZE", type=size_argument,
                       help="usable memory per device (default: all of it), with a unit: 70GiB, 75GB, 80000MiB")
    group.add_argument("--reserve", metavar="SIZE", type=size_argument,
                       help="a measured reserve per device (e.g. nvidia-smi's usage minus torch.cuda."
                            "max_memory_reserved) that replaces the modelled CUDA context, cuBLAS workspaces and NCCL "
                            f"buffers (default: modelled, {RESERVE_FLOOR / GIB:.2f} GiB + {RING_GROUP / GIB:.2f} GiB "
                            f"per process group); allocator fragmentation ({FRAGMENTATION_FRACTION * 100:.0f}%% of the "
                            "activations) is added either way")
    group.add_argument("--headroom", metavar="FRACTION", type=headroom_fraction, default=0.0,
                       help="fraction of the capacity to keep free, 0 <= f < 1: plans may use capacity x (1 - f) "
                            "(default 0)")
    group.add_argument("--precision", choices=("bf16", "fp16", "fp8"), default="bf16",
                       help="parameter and activation dtype (default bf16); fp8: linear-layer GEMMs in FP8 as "
                            "Transformer Engine runs them, BF16 parameters and everything else (devices with FP8)")
    group.add_argument("--fp8-recipe", choices=FP8_RECIPES, default=None,
                       help="FP8 scaling recipe with --precision fp8 (default delayed): delayed, tensorwise, blockwise "
                            "or mxfp8 (Blackwell only)")
    group.add_argument("--optimizer-state-dtype", choices=OPTIMIZER_STATE_DTYPES, default="fp32",
                       help="dtype of Adam's two moments (default fp32; bf16: Megatron's precision-aware optimizer, "
                            "fp32 master weights kept)")
    group.add_argument("--activation-func-fp8-input-store", action="store_true",
                       help="keep the MLP activation's input (SwiGLU's gate and up) in FP8 for backward, as "
                            "Megatron's flag of that name and DeepSeek-V3 do")
    group.add_argument("--grad-dtype", choices=("fp32", "bf16"), default="fp32",
                       help="gradient buffer dtype (default fp32)")
    group.add_argument("--no-flash-attention", dest="flash_attention", action="store_false",
                       help="materialise the attention scores (no FlashAttention)")
    group.add_argument("--trainer", choices=TRAINERS, default=None,
                       help="whose memory behaviour to model (default megatron: Megatron-Core + Transformer Engine, "
                            "or the trainer of --strategy-from's file; torchtitan: FSDP2 states, op-level selective "
                            "AC, eager autograd; mindformers: Megatron's memory behaviour, not verified, and its "
                            "recompute options: none, select_recompute (mlp_act), full)")
    group.add_argument("--grad-sync", choices=GRAD_SYNCS, default="trainer",
                       help="when gradients are reduced over data-parallel ranks: microbatch (after every "
                            "micro-batch's backward; ZeRO-2/3 reduce-scatter straight into the shard), step (accumulated "
                            "in a full gradient buffer, reduced once per step; with ZeRO-2/3 that buffer costs memory) "
                            "or trainer (default: its own, e.g. Megatron once per step for ZeRO-0/1, every "
                            "micro-batch for ZeRO-2/3)")
    group.add_argument("--param-gather", choices=PARAM_GATHERS, default="trainer",
                       help="ZeRO-3 parameter all-gathers: forward-backward (for every micro-batch's forward and again "
                            "for its backward), microbatch (kept gathered from forward to backward), step (kept "
                            "gathered over the step; the last two hold the stage's parameters unsharded) or trainer "
                            "(default: forward-backward; torchtitan with PP: step)")
    group.add_argument("--overlap", metavar="WHAT", default="trainer",
                       help="communication overlapped with compute: trainer (default: the trainer's defaults, e.g. "
                            "Megatron overlaps pipeline sends under interleaving), none, or a '+'-joined subset of "
                            "ep (MoE all-to-all with another micro-batch's compute), tp (TP collectives with their "
                            "GEMMs, needs sp), p2p (pipeline sends)")
    group.add_argument("--mfu-convention", choices=MFU_CONVENTIONS, default="causal",
                       help="how MFU counts causal attention (default causal: the unmasked half, as Megatron-LM "
                            "since core_r0.12; full: the whole score matrix, as PaLM and torchtitan). HFU always "
                            "counts what runs")
    group.add_argument("--images-per-sample", metavar="N", type=positive_int, default=0,
                       help="images per sequence through a vision-language model's encoder, priced on the first "
                            "pipeline stage; their tokens are part of --seq-len (default: none)")
    group.add_argument("--image-size", metavar="PIXELS", type=positive_int, default=0,
                       help="image side in pixels with --images-per-sample (default: the encoder's own; needed for "
                            "any-resolution encoders such as Qwen2-VL's)")


def build_problem(args: argparse.Namespace) -> tuple[ModelSpec, ClusterSpec, RunSpec]:
    """The model, cluster (preset + overrides) and run the shared arguments describe. Raises SpecError."""
    model = load_model(args.model)
    cluster = ClusterSpec(load_device(args.device), args.gpus).with_overrides(
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
            raise SpecError(f"--memory-cap={gib_text(cap)} exceeds the {cluster.device.name} device memory "
                            f"({gib_text(memory)}); lower the cap or override --device-memory")
    run = RunSpec(global_batch=args.global_batch, seq_len=args.seq_len, precision=args.precision,
                  grad_dtype=args.grad_dtype, flash_attention=args.flash_attention,
                  memory_cap_bytes=cap or 0, reserve_bytes=args.reserve, headroom_fraction=args.headroom,
                  trainer=args.trainer or file_trainer(getattr(args, "strategy_from", None)) or "megatron",
                  grad_sync=args.grad_sync, param_gather=args.param_gather,
                  mfu_convention=args.mfu_convention, fp8_recipe=args.fp8_recipe or "delayed",
                  optimizer_state_dtype=args.optimizer_state_dtype,
                  activation_func_fp8_input_store=args.activation_func_fp8_input_store,
                  overlap=str(args.overlap).strip().lower(),
                  images_per_sample=args.images_per_sample, image_size=args.image_size)
    if args.fp8_recipe is not None and not run.fp8:
        raise SpecError(f"--fp8-recipe={args.fp8_recipe} needs --precision fp8 (got --precision {args.precision})")
    check_fp8(run, cluster.device)
    check_positions(model, run)
    check_images(model, run)
    capacity = run.capacity(memory)
    if args.reserve is not None and args.reserve >= capacity:
        raise SpecError(f"--reserve={gib_text(args.reserve)} leaves no memory: the capacity per device is "
                        f"{gib_text(capacity)}")
    return model, cluster, run


def add_quiet_argument(group) -> None:
    """--quiet / -q, on every command: only the one-line result (a list command: only the names)."""
    group.add_argument("--quiet", "-q", action="store_true", help="print only the one-line result")


def add_max_offset_argument(group) -> None:
    """--max-offset, one default for search and recompute: 0, the even partition trainers run without an explicit
    layout, which also keeps the plan models small (each unit widens them and slows the proof)."""
    group.add_argument("--max-offset", metavar="N", type=int32, default=0,
                       help="per-layer plans: layers a stage may hold above or below the even partition (default 0: "
                            "the even partition; each unit widens the plan models and slows the proof)")


def check_max_offset(max_offset: int, model: ModelSpec) -> None:
    if not 0 <= max_offset <= model.layers:
        raise SpecError(f"--max-offset={max_offset} is not valid; expected an integer from 0 to the "
                        f"{model.layers} layers of {model.name}")


class _Console(Console):
    """rich's console, but a reader that stops early (`ndcp models | head -3`) ends the command as main() ends any
    closed pipe, exit 0: rich's own ends it with exit 1, ndcp's code for an infeasible search."""

    def on_broken_pipe(self) -> None:
        # stdout to /dev/null first, so nothing fails again writing at exit (Python's signal docs, "Note on SIGPIPE")
        self.quiet = True
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise BrokenPipeError


def console() -> Console:
    """The console for human-readable output (stdout)."""
    return _Console(highlight=False)


# -- strategies --------------------------------------------------------------------------------------------------
def add_strategy_arguments(parser: argparse.ArgumentParser, strategy_help: str, file_help: str) -> None:
    """--strategy K=V,... and --strategy-file PLAN.yaml (read by strategy_values)."""
    group = parser.add_argument_group("strategy")
    group.add_argument("--strategy", metavar="K=V,...", default="", help=strategy_help)
    group.add_argument("--strategy-file", metavar="PLAN.yaml", help=file_help)


def add_strategy_from_argument(parser, what: str) -> None:
    """--strategy-from FILE: a trainer's launch configuration read as a strategy (ndcp.trainers)."""
    parser.add_argument("--strategy-from", metavar="FILE",
                        help=f"{what} from a trainer configuration: Megatron-LM arguments (a launch script), torchtitan "
                             "arguments (--module/--config ...) or a MindFormers YAML, as --emit writes them")


def strategy_values(args: argparse.Namespace, model: ModelSpec | None = None, run: RunSpec | None = None
                    ) -> dict[str, Any]:
    """--strategy-file's keys, then --strategy-from's (needs the model and run), overridden by --strategy's."""
    values = strategy_input.load_strategy_file(args.strategy_file) if args.strategy_file else {}
    if getattr(args, "strategy_from", None):
        values.update(read_values(args.strategy_from, model, run))
    values.update(strategy_input.parse_strategy_string(args.strategy))
    return values


def pinned_by_file(args: argparse.Namespace, model: ModelSpec, run: RunSpec) -> str:
    """The --fix items a --strategy-from file pins for a search (its degrees, batch split and ZeRO stage; its SP
    through --sp), less those --fix names itself; its recompute plan and layout are the search's to choose."""
    if not getattr(args, "strategy_from", None):
        return args.fix
    given = {item.partition("=")[0].strip().lower() for item in str(args.fix or "").split(",") if item.strip()}
    values = read_values(args.strategy_from, model, run)
    if "sp" not in given and getattr(args, "sp", "both") == "both":
        args.sp = "on" if values.get("sp") else "off"  # --sp, as --fix takes sp=on only
    pins = [f"{k}={values[k]}" for k in ("tp", "pp", "cp", "dp", "ep", "etp", "vpp", "mbs", "mbn", "zero")
            if k in values and k not in given]
    return ",".join([args.fix] * bool(args.fix) + pins)


def build_strategy(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, values: dict[str, Any]) -> Strategy:
    """A checked Strategy from parsed keys: tp, pp, cp, ep, etp, vpp, mbs default to 1 and zero to 1; dp is the rest
    of the GPUs, mbn the rest of the global batch; the schedule is the default for vpp. Every rule is the
    rulebook's (ndcp.rules), so estimate accepts exactly what the search walks."""
    v = dict(values)
    precision, recipe = v.pop("precision", None), v.pop("fp8_recipe", None)  # run settings: must match the run
    if precision is not None and precision != run.precision:
        raise SpecError(f"strategy precision={precision} does not match the run's --precision {run.precision}; "
                        f"set --precision {precision}")
    if recipe is not None and (not run.fp8 or recipe != run.fp8_recipe):
        raise SpecError(f"strategy fp8_recipe={recipe} does not match the run (--precision {run.precision}"
                        + (f", --fp8-recipe {run.fp8_recipe}" if run.fp8 else "") + f"); set --precision fp8 "
                        f"--fp8-recipe {recipe}")
    v.setdefault("pp", 1)
    strategy_input.resolve_layout(v, model.layers, model.mtp_depth)  # layout= / first/last stage layers
    strategy_input.resolve_recompute_modules(v)
    for key in strategy_input.DEFAULT_ONE:
        v.setdefault(key, 1)
    check_given_degrees(model, cluster, run, v)
    strategy_input.derive_batch_split(cluster, run, v)
    v.setdefault("schedule", default_schedule(v["vpp"]))
    v["recompute"] = strategy_input.recompute_plan(v.get("recompute", NO_RECOMPUTE))
    if "layers_per_stage" in v:
        v["layers_per_stage"] = tuple(v["layers_per_stage"])
    strategy = Strategy(**v)
    check_strategy(model, cluster, run, strategy)
    return strategy


__all__ = ["EXIT_OK", "EXIT_INFEASIBLE", "EXIT_USAGE", "EXIT_INTERNAL", "UsageError", "InternalError", "Parser",
           "Formatter", "subparser", "add_problem_arguments", "build_problem", "build_strategy", "strategy_values",
           "add_strategy_from_argument", "pinned_by_file",
           "console", "one_line", "gib_text", "add_max_offset_argument", "length_argument",
           "add_quiet_argument"]
