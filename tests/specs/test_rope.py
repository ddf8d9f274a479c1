"""RoPE scaling, base and the MoE router: model facts the launch configurations state (not priced), each validated
with a one-line message naming the field."""
import dataclasses

import pytest

from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model
from ndcp.specs.model import MoESpec
from ndcp.specs.rope import RopeScaling


def test_library_models_state_their_config_json_rope_and_router():
    assert load_model("llama3-70b").rotary_base == 500000 and load_model("llama3-70b").rope_scaling is None
    assert load_model("llama3.1-405b").rope_scaling == RopeScaling("llama3", 8.0, 8192)
    deepseek = load_model("deepseek-v3")
    assert (deepseek.rope_scaling.kind, deepseek.rope_scaling.factor, deepseek.norm_eps) == ("yarn", 40.0, 1e-6)
    moe = deepseek.moe
    assert (moe.router_score, moe.router_groups, moe.router_group_topk, moe.router_expert_bias,
            moe.routed_scaling) == ("sigmoid", 8, 4, True, 2.5)
    assert load_model("qwen3-235b-a22b").qk_norm and not load_model("llama3-8b").qk_norm


def test_the_launch_facts_leave_the_parameter_count_alone():
    model = load_model("qwen3-235b-a22b")
    assert dataclasses.replace(model, qk_norm=False, rotary_base=10000.0).parameters == model.parameters


@pytest.mark.parametrize("kwargs,field", [
    ({"kind": "ntk", "factor": 2.0, "original_max_positions": 4096}, "rope_scaling.kind"),
    ({"kind": "yarn", "factor": 0.5, "original_max_positions": 4096}, "rope_scaling.factor"),
    ({"kind": "llama3", "factor": 8.0, "original_max_positions": 0}, "rope_scaling.original_max_positions"),
])
def test_a_bad_rope_scaling_names_its_field(kwargs, field):
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        RopeScaling(**kwargs)


@pytest.mark.parametrize("kwargs,field", [
    ({"router_score": "sparsemax"}, "moe.router_score"),
    ({"router_groups": 8}, "moe.router_group_topk"),  # groups without a group top-k
    ({"router_groups": 3, "router_group_topk": 1}, "moe.router_groups"),  # 3 does not divide 8 experts
    ({"routed_scaling": 0.0}, "moe.routed_scaling"),
])
def test_a_bad_router_names_its_field(kwargs, field):
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        MoESpec(experts=8, top_k=2, expert_ffn_hidden=256, **kwargs)
