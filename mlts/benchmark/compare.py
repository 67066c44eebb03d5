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
  (decision.condition_warnings: thread pools, requested threads, other load on the machine).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import numpy as np
from mlts.runtime import MltsError, ResultCode

from .decision import (DEFAULT_ALPHA, DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, DEFAULT_SLOWDOWN_PCT,
                       DEFAULT_RUN_NOISE_PCT, FAIL, MIN_SAMPLES, PASS, WARN, Decision, DecisionRule, Side,
                       as_samples, condition_warnings, require_non_negative, split_repetitions,
                       decide, fmt_pct, p_text)
from .records import BENCHMARK, CaseKey, case_key

_SEVERITY = {PASS: 0, WARN: 1, FAIL: 2}
ACCURACY_METRICS = ("top1_accuracy", "top5_accuracy", "top1_agreement", "top5_agreement")
_EPS = 1e-9  # "more than a threshold": a value equal to it up to float rounding is not more


def worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=_SEVERITY.__getitem__, default=PASS)


@dataclass(frozen=True)
class Thresholds:
    """Defaults: a 5% slower median is worth a look (WARN), 15% is a regression (FAIL); a drop of
    0.5 accuracy points is a look, 2 points a regression (with the 1500-image held-out set, 0.5
    points is 7-8 images). noise_k scales the runs' own spread (1 = one spread). Those latency
    numbers judge records without samples; with samples, `rule()` (decision.DecisionRule) judges:
    a 10% slowdown FAILs only when the whole confidence interval is above it, so it is lower than 15%."""

    latency_warn_pct: float = 5.0
    latency_fail_pct: float = 15.0
    accuracy_warn_points: float = 0.5
    accuracy_fail_points: float = 2.0
    noise_k: float = 1.0
    latency_slowdown_pct: float = DEFAULT_SLOWDOWN_PCT
    alpha: float = DEFAULT_ALPHA
    confidence: float = DEFAULT_CONFIDENCE
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    min_samples: int = MIN_SAMPLES
    run_noise_pct: float = DEFAULT_RUN_NOISE_PCT

    def __post_init__(self) -> None:
        require_non_negative(self, ("latency_warn_pct", "latency_fail_pct", "accuracy_warn_points",
                                    "accuracy_fail_points", "noise_k", "latency_slowdown_pct", "run_noise_pct"),
                             "threshold")
        if self.latency_warn_pct > self.latency_fail_pct:
            raise MltsError(ResultCode.BAD_DATA, f"threshold latency_warn_pct ({self.latency_warn_pct}) is above "
                                                 f"latency_fail_pct ({self.latency_fail_pct})")
        if self.accuracy_warn_points > self.accuracy_fail_points:
            raise MltsError(ResultCode.BAD_DATA, f"threshold accuracy_warn_points ({self.accuracy_warn_points}) is "
                                                 f"above accuracy_fail_points ({self.accuracy_fail_points})")
        self.rule()  # alpha, confidence, resamples, seed, min_samples: BAD_DATA naming the field

    def rule(self) -> DecisionRule:
        """The rule for records with samples; its WARN level is latency_warn_pct."""
        return DecisionRule(alpha=self.alpha, slowdown_pct=self.latency_slowdown_pct, warn_pct=self.latency_warn_pct,
                            confidence=self.confidence, resamples=self.resamples, seed=self.seed,
                            min_samples=self.min_samples, run_noise_pct=self.run_noise_pct)

    def describe(self) -> str:
        return (f"latency with samples: {self.rule().describe()}; "
                f"latency without samples (median) WARN > {self.latency_warn_pct:g}%, "
                f"FAIL > {self.latency_fail_pct:g}% "
                f"when beyond noise ({self.noise_k:g} x the larger run spread, spread = max(p90 - p50, std/sqrt(n))); "
                f"accuracy drop WARN > {self.accuracy_warn_points:g}, FAIL > {self.accuracy_fail_points:g} points; "
                "CTS pass -> fail and ok -> error: FAIL; a current median that is missing, NaN, infinite or "
                "negative, or an accuracy that is not a finite number: FAIL (in the baseline: WARN); "
                "new or missing case: WARN; runs measured under different conditions (thread pools, a busy "
                "machine): WARN")

    def to_dict(self) -> dict:
        return asdict(self)


