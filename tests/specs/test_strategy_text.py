"""strategy_text reproduces, byte for byte, each strategy text the reports wrote before it existed."""
import itertools

import pytest

from ndcp.specs.strategy import RecomputePlan, StageRecompute, Strategy
from ndcp.specs.strategy_text import EXPLAIN_FIELDS, PLOT_FIELDS, VALIDATION_FIELDS, strategy_text


# -- the formats as they were written before (report/search.py, report/plots.py, solve/explain.py, validation.py) --
def degrees_text(s):
    text = f"tp={s.tp} pp={s.pp} cp={s.cp}" + (f" cp_comm={s.cp_comm}" if s.cp > 1 else "") + f" dp={s.dp}"
    if s.ep > 1 or s.etp > 1:
        text += f" ep={s.ep} etp={s.etp}"
    return (text + f" vpp={s.vpp} mbs={s.mbs} mbn={s.mbn} zero={s.zero} sp={'on' if s.sp else 'off'} "
            f"recompute={s.recompute.summary()}")


def plot_label(s):
    label = f"tp{s.tp} pp{s.pp} cp{s.cp} dp{s.dp}"
    if s.ep > 1 or s.etp > 1:
        label += f" ep{s.ep} etp{s.etp}"
    if s.vpp > 1:
        label += f" vpp{s.vpp}"
    return label + f" mbs{s.mbs} z{s.zero}{' sp' if s.sp else ''} {s.recompute.summary()}"


def explain_text(s):
    return (f"tp={s.tp} pp={s.pp} cp={s.cp} dp={s.dp} ep={s.ep} vpp={s.vpp} mbs={s.mbs} zero={s.zero} "
            f"sp={'on' if s.sp else 'off'} recompute={s.recompute.summary()}")


def validation_label(s):
    optional = [f"{name}{value}" for name, value in (("cp", s.cp), ("ep", s.ep), ("vpp", s.vpp)) if value > 1]
    flags = ["sp"] if s.sp else []
    return " ".join([f"tp{s.tp}", f"pp{s.pp}", f"dp{s.dp}", *optional, f"mbs{s.mbs}", f"z{s.zero}", *flags,
                     s.recompute.summary()])


def per_stage(stages):
    return RecomputePlan(mode="per-stage", stages=(StageRecompute(none=3, full=1),) * (stages - 1)
                         + (StageRecompute(selective=4),))


def strategies():
    for (tp, sp), cp, (ep, etp), vpp, zero, plan in itertools.product(
            [(1, False), (4, True), (8, False)], [1, 2], [(1, 1), (8, 1), (1, 2), (4, 2)], [1, 3], [0, 3],
            ["none", "full", "per-stage"]):
        plan = per_stage(2 * vpp) if plan == "per-stage" else RecomputePlan.uniform(plan)
        yield Strategy(dp=16, tp=tp, pp=2, cp=cp, ep=ep, etp=etp, vpp=vpp, mbs=2, mbn=8, zero=zero, sp=sp,
                       schedule="interleaved" if vpp > 1 else "1f1b", recompute=plan)


@pytest.mark.parametrize("strategy", list(strategies()), ids=str)
def test_each_report_format_is_unchanged(strategy):
    s = strategy
    assert strategy_text(s, experts_if_used=True) == degrees_text(s)
    assert strategy_text(s, PLOT_FIELDS, compact=True, experts_if_used=True, above_one=("vpp",)) == plot_label(s)
    assert strategy_text(s, EXPLAIN_FIELDS) == explain_text(s)
    assert strategy_text(s, VALIDATION_FIELDS, compact=True, above_one=("cp", "ep", "vpp")) == validation_label(s)
