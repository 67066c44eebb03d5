"""The per-operation profile section: for each case whose record has an `op_profile` (the devices that report
per-operation times, nnapi-reference and mlts-fast among them), its slowest operations and the time per
operation type, as TFLite's benchmark_model --enable_op_profiling summarises a run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlts.benchmark.op_profile import time_per_type

from ..formatting import fmt_fraction, number
from ..report_data import ReportData
from ..rows import Row
from ..svg import fmt_ms

#: The slowest operations shown per case (the per-type table covers them all).
TOP_OPERATIONS = 10


@dataclass
class ProfileLine:
    """One operation, or one operation type, as a table row: times in milliseconds, shares in percent."""

    label: str  # "#12" for an operation, the count of operations for a type
    type: str
    device: str
    ms: str
    share: str


@dataclass
class ProfileCase:
    title: str
    total_ms: str  # the sum of the operations' mean times
    operations: int
    devices: str
    top: list[ProfileLine]
    by_type: list[ProfileLine]


def _entries(record: dict) -> list[tuple[int, str, str, float, float]]:
    """(index, type, device, mean us, share) of each well-formed `op_profile` entry; the rest is ignored."""
    profile = record.get("op_profile")
    out = []
    for e in profile if isinstance(profile, list) else []:
        if not isinstance(e, dict):
            continue
        index, us = e.get("index"), number(e.get("mean_us"))
        if isinstance(index, bool) or not isinstance(index, int) or us is None or us < 0:
            continue
        out.append((index, str(e.get("type", "?")), str(e.get("device", "?")), us, number(e.get("share")) or 0.0))
    return out


def profile_case(row: Row) -> ProfileCase | None:
    """The case's profile tables, or None when its record has no profile."""
    entries = _entries(row.record)
    if not entries:
        return None
    total = sum(us for _, _, _, us, _ in entries)
    top = sorted(entries, key=lambda e: -e[3])[:TOP_OPERATIONS]
    mode = "" if row.mode == "sync" else f" ({row.mode})"
    return ProfileCase(
        title=f"{row.model} · {row.lane}{mode}", total_ms=fmt_ms(total / 1000), operations=len(entries),
        devices=", ".join(dict.fromkeys(device for _, _, device, _, _ in entries)),
        top=[ProfileLine(f"#{i}", kind, device, fmt_ms(us / 1000), fmt_fraction(share))
             for i, kind, device, us, share in top],
        by_type=[ProfileLine(str(n), kind, "", fmt_ms(us / 1000), fmt_fraction(share))
                 for kind, n, us, share in time_per_type((kind, us, share) for _, kind, _, us, share in entries)])


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the per-operation profile section (cases in the report's order)."""
    rows = [r for r in data.family_rows if r.ok]
    cases = [c for c in (profile_case(r) for r in rows) if c is not None]
    return {"op_profile_cases": cases, "op_profile_top": TOP_OPERATIONS,
            "op_profile_unprofiled": len(rows) - len(cases)}
