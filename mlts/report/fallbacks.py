"""Driver failures that the runtime's CPU fallback hid, read from a benchmark or stress record: both
kinds of row show them, and the per-driver summary adds them up.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .formatting import as_dict, number


@dataclass
class Fallbacks:
    """Driver failures that the runtime's CPU fallback hid (a record's `fallbacks`: count, reasons)."""

    count: int
    reasons: list[str]

    @property
    def text(self) -> str:
        return f"{self.count} CPU fallback{'' if self.count == 1 else 's'}"

    @property
    def first(self) -> str:
        """The first reason, cut to a table cell's worth (the record keeps it whole)."""
        first = self.reasons[0] if self.reasons else ""
        return first if len(first) <= 300 else first[:300] + " ..."


def fallbacks_of(value: Any) -> Fallbacks | None:
    """None when there were none (or the field is absent or unusable)."""
    d = as_dict(value)
    reasons = [str(x) for x in d.get("reasons")] if isinstance(d.get("reasons"), list) else []
    n = number(d.get("count"))
    count = int(n) if n is not None and 0 <= n < 1e15 else len(reasons)
    return Fallbacks(count, reasons) if count or reasons else None
