"""A case's compile time without the one-time costs of the first compilation.

The first compilation of a model for a set of devices in a run pays for what happens once per process:
a driver JIT-compiling its kernels (mlts-fast: seconds on a fresh machine, against 0.1 s later), caches
filled, libraries loaded. Whichever case came first would carry that in its compile time. So that
compilation is timed as `first_use` and discarded, and the case's compile time (`without_cache`, no
compilation caching, as before) is a second, full compilation; the other cases of that model and those
devices (other modes) compile once, their `first_use` null.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from mlts.runtime import Compilation

from .stage_timeout import Tick

#: A compilation of the case's model for its devices and how long it took (ms), without caching.
CompileOnce = Callable[[], tuple[Compilation, float]]


def _key(model: str, devices: Sequence[Any]) -> tuple[str, tuple[str, ...]]:
    return model, tuple(str(getattr(d, "name", d)) for d in devices)


class FirstCompilations:
    """The (model, devices) a run has compiled already: only the first compilation of each pays one-time costs."""

    def __init__(self) -> None:
        self._done: set[tuple[str, tuple[str, ...]]] = set()

    def is_first(self, model: str, devices: Sequence[Any]) -> bool:
        """True until `mark` is called for this model and these devices (Device objects or names)."""
        return _key(model, devices) not in self._done

    def mark(self, model: str, devices: Sequence[Any]) -> None:
        """This model was compiled for these devices (by a case, or for the reference outputs)."""
        self._done.add(_key(model, devices))


def compile_steady(compile_once: CompileOnce, compiled: FirstCompilations, model: str, devices: Sequence[Any],
                   tick: Tick) -> tuple[Compilation, dict]:
    """The case's compilation and its `compilation_ms` record field: `without_cache`, and `first_use` when
    this was the first compilation of the model for these devices in the run (that one is timed, then
    dropped before the second: `without_cache` times the second). `tick` is called between the two, so a
    stage timeout applies to each. The caching fields are left null (model_run fills them)."""
    first_ms = None
    if compiled.is_first(model, devices):
        first, first_ms = compile_once()
        del first  # released before the second compilation (a driver service frees its prepared model)
        compiled.mark(model, devices)
        tick()
    compilation, ms = compile_once()
    return compilation, {"without_cache": ms, "save_to_cache": None, "with_cache": None, "first_use": first_ms}
