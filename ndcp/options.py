"""The options of the planning commands, one table read by the command line (its flags and their help) and by the
Python API (its keywords): the cluster, the run, the search space, the solver and the strategy.

An option's keyword in the API is its flag without the dashes, `-` written `_` (--memory-cap: memory_cap); its
value is what the flag takes, as text ("40GiB", "tp=8,pp=2") or a Python value written the same way (`flag_text`:
64, (0, 1), {"tp": 8}, True for on), read by the same function and refused with the same message as on the command
line. The run options are one per RunSpec field (`RUN_OPTIONS`; `optimizer` has none: adam is the only one), each
field's docstring its help (specs.fields.field_docs), so a field cannot be missing from the help, the API or
`policy.build_problem`, which builds the RunSpec from these options.
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .estimate.reserve import (CUBLAS_HANDLES, CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, FRAGMENTATION_FRACTION,
                               NCCL_CHANNELS, NCCL_CONNECTION_BYTES, RING_CONNECTIONS)
from .schedules import SCHEDULES
from .space import DEFAULT_SCHEDULES
from .specs.device import PRESETS
from .specs.trainer_behaviour import LOSS_KERNELS
from .specs.fields import SpecError, field_docs, near_key
from .specs.run import (ATTENTION_KERNELS, FP8_RECIPES, FSDP_VERSIONS, GRAD_SYNCS, MAX_LOAD_IMBALANCE,
                        MFU_CONVENTIONS, MOE_DISPATCHERS, OPTIMIZER_STATE_DTYPES, PARAM_GATHERS, QKV_PROJECTIONS,
                        TRAINERS, RunSpec)
from .specs.strategy import CP_COMM_TYPES, RECOMPUTE_MODES
from .specs.units import GIB, parse_length, parse_size

MAX_WORKERS = 256
ON_OFF = ("off", "on", "both")  # a setting searched off, on, or both (--optimizer-offload, --hsdp)
# The modelled reserve, for --reserve's help: context + workspaces, and one ring communicator (estimate/reserve.py).
RESERVE_FLOOR = CUDA_CONTEXT_BYTES + CUBLAS_HANDLES * CUBLAS_WORKSPACE_BYTES
RING_GROUP = NCCL_CHANNELS * RING_CONNECTIONS * NCCL_CONNECTION_BYTES


# -- value types (argparse `type`s; the API reads its keywords with them too) ------------------------------------
def size_argument(text: str) -> int:
    """A size such as 70GiB (specs.units.parse_size) as an argparse type."""
    try:
        return parse_size(text)
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


def _fraction(text: str, what: str, example: str) -> float:
    """A fraction in [0, 1); refused with the range whatever was wrong, and a percentage (10%) with its fraction."""
    percent = str(text).strip().removesuffix("%")
    hint = ""
    if percent != str(text).strip():
        try:
            hint = f" ({text} is {float(percent) / 100:g})"
        except ValueError:
            pass
    return _checked_number(text, float, lambda v: 0 <= v < 1, f"{what} >= 0 and < 1, e.g. {example}{hint}")


def headroom_fraction(text: str) -> float:
    return _fraction(text, "a fraction", "0.1")


def confidence(text: str) -> float:
    return _fraction(text, "a confidence", "0.9")


def load_imbalance(text: str) -> float:
    return _checked_number(text, float, lambda v: 1 <= v <= MAX_LOAD_IMBALANCE,
                           f"a factor from 1 to {MAX_LOAD_IMBALANCE:g}, e.g. 1.2", "a number")


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


def zero_stages(text: str) -> tuple[int, ...]:
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


def _all_or_list(text: str, valid: tuple[str, ...]) -> tuple[str, ...]:
    """"all" (every one of `valid`) or a comma-separated list of some of them, each once, in the order given."""
    if text.strip().lower() == "all":
        return tuple(valid)
    names = tuple(dict.fromkeys(t.strip().lower() for t in text.split(",") if t.strip()))
    if not names or any(t not in valid for t in names):
        raise argparse.ArgumentTypeError(f"{text!r}: expected all or a comma-separated list of {', '.join(valid)}")
    return names


def size_text(value: int) -> str:
    """A size in bytes as size_argument reads it back: in GiB when whole, else in bytes."""
    return f"{value // GIB}GiB" if value % GIB == 0 else f"{value}B"


def bandwidth_text(value: float) -> str:
    """Bytes/s as `bandwidth` reads it back (GB/s)."""
    return f"{value / 1e9!r}"


# The text a parsed value is written as where it is not its flag_text: the inverse of its parse.
TEXT_OF: dict[Callable, Callable[[Any], str]] = {size_argument: size_text, bandwidth: bandwidth_text}


def schedule_names(text: str) -> tuple[str, ...]:
    """--schedules: "all" or a comma-separated list of registered schedules (ndcp/schedules)."""
    return _all_or_list(text, tuple(SCHEDULES))


def cp_comm_types(text: str) -> tuple[str, ...]:
    """--cp-comm: "all" or a comma-separated list of CP communication types."""
    return _all_or_list(text, CP_COMM_TYPES)


# -- options -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One option: its flag, its help, how its text is read and its default."""

    flag: str
    """the command-line flag, e.g. --memory-cap; the API's keyword is its name with `_` (memory_cap)"""
    help: str
    """the flag's help (plain text: `%` is escaped for argparse by add_to)"""
    parse: Callable[[str], Any] | None = None
    """text -> value (argparse's `type`), raising argparse.ArgumentTypeError; None: the text itself"""
    default: Any = None
    """the value when the option is not given"""
    choices: tuple | None = None
    """the values allowed (after parse)"""
    metavar: str | None = None
    """the value's name in the usage line (default: the choices)"""
    switch: bool | None = None
    """a flag without a value: True sets the value True (argparse's store_true), False sets it False (store_false)"""
    dest: str = ""
    """the attribute the value is stored as (default: the keyword)"""
    required: bool = False
    """the command line needs it (the API takes it as a named parameter)"""
    field: str = ""
    """the RunSpec field it gives (run options)"""

    @property
    def keyword(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def name(self) -> str:
        return self.dest or self.keyword

    @property
    def unset(self) -> Any:
        """The value when the option is not given (a switch: the opposite of what it sets)."""
        return (not self.switch) if self.switch is not None else self.default

    def add_to(self, group) -> None:
        """Add the flag to an argparse parser or group."""
        if self.switch is not None:
            group.add_argument(self.flag, dest=self.name, action="store_true" if self.switch else "store_false",
                               help=self.help.replace("%", "%%"))
            return
        extra = {"metavar": self.metavar} if self.metavar else {}
        group.add_argument(self.flag, dest=self.name, type=self.parse, default=self.default, choices=self.choices,
                           required=self.required, help=self.help.replace("%", "%%"), **extra)

    def text(self, value: Any) -> str:
        """A value as this flag's text (what `parse` reads back to the value)."""
        return TEXT_OF.get(self.parse, flag_text)(value)

    def read(self, value: Any) -> Any:
        """An API keyword's value as the flag sets it: read by `parse` and checked against the choices, refused
        (SpecError) with argparse's message for the flag."""
        if self.switch is not None:
            if not isinstance(value, bool):
                raise SpecError(f"argument {self.flag}: expected True or False, got {value!r}")
            return value if self.switch else not value
        text = flag_text(value)
        try:
            parsed = self.parse(text) if self.parse else text
        except argparse.ArgumentTypeError as error:
            raise SpecError(f"argument {self.flag}: {error}") from None
        if self.choices is not None and parsed not in self.choices:
            raise SpecError(f"argument {self.flag}: invalid choice: {parsed!r} (choose from "
                            f"{', '.join(map(repr, self.choices))})")
        return parsed


def flag_text(value: Any) -> str:
    """A Python value written as a flag's text: a string as it is, True/False as on/off, a mapping as
    key=value,..., a list or tuple comma-separated, a number as str() writes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, Mapping):
        return ",".join(f"{key}={flag_text(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(flag_text(item) for item in value)
    return str(value)


def keyword_values(options: Iterable[Option], given: Mapping[str, Any]) -> argparse.Namespace:
    """The values `options` take from API keywords (None: not given), as the command line's parser would set them.
    An unknown keyword is a SpecError naming the valid ones."""
    by_keyword = {option.keyword: option for option in options}
    unknown = [keyword for keyword in given if keyword not in by_keyword]
    if unknown:
        raise SpecError(f"unknown option {unknown[0]!r}{near_key(unknown[0], by_keyword)}; valid options: "
                        f"{', '.join(sorted(by_keyword))}")
    values = argparse.Namespace(**{option.name: option.unset for option in by_keyword.values()})
    for keyword, value in given.items():
        if value is not None:
            setattr(values, by_keyword[keyword].name, by_keyword[keyword].read(value))
    return values


def stated_words(values: argparse.Namespace, options: Iterable[Option]) -> list[str]:
    """The command-line words that set `values` of `options`: each option whose value is not its unset one, as its
    flag (a switch) or its flag and text. Parsed again by the same options, they give the same values."""
    words: list[str] = []
    for option in options:
        value = getattr(values, option.name, option.unset)
        if value is None or value == option.unset:
            continue
        words += [option.flag] if option.switch is not None else [option.flag, option.text(value)]
    return words


def add_options(group, options: Iterable[Option]) -> None:
    for option in options:
        option.add_to(group)


CLUSTER_OPTIONS = (
    Option("--device", f"device preset (see `ndcp devices`): {', '.join(PRESETS)}; or a device YAML file (`ndcp "
                       "devices --show h100` prints one to start from)", metavar="NAME|FILE", required=True),
    Option("--gpus", "number of devices", positive_int, metavar="N", required=True),
    Option("--devices-per-node", "override the preset's devices per node (also its scale-up domain unless the device "
           "sets devices_per_domain)", positive_int, metavar="N"),
    Option("--intra-node-bandwidth", "override the per-device scale-up bandwidth inside a domain (NVLink), one way, "
           "in GB/s", bandwidth, metavar="GB/s"),
    Option("--inter-node-bandwidth", "override the per-device scale-out bandwidth across domains (NIC), one way, in "
           "GB/s", bandwidth, metavar="GB/s"),
    Option("--device-memory", "override the device memory, e.g. 80GiB", size_argument, metavar="SIZE"),
)


def run_option(field: str, flag: str, note: str = "", **given) -> Option:
    """The option giving RunSpec's `field`: its help the field's docstring plus `note` (what the command line adds:
    the syntax of the text), its default the field's unless given."""
    default = next(f.default for f in dataclasses.fields(RunSpec) if f.name == field)
    given.setdefault("default", None if default is dataclasses.MISSING else default)
    given.setdefault("help", field_docs(RunSpec)[field] + note)
    return Option(flag, field=field, **given)


# RunSpec fields without a flag: adam is the only optimizer modelled.
NOT_ON_COMMAND_LINE = ("optimizer",)
# One per other RunSpec field, in the order `--help` lists them.
RUN_OPTIONS = (
    run_option("global_batch", "--global-batch", parse=positive_int, metavar="GBS", required=True),
    run_option("seq_len", "--seq-len", ": 4096, or with a suffix 8k (8,192), 128k, 1M (1,048,576)",
               parse=length_argument, metavar="S", required=True),
    run_option("memory_cap_bytes", "--memory-cap", ", with a unit: 70GiB, 75GB, 80000MiB", parse=size_argument,
               metavar="SIZE", default=None),
    run_option("reserve_bytes", "--reserve", f" (the modelled reserve: {RESERVE_FLOOR / GIB:.2f} GiB + "
                                             f"{RING_GROUP / GIB:.2f} GiB per process group; fragmentation: "
                                             f"{FRAGMENTATION_FRACTION * 100:.0f}% of the activations)",
               parse=size_argument, metavar="SIZE"),
    run_option("headroom_fraction", "--headroom", parse=headroom_fraction, metavar="FRACTION"),
    run_option("confidence", "--confidence", parse=confidence, metavar="C"),
    run_option("precision", "--precision", choices=("bf16", "fp16", "fp8")),
    run_option("fp8_recipe", "--fp8-recipe", choices=FP8_RECIPES, default=None),
    run_option("optimizer_state_dtype", "--optimizer-state-dtype", choices=OPTIMIZER_STATE_DTYPES),
    run_option("activation_func_fp8_input_store", "--activation-func-fp8-input-store", switch=True),
    run_option("grad_dtype", "--grad-dtype", choices=("fp32", "bf16")),
    # A switch that turns the field off: its help says what the switch does.
    run_option("flash_attention", "--no-flash-attention", switch=False,
               help="materialise the attention scores (no FlashAttention)"),
    run_option("attention_kernel", "--attention-kernel", choices=ATTENTION_KERNELS, metavar="KERNEL"),
    run_option("torch_compile", "--torch-compile", switch=True),
    run_option("compile_loss", "--compile-loss", switch=True),
    run_option("qkv_projections", "--qkv-projections", choices=QKV_PROJECTIONS),
    run_option("loss_kernel", "--loss-kernel", " (left out with --strategy-from: the file's)",
               choices=("trainer",) + LOSS_KERNELS, metavar="KERNEL"),
    run_option("disable_parameter_transpose_cache", "--disable-parameter-transpose-cache", switch=True),
    run_option("wgrad_deferral_limit", "--wgrad-deferral-limit", parse=int32, metavar="N"),
    run_option("trainer", "--trainer", ". A search returns only plans this trainer runs exactly as --emit writes "
               "them; without --trainer: --emit's trainer, else --strategy-from's, else megatron; `any`: every plan "
               "ndcp prices (priced with that default trainer's behaviour), its best plan for the default trainer "
               "beside it", choices=TRAINERS + ("any",), default=None),
    run_option("grad_sync", "--grad-sync", choices=GRAD_SYNCS),
    run_option("param_gather", "--param-gather", choices=PARAM_GATHERS, metavar="WHEN"),  # the help lists them
    run_option("fsdp_version", "--fsdp-version", choices=FSDP_VERSIONS),
    run_option("overlap", "--overlap", " (left out with --strategy-from: the file's)", metavar="WHAT",
               default=None),
    run_option("mfu_convention", "--mfu-convention", choices=MFU_CONVENTIONS),
    run_option("moe_dispatcher", "--moe-dispatcher", choices=MOE_DISPATCHERS),
    run_option("moe_load_imbalance", "--moe-load-imbalance", parse=load_imbalance, metavar="FACTOR"),
    run_option("delay_wgrad_compute", "--delay-wgrad-compute", switch=True),
    run_option("first_layers_bf16", "--first-layers-bf16", parse=int32, metavar="N"),
    run_option("last_layers_bf16", "--last-layers-bf16", parse=int32, metavar="N"),
    run_option("images_per_sample", "--images-per-sample", parse=positive_int, metavar="N"),
    run_option("image_size", "--image-size", parse=positive_int, metavar="PIXELS"),
)

# -- the search space and the solver (ndcp search) ---------------------------------------------------------------
SEARCH_MODES = ("uniform", "per-layer", "greedy", "classic")  # --recompute's search modes; the rest: one option
MAX_OFFSET = Option(
    "--max-offset", "per-layer plans: layers a stage may hold above or below the even partition (default 0: the even "
                    "partition; each unit widens the plan models and slows the proof)", int32, 0, metavar="N")
SPACE_OPTIONS = (
    Option("--fix", "pin dimensions, e.g. tp=8,pp=16 (and cp_comm=allgather: the CP communication type)", default="",
           metavar="K=V,..."),
    Option("--max", "bound dimensions, e.g. tp=8", default="", metavar="K=V,...", dest="max_"),
    Option("--recompute", "activation recompute: `per-layer` (default) decides per stage how many layers run each "
                          "recompute option -- none, selective, full and Megatron's recompute modules (layernorm, mlp, "
                          "moe_act, moe, mla_up_proj and combinations, where the model has them) -- jointly with the "
                          "degrees (never slower than uniform); `classic`: per-layer over none/selective/full only "
                          "(faster); `uniform` one option for every layer (faster still); `greedy` gives every "
                          "candidate the reference planner's greedy per-stage plan (status `heuristic`: no proof, for "
                          "comparison); or one option for every layer (e.g. full, layernorm+mlp)",
           default="per-layer", choices=SEARCH_MODES + RECOMPUTE_MODES, metavar="MODE"),
    MAX_OFFSET,
    Option("--zero", "ZeRO stages to search (default 0,1,2,3)", zero_stages, (0, 1, 2, 3), metavar="STAGES"),
    Option("--sp", "sequence parallelism (only with tp > 1; default both)", default="both",
           choices=("on", "off", "both")),
    Option("--tp-cp-bound", "bound tp x cp (default: tp within a node, cp unbounded)", positive_int, 0, metavar="N"),
    Option("--schedules", "pipeline schedules to search, jointly with everything else: all, or a comma-separated list "
                          f"of {', '.join(SCHEDULES)} (default {','.join(DEFAULT_SCHEDULES)}: what Megatron-LM and "
                          "torchtitan run out of the box)", schedule_names, DEFAULT_SCHEDULES, metavar="NAMES"),
    Option("--optimizer-offload", "optimizer states and step on the host (Megatron --optimizer-cpu-offload; ZeRO 0/1): "
                                  "off (default), on, or both searched jointly (twice the candidates)",
           default="off", choices=ON_OFF),
    Option("--hsdp", "HSDP: ZeRO-3 sharded over one scale-up domain's data-parallel ranks, replicated across domains "
                     "(torchtitan shard/replicate degrees, Megatron FSDP --num-distributed-optimizer-instances): off "
                     "(default: unvalidated, its own terms are under 1% of the measured HSDP runs' steps), on "
                     "(HSDP plans only) or both (each ZeRO-3 layout and its HSDP twin)", default="off", choices=ON_OFF),
    Option("--cp-comm", "context-parallel communication types to search when cp > 1, comma-separated from "
                        f"{', '.join(CP_COMM_TYPES)}, or all (default p2p: each extra type adds as many cp > 1 "
                        "candidates again, measured 2-3x the search time)", cp_comm_types, ("p2p",), metavar="TYPES"),
)
SOLVER_OPTIONS = (
    Option("--top", "strategies to rank (default 10)", positive_int, 10, metavar="K"),
    Option("--exhaustive", "price every valid strategy (no solver; at most 20 million)", switch=True),
    Option("--time-limit", "time limit of the search, every method (default 60); at it, the best found so far",
           positive_seconds, 60.0, metavar="SECONDS"),
    Option("--workers", "CP-SAT search workers (default 1: deterministic)", workers, 1, metavar="N"),
    Option("--seed", "CP-SAT random seed (default 0)", int32, 0, metavar="S"),
)


# -- strategies (ndcp estimate, and --strategy-from for search) ---------------------------------------------------
def strategy_from_option(what: str) -> Option:
    """--strategy-from FILE: a trainer's launch configuration read as a strategy (ndcp.trainers)."""
    return Option("--strategy-from", f"{what} from a trainer configuration: Megatron-LM arguments (a launch script), "
                                     "torchtitan arguments (--module/--config ...) or a MindFormers YAML, as --emit "
                                     "writes them", metavar="FILE")


def strategy_options(strategy_help: str, file_help: str) -> tuple[Option, Option]:
    """--strategy K=V,... and --strategy-file PLAN.yaml (read by policy.strategy_values)."""
    return (Option("--strategy", strategy_help, default="", metavar="K=V,..."),
            Option("--strategy-file", file_help, metavar="PLAN.yaml"))


SEARCH_STRATEGY_FROM = strategy_from_option("pin the degrees, batch split, ZeRO stage and SP (what --fix takes)")
ESTIMATE_STRATEGY = strategy_options("e.g. tp=8,pp=16,zero=1,sp=on,recompute=selective",
                                     "strategy as YAML (per-stage plans allowed)")
ESTIMATE_STRATEGY_FROM = strategy_from_option("the strategy")
# Every option each planning command of the API takes (ndcp.api), beside the model.
SEARCH_KEYWORDS = CLUSTER_OPTIONS + RUN_OPTIONS + SPACE_OPTIONS + SOLVER_OPTIONS + (SEARCH_STRATEGY_FROM,)
ESTIMATE_KEYWORDS = CLUSTER_OPTIONS + RUN_OPTIONS + ESTIMATE_STRATEGY + (ESTIMATE_STRATEGY_FROM,)

__all__ = ["Option", "flag_text", "keyword_values", "add_options", "run_option", "CLUSTER_OPTIONS", "RUN_OPTIONS",
           "NOT_ON_COMMAND_LINE", "SPACE_OPTIONS", "SOLVER_OPTIONS", "MAX_OFFSET", "SEARCH_KEYWORDS",
           "ESTIMATE_KEYWORDS", "ESTIMATE_STRATEGY", "ESTIMATE_STRATEGY_FROM", "SEARCH_STRATEGY_FROM",
           "strategy_from_option", "strategy_options", "stated_words", "size_text", "bandwidth_text", "size_argument",
           "length_argument", "size_list", "positive_int", "headroom_fraction", "confidence", "int32", "positive_seconds", "workers",
           "bandwidth", "zero_stages", "schedule_names", "cp_comm_types", "MAX_WORKERS", "SEARCH_MODES"]
