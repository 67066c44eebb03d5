"""Floating-point errors ignored around a kernel, cheaply (a private helper module, not an operation).

NNAPI's float kernels give inf and NaN where IEEE arithmetic does; numpy would warn (or raise, under
`-W error`) instead. `np.errstate(all="ignore")` rebuilds numpy's error state on every entry, which costs
more than a small ADD itself (about 3 us on a 2-core VM); here the ignoring state is built once and set
through numpy's own context variable (numpy >= 2: the state np.errstate sets, per thread and task),
with np.errstate as the fallback where numpy keeps its state otherwise.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

try:  # numpy >= 2 keeps the error state in a context variable; np.errstate sets it the same way
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
    _IGNORE_ALL = _make_extobj(all="ignore")
except (ImportError, AttributeError, TypeError):  # numpy 1.x: errstate itself
    _extobj_contextvar = None


def ignoring_fp_errors(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` with every numpy floating-point error ignored, as under np.errstate(all="ignore")."""
    if _extobj_contextvar is None:
        with np.errstate(all="ignore"):
            return fn(*args)
    token = _extobj_contextvar.set(_IGNORE_ALL)
    try:
        return fn(*args)
    finally:
        _extobj_contextvar.reset(token)
