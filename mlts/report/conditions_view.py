"""What the report shows of how each case was measured: its `conditions` (thread pools, load, CPU
frequency, other processes' CPU share), the repetitions of its latency (`latency.repetition_counts`)
and paired A/B decisions (`paired`).

Kept apart from rows.py so that module stays about differences from the reference; the report's
conditions section (sections/conditions.py) shows what these readers return. Records from
older versions lack these fields and hand-edited ones may hold anything: every reader here returns
text ("–", "not recorded") rather than raising.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from mlts.benchmark.conditions import BUSY_SHARE
from mlts.benchmark.decision import fmt_pct, p_text

from .formatting import number

NOT_RECORDED = "not recorded"
DASH = "–"
VERDICTS = ("PASS", "WARN", "FAIL")  # styled like compare's verdicts (.v-PASS etc.)
#: The names conditions.thread_counts writes, in this order; other pools follow alphabetically.
POOLS = ("blas", "openmp", "numba")


def _count(v: Any) -> int | None:
    """A non-negative whole count (bools and fractions are not)."""
    n = number(v)
    return int(n) if n is not None and n >= 0 and n == int(n) and n < 1e15 else None


def _load_text(v: Any) -> tuple[str, str, float | None]:
    """(1-minute load, "1/5/15 min: a, b, c" for a title, the 1-minute value) of a load triple."""
    vals = [number(x) for x in v] if isinstance(v, list) else []
    if not vals or vals[0] is None:
        return DASH, "", None
    return f"{vals[0]:.2f}", "1/5/15 min: " + ", ".join(DASH if x is None else f"{x:.2f}" for x in vals[:3]), vals[0]


def _share_text(share: float | None) -> str:
    return DASH if share is None else f"{100 * share:.0f}%"


# --- per case --------------------------------------------------------------------------------

@dataclass
class CaseConditions:
    """One case's conditions as table text; `recorded` False for records without them."""

    recorded: bool
    note: str = ""  # why nothing is shown ("not recorded", or the field is not an object)
    threads: str = DASH
    pools: tuple = ()  # ((pool, count or None), ...): compared across cases for the run summary
    requested: str = DASH
    load_before: str = DASH
    load_after: str = DASH
    load_title: str = ""
    load_1m: list[float] = field(default_factory=list)  # before and after, for the run summary's range
    freq: str = DASH
    freq_mhz: float | None = None
    share: float | None = None
    window: str = DASH

    @property
    def absent(self) -> bool:
        """The record has no conditions at all (an older run), as opposed to unreadable ones."""
        return not self.recorded and self.note == NOT_RECORDED

    @property
    def busy(self) -> bool:
        return self.share is not None and self.share > BUSY_SHARE

    @property
    def share_text(self) -> str:
        return _share_text(self.share)


def case_conditions(value: Any) -> CaseConditions:
    """A record's `conditions` (conditions.CaseWindow.finish's object) as the report shows it."""
    if value is None:
        return CaseConditions(recorded=False, note=NOT_RECORDED)
    if not isinstance(value, dict):
        return CaseConditions(recorded=False, note=f"{NOT_RECORDED} (unreadable: {type(value).__name__})")
    c = CaseConditions(recorded=True)
    threads = value.get("threads")
    if isinstance(threads, dict):
        names = [p for p in POOLS if p in threads] + sorted((str(p) for p in threads if p not in POOLS))
        c.pools = tuple((p, _count(threads.get(p))) for p in names)
        c.threads = " · ".join(f"{p} {DASH if n is None else n}" for p, n in c.pools) or DASH
    req = value.get("requested_threads")
    c.requested = "default" if req is None else (str(_count(req)) if _count(req) is not None else DASH)
    c.load_before, title_b, lb = _load_text(value.get("load_before"))
    c.load_after, title_a, la = _load_text(value.get("load_after"))
    c.load_title = "; ".join(t for t in (title_b and "before " + title_b, title_a and "after " + title_a) if t)
    c.load_1m = [x for x in (lb, la) if x is not None]
    f = number(value.get("cpu_freq_mhz"))
    c.freq_mhz = f if f is not None and f > 0 else None
    c.freq = DASH if c.freq_mhz is None else f"{c.freq_mhz:.0f}"
    s = number(value.get("other_cpu_share"))
    c.share = s if s is not None and 0 <= s <= 1 else None
    w = number(value.get("window_s"))
    c.window = DASH if w is None or w < 0 else f"{w:.2f}" if w < 1e6 else f"{w:.3g}"
    return c


