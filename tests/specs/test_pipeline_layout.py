"""Pipeline layouts as people write them: Megatron's notation, first/last stage counts, chunks of a device stage."""
import pytest
from hypothesis import given, settings, strategies as st

from ndcp.specs.fields import SpecError
from ndcp.specs.pipeline_layout import (check_layout, first_last_partition, megatron_layout, parse_layout,
                                        split_device_stages)
from ndcp.specs.strategy_input import parse_strategy_string, resolve_layout


def test_megatron_documentation_example_expands_to_32_stages():
    # Megatron-LM docs/api-guide/pipeline_parallel_layout.md: DeepSeek-V3 (61 layers + 1 MTP) on PP16 x VPP2.
    layout = parse_layout("Et*3|(tt|)*29,m|L")
    assert len(layout.stages) == 32
    assert layout.stages[0] == "Ettt" and layout.stages[1:30] == ("tt",) * 29
    assert layout.stages[-2:] == ("m", "L")
    assert sum(layout.layers_per_stage()) == 61


def test_mtp_must_sit_on_the_last_device_stage_where_ndcp_prices_it():
    # The documentation's example puts the MTP module on pp rank 14 (virtual stage 30 = chunk 1 of rank 14).
    with pytest.raises(SpecError, match="last device stage"):
        check_layout(parse_layout("Et*3|(tt|)*29,m|L"), 61, 1, 16)
    counts = check_layout(parse_layout("Ett|(tt|)*28,(t|)*2,tmL"), 61, 1, 16)
    assert counts == (2,) * 29 + (1, 1, 1)


@pytest.mark.parametrize("text,message", [
    ("Et*3|(tt", "'\\(' without '\\)'"), ("Ex|L", "unexpected 'x'"), ("*3", "repeats nothing"),
    ("(t*999)*99999", "too long"), ("t)", "without '\\('"), ("", "expected Megatron's notation")])
def test_malformed_layouts_are_refused_with_the_reason(text, message):
    with pytest.raises(SpecError, match=message):
        parse_layout(text)


@pytest.mark.parametrize("text,layers,message", [
    ("Et|t|tL", 3, "multiple of pp = 2"), ("Et|tL", 3, "holds 2 decoder layers"), ("t|EttL", 3, "embedding"),
    ("Et|tL|t|t", 4, "loss"), ("Et|t|ttL|", 4, "loss"), ("Et|tmL", 2, "MTP modules")])
def test_layouts_that_do_not_fit_the_model_are_refused(text, layers, message):
    with pytest.raises(SpecError, match=message):
        check_layout(parse_layout(text), layers, 0, 2)


def test_a_device_stage_without_a_layer_is_refused_but_an_empty_chunk_is_not():
    assert check_layout(parse_layout("Ett|t|t|L"), 4, 0, 2) == (2, 1, 1, 0)
    with pytest.raises(SpecError, match="device stage 1 holds no decoder layer"):
        check_layout(parse_layout("Ett|E|tt|L".replace("|E|", "||")), 4, 0, 2)


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(0, 9), min_size=1, max_size=24), mtp=st.integers(0, 2))
def test_megatron_notation_round_trips(counts, mtp):
    layout = parse_layout(megatron_layout(tuple(counts), mtp))
    assert layout.layers_per_stage() == tuple(counts)
    text = "|".join(layout.stages)
    assert text.count("E") == 1 and layout.stages[0].startswith("E")
    assert text.count("L") == 1 and layout.stages[-1].endswith("L") and text.count("m") == mtp


def test_first_and_last_stage_counts_as_megatron_splits_them():
    # Llama-3.1-405B's 126 layers on pp 16 with 7 on the first and last stages: 112 = 14 x 8 in between.
    assert first_last_partition(126, 16, 1, 7, 7) == (7,) + (8,) * 14 + (7,)
    assert first_last_partition(126, 16, 1, 6, None) == (6,) + (8,) * 15
    assert first_last_partition(64, 4, 2, 8, 8) == split_device_stages((8, 24, 24, 8), 2)
    with pytest.raises(SpecError, match="split the remaining 114 of 126 layers evenly"):
        first_last_partition(126, 16, 1, 6, 6)
    with pytest.raises(SpecError, match="multiple of 2"):
        first_last_partition(62, 4, 2, 7, 7)


@given(totals=st.lists(st.integers(1, 40), min_size=1, max_size=8), vpp=st.integers(1, 4))
def test_device_stage_totals_split_over_chunks_as_evenly_as_possible(totals, vpp):
    counts = split_device_stages(totals, vpp)
    pp = len(totals)
    for s, total in enumerate(totals):
        chunks = counts[s::pp]
        assert sum(chunks) == total and max(chunks) - min(chunks) <= 1


def test_strategy_string_layout_keeps_its_cosmetic_commas_and_sets_vpp():
    values = parse_strategy_string("tp=2,pp=16,layout=Ett|(tt|)*28,(t|)*2,tmL,mbs=1")
    assert values["mbs"] == 1 and values["tp"] == 2
    resolve_layout(values, 61, 1)
    assert values["vpp"] == 2 and values["layers_per_stage"] == (2,) * 29 + (1, 1, 1)
    assert "layout" not in values


def test_layout_keys_conflicting_with_vpp_or_each_other_are_refused():
    with pytest.raises(SpecError, match="vpp=4"):
        resolve_layout({"pp": 2, "vpp": 4, **parse_strategy_string("layout=Et|tL")}, 2, 0)
    with pytest.raises(SpecError, match="drop first_stage_layers"):
        resolve_layout({"pp": 2, **parse_strategy_string("layout=Et|tL,first_stage_layers=1")}, 2, 0)
    with pytest.raises(SpecError, match="conflicts"):
        resolve_layout({"pp": 2, "layers_per_stage": (3, 1), **parse_strategy_string("layout=Ett|ttL")}, 4, 0)
