"""Judging one case of a baseline comparison: its baseline record against its current one (status,
latency on the samples or on the summary statistics, accuracy, measurement conditions), each finding
flagged on the case's Row. The rules are compare.py's."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from mlts.runtime import MltsError

from .compare_row import Row, fmt_ms
from .condition_warnings import condition_warnings
from .decision import FAIL, PASS, WARN, Decision, Side, as_samples, decide, split_repetitions
from .thresholds import Thresholds, spread_ms

#: classifiers' figures, then detectors' (detection_metrics): mAP@0.5 and matched detections, in percentage points
ACCURACY_METRICS = ("top1_accuracy", "top5_accuracy", "top1_agreement", "top5_agreement", "map50",
                    "detection_agreement")
_EPS = 1e-9  # "more than a threshold": a value equal to it up to float rounding is not more


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
            row.reasons.append(f"latency {row.delta_pct:+.1f}% within noise (±{fmt_ms(row.noise_ms)} ms)")
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


def compare_case(row: Row, base: dict | None, cur: dict | None, t: Thresholds,
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
