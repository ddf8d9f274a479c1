"""The validated alternative (ndcp/solve/validated.py): the feature names it restricts are the ones plan_features
gives, the restricted space leaves out exactly the unevidenced ones, and a winner resting on an unevidenced schedule
gets the best evidenced strategy beside it, proven by the same search."""
from dataclasses import replace

from ndcp.estimate.evidence import EVIDENCED_FEATURES, plan_features
from ndcp.schedules import SCHEDULES
from ndcp.solve.search import SearchOptions, search
from ndcp.solve.validated import (CP_FEATURE, HSDP_FEATURE, OPTIMIZER_OFFLOAD_FEATURE, ZERO_FEATURES, cp_comm_feature,
                                  evidenced_options, validated_alternative)
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model

TINY = load_model("tiny")
RUN = RunSpec(global_batch=16, seq_len=2048, overlap="none")


def features(**strategy) -> frozenset[str]:
    return plan_features(TINY, Strategy(**strategy), RUN)


def test_the_restricted_feature_names_are_plan_features_own():
    for zero, name in ZERO_FEATURES.items():
        assert name in features(dp=4, zero=zero)
    assert HSDP_FEATURE in features(dp=4, zero=3, dp_shard=2)
    assert {CP_FEATURE, cp_comm_feature("a2a")} <= features(cp=2, cp_comm="a2a")
    assert OPTIMIZER_OFFLOAD_FEATURE in features(optimizer_offload=True)
    for schedule in SCHEDULES:
        assert schedule in features(pp=2, schedule=schedule, vpp=2 if schedule == "interleaved" else 1)


def test_the_restricted_space_leaves_out_exactly_the_unevidenced_features():
    options = SpaceOptions(schedules=tuple(SCHEDULES), optimizer_offloads=(False, True), hsdp=(False, True),
                           cp_comms=("p2p", "a2a"))
    evidenced = frozenset({"zero-1", "fsdp", "no recompute", "full recompute", "1f1b", "context parallel",
                           "cp comm p2p"})
    restricted = evidenced_options(options, evidenced)
    assert restricted.zero_stages == (1, 3) and restricted.recompute_modes == ("none", "full")
    assert restricted.schedules == ("1f1b",) and restricted.cp_comms == ("p2p",)
    assert restricted.optimizer_offloads == (False,) and restricted.hsdp == (False,)
    assert evidenced_options(options, evidenced - {"context parallel"}).max == (("cp", 1),)
    assert evidenced_options(options, evidenced - {"1f1b"}).max == (("pp", 1),)
    assert evidenced_options(options, frozenset({"zero-1"})) is None  # no recompute option is left


def test_a_winner_on_an_unevidenced_schedule_gets_the_best_evidenced_strategy_beside_it():
    space = SearchSpace(TINY, ClusterSpec(device_preset("h100"), 4), RUN,
                        SpaceOptions(zero_stages=(1,), fix=(("pp", 2),), schedules=tuple(SCHEDULES)))
    options = SearchOptions(top=3)
    result = search(space, "uniform", options)
    winner = result.best.strategy
    assert winner.schedule not in EVIDENCED_FEATURES
    found = validated_alternative(space, "uniform", result, options)
    assert winner.schedule in found.missing
    alternative = found.result.best
    assert found.result.status == "optimal"
    assert alternative.strategy.schedule in EVIDENCED_FEATURES
    assert alternative.step_seconds >= result.best.step_seconds
    evidenced = replace(space, options=evidenced_options(space.options))
    assert alternative.step_seconds == search(evidenced, "uniform", SearchOptions(top=1)).best.step_seconds


def test_a_validated_winner_has_no_alternative():
    run = replace(RUN, overlap="trainer")
    space = SearchSpace(TINY, ClusterSpec(device_preset("h100"), 4), run, SpaceOptions(zero_stages=(1,)))
    options = SearchOptions(top=1)
    result = search(space, "uniform", options)
    assert not plan_features(TINY, result.best.strategy, run, "h100") - EVIDENCED_FEATURES
    assert validated_alternative(space, "uniform", result, options) is None


def test_a_winner_lacking_evidence_only_in_the_run_s_own_settings_has_no_alternative_to_search():
    run = replace(RUN, overlap="trainer", precision="fp8", fp8_recipe="blockwise")  # no measured run states it
    space = SearchSpace(TINY, ClusterSpec(device_preset("h100"), 4), run, SpaceOptions(zero_stages=(1,)))
    options = SearchOptions(top=1)
    found = validated_alternative(space, "uniform", search(space, "uniform", options), options)
    assert found.missing == ("fp8 blockwise",) and found.result is None
