"""How many Python function calls one call makes: the measure of the runtime's hot path that does not
depend on the machine's speed (tests guard it; benchmarks/runtime_overhead.py reports it)."""
from __future__ import annotations

import sys
from typing import Callable


def python_calls(call: Callable[[], object]) -> int:
    """Python-level function calls (generators and lambdas included; C functions not) made by `call()`."""
    count = 0

    def profile(frame, event, arg) -> None:
        nonlocal count
        if event == "call":
            count += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
    return count - 1  # call() itself
