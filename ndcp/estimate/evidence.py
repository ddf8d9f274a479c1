"""The evidence behind an estimate: error bands from the repo's measured runs (docs/evidence.md).

A plan rests on features (its trainer, device generation, dense or MoE layers, ZeRO stage or FSDP/HSDP, context
parallelism, FP8 recipe, pipeline schedule, recompute option family, offloads: `plan_features`). The generated
table (evidence_table.json, written by scripts/build_evidence.py from examples/published_runs.yaml,
examples/measured_runs_2.yaml and examples/measured_runs_nvl72.yaml) holds, for every measured run ndcp validates,
its features and its leave-one-source-out residuals: measured / estimated step time (the GEMM ceilings fitted
without the run's source, as scripts/calibrate.py does, on the first two files only) and measured / estimated peak
memory (nothing of memory is fitted).

The band of a plan (`evidence_for`, docs/evidence.md §2):
- its comparable rows (`comparable`): all rows, narrowed first to the plan's model class (dense or MoE: they err
  apart, MODEL_CLASSES) and then one plan feature at a time to those sharing it (the feature leaving the most rows
  first) while enough rows from enough sources remain (STEP_LEAST, PEAK_LEAST, CLASS_SOURCES);
- their edges at confidence c: split-conformal order statistics (Lei et al. 2018, "Distribution-free predictive
  inference for regression", JASA 113(523), §2.2): of n sorted ratios, the upper edge at level q is the
  ceil(q (n + 1))-th (the largest when that passes n), the lower edge the floor((1 - q) (n + 1))-th (the smallest
  when that is 0); step times two-sided at q = (1 + c) / 2, peaks one-sided at q = c; the point estimate always
  inside (low <= 1 <= high, memory_high >= 1);
- each feature without evidence widens it by the pooled band of all rows once more (low and high multiplied by the
  pooled low and high, memory_high by the pooled memory_high): an unmeasured feature is taken to err as much as
  the estimator errs over all runs, independently of the rest.
At confidence 0 every factor is exactly 1.0 (the point estimate).

This module imports no solver and no report; estimators and reports may import it.
"""
from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from math import ceil, floor
from pathlib import Path
from typing import Iterable, NamedTuple

from ..specs.model import ModelSpec
from ..specs.recompute import KEEPS_ALL, OPTION_BY_NAME, RECOMPUTE_MODES
from ..specs.run import RunSpec
from ..specs.strategy import Strategy
from .fp8 import uncached_weight_copy_bytes_per_parameter
from .overlap import strategy_overlaps

TABLE_PATH = Path(__file__).with_name("evidence_table.json")
DEFAULT_CONFIDENCE = 0.9


class Least(NamedTuple):
    """The fewest rows, and the fewest sources they come from, a band is read from (`comparable`)."""

    rows: int
    sources: int


# Errors differ more between publications than within one, so a band is read from rows of several sources. Chosen
# from a small grid with their held-out coverage (docs/evidence.md §3): steps 15 rows of 4 sources; the peaks, 9
# rows of 3 sources in all, 5 rows of 2 sources.
STEP_LEAST = Least(rows=15, sources=4)
PEAK_LEAST = Least(rows=5, sources=2)
# Dense and MoE plans err apart (measured / estimated step time: median 1.03 over the 78 dense rows, 1.37 over the 35
# MoE rows; docs/evidence.md §2), so rows of the other class do not speak for a plan, however many publications they
# come from: a band is read from the plan's class first wherever the class alone holds enough rows from at least
# CLASS_SOURCES publications (the MoE rows come from three).
MODEL_CLASSES = ("dense", "moe")
CLASS_SOURCES = 3

# Device generation by preset name prefix (ndcp/specs/device.py PRESETS); any other device is its own name.
GENERATIONS = (("a100", "ampere"), ("h100", "hopper"), ("h200", "hopper"), ("h800", "hopper"), ("gb200", "blackwell"),
               ("b200", "blackwell"), ("gb300", "blackwell"), ("b300", "blackwell"), ("mi300", "cdna3"),
               ("ascend-910", "ascend 910"))
RECOMPUTE_FAMILIES = {"none": "no recompute", "selective": "selective recompute", "full": "full recompute",
                      "offload": "activation offload"}
MODULE_FAMILY = "recompute modules"  # every module option (Megatron --recompute-modules, MindFormers select sets)


