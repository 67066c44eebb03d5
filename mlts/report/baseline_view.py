"""A baseline comparison (mlts.benchmark.compare's Comparison) as the report's baseline section shows it:
each row's latency and top-1 accuracy before and after, as text with its better/worse/same colour.

render.py computes it (it needs the baseline's records); the report's sections only display it.
"""
from __future__ import annotations

from dataclasses import dataclass

from mlts.benchmark.compare import Comparison

from .formatting import accuracy_class, fmt_fraction, fmt_pct, fmt_points, fmt_signed_ms, latency_class, number
from .svg import fmt_ms


@dataclass
class BaselineView:
    verdict: str
    counts: dict[str, int]
    thresholds: str
    rows: list[dict]
    notes: list[str]
    sources: list[str]


def baseline_view(comparison: Comparison, sources: list[str]) -> BaselineView:
    """The comparison's rows as table text; `sources` names the baseline's runs, shown in the section."""
    rows = []
    for r in comparison.rows:
        top1 = next((r.accuracy[k] for k in ("top1_accuracy", "map50", "top1_agreement", "detection_agreement")
                     if r.accuracy.get(k)), {})
        delta_points = top1.get("delta_points") if isinstance(top1, dict) else None
        rows.append({
            "verdict": r.verdict, "model": r.model, "driver": r.driver, "mode": r.mode, "preference": r.preference,
            "baseline_ms": fmt_ms(r.baseline_p50_ms), "current_ms": fmt_ms(r.current_p50_ms),
            "delta_ms": fmt_signed_ms(r.delta_ms), "delta_pct": fmt_pct(r.delta_pct),
            "latency_cls": latency_class(r.delta_ms, r.delta_pct, r.noise_ms or 0.0),
            "top1_base": fmt_fraction(number(top1.get("baseline")) if isinstance(top1, dict) else None),
            "top1_cur": fmt_fraction(number(top1.get("current")) if isinstance(top1, dict) else None),
            "top1_delta": fmt_points(delta_points), "top1_cls": accuracy_class(delta_points),
            "status": (f"{r.baseline_status} → {r.current_status}" if r.baseline_status != r.current_status
                       else (r.current_status or "")),
            "reasons": "; ".join(r.reasons),
        })
    return BaselineView(verdict=comparison.verdict, counts=comparison.counts(),
                        thresholds=comparison.thresholds.describe(), rows=rows, notes=list(comparison.notes),
                        sources=sources)
