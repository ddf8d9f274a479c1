"""The options of `ndcp replan` (a running job's configuration planned again for another GPU count): its own, and
the cluster and run options it takes to complete or override the file's problem line (ndcp.options has the rest)."""
from __future__ import annotations

import argparse
import dataclasses

from .options import CLUSTER_OPTIONS, RUN_OPTIONS, SOLVER_OPTIONS, SPACE_OPTIONS, Option, positive_int

KEEPABLE = ("tp", "pp", "cp", "ep", "etp", "vpp", "zero")  # what --keep pins to the file's values


def keep_dimensions(text: str) -> tuple[str, ...]:
    """--keep: a comma-separated list of KEEPABLE dimensions."""
    names = tuple(dict.fromkeys(t.strip().lower() for t in str(text).split(",") if t.strip()))
    wrong = [name for name in names if name not in KEEPABLE]
    if wrong or not names:
        raise argparse.ArgumentTypeError(f"{wrong[0] if wrong else text!r}: expected a comma-separated list of "
                                         f"{', '.join(KEEPABLE)}")
    return names


def _overriding(option: Option) -> Option:
    """A cluster or run option as `ndcp replan` takes it: optional, None when not given (the file's problem
    line gives the rest)."""
    return dataclasses.replace(option, required=False, default=None if option.switch is None else option.default,
                               help=option.help + (" (default: the file's)" if option.switch is None else ""))


# The problem options replan takes to complete or override a file's problem line: all but the GPU count (--gpus is
# the new count), the sequence length (kept) and the trainer (the file's).
REPLAN_OVERRIDES = tuple(_overriding(o) for o in CLUSTER_OPTIONS + RUN_OPTIONS
                         if o.flag not in ("--gpus", "--seq-len", "--trainer"))
REPLAN_OPTIONS = (
    Option("--gpus", "the GPU count to plan for", positive_int, metavar="N", required=True),
    Option("--keep", "prefer plans that keep these dimensions of the file, so its checkpoint need not reshard "
                     f"them: comma-separated from {', '.join(KEEPABLE)}; the best plan without them is shown beside "
                     "(the price of keeping), and a keep no plan honours is refused with why", keep_dimensions, (),
           metavar="DIMS"),
    Option("--model", "the model, for a file without an `# ndcp problem:` line (one ndcp did not write): a library "
                      "name, a model YAML spec or a Hugging Face config.json", metavar="MODEL"),
    Option("--from-gpus", "the GPU count the file runs on, for a file without an `# ndcp problem:` line",
           positive_int, metavar="N"),
)
REPLAN_KEYWORDS = REPLAN_OPTIONS + REPLAN_OVERRIDES + SPACE_OPTIONS + SOLVER_OPTIONS  # the API's replan keywords

__all__ = ["KEEPABLE", "keep_dimensions", "REPLAN_OPTIONS", "REPLAN_OVERRIDES", "REPLAN_KEYWORDS"]
