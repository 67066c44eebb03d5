"""How many Python function calls one call makes: the measure of the runtime's hot path that does not
depend on the machine's speed (tests guard it; benchmarks/runtime_overhead.py reports it)."""
from __future__ import annotations

import sys
from typing import Callable


def python_calls(call: Callable[[], object], *, within: str | None = None) -> int:
    """Python-level function calls (generators and lambdas included; C functions not) made by `call()`,
    not counting `call` itself; with `within`, only calls of functions whose file path contains it (e.g.
    the mlts package, so that a count does not move with the Python version's own library)."""
    count = 0
    outermost = True

    def profile(frame, event, arg) -> None:
        nonlocal count, outermost
        if event != "call":
            return
        if outermost:  # call() itself
            outermost = False
            return
        if within is None or within in frame.f_code.co_filename:
            count += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
    return count
