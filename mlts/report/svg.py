"""Inline SVG charts for the HTML report: drawn here as text so the report needs no plotting library,
no scripts and no network, and prints as crisply as it shows on screen.

Every function returns `markupsafe.Markup` (safe to insert into an autoescaped template) and escapes
every piece of text it places in the drawing itself. Colours come from CSS classes in the report's
stylesheet, except the per-device partition colours, which are data.
"""
from __future__ import annotations

import math
from typing import Sequence

from markupsafe import Markup, escape

#: Device colours of the partition bars, assigned in order of first appearance (the CPU reference is grey).
PALETTE = ("#1a73e8", "#e8710a", "#9334e6", "#12b5cb", "#c5221f", "#188038", "#f9ab00", "#d01884",
           "#5f6368", "#7cb342")
REFERENCE_COLOUR = "#9aa0a6"
#: Latencies above this (about 11.6 days per inference), or below zero, are not measurements a chart can
#: place on a shared axis: such a row or histogram is left out of the drawing and a note says so.
MAX_CHART_MS = 1e9


def fmt_ms(v: float | None) -> str:
    """Milliseconds with about three significant digits: enough to compare, short enough for a table cell."""
    v = finite_number(v)
    if v is None:
        return "–"
    a = abs(v)
    if a >= 1e6:  # absurd, but a table cell must stay a table cell
        return f"{v:.3g}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a == 0:
        return "0"
    return f"{v:.3g}"


def fmt_count(v: float | None) -> str:
    """A count: digits up to a billion, beyond that (no real count) three significant digits."""
    n = finite_number(v)
    if n is None:
        return "–"
    return f"{int(n)}" if abs(n) < 1e9 else f"{n:.3g}"


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round axis ticks covering [lo, hi] (steps of 1, 2 or 5 times a power of ten).

    Float arithmetic throughout and a bounded count, so any finite range gives ticks (an int power
    of ten near 1e308 would overflow when added to a float)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, target)
    if not (math.isfinite(raw) and raw > 0):
        return [lo, hi]
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next((m * mag for m in (1.0, 2.0, 5.0, 10.0) if m * mag >= raw), raw)
    if not (math.isfinite(step) and step > 0):
        return [lo, hi]
    first = math.floor(lo / step)
    ticks = []
    for k in range(target * 3 + 3):
        t = (first + k) * step
        if not math.isfinite(t) or t > hi + step * 1e-9:
            break
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 12))
    return ticks or [lo, hi]


def _n(x: float) -> str:
    """A coordinate: two decimals are below a pixel's worth and keep the markup small."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def finite_number(v) -> float | None:
    """A finite number as a float, else None (NaN, infinities, ints beyond float, bools, anything else)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:  # an int beyond float
        return None
    return v if math.isfinite(v) else None


def _plottable(v: float | None) -> bool:
    return v is not None and 0.0 <= v <= MAX_CHART_MS


def _not_drawn(what: str, why: str) -> Markup:
    return Markup(f'<p class="note not-drawn">{escape(what)} not drawn: {escape(why)}</p>')


