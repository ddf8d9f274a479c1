"""Validation helpers shared by the spec dataclasses: typed construction from mappings with field-naming errors, and
the fields' own documentation."""
from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import math
import reprlib
import sys
import types
import typing
from typing import Any, Iterable, Mapping, NoReturn


class SpecError(ValueError):
    """A user input that cannot describe a valid model, device, run or strategy; the message names the field."""


# Upper bound on any size, count or dimension in a spec (2**24 = 16,777,216): far above every real model, and small
# enough that loops over layers or divisors stay fast and float conversions never overflow.
MAX_SIZE = 1 << 24

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 2, 4, 4, 4
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 60, 60, 40


def show(value: Any) -> str:
    """A bounded repr for error messages: nested, aliased (YAML anchors) or huge values cannot blow up a message."""
    try:
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails still needs a message
        return f"<{type(value).__name__}>"


def require(condition: bool, field: str, value: Any, valid: str) -> None:
    """Raise a SpecError naming the field, the value and what would be valid unless the condition holds."""
    if not condition:
        refuse(field, value, valid)


def refuse(field: str, value: Any, valid: str) -> NoReturn:
    """Raise a SpecError naming the field, the value and what would be valid (for checks that build the message only
    when it is needed: specs are checked on hot paths too)."""
    raise SpecError(f"{field}={show(value)} is not valid; {valid}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(field: str, value: Any, high: int = MAX_SIZE) -> None:
    if not (_is_int(value) and 1 <= value <= high):  # the message is built only when it is needed
        refuse(field, value,
               "expected an integer >= 1" + (f" and <= {high:,}" if _is_int(value) and value > high else ""))


def non_negative_int(field: str, value: Any, high: int = MAX_SIZE) -> None:
    if not (_is_int(value) and 0 <= value <= high):
        refuse(field, value,
               "expected an integer >= 0" + (f" and <= {high:,}" if _is_int(value) and value > high else ""))


def _finite(value: Any) -> bool:
    """A real number that converts to a finite float (huge ints such as 10**400 do not: OverflowError)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def finite_number(field: str, value: Any, low: float = -math.inf, high: float = math.inf, *, low_open: bool = False) -> None:
    if _finite(value) and (value > low if low_open else value >= low) and value <= high:
        return
    bound = f"{'>' if low_open else '>='} {low}" if low != -math.inf else ""
    upper = f"<= {high}" if high != math.inf else ""
    refuse(field, value, f"expected a finite number {' and '.join(x for x in (bound, upper) if x)}".strip())


def one_of(field: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if value not in choices:
        refuse(field, value, f"valid: {', '.join(map(str, choices))}")


def divisors(n: int) -> list[int]:
    """All positive divisors of n in increasing order."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def _coerce(field: str, annotation: Any, value: Any, context: str) -> Any:
    """Check (and lightly convert) one value against a field annotation."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(field, option, value, context)
            except SpecError as error:
                errors.append(str(error))
        raise SpecError(errors[0] if errors else f"{context}{field}: unexpected value {show(value)}")
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, Mapping):
            raise SpecError(f"{context}{field} must be a mapping of {annotation.__name__} fields, got {show(value)}")
        return from_mapping(annotation, value, f"{context}{field}.")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"{context}{field} must be a list, got {show(value)}")
        (item,) = typing.get_args(annotation)[:1]
        return tuple(_coerce(f"{field}[{i}]", item, v, context) for i, v in enumerate(value))
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise SpecError(f"{context}{field}={show(value)} is not valid; expected true or false")
    if annotation is int:
        if isinstance(value, float) and value.is_integer() and math.isfinite(value):
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise SpecError(f"{context}{field}={show(value)} is not valid; expected an integer")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise SpecError(f"{context}{field}={show(value)} is not valid; expected a finite number") from None
        raise SpecError(f"{context}{field}={show(value)} is not valid; expected a number")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise SpecError(f"{context}{field}={show(value)} is not valid; expected a string")
    return value


def cached_hash(self) -> int:
    """`__hash__` for frozen specs: computed once, since specs key every estimator cache (hashing a model's many
    fields on each lookup was a hot spot)."""
    try:
        return self.__dict__["_hash"]
    except KeyError:
        value = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
        self.__dict__["_hash"] = value
        return value


def state_without_hash(self) -> dict:
    """`__getstate__` for specs with cached_hash: their state without the cached hash, which pickling would carry
    into another process (a spawned sweep worker, Ray), where strings hash differently: an equal spec built there
    would hash otherwise, and the caches keyed by specs would miss."""
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring, by field name: the string literal right under the field in the class body (the style
    of torchtitan's job config), its whitespace joined to single spaces. The CLI's help, `--json`'s `run` object and
    device files read them from here, so a field is documented once. Read from the module's source (parsed once per
    class: ~1 ms for specs/run.py); a field without a docstring is absent."""
    with open(sys.modules[cls.__module__].__file__, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    body = next(node.body for node in tree.body if isinstance(node, ast.ClassDef) and node.name == cls.__name__)
    docs = {}
    for field, after in zip(body, body[1:]):
        if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[field.target.id] = " ".join(after.value.value.split())
    return docs


def near_key(key: Any, valid: Iterable[str], cutoff: float = 0.75) -> str:
    """" (did you mean X?)" for a misspelt key close to a valid one (difflib's ratio at least `cutoff`), else "": said
    before the list of valid keys, which a long spec (a device file's ~40 fields) has elided in the middle of an
    `ndcp: error:` line."""
    close = difflib.get_close_matches(str(key), list(valid), n=1, cutoff=cutoff)
    return f" (did you mean {close[0]}?)" if close else ""


def from_mapping(cls: type, data: Mapping[str, Any], context: str = "") -> Any:
    """Build the frozen dataclass `cls` from a mapping: unknown keys and missing required fields are errors."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{context or cls.__name__}: expected a mapping of fields, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        raise SpecError(f"{context}{show(unknown[0])}: unknown key{near_key(unknown[0], fields)}; valid keys: "
                        f"{', '.join(fields)}")
    kwargs = {}
    for name, field in fields.items():
        if name in data:
            kwargs[name] = _coerce(name, hints[name], data[name], context)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise SpecError(f"{context}{name}: missing required field")
    try:
        return cls(**kwargs)
    except SpecError as error:
        message = str(error)
        raise SpecError(message if not context or message.startswith(context) else f"{context}{message}") from None