@dataclass
class Repetitions:
    """`latency.repetition_counts`: samples per whole-case repetition (`--repeat N`)."""

    counts: list[int]

    @property
    def text(self) -> str:
        n = len(self.counts)
        return f"{n} repetition{'' if n == 1 else 's'}"

    @property
    def title(self) -> str:
        shown = ", ".join(map(str, self.counts[:20])) + (" …" if len(self.counts) > 20 else "")
        return f"samples per repetition: {shown}"


def repetitions_of(value: Any) -> Repetitions | None:
    """None when absent or not a list of counts."""
    if not isinstance(value, list) or not value:
        return None
    counts = [_count(v) for v in value]
    return None if None in counts else Repetitions(counts)  # type: ignore[arg-type]


# --- run summary -----------------------------------------------------------------------------

def _range(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if lo == hi else f"{format(lo, fmt)} – {format(hi, fmt)}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def conditions_summary(rows: Sequence[Any]) -> list[tuple[str, str, bool]]:
    """(label, text, warn) lines about the conditions over every case (rows: rows.Row-like, with
    `.conditions`, `.model`, `.lane`); warn marks a busy machine or thread pools that differ."""
    conds = [(r, r.conditions) for r in rows if getattr(r, "conditions", None) is not None]
    recorded = [(r, c) for r, c in conds if c.recorded]
    if not conds:
        return []
    if not recorded:
        why = "records from before mlts recorded them" if all(c.absent for _, c in conds) else "unreadable"
        return [("Conditions", f"{NOT_RECORDED} ({why})", False)]
    items = []
    missing = len(conds) - len(recorded)
    items.append(("Recorded for", f"{len(recorded)} of {_plural(len(conds), 'case')}"
                  + (f" ({missing} {NOT_RECORDED})" if missing else ""), False))
    sizes: dict[str, dict[int, int]] = {}  # pool -> thread count -> cases; unknown counts (None) are no evidence
    for _, c in recorded:
        for pool, n in c.pools:
            if n is not None:
                counts = sizes.setdefault(pool, {})
                counts[n] = counts.get(n, 0) + 1
    if any(len(counts) > 1 for counts in sizes.values()):
        items.append(("Thread pools", "differ between cases: " + "; ".join(
            f"{pool} " + ", ".join(f"{n} ({_plural(k, 'case')})" for n, k in counts.items())
            for pool, counts in sizes.items() if len(counts) > 1), True))
    else:
        same = " · ".join(f"{pool} {next(iter(counts))}" for pool, counts in sizes.items())
        items.append(("Thread pools", f"{same} in every case where known" if same else "not reported", False))
    requested = dict.fromkeys(c.requested for _, c in recorded)
    if len(requested) > 1:
        items.append(("Requested threads", "differ between cases: " + ", ".join(requested), True))
    busy = [(r, c) for r, c in recorded if c.busy]
    shares = [c.share for _, c in recorded if c.share is not None]
    if busy:
        cases = ", ".join(f"{r.model} · {r.lane} ({c.share_text})" for r, c in busy[:5])
        more = f" … and {len(busy) - 5} more" if len(busy) > 5 else ""
        items.append(("Busy machine", f"{_plural(len(busy), 'case')} ran while other processes took more than "
                      f"{BUSY_SHARE:.0%} of the CPU: {cases}{more}", True))
    elif shares:
        items.append(("Other processes' CPU", f"{_share_text(min(shares))} – {_share_text(max(shares))}"
                      if min(shares) != max(shares) else _share_text(shares[0]), False))
    loads = [x for _, c in recorded for x in c.load_1m]
    if loads:
        items.append(("Load average (1 min)", _range(loads, ".2f"), False))
    freqs = [c.freq_mhz for _, c in recorded if c.freq_mhz is not None]
    if freqs:
        items.append(("CPU frequency", _range(freqs, ".0f") + " MHz", False))
    return items


# --- paired A/B ------------------------------------------------------------------------------

@dataclass
class PairedRow:
    """One record's `paired` decision as table text; `note` names the fields it could not show."""

    model: str
    lane: str
    mode: str
    baseline: str
    candidate: str
    pairs: str = DASH
    ratio: str = DASH
    p: str = DASH
    detect: str = DASH
    verdict: str = DASH
    verdict_cls: str = ""
    reason: str = ""
    design: str = ""
    malformed: list[str] = field(default_factory=list)  # fields present but unusable, shown as "–"
    missing: list[str] = field(default_factory=list)
    unreadable: str = ""  # `paired` is not an object at all

    @property
    def note(self) -> str:
        return "; ".join(part for part in (
            self.unreadable, self.malformed and "malformed: " + ", ".join(self.malformed),
            self.missing and "missing: " + ", ".join(self.missing)) if part)


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v.strip() else None


def paired_row(record: dict, lane: str) -> PairedRow:
    """The row for a record carrying `paired` (see the A/B mode of `mlts benchmark`)."""
    p = record.get("paired")
    model, mode = str(record.get("model")), str(record.get("mode", "sync"))
    if not isinstance(p, dict):
        return PairedRow(model, lane, mode, DASH, str(record.get("driver") or DASH), unreadable=f"paired is not an object ({type(p).__name__})")
    malformed: list[str] = []

    def bad(name: str) -> None:
        if name in p and p[name] is not None:
            malformed.append(name)

    row = PairedRow(model, lane, mode, baseline=_text(p.get("baseline_driver")) or DASH,
                    candidate=_text(p.get("candidate_driver")) or str(record.get("driver") or DASH))
    for name in ("baseline_driver", "candidate_driver"):
        if _text(p.get(name)) is None:
            bad(name)
    pairs = _count(p.get("pairs"))
    row.pairs = DASH if pairs is None else str(pairs)
    if pairs is None:
        bad("pairs")
    ratio, lo, hi = (number(p.get(k)) for k in ("ratio", "ratio_low", "ratio_high"))
    for name, v in (("ratio", ratio), ("ratio_low", lo), ("ratio_high", hi)):
        if v is None:
            bad(name)
    if ratio is not None:
        row.ratio = f"{ratio:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "")
    pv = number(p.get("p_value"))
    if pv is not None and 0 <= pv <= 1:
        row.p = p_text(pv)
    else:
        bad("p_value")
    mdc = number(p.get("min_detectable_pct"))
    if mdc is not None and mdc >= 0:
        row.detect = f"could detect >= {fmt_pct(mdc)}"
    else:
        bad("min_detectable_pct")
    verdict = p.get("verdict")
    if verdict in VERDICTS:
        row.verdict, row.verdict_cls = verdict, f"v-{verdict}"
    else:
        bad("verdict")
    row.reason = _text(p.get("reason")) or ""
    if p.get("reason") is not None and not row.reason:
        bad("reason")
    conf, threshold = number(p.get("confidence")), number(p.get("threshold_pct"))
    row.design = ", ".join(part for part in (
        _text(p.get("order")) or "", (_text(p.get("test")) or "") and f"{p['test']} test",
        f"{100 * conf:.0f}% interval" if conf is not None and 0 < conf < 1 else "",
        f"threshold {threshold:g}%" if threshold is not None else "") if part)
    row.malformed = malformed
    row.missing = [k for k in ("baseline_driver", "pairs", "ratio", "p_value", "verdict") if k not in p]
    return row


def paired_rows(rows: Iterable[Any]) -> list[PairedRow]:
    """A row per case whose record has a `paired` object (rows: rows.Row-like, `.record`, `.lane`)."""
    return [paired_row(r.record, r.lane) for r in rows if r.record.get("paired") is not None]
