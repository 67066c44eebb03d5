"""Latency statistics and the run-length rules that decide how many inferences a benchmark case times.

Durations go in as seconds (what `time.perf_counter` differences give); statistics come out in
milliseconds, the unit of the report and of the results records.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from mlts.runtime import MltsError, ResultCode

#: Histogram bins when the caller does not choose: the square-root rule, capped so a chart stays readable.
MAX_HISTOGRAM_BINS = 20
#: Per-inference latencies kept in a record (`latency.samples_ms`): all of them up to this many, else a
#: uniform reservoir of this many, so that `mlts compare` can test distributions without unbounded records
#: (10,000 values are about 90 kB of JSON).
MAX_SAMPLES = 10_000
#: The reservoir's seed: the same timed runs always keep the same samples, so a record is reproducible
#: from the durations and two runs of `mlts report` over one run never disagree.
RESERVOIR_SEED = 0x6D6C7473  # "mlts"
#: Kept samples are rounded to this many decimals of a millisecond (0.1 us): far below timer noise,
#: and it keeps results.jsonl small.
SAMPLE_DECIMALS = 4


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted values, numpy's default ("linear") method.

    Defined here rather than delegated so the report, the README and the tests can state it:
    the virtual index is h = (q / 100) * (n - 1); with i = floor(h) and t = h - i the result is
    x[i] + t * (x[i+1] - x[i]) (computed as x[i+1] - (1 - t) * (x[i+1] - x[i]) when t >= 0.5, the
    form numpy uses, so results agree with `numpy.percentile` to the last bit).
    """
    n = len(sorted_values)
    if n == 0:
        raise MltsError(ResultCode.BAD_DATA, "percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise MltsError(ResultCode.BAD_DATA, f"percentile {q} is outside 0..100")
    h = (q / 100.0) * (n - 1)
    i = min(int(math.floor(h)), n - 1)
    t = h - i
    a = float(sorted_values[i])
    if t == 0.0 or i + 1 >= n:
        return a
    b = float(sorted_values[i + 1])
    d = b - a
    return b - d * (1.0 - t) if t >= 0.5 else a + d * t


@dataclass(frozen=True)
class Histogram:
    """Equal-width bins from the fastest to the slowest run: `edges_ms` has one more entry than `counts`.

    Every bin is half-open [lo, hi) except the last, which is closed (numpy.histogram's rule), so
    the counts add up to the number of runs. When all runs took the same time there is one bin
    whose two edges are equal.
    """

    edges_ms: list[float]
    counts: list[int]

    def to_dict(self) -> dict:
        return {"edges_ms": list(self.edges_ms), "counts": list(self.counts)}

    @classmethod
    def from_dict(cls, d: dict) -> "Histogram":
        return cls(edges_ms=[float(x) for x in d["edges_ms"]], counts=[int(x) for x in d["counts"]])


def histogram(values_ms: Sequence[float], bins: int | None = None) -> Histogram:
    """Bin latencies for the report's SVG chart (equal widths, so bar heights compare directly)."""
    n = len(values_ms)
    if n == 0:
        raise MltsError(ResultCode.BAD_DATA, "histogram of no values")
    if bins is None:
        bins = min(MAX_HISTOGRAM_BINS, max(1, math.ceil(math.sqrt(n))))
    if bins < 1:
        raise MltsError(ResultCode.BAD_DATA, f"histogram bins must be >= 1, got {bins}")
    lo, hi = float(min(values_ms)), float(max(values_ms))
    if lo == hi:
        return Histogram(edges_ms=[lo, hi], counts=[n])
    width = (hi - lo) / bins
    edges = [lo + width * k for k in range(bins)] + [hi]
    counts = [0] * bins
    for v in values_ms:
        k = int((float(v) - lo) / width)
        k = min(max(k, 0), bins - 1)
        # Floating-point division can land a value on the wrong side of an edge; the edges decide.
        while k > 0 and float(v) < edges[k]:
            k -= 1
        while k < bins - 1 and float(v) >= edges[k + 1]:
            k += 1
        counts[k] += 1
    return Histogram(edges_ms=edges, counts=counts)


def reservoir_indices(n: int, k: int, seed: int = RESERVOIR_SEED) -> list[int]:
    """Indices of a uniform random k-subset of range(n), ascending (all of them when n <= k).

    Reservoir sampling (Vitter's algorithm R): item i (i >= k) replaces a random slot with probability
    k / (i + 1), which leaves every item in the reservoir with probability k / n. Seeded, so the same
    n, k and seed always give the same indices; sorted, so kept samples stay in timed order.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise MltsError(ResultCode.BAD_DATA, f"sample count must be an integer >= 0, got {n!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise MltsError(ResultCode.BAD_DATA, f"reservoir size must be an integer >= 1, got {k!r}")
    if n <= k:
        return list(range(n))
    rng = random.Random(seed)
    kept = list(range(k))
    for i in range(k, n):
        j = rng.randrange(i + 1)
        if j < k:
            kept[j] = i
    kept.sort()
    return kept


def keep_samples(values_ms: Sequence[float], limit: int = MAX_SAMPLES, *,
                 seed: int = RESERVOIR_SEED) -> tuple[list[float], bool]:
    """(samples, reservoir?): every value in its order, rounded to SAMPLE_DECIMALS, or, when there are
    more than `limit`, a seeded uniform reservoir of `limit` of them, still in their order."""
    kept, reservoir, _ = _kept(values_ms, limit, seed)
    return kept, reservoir


def _kept(values_ms: Sequence[float], limit: int = MAX_SAMPLES,
          seed: int = RESERVOIR_SEED) -> tuple[list[float], bool, list[int]]:
    """keep_samples, with the indices of the kept values."""
    idx = reservoir_indices(len(values_ms), limit, seed)
    return [round(float(values_ms[i]), SAMPLE_DECIMALS) for i in idx], len(values_ms) > limit, idx


@dataclass(frozen=True)
class LatencyStats:
    """Per-inference latency of one benchmark case, in milliseconds.

    `std_ms` is the population standard deviation (numpy's default, ddof=0); percentiles use
    `percentile` above; `throughput_per_s` is runs per second of summed run time (one inference
    at a time, so it is 1000 / mean_ms; None when the runs took no measurable time).
    `samples_ms` are the timed latencies themselves in timed order (or a uniform reservoir of
    MAX_SAMPLES of them, `samples_reservoir` True), for tests on whole distributions; the statistics
    above are always computed from every run. None when not kept (records written before they were).
    """

    count: int
    total_ms: float
    min_ms: float
    mean_ms: float
    std_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    throughput_per_s: float | None
    histogram: Histogram
    samples_ms: list[float] | None = None
    samples_reservoir: bool = False
    #: With whole-case repetitions (`mlts benchmark --repeat N`): how many of `samples_ms` each repetition
    #: gave, in order; None for one repetition.
    repetition_counts: list[int] | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["histogram"] = self.histogram.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "LatencyStats":
        optional = ("histogram", "samples_ms", "samples_reservoir", "repetition_counts")
        values = {k: d[k] for k in cls.__dataclass_fields__ if k not in optional}
        samples = d.get("samples_ms")
        return cls(**values, histogram=Histogram.from_dict(d["histogram"]),
                   samples_ms=None if samples is None else [float(x) for x in samples],
                   samples_reservoir=bool(d.get("samples_reservoir", False)),
                   repetition_counts=None if d.get("repetition_counts") is None else list(d["repetition_counts"]))


def latency_stats(durations_s: Sequence[float], *, bins: int | None = None, samples: bool = True,
                  repetitions: Sequence[int] | None = None) -> LatencyStats:
    """Summarize per-run durations (seconds, in timed order) as the latency statistics of a results
    record; with `samples`, the record keeps the latencies themselves too (see `keep_samples`), and with
    `repetitions` (runs per whole-case repetition, adding up to the durations) how many kept samples
    each repetition gave."""
    if len(durations_s) == 0:
        raise MltsError(ResultCode.BAD_DATA, "latency statistics need at least one run")
    ms = []
    for d in durations_s:
        d = float(d)
        if not math.isfinite(d) or d < 0:
            raise MltsError(ResultCode.BAD_DATA, f"a run duration must be a finite number >= 0, got {d}")
        ms.append(d * 1000.0)
    kept, reservoir, kept_idx = _kept(ms) if samples else (None, False, [])
    counts = None
    if repetitions is not None and len(repetitions) > 1:
        if sum(repetitions) != len(ms) or any(k < 1 for k in repetitions):
            raise MltsError(ResultCode.BAD_DATA, f"repetitions {list(repetitions)} do not add up to {len(ms)} runs")
        if samples:  # which repetition each kept sample came from
            edges = np.cumsum(repetitions)
            counts = np.bincount(np.searchsorted(edges, kept_idx, side="right"), minlength=len(repetitions))
            counts = [int(k) for k in counts if k > 0]
    ms.sort()
    n = len(ms)
    total = math.fsum(ms)
    mean = total / n
    var = math.fsum((x - mean) ** 2 for x in ms) / n
    return LatencyStats(
        count=n,
        total_ms=total,
        min_ms=ms[0],
        mean_ms=mean,
        std_ms=math.sqrt(var),
        p50_ms=percentile(ms, 50),
        p90_ms=percentile(ms, 90),
        p95_ms=percentile(ms, 95),
        p99_ms=percentile(ms, 99),
        max_ms=ms[-1],
        throughput_per_s=(n * 1000.0 / total) if total > 0 else None,
        histogram=histogram(ms, bins),
        samples_ms=kept,
        samples_reservoir=reservoir,
        repetition_counts=counts,
    )


@dataclass(frozen=True)
class RunLengthRules:
    """How long one benchmark case runs.

    Warm-up: runs until at least `warmup_runs` runs *and* `warmup_min_s` seconds are done (or
    `max_s` passes); warm-up runs are never in the statistics. Timed: runs until at least
    `min_runs` runs *and* `min_s` seconds are done, or until `max_s` seconds of timed running have
    passed, whichever comes first; there is always at least one timed run. A run in progress is
    never interrupted, so a case can overrun `max_s` by one run.
    """

    warmup_runs: int = 2
    warmup_min_s: float = 0.2
    min_runs: int = 10
    min_s: float = 1.0
    max_s: float = 5.0
    name: str = "custom"

    def __post_init__(self) -> None:
        for fld in ("warmup_runs", "min_runs"):
            v = getattr(self, fld)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise MltsError(ResultCode.BAD_DATA, f"run-length rule {fld} must be an integer >= 0, got {v!r}")
        if self.min_runs < 1:
            raise MltsError(ResultCode.BAD_DATA, f"run-length rule min_runs must be >= 1, got {self.min_runs}")
        for fld in ("warmup_min_s", "min_s", "max_s"):
            v = getattr(self, fld)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise MltsError(ResultCode.BAD_DATA, f"run-length rule {fld} must be a number of seconds >= 0, got {v!r}")
        if self.max_s < self.min_s:
            raise MltsError(ResultCode.BAD_DATA,
                            f"run-length rule max_s ({self.max_s} s) is less than min_s ({self.min_s} s)")

    def describe(self) -> str:
        """One line for `--help` and the report."""
        return (f"{self.name}: warm-up at least {self.warmup_runs} run(s) and {self.warmup_min_s:g} s "
                f"(not in the statistics); timed at least {self.min_runs} run(s) and {self.min_s:g} s, "
                f"stopping at {self.max_s:g} s per case")

    def to_dict(self) -> dict:
        return asdict(self)

    def sliced(self, slices: int) -> "RunLengthRules":
        """The rules of one of `slices` interleaved slices of a case (`mlts benchmark --repeat`): the run
        counts and times divided among them, so the case costs about what it did in one piece, and at
        least one warm-up run per slice (other cases ran in between: caches are cold again)."""
        if slices <= 1:
            return self
        return RunLengthRules(warmup_runs=max(1, math.ceil(self.warmup_runs / slices)),
                              warmup_min_s=self.warmup_min_s / slices, min_runs=math.ceil(self.min_runs / slices),
                              min_s=self.min_s / slices, max_s=self.max_s / slices, name=f"{self.name}/{slices}")

    @classmethod
    def from_dict(cls, d: dict) -> "RunLengthRules":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


#: `--quick`: the whole quick run fits in a minute on two cores, with at least 30 timed runs per case (10 per
#: slice of the default three): `mlts compare` decides on the samples, and a slice's median is steady enough
#: for the spread between slices to mean something.
QUICK = RunLengthRules(warmup_runs=3, warmup_min_s=0.05, min_runs=30, min_s=0.6, max_s=1.5, name="quick")
#: The default: enough runs for stable medians and p90s while the whole run stays under ten minutes.
DEFAULT = RunLengthRules(warmup_runs=3, warmup_min_s=0.2, min_runs=30, min_s=1.0, max_s=5.0, name="default")
PRESETS: dict[str, RunLengthRules] = {"quick": QUICK, "default": DEFAULT}


def preset(name: str) -> RunLengthRules:
    """The named preset; an unknown name is a user error naming the choices."""
    try:
        return PRESETS[name]
    except KeyError:
        raise MltsError(ResultCode.BAD_DATA,
                        f"unknown run-length preset {name!r} (choose from {', '.join(PRESETS)})") from None


@dataclass
class Measurement:
    """What `measure` observed: only `durations_s` (timed runs) go into the statistics.

    `first_s` is the very first call (the first inference after compilation, warm-up or not).
    `returns` holds what `fn` returned on each timed run (e.g. driver-reported timings), when not None.
    `stopped_by` is "minimums" (both minimums met) or "max_time".
    """

    durations_s: list[float] = field(default_factory=list)
    warmup_durations_s: list[float] = field(default_factory=list)
    first_s: float | None = None
    returns: list[Any] = field(default_factory=list)
    warmup_elapsed_s: float = 0.0
    elapsed_s: float = 0.0
    stopped_by: str = "minimums"

    #: timed runs per whole-case repetition, when `extend` joined several
    repetitions: list[int] = field(default_factory=list)

    def stats(self, *, bins: int | None = None) -> LatencyStats:
        return latency_stats(self.durations_s, bins=bins, repetitions=self.repetitions or None)

    def extend(self, other: "Measurement") -> None:
        """Append a later whole-case repetition's runs (its first call is not this case's first inference)."""
        self.repetitions = (self.repetitions or [len(self.durations_s)]) + [len(other.durations_s)]
        self.durations_s += other.durations_s
        self.warmup_durations_s += other.warmup_durations_s
        self.returns += other.returns
        self.warmup_elapsed_s += other.warmup_elapsed_s
        self.elapsed_s += other.elapsed_s
        if other.stopped_by == "max_time":
            self.stopped_by = "max_time"

    def summary(self) -> dict:
        """The record's `run_length` facts: how many runs were done and why the loop stopped."""
        return {"warmup_runs_done": len(self.warmup_durations_s), "timed_runs": len(self.durations_s),
                "warmup_elapsed_s": self.warmup_elapsed_s, "elapsed_s": self.elapsed_s,
                "stopped_by": self.stopped_by, "repetitions": len(self.repetitions) or 1}


def measure(fn: Callable[[], Any], rules: RunLengthRules, *,
            clock: Callable[[], float] = time.perf_counter) -> Measurement:
    """Call `fn` under `rules`; the clock is injectable so the rules are testable without real time."""
    m = Measurement()

    def timed_call() -> tuple[float, Any]:
        t0 = clock()
        result = fn()
        d = clock() - t0
        if m.first_s is None:
            m.first_s = d
        return d, result

    start = clock()
    while True:
        done = len(m.warmup_durations_s)
        elapsed = clock() - start
        if done >= rules.warmup_runs and elapsed >= rules.warmup_min_s:
            break
        if elapsed >= rules.max_s:
            break
        d, _ = timed_call()
        m.warmup_durations_s.append(d)
    m.warmup_elapsed_s = clock() - start

    start = clock()
    while True:
        d, result = timed_call()
        m.durations_s.append(d)
        if result is not None:
            m.returns.append(result)
        elapsed = clock() - start
        if len(m.durations_s) >= rules.min_runs and elapsed >= rules.min_s:
            m.stopped_by = "minimums"
            break
        if elapsed >= rules.max_s:
            m.stopped_by = "max_time"
            break
    m.elapsed_s = clock() - start
    return m
