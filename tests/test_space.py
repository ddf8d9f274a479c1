"""The declared space: named validity rules, refusal counts, --fix/--max, and strategy checks with clear errors."""

from ndcp.rules import check_strategy
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model

LLAMA = load_model("llama3-8b")  # 32 heads, 8 KV heads, 32 layers
H100 = device_preset("h100")


def space(gpus=16, gbs=64, seq=4096, **options):
    return SearchSpace(LLAMA, ClusterSpec(H100, gpus), RunSpec(global_batch=gbs, seq_len=seq), SpaceOptions(**options))


def test_every_candidate_obeys_every_rule():
    s = space()
    candidates = list(s.candidates())
    assert len(candidates) == s.size(s.walk()) > 0
    for c in candidates:
        check_strategy(s.model, s.cluster, s.run, c)
        assert c.devices == 16 and c.global_batch == 64 and c.mbn >= c.pp
        assert c.tp <= 8 and LLAMA.num_kv_heads % c.tp == 0
        assert not c.sp or c.tp > 1
        assert c.vpp == 1 or (LLAMA.layers >= c.pp * c.vpp and c.mbn >= c.pp)  # a layer per chunk; Megatron's group


def test_hsdp_is_searched_when_asked_over_the_ranks_of_a_node_under_zero3():
    s = space(hsdp=(False, True), zero_stages=(1, 3))
    candidates = list(s.candidates())
    assert len(candidates) == s.size(s.walk())
    hsdp = [c for c in candidates if c.dp_shard]
    assert hsdp and all(c.zero == 3 and c.dp_shard == 8 // (c.tp * c.cp) < c.dp for c in hsdp)
    for c in hsdp:
        check_strategy(s.model, s.cluster, s.run, c)
    plain = space(zero_stages=(1, 3))
    assert len(candidates) == plain.size(plain.walk()) + len(hsdp)  # the plain space, and HSDP beside it
    assert space(hsdp=(True,), zero_stages=(1,)).walk().refused["dp_shard"] > 0  # HSDP is ZeRO-3


def test_refusals_are_counted_by_rule_name():
    walk = space(gpus=32, gbs=8).walk()
    assert walk.refused["tp_heads"] == 2  # tp = 16, 32 do not divide 8 KV heads: counted once each
    assert walk.refused["mbn_pp"] > 0  # with gbs 8, many pp have too few micro-batches
    assert walk.refused["global_batch"] > 0  # dp = 16, 32 do not divide 8
    gpt3 = SearchSpace(load_model("gpt3-175b"), ClusterSpec(H100, 32), RunSpec(global_batch=64, seq_len=2048))
    assert gpt3.walk().refused["tp_cp_node"] == 2  # tp = 16, 32 divide 96 heads but exceed a node of 8


def test_fix_and_max_pin_dimensions():
    s = space(fix=(("tp", 2), ("pp", 2)), max=(("mbs", 2),))
    candidates = list(s.candidates())
    assert candidates and all(c.tp == 2 and c.pp == 2 and c.mbs <= 2 for c in candidates)
    assert s.walk().refused["fixed"] > 0


def test_global_batch_that_cannot_be_split_leaves_an_empty_space():
    walk = space(gpus=16, gbs=1, max=(("cp", 1),)).walk()
    assert walk.batches == [] and walk.refused["global_batch"] > 0


def test_moe_dimensions_pinned_on_dense_models():
    assert {c.ep for c in space().candidates()} == {1}


def test_a_walk_told_time_is_up_stops_with_what_it_reached():
    s = space(gpus=32)
    full = s.walk()
    asked = []

    def expired() -> bool:  # time runs out at the third (tp, pp, cp) the walk reaches
        asked.append(1)
        return len(asked) > 2

    partial = s.walk(expired)
    assert full.complete and not partial.complete
    assert 0 < len(partial.batches) < len(full.batches)
    assert partial.batches == full.batches[:len(partial.batches)]
    assert s.walk(lambda: False).batches == full.batches
