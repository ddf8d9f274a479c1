"""The Python API of `ndcp replan FILE --gpus N` (docs/api.md): a running job's configuration planned again for another
GPU count, with what changes and what that means for its checkpoint.

    import ndcp
    moved = ndcp.replan("megatron.sh", gpus=1536, keep="tp,pp")
    moved["to"]["strategies"][0]["strategy"], moved["reshard"], moved["step_seconds_change"]

The file is a trainer configuration `--strategy-from` reads (Megatron-LM arguments, torchtitan arguments, a
MindFormers YAML); its `# ndcp problem:` line (ndcp.launch.problem_line, written by every --emit) states the model,
cluster and run it was planned for, and options given here complete or override it (a file ndcp did not write
needs --model, --device and --from-gpus). The new plan keeps the model, the sequence length, the global batch (so
the tokens per step: with the sequence length kept they are the same thing; --global-batch changes both) and the
trainer; it is `ndcp search` for the new count (the same options, `ndcp search --trainer TRAINER`), so with nothing
kept it is the fresh search's answer. When no plan uses every GPU (no degrees multiply to the count with the
global batch: 1,016 GPUs and a batch of 1,024), it is the fastest plan on fewer whole nodes (each count searched,
down to where the model FLOPs at the device's peak alone outlast the best step found), and says so. `--keep` pins
the file's degrees in the search (a second search, which may move to fewer GPUs too) and shows the price of keeping
them: the best plan without them beside it; a keep no plan honours is refused with why, and the
free plan is the answer.
"""
from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from .api import Estimated, SearchAnswer, answer_search, estimate_strategy, plan_search
from .estimate.layout import partition
from .launch import stated_problem
from .options import (CLUSTER_OPTIONS, ESTIMATE_KEYWORDS, RUN_OPTIONS, SEARCH_KEYWORDS, SOLVER_OPTIONS, SPACE_OPTIONS,
                      add_options, keyword_values)
from .policy import build_problem
from .replan_options import REPLAN_KEYWORDS, REPLAN_OVERRIDES
from .report.jsonout import plain
from .specs.fields import SpecError
from .specs.files import read_text
from .specs.library import load_model
from .specs.strategy import Strategy
from .trainers import detect, trainer_named
from .trainers.checkpoints import Resharding, resharded

# Strategy keys whose change `changes` lists, in this order (Strategy.as_dict's, and the resolved layout)
COMPARED = ("tp", "pp", "cp", "dp", "ep", "etp", "vpp", "mbs", "mbn", "zero", "sp", "recompute", "schedule",
            "cp_comm", "optimizer_offload", "dp_shard", "layers_per_stage")


class Change(NamedTuple):
    """One setting that differs between the file's plan and the new one."""

    what: str
    """gpus, or a strategy key (COMPARED)"""
    before: Any
    after: Any


@dataclass(frozen=True)
class Replanned:
    """The file's plan, the new plan (the kept one when --keep is honoured), and what changes between them."""

    path: str
    source: Estimated
    """the file's plan as ndcp estimates it on its own GPU count"""
    gpus: int
    """the count asked for (the plan may use fewer: `answer.planned.cluster.count`)"""
    answer: SearchAnswer
    """the new plan's search (the kept plan's when --keep is honoured)"""
    free: SearchAnswer | None
    """with --keep: the search without it (the price of keeping is the difference); None without --keep"""
    keep: tuple[str, ...]
    keep_refused: str
    """why no plan keeps the dimensions (empty: honoured, or nothing kept); then `answer` is the free plan"""

    @property
    def used(self) -> int:
        return self.answer.planned.cluster.count

    @property
    def best(self):
        return self.answer.result.best

    def changes(self) -> list[Change]:
        """What differs: the GPU count, the degrees, the batch split and the layout."""
        if self.best is None:
            return []
        model, before, after = self.source.model, self.source.strategy, self.best.strategy
        out = [Change("gpus", self.source.cluster.count, self.used)] * (self.source.cluster.count != self.used)
        old, new = _settings(model, before), _settings(model, after)
        return out + [Change(key, old[key], new[key]) for key in COMPARED if old[key] != new[key]]

    def checkpoint(self) -> list[Resharding]:
        """Each resharded dimension under the trainer's checkpoint format."""
        if self.best is None:
            return []
        trainer = trainer_named(self.source.run.trainer)
        before, after = self.source.strategy, self.best.strategy
        return [trainer.reshard(d, before, after) for d in resharded(before, after)]

    def step_change(self) -> tuple[float, float] | None:
        """(seconds, fraction of the file's step) the step time changes by; None without a new plan."""
        if self.best is None:
            return None
        old = self.source.time.step_seconds
        return self.best.step_seconds - old, self.best.step_seconds / old - 1

    def cost_change(self) -> float | None:
        """The change in GPU-seconds per token (step x GPUs / tokens per step), as a fraction of the file's."""
        if self.best is None:
            return None
        old = self.source.time.step_seconds * self.source.cluster.count / _tokens(self.source.run)
        return self.best.step_seconds * self.used / _tokens(self.answer.planned.run) / old - 1

    def keep_document(self) -> dict | None:
        if not self.keep:
            return None
        free = self.free.result.best if self.free is not None else None
        price = (self.best.step_seconds - free.step_seconds) if free and self.best and not self.keep_refused else None
        return {"dimensions": list(self.keep), "honoured": not self.keep_refused, "why": self.keep_refused or None,
                "free": self.free.document()["strategies"][0] if free else None, "price_seconds": price,
                "price_fraction": price / free.step_seconds if price is not None else None}

    def document(self) -> dict:
        """The `ndcp replan --json` document."""
        s = self.source
        step = self.step_change()
        return plain({
            "from": {"file": self.path, "trainer": s.run.trainer, "gpus": s.cluster.count,
                     "strategy": s.strategy.as_dict(), "step_seconds": s.time.step_seconds,
                     "peak_bytes": s.memory.peak_bytes, "fits": s.memory.fits,
                     "tokens_per_step": _tokens(s.run)},
            "to": self.answer.document(),
            "gpus": {"asked": self.gpus, "used": self.used},
            "keep": self.keep_document(),
            "changes": [{"what": c.what, "from": c.before, "to": c.after} for c in self.changes()],
            "reshard": [r.dimension for r in self.checkpoint()],
            "checkpoint": [r._asdict() for r in self.checkpoint()],
            "step_seconds_change": step and step[0],
            "step_change_fraction": step and step[1],
            "cost_change_fraction": self.cost_change(),
        })


