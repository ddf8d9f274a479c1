"""Reading the user's files: the one text reader and the one YAML loader behind every file ndcp reads (model specs,
Hugging Face configs, device files, strategy files, trainer configurations, measured runs).

A file is read only when it is a regular file no larger than its cap: a FIFO, a character device (/dev/zero,
/dev/urandom) or a directory is refused before it is opened (os.stat), and the file is opened non-blocking, so a
FIFO swapped in between the check and the open cannot block either. The caps (docs/files.md §1) are far above any
real input (the largest Hugging Face config.json is under 100 KiB; examples/published_runs.yaml under 1 MiB):

- SPEC_CAP, 16 MiB: model specs, Hugging Face configs, device files, strategy files, trainer configurations;
- RUNS_CAP, 64 MiB: measured-runs YAML and CSV files (ndcp validate / calibrate).

YAML is read with PyYAML's safe loader (no python tags), and its aliases are expanded only up to YAML_NODE_BUDGET
nodes: an alias bomb (`a: &a [x, x]; b: &b [*a, *a]; ...`) composes into a small graph that any later walk would
expand exponentially, so the composed document's expanded size is counted first and a document over the budget is
refused (a self-referencing alias too; docs/files.md §2). Every failure is one SpecError line.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from .fields import SpecError

MIB = 1 << 20
SPEC_CAP = 16 * MIB
RUNS_CAP = 64 * MIB
# Nodes (scalars, sequences, mappings) a YAML document may expand to, its aliases counted once per use. The largest
# file the tool ships (examples/published_runs.yaml) expands to about 20,000.
YAML_NODE_BUDGET = 1_000_000


def read_text(path: str | os.PathLike, where: str, what: str, cap: int = SPEC_CAP) -> str:
    """The UTF-8 text of the regular file `path`, at most `cap` bytes; anything else is a SpecError
    "WHERE: cannot read WHAT: why"."""
    try:
        target = Path(path).expanduser()
        status = os.stat(target)
        _check_kind(status, cap)
        return _read_bounded(target, cap).decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{where}: cannot read {what}: not UTF-8 text") from None
    except _Refused as refused:
        raise SpecError(f"{where}: cannot read {what}: {refused}") from None
    except (OSError, ValueError) as error:  # ValueError: a path with an embedded NUL
        raise SpecError(f"{where}: cannot read {what}: {getattr(error, 'strerror', None) or type(error).__name__}"
                        ) from None


class _Refused(Exception):
    """A file that is not read: not a regular file, or over its cap."""


def _check_kind(status: os.stat_result, cap: int) -> None:
    if stat.S_ISDIR(status.st_mode):
        raise _Refused("is a directory")
    if not stat.S_ISREG(status.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(status.st_mode) else "a character device" if stat.S_ISCHR(status.st_mode)
                else "a block device" if stat.S_ISBLK(status.st_mode) else "a socket" if stat.S_ISSOCK(status.st_mode)
                else "not a regular file")
        raise _Refused(f"is {kind}, not a regular file")
    if status.st_size > cap:
        raise _Refused(_too_large(cap))


def _too_large(cap: int) -> str:
    return f"larger than {cap // MIB} MiB, the most ndcp reads (docs/files.md §1)"


def _read_bounded(path: Path, cap: int) -> bytes:
    """At most `cap` bytes of `path`, opened non-blocking; a file that grew past the cap since os.stat is refused."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):  # replaced by a FIFO or a device after the check
            raise _Refused("not a regular file; give a file")
        data = stream.read(cap + 1)
    if len(data) > cap:
        raise _Refused(_too_large(cap))
    return data


# -- YAML ----------------------------------------------------------------------------------------------------------
class _BudgetLoader(yaml.SafeLoader):
    """The safe loader, refusing a document whose aliases expand past YAML_NODE_BUDGET nodes."""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _check_expanded_size(node)
        return node


def _check_expanded_size(root: yaml.Node) -> None:
    pending, count = [root], 0
    while pending:
        node = pending.pop()
        count += 1
        if count > YAML_NODE_BUDGET:
            raise _Refused(f"its aliases expand to more than {YAML_NODE_BUDGET:,} nodes (an alias bomb or a "
                           "self-referencing alias)")
        if isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                pending.extend((key, value))


def parse_yaml(text: str, where: str) -> Any:
    """The YAML document `text` (safe tags only, aliases within the node budget) with every failure a one-line
    SpecError: syntax errors, an alias bomb, nesting too deep for the parser (RecursionError) and integers too long
    to convert (ValueError, over 4300 digits)."""
    try:
        return yaml.load(text, Loader=_BudgetLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or (str(error).splitlines() or ["parse error"])[0]
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SpecError(f"{where}: invalid YAML{at}: {problem}") from None
    except _Refused as refused:
        raise SpecError(f"{where}: invalid YAML: {refused}") from None
    except RecursionError:
        raise SpecError(f"{where}: invalid YAML: nested too deeply") from None
    except (ValueError, OverflowError) as error:  # e.g. an integer literal over 4300 digits
        raise SpecError(f"{where}: invalid YAML: {first_line(error)}") from None


def first_line(error: BaseException) -> str:
    """The first clause of an exception's message, at most 200 characters."""
    text = str(error).split(";")[0].strip()
    return (text.splitlines() or [type(error).__name__])[0][:200]


__all__ = ["read_text", "parse_yaml", "first_line", "SPEC_CAP", "RUNS_CAP", "YAML_NODE_BUDGET"]