def spread_ms(latency: dict | None) -> float:
    """A run's own variability: max(p90 - p50, std / sqrt(count)), 0 when unknown (or not finite)."""
    if not latency:
        return 0.0
    try:
        upper = float(latency["p90_ms"]) - float(latency["p50_ms"])
    except (KeyError, TypeError, ValueError, OverflowError):
        upper = 0.0
    try:
        sem = float(latency["std_ms"]) / math.sqrt(int(latency["count"]))
    except (KeyError, TypeError, ValueError, OverflowError, ZeroDivisionError):
        sem = 0.0
    return max([v for v in (upper, sem) if math.isfinite(v)] + [0.0])


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


def _finite(v):
    """JSON has no NaN or infinity: such a float (an overflowing delta) becomes null."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


@dataclass
class Comparison:
    rows: list[Row]
    thresholds: Thresholds
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return worst(r.verdict for r in self.rows)

    def counts(self) -> dict[str, int]:
        return {v: sum(1 for r in self.rows if r.verdict == v) for v in (FAIL, WARN, PASS)}

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
        """A summary for a CI comment: the cases that need a look in a table, passing ones folded away."""
        c = self.counts()
        out = [f"### mlts compare: {self.verdict}", "",
               f"{c[FAIL]} FAIL, {c[WARN]} WARN, {c[PASS]} PASS of {len(self.rows)} case(s).", "",
               f"Thresholds: {self.thresholds.describe()}.", ""]
        show_pref = any(r.preference != "FAST_SINGLE_ANSWER" for r in self.rows)
        flagged = [r for r in self.rows if r.verdict != PASS]
        passing = [r for r in self.rows if r.verdict == PASS]
        if flagged:
            out += _table(flagged, show_pref, self.thresholds.confidence) + [""]
        if passing:
            label = "All cases pass" if not flagged else f"{len(passing)} passing case(s)"
            out += ["<details>", f"<summary>{label}</summary>", ""]
            out += _table(passing, show_pref, self.thresholds.confidence) + ["", "</details>", ""]
        if self.notes:
            out += ["Notes:", ""] + [f"- {md_escape(n)}" for n in self.notes] + [""]
        return "\n".join(out)


#: Inline Markdown inside a table cell (never at a line start, so #, -, + and 1. cannot start a block).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")
_MD_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def md_escape(text: object) -> str:
    """Record text (driver and model names, messages) as literal Markdown in one table cell: line
    breaks and control characters become spaces, HTML characters entities, and every character that
    Markdown or a GFM table gives a meaning (pipes, backticks, emphasis, links, $ math) is escaped."""
    s = re.sub(r"[\x00-\x1f\x7f\u2028\u2029]+", " ", str(text)).strip()
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = re.sub(r"^([#+=-])", r"\\\1", re.sub(r"^(\d+)([.)])", r"\1\\\2", s))  # no block at a list item's start
    return re.sub(r"[&<>]", lambda m: _MD_HTML[m.group()], s)



def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if 1 <= abs(v) < 1e6 else f"{v:.3g}"


def _top1(r: Row) -> str:
    for name in ("top1_accuracy", "top1_agreement"):
        a = r.accuracy.get(name)
        if a and (a["baseline"] is not None or a["current"] is not None):
            b, c = a["baseline"], a["current"]
            text = f"{'-' if b is None else f'{100 * b:.1f}'} → {'-' if c is None else f'{100 * c:.1f}'}"
            return text + (" (agreement)" if name == "top1_agreement" else "")
    return "-"


def _ratio(r: Row) -> str:
    if r.ratio is None:
        return "-"
    return f"{r.ratio:.3f}" + (f" [{r.ratio_low:.3f}, {r.ratio_high:.3f}]" if r.ratio_low is not None else "")


def _table(rows: list[Row], show_pref: bool, confidence: float) -> list[str]:
    head = ["Verdict", "Model", "Driver", "Mode"] + (["Preference"] if show_pref else []) + [
        "Median latency (ms)", "Δ", f"Ratio [{100 * confidence:g}% CI]", "p", "Could detect", "Top-1 (%)",
        "Max abs error", "Why"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        latency = (f"{_ms(r.baseline_p50_ms)} → {_ms(r.current_p50_ms)}"
                   if r.baseline_p50_ms is not None or r.current_p50_ms is not None else "-")
        delta = f"{r.delta_pct:+.1f}%" if r.delta_pct is not None else "-"
        err = (f"{r.baseline_max_abs_error:.3g} → {r.current_max_abs_error:.3g}"
               if r.baseline_max_abs_error is not None and r.current_max_abs_error is not None else "-")
        # Record text is escaped; the numbers are formatted here and hold nothing to escape.
        names = [r.model, r.driver, r.mode] + ([r.preference] if show_pref else [])
        cells = [r.verdict] + [md_escape(x) for x in names] + [
            latency, delta, _ratio(r), p_text(r.p_value),
            f"≥ {fmt_pct(r.min_detectable_pct)}" if r.min_detectable_pct is not None else "-",
            _top1(r), err, md_escape("; ".join(r.reasons)) or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


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


def _number(d: dict | None, name: str) -> float | None:
    """A finite number, else None (NaN or infinity compares as nothing, so it can never pass)."""
    v = d.get(name) if isinstance(d, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:  # an integer beyond float
        return None
    return v if math.isfinite(v) else None


def _unusable(d: dict | None, name: str, *, negative_ok: bool = True) -> str | None:
    """Why `d[name]` is not a usable measurement ("is missing", "is NaN", ...); None when it is."""
    v = d.get(name) if isinstance(d, dict) else None
    if v is None:
        return "is missing"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"is not a number ({str(v)[:40]!r})"
    n = _number(d, name)
    if n is None:
        return "is NaN" if isinstance(v, float) and math.isnan(v) else "is not finite"
    if n < 0 and not negative_ok:
        return f"is negative ({n:g} ms)"
    return None


#: Where a record came from (its results file), for messages about its content; None when unknown.
Origin = Callable[[dict], "str | None"]


def _run_samples(row: Row, record: dict, side: str, origin: Origin | None) -> tuple[np.ndarray, ...] | None:
    """The record's `latency.samples_ms`, split into its repetitions (`latency.repetition_counts`); None
    when it has none. Malformed samples FAIL a current record (nothing valid was measured) and WARN on a
    baseline one, and then count as absent."""
    latency = _dict(record.get("latency"))
    if latency.get("samples_ms") is None:
        return None
    try:
        samples = as_samples(latency["samples_ms"], "latency.samples_ms")
        return tuple(split_repetitions(samples, latency.get("repetition_counts"), "latency.repetition_counts"))
    except MltsError as e:
        where = origin(record) if origin else None
        what = f"{side} {e.message}" + (f" (in {where})" if where else "")
        if side == "current":
            row.flag(FAIL, f"{what}: not a valid measurement")
        else:
            row.flag(WARN, f"{what}; samples not used")
        return None


def _side(row: Row, record: dict, others: list[dict] | None, side: str, origin: Origin | None) -> Side | None:
    """The latest record's samples, with those of the side's other ok runs of the case (merged results) as
    further runs: one per run_id, its last record (the same run merged twice, or a case retried within a
    run, is one run); None when the latest record has no usable samples."""
    latest = _run_samples(row, record, side, origin)
    if latest is None:
        return None
    last_of_run: dict = {}
    for k, r in enumerate(others or []):
        last_of_run[r.get("run_id") or ("no run_id", k)] = r
    seen_latest = record.get("run_id") or None
    runs = [_run_samples(row, r, side, origin) for key, r in last_of_run.items()
            if r is not record and key != seen_latest and r.get("status", "ok") == "ok"
            and _dict(r.get("latency")).get("samples_ms") is not None]
    return Side(tuple(r for r in runs if r is not None) + (latest,))


def _apply_decision(row: Row, d: Decision) -> None:
    row.decided_on, row.baseline_samples, row.current_samples = "samples", d.n_baseline, d.n_current
    row.ratio, row.ratio_low, row.ratio_high = d.ratio, d.ratio_low, d.ratio_high
    row.p_value, row.min_detectable_pct = d.p_value, d.min_detectable_pct
    row.baseline_runs, row.current_runs, row.run_noise_pct = d.baseline_runs, d.current_runs, d.run_noise_pct
    if d.reason and d.verdict != PASS:
        row.flag(d.verdict, d.reason)
    elif d.reason:
        row.reasons.append(d.reason)


def _compare_latency(row: Row, base: dict, cur: dict, t: Thresholds, origin: Origin | None = None,
                     runs: tuple[list[dict] | None, list[dict] | None] = (None, None)) -> str | None:
    """Judge latency; returns the note for a row decided on the summary statistics, to go last."""
    bl, cl = _dict(base.get("latency")), _dict(cur.get("latency"))
    b_bad, c_bad = _unusable(bl, "p50_ms", negative_ok=False), _unusable(cl, "p50_ms", negative_ok=False)
    b, c = (None if b_bad else _number(bl, "p50_ms")), (None if c_bad else _number(cl, "p50_ms"))
    row.baseline_p50_ms, row.current_p50_ms = b, c
    if c_bad:
        row.flag(FAIL, f"current median latency {c_bad}: not a valid measurement")
    if b_bad:
        row.flag(WARN, f"baseline median latency {b_bad}; latency not judged")
    if b_bad or c_bad:
        return None
    row.delta_ms = c - b
    if b <= 0:
        row.reasons.append("baseline median is 0 ms; latency not judged")
        return None
    row.delta_pct = 100.0 * row.delta_ms / b
    b_samples, c_samples = _side(row, base, runs[0], "baseline", origin), _side(row, cur, runs[1], "current", origin)
    if b_samples is not None and c_samples is not None:
        _apply_decision(row, decide(b_samples, c_samples, t.rule()))
        return None
    row.decided_on, row.ratio = "summary", c / b
    row.noise_ms = t.noise_k * max(spread_ms(bl), spread_ms(cl))
    row.min_detectable_pct = 100.0 * row.noise_ms / b
    if row.delta_pct > t.latency_warn_pct + _EPS:
        if row.delta_ms <= row.noise_ms:
            row.reasons.append(f"latency {row.delta_pct:+.1f}% within noise (±{_ms(row.noise_ms)} ms)")
        elif row.delta_pct > t.latency_fail_pct + _EPS:
            row.flag(FAIL, f"latency {row.delta_pct:+.1f}% (> {t.latency_fail_pct:g}%)")
        else:
            row.flag(WARN, f"latency {row.delta_pct:+.1f}% (> {t.latency_warn_pct:g}%)")
    lacking = " and ".join(side for side, v in (("baseline", b_samples), ("current", c_samples)) if v is None)
    return f"no samples in {lacking}: decided on the summary statistics"


def _compare_accuracy(row: Row, base: dict, cur: dict, t: Thresholds) -> None:
    ba, ca = _dict(base.get("accuracy")), _dict(cur.get("accuracy"))
    for name in ACCURACY_METRICS:
        b, c = _number(ba, name), _number(ca, name)
        b_bad = ba.get(name) is not None and _unusable(ba, name)
        c_bad = ca.get(name) is not None and _unusable(ca, name)
        if c_bad:
            row.flag(FAIL, f"current {name} {c_bad}: not a valid measurement")
        if b_bad:
            row.flag(WARN, f"baseline {name} {b_bad}; not judged")
        if b_bad or c_bad or (b is None and c is None):
            continue
        drop = None if b is None or c is None else round(100.0 * (b - c), 9)
        row.accuracy[name] = {"baseline": b, "current": c, "delta_points": None if drop is None else -drop}
        if c is None:
            row.flag(WARN, f"{name} not measured now")
        elif drop is not None and drop > t.accuracy_fail_points + _EPS:
            row.flag(FAIL, f"{name} -{drop:.2f} points (> {t.accuracy_fail_points:g})")
        elif drop is not None and drop > t.accuracy_warn_points + _EPS:
            row.flag(WARN, f"{name} -{drop:.2f} points (> {t.accuracy_warn_points:g})")
    if ba.get("label_samples") and ca.get("label_samples") and ba["label_samples"] != ca["label_samples"]:
        row.reasons.append(f"accuracy on {ba['label_samples']} vs {ca['label_samples']} images")
    row.baseline_max_abs_error = _number(ba, "max_abs_error")
    row.current_max_abs_error = _number(ca, "max_abs_error")
    b_cts, c_cts = ba.get("cts_pass"), ca.get("cts_pass")
    row.baseline_cts_pass = b_cts if isinstance(b_cts, bool) else None
    row.current_cts_pass = c_cts if isinstance(c_cts, bool) else None
    if row.current_cts_pass is False:
        if row.baseline_cts_pass is True:
            row.flag(FAIL, "outside CTS tolerance (passed in baseline)")
        elif row.baseline_cts_pass is None:
            row.flag(WARN, "outside CTS tolerance (not checked in baseline)")
        else:
            row.reasons.append("still outside CTS tolerance")


def _dict(v: object) -> dict:
    return v if isinstance(v, dict) else {}


def _compare_conditions(row: Row, base: dict, cur: dict, unrecorded: dict[str, int]) -> None:
    """WARN when the two runs were measured under different conditions; count records without them."""
    missing = [side for side, r in (("baseline", base), ("current", cur)) if r.get("conditions") is None]
    for side in missing:
        unrecorded[side] += 1
    if not missing:
        for reason in condition_warnings(base["conditions"], cur["conditions"]):
            row.flag(WARN, reason)


def _compare_case(row: Row, base: dict | None, cur: dict | None, t: Thresholds,
                  unrecorded: dict[str, int], origin: Origin | None = None,
                  runs: tuple[list[dict] | None, list[dict] | None] = (None, None)) -> None:
    if base is None:
        row.current_status = cur.get("status", "ok")
        row.flag(WARN, "new case (not in baseline)")
        return
    if cur is None:
        row.baseline_status = base.get("status", "ok")
        row.flag(WARN, "missing (not in current)")
        return
    bs, cs = base.get("status", "ok"), cur.get("status", "ok")
    row.baseline_status, row.current_status = bs, cs
    if bs == "ok" and cs != "ok":
        what = f"now {cs}" + (f": {cur['message']}" if cur.get("message") else "")
        if cs == "unsupported" and cur.get("unsupported_ops"):
            what += f" ({', '.join(map(str, cur['unsupported_ops']))})"
        row.flag(FAIL, what)
        return
    if bs != "ok" and cs == "ok":
        row.reasons.append(f"now runs (was {bs})")
        return
    if bs != "ok":
        if bs == "unsupported" and cs == "error":
            row.flag(WARN, "now errors (was unsupported)" + (f": {cur['message']}" if cur.get("message") else ""))
        else:
            row.reasons.append(f"still {cs}")
        return
    note = _compare_latency(row, base, cur, t, origin, runs)
    _compare_accuracy(row, base, cur, t)
    _compare_conditions(row, base, cur, unrecorded)
    if note:
        row.reasons.append(note)


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
        _compare_case(row, base.get(key), cur.get(key), t, unrecorded, origin, (base_runs.get(key), cur_runs.get(key)))
        rows.append(row)
    if any(unrecorded.values()):
        where = " and ".join(f"{n} {side} record(s)" for side, n in unrecorded.items() if n)
        notes.append(f"measurement conditions (thread pools, machine load) were not recorded in {where}; "
                     "those cases were compared without checking them")
    rows.sort(key=lambda r: (-_SEVERITY[r.verdict], r.key))
    return Comparison(rows=rows, thresholds=t, notes=notes)