def _tokens(run) -> int:
    return run.global_batch * run.seq_len


def _settings(model, s: Strategy) -> dict:
    return {**s.as_dict(), "dp_shard": s.dp_shard or None, "layers_per_stage": list(partition(model, s))}


# -- reading the file's problem ----------------------------------------------------------------------------------
class _LineParser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse API
        raise SpecError(f"{self.prog}: {message}")


def _stated(words: list[str], where: str) -> argparse.Namespace:
    """The model, cluster and run options of a problem line's words, as `ndcp search` reads them."""
    parser = _LineParser(prog=where, add_help=False)
    parser.add_argument("model")
    add_options(parser, CLUSTER_OPTIONS + RUN_OPTIONS)
    return parser.parse_args(words)


def _given(values: argparse.Namespace) -> dict[str, Any]:
    """The override options the user gave (REPLAN_OVERRIDES: None, or a switch's unset value, when not), but the
    global batch: it changes the new plan's only (`_target`)."""
    return {o.name: getattr(values, o.name) for o in REPLAN_OVERRIDES if o.name != "global_batch"
            and getattr(values, o.name, None) is not None and (o.switch is None or getattr(values, o.name) != o.unset)}


def _unstated_words(path: str, text: str, values: argparse.Namespace) -> list[str]:
    """A problem line's words for a file without one: --model, --device and --from-gpus, and the global batch and
    sequence length the file states."""
    missing = [flag for flag, name in (("--model", "model"), ("--device", "device"), ("--from-gpus", "from_gpus"))
               if getattr(values, name, None) is None]
    if missing:
        raise SpecError(f"{path} has no '# ndcp problem:' line (ndcp --emit writes one): give "
                        + ", ".join(missing) + " (the model, the device and the GPU count it runs on)")
    stated = detect(text).read(text, load_model(values.model))
    batch, seq = stated.get("global_batch"), stated.get("seq_len")
    if batch in (None, -1) or seq in (None, -1):
        raise SpecError(f"{path} states no {'global batch' if batch in (None, -1) else 'sequence length'}: give a "
                        "file that states it")
    return [str(values.model), "--device", str(values.device), "--gpus", str(values.from_gpus),
            "--global-batch", str(batch), "--seq-len", str(seq)]


def _problem(path: str, values: argparse.Namespace) -> argparse.Namespace:
    """The file's problem: its line (or, without one, --model, --device and --from-gpus), overridden by the options
    given; its trainer the file's."""
    text = read_text(path, f"replan {path}", "the configuration")
    trainer = detect(text).name
    words = stated_problem(text) or _unstated_words(path, text, values)
    stated = _stated(words, f"{path}: its '# ndcp problem:' line")
    if getattr(values, "model", None) is not None:
        stated.model = values.model
    for name, value in _given(values).items():
        setattr(stated, name, value)
    stated.trainer = trainer
    return stated


def _with_problem(keywords, problem: argparse.Namespace, **more: Any) -> argparse.Namespace:
    values = keyword_values(keywords, {})
    for option in CLUSTER_OPTIONS + RUN_OPTIONS:
        setattr(values, option.name, getattr(problem, option.name))
    values.model = problem.model
    for name, value in more.items():
        setattr(values, name, value)
    return values


