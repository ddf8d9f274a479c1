"""Model library: load a ModelSpec by library name, from a YAML spec file, or from a Hugging Face config.json.

The library is the `models/*.yaml` directory, shipped as package data `ndcp.model_library`. Every failure is a
one-line SpecError (never a YAML or OS traceback).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .fields import SpecError, from_mapping
from .files import first_line, parse_yaml, read_text
from .hf import model_from_hf_config
from .model import ModelSpec
from .units import lookup

_SUFFIXES = (".yaml", ".yml")


def _library_dir():
    """The directory (a Traversable) holding the library YAMLs: the models/ beside this ndcp package in a source
    checkout (so that a checkout run with PYTHONPATH reads its own models, not those of another installed
    checkout), else the package data `ndcp.model_library` of an installed ndcp."""
    checkout = Path(__file__).resolve().parents[2] / "models"
    if (checkout / "__init__.py").is_file():
        return checkout
    try:
        from importlib.resources import files

        root = files("ndcp.model_library")
        if root.is_dir():
            return root
    except (ModuleNotFoundError, TypeError, ValueError, OSError):
        pass
    return checkout


def _library_files() -> dict[str, Any]:
    root = _library_dir()
    try:
        entries = list(root.iterdir())
    except OSError:
        return {}
    found = {}
    for entry in entries:
        for suffix in _SUFFIXES:
            if entry.name.endswith(suffix) and entry.is_file():
                found[entry.name[: -len(suffix)]] = entry
    return found


def library_names() -> list[str]:
    """Names of the models shipped with ndcp, sorted."""
    return sorted(_library_files())


def list_models() -> list[ModelSpec]:
    """Every library model, sorted by name."""
    return [load_model(name) for name in library_names()]


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise SpecError(f"{where}: invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise SpecError(f"{where}: invalid JSON: nested too deeply") from None
    except (ValueError, OverflowError) as error:  # e.g. an integer literal over 4300 digits
        raise SpecError(f"{where}: invalid JSON: {first_line(error)}") from None


def _read_text(path, where: str) -> str:
    if not isinstance(path, Path):  # a library entry (package data): read whole, it is ndcp's own
        return path.read_text(encoding="utf-8")
    return read_text(path, where, "model spec")


def _default_name(path: Path) -> str:
    """A model name for a file without one: the folder of a `config.json`, else the file stem."""
    if path.name == "config.json" and path.resolve().parent.name:
        return path.resolve().parent.name
    return path.stem


def _from_data(data: Any, where: str, default_name: str, hf: bool) -> ModelSpec:
    if not isinstance(data, dict):
        kind = "empty file" if data is None else type(data).__name__
        raise SpecError(f"{where}: expected a mapping of model fields at the top level, got {kind}")
    if hf or "model_type" in data:
        model = model_from_hf_config(data, default_name, context=f"{where}: ")
        return model
    if "name" not in data:
        data = {"name": default_name, **data}
    return from_mapping(ModelSpec, data, f"{where}: ")


def _probe(check) -> bool:
    """A file-system test that is False, not an OSError, for a name the system cannot take (too long, ...)."""
    try:
        return check()
    except OSError:
        return False


def load_model(arg: str) -> ModelSpec:
    """A library model by name (see `library_names()`), or a YAML spec / Hugging Face config.json by path, or a
    Hugging Face model directory (its config.json)."""
    if not isinstance(arg, (str, os.PathLike)) or str(arg).strip() == "":
        raise SpecError(f"model={arg!r} is not valid; expected a library name ({', '.join(library_names())}) "
                        "or a path to a YAML spec or Hugging Face config.json")
    text_arg = str(arg)
    library = _library_files()
    if text_arg in library:
        entry = library[text_arg]
        where = f"model {text_arg!r}"
        return _from_data(parse_yaml(_read_text(entry, where), where), where, text_arg, hf=False)
    path = Path(text_arg).expanduser()
    looks_like_path = os.sep in text_arg or "/" in text_arg or path.suffix.lower() in (*_SUFFIXES, ".json")
    if not _probe(path.exists) and not looks_like_path:  # a library name in any case, else the nearest names
        by_lower = {name.lower(): name for name in sorted(library)}
        try:
            name = lookup(text_arg, by_lower, "model")
        except SpecError as error:
            raise SpecError(f"{error} (or a path to a YAML spec or a Hugging Face config.json)") from None
        return load_model(name)
    where = str(path)
    if _probe(path.is_dir):  # a Hugging Face model directory (a snapshot or a clone) holds its config.json
        if not (path / "config.json").is_file():
            raise SpecError(f"{where}: is a directory without a config.json; give a Hugging Face model directory, "
                            "its config.json or a YAML spec")
        path = path / "config.json"
        where = str(path)
    text = _read_text(path, where)
    is_json = path.suffix.lower() == ".json"
    data = _parse_json(text, where) if is_json else parse_yaml(text, where)
    return _from_data(data, where, _default_name(path), hf=is_json)


__all__ = ["load_model", "library_names", "list_models", "parse_yaml"]
