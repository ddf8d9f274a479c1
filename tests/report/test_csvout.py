"""The ranking CSV (ndcp/report/csvout.py): a row per verified strategy, with every setting that tells two ranked
plans apart."""
from types import SimpleNamespace

from ndcp.report.csvout import ranking_rows
from ndcp.specs.strategy import Strategy


def _evaluated(strategy: Strategy):
    memory = SimpleNamespace(peak_bytes=60 * 2**30, capacity_bytes=80 * 2**30, fits=True)
    time = SimpleNamespace(step_seconds=1.5, mfu=0.5, hfu=0.5, tokens_per_second_per_gpu=1e4, parts={"dp_comm": 0.1})
    return SimpleNamespace(strategy=strategy, memory=memory, time=time)


def test_plans_that_differ_only_in_cp_communication_hsdp_or_optimizer_offload_are_told_apart():
    """--cp-comm all, --hsdp both and --optimizer-offload both rank such twins separately; the CSV had no column for
    any of the three, so two of its rows could read the same."""
    base = Strategy(cp=4, dp=4, zero=3)
    twins = [base, base.with_(cp_comm="a2a"), base.with_(dp_shard=2), base.with_(zero=1, optimizer_offload=True)]
    header, rows = ranking_rows(SimpleNamespace(strategies=[_evaluated(s) for s in twins]))
    columns = [header.index(name) for name in ("cp_comm", "dp_shard", "optimizer_offload")]
    assert [[row[i] for i in columns] for row in rows] == [
        ["p2p", 0, "off"], ["a2a", 0, "off"], ["p2p", 2, "off"], ["p2p", 0, "on"]]
    assert len({tuple(row[1:header.index("peak_bytes")]) for row in rows}) == len(rows)
