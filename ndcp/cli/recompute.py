"""`ndcp recompute`: the memory-time frontier of one strategy's per-stage recompute plans."""
from __future__ import annotations

import argparse
import sys
import time

from ..report.plots import plot_frontier
from ..space import SearchSpace, SpaceOptions
from ..specs.fields import SpecError
from ..specs.strategy import RecomputePlan
from ..specs.strategy_text import strategy_text
from ..options import MAX_OFFSET, int32, positive_int, positive_seconds, size_list, workers
from ..launch import check_launch
from ..policy import build_problem, build_strategy, check_max_offset, gib_text, strategy_values, trainer_method
from .common import (EXIT_INFEASIBLE, EXIT_OK, EXIT_UNKNOWN, add_problem_arguments, add_quiet_argument, add_strategy_arguments,
                     console, subparser)
from .outputs import (add_emit_arguments, add_json_argument, check_emit_arguments, check_plot_path, emit_json,
                      output_path, stdout_owners, write_launch, write_plot)

# --emit writes the frontier's fastest plan. Under a trainer that runs one recompute option on every layer (the default
# megatron, torchtitan) the frontier holds only those plans; `--trainer any` solves per-stage plans.
EXAMPLE = ("ndcp recompute llama3-8b --device h100 --gpus 64 --global-batch 256 \\\n"
           "    --seq-len 8192 --strategy tp=2,pp=4,mbs=2,zero=1,sp=on \\\n"
           "    --emit megatron --emit-file run.sh\n"
           "ndcp recompute llama3-70b --device h100 --gpus 512 --global-batch 1024 \\\n"
           "    --seq-len 8192 --caps 40GiB,50GiB,60GiB,70GiB --trainer any \\\n"
           "    --json frontier.json")


def register(subparsers) -> None:
    parser = subparser(
        subparsers, "recompute", "memory-time frontier of one strategy's recompute plans",
        "For one strategy (degrees, SP and ZeRO fixed), the fastest per-stage recompute plan and layer partition "
        "under a sweep of memory caps, each solved exactly by CP-SAT and verified with the full estimators; under a "
        "trainer that runs one recompute option on every layer (the default megatron, torchtitan: --trainer), the "
        "fastest of those uniform plans, each priced in full; --trainer any for per-stage plans. "
        "Default caps: 12 from the least memory any plan needs up to the capacity (--memory-cap or the device). "
        "Without --strategy, the strategy is the best `ndcp search --recompute uniform` finds. "
        "Exit 0 when every cap has a plan (or the time limit or Ctrl-C stopped it after some: the caps left are listed), "
        "1 when some cap is below the least memory, 2 for usage errors, 4 when stopped before any plan.",
        EXAMPLE)
    add_problem_arguments(parser)
    add_strategy_arguments(parser, "as in `ndcp estimate` (its recompute is ignored); omitted: the best uniform "
                                   "search result", "strategy as YAML")
    group = parser.add_argument_group("frontier")
    group.add_argument("--caps", metavar="SIZE,...", type=size_list,
                       help="memory caps to solve under, e.g. 40GiB,50GiB,60GiB (default: 12 caps, least to capacity)")
    group.add_argument("--points", metavar="N", type=positive_int, default=12,
                       help="default caps (default 12, at most 200)")
    MAX_OFFSET.add_to(group)
    group.add_argument("--time-limit", metavar="SECONDS", type=positive_seconds, default=60.0,
                       help="time limit of the whole command, every plan solve and the search for the strategy "
                            "included; at it, the caps solved so far (default 60)")
    group.add_argument("--workers", metavar="N", type=workers, default=1, help="CP-SAT workers (default 1)")
    group.add_argument("--seed", metavar="S", type=int32, default=0, help="CP-SAT random seed (default 0)")
    group = parser.add_argument_group("output")
    add_json_argument(group)
    group.add_argument("--csv", metavar="PATH|-", type=output_path,
                       help="also write the frontier as CSV; `-` writes only the CSV")
    add_quiet_argument(group)
    group.add_argument("--plot", metavar="PATH", type=output_path,
                       help="plot step time vs cap (.png or .svg; needs matplotlib)")
    add_emit_arguments(group, "the fastest plan of the frontier")
    parser.set_defaults(func=run)


def _check_caps(args: argparse.Namespace) -> None:
    from ..solve.frontier import MAX_POINTS

    for option, value in (("--points", args.points), ("--caps", len(args.caps or ()))):
        if value > MAX_POINTS:
            raise SpecError(f"{option}: {value:,} caps is not valid; expected at most {MAX_POINTS} (each cap is a "
                            "plan solve)")


