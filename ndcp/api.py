"""The Python API (docs/api.md): `search` and `estimate`, what `ndcp search` and `ndcp estimate` do, returning the
document their `--json` writes (a dict of plain JSON values).

    import ndcp
    found = ndcp.search("llama3-8b", device="h100", gpus=64, global_batch=256, seq_len=8192, memory_cap="40GiB")
    found["strategies"][0]["strategy"]

Options are named as the command line's flags, `-` written `_` (--memory-cap: memory_cap); their values are the
flags' text or Python values written the same way (ndcp.options.flag_text: 64, "8k", (0, 1), {"tp": 8}, True).
The command line is a thin layer over the functions here: the same options, defaults, checks and search policy
(ndcp.policy), so the API answers as `ndcp search --json` does. A user error raises SpecError (a ValueError) with the
message `ndcp` prints after `ndcp: error:`; a search where nothing fits is no error: its document's status is
`infeasible` (the command line's exit 1). The notes the command line prints on stderr (e.g. that an explicit
--trainer searches uniform plans) are `PlannedSearch.notes` here.
"""
from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from typing import Any, Callable

from .estimate.memory import estimate_memory
from .estimate.time import estimate_time
from .options import ESTIMATE_KEYWORDS, SEARCH_KEYWORDS, keyword_values
from .launch import LaunchCheck, check_launch
from .policy import (ANY_TRAINER, build_problem, build_space_options, build_strategy, check_fixed_values,
                     check_max_offset, check_recompute_runs, pinned_by_file, planned_trainer, shared_spec,
                     strategy_values, trainer_method)
from .report.jsonout import estimate_document, plain, search_document, validated_document
from .space import SearchSpace
from .specs.device import ClusterSpec
from .specs.fields import SpecError
from .specs.model import ModelSpec
from .specs.run import TRAINERS, RunSpec
from .specs.strategy import Strategy


@dataclass(frozen=True)
class PlannedSearch:
    """A checked search, ready to run: the problem, its space, the method and the notes for the user."""

    model: ModelSpec
    cluster: ClusterSpec
    run: RunSpec
    space: SearchSpace
    method: str
    """one of ndcp.solve.search.METHODS"""
    notes: tuple[str, ...]
    """what the policy decided for the user to know (the command line prints them as `ndcp: note:` lines)"""
    trainer: str | None
    """the trainer whose plans it returns (ndcp.policy.planned_trainer); None under --trainer any"""


def search_values(model: str, **options: Any) -> argparse.Namespace:
    """The values of `ndcp search`'s options (as its parser sets them) from the model and API keywords."""
    values = keyword_values(SEARCH_KEYWORDS, options)
    values.model = model
    return values


def estimate_values(model: str, **options: Any) -> argparse.Namespace:
    """The values of `ndcp estimate`'s options (as its parser sets them) from the model and API keywords."""
    values = keyword_values(ESTIMATE_KEYWORDS, options)
    values.model = model
    return values


def plan_search(values: argparse.Namespace) -> PlannedSearch:
    """The search the options describe, every check done (raises SpecError). `values` as ndcp.policy takes them;
    its `fix` and `sp` take what a --strategy-from file pins."""
    from .solve.search import search_method  # OR-Tools (~1 s): only where a search runs

    model, cluster, run = build_problem(values)
    check_max_offset(values.max_offset, model)
    values.fix = pinned_by_file(values, model, run)
    space = shared_spec(SearchSpace(model, cluster, run, build_space_options(values)))  # one object per problem
    check_recompute_runs(space)
    check_fixed_values(space)
    if values.recompute == "greedy" and values.exhaustive:
        raise SpecError("--recompute greedy prices every candidate's greedy plan already; drop --exhaustive")
    method, note = trainer_method(values, search_method(values.recompute, values.exhaustive))
    return PlannedSearch(model, cluster, run, space, method, (note,) if note else (), planned_trainer(values))


def _solver_options(values: argparse.Namespace, progress: Callable | None):
    """ndcp.solve.search.SearchOptions from the solver options of `values`."""
    from .solve.search import SearchOptions

    return SearchOptions(top=values.top, time_limit=values.time_limit, seed=values.seed, workers=values.workers,
                         progress=progress)


def run_search(planned: PlannedSearch, values: argparse.Namespace, progress: Callable | None = None):
    """The search's result (ndcp.solve.search.SearchResult) under the solver options of `values`."""
    from .solve.search import search as solve

    return solve(planned.space, planned.method, _solver_options(values, progress))


@dataclass(frozen=True)
class TrainerBest:
    """Under --trainer any: the best plan of the trainer the run is priced for, beside the trainer-free one."""

    trainer: str
    result: Any
    """its search's ndcp.solve.search.SearchResult"""
    lacks: tuple[str, ...]
    """what the trainer-free winner uses that the trainer cannot run (its Trainer.nearest's notes)"""
    faster_by: float | None
    """how much faster the trainer-free winner is, as a fraction of the trainer's best step (None: either is
    missing)"""

    def document(self) -> dict:
        """The `trainer_plan` block of `search --json`."""
        best = self.result.best
        return {"trainer": self.trainer, "status": self.result.status,
                "best": best.as_dict(rank=1) if best is not None else None,
                "faster_by": self.faster_by, "lacks": list(self.lacks)}


