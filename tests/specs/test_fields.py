"""Fields that document themselves (specs.fields.field_docs): every spec field has a docstring, and a device file
(`ndcp devices --show`) carries each field's on its line; a misspelt key is named with the one it was meant to be."""
from __future__ import annotations

import dataclasses

import pytest

from ndcp.specs.device import PRESETS, ClusterSpec, DeviceSpec
from ndcp.specs.device_file import device_yaml
from ndcp.cli.common import error_line
from ndcp.specs.fields import SpecError, field_docs, from_mapping
from ndcp.specs.model import MLASpec, ModelSpec, MoESpec
from ndcp.specs.run import RunSpec

SPECS = (RunSpec, ModelSpec, MoESpec, MLASpec, DeviceSpec, ClusterSpec)


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.__name__)
def test_every_field_has_a_docstring(spec):
    docs = field_docs(spec)
    names = [f.name for f in dataclasses.fields(spec)]
    assert [name for name in names if not docs.get(name)] == []
    assert set(docs) == set(names)  # no docstring under something that is not a field


def test_a_docstring_is_the_string_under_its_field_in_one_line():
    docs = field_docs(RunSpec)
    assert docs["global_batch"] == "global batch in sequences per optimizer step"
    assert "\n" not in docs["grad_sync"] and "  " not in docs["grad_sync"]  # a three-line docstring, joined
    assert docs["grad_sync"].startswith("when gradients are reduced over data-parallel ranks: microbatch")


def test_a_device_file_comments_each_field_with_its_docstring():
    text = device_yaml(PRESETS["h100"])
    docs = field_docs(DeviceSpec)
    lines = {line.partition(":")[0]: line for line in text.splitlines() if not line.startswith("#")}
    assert set(lines) == {f.name for f in dataclasses.fields(DeviceSpec)}
    for name, line in lines.items():
        assert line.endswith(f"  # {docs[name].split('. ')[0]}"), line
    assert lines["memory_bytes"] == f"memory_bytes: {PRESETS['h100'].memory_bytes}  # device memory, bytes"


def test_a_misspelt_key_names_the_key_it_was_meant_to_be_before_the_valid_keys():
    data = {**dataclasses.asdict(PRESETS["h100"]), "memory_byte": 1}
    with pytest.raises(SpecError) as error:
        from_mapping(DeviceSpec, data, "my-h100.yaml: ")
    message = str(error.value)
    assert message.startswith("my-h100.yaml: 'memory_byte': unknown key (did you mean memory_bytes?); valid keys: ")
    # the ~40 valid keys of a device file make the line long enough to be elided in the middle: the hint stays
    assert len(message) > 600 and "(did you mean memory_bytes?)" in error_line(message)


@pytest.mark.parametrize("key", ["flops", "zzz"])
def test_a_key_close_to_none_gets_no_guess(key):
    with pytest.raises(SpecError) as error:
        from_mapping(ModelSpec, {"name": "m", key: 1}, "")
    assert "did you mean" not in str(error.value) and "unknown key; valid keys: name, layers" in str(error.value)
