"""Interleaved 1F1B for any mbn >= pp: replay the per-device op order Megatron-Core runs (main, 2025,
schedules.py forward_backward_pipelining_with_interleaving: micro-batches in groups of g per model chunk, warm-up
2(pp - rank - 1) + (vpp - 1) g forwards, then one forward one backward, then the cool-down backwards) as a
dependency graph, and check the critical path and in-flight counts ndcp uses (docs/formulas.md §4)."""
import pytest

from ndcp.schedules import schedule_named

INTERLEAVED = schedule_named("interleaved")


def _orders(pp: int, vpp: int, mbn: int, g: int) -> list[list[tuple[str, int, int]]]:
    """Each device's ops (kind, micro-batch, chunk) in run order."""
    table = [(mb, c) for first in range(0, mbn, g) for c in range(vpp) for mb in range(first, min(first + g, mbn))]
    total = len(table)
    orders = []
    for rank in range(pp):
        warmup = total if mbn == pp else min(2 * (pp - rank - 1) + (vpp - 1) * g, total)
        forwards = [("F", mb, c) for mb, c in table]
        backwards = [("B", mb, vpp - 1 - c) for mb, c in table]
        order = forwards[:warmup]
        for i in range(total - warmup):
            order += [forwards[warmup + i], backwards[i]]
        orders.append(order + backwards[total - warmup:])
    return orders


def replay(pp: int, vpp: int, mbn: int, g: int, fwd: float, bwd: float) -> tuple[float, list[int]]:
    """Makespan and each device's peak of live chunk activations, every chunk taking fwd / bwd seconds."""
    orders = _orders(pp, vpp, mbn, g)
    finished: dict[tuple, float] = {}
    position, free, live, peak = [0] * pp, [0.0] * pp, [0] * pp, [0] * pp
    moved = True
    while moved:
        moved = False
        for rank in range(pp):
            while position[rank] < len(orders[rank]):
                kind, mb, c = orders[rank][position[rank]]
                if kind == "F":  # virtual stage c*pp + rank needs the previous virtual stage's forward
                    dep = ("F", mb, c, rank - 1) if rank else (("F", mb, c - 1, pp - 1) if c else None)
                else:  # ... and the next virtual stage's backward (the last one: its own forward)
                    dep = (("B", mb, c, rank + 1) if rank < pp - 1
                           else ("B", mb, c + 1, 0) if c < vpp - 1 else ("F", mb, c, rank))
                if dep is not None and dep not in finished:
                    break
                free[rank] = max(free[rank], finished.get(dep, 0.0)) + (fwd if kind == "F" else bwd)
                finished[(kind, mb, c, rank)] = free[rank]
                live[rank] += 1 if kind == "F" else -1
                peak[rank] = max(peak[rank], live[rank])
                position[rank] += 1
                moved = True
    assert position == [len(o) for o in orders], "the order deadlocks"
    return max(free), peak


CASES = [(pp, vpp, mbn) for pp in (2, 3, 4, 5, 8) for vpp in (2, 3, 4) for mbn in range(pp, 3 * pp + 2)]


@pytest.mark.parametrize("pp,vpp,mbn", CASES)
def test_critical_path_and_in_flight_hold_for_any_mbn_from_pp(pp, vpp, mbn):
    g = INTERLEAVED.group_size(pp, mbn)
    assert pp <= g <= mbn and (mbn % g == 0 or mbn % g >= pp)  # what Megatron-Core accepts
    fwd, bwd = 1.0, 2.0
    makespan, peak = replay(pp, vpp, mbn, g, fwd, bwd)
    stage = vpp * (fwd + bwd)  # one micro-batch through a device stage's chunks
    assert INTERLEAVED.pipeline_seconds(pp * stage, stage, mbn, vpp, pp) == pytest.approx(makespan)
    if mbn > pp:  # mbn == pp: Megatron runs every forward first, which in_flight does not model
        assert [INTERLEAVED.in_flight(s, pp, vpp, mbn) for s in range(pp)] == peak


def test_group_size_is_pp_on_multiples_and_megatrons_smallest_otherwise():
    assert INTERLEAVED.group_size(4, 8) == 4 and INTERLEAVED.group_size(4, 9) == 5  # 9 = 5 + 4
    assert INTERLEAVED.group_size(4, 6) == 6  # g = 4 or 5 would leave a last group of 2 or 1 < pp
    assert INTERLEAVED.refusal(32, 4, 2, 6) is None and INTERLEAVED.refusal(32, 4, 2, 3).rule == "vpp_mbn"
