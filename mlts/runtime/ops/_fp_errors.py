"""Floating-point errors ignored around a kernel, cheaply (a private helper module, not an operation).

NNAPI's float kernels give inf and NaN where IEEE arithmetic does; numpy would warn (or raise, under
`-W error`) instead. `np.errstate(all="ignore")` rebuilds numpy's error state on every entry, which costs
more than a small ADD itself (about 3 us on a 2-core VM); here the ignoring state is built once and set
through numpy's own context variable (numpy >= 2: the state np.errstate sets, per thread and task),
with np.seterr (per thread) as the fallback where numpy keeps its state otherwise.

`token = ignore_fp_errors()` ... `restore_fp_errors(token)` (in a finally) is the form for hot kernels:
with numpy >= 2 both are C calls, no Python frame; `ignoring_fp_errors(fn, *args)` for the others.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable

import numpy as np

try:  # numpy >= 2 keeps the error state in a context variable; np.errstate sets it the same way
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    ignore_fp_errors: Callable[[], Any] = partial(_extobj_contextvar.set, _make_extobj(all="ignore"))
    restore_fp_errors: Callable[[Any], Any] = _extobj_contextvar.reset
except (ImportError, AttributeError, TypeError):  # numpy 1.x: the thread's error state
    def ignore_fp_errors() -> Any:
        return np.seterr(all="ignore")

    def restore_fp_errors(token: Any) -> None:
        np.seterr(**token)


def ignoring_fp_errors(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` with every numpy floating-point error ignored, as under np.errstate(all="ignore")."""
    token = ignore_fp_errors()
    try:
        return fn(*args)
    finally:
        restore_fp_errors(token)
