"""The CP-SAT search proves the same optimum as the exhaustive oracle (same space, same estimators), on random
small models, clusters (scale-up domains larger than a node, tapered pods), batches and memory caps; its top-K agrees
with the oracle's up to ties."""
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from ndcp.solve.certificate import cpsat_search
from ndcp.solve.exhaustive import exhaustive_search
from ndcp.schedules import SCHEDULES
from ndcp.space import DEFAULT_SCHEDULES, SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, ModelSpec, MoESpec, RunSpec, device_preset
from ndcp.specs.encoder import EncoderSpec
from ndcp.specs.library import load_model
from ndcp.specs.mixers import LinearAttentionSpec, MambaSpec

TOP = 3
OVERLAP_SETTINGS = ["trainer", "none", "ep+tp+p2p"]  # RunSpec.overlap: the trainer's defaults, none, all asked


def _hybrid_layers(draw, layers: int, heads: int, moe) -> dict:
    """Hybrid layer kinds (docs/models.md §6): a random pattern of softmax attention, Gated DeltaNet and Mamba-2
    layers, each with its MLP, or (hybrid_blocks) of those mixers and MLP-only blocks, at least one MLP block in a
    MoE model."""
    blocks = draw(st.booleans())
    pattern = "".join(draw(st.lists(st.sampled_from("AGM-" if blocks else "AGM"), min_size=layers, max_size=layers)))
    if blocks and moe is not None and "-" not in pattern:
        pattern = pattern[:-1] + "-"
    return {"layer_mixers": pattern, "hybrid_blocks": blocks,
            "linear_attention": LinearAttentionSpec(key_heads=heads // 2, value_heads=heads, key_head_dim=32,
                                                    value_head_dim=32) if "G" in pattern else None,
            "mamba": MambaSpec(heads=2 * heads, head_dim=32, state=draw(st.sampled_from([16, 64])), groups=1)
            if "M" in pattern else None}


