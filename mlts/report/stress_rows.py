"""Stress and conformance records as report rows (one per machine x driver x test, its latest record):
the stress and conformance sections list them and the per-driver summary counts their outcomes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlts.benchmark.records import Results

from .fallbacks import Fallbacks, fallbacks_of
from .formatting import as_dict, number
from .machines import Machine, machine_key
from .svg import fmt_count

STRESS = "stress"
CONFORMANCE = "conformance"
#: SKIPPED: the test could not exercise the driver (never a success: see summary.DriverSummary).
STRESS_OUTCOMES = ("SUCCESS", "SKIPPED", "FAILURE", "HANG", "CRASH")
SKIPPED = "SKIPPED"
#: Worst first, so a driver's failures head its part of the table.
_SEVERITY = {"CRASH": 0, "HANG": 1, "FAILURE": 2, SKIPPED: 3, "SUCCESS": 4}


@dataclass
class StressRow:
    machine: str
    driver: str
    lane: str
    test: str
    outcome: str
    duration: str
    reason: str
    log_tail: str
    timestamp: str
    group: str = STRESS
    checks: list = field(default_factory=list)  # conformance tests: {"check", "verdict", "detail"} in order
    coverage: str = ""  # "6/9 ops, partitioned": how much of the test ran on the driver under test
    coverage_title: str = ""
    fallbacks: Fallbacks | None = None

    @property
    def is_conformance(self) -> bool:
        return self.group == CONFORMANCE


def coverage_of(value: Any) -> tuple[str, str]:
    """("6/9 ops, partitioned", "models: a, b") of a stress record's `coverage`; ("", "") without one."""
    c = as_dict(value)
    on, total = number(c.get("ops_on_driver")), number(c.get("ops_total"))
    if on is None and total is None:
        return "", ""
    text = f"{fmt_count(on)}/{fmt_count(total)} ops" if total is not None else f"{fmt_count(on)} ops"
    if c.get("partitioned") is True:
        text += ", partitioned"
    models = [str(m) for m in c.get("models")] if isinstance(c.get("models"), list) else []
    if not models:
        return text, ""
    return text, "models: " + ", ".join(models[:20]) + (f" … ({len(models)})" if len(models) > 20 else "")


def _check(c: dict) -> dict:
    """A conformance check with the three keys the template reads, as text."""
    return {"check": str(c.get("check") or "?"), "verdict": str(c.get("verdict") or "?"),
            "detail": "" if c.get("detail") is None else str(c.get("detail"))}


def stress_rows(results: Results, machines: dict[tuple, Machine], multi: bool) -> list[StressRow]:
    """Every stress and conformance test's latest record, by lane, worst outcome first."""
    latest: dict[tuple, dict] = {}
    for r in results.records:
        if r.get("kind") != STRESS:
            continue
        key = (machine_key(results, r), str(r.get("driver") or "?"), str(r.get("test") or "?"))
        latest.pop(key, None)
        latest[key] = r
    out = []
    for (mkey, driver, test), r in latest.items():
        m = machines[mkey]
        outcome = str(r.get("outcome") or "UNKNOWN").upper()
        d = number(r.get("duration_s"))
        tail = r.get("log_tail")
        if isinstance(tail, list):
            tail = "\n".join(map(str, tail))
        group = str(r.get("group") or (CONFORMANCE if test.startswith(CONFORMANCE + "_") else STRESS))
        checks = as_dict(r.get("details")).get("checks")
        checks = [_check(c) for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []
        coverage, coverage_title = coverage_of(r.get("coverage"))
        out.append(StressRow(machine=m.label, driver=driver, lane=f"{driver} @ {m.label}" if multi else driver,
                             test=test, outcome=outcome,
                             duration="–" if d is None else f"{d:.2f}" if abs(d) < 1e6 else f"{d:.3g}",
                             reason=str(r.get("reason") or ""), log_tail=str(tail or ""),
                             timestamp=str(r.get("timestamp") or ""), group=group, checks=checks,
                             coverage=coverage, coverage_title=coverage_title,
                             fallbacks=fallbacks_of(r.get("fallbacks"))))
    out.sort(key=lambda s: (s.lane, _SEVERITY.get(s.outcome, -1), s.test))
    return out
