"""Loading a model by path: a Hugging Face model directory reads its config.json; a path the file system cannot
take is a one-line spec error (ndcp/specs/library.py)."""
from pathlib import Path

import pytest

from ndcp.specs import SpecError
from ndcp.specs.library import load_model

FIXTURES = Path(__file__).parent / "fixtures"


def test_model_directory_reads_its_config_json():
    assert load_model(str(FIXTURES / "qwen3-8b")) == load_model(str(FIXTURES / "qwen3-8b" / "config.json"))


def test_directory_without_config_json(tmp_path):
    with pytest.raises(SpecError, match="directory without a config.json"):
        load_model(str(tmp_path))


def test_a_name_too_long_for_the_file_system_is_a_spec_error():
    with pytest.raises(SpecError):
        load_model("9" * 300)
    with pytest.raises(SpecError, match="cannot read"):
        load_model("/x/" + "9" * 300 + ".json")
