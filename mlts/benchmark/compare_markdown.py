"""A baseline comparison as Markdown for a CI comment: the cases that need a look in a table, passing ones
folded away; record text escaped so that no driver or model name can break the table."""
from __future__ import annotations

import re

from .compare_row import Row, fmt_ms, verdict_counts, worst
from .decision import FAIL, PASS, WARN, fmt_pct, p_text
from .thresholds import Thresholds


def comparison_markdown(rows: list[Row], thresholds: Thresholds, notes: list[str]) -> str:
    """The summary: verdict and counts, the thresholds, the flagged rows, the passing rows folded, the notes."""
    c = verdict_counts(rows)
    out = [f"### mlts compare: {worst(r.verdict for r in rows)}", "",
           f"{c[FAIL]} FAIL, {c[WARN]} WARN, {c[PASS]} PASS of {len(rows)} case(s).", "",
           f"Thresholds: {thresholds.describe()}.", ""]
    show_pref = any(r.preference != "FAST_SINGLE_ANSWER" for r in rows)
    flagged = [r for r in rows if r.verdict != PASS]
    passing = [r for r in rows if r.verdict == PASS]
    if flagged:
        out += _table(flagged, show_pref, thresholds.confidence) + [""]
    if passing:
        label = "All cases pass" if not flagged else f"{len(passing)} passing case(s)"
        out += ["<details>", f"<summary>{label}</summary>", ""]
        out += _table(passing, show_pref, thresholds.confidence) + ["", "</details>", ""]
    if notes:
        out += ["Notes:", ""] + [f"- {md_escape(n)}" for n in notes] + [""]
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


#: the quality figure a row shows, first found: (record field, what follows the numbers)
_QUALITY = (("top1_accuracy", ""), ("map50", " (mAP@0.5)"), ("top1_agreement", " (agreement)"),
            ("detection_agreement", " (detection agreement)"))


def _top1(r: Row) -> str:
    for name, suffix in _QUALITY:
        a = r.accuracy.get(name)
        if a and (a["baseline"] is not None or a["current"] is not None):
            b, c = a["baseline"], a["current"]
            return f"{'-' if b is None else f'{100 * b:.1f}'} → {'-' if c is None else f'{100 * c:.1f}'}" + suffix
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
        latency = (f"{fmt_ms(r.baseline_p50_ms)} → {fmt_ms(r.current_p50_ms)}"
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