@dataclass(frozen=True)
class SearchAnswer:
    """A search's answer: its result, and what the options asked beside it (the trainer's best plan under
    --trainer any; the checked --emit configuration of the winner)."""

    planned: PlannedSearch
    result: Any
    """ndcp.solve.search.SearchResult"""
    trainer_best: TrainerBest | None = None
    launch: LaunchCheck | None = None
    validated: Any = None
    """ndcp.solve.validated.ValidatedAlternative: the winner's features without evidence and the best strategy
    resting only on evidenced ones; None when the winner is validated"""

    def document(self) -> dict:
        """The `ndcp search --json` document."""
        p = self.planned
        doc = search_document(p.model, p.cluster, p.run, p.space, self.result)
        doc.update(validated_document(p.model, p.cluster, p.run, self.result, self.validated))
        doc["planned_for"] = p.trainer or ANY_TRAINER
        if self.trainer_best is not None:
            doc["trainer_plan"] = self.trainer_best.document()
        if self.launch is not None:
            doc["emitted"] = self.launch.document()
        return doc


def _trainer_best(planned: PlannedSearch, values: argparse.Namespace, result: Any,
                  progress: Callable | None) -> TrainerBest:
    from .trainers import nearest

    restricted = copy.copy(values)
    restricted.trainer = planned.run.trainer
    theirs = run_search(plan_search(restricted), restricted, progress)
    ours = result.best
    lacks = tuple(nearest(planned.run.trainer, planned.model, planned.run, ours.strategy)[1]) if ours else ()
    faster = (1 - ours.step_seconds / theirs.best.step_seconds) if ours and theirs.best else None
    return TrainerBest(planned.run.trainer, theirs, lacks, faster)


def answer_search(planned: PlannedSearch, values: argparse.Namespace, progress: Callable | None = None
                  ) -> SearchAnswer:
    """The search's answer: its result; under --trainer any the priced trainer's best plan too (a second search);
    with --emit the winner's configuration checked (ndcp.launch); when the winner rests on a feature no measured
    run exercises, the best strategy resting only on evidenced ones (ndcp.solve.validated, one more search)."""
    from .solve.validated import validated_alternative

    result = run_search(planned, values, progress)
    beside = _trainer_best(planned, values, result, progress) if planned.trainer is None else None
    kind = getattr(values, "emit", None)
    launch = (check_launch(kind, values, (planned.model, planned.cluster, planned.run), result.best.strategy)
              if kind and result.best is not None else None)
    validated = validated_alternative(planned.space, planned.method, result, _solver_options(values, progress))
    return SearchAnswer(planned, result, beside, launch, validated)


def search(model: str, *, device: str, gpus: int, global_batch: int, seq_len: int | str, **options: Any) -> dict:
    """`ndcp search MODEL --device ... --gpus ... --global-batch ... --seq-len ... [options]`: its `--json` document.

    `model` is a library name, a model YAML spec or a Hugging Face config.json; `options` are the command's flags
    (`ndcp search --help`): memory_cap="40GiB", trainer="megatron", recompute="uniform", top=5, fix="tp=8" or
    {"tp": 8}, ... Raises SpecError for a user error."""
    values = search_values(model, device=device, gpus=gpus, global_batch=global_batch, seq_len=seq_len, **options)
    return plain(answer_search(plan_search(values), values).document())


@dataclass(frozen=True)
class Estimated:
    """One strategy's estimate: the problem, the strategy, its memory and step time."""

    model: ModelSpec
    cluster: ClusterSpec
    run: RunSpec
    strategy: Strategy
    memory: Any
    """ndcp.estimate.memory's MemoryEstimate"""
    time: Any
    """ndcp.estimate.time's TimeEstimate"""

    def document(self) -> dict:
        """The `ndcp estimate --json` document."""
        return estimate_document(self.model, self.cluster, self.run, self.strategy, self.memory, self.time)


def estimate_strategy(values: argparse.Namespace) -> Estimated:
    """The estimate the options describe (raises SpecError)."""
    if getattr(values, "trainer", None) == ANY_TRAINER:
        raise SpecError("--trainer any: an estimate prices one trainer's behaviour; give --trainer one of "
                        + ", ".join(TRAINERS))
    model, cluster, run = build_problem(values)
    strategy = build_strategy(model, cluster, run, strategy_values(values, model, run))
    return Estimated(model, cluster, run, strategy, estimate_memory(model, cluster, run, strategy),
                     estimate_time(model, cluster, run, strategy))


def estimate(model: str, *, device: str, gpus: int, global_batch: int, seq_len: int | str,
             strategy: str | dict = "", **options: Any) -> dict:
    """`ndcp estimate MODEL ... --strategy STRATEGY [options]`: its `--json` document.

    `strategy` is --strategy's text ("tp=2,pp=2,sp=on,recompute=selective") or a dict of its keys ({"tp": 2,
    "sp": True}); the keys left out take their defaults (tp, pp, ... 1, dp the rest of the GPUs). `options` are the
    command's flags (`ndcp estimate --help`), e.g. strategy_file="plan.yaml", memory_cap="75GB". Raises SpecError
    for a user error or a strategy that breaks a rule; a strategy that does not fit is no error (its memory says
    so)."""
    values = estimate_values(model, device=device, gpus=gpus, global_batch=global_batch, seq_len=seq_len,
                             strategy=strategy, **options)
    return plain(estimate_strategy(values).document())


__all__ = ["search", "estimate", "SpecError", "PlannedSearch", "search_values", "plan_search", "run_search",
           "SearchAnswer", "TrainerBest", "answer_search",
           "Estimated", "estimate_values", "estimate_strategy"]
