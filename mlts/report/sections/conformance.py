"""The conformance section: the conformance tests' records as a drivers x features matrix, with every
failed check listed below it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlts.stress.catalog import CONFORMANCE_TESTS

from ..report_data import ReportData
from ..stress_rows import CONFORMANCE, StressRow

CHECK_VERDICTS = ("pass", "fail", "n/a")


@dataclass
class ConformanceCell:
    row: StressRow
    counts: dict  # verdict -> number of checks

    @property
    def title(self) -> str:
        return ", ".join(f"{n} {v}" for v, n in self.counts.items() if n) or "no checks recorded"


@dataclass
class ConformanceView:
    features: list  # (test name, column title)
    lanes: list  # (lane, {test name: ConformanceCell})
    failed_checks: list  # (lane, test, check dict)


def _conformance_title(test: str) -> str:
    return test.removeprefix(CONFORMANCE + "_").replace("_", " ")


def conformance_view(rows: list[StressRow]) -> ConformanceView | None:
    """The conformance records as a drivers x features matrix, with every failed check listed."""
    if not rows:
        return None
    order = {t.name: k for k, t in enumerate(CONFORMANCE_TESTS)}  # the catalog's order, unknown tests last
    features = sorted(dict.fromkeys(r.test for r in rows), key=lambda t: (order.get(t, len(order)), t))
    lanes: dict[str, dict[str, ConformanceCell]] = {}
    failed = []
    for r in rows:
        counts = {v: sum(1 for c in r.checks if c.get("verdict") == v) for v in CHECK_VERDICTS}
        lanes.setdefault(r.lane, {})[r.test] = ConformanceCell(r, counts)
        failed += [(r.lane, r.test, c) for c in r.checks if c.get("verdict") == "fail"]
    return ConformanceView([(t, _conformance_title(t)) for t in features], list(lanes.items()), failed)


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the conformance section (None when no conformance test ran)."""
    rows = [t for t in data.stress_rows if t.is_conformance]
    return {"conformance": conformance_view(rows), "any_conformance": bool(rows)}
