"""What a benchmark run tells: progress lines on stderr as it goes (case n of N, elapsed, ETA), the peak
resident memory of the process tree, sampled off the timed path, and the run's summary (in run.json)."""
from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from ..process_tree import ProcessTree
from .record_schema import to_jsonable

#: How often the memory sampler looks at the process tree's resident set.
RSS_SAMPLE_INTERVAL_S = 0.05
#: ...and how often it looks for new child processes (driver services).
CHILDREN_REFRESH_S = 1.0


class RssSampler:
    """Peak resident memory of this process and its children (driver services), sampled by a thread
    so that nothing is measured on the timed path; `case_peak()` restarts the per-case peak."""

    def __init__(self, interval_s: float = RSS_SAMPLE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self._case_peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        try:
            self._tree: ProcessTree | None = ProcessTree(refresh_s=CHILDREN_REFRESH_S)
        except Exception:  # the process unreadable: no memory figures
            self._tree = None

    def sample(self) -> int:
        if self._tree is None:
            return 0
        total = self._tree.rss()
        with self._lock:
            self.peak = max(self.peak, total)
            self._case_peak = max(self._case_peak, total)
        return total

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def start(self) -> "RssSampler":
        if self._tree is not None and self._thread is None:
            self.sample()
            self._thread = threading.Thread(target=self._loop, name="mlts-rss-sampler", daemon=True)
            self._thread.start()
        return self

    def case_peak(self) -> int | None:
        """The peak since the last call (one more sample first, so short cases have one)."""
        if self._tree is None:
            return None
        self.sample()
        with self._lock:
            peak, self._case_peak = self._case_peak, 0
        return peak or None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None


def _clock(seconds: float) -> str:
    s = int(round(max(0.0, seconds)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """One line per case on stderr: case n of N, what ran, elapsed time and an ETA."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.done = 0
        self.resumed = 0  # cases finished by an earlier run: in n of N, not in the rate behind the ETA
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()

    def log(self, line: str) -> None:
        if self.stream is not None:
            print(f"mlts benchmark: {line}", file=self.stream, flush=True)

    def case_done(self, label: str, outcome: str, counted: bool = True) -> None:
        if counted:
            self.done += 1
        elapsed = time.monotonic() - self.start
        remaining = self.total - self.done
        ran = self.done - self.resumed
        eta = elapsed / ran * remaining if ran > 0 else float("nan")
        width = len(str(self.total))
        eta_text = _clock(eta) if math.isfinite(eta) else "?"
        self.log(f"[{self.done:>{width}}/{self.total}] {label}: {outcome}  "
                 f"({_clock(elapsed)} elapsed, ETA {eta_text})")


@dataclass
class RunSummary:
    """What a run did: cases and records, their outcomes, skipped models, time, peak memory, notes."""

    run_dir: Path
    cases: int = 0
    records_written: int = 0
    resumed_records: int = 0
    counts: dict = field(default_factory=lambda: {"ok": 0, "unsupported": 0, "error": 0})
    skipped_models: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    peak_rss_bytes: int | None = None
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    #: "SIGINT" (Ctrl-C) or "SIGTERM" when interrupted
    interrupted_by: str | None = None

    def to_dict(self) -> dict:
        return to_jsonable(asdict(self))