# -- the new plan ------------------------------------------------------------------------------------------------
def _target(problem: argparse.Namespace, values: argparse.Namespace) -> argparse.Namespace:
    """`ndcp search`'s options for the new count: the problem (the global batch --global-batch's, if given), the
    space and solver options given, the file's trainer (and its --emit configuration when asked)."""
    space = {o.name: getattr(values, o.name, o.unset) for o in SPACE_OPTIONS + SOLVER_OPTIONS}
    return _with_problem(SEARCH_KEYWORDS, problem, gpus=values.gpus,
                         global_batch=getattr(values, "global_batch", None) or problem.global_batch,
                         emit=problem.trainer if getattr(values, "emit_file", None) else None, **space)


def _counts(gpus: int, per_node: int) -> list[int]:
    """The count asked for, then the whole-node counts below it, largest first."""
    return [gpus] + [n for n in range(gpus - gpus % per_node, 0, -per_node) if n < gpus]


def _has_strategies(values: argparse.Namespace) -> bool:
    try:
        return bool(plan_search(values).space.walk().batches)
    except SpecError:
        return False


def _fewer(target: argparse.Namespace, count: int) -> argparse.Namespace:
    fewer = copy.copy(target)
    fewer.gpus = count
    return fewer


def _search(target: argparse.Namespace, progress: Callable | None, pinned: bool = False) -> SearchAnswer:
    """The search on the count asked for; when the rules refuse every strategy there (no degrees multiply to it),
    the fastest plan on a whole-node count below: each count with strategies searched, largest first, until the
    step no plan on fewer GPUs can beat (the model FLOPs at the device's peak: MFU <= 1) is above the best found.
    `pinned` (--keep's search): pins the count refuses (a SpecError there) move to fewer GPUs too; that error is
    raised when no count has a strategy."""
    refusal = None
    try:
        answer = answer_search(plan_search(target), target, progress)
    except SpecError as error:
        if not pinned:
            raise
        answer, refusal = None, error
    if answer is not None and (answer.result.best is not None or answer.planned.space.walk().batches):
        return answer  # a plan, or strategies that pass the rules and none fits: fewer GPUs fit no better
    best = answer
    for count in _counts(target.gpus, build_problem(target)[1].device.devices_per_node)[1:]:
        found = best.result.best if best is not None else None
        if found is not None and found.time.mfu * found.step_seconds * best.planned.cluster.count / count >= \
                found.step_seconds:
            break
        if _has_strategies(_fewer(target, count)):
            fewer = _fewer(target, count)
            tried = answer_search(plan_search(fewer), fewer, progress)
            if tried.result.best is not None and (found is None or tried.result.best.step_seconds <
                                                  found.step_seconds):
                best = tried
    if best is None and refusal is not None:
        raise refusal
    return best


def _kept(target: argparse.Namespace, source: Strategy, keep: tuple[str, ...], progress: Callable | None
          ) -> tuple[SearchAnswer | None, str]:
    """The search with the kept dimensions pinned to the file's; or None and why no plan has them."""
    pins = ",".join(f"{k}={getattr(source, k)}" for k in keep)
    kept = copy.copy(target)
    kept.fix = ",".join(filter(None, (target.fix, pins)))
    try:
        answer = _search(kept, progress, pinned=True)
    except SpecError as error:
        return None, f"{pins} on {target.gpus} GPUs or fewer whole nodes: {error}"
    if answer.result.best is None:
        return None, f"no plan with {pins} fits on {target.gpus} GPUs: {answer.result.explanation}"
    return answer, ""


def replan_values(path: str, **options: Any) -> argparse.Namespace:
    """The values of `ndcp replan`'s options (as its parser sets them) from the file and API keywords."""
    values = keyword_values(REPLAN_KEYWORDS, options)
    values.file = path
    return values


def run_replan(values: argparse.Namespace, progress: Callable | None = None) -> Replanned:
    """The file planned again for `values.gpus` (raises SpecError for a user error)."""
    problem = _problem(values.file, values)
    source = estimate_strategy(_with_problem(ESTIMATE_KEYWORDS, problem, strategy_from=values.file))
    target = _target(problem, values)
    free = _search(target, progress)
    keep = tuple(values.keep or ())
    if not keep or free.result.best is None:
        return Replanned(values.file, source, values.gpus, free, None, keep, "")
    kept, why = _kept(target, source.strategy, keep, progress)
    return Replanned(values.file, source, values.gpus, kept or free, free, keep, why)


def replan(path: str, *, gpus: int, **options: Any) -> dict:
    """`ndcp replan FILE --gpus N [options]`: its `--json` document. `options` are the command's flags (`ndcp replan
    --help`): keep="tp,pp", memory_cap="75GiB", model=..., from_gpus=... (a file without a problem line), ...
    Raises SpecError for a user error."""
    return run_replan(replan_values(path, gpus=gpus, **options)).document()


__all__ = ["replan", "replan_values", "run_replan", "Replanned", "Change", "COMPARED"]
