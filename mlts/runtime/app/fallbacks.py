"""CPU fallbacks, recorded: every time the runtime hides a driver's failure by running its work on
nnapi-reference (NNAPI's fallback rules for `Compilation(model)`), the failure is kept here.

An application wants the fallback; a test suite must see it: a driver that crashes on every
execution still gives right results under all-devices, and only this record tells. Each compilation
keeps its own events (`Compilation.fallbacks`); the process keeps them all (`fallback_events()`), so
a stress test can ask what happened during the whole test without holding on to its compilations.
"""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

from ..enums import ResultCode

MAX_KEPT = 1000  # the process log keeps the first events and counts the rest


@dataclass(frozen=True)
class FallbackEvent:
    """One driver failure that the CPU fallback hid."""

    device: str          # the driver that failed
    stage: str           # "preparation" or "execution"
    code: ResultCode     # what it failed with
    message: str
    scope: str           # "whole model" or "step N"

    def describe(self) -> str:
        return f"{self.device}: {self.stage} failed ({self.code.name}: {self.message}); {self.scope} ran on the CPU"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "code": self.code.name}


class _ProcessLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[FallbackEvent] = []
        self._count = 0

    def add(self, event: FallbackEvent) -> None:
        with self._lock:
            self._count += 1
            if len(self._events) < MAX_KEPT:
                self._events.append(event)

    def mark(self) -> int:
        with self._lock:
            return self._count

    def since(self, mark: int) -> tuple[int, list[FallbackEvent]]:
        with self._lock:
            return self._count - mark, self._events[mark:] if mark < len(self._events) else []


_LOG = _ProcessLog()


def record_fallback(event: FallbackEvent) -> None:
    """Called by the runtime when it falls back; compilations also keep their own list."""
    _LOG.add(event)


def fallback_mark() -> int:
    """A position in the process log, for `fallbacks_since`."""
    return _LOG.mark()


def fallbacks_since(mark: int = 0) -> tuple[int, list[FallbackEvent]]:
    """(how many fallbacks happened since `mark`, the events kept of them)."""
    return _LOG.since(mark)


def summarize(count: int, events: list[FallbackEvent], limit: int = 5) -> dict[str, Any] | None:
    """The `fallbacks` field of a record: count, per-device counts, and the first distinct reasons."""
    if not count:
        return None
    reasons: list[str] = []
    devices: dict[str, int] = {}
    for e in events:
        devices[e.device] = devices.get(e.device, 0) + 1
        line = e.describe()
        if line not in reasons and len(reasons) < limit:
            reasons.append(line)
    return {"count": count, "devices": devices, "reasons": reasons}


__all__ = ["FallbackEvent", "fallback_mark", "fallbacks_since", "record_fallback", "summarize"]
