"""The summary section: one line per driver (on each machine) with its verdict, the benchmark cases
that ran, its accuracy verdict, its speed against the reference, and its stress and conformance outcomes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..fallbacks import Fallbacks
from ..formatting import SAME_LATENCY_PCT
from ..report_data import ReportData
from ..rows import Row
from ..stress_rows import SKIPPED, StressRow

NOT_TESTED = "NOT TESTED"


def tests_verdict(outcomes: dict[str, int]) -> str:
    """FAIL when any test neither succeeded nor was skipped; SKIPPED when every test was skipped."""
    if not sum(outcomes.values()):
        return "–"
    if any(n and o not in ("SUCCESS", SKIPPED) for o, n in outcomes.items()):
        return "FAIL"
    return "PASS" if outcomes.get("SUCCESS") else SKIPPED


@dataclass
class DriverSummary:
    lane: str
    driver: str
    machine: str
    is_reference: bool
    ok: int = 0
    unsupported: int = 0
    errors: int = 0
    cts_checked: int = 0
    cts_failed: int = 0
    ratios: list[float] = field(default_factory=list)
    stress: dict[str, int] = field(default_factory=dict)
    conformance: dict[str, int] = field(default_factory=dict)  # outcome -> conformance tests
    fallbacks: int = 0  # driver failures hidden by the CPU fallback, over benchmark cases and tests
    fallback_reasons: list[str] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return self.ok + self.unsupported + self.errors

    @property
    def accuracy_verdict(self) -> str:
        if self.cts_checked == 0:
            return "reference" if self.is_reference else "–"
        return "FAIL" if self.cts_failed else "PASS"

    @property
    def stress_total(self) -> int:
        return sum(self.stress.values())

    @property
    def stress_verdict(self) -> str:
        return tests_verdict(self.stress)

    @property
    def conformance_total(self) -> int:
        return sum(self.conformance.values())

    @property
    def conformance_verdict(self) -> str:
        return tests_verdict(self.conformance)

    @property
    def skipped(self) -> int:
        """Stress and conformance tests that could not exercise the driver."""
        return self.stress.get(SKIPPED, 0) + self.conformance.get(SKIPPED, 0)

    @property
    def speedup(self) -> float | None:
        """Geometric mean over the cases of reference median / driver median."""
        if not self.ratios:
            return None
        return math.exp(sum(math.log(x) for x in self.ratios) / len(self.ratios))

    @property
    def speedup_cls(self) -> str:
        s = self.speedup
        if s is None:
            return ""
        if abs(s - 1.0) <= SAME_LATENCY_PCT / 100:
            return "same"
        return "better" if s > 1 else "worse"

    @property
    def verdict(self) -> str:
        """FAIL on any CTS failure, benchmark error, or stress or conformance test that neither
        succeeded nor was skipped; NOT TESTED when nothing ran on the driver but tests were skipped
        (a skipped test is never a pass; the template shows the skipped count beside a PASS)."""
        if self.cts_failed or self.errors or "FAIL" in (self.stress_verdict, self.conformance_verdict):
            return "FAIL"
        if self.ok or self.stress.get("SUCCESS") or self.conformance.get("SUCCESS"):
            return "PASS"
        return NOT_TESTED if self.skipped else "–"

    def add_fallbacks(self, fallbacks: Fallbacks | None) -> None:
        """Count a case's or test's hidden driver failures, keeping its first reason."""
        if fallbacks:
            self.fallbacks += fallbacks.count
            self.fallback_reasons += fallbacks.reasons[:1]


def driver_summaries(rows: list[Row], stress: list[StressRow], reference: str) -> list[DriverSummary]:
    """One summary per lane (driver on a machine): the reference first, then by machine and driver."""
    out: dict[str, DriverSummary] = {}

    def get(lane: str, driver: str, machine: str) -> DriverSummary:
        if lane not in out:
            out[lane] = DriverSummary(lane=lane, driver=driver, machine=machine, is_reference=driver == reference)
        return out[lane]

    for r in rows:
        s = get(r.lane, r.driver, r.machine.label)
        if r.ok:
            s.ok += 1
        elif r.status == "unsupported":
            s.unsupported += 1
        else:
            s.errors += 1
        if r.cts_pass is not None and not r.is_reference:
            s.cts_checked += 1
            s.cts_failed += 0 if r.cts_pass else 1
        if r.speedup is not None:
            s.ratios.append(r.speedup)
        s.add_fallbacks(r.fallbacks)
    for t in stress:
        s = get(t.lane, t.driver, t.machine)
        counter = s.conformance if t.is_conformance else s.stress
        counter[t.outcome] = counter.get(t.outcome, 0) + 1
        s.add_fallbacks(t.fallbacks)
    return sorted(out.values(), key=lambda s: (not s.is_reference, s.machine, s.driver))


def variables(data: ReportData) -> dict[str, Any]:
    """Template variables of the summary section."""
    return {"summaries": driver_summaries(data.rows, data.stress_rows, data.reference)}
