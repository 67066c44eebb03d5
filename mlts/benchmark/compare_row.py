"""One case of a baseline comparison (Row) and the verdict arithmetic over cases: the worst verdict,
the count of each."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Iterable

from .decision import FAIL, PASS, WARN
from .record_schema import CaseKey

SEVERITY = {PASS: 0, WARN: 1, FAIL: 2}


def worst(verdicts: Iterable[str]) -> str:
    """The most severe of the verdicts (PASS when there are none)."""
    return max(verdicts, key=SEVERITY.__getitem__, default=PASS)


def verdict_counts(rows: Iterable["Row"]) -> dict[str, int]:
    """How many rows have each verdict, FAIL first."""
    verdicts = [r.verdict for r in rows]
    return {v: verdicts.count(v) for v in (FAIL, WARN, PASS)}


@dataclass
class Row:
    """One case of the comparison. Latency in ms; accuracy values are fractions, deltas in points."""

    model: str
    driver: str
    mode: str
    preference: str
    verdict: str = PASS
    reasons: list[str] = field(default_factory=list)
    baseline_status: str | None = None
    current_status: str | None = None
    baseline_p50_ms: float | None = None
    current_p50_ms: float | None = None
    delta_ms: float | None = None
    delta_pct: float | None = None
    noise_ms: float | None = None
    decided_on: str | None = None  # "samples" or "summary" (median and spread)
    baseline_samples: int | None = None
    current_samples: int | None = None
    ratio: float | None = None  # median current / baseline
    ratio_low: float | None = None
    ratio_high: float | None = None
    p_value: float | None = None
    min_detectable_pct: float | None = None
    baseline_runs: int | None = None  # separate runs (merged results) whose samples decided latency
    current_runs: int | None = None
    run_noise_pct: float | None = None  # run-to-run noise the interval held (assumed or measured)
    accuracy: dict = field(default_factory=dict)
    baseline_max_abs_error: float | None = None
    current_max_abs_error: float | None = None
    baseline_cts_pass: bool | None = None
    current_cts_pass: bool | None = None

    @property
    def key(self) -> CaseKey:
        return (self.model, self.driver, self.mode, self.preference)

    def flag(self, verdict: str, reason: str) -> None:
        self.verdict = worst([self.verdict, verdict])
        self.reasons.append(reason)

    def to_dict(self) -> dict:
        return _finite(asdict(self))


def _finite(v: object) -> object:
    """JSON has no NaN or infinity: such a float (an overflowing delta) becomes null."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def fmt_ms(v: float | None) -> str:
    """Milliseconds for a table or a message: two decimals in a readable range, else 3 significant digits."""
    if v is None:
        return "-"
    return f"{v:.2f}" if 1 <= abs(v) < 1e6 else f"{v:.3g}"
