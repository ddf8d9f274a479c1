"""The recompute frontier's report (ndcp/report/frontier.py): the least memory line says what the number is."""
from ndcp.solve.frontier import Frontier
from ndcp.specs.strategy import Strategy
from ndcp.specs.units import GIB


def _frontier(least_gib: float) -> Frontier:
    return Frontier(Strategy(), int(least_gib * GIB), solves=26, solve_seconds=0.25)


def test_at_a_confidence_the_least_memory_is_the_upper_edge_of_a_peak_not_the_peak():
    """At --confidence 0.9 a plan fits a cap when its peak's upper edge does, so the least cap (21.93 GiB for
    llama3-8b tp=2 pp=2 on 16 H100s) sits above the tightest plan's peak (20.79 GiB) in the table below it: the line
    says so, where it had read as a peak the table contradicted."""
    from ndcp.report.frontier import least_line
    assert least_line(_frontier(21.93), 0.9) == (
        "least memory any plan of it needs: 21.93 GiB, its peak's upper edge at 90 % (the table's peaks are point "
        "estimates, below their cap; --confidence 0 fits those; 26 plan solves, 0.25 s)")


def test_at_confidence_0_the_least_memory_is_a_peak():
    from ndcp.report.frontier import least_line
    assert least_line(_frontier(20.42), 0.0) == "least memory any plan of it needs: 20.42 GiB (26 plan solves, 0.25 s)"
