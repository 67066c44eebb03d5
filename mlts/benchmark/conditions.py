"""The conditions a benchmark case ran under, recorded with it (`conditions` in each record).

A latency is only comparable with another taken under the same conditions: the thread pools the
process used, how loaded the machine was, the clock speed, and above all how much of the CPU other
processes took while the case ran. `mlts compare` and the report use these to tell a slower driver
from a busier machine.

`other_cpu_share` is the share of the machine's CPU time (elapsed x CPUs) that processes other than
mlts and its children (driver services) used during the case: the system's busy CPU time (psutil's
cpu_times deltas: everything but idle and iowait; guest time is already in user time, and steal,
another virtual machine running on our CPU, counts as taken by others) minus the CPU time of our
process tree. The kernel counts CPU time in ticks (10 ms), so a window shorter than
MIN_SHARE_WINDOW_S gives None rather than noise.

Readers are injectable (`Readers`) so the arithmetic is testable without a machine to load. Collecting
costs a few milliseconds per case (listing our child processes twice is most of it), outside the
timed runs.
"""
from __future__ import annotations

import glob
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

from .threads import thread_counts

#: Shorter windows leave other_cpu_share None: with 10 ms ticks on each side of the subtraction, a
#: quarter of a second keeps the error to a few percent on a 2-core machine.
MIN_SHARE_WINDOW_S = 0.25
#: A case whose other_cpu_share is above this gets a note on its progress line.
BUSY_SHARE = 0.5
#: psutil.cpu_times() fields that are not busy time: idle and waiting for I/O, and guest time, which
#: Linux already counts in user / nice time.
NOT_BUSY = ("idle", "iowait")
DOUBLE_COUNTED = ("guest", "guest_nice")


def busy_seconds(times: Any) -> float:
    """Busy CPU seconds of a psutil.cpu_times()-like reading (a namedtuple or an object with fields)."""
    fields = times._asdict() if hasattr(times, "_asdict") else dict(vars(times))
    return math.fsum(float(v) for k, v in fields.items() if k not in NOT_BUSY and k not in DOUBLE_COUNTED)


def other_cpu_share(busy_delta_s: float, ours_delta_s: float, elapsed_s: float, cpus: int | None) -> float | None:
    """The share (0..1) of `elapsed_s` x `cpus` CPU seconds that others took: (busy - ours) / capacity,
    clamped (tick rounding can push it a little past either end); None when not measurable."""
    if (not cpus or cpus < 1 or not math.isfinite(elapsed_s) or elapsed_s < MIN_SHARE_WINDOW_S
            or not math.isfinite(busy_delta_s) or not math.isfinite(ours_delta_s)):
        return None
    share = (busy_delta_s - ours_delta_s) / (elapsed_s * cpus)
    return min(1.0, max(0.0, share))


# --- the real readers ------------------------------------------------------------------------

def _psutil() -> Any:
    try:
        import psutil

        return psutil
    except ImportError:
        return None


def system_busy_s() -> float | None:
    """Busy CPU seconds of the whole machine since boot (all CPUs together)."""
    ps = _psutil()
    if ps is None:
        return None
    try:
        return busy_seconds(ps.cpu_times())
    except Exception:  # /proc/stat unreadable (some sandboxes)
        return None


def _process_cpu_s(p: Any) -> float:
    t = p.cpu_times()
    return (t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0))


def own_tree_cpu_s() -> float | None:
    """CPU seconds of this process and its descendants (driver services), each with the children it
    has reaped: a service that exits during a case moves into its parent's reaped time, so nothing is
    lost or counted twice."""
    ps = _psutil()
    if ps is None:
        return None
    try:
        me = ps.Process()
        total = _process_cpu_s(me)
        children = me.children(recursive=True)
    except Exception:
        return None
    for child in children:
        try:
            total += _process_cpu_s(child)
        except Exception:  # exited meanwhile: its time is in its parent's reaped time (or lost, rarely)
            pass
    return total


def cpu_count() -> int | None:
    """CPUs that psutil.cpu_times() covers (the machine's logical CPUs)."""
    ps = _psutil()
    try:
        return ps.cpu_count() if ps is not None else os.cpu_count()
    except Exception:
        return os.cpu_count()


def load_average() -> list[float] | None:
    """[1 min, 5 min, 15 min] load averages, or None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def cpu_freq_mhz() -> float | None:
    """The CPUs' current frequency, averaged: psutil's, else Linux's cpufreq files; None when unreadable
    (many virtual machines and containers) or reported as 0."""
    ps = _psutil()
    if ps is not None:
        try:
            f = ps.cpu_freq()
            if f is not None and f.current and f.current > 0:
                return round(float(f.current), 1)
        except Exception:
            pass
    values = []
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            with open(path, encoding="ascii") as fh:
                values.append(int(fh.read().strip()) / 1000.0)  # kHz
        except (OSError, ValueError):
            continue
    values = [v for v in values if v > 0]
    return round(sum(values) / len(values), 1) if values else None


@dataclass
class Readers:
    """Where conditions come from; tests replace any of them."""

    clock: Callable[[], float] = time.monotonic
    system_busy_s: Callable[[], float | None] = system_busy_s
    own_tree_cpu_s: Callable[[], float | None] = own_tree_cpu_s
    cpu_count: Callable[[], int | None] = cpu_count
    load_average: Callable[[], list[float] | None] = load_average
    cpu_freq_mhz: Callable[[], float | None] = cpu_freq_mhz
    thread_counts: Callable[[], dict] = thread_counts


#: The readers new windows use (tests may swap this for fakes).
DEFAULT_READERS = Readers()


def _mean(a: float | None, b: float | None) -> float | None:
    vals = [v for v in (a, b) if v is not None]
    return round(sum(vals) / len(vals), 1) if vals else None


class CaseWindow:
    """Readings at the start of a case; `finish()` takes the end readings and returns the record's
    `conditions` object."""

    def __init__(self, requested_threads: int, readers: Readers | None = None) -> None:
        self.requested_threads = requested_threads
        self.readers = r = readers if readers is not None else DEFAULT_READERS
        self.load_before = r.load_average()
        self.freq_before = r.cpu_freq_mhz()
        self.busy_before = r.system_busy_s()
        self.ours_before = r.own_tree_cpu_s()
        self.started = r.clock()

    def finish(self) -> dict:
        r = self.readers
        elapsed = r.clock() - self.started
        ours_after = r.own_tree_cpu_s()
        busy_after = r.system_busy_s()
        share = None
        if None not in (self.busy_before, busy_after, self.ours_before, ours_after):
            share = other_cpu_share(busy_after - self.busy_before, ours_after - self.ours_before, elapsed,
                                    r.cpu_count())
        return {
            "threads": r.thread_counts(),
            "requested_threads": self.requested_threads,
            "load_before": self.load_before,
            "load_after": r.load_average(),
            "cpu_freq_mhz": _mean(self.freq_before, r.cpu_freq_mhz()),
            "other_cpu_share": None if share is None else round(share, 4),
            "window_s": round(elapsed, 3),
        }


def busy_note(conditions: dict | None) -> str | None:
    """The progress line's note for a case run on a busy machine (other_cpu_share above BUSY_SHARE)."""
    share = (conditions or {}).get("other_cpu_share")
    if isinstance(share, (int, float)) and not isinstance(share, bool) and share > BUSY_SHARE:
        return f"machine busy: {share:.0%} of the CPU taken by other processes"
    return None