def _strategy(args: argparse.Namespace, space: SearchSpace):
    """The strategy whose frontier is asked: --strategy's, or the best uniform search's within half the time limit;
    an exit code when that search finds none."""
    from ..solve.search import SearchOptions, search

    if args.strategy or args.strategy_file:
        values = strategy_values(args)
        values.pop("layers_per_stage", None)
        values["recompute"] = "none"
        return build_strategy(space.model, space.cluster, space.run, values)
    found = search(space, "uniform", SearchOptions(top=1, time_limit=args.time_limit / 2, seed=args.seed,
                                                   workers=args.workers))
    if found.best is None:
        why = "fits" if found.status == "infeasible" else "was verified before the time limit or Ctrl-C"
        print(f"ndcp: {found.status}: no uniform-recompute strategy {why}; give one with --strategy", file=sys.stderr)
        return EXIT_INFEASIBLE if found.status == "infeasible" else EXIT_UNKNOWN
    return found.best.strategy


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: the frontier and the search import OR-Tools (~1 s, measured), which
    # `ndcp models`, `devices`, `estimate` and `validate` (~0.2 s each) should not pay for.
    from ..report.frontier import frontier_document, frontier_line, render_frontier, write_frontier_csv
    from ..solve.frontier import frontier

    start = time.perf_counter()
    _check_caps(args)
    model, cluster, run_spec = build_problem(args)
    json_only, csv_only = stdout_owners(args)
    check_max_offset(args.max_offset, model)
    check_emit_arguments(args, stdout_taken=json_only or csv_only)
    check_plot_path(args.plot)
    capacity = run_spec.capacity(cluster.device.memory_bytes)
    for cap in args.caps or ():
        if cap <= 0 or cap > cluster.device.memory_bytes:
            raise SpecError(f"--caps: {gib_text(cap)} is not valid; expected a size up to the {cluster.device.name} "
                            f"device memory ({gib_text(cluster.device.memory_bytes)})")
    space = SearchSpace(model, cluster, run_spec, SpaceOptions(max_offset=args.max_offset))
    strategy = _strategy(args, space)
    if isinstance(strategy, int):
        return strategy
    method = trainer_method(args, "per-layer")[0]  # the report's header says when the plans are uniform
    result = frontier(space, strategy, caps=args.caps, max_cap=capacity, count=args.points,
                      time_limit=max(0.0, args.time_limit - (time.perf_counter() - start)), seed=args.seed,
                      workers=args.workers, uniform=method != "per-layer")
    if args.csv:
        write_frontier_csv(model, result, args.csv)
    quiet = emit_json(args, frontier_document(model, result)) or csv_only
    if not quiet and args.quiet:
        print(frontier_line(result))
    elif not quiet:
        header = strategy_text(strategy.with_(recompute=RecomputePlan()), experts_if_used=True)
        render_frontier(console(), model, result, header, run_spec.confidence)
    if result.points and args.plot:
        points = [(p.cap_bytes, p.peak_bytes, p.step_seconds) for p in result.points] + [
            (c, None, None) for c in result.infeasible_caps]
        write_plot(args.plot, lambda path: plot_frontier(points, path))
    if result.points and args.emit and not write_launch(
            args, check_launch(args.emit, args, (model, cluster, run_spec), result.points[-1].strategy)):
        return EXIT_INFEASIBLE
    if result.stopped:
        print(f"ndcp: {'feasible' if result.points else 'unknown'}: {result.stopped} with "
              f"{len(result.unsolved_caps)} cap(s) unsolved", file=sys.stderr)
        return EXIT_OK if result.points else EXIT_UNKNOWN
    if result.least_bytes is None:
        print(f"ndcp: infeasible: no recompute plan of this strategy fits under "
              f"{gib_text(max(args.caps or [capacity]))}", file=sys.stderr)
        return EXIT_INFEASIBLE
    if result.infeasible_caps:
        caps = ", ".join(gib_text(c) for c in result.infeasible_caps)
        print(f"ndcp: infeasible: cap {caps} is below the least memory any recompute plan of this strategy needs "
              f"({gib_text(result.least_bytes)})", file=sys.stderr)
        return EXIT_INFEASIBLE
    return EXIT_OK


__all__ = ["register", "run", "EXAMPLE"]
