"""The options table (ndcp.options): one run option per RunSpec field, its help the field's docstring; the command
line's flags built from it; API keywords read as the flags' text is."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from ndcp.cli import build_parser
from ndcp.options import (NOT_ON_COMMAND_LINE, RUN_OPTIONS, SEARCH_KEYWORDS, SPACE_OPTIONS, confidence, flag_text,
                          headroom_fraction, keyword_values)
from ndcp.policy import build_run, build_space_options
from ndcp.specs.fields import SpecError, field_docs
from ndcp.specs.run import RunSpec

FIELDS = [f.name for f in dataclasses.fields(RunSpec)]


def test_every_run_field_has_one_option_or_is_named_as_having_none():
    given = [option.field for option in RUN_OPTIONS]
    assert len(given) == len(set(given))
    assert sorted(given + list(NOT_ON_COMMAND_LINE)) == sorted(FIELDS)


def test_a_run_options_help_is_its_fields_docstring():
    docs = field_docs(RunSpec)
    for option in RUN_OPTIONS:
        if option.switch is not False:  # --no-flash-attention says what the switch does
            assert option.help.startswith(docs[option.field]), option.flag


# The run flags a command replaces with its own (sweep: lists of points).
REPLACED = {"sweep": {"--global-batch", "--seq-len"}}


@pytest.mark.parametrize("command", ["estimate", "search", "recompute", "sweep"])
def test_the_commands_take_every_run_flag_with_its_help(command):
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    actions = {s: a for a in subparsers.choices[command]._actions for s in a.option_strings}
    for option in RUN_OPTIONS:
        if option.flag in REPLACED.get(command, ()):
            continue
        assert actions[option.flag].help == option.help.replace("%", "%%")
        assert actions[option.flag].dest == option.name


def test_the_run_of_the_defaults_is_the_default_run():
    values = keyword_values(SEARCH_KEYWORDS, {"device": "h100", "gpus": 8, "global_batch": 32, "seq_len": 4096})
    values.model = "tiny"
    assert build_run(values) == RunSpec(global_batch=32, seq_len=4096)


def test_each_run_option_reaches_its_field():
    values = keyword_values(SEARCH_KEYWORDS, {
        "device": "h100", "gpus": 8, "global_batch": 64, "seq_len": "8k", "memory_cap": "40GiB", "reserve": "2GiB",
        "headroom": 0.1, "precision": "fp8", "fp8_recipe": "blockwise", "optimizer_state_dtype": "bf16",
        "activation_func_fp8_input_store": True, "grad_dtype": "bf16", "no_flash_attention": True,
        "attention_kernel": "triton", "torch_compile": True, "compile_loss": True, "qkv_projections": "separate",
        "trainer": "torchtitan", "grad_sync": "step", "param_gather": "step", "fsdp_version": "fsdp2",
        "overlap": " TP ",
        "mfu_convention": "full", "images_per_sample": 2, "image_size": 336,
        "moe_dispatcher": "flex", "moe_load_imbalance": "1.25", "confidence": "0.5"})
    values.model = "tiny"
    run = build_run(values)
    assert run == RunSpec(global_batch=64, seq_len=8192, memory_cap_bytes=40 * 2**30, reserve_bytes=2 * 2**30,
                          headroom_fraction=0.1, precision="fp8", fp8_recipe="blockwise", optimizer_state_dtype="bf16",
                          activation_func_fp8_input_store=True, grad_dtype="bf16", flash_attention=False,
                          attention_kernel="triton", torch_compile=True, compile_loss=True,
                          qkv_projections="separate", trainer="torchtitan",
                          grad_sync="step", param_gather="step", fsdp_version="fsdp2", overlap="tp",
                          mfu_convention="full",
                          images_per_sample=2, image_size=336,
                          moe_dispatcher="flex", moe_load_imbalance=1.25, confidence=0.5)
    changed = {f for f in FIELDS if getattr(run, f) != getattr(RunSpec(32, 4096), f)}
    # every option was exercised (the Megatron-only ones below; torch_compile, compile_loss and qkv_projections
    # being torchtitan's)
    assert changed == set(FIELDS) - set(NOT_ON_COMMAND_LINE) - set(MEGATRON_ONLY)


MEGATRON_ONLY = ("disable_parameter_transpose_cache", "wgrad_deferral_limit", "delay_wgrad_compute", "loss_kernel",
                 "first_layers_bf16", "last_layers_bf16")


def test_the_megatron_memory_options_reach_their_fields():
    values = keyword_values(SEARCH_KEYWORDS, {"device": "h100", "gpus": 8, "global_batch": 64, "seq_len": 4096,
                                              "disable_parameter_transpose_cache": True, "wgrad_deferral_limit": 22,
                                              "loss_kernel": "native"})
    values.model = "tiny"
    run = build_run(values)
    assert (run.disable_parameter_transpose_cache, run.wgrad_deferral_limit, run.loss_kernel) == (True, 22, "native")
    every = keyword_values(SEARCH_KEYWORDS, {"device": "h100", "gpus": 8, "global_batch": 64, "seq_len": 4096,
                                             "wgrad_deferral_limit": 0})
    every.model = "tiny"
    assert build_run(every).wgrad_deferral_limit == 0  # Megatron's 0: every micro-batch deferred


@pytest.mark.parametrize("field,value", [("disable_parameter_transpose_cache", True), ("wgrad_deferral_limit", 4),
                                         ("loss_kernel", "te")])
def test_the_megatron_memory_options_are_refused_for_other_trainers(field, value):
    with pytest.raises(SpecError, match=f"{field}=.* valid with trainer megatron only"):
        RunSpec(64, 4096, trainer="torchtitan", **{field: value})


def test_fsdp1_reaches_its_field_and_is_refused_where_the_trainer_cannot_run_it():
    values = keyword_values(SEARCH_KEYWORDS, {"device": "h100", "gpus": 8, "global_batch": 64, "seq_len": 4096,
                                              "fsdp_version": "fsdp1"})
    values.model = "tiny"
    assert build_run(values).fsdp_version == "fsdp1"  # megatron's memory behaviour, FSDP1's gradient passes
    with pytest.raises(SpecError, match="fsdp_version='fsdp1' is not valid; valid with trainer torchtitan: "
                                        "trainer, fsdp2"):
        RunSpec(64, 4096, trainer="torchtitan", fsdp_version="fsdp1")
    with pytest.raises(SpecError, match="valid with trainer mindformers: trainer$"):
        RunSpec(64, 4096, trainer="mindformers", fsdp_version="fsdp2")
    with pytest.raises(SpecError, match="argument --fsdp-version: invalid choice: 'fsdp3'"):
        keyword_values(SEARCH_KEYWORDS, {"fsdp_version": "fsdp3"})


def test_delayed_weight_gradients_reach_their_field_under_the_expert_overlap_only():
    """--delay-wgrad-compute: Megatron only, and with an --overlap that names ep, as Megatron-Core's
    TransformerConfig.__post_init__ requires overlap_moe_expert_parallel_comm with it."""
    given = {"device": "h100", "gpus": 8, "global_batch": 64, "seq_len": 4096, "delay_wgrad_compute": True}
    values = keyword_values(SEARCH_KEYWORDS, {**given, "overlap": "ep+p2p"})
    values.model = "tiny"
    assert build_run(values).delay_wgrad_compute is True
    alone = keyword_values(SEARCH_KEYWORDS, given)
    alone.model = "tiny"
    with pytest.raises(SpecError, match=r"delay_wgrad_compute=True is not valid; Megatron delays the weight "
                                        r"gradients only under the expert all-to-all overlap: valid with an overlap "
                                        r"that names ep \(overlap is trainer\)"):
        build_run(alone)
    with pytest.raises(SpecError, match="delay_wgrad_compute=.* valid with trainer megatron only"):
        RunSpec(64, 4096, trainer="torchtitan", overlap="ep", delay_wgrad_compute=True)


def test_bf16_first_and_last_layers_reach_their_fields_in_an_fp8_run_with_a_per_layer_recipe_only():
    """--first-layers-bf16 / --last-layers-bf16: Megatron's --first-last-layers-bf16 counts, which do something only
    under FP8 and which Megatron-Core refuses under delayed scaling (TransformerConfig.__post_init__ @d98e8a6)."""
    given = {"device": "h100", "gpus": 8, "global_batch": 64, "seq_len": 4096, "first_layers_bf16": "2",
             "last_layers_bf16": "1"}
    values = keyword_values(SEARCH_KEYWORDS, {**given, "precision": "fp8", "fp8_recipe": "tensorwise"})
    values.model = "tiny"
    run = build_run(values)
    assert (run.first_layers_bf16, run.last_layers_bf16, run.bf16_layers) == (2, 1, (2, 1))
    bf16 = keyword_values(SEARCH_KEYWORDS, given)
    bf16.model = "tiny"
    with pytest.raises(SpecError, match=r"first_layers_bf16=2 is not valid; BF16 first/last layers exist only "
                                        r"inside an FP8 run: valid with precision fp8 \(precision is bf16\)"):
        build_run(bf16)
    delayed = keyword_values(SEARCH_KEYWORDS, {**given, "precision": "fp8"})
    delayed.model = "tiny"
    with pytest.raises(SpecError, match="Megatron-Core refuses BF16 first/last layers under delayed scaling: valid "
                                        "with fp8_recipe tensorwise, blockwise or mxfp8"):
        build_run(delayed)
    with pytest.raises(SpecError, match="last_layers_bf16=1 is not valid; a Megatron setting"):
        RunSpec(64, 4096, trainer="torchtitan", last_layers_bf16=1)


def test_a_negative_wgrad_deferral_limit_is_refused():
    with pytest.raises(SpecError, match=r"wgrad_deferral_limit=-1 is not valid; expected an integer >= 0"):
        RunSpec(64, 4096, wgrad_deferral_limit=-1)


def test_python_values_are_written_as_the_flags_text():
    assert flag_text({"tp": 8, "sp": True}) == "tp=8,sp=on"
    assert flag_text((0, 1)) == "0,1" and flag_text(False) == "off" and flag_text(8192) == "8192"
    values = keyword_values(SPACE_OPTIONS, {"fix": {"tp": 2, "pp": 4}, "zero": [3, 1], "sp": False, "max_offset": 1})
    assert (values.fix, values.zero, values.sp, values.max_offset) == ("tp=2,pp=4", (1, 3), "off", 1)
    assert keyword_values(SPACE_OPTIONS, {"fix": None}).fix == ""  # None: not given


def test_a_keyword_is_refused_with_the_flags_message():
    with pytest.raises(SpecError, match=r"^argument --zero: invalid ZeRO stage '4'"):
        keyword_values(SPACE_OPTIONS, {"zero": (0, 4)})
    with pytest.raises(SpecError, match=r"^argument --sp: invalid choice: 'sometimes' \(choose from 'on', 'off', "):
        keyword_values(SPACE_OPTIONS, {"sp": "sometimes"})
    with pytest.raises(SpecError, match=r"^argument --exhaustive: expected True or False"):
        keyword_values(SEARCH_KEYWORDS, {"exhaustive": "yes"})


@pytest.mark.parametrize("given, searched", [(None, (False,)), ("off", (False,)), ("on", (True,)),
                                             ("both", (False, True)), (True, (True,))])
def test_hsdp_is_off_unless_asked_on_every_command_that_searches(given, searched):
    """--hsdp (SpaceOptions.hsdp): off by default (no measured run validates HSDP's own terms); the API takes the
    same words, True as on. search, replan and sweep take the flag."""
    values = keyword_values(SEARCH_KEYWORDS, {"hsdp": given})
    assert build_space_options(values).hsdp == searched
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    hsdp = next(o for o in SPACE_OPTIONS if o.flag == "--hsdp")
    for command in ("search", "replan", "sweep"):
        actions = {s: a for a in subparsers.choices[command]._actions for s in a.option_strings}
        assert (actions["--hsdp"].help, actions["--hsdp"].default) == (hsdp.help.replace("%", "%%"), "off")


@pytest.mark.parametrize("parse, text, message", [
    (headroom_fraction, "abc", "invalid value 'abc': expected a fraction >= 0 and < 1, e.g. 0.1"),
    (headroom_fraction, "1", "invalid value '1': expected a fraction >= 0 and < 1, e.g. 0.1"),
    (headroom_fraction, "10%", "invalid value '10%': expected a fraction >= 0 and < 1, e.g. 0.1 (10% is 0.1)"),
    (confidence, "90%", "invalid value '90%': expected a confidence >= 0 and < 1, e.g. 0.9 (90% is 0.9)"),
    (confidence, "high", "invalid value 'high': expected a confidence >= 0 and < 1, e.g. 0.9"),
])
def test_a_fraction_that_does_not_parse_is_refused_with_its_range(parse, text, message):
    """--headroom and --confidence are fractions: whatever a user writes wrong ('abc', '1', '10%') is answered with
    the range and an example, and a percentage with the fraction it means (one try, not two)."""
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse(text)
    assert str(error.value) == message


def test_a_fraction_in_range_is_read():
    assert (headroom_fraction("0.1"), confidence("0"), confidence(" 0.9 ")) == (0.1, 0.0, 0.9)


def test_a_misspelt_api_keyword_is_named_with_the_option_it_was_meant_to_be():
    with pytest.raises(SpecError, match=r"^unknown option 'memcap' \(did you mean memory_cap\?\); valid options: "):
        keyword_values(RUN_OPTIONS, {"memcap": "40GiB"})