class Evidence(NamedTuple):
    """The band around one plan's point estimate and what it rests on."""

    runs: int  # comparable measured runs behind the step band
    step_band: tuple[float, float]  # multiplicative (low, high) factors on the point step time
    memory_high: float  # multiplicative factor: peak upper edge = point peak * memory_high (>= 1)
    memory_rows: int  # measured peak rows behind memory_high
    features_without_evidence: tuple[str, ...]  # features of the plan no measured run exercises
    confidence: float

    def step_seconds_band(self, step_seconds: float) -> tuple[float, float]:
        """The band's (low, high) edges in seconds around a point step time."""
        return step_seconds * self.step_band[0], step_seconds * self.step_band[1]

    def peak_bytes_high(self, peak_bytes: int) -> int:
        """The peak's upper edge in bytes (rounded up) of a point peak."""
        return int(ceil(peak_bytes * self.memory_high))

    def document(self) -> dict:
        """The `evidence` object of a strategy in --json."""
        return {"runs": self.runs, "memory_rows": self.memory_rows,
                "features_without_evidence": list(self.features_without_evidence), "confidence": self.confidence}


class Residual(NamedTuple):
    """One measured run's leave-one-source-out ratio measured / estimated (step time or peak memory)."""

    id: str
    source: str
    features: frozenset[str]
    ratio: float


@lru_cache(maxsize=256)
def device_generation(device_name: str) -> str:
    """The GPU generation a device preset belongs to ("hopper"), or the device's own name."""
    name = device_name.lower()
    return next((generation for prefix, generation in GENERATIONS if name.startswith(prefix)), name)


def recompute_families(strategy: Strategy) -> set[str]:
    """The recompute option families some layer of the plan runs (uniform or per-stage plans)."""
    plan = strategy.recompute
    used = [plan.mode] if plan.is_uniform else [m for m in RECOMPUTE_MODES if any(s.count(m) for s in plan.stages)]
    return {RECOMPUTE_FAMILIES.get(m, MODULE_FAMILY if OPTION_BY_NAME[m].keeps == KEEPS_ALL else m) for m in used}


def _sharding(strategy: Strategy) -> set[str]:
    if strategy.dp == 1:
        return set()
    if strategy.zero == 3:
        return {"hsdp" if strategy.dp_replicate > 1 else "fsdp"}
    return {f"zero-{strategy.zero}"}


@lru_cache(maxsize=64)
def _trainer_overlaps(run: RunSpec) -> RunSpec:
    """The run with the trainer's default overlaps (built once per run: the search asks for it per plan)."""
    return replace(run, overlap="trainer")


def plan_features(model: ModelSpec, strategy: Strategy, run: RunSpec, device_name: str | None = None
                  ) -> frozenset[str]:
    """The features an estimate of this plan rests on, human-readable ("trainer megatron", "device hopper", "moe",
    "mamba-2", "fsdp", "context parallel", "fp8 delayed", "dualpipev", "activation offload", ...). The device
    generation is one of them when `device_name` is given."""
    features = {f"trainer {run.trainer}", "moe" if model.moe is not None else "dense",
                *_sharding(strategy), *recompute_families(strategy)}
    features |= {name for name, mixer in (("mamba-2", model.mamba), ("gated deltanet", model.linear_attention))
                 if mixer is not None}
    if device_name is not None:
        features.add(f"device {device_generation(device_name)}")
    if strategy.cp > 1:
        features |= {"context parallel", f"cp comm {strategy.cp_comm}"}
    if run.precision == "fp8":
        features.add(f"fp8 {run.fp8_recipe}")
    if strategy.pp > 1:
        features.add(strategy.schedule)
    if model.moe is not None:
        features.add(f"moe dispatcher {run.moe_dispatcher}")
    if strategy.optimizer_offload:
        features.add("optimizer offload")
    if run.overlap != "trainer":  # the overlaps this plan runs that the trainer's defaults would not (a file's
        # read-back overlaps that change nothing here, e.g. p2p without virtual stages, are no feature)
        beyond = strategy_overlaps(run, strategy) - strategy_overlaps(_trainer_overlaps(run), strategy)
        features |= {f"overlap {part}" for part in sorted(beyond)}
    if run.torch_compile:
        features.add("torch.compile")
    if run.compile_loss:
        features.add("compiled loss")
    if run.optimizer_state_dtype != "fp32":
        features.add(f"{run.optimizer_state_dtype} optimizer states")
    if run.activation_func_fp8_input_store:
        features.add("fp8 activation input store")
    if run.delay_wgrad_compute and "ep" in strategy_overlaps(run, strategy):  # priced where the overlap runs
        features.add("wgrad delayed")
    if any(run.bf16_layers):  # Megatron's --first-last-layers-bf16 under fp8 (time.bf16_layers_time)
        features.add("fp8 bf16 first/last layers")
    if run.wgrad_deferral_limit is not None and strategy.pp > 1:  # what each prices (memory.py), where it does
        features.add("output wgrad deferred")
    if uncached_weight_copy_bytes_per_parameter(run, strategy.zero):
        features.add("fp8 weights uncached")
    return frozenset(features)


