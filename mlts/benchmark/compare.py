"""Baseline comparison: per case, did latency or accuracy regress beyond thresholds and beyond noise?

Verdicts, per case and overall (the worst case): PASS, WARN, FAIL, in the manner of TFLite's delegate
performance benchmark. The rules (see `Thresholds` for the numbers):

- both runs ok, both records carrying `latency.samples_ms`: latency is decided on the samples
  (decision.py: Mann-Whitney U p-value against `alpha`, bootstrap interval of the ratio of medians,
  holding `run_noise_pct` of run-to-run noise, against `latency_slowdown_pct`). Several records of one
  case on a side (merged runs: `a,b,c`) are separate runs, and a record's `latency.repetition_counts`
  (`mlts benchmark --repeat N`) splits it into repetitions: their spread feeds the interval, and more
  runs narrow it. Bad samples in the current record FAIL, in the baseline WARN.
- both runs ok, a record without samples (an old run): median (p50) latency FAILs when it grew by
  more than `latency_fail_pct` percent, WARNs above `latency_warn_pct` percent, but only when the
  growth in milliseconds is also larger than the noise: noise_ms = noise_k * max(spread(baseline),
  spread(current)) with spread(run) = max(p90_ms - p50_ms, std_ms / sqrt(count)).
- both runs ok: accuracy (top-1/top-5 accuracy against labels, top-1/top-5 agreement with the
  reference) FAILs when it dropped by more than `accuracy_fail_points` percentage points, WARNs
  above `accuracy_warn_points`. A CTS verdict that turns from pass to fail is a FAIL.
- a case that ran (ok) and now errors or is unsupported: FAIL.
- a current "ok" record without a usable median (missing, NaN, infinite, negative, not a number) or
  with an accuracy metric that is not a finite number: FAIL (nothing was measured that could pass);
  the same in the baseline: WARN (the case cannot be judged). Neither ever passes silently.
- a case only in one of the two (new or missing): WARN; a case that did not run in either: PASS.
- both runs ok and both records carry `conditions`: WARN when they were not measured alike
  (condition_warnings: thread pools, requested threads, other load on the machine).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

from mlts.runtime import MltsError, ResultCode

from .case_comparison import Origin, compare_case
from .compare_markdown import comparison_markdown
from .compare_row import SEVERITY, Row, verdict_counts, worst
from .decision import FAIL, WARN
from .record_schema import BENCHMARK, CaseKey, case_key
from .thresholds import Thresholds


@dataclass
class Comparison:
    """What `compare` found: one row per case (the worst verdicts first), the thresholds, and notes."""

    rows: list[Row]
    thresholds: Thresholds
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return worst(r.verdict for r in self.rows)

    def counts(self) -> dict[str, int]:
        return verdict_counts(self.rows)

    def exit_code(self, *, fail_on_warn: bool = False) -> int:
        """0 on PASS and WARN, 1 on FAIL (and on WARN with fail_on_warn)."""
        v = self.verdict
        return 1 if v == FAIL or (fail_on_warn and v == WARN) else 0

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "counts": self.counts(), "thresholds": self.thresholds.to_dict(),
                "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def to_markdown(self) -> str:
        """A summary for a CI comment (compare_markdown)."""
        return comparison_markdown(self.rows, self.thresholds, self.notes)


def _latest(records: Iterable[dict], which: str, notes: list[str]) -> dict[CaseKey, dict]:
    latest: dict[CaseKey, dict] = {}
    repeats: dict[CaseKey, int] = {}
    for r in records:
        if r.get("kind") != BENCHMARK:
            continue
        k = case_key(r)
        if k in latest:
            repeats[k] = repeats.get(k, 1) + 1
        latest[k] = r
    for k, n in repeats.items():
        notes.append(f"{which}: {n} records for {' / '.join(k)}: latency decided on the samples of every ok "
                     "run among them, status and accuracy on the last")
    return latest


def _all_by_key(records: Iterable[dict]) -> dict[CaseKey, list[dict]]:
    out: dict[CaseKey, list[dict]] = {}
    for r in records:
        if r.get("kind") == BENCHMARK:
            out.setdefault(case_key(r), []).append(r)
    return out


def compare(baseline_records: Iterable[dict], current_records: Iterable[dict],
            thresholds: Thresholds | None = None, *, origin: Origin | None = None) -> Comparison:
    """Compare two sets of results records (from `read_results`); only "benchmark" records count.
    `origin` names a record's file in messages about its content."""
    t = thresholds or Thresholds()
    notes: list[str] = []
    baseline_records, current_records = list(baseline_records), list(current_records)
    base = _latest(baseline_records, "baseline", notes)
    cur = _latest(current_records, "current", notes)
    if not base:
        raise MltsError(ResultCode.BAD_DATA, "the baseline has no benchmark records")
    if not cur:
        raise MltsError(ResultCode.BAD_DATA, "the current results have no benchmark records")
    base_runs, cur_runs = _all_by_key(baseline_records), _all_by_key(current_records)
    rows, unrecorded = [], {"baseline": 0, "current": 0}
    for key in sorted(set(base) | set(cur)):
        row = Row(*key)
        compare_case(row, base.get(key), cur.get(key), t, unrecorded, origin, (base_runs.get(key), cur_runs.get(key)))
        rows.append(row)
    if any(unrecorded.values()):
        where = " and ".join(f"{n} {side} record(s)" for side, n in unrecorded.items() if n)
        notes.append(f"measurement conditions (thread pools, machine load) were not recorded in {where}; "
                     "those cases were compared without checking them")
    rows.sort(key=lambda r: (-SEVERITY[r.verdict], r.key))
    return Comparison(rows=rows, thresholds=t, notes=notes)
