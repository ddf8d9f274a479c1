"""Fields that document themselves (specs.fields.field_docs): every spec field has a docstring, and a device file
(`ndcp devices --show`) carries each field's on its line."""
from __future__ import annotations

import dataclasses

import pytest

from ndcp.specs.device import PRESETS, ClusterSpec, DeviceSpec
from ndcp.specs.device_file import device_yaml
from ndcp.specs.fields import field_docs
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