# -- bands ---------------------------------------------------------------------------------------------------------
def upper_edge(ratios: list[float], level: float) -> float:
    """The split-conformal upper edge at `level` of sorted ratios: the ceil(level (n + 1))-th, at most the largest."""
    return ratios[min(len(ratios), max(1, ceil(level * (len(ratios) + 1) - 1e-9))) - 1]


def lower_edge(ratios: list[float], level: float) -> float:
    """The split-conformal lower edge at `level` of sorted ratios: the floor((1 - level) (n + 1))-th, at least the
    smallest."""
    return ratios[max(1, floor((1 - level) * (len(ratios) + 1) + 1e-9)) - 1]


def least_for(least: Least, confidence: float, two_sided: bool) -> Least:
    """`least` with at least as many rows as the split-conformal edge at `confidence` needs to be an order statistic
    of them: ceil(level (n + 1)) <= n, i.e. n >= level / (1 - level) (Lei et al. 2018 §2.2; with fewer rows the edge
    is unbounded). One-sided peaks at 90 %: 9 rows; two-sided steps at 90 % (level 95 %): 19. A set that narrow is
    not taken; where the whole table has fewer, its largest ratio stays the edge."""
    level = (1 + confidence) / 2 if two_sided else confidence
    if level >= 1:
        return least
    needed = ceil(level / (1 - level) - 1e-9)
    return Least(max(least.rows, needed), least.sources)


class _Band(NamedTuple):
    low: float
    high: float
    rows: int  # rows behind it


class EvidenceTable(NamedTuple):
    """Residual rows of measured runs: step times and peaks (a run may have either or both)."""

    steps: tuple[Residual, ...]
    peaks: tuple[Residual, ...]

    @property
    def evidenced(self) -> frozenset[str]:
        """Features at least one measured run (step or peak row) exercises."""
        return frozenset(f for row in self.steps + self.peaks for f in row.features)

    def without_source(self, source: str) -> "EvidenceTable":
        """The table with one source's rows left out (to measure coverage on that source)."""
        return EvidenceTable(tuple(r for r in self.steps if r.source != source),
                             tuple(r for r in self.peaks if r.source != source))

    def evidence(self, features: Iterable[str], confidence: float) -> Evidence:
        """The band of a plan with these features at `confidence` (module docstring: the rule)."""
        features = frozenset(features)
        missing = tuple(sorted(features - self.evidenced))
        step_least, peak_least = least_for(STEP_LEAST, confidence, True), least_for(PEAK_LEAST, confidence, False)
        step = _band(comparable_chain(self.steps, features, STEP_LEAST), step_least.rows, confidence, two_sided=True)
        peak = _band(comparable_chain(self.peaks, features, PEAK_LEAST), peak_least.rows, confidence, two_sided=False)
        low, high, memory_high = step.low, step.high, peak.high
        pooled_step = _band((self.steps,), 0, confidence, two_sided=True)
        pooled_peak = _band((self.peaks,), 0, confidence, two_sided=False)
        for _ in missing:  # at confidence 0 the pooled factors are 1.0: the point estimate stays
            low, high, memory_high = low * pooled_step.low, high * pooled_step.high, memory_high * pooled_peak.high
        return Evidence(step.rows, (low, high), memory_high, peak.rows, missing, float(confidence))

    def held_out_coverage(self, confidence: float) -> "Coverage":
        """Each source left out in turn: how many of its step times and peaks fall inside the bands the other
        sources' rows give (the band's own validation, docs/evidence.md §3)."""
        step_hits = peak_hits = 0
        for source in sorted({r.source for r in self.steps + self.peaks}):
            rest = self.without_source(source)
            for row in (r for r in self.steps if r.source == source):
                low, high = rest.evidence(row.features, confidence).step_band
                step_hits += low <= row.ratio <= high
            for row in (r for r in self.peaks if r.source == source):
                peak_hits += row.ratio <= rest.evidence(row.features, confidence).memory_high
        return Coverage(confidence, len(self.steps), step_hits, len(self.peaks), peak_hits)


class Coverage(NamedTuple):
    """Held-out rows inside their bands at one confidence."""

    confidence: float
    step_rows: int
    step_covered: int
    peak_rows: int
    peak_covered: int

    @property
    def step_share(self) -> float:
        return self.step_covered / self.step_rows if self.step_rows else 0.0

    @property
    def peak_share(self) -> float:
        return self.peak_covered / self.peak_rows if self.peak_rows else 0.0


