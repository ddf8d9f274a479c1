"""Process start and end of the command line: OR-Tools' CP-SAT module imported without pandas, and the cyclic
garbage collector tuned for one command.

`ortools.sat.python.cp_model` imports pandas at its top (OR-Tools 9.x) for its `*_series` helpers, which ndcp never
calls; pandas and what it imports took 0.35-0.55 s of a 1.3-1.5 s process start on a 2-core machine (measured:
`ndcp search llama3-8b` on 32 H100 1.6 -> 1.05 s wall). A command-line process is
ndcp's own, so while cp_model executes, `pandas` is a stand-in module whose `Index` and `Series` are classes nothing
is an instance of; it is removed once cp_model is loaded, and a later `import pandas` gets the real one. Should
cp_model ever need more of pandas at import, the stand-in is dropped and cp_model imported as usual. Library users
(`import ndcp`) import cp_model as usual: only `ndcp.cli.main` installs this.
"""
from __future__ import annotations

import gc
import importlib.abc
import sys
import types

CP_MODEL = "ortools.sat.python.cp_model"


def _stand_in() -> types.ModuleType:
    module = types.ModuleType("pandas", "ndcp's stand-in while cp_model imports (ndcp/cli/startup.py)")
    module.Index = type("Index", (), {})
    module.Series = type("Series", (), {})
    return module


class _Loader(importlib.abc.Loader):
    """cp_model's own loader, run with the stand-in as `pandas`."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name: str):  # get_source and the rest: cp_model's own loader answers
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        stand_in = _stand_in()
        sys.modules["pandas"] = stand_in
        try:
            self.loader.exec_module(module)
        except AttributeError:  # cp_model reads more of pandas than the stand-in has: import it as usual
            if sys.modules.get("pandas") is stand_in:
                del sys.modules["pandas"]
            self.loader.exec_module(module)
        finally:
            if sys.modules.get("pandas") is stand_in:
                del sys.modules["pandas"]


class _Finder(importlib.abc.MetaPathFinder):
    """Finds cp_model as the other finders do, with _Loader around its loader (only while pandas is not loaded)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != CP_MODEL or "pandas" in sys.modules:
            return None
        others = [finder for finder in sys.meta_path if finder is not self]
        for finder in others:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def defer_pandas() -> None:
    """Import cp_model without pandas in this process from now on (once; nothing to do if cp_model is loaded)."""
    if CP_MODEL in sys.modules or any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder())


# The cyclic garbage collector's first-generation threshold for one command's run (CPython's default: 700; Python's
# gc module). A search allocates millions of small containers (layer times, bounds, memo entries) that live until it
# ends, and each collection walks them again; collections free only reference cycles, which the searches hardly
# make. The measurements: docs/solver.md §4 "The program's process".
COLLECT_AFTER = 200_000


def collect_less() -> None:
    """Collect cyclic garbage less often in this process (COLLECT_AFTER), and never walk again what is loaded now
    (gc.freeze: the modules live until exit)."""
    gc.freeze()
    gc.set_threshold(COLLECT_AFTER, *gc.get_threshold()[1:])


def before_exit() -> None:
    """Freeze everything left, so the interpreter's last collections at exit skip it (docs/solver.md §4). Nothing
    is kept alive: the process ends."""
    gc.freeze()
