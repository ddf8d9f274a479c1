"""Ctrl-C during a search returns what is known, like the time limit: status `feasible`, the best verified strategies
(if any) and the proven bound, never a traceback. KeyboardInterrupt is raised at a chosen point of the search (a
real signal lands wherever the search happens to be; these pin the two phases it can land in)."""
import pytest

from ndcp.solve import certificate, coefficients, uniform
from ndcp.solve.certificate import cpsat_search
from ndcp.space import SearchSpace
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model

SPACE = SearchSpace(load_model("llama3-70b"), ClusterSpec(device_preset("h100"), 64),
                    RunSpec(global_batch=128, seq_len=8192))
# Under 60 GiB the per-layer search must solve plan sub-models (without a cap the uniform seeds already prove it).
TIGHT = SearchSpace(SPACE.model, SPACE.cluster, RunSpec(global_batch=128, seq_len=8192, memory_cap_bytes=60 * 2**30))


def interrupt_on_call(monkeypatch, module, name: str, call: int) -> None:
    """Make module.<name> raise KeyboardInterrupt on its `call`-th call."""
    original, calls = getattr(module, name), []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)


@pytest.mark.parametrize("module, name, call", [(coefficients, "pipeline_p2p_seconds", 100),  # bounding items
                                                 (uniform, "expand_item", 10)])
def test_interrupted_search_returns_feasible_with_a_bound(monkeypatch, module, name, call):
    interrupt_on_call(monkeypatch, module, name, call)
    result = cpsat_search(SPACE, top=10, time_limit=60)
    # a verified strategy by then: feasible with its bound; none yet: unknown, only the bound known
    assert result.status == ("feasible" if result.strategies else "unknown") and "interrupted" in result.explanation
    uninterrupted = cpsat_search(SPACE, top=1)
    assert result.lower_bound_seconds <= uninterrupted.strategies[0].step_seconds


@pytest.mark.parametrize("stop", ["timeout", "interrupt"])
def test_a_plan_model_that_stops_early_leaves_the_per_layer_search_unproven(monkeypatch, stop):
    """A sub-model that finds nothing before its time runs out is not 'no plan', and Ctrl-C during one stops the
    search: either way the search must not claim a proof, and its bound stays below the true optimum."""
    from ndcp.solve.recompute import PlanModel, PlanTimeout

    exact = certificate.plan_search(TIGHT, top=1, time_limit=60)
    original, calls = PlanModel.solve, []

    def first_stops(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise PlanTimeout if stop == "timeout" else KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PlanModel, "solve", first_stops)
    result = certificate.plan_search(TIGHT, top=1, time_limit=60)
    assert exact.status == "optimal" and result.status == "feasible"
    assert result.lower_bound_seconds <= exact.strategies[0].step_seconds * (1 + 1e-9)
    if stop == "interrupt":
        assert result.interrupted and len(calls) == 1  # the search stopped there


def test_a_real_sigint_during_a_cp_sat_solve_stops_it_at_once_and_is_raised():
    """CP-SAT would swallow SIGINT (it stops and returns as if out of time); Python alone would raise it only after
    the whole solve. The interrupt must stop the solve promptly and come out as KeyboardInterrupt."""
    import os
    import signal
    import threading
    import time

    from ortools.sat.python import cp_model

    from ndcp.solve.interrupt import solve

    model = cp_model.CpModel()
    xs = [model.new_bool_var(f"x{i}") for i in range(40)]
    model.add(sum((i * 7919) % 1009 * x for i, x in enumerate(xs)) == 7777)  # slow to enumerate

    class Count(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            pass

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 20.0
    solver.parameters.num_workers = 1
    solver.parameters.enumerate_all_solutions = True
    # the handler the process had (Python's default; ignored when started in the background of a shell without job
    # control): the solve installs its own and must put this one back
    before = signal.getsignal(signal.SIGINT)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        solve(solver, model, Count())
    timer.join()
    assert time.perf_counter() - start < 5.0
    assert signal.getsignal(signal.SIGINT) is before  # the handler is restored
    assert signal.set_wakeup_fd(-1) == -1  # and the wake-up fd


def test_ctrl_c_during_the_uniform_phase_stops_the_per_layer_search_with_a_valid_bound(monkeypatch):
    """The uniform search that seeds the per-layer one catches the interrupt; the per-layer search must stop too,
    and its bound must hold for per-layer plans (the uniform bound would not)."""
    exact = certificate.plan_search(SPACE, top=1, time_limit=60)
    interrupt_on_call(monkeypatch, uniform, "expand_item", 1)
    result = certificate.plan_search(SPACE, top=1, time_limit=60)
    assert result.status == ("feasible" if result.strategies else "unknown") and result.interrupted
    assert result.lower_bound_seconds <= exact.strategies[0].step_seconds * (1 + 1e-9)


def test_ctrl_c_after_items_are_expanded_but_before_the_first_solve_answers_with_a_verified_plan(monkeypatch):
    """The uniform search expands its cheapest items before its first solve; Ctrl-C there verifies the expanded
    items' fastest points (uniform.INTERRUPT_CANDIDATES) rather than answer `unknown`."""
    calls = []
    monkeypatch.setattr(uniform.StrategyModel, "optimize", lambda *args: calls.append(1))  # never reached
    interrupt_on_call(monkeypatch, uniform, "expand_item", 4)  # three items expanded
    result = cpsat_search(SPACE, top=10, time_limit=60)
    assert not calls and result.interrupted and result.status == "feasible" and result.strategies
    assert 1 <= result.verified <= uniform.INTERRUPT_CANDIDATES
    assert result.lower_bound_seconds <= result.strategies[0].step_seconds


@pytest.mark.parametrize("name", ["inner_choices", "_degree_key"])
def test_ctrl_c_between_the_uniform_phase_and_the_item_queue_keeps_the_uniform_plan(monkeypatch, name):
    """Ctrl-C as the uniform phase hands its verified plans over (plans._degree_key ranks them) or as the item
    queue is built (plans.inner_choices starts it): the answer is the uniform phase's verified plan and a bound
    valid for per-layer plans, not `unknown`."""
    from ndcp.solve import plans

    exact = certificate.plan_search(SPACE, top=1, time_limit=60)
    uniform_best = cpsat_search(SPACE, top=1, time_limit=60).strategies[0].step_seconds
    interrupt_on_call(monkeypatch, plans, name, 1)
    result = certificate.plan_search(SPACE, top=1, time_limit=60)
    assert result.interrupted and result.status == "feasible" and result.strategies
    assert result.strategies[0].step_seconds == pytest.approx(uniform_best)  # the uniform phase's optimum
    assert result.lower_bound_seconds <= exact.strategies[0].step_seconds * (1 + 1e-9)