def _band(chain: tuple[tuple[Residual, ...], ...], needed: int, confidence: float, two_sided: bool) -> _Band:
    """The edges of the deepest set of `chain` (rows ever more like the plan, `comparable_chain`) that holds at least
    `needed` rows (the first set where none does), never inside the range of the next, closer set's ratios: rows
    too few for an order statistic still show how far a plan like theirs erred, and a higher confidence, which
    stops the narrowing sooner, so never gives a narrower band."""
    depth = max((i for i, rows in enumerate(chain) if len(rows) >= needed), default=0)
    rows = chain[depth]
    closer = sorted(r.ratio for r in chain[depth + 1]) if depth + 1 < len(chain) else []
    ratios = sorted(r.ratio for r in rows)
    if not ratios or confidence <= 0:
        return _Band(1.0, 1.0, len(rows))
    level = (1 + confidence) / 2 if two_sided else confidence
    low = min([1.0, lower_edge(ratios, level)] + closer[:1]) if two_sided else 1.0
    return _Band(low, max([1.0, upper_edge(ratios, level)] + closer[-1:]), len(rows))


def comparable_chain(rows: tuple[Residual, ...], features: frozenset[str], least: Least
                     ) -> tuple[tuple[Residual, ...], ...]:
    """The rows most like a plan, step by step: starting from all rows, narrowed first to the plan's model class
    (dense or MoE) where at least `least.rows` rows from min(`least.sources`, CLASS_SOURCES) sources share it, then
    one plan feature at a time to the rows that share it, each time by the feature leaving the most rows (ties: its
    name), while at least `least.rows` rows from `least.sources` sources remain. Each set holds the next; the last
    is the closest."""
    chain, remaining = [rows], sorted(features)
    for model_class in (c for c in MODEL_CLASSES if c in features):
        same = tuple(r for r in rows if model_class in r.features)
        if len(same) >= least.rows and len({r.source for r in same}) >= min(least.sources, CLASS_SOURCES):
            chain.append(same)
            remaining.remove(model_class)
    while remaining:
        narrowed = [(tuple(r for r in chain[-1] if f in r.features), f) for f in remaining]
        narrowed = [(sub, f) for sub, f in narrowed
                    if len(sub) >= least.rows and len({r.source for r in sub}) >= least.sources]
        if not narrowed:
            break
        chosen, feature = min(narrowed, key=lambda option: (-len(option[0]), option[1]))
        chain.append(chosen)
        remaining.remove(feature)
    return tuple(chain)


def comparable(rows: tuple[Residual, ...], features: frozenset[str], least: Least) -> tuple[Residual, ...]:
    """The closest set of `comparable_chain`: the rows a band at `least` is read from."""
    return comparable_chain(rows, features, least)[-1]


# -- the shipped table ---------------------------------------------------------------------------------------------
def _residuals(entries: list[dict]) -> tuple[Residual, ...]:
    return tuple(Residual(e["id"], e["source"], frozenset(e["features"]), float(e["ratio"])) for e in entries)


@lru_cache(maxsize=1)
def shipped_table() -> EvidenceTable:
    """The table scripts/build_evidence.py generated (evidence_table.json)."""
    document = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    return EvidenceTable(_residuals(document["steps"]), _residuals(document["peaks"]))


@lru_cache(maxsize=4096)
def evidence_for(features: frozenset[str], confidence: float = DEFAULT_CONFIDENCE) -> Evidence:
    """The band of a plan with these features at `confidence` (0 <= c < 1) from the shipped table."""
    return shipped_table().evidence(features, confidence)


def plan_evidence(model: ModelSpec, device_name: str, run: RunSpec, strategy: Strategy,
                  confidence: float = DEFAULT_CONFIDENCE) -> Evidence:
    """The evidence behind one plan's estimate on this device (its features' band from the shipped table)."""
    return evidence_for(plan_features(model, strategy, run, device_name), confidence)


EVIDENCED_FEATURES: frozenset[str] = shipped_table().evidenced

__all__ = ["Evidence", "plan_evidence", "Residual", "EvidenceTable", "plan_features", "evidence_for",
           "EVIDENCED_FEATURES", "Coverage", "DEFAULT_CONFIDENCE", "Least", "STEP_LEAST", "PEAK_LEAST", "least_for",
           "comparable", "comparable_chain", "MODEL_CLASSES", "CLASS_SOURCES", "device_generation", "shipped_table",
           "upper_edge", "lower_edge"]
