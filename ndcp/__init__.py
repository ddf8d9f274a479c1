"""ndcp: the provably best N-dimensional parallel training strategy that fits in memory (CP-SAT).

The Python API (docs/api.md): `ndcp.search(model, device=..., gpus=..., global_batch=..., seq_len=..., **options)`
and `ndcp.estimate(..., strategy=..., **options)` return the document `ndcp search --json` / `ndcp estimate --json`
writes, `ndcp.replan(file, gpus=..., **options)` the one `ndcp replan --json` writes (ndcp.replanning); a user error raises `ndcp.SpecError` (a ValueError) with the command line's message. Both are imported on
first use (ndcp.api), so `import ndcp` stays cheap.

`ndcp.estimate` is also the estimators' package (ndcp/estimate/): Python sets a package's attribute to its
subpackage when that is imported, which would hide a function of that name, so the package itself is made callable
here (its module class, below), calling ndcp.api.estimate; `ndcp.estimate.memory` and the rest are as before.
"""
import types

from . import estimate as _estimators  # an empty package __init__: cheap

__version__ = "0.1.0"


class _CallableEstimators(types.ModuleType):
    """The ndcp.estimate package, callable as the API's estimate."""

    def __call__(self, model, **options):
        """ndcp.api.estimate: `ndcp estimate MODEL ... --json`'s document (see its docstring, docs/api.md)."""
        from .api import estimate as estimate_document
        return estimate_document(model, **options)


_estimators.__class__ = _CallableEstimators
_LAZY = ("search", "SpecError")  # from ndcp.api, on first use


def __getattr__(name: str):
    if name in _LAZY:
        from . import api
        return getattr(api, name)
    if name == "replan":
        from .replanning import replan
        return replan
    raise AttributeError(f"module 'ndcp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY, "replan"])


__all__ = ["__version__", "search", "estimate", "SpecError"]
