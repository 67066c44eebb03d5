"""Were two runs measured alike? A difference no statistic can correct: other thread pool sizes, another
requested thread count, or other processes taking the CPU in one run (conditions.py records them)."""
from __future__ import annotations

import math
from typing import Any

from .conditions import BUSY_SHARE

SHARE_DIFFERENCE = 0.25   # the two runs' other-process CPU shares differ by more than this


def _share(v: Any) -> float | None:
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 1
    if not ok:
        raise ValueError
    return float(v)


def _count(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError
    return v


def _read_conditions(cond: Any, side: str) -> tuple[dict, list[str]]:
    """The usable parts of a record's `conditions`, and a reason for each part that is malformed."""
    if not isinstance(cond, dict):
        return {}, [f"{side} conditions is not an object ({type(cond).__name__}); not checked"]
    out: dict = {"threads": {}}
    problems = []
    threads = cond.get("threads")
    if threads is not None and not isinstance(threads, dict):
        problems.append(f"{side} conditions.threads is not an object; not checked")
    for pool, v in (threads if isinstance(threads, dict) else {}).items():
        try:
            out["threads"][pool] = None if v is None else _count(v)
        except ValueError:
            problems.append(f"{side} conditions.threads.{pool} is not a thread count ({str(v)[:40]!r}); not checked")
    for name, parse in (("requested_threads", _count), ("other_cpu_share", _share)):
        v = cond.get(name)
        try:
            out[name] = None if v is None else parse(v)
        except ValueError:
            problems.append(f"{side} conditions.{name} is not {'a share in 0..1' if parse is _share else 'a count'} "
                            f"({str(v)[:40]!r}); not checked")
    return out, problems


def condition_warnings(baseline: Any, current: Any) -> list[str]:
    """WARN reasons when two records' `conditions` say the runs were not measured alike: a thread
    pool known on both sides with different sizes, a different requested_threads (null, the default,
    counts as a value), other processes' CPU share above `BUSY_SHARE` in either run or differing by
    more than `SHARE_DIFFERENCE`, or a malformed field. Call only when both records carry conditions."""
    b, problems = _read_conditions(baseline, "baseline")
    c, more = _read_conditions(current, "current")
    problems += more
    bt, ct = b.get("threads", {}), c.get("threads", {})
    pools = [f"{p} {bt[p]} → {ct[p]}" for p in sorted(set(bt) & set(ct), key=str)
             if bt[p] is not None and ct[p] is not None and bt[p] != ct[p]]
    if pools:
        problems.append(f"thread pools differ: {', '.join(pools)}")
    if "requested_threads" in b and "requested_threads" in c and b["requested_threads"] != c["requested_threads"]:
        def req(v):
            return "default" if v is None else str(v)
        problems.append(f"requested threads differ: {req(b['requested_threads'])} → {req(c['requested_threads'])}")
    bs, cs = b.get("other_cpu_share"), c.get("other_cpu_share")
    busy = [(side, s, other) for side, s, other in (("the baseline", bs, cs), ("the current run", cs, bs))
            if s is not None and s > BUSY_SHARE]
    for side, share, other in busy:
        problems.append(f"the machine was busy: other processes took {100 * share:.0f}% of the CPU time in {side}"
                        + (f" ({100 * other:.0f}% in the other run)" if other is not None else ""))
    if not busy and bs is not None and cs is not None and abs(bs - cs) > SHARE_DIFFERENCE:
        problems.append(f"other processes' CPU share differs: {100 * bs:.0f}% in the baseline, {100 * cs:.0f}% now")
    return problems
