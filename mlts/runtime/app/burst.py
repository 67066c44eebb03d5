"""Burst (ANeuralNetworksBurst): a sequence of executions of one compilation reusing driver-side resources."""
from __future__ import annotations

import threading

from ..errors import bad_data
from ..hal import IBurst
from .compilation import Compilation
from .execution_plan import Step


class Burst:
    """A sequence of executions of one compilation reusing driver-side resources."""

    def __init__(self, compilation: Compilation) -> None:
        if not isinstance(compilation, Compilation):
            raise bad_data(f"Burst: expected a Compilation, got {type(compilation).__name__}")
        compilation.check_finished("Burst")
        self.compilation = compilation
        self._contexts: dict[int, IBurst] = {}
        self._busy = threading.Lock()
        self.closed = False

    def context(self, step: Step) -> IBurst:
        # Keyed by the prepared model, not the step index: the whole-model CPU fallback is also step 0.
        key = id(step.prepared)
        if key not in self._contexts:
            self._contexts[key] = step.prepared.configure_execution_burst()
        return self._contexts[key]

    def close(self) -> None:
        for c in self._contexts.values():
            try:
                c.close()
            except Exception:  # a driver failing to release its burst must not take the client down
                pass
        self._contexts.clear()
        self.closed = True

    free = close