@st.composite
def problems(draw):
    heads = draw(st.sampled_from([4, 8, 16]))
    kv = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16) if heads % d == 0]))
    moe = None
    if draw(st.booleans()):
        experts = draw(st.sampled_from([4, 8]))
        moe = MoESpec(experts=experts, top_k=draw(st.sampled_from([1, 2])), expert_ffn_hidden=draw(st.sampled_from([128, 256])),
                      shared_experts=draw(st.sampled_from([0, 1])), first_dense_layers=draw(st.sampled_from([0, 1])))
    hidden = heads * draw(st.sampled_from([32, 64]))
    encoder = None  # a vision encoder and projector on the first stage (docs/models.md §5), fed 0-2 images
    if draw(st.booleans()):
        encoder = EncoderSpec(layers=draw(st.integers(1, 4)), hidden=draw(st.sampled_from([128, 256])), heads=4,
                              ffn_hidden=512, patch_size=14, image_size=draw(st.sampled_from([56, 112])),
                              output_hidden=hidden, projector=draw(st.sampled_from(["mlp", "linear"])))
    layers = draw(st.integers(2, 12))
    hybrid = _hybrid_layers(draw, layers, heads, moe) if draw(st.booleans()) else {}
    if hybrid.get("hybrid_blocks") and moe is not None:
        moe = MoESpec(experts=moe.experts, top_k=moe.top_k, expert_ffn_hidden=moe.expert_ffn_hidden)
    model = ModelSpec(name="random", layers=layers, hidden=hidden, **hybrid,
                      heads=heads, kv_heads=kv, ffn_hidden=draw(st.sampled_from([256, 512, 1024])),
                      vocab=draw(st.sampled_from([1000, 32000])),
                      activation=draw(st.sampled_from(["gelu", "swiglu", "squared_relu", "geglu"])),
                      tied_embeddings=draw(st.booleans()), moe=moe,
                      hidden_dropout=draw(st.sampled_from([0.0, 0.1])), encoder=encoder,
                      sliding_window=0 if hybrid else draw(st.sampled_from([0, 256])))
    device = device_preset(draw(st.sampled_from(["a100-80g", "h100", "mi300x"])))
    gpus = draw(st.sampled_from([1, 2, 4, 6, 8]))
    # Caps from so tight that nothing fits to generous (tiny models: a small reserve keeps caps meaningful).
    cap = draw(st.sampled_from([0, 2**22, 2**24, 2**26, 2**27, 2**28, 2**29, 2**30]))
    run = RunSpec(global_batch=draw(st.sampled_from([1, 2, 4, 8, 12, 16])), seq_len=draw(st.sampled_from([512, 2048])),
                  flash_attention=draw(st.booleans()), memory_cap_bytes=cap, reserve_bytes=2**20,
                  images_per_sample=draw(st.sampled_from([0, 1, 2])) if encoder else 0,
                  overlap=draw(st.sampled_from(OVERLAP_SETTINGS)),
                  # fits at a confidence: the point estimate, and margins from the evidence table (docs/evidence.md)
                  confidence=draw(st.sampled_from([0.0, 0.5, 0.9])))
    # the default schedules, or every schedule searched jointly (zero-bubble and DualPipe too)
    schedules = draw(st.sampled_from([DEFAULT_SCHEDULES, tuple(SCHEDULES)]))
    # optimizer offload searched too (its layouts run ZeRO 0/1 only: ZeRO-3 drops out of those items)
    offloads = draw(st.sampled_from([(False,), (False, True)]))
    # HSDP searched too (ZeRO-3 over the ranks of a domain, replicated across domains): nodes of two devices, so
    # that a few GPUs span several
    hsdp = draw(st.sampled_from([(False,), (False, True)]))
    cluster = ClusterSpec(device, gpus).with_overrides(devices_per_node=2) if True in hsdp else ClusterSpec(device, gpus)
    if draw(st.booleans()):  # scale-up domains larger than a node: nodes of one or two, 2:1 tapered pods or none
        domain = draw(st.sampled_from([2, 4]))
        cluster = cluster.with_overrides(devices_per_node=min(cluster.device.devices_per_node, domain // 2),
                                         devices_per_domain=domain, pod_size=draw(st.sampled_from([0, domain])),
                                         oversubscription=2.0)
    return SearchSpace(model, cluster, run, SpaceOptions(zero_stages=(1, 3), schedules=schedules,
                                                         optimizer_offloads=offloads, hsdp=hsdp))


def _times(result):
    return [e.step_seconds for e in result.strategies]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(space=problems())
def test_cpsat_optimum_equals_the_oracle(space):
    oracle = exhaustive_search(space, top=TOP)
    solved = cpsat_search(space, top=TOP, time_limit=60)
    event(f"oracle {oracle.status}, {oracle.over_memory and 'some' or 'none'} over memory")
    event(f"best schedule {oracle.strategies[0].strategy.schedule if oracle.strategies else '-'}")
    event(f"layers: {'hybrid blocks' if space.model.hybrid_blocks else 'hybrid' if space.model.layer_mixers else 'attention'}")
    device = space.cluster.device
    event("scale-up domain wider than a node" if device.domain_size > device.devices_per_node else "domain = node")
    assert solved.status == oracle.status
    if oracle.status == "infeasible":
        assert not solved.strategies
        return
    assert solved.proven and solved.gap == 0.0
    assert _times(solved) == pytest.approx(_times(oracle), rel=1e-9)
    assert solved.lower_bound_seconds <= solved.strategies[0].step_seconds * (1 + 1e-9)
    for e in solved.strategies:
        assert e.fits


@pytest.mark.parametrize("name,gpus,gbs,seq", [("llama3-8b", 16, 64, 4096), ("mixtral-8x7b", 16, 32, 4096)])
def test_cpsat_agrees_with_the_oracle_on_library_models(name, gpus, gbs, seq):
    space = SearchSpace(load_model(name), ClusterSpec(device_preset("h100"), gpus),
                        RunSpec(global_batch=gbs, seq_len=seq), SpaceOptions(zero_stages=(1,)))
    oracle, solved = exhaustive_search(space, top=5), cpsat_search(space, top=5)
    assert solved.status == "optimal"
    assert _times(solved) == pytest.approx(_times(oracle), rel=1e-9)
    assert solved.verified < oracle.verified / 10  # the proof prices a small fraction of the space


@pytest.mark.parametrize("fix", [(), (("ep", 8), ("tp", 4)), (("pp", 2), ("vpp", 2))])
def test_cpsat_agrees_with_the_oracle_on_folded_experts_and_uneven_interleaving(fix):
    """MoE parallel folding (ep*etp over a stage's tp*cp*dp ranks, so ep > dp*cp) and interleaving with mbn not a
    multiple of pp (current Megatron-Core) are walked, and the solver still proves the oracle's optimum."""
    space = SearchSpace(load_model("tiny-moe"), ClusterSpec(device_preset("h100"), 8),
                        RunSpec(global_batch=24, seq_len=1024), SpaceOptions(fix=fix, zero_stages=(1,)))
    batches = space.walk().batches
    folded = any(layout.ep > layout.dp * layout.cp for layout, _, _ in batches)
    uneven = any(layout.vpp > 1 and mbn % layout.pp for layout, _, mbn in batches)
    assert folded or "vpp" in dict(fix)
    assert uneven or "ep" in dict(fix)
    oracle, solved = exhaustive_search(space, top=5), cpsat_search(space, top=5)
    assert solved.status == oracle.status == "optimal"
    assert _times(solved) == pytest.approx(_times(oracle), rel=1e-9)


@pytest.mark.parametrize("name,first,last,cap", [("tiny", 1, 1, 0), ("tiny-moe", 2, 1, 0), ("tiny", 1, 2, 2**28),
                                                  ("tiny-moe", 1, 1, 2**28)])
def test_cpsat_agrees_with_the_oracle_with_bf16_first_and_last_layers(name, first, last, cap):
    """FP8 with the first and last layers in BF16 (RunSpec.bf16_layers; time.stage_extra_time and memory price
    them per stage): the solver's stage terms read the same functions, so it still proves the oracle's optimum, and
    every pp above layers / max(first, last) is refused by the rulebook (bf16_layers_pp)."""
    run = RunSpec(global_batch=16, seq_len=1024, precision="fp8", fp8_recipe="tensorwise", first_layers_bf16=first,
                  last_layers_bf16=last, memory_cap_bytes=cap, reserve_bytes=2**20)
    space = SearchSpace(load_model(name), ClusterSpec(device_preset("h100"), 8), run, SpaceOptions(zero_stages=(1,)))
    oracle, solved = exhaustive_search(space, top=5), cpsat_search(space, top=5)
    assert solved.status == oracle.status
    assert _times(solved) == pytest.approx(_times(oracle), rel=1e-9)
    most = space.model.layers // max(first, last)
    assert all(layout.pp <= most for layout, _, _ in space.walk().batches)


def test_same_inputs_same_answer():
    space = SearchSpace(load_model("tiny"), ClusterSpec(device_preset("h100"), 8), RunSpec(global_batch=32, seq_len=1024))
    first, second = cpsat_search(space, top=5, seed=0), cpsat_search(space, top=5, seed=0)
    assert [e.strategy for e in first.strategies] == [e.strategy for e in second.strategies]


@pytest.mark.parametrize("cap", [0, 2**26])
def test_cpsat_agrees_with_the_oracle_on_the_embedding_and_loss_accounted_split(cap):
    """6 layers on pp=2 x vpp=2: 6 % 4 != 0 but 6 + 2 splits (Megatron's accounted split, 1, 2, 2, 1) is walked,
    and the solver proves the oracle's optimum."""
    model = ModelSpec(name="six", layers=6, hidden=256, heads=4, kv_heads=4, ffn_hidden=512, vocab=1000)
    space = SearchSpace(model, ClusterSpec(device_preset("h100"), 4),
                        RunSpec(global_batch=8, seq_len=1024, memory_cap_bytes=cap, reserve_bytes=2**20),
                        SpaceOptions(fix=(("pp", 2),), zero_stages=(1,)))
    assert any(layout.vpp == 2 for layout, _, _ in space.walk().batches)
    oracle, solved = exhaustive_search(space, top=5), cpsat_search(space, top=5)
    assert solved.status == oracle.status
    assert _times(solved) == pytest.approx(_times(oracle), rel=1e-9)


@pytest.mark.parametrize("name,overlap", [("tiny-moe", "trainer"), ("tiny-moe", "ep+tp+p2p"), ("tiny", "none")])
def test_cpsat_agrees_with_the_oracle_when_every_schedule_is_searched(name, overlap):
    """Pipelined (pp = 2) so that the schedules differ: 1F1B, interleaving, ZB-H1, DualPipe, DualPipe-V and the
    overlaps searched jointly; a zero-bubble or DualPipe schedule wins."""
    space = SearchSpace(load_model(name), ClusterSpec(device_preset("h100"), 4),
                        RunSpec(global_batch=16, seq_len=2048, overlap=overlap),
                        SpaceOptions(zero_stages=(1,), fix=(("pp", 2),), schedules=tuple(SCHEDULES)))
    oracle, solved = exhaustive_search(space, top=TOP), cpsat_search(space, top=TOP, time_limit=60)
    assert solved.status == "optimal" and solved.proven
    assert _times(solved) == pytest.approx(_times(oracle), rel=1e-9)
    assert oracle.strategies[0].strategy.schedule in ("zb-h1", "dualpipe", "dualpipev")
