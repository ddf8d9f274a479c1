"""The typed keys the estimators compute and cache their terms by (estimate/keys.py)."""
import ast
import inspect
from dataclasses import replace

import pytest

from ndcp.estimate import keys
from ndcp.estimate.activations import layer_activation_bytes
from ndcp.estimate.data_parallel import data_parallel_terms
from ndcp.estimate.keys import Degrees, LayerKey, PlacementKey, StageKey
from ndcp.estimate.layer_time import layer_time
from ndcp.estimate.overlap import NO_OVERLAP
from ndcp.estimate.time import stage_extra_time
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model

CLUSTER = ClusterSpec(device_preset("h100"), 64)
RUN = RunSpec(global_batch=64, seq_len=4096)
MIXTRAL = load_model("mixtral-8x7b")
STRATEGY = Strategy(dp=2, tp=2, pp=4, cp=2, ep=2, etp=1, vpp=2, mbs=2, mbn=16, sp=True, zero=1,
                    schedule="interleaved")


@pytest.mark.parametrize("cls", [getattr(keys, name) for name in keys.__all__])
def test_every_field_has_a_docstring(cls):
    """Each field is followed by its docstring in the class body (the way torchtitan documents its config)."""
    body = ast.parse(inspect.getsource(cls)).body[0].body
    documented = {node.target.id for node, after in zip(body, body[1:])
                  if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                  and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)}
    assert documented == set(cls._fields)


def test_degrees_come_from_a_strategy_or_a_layout_with_a_micro_batch():
    degrees = Degrees.of_strategy(STRATEGY)
    assert degrees == Degrees(tp=2, cp=2, ep=2, etp=1, mbs=2, sp=True)
    assert Degrees.of(STRATEGY, 4, False) == degrees._replace(mbs=4, sp=False)
    assert degrees.tokens(4096) == 2 * 4096 / 2  # mbs sequences of seq / cp tokens


def test_a_stage_key_names_the_layers_run_the_same_way():
    stage = StageKey(Degrees(2, 1, 1, 1, 1, True), "a2a", frozenset({"tp"}))
    assert stage.layer("dense", "full") == LayerKey("dense", "full", stage.degrees, "a2a", frozenset({"tp"}))
    assert StageKey(stage.degrees).layer("moe", "none") == LayerKey("moe", "none", stage.degrees, "p2p", NO_OVERLAP)


def test_a_placement_key_is_what_places_the_parameters():
    assert PlacementKey.of(STRATEGY) == PlacementKey(pp=4, vpp=2, layers_per_stage=(), tp=2, cp=2, dp=2, ep=2, etp=1,
                                                     schedule="interleaved")
    # what does not place parameters is not in the key: the ZeRO stage, the micro-batches, SP
    other = Strategy(dp=2, tp=2, pp=4, cp=2, ep=2, etp=1, vpp=2, mbs=1, mbn=32, sp=False, zero=3,
                     schedule="interleaved")
    assert PlacementKey.of(other) == PlacementKey.of(STRATEGY)
    # at the same ZeRO stage the two share one cached computation of their data-parallel terms
    assert (data_parallel_terms(MIXTRAL, CLUSTER, RUN, replace(other, zero=1))
            is data_parallel_terms(MIXTRAL, CLUSTER, RUN, STRATEGY))


def test_a_dense_layer_shares_its_time_across_expert_degrees_and_cp_comm_without_cp():
    """layer_time keys its cache by what the layer depends on: the same cached LayerTime, not only an equal one."""
    llama = load_model("llama3-8b")
    plain = layer_time(llama, CLUSTER, RUN, LayerKey("dense", "selective", Degrees(2, 1, 1, 1, 1, True)))
    assert layer_time(llama, CLUSTER, RUN, LayerKey("dense", "selective", Degrees(2, 1, 8, 2, 1, True),
                                                    "a2a", frozenset({"p2p"}))) is plain
    moe = Degrees(2, 1, 8, 1, 1, True)
    assert (layer_time(MIXTRAL, CLUSTER, RUN, LayerKey("moe", "none", moe))
            != layer_time(MIXTRAL, CLUSTER, RUN, LayerKey("moe", "none", moe._replace(ep=2))))


def test_keys_hash_and_compare_as_the_tuples_of_their_fields():
    """Named tuples: a key is as cheap to hash as the loose scalars it replaces, and equal keys share a cache entry."""
    degrees = Degrees(4, 2, 1, 1, 1, False)
    assert degrees == (4, 2, 1, 1, 1, False) and hash(degrees) == hash((4, 2, 1, 1, 1, False))
    assert (layer_activation_bytes(MIXTRAL, RUN, "moe", "full", degrees)
            is layer_activation_bytes(MIXTRAL, RUN, "moe", "full", Degrees(4, 2, 1, 1, 1, False)))


def test_the_first_stage_extra_does_not_depend_on_the_mtp_settings():
    """Embedding work shares its cached time across ep, etp, cp_comm and overlaps (only the MTP modules read them)."""
    first = stage_extra_time(MIXTRAL, CLUSTER, RUN, "first", StageKey(Degrees(2, 2, 1, 1, 1, True)))
    assert stage_extra_time(MIXTRAL, CLUSTER, RUN, "first",
                            StageKey(Degrees(2, 2, 8, 2, 1, True), "a2a", frozenset({"ep"}))) is first
