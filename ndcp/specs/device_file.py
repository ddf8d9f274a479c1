"""Device YAML files (docs/sweep.md "Device files"): `--device` as a preset name or a file, read and written.

One key per DeviceSpec field, in its units, plus `base: PRESET` (start from that preset; the keys given override it).
`name` defaults to the file's stem. `ndcp devices --show NAME` prints a complete file to start from.
"""
from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

import yaml

from .device import PRESETS, DeviceSpec, device_preset
from .fields import SpecError, field_docs, from_mapping
from .files import parse_yaml, read_text

DEVICE_FILE_SUFFIXES = (".yaml", ".yml")


def is_device_file(text: str) -> bool:
    """Whether `--device TEXT` names a file (a YAML suffix, a path separator, or an existing file) or a preset."""
    text = str(text)
    if Path(text).suffix.lower() in DEVICE_FILE_SUFFIXES or os.sep in text or "/" in text:
        return True
    try:
        return Path(text).expanduser().is_file()
    except OSError:  # a name the file system cannot take (too long): not a file, so a preset name
        return False


def load_device(text: str) -> DeviceSpec:
    """`--device`: a preset name (case-insensitive) or the path of a device YAML file."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"device={text!r} is not valid; expected a preset ({', '.join(PRESETS)}) or a device YAML file")
    return read_device_file(Path(text).expanduser()) if is_device_file(text) else device_preset(text)


def read_device_file(path: Path) -> DeviceSpec:
    where = str(path)
    return device_from_mapping(parse_yaml(read_text(path, where, "device file"), where), where, path.stem)


def device_from_mapping(data, where: str, default_name: str) -> DeviceSpec:
    """A DeviceSpec from a device file's mapping (`base` and `name` as in the format above), validated."""
    if not isinstance(data, dict):
        kind = "empty file" if data is None else type(data).__name__
        raise SpecError(f"{where}: expected a mapping of device fields at the top level, got {kind}")
    data = dict(data)
    merged = {}
    if "base" in data:
        try:
            base = device_preset(str(data.pop("base")))
        except SpecError as error:
            raise SpecError(f"{where}: base: {error}") from None
        merged = {f.name: getattr(base, f.name) for f in fields(DeviceSpec) if f.init and f.name != "name"}
    merged.update(data)
    merged.setdefault("name", default_name)
    return from_mapping(DeviceSpec, merged, f"{where}: ")


def device_yaml(device: DeviceSpec, header: str = "") -> str:
    """A complete device file for `device` (read back by read_device_file to an equal DeviceSpec)."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines.append("# ndcp device file: every key is a DeviceSpec field (ndcp/specs/device.py); `base: PRESET` may "
                 "replace the keys left out")
    docs = field_docs(DeviceSpec)
    for f in fields(DeviceSpec):
        if not f.init:
            continue
        value = yaml.safe_dump(getattr(device, f.name), default_flow_style=True, width=1 << 16).strip()
        value = value.removesuffix("\n...").strip()
        lines.append(f"{f.name}: {value}  # {docs[f.name].split('. ')[0]}")
    return "\n".join(lines) + "\n"


__all__ = ["DEVICE_FILE_SUFFIXES", "is_device_file", "load_device", "read_device_file", "device_from_mapping",
           "device_yaml"]
