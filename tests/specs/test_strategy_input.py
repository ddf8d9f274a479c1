"""Strategies as users write them (ndcp/specs/strategy_input.py): a misspelt key is named with the key it meant."""
import pytest

from ndcp.specs.fields import SpecError
from ndcp.specs.strategy_input import parse_strategy_mapping, parse_strategy_string


def test_a_misspelt_strategy_key_is_named_with_the_key_it_meant():
    with pytest.raises(SpecError,
                       match=r"^--strategy: unknown key 'recomp' \(did you mean recompute\?\); valid keys: "):
        parse_strategy_string("tp=2,recomp=full")


def test_a_misspelt_strategy_file_key_is_named_with_the_key_it_meant():
    with pytest.raises(SpecError, match=r"^plan.yaml: unknown key 'layers_per_stages' \(did you mean "
                                        r"layers_per_stage\?\); valid keys: "):
        parse_strategy_mapping({"tp": 2, "layers_per_stages": [16, 16]}, "plan.yaml")


def test_a_key_close_to_none_is_named_without_a_guess():
    with pytest.raises(SpecError, match=r"^--strategy: unknown key 'foo'; valid keys: "):
        parse_strategy_string("tp=2,foo=1")
