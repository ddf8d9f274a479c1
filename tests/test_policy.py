"""ndcp/policy.py: the specs a command's options describe."""
import re

import pytest

from ndcp.cli import build_parser
from ndcp.policy import build_problem, parse_degree_bounds, shared_spec
from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model


def values(*extra: str):
    return build_parser().parse_args(["search", "llama3-8b", "--device", "h100", "--gpus", "8", "--global-batch", "32",
                                      "--seq-len", "4096", *extra])


def test_the_same_problem_built_twice_is_the_same_objects():
    """A second search of one problem (--trainer any's trainer search) gets the first's specs themselves, so the
    estimators' caches, keyed by them, hit by identity instead of comparing every field."""
    first, second = build_problem(values()), build_problem(values())
    assert all(a is b for a, b in zip(first, second))


def test_a_different_problem_keeps_its_own_specs():
    first, capped = build_problem(values()), build_problem(values("--memory-cap", "40GiB"))
    assert first[0] is capped[0] and first[1] is capped[1]  # the same model and cluster
    assert first[2] != capped[2] and first[2] is not capped[2]


def test_an_equal_spec_is_swapped_for_the_one_seen_first():
    seen = shared_spec(load_model("llama3-8b"))
    again = load_model("llama3-8b")
    assert again == seen and shared_spec(again) is seen


def test_a_misspelt_fix_key_is_named_with_the_dimension_it_meant():
    with pytest.raises(SpecError, match=r"^--fix: unknown key 'zeros' \(did you mean zero\?\); valid keys: tp, "):
        parse_degree_bounds("--fix", "zeros=1")
    with pytest.raises(SpecError, match=r"^--max: unknown key 'tq'; valid keys: "):  # two letters: no guess
        parse_degree_bounds("--max", "tq=2")


@pytest.mark.parametrize("flag, value, field", [("--moe-dispatcher", "flex", "moe_dispatcher='flex'"),
                                                ("--moe-load-imbalance", "2", "moe_load_imbalance=2.0")])
def test_a_moe_option_for_a_model_without_experts_is_refused(flag, value, field):
    """--moe-dispatcher flex on Llama-3-8B changed nothing and said nothing; it is refused as --images-per-sample is
    on a model without a vision encoder. The default values pass, and a MoE model takes them."""
    with pytest.raises(SpecError, match=rf"^{re.escape(field)} is not valid: llama3-8b has no experts; drop {flag} "):
        build_problem(values(flag, value))
    build_problem(values("--moe-dispatcher", "alltoall", "--moe-load-imbalance", "1"))
    moe = build_parser().parse_args(["search", "tiny-moe", "--device", "h100", "--gpus", "8", "--global-batch", "32",
                                     "--seq-len", "1024", flag, value])
    assert getattr(build_problem(moe)[2], field.split("=")[0]) == (value if flag == "--moe-dispatcher" else 2.0)
