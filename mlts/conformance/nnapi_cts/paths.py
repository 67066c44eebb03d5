"""The execution paths a case runs on, as NNAPI's CTS (TestGenerated) and VTS run generated tests.

sync: Execution.compute. async: start_compute, then the Event. burst: a Burst of the compilation and
burst_compute. fenced: start_compute_with_dependencies with no dependencies, then the Event (the
driver's execute_fenced). cached: the model compiled twice with the same cache directory and token, so
that the second compilation prepares from the cache where the driver caches, then executed
synchronously; the outputs of the second compilation are judged.

Which cases each path runs, following CTS: every path but cached runs cases expected to fail (a model
valid when built may fail when executed, and must fail on every path); cached never does (CTS only caches
valid models). fenced runs neither the dynamic-output-shape variant (startComputeWithDependencies needs
fully specified outputs) nor cases with an empty (zero-sized) output, as CTS's FencedComputeTest.
"""
from __future__ import annotations

import hashlib
import tempfile
from typing import Any, Sequence

from mlts.runtime import Burst, Compilation, Execution, Model

SYNC, ASYNC, BURST, FENCED, CACHED = "sync", "async", "burst", "fenced", "cached"
PATHS = (SYNC, ASYNC, BURST, FENCED, CACHED)
#: An Event not signalled in this long is the case's error, not a hung suite (the slowest case takes < 1 s).
EVENT_WAIT_S = 120.0


def parse_paths(names: Sequence[str] | None) -> list[str]:
    """The paths named (all when none), in PATHS order; ValueError naming an unknown one."""
    if not names:
        return list(PATHS)
    unknown = [n for n in names if n not in PATHS]
    if unknown:
        raise ValueError(f"unknown execution path(s) {', '.join(unknown)} (known: {', '.join(PATHS)})")
    return [p for p in PATHS if p in names]


def applies(path: str, *, expect_failure: bool, dynamic_outputs: bool, empty_output: bool) -> bool:
    """Does `path` run a case with these traits (see the module docstring)?"""
    if path == CACHED:
        return not expect_failure
    if path == FENCED:
        return not (expect_failure or dynamic_outputs or empty_output)
    return True


def compile_for(model: Model, device: Any) -> Compilation:
    """The finished compilation of `model` for `device` alone (what sync, async, burst and fenced share)."""
    compilation = Compilation.for_devices(model, [device])
    compilation.finish()
    return compilation


def cache_token(*parts: str) -> bytes:
    """A 32-byte compilation-cache token naming one case (and variant)."""
    return hashlib.sha256("\0".join(parts).encode()).digest()


def compile_cached(model: Model, device: Any, token: bytes) -> Compilation:
    """Compiled twice with one fresh cache directory and `token`: the second compilation (returned) prepares
    from the cache the first wrote, where the driver caches; its cache_status says what happened."""
    with tempfile.TemporaryDirectory(prefix="mlts-nnapi-cts-cache-") as cache_dir:
        first = Compilation.for_devices(model, [device])
        first.set_caching(cache_dir, token)
        first.finish()
        second = Compilation.for_devices(model, [device])
        second.set_caching(cache_dir, token)
        second.finish()
    return second


def compute(execution: Execution, compilation: Compilation, path: str) -> None:
    """Run `execution` on `path`; raises MltsError as the path reports a failure."""
    if path in (SYNC, CACHED):
        execution.compute()
    elif path == ASYNC:
        event = execution.start_compute()
        try:
            event.wait(EVENT_WAIT_S)
        finally:
            event.free()
    elif path == BURST:
        burst = Burst(compilation)
        try:
            execution.burst_compute(burst)
        finally:
            burst.close()
    elif path == FENCED:
        event = execution.start_compute_with_dependencies([])
        try:
            event.wait(EVENT_WAIT_S)
        finally:
            event.free()
    else:
        raise ValueError(f"unknown execution path {path!r}")
