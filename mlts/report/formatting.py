"""How the report writes numbers and colours differences: shared by every section and by the template's
filters, so a percentage or a "better/worse/same" looks the same wherever it appears.

Records may come from other versions or be edited by hand: every reader here takes anything and
answers "–" (or "") rather than raising.
"""
from __future__ import annotations

from typing import Any

from .svg import finite_number, fmt_ms

#: A latency difference within this many percent of the reference's (or within the runs' own
#: noise, compare.py's rule) is shown as "same" (grey), not better or worse.
SAME_LATENCY_PCT = 5.0
#: An accuracy difference within this many percentage points is "same" (compare.py's WARN threshold).
SAME_ACCURACY_POINTS = 0.5


def number(v: Any) -> float | None:
    """A finite JSON number, else None: records from other versions or hands may hold anything."""
    return finite_number(v)


def as_dict(v: Any) -> dict:
    """v when it is a JSON object, else an empty one (a field of the wrong type reads as absent)."""
    return v if isinstance(v, dict) else {}


def _no_negative_zero(v: float, digits: int) -> float:
    """-0.04 shown with one decimal is "0.0", not "-0.0" (a sign that says nothing)."""
    return 0.0 if round(v, digits) == 0 else v


def _one_decimal(v: Any, signed: bool) -> str:
    """v with one decimal ("+" when signed); "–" for no finite number, 3 significant digits when absurdly large."""
    n = number(v)
    if n is None:
        return "–"
    if abs(n) >= 1e6:
        return f"{n:+.3g}" if signed else f"{n:.3g}"
    n = _no_negative_zero(n, 1)
    return "0.0" if n == 0 else (f"{n:+.1f}" if signed else f"{n:.1f}")


def fmt_pct(v: float | None, signed: bool = True) -> str:
    """A percentage with one decimal ("+4.2%"); "–" for no number."""
    text = _one_decimal(v, signed)
    return text if text == "–" else text + "%"


def fmt_fraction(v: float | None) -> str:
    """A 0..1 fraction as a percentage."""
    n = number(v)
    return _one_decimal(None if n is None else 100 * n, False)


def fmt_points(v: float | None) -> str:
    """Percentage points with a sign ("+0.5")."""
    return _one_decimal(v, True)


def fmt_signed_ms(v: float | None) -> str:
    """A latency difference in milliseconds with its sign ("−1.20", "±0")."""
    if v is None:
        return "–"
    return ("+" if v > 0 else "−" if v < 0 else "±") + fmt_ms(abs(v))


def latency_class(delta_ms: float | None, delta_pct: float | None, noise_ms: float = 0.0) -> str:
    """better / worse / same for a latency difference (lower is better); "" when there is none."""
    if delta_ms is None or delta_pct is None:
        return ""
    if abs(delta_pct) <= SAME_LATENCY_PCT or abs(delta_ms) <= noise_ms:
        return "same"
    return "better" if delta_ms < 0 else "worse"


def accuracy_class(delta_points: float | None) -> str:
    """better / worse / same for an accuracy difference in percentage points (higher is better)."""
    if delta_points is None:
        return ""
    if abs(delta_points) <= SAME_ACCURACY_POINTS + 1e-9:
        return "same"
    return "better" if delta_points > 0 else "worse"