def histogram_svg(histogram: dict | None, *, p50: float | None = None, title: str = "",
                  width: int = 260, height: int = 110) -> Markup | None:
    """A latency histogram of one case (equal-width bins from the record), with the median marked.

    None when the record has no usable histogram (the template then says so).
    """
    if not isinstance(histogram, dict):
        return None
    edges = histogram.get("edges_ms")
    counts = histogram.get("counts")
    if not isinstance(edges, list) or not isinstance(counts, list) or len(edges) != len(counts) + 1 or not counts:
        return None
    edges = [finite_number(e) for e in edges]
    counts = [finite_number(c) for c in counts]
    if any(e is None for e in edges) or any(c is None or c < 0 for c in counts):
        return _not_drawn("histogram", "its bins hold values that are not finite numbers (or negative counts)")
    if not all(_plottable(e) for e in edges) or edges != sorted(edges):
        return _not_drawn("histogram", f"bin edges {fmt_ms(min(edges))}..{fmt_ms(max(edges))} ms are out of "
                                       f"order or outside 0..{MAX_CHART_MS:g} ms")
    left, right, top, bottom = 8, 8, 16, 22
    pw, ph = width - left - right, height - top - bottom
    lo, hi = edges[0], edges[-1]
    span = hi - lo
    cmax = max(counts) or 1
    parts = [f'<svg class="chart hist" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title or "latency histogram")}">',
             f"<title>{escape(title or 'latency histogram')}</title>"]
    if span <= 0:  # every run took the same time: one full-width bar
        bars = [(left, pw, counts[0])]
    else:
        bars = []
        for k, c in enumerate(counts):
            x0 = left + pw * (edges[k] - lo) / span
            x1 = left + pw * (edges[k + 1] - lo) / span
            bars.append((x0, max(0.5, x1 - x0 - 1), c))
    for x, w, c in bars:
        h = ph * c / cmax
        parts.append(f'<rect class="bar" x="{_n(x)}" y="{_n(top + ph - h)}" width="{_n(w)}" height="{_n(h)}">'
                     f"<title>{fmt_count(c)} run(s)</title></rect>")
    base_y = top + ph
    parts.append(f'<line class="axis" x1="{left}" y1="{_n(base_y)}" x2="{left + pw}" y2="{_n(base_y)}"/>')
    parts.append(f'<text class="tick" x="{left}" y="{height - 6}">{fmt_ms(lo)}</text>')
    parts.append(f'<text class="tick" x="{left + pw}" y="{height - 6}" text-anchor="end">{fmt_ms(hi)} ms</text>')
    parts.append(f'<text class="tick" x="{left + pw}" y="{top - 5}" text-anchor="end">'
                 f"tallest bar {fmt_count(cmax)} runs</text>")
    p50 = finite_number(p50)
    if p50 is not None:
        parts.append(f'<text class="tick median-label" x="{left}" y="{top - 5}">p50 {fmt_ms(p50)} ms</text>')
    if p50 is not None and span > 0 and lo <= p50 <= hi:
        x = left + pw * (p50 - lo) / span
        parts.append(f'<line class="median" x1="{_n(x)}" y1="{top}" x2="{_n(x)}" y2="{_n(base_y)}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))


def percentile_svg(rows: Sequence[tuple[str, dict, bool]], *, title: str = "", width: int = 620) -> Markup | None:
    """Latency percentiles of several drivers on one model, on a shared axis.

    rows: (label, latency record, is_reference). Per driver: a thin line min..p99, a box p50..p90, a
    tick at p50, a dot at the mean. None when no row has latency numbers; rows whose numbers cannot
    share an axis (negative, or beyond MAX_CHART_MS) are left out and named under the chart.
    """
    usable, skipped = [], []
    for label, lat, is_ref in rows:
        if not isinstance(lat, dict):
            continue
        vals = {k: finite_number(lat.get(k)) for k in ("min_ms", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "max_ms")}
        if vals["p50_ms"] is None:
            if lat.get("p50_ms") is not None:
                skipped.append(f"{label} (median {str(lat.get('p50_ms'))[:20]})")
            continue
        drawn = [k for k in vals if k != "max_ms" or vals["p99_ms"] is None]  # max stands in for a missing p99
        bad = [f"{k.removesuffix('_ms')} {fmt_ms(vals[k])}" for k in drawn
               if vals[k] is not None and not _plottable(vals[k])]
        vals["p90_ms"] = vals["p90_ms"] if vals["p90_ms"] is not None else vals["p50_ms"]
        vals["p99_ms"] = vals["p99_ms"] if vals["p99_ms"] is not None else (vals["max_ms"] or vals["p90_ms"])
        vals["min_ms"] = vals["min_ms"] if vals["min_ms"] is not None else vals["p50_ms"]
        if bad:
            skipped.append(f"{label} ({', '.join(bad)} ms)")
            continue
        usable.append((label, vals, is_ref))
    why = f"latency outside 0..{MAX_CHART_MS:g} ms or not a number: " + "; ".join(skipped)
    if not usable:
        return _not_drawn("latency chart", why) if skipped else None
    label_w, right, top, row_h = 190, 70, 10, 24
    axis_h = 28 + (14 if skipped else 0)
    pw = width - label_w - right
    height = top + row_h * len(usable) + axis_h
    hi = max(v["p99_ms"] for _, v, _ in usable)
    ticks = nice_ticks(0.0, hi if hi > 0 else 1.0)
    hi = max(hi, ticks[-1]) if ticks else hi
    hi = hi if hi > 0 else 1.0

    def x(v: float) -> float:
        return label_w + pw * max(0.0, v) / hi

    parts = [f'<svg class="chart pct" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title or "latency percentiles")}">',
             f"<title>{escape(title or 'latency percentiles')}</title>"]
    axis_y = top + row_h * len(usable) + 2
    for t in ticks:
        parts.append(f'<line class="grid" x1="{_n(x(t))}" y1="{top - 4}" x2="{_n(x(t))}" y2="{_n(axis_y)}"/>')
        parts.append(f'<text class="tick" x="{_n(x(t))}" y="{_n(axis_y + 12)}" text-anchor="middle">{t:g}</text>')
    parts.append(f'<text class="tick" x="{label_w + pw}" y="{_n(axis_y + 25)}" text-anchor="end">ms per inference '
                 f'(line min–p99, box p50–p90, dot mean)</text>')
    if skipped:
        shown = why if len(why) <= 110 else why[:109] + "…"
        parts.append(f'<text class="tick not-drawn" x="{label_w + pw}" y="{_n(axis_y + 39)}" text-anchor="end">'
                     f"not drawn: {escape(shown)}<title>{escape(why)}</title></text>")
    for i, (label, v, is_ref) in enumerate(usable):
        cy = top + row_h * i + row_h / 2
        cls = "ref" if is_ref else "drv"
        shown = label if len(label) <= 30 else label[:29] + "…"
        parts.append(f'<text class="label{" ref-label" if is_ref else ""}" x="{label_w - 8}" y="{_n(cy + 4)}" '
                     f'text-anchor="end">{escape(shown)}<title>{escape(label)}</title></text>')
        parts.append(f'<line class="whisker {cls}" x1="{_n(x(v["min_ms"]))}" y1="{_n(cy)}" '
                     f'x2="{_n(x(v["p99_ms"]))}" y2="{_n(cy)}"/>')
        bx0, bx1 = x(v["p50_ms"]), x(v["p90_ms"])
        parts.append(f'<rect class="box {cls}" x="{_n(bx0)}" y="{_n(cy - 6)}" width="{_n(max(1.5, bx1 - bx0))}" '
                     f'height="12"><title>{escape(label)}: p50 {fmt_ms(v["p50_ms"])} ms, p90 {fmt_ms(v["p90_ms"])} ms, '
                     f'p99 {fmt_ms(v["p99_ms"])} ms</title></rect>')
        parts.append(f'<line class="p50" x1="{_n(bx0)}" y1="{_n(cy - 8)}" x2="{_n(bx0)}" y2="{_n(cy + 8)}"/>')
        if v["mean_ms"] is not None:
            parts.append(f'<circle class="mean" cx="{_n(x(v["mean_ms"]))}" cy="{_n(cy)}" r="2.5"/>')
        parts.append(f'<text class="value" x="{_n(x(v["p99_ms"]) + 6)}" y="{_n(cy + 4)}">{fmt_ms(v["p50_ms"])}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def partition_svg(ops_per_device: dict, colours: dict[str, str], *, title: str = "",
                  width: int = 320, height: int = 18) -> Markup | None:
    """One stacked bar: the share of the model's operations each device ran."""
    items = [(str(d), finite_number(n)) for d, n in ops_per_device.items()] if isinstance(ops_per_device, dict) else []
    items = [(d, n) for d, n in items if n is not None and n > 0]
    total = sum(n for _, n in items)
    if not items or not 0 < total < float("inf"):
        return None
    parts = [f'<svg class="chart part" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title or "partition")}">',
             f"<title>{escape(title or 'partition')}</title>"]
    x = 0.0
    for device, n in items:
        w = width * n / total
        colour = colours.get(device, PALETTE[-1])
        parts.append(f'<rect x="{_n(x)}" y="0" width="{_n(w)}" height="{height}" fill="{escape(colour)}">'
                     f"<title>{escape(device)}: {fmt_count(n)} operation(s)</title></rect>")
        x += w
    parts.append("</svg>")
    return Markup("".join(parts))
