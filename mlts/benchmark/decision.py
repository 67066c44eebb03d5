"""Decide on the samples: is the current run's latency really slower than the baseline's?

Comparing two medians against a noise allowance cannot tell a real 30% slowdown from a noisy rerun
(the allowance grows with the slowdown). Here the decision uses every timed latency of both runs:

- a two-sided Mann-Whitney U test (exact when there are no ties and at most `EXACT_MAX_TOTAL`
  samples in all, else the normal approximation with tie and continuity corrections) says whether
  the two samples differ at all (p < alpha);
- a seeded percentile bootstrap of the ratio of medians current / baseline says by how much, as an
  interval (default 95%, 2000 resamples). Each bootstrap median is drawn directly from its order
  statistics (`bootstrap_medians`), which gives exactly the distribution of resampling n values with
  replacement but costs O(resamples) whatever n is, so 10,000-sample runs need no subsampling;
- the effect size gates the verdict, because latencies within one run are not independent (drift,
  frequency changes): with thousands of samples a 1% drift is "significant" but is no regression.

`DecisionRule` states the verdicts. Whether two runs were measured under the same conditions (thread
pools, other load on the machine), which no statistic can correct, is condition_warnings' question.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Sequence

import numpy as np

from mlts.runtime import MltsError, ResultCode

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"

DEFAULT_ALPHA = 0.01        # 30 cases a run: about one false "significant" per 3 runs, not 1.5 per run at 0.05
DEFAULT_SLOWDOWN_PCT = 10.0
DEFAULT_WARN_PCT = 5.0
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
MIN_SAMPLES = 5
EXACT_MAX_TOTAL = 40        # the exact U distribution below this many samples in all (and no ties)
#: Two runs of the same build on this machine differ in level by a few percent even when it is quiet
#: (process placement, memory layout): measured by benchmarks/ci_gate.py, which states the figure.
#: The interval assumes this much run-to-run noise (a standard deviation per run) on each side.
DEFAULT_RUN_NOISE_PCT = 2.5
TINY_MS = 1e-9              # a median of 0 ms counts as this in log terms


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def require_non_negative(obj: Any, names: Sequence[str], label: str) -> None:
    """BAD_DATA naming `label` and the field unless each named attribute is a finite number >= 0."""
    for name in names:
        v = getattr(obj, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise _bad(f"{label} {name} must be a number >= 0, got {v!r}")


@dataclass(frozen=True)
class SamplingSettings:
    """How two sides' samples are tested and resampled: what `DecisionRule` decides with and what
    compare.Thresholds, which builds the rule, takes as is. Validated by DecisionRule."""

    alpha: float = DEFAULT_ALPHA
    confidence: float = DEFAULT_CONFIDENCE
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    min_samples: int = MIN_SAMPLES
    #: Run-to-run noise assumed on each side's level (a standard deviation per run, in percent): the
    #: samples of one run cannot show how far the next run's level moves. 0 for paired A/B runs.
    run_noise_pct: float = DEFAULT_RUN_NOISE_PCT

    def sampling_settings(self) -> dict[str, Any]:
        """These settings by name (of a rule or of anything else that holds them)."""
        return {f.name: getattr(self, f.name) for f in fields(SamplingSettings)}


@dataclass(frozen=True)
class DecisionRule(SamplingSettings):
    """The verdict on two samples of latencies (ms); ratio = median(current) / median(baseline).

    - fewer than `min_samples` on either side: WARN (the data cannot decide);
    - FAIL: p < alpha, the ratio is above 1 and the interval's lower bound is above 1 + slowdown_pct/100
      (surely slower by more than the threshold);
    - "significant" below: p < alpha and the interval leaves out 1 (the interval also holds the run-to-run
      noise, `run_noise_pct`, which the U test on one run's samples cannot see);
    - WARN: significant, the ratio is at least 1 and the interval's upper bound is above
      1 + min(warn_pct, slowdown_pct)/100 (a real slowdown that may be worth a look, not surely above
      the threshold); a significant slowdown whose whole interval lies below that PASSes with a note;
    - WARN (inconclusive): not significant, but the interval reaches above 1 + slowdown_pct/100 and the
      runs could not have detected a change of slowdown_pct (see `Decision.min_detectable_pct`);
    - everything else PASSes; a faster current run is never a FAIL (the note says "faster").
    """

    slowdown_pct: float = DEFAULT_SLOWDOWN_PCT
    warn_pct: float = DEFAULT_WARN_PCT

    def __post_init__(self) -> None:
        for name in ("alpha", "confidence"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                raise _bad(f"decision rule {name} must be a number between 0 and 1 (exclusive), got {v!r}")
        require_non_negative(self, ("slowdown_pct", "warn_pct", "run_noise_pct"), "decision rule")
        for name, least in (("resamples", 100), ("seed", 0), ("min_samples", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise _bad(f"decision rule {name} must be an integer >= {least}, got {v!r}")

    def describe(self) -> str:
        return (f"FAIL when slower with p < {self.alpha:g} (Mann-Whitney U) and the {100 * self.confidence:g}% "
                f"bootstrap interval of the median ratio (with {self.run_noise_pct:g}% run-to-run noise per run, or the "
                f"spread measured between repetitions and runs when larger) lies above +{self.slowdown_pct:g}%; WARN when "
                f"significantly slower and the interval reaches above +{min(self.warn_pct, self.slowdown_pct):g}%, "
                f"or when the runs cannot decide (fewer than {self.min_samples} samples, or not significant with "
                f"an interval reaching past +{self.slowdown_pct:g}% that could only detect a larger change)")


def as_samples(values: Any, what: str) -> np.ndarray:
    """`values` (a JSON list of latencies in ms) as a float array; anything else is BAD_DATA naming `what`."""
    if not isinstance(values, (list, tuple, np.ndarray)):
        raise _bad(f"{what} must be a list of latencies in ms, got {type(values).__name__}")
    if len(values) == 0:
        raise _bad(f"{what} is empty")
    if not isinstance(values, np.ndarray) and not set(map(type, values)) <= {float, int}:
        for i, v in enumerate(values):  # the slow path: numpy scalars pass, booleans and text do not
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise _bad(f"{what}[{i}] is not a number ({str(v)[:40]!r})")
    try:
        a = np.asarray(values, dtype=np.float64)
    except (OverflowError, TypeError, ValueError):
        raise _bad(f"{what} holds a value that is not a float") from None
    if a.ndim != 1:
        raise _bad(f"{what} must be a flat list, got shape {a.shape}")
    bad = np.flatnonzero(~np.isfinite(a) | (a < 0))
    if bad.size:
        i = int(bad[0])
        said = "NaN" if math.isnan(a[i]) else "not finite" if not math.isfinite(a[i]) else f"negative ({a[i]:g})"
        raise _bad(f"{what}[{i}] is {said}")
    return a


# --- Mann-Whitney U ------------------------------------------------------------------------------

@dataclass(frozen=True)
class MannWhitney:
    """u: pairs (baseline, current) where current is slower, ties counting one half; method: exact/normal."""

    u: float
    p_value: float
    method: str


def _u_counts(n1: int, n2: int) -> list[int]:
    """How many of the C(n1+n2, n1) orderings give U = 0, 1, ..., n1*n2 (no ties): the coefficients
    of the Gaussian binomial prod_{i=1..n1} (1 - q^(n2+i)) / (1 - q^i), in exact integers."""
    poly = [1]
    for i in range(1, n1 + 1):
        j = n2 + i
        new = poly + [0] * j
        for k, c in enumerate(poly):            # times (1 - q^j)
            new[k + j] -= c
        for k in range(i, len(new)):            # divided by (1 - q^i)
            new[k] += new[k - i]
        poly = new[: i * n2 + 1]
    return poly


def mann_whitney(baseline: np.ndarray, current: np.ndarray, *, method: str = "auto") -> MannWhitney:
    """Two-sided Mann-Whitney U test of baseline against current. method: "auto", "exact" (no ties
    allowed) or "normal" (tie-corrected variance, continuity correction of 1/2)."""
    b, c = np.asarray(baseline, dtype=np.float64), np.asarray(current, dtype=np.float64)
    n1, n2 = b.size, c.size
    if n1 == 0 or n2 == 0:
        raise _bad("Mann-Whitney U needs at least one sample on each side")
    values = np.concatenate([b, c])
    order = np.argsort(values, kind="mergesort")
    s = values[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(s)) + 1])
    ties = np.diff(np.concatenate([starts, [s.size]]))
    ranks = np.empty(s.size)
    ranks[order] = np.repeat(starts + (ties + 1) / 2.0, ties)   # 1-based average ranks
    u = float(ranks[n1:].sum() - n2 * (n2 + 1) / 2.0)
    has_ties = bool((ties > 1).any())
    if method == "auto":
        method = "exact" if not has_ties and n1 + n2 <= EXACT_MAX_TOTAL else "normal"
    if method == "exact":
        if has_ties:
            raise _bad("the exact Mann-Whitney distribution needs samples without ties")
        counts = _u_counts(n1, n2)
        k, total = int(round(u)), math.comb(n1 + n2, n1)
        tail = min(sum(counts[: k + 1]), sum(counts[k:]))
        return MannWhitney(u, min(1.0, 2.0 * tail / total), "exact")
    if method != "normal":
        raise _bad(f"unknown Mann-Whitney method {method!r} (auto, exact, normal)")
    n = n1 + n2
    tie_term = float(np.sum(ties.astype(np.float64) ** 3 - ties)) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if var <= 0:  # every value equal
        return MannWhitney(u, 1.0, "normal")
    z = max(abs(u - n1 * n2 / 2.0) - 0.5, 0.0) / math.sqrt(var)
    return MannWhitney(u, min(1.0, math.erfc(z / math.sqrt(2.0))), "normal")


# --- bootstrap of the ratio of medians ------------------------------------------------------------

def bootstrap_medians(sorted_values: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """`size` medians of resamples (n draws with replacement) of `sorted_values`, without resampling.

    A resample is x[floor(n * V_i)] for n uniform V_i, a non-decreasing map of the V_i, so its k-th
    smallest value is x[floor(n * V_(k))] with V_(k) ~ Beta(k, n + 1 - k). For even n the median also
    needs V_(k+1) = V_(k) + (1 - V_(k)) * Beta(1, n - k) (the least of the n - k draws above V_(k)).
    Same distribution as the brute-force bootstrap, in O(size) whatever n is.
    """
    x = np.asarray(sorted_values, dtype=np.float64)
    n = x.size
    if n == 1:
        return np.full(size, x[0])
    k = (n + 1) // 2 if n % 2 else n // 2
    vk = rng.beta(k, n + 1 - k, size)
    lo = x[np.minimum((n * vk).astype(np.int64), n - 1)]
    if n % 2:
        return lo
    vk1 = vk + (1.0 - vk) * rng.beta(1, n - k, size)
    hi = x[np.minimum((n * vk1).astype(np.int64), n - 1)]
    return (lo + hi) / 2.0


def split_repetitions(samples: np.ndarray, counts: Any, what: str) -> list[np.ndarray]:
    """`samples` cut into its whole-case repetitions by `counts` (`latency.repetition_counts`, samples per
    repetition in timed order); None or one count: one repetition. BAD_DATA naming `what` when the counts
    are not positive integers adding up to the samples."""
    if counts is None:
        return [samples]
    if (not isinstance(counts, (list, tuple)) or not counts
            or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in counts)):
        raise _bad(f"{what} must be a list of sample counts >= 1, got {str(counts)[:60]}")
    if sum(counts) != samples.size:
        raise _bad(f"{what} add up to {sum(counts)}, but there are {samples.size} samples")
    return np.split(samples, np.cumsum(counts)[:-1])


@dataclass(frozen=True)
class Side:
    """One side of a comparison: `runs[i][j]` holds the latencies (ms) of whole-case repetition j of run i.
    Separate runs are separate processes (several results merged); repetitions share a process."""

    runs: tuple[tuple[np.ndarray, ...], ...]

    @classmethod
    def of(cls, values: "Side | Sequence[float] | np.ndarray", what: str) -> "Side":
        """A Side as is; flat latencies as one run of one repetition (validated, BAD_DATA naming `what`)."""
        if isinstance(values, Side):
            if not values.runs or not all(values.runs):
                raise _bad(f"{what} has no runs")
            return values
        return cls(((as_samples(values, what),),))

    @property
    def groups(self) -> list[np.ndarray]:
        return [g for run in self.runs for g in run]

    @property
    def pooled(self) -> np.ndarray:
        return np.concatenate(self.groups)


def _log_median(x: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(x, TINY_MS))


def level(side: Side) -> float:
    """The side's latency level, in log ms: the mean over its runs of the log of the run's median (all its
    repetitions pooled: a slice that met a few seconds of contention moves a pooled median little)."""
    return float(np.mean([_log_median(np.median(np.concatenate(run))) for run in side.runs]))


#: The median absolute deviation of a normal sample times this estimates its standard deviation.
MAD_TO_SD = 1.4826


def run_noise(side: Side, floor_pct: float) -> float:
    """The side's run-to-run noise as a standard deviation in log terms: the larger of the assumed floor
    and, with three or more repetitions and runs in all, the robust spread (MAD_TO_SD times the median
    absolute deviation) of their log medians, so one slice that met contention does not count as spread
    but a machine whose level keeps moving does. The level's uncertainty from it is this over
    sqrt(number of runs)."""
    floor = math.log1p(floor_pct / 100.0)
    groups = side.groups
    if len(groups) < 3:
        return floor
    logs = np.array([_log_median(np.median(g)) for g in groups])
    return max(floor, MAD_TO_SD * float(np.median(np.abs(logs - np.median(logs)))))


def _level_draws(side: Side, floor_pct: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap draws of `level(side)`: each run's pooled median resampled from its own latencies, plus a
    normal draw of the run-to-run noise (`run_noise`) over sqrt(number of runs)."""
    draws = np.mean([_log_median(bootstrap_medians(np.sort(np.concatenate(run)), resamples, rng))
                     for run in side.runs], axis=0)
    sd = run_noise(side, floor_pct) / math.sqrt(len(side.runs))
    return draws + rng.normal(0.0, sd, resamples) if sd > 0 else draws


def ratio_interval(baseline: "Side | np.ndarray", current: "Side | np.ndarray", *,
                   confidence: float = DEFAULT_CONFIDENCE, resamples: int = DEFAULT_RESAMPLES,
                   seed: int = DEFAULT_SEED, run_noise_pct: float = 0.0) -> tuple[float, float]:
    """Percentile bootstrap interval of the latency ratio current / baseline (of medians, for one run of
    one repetition a side), each side resampled on its own, with `run_noise_pct` (a standard deviation
    per run, in percent) of run-to-run noise on each side's level. Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    b = _level_draws(Side.of(baseline, "baseline samples"), run_noise_pct, resamples, rng)
    c = _level_draws(Side.of(current, "current samples"), run_noise_pct, resamples, rng)
    r = np.sort(np.exp(c - b))
    tail = (1.0 - confidence) / 2.0
    return float(r[int(math.floor(tail * resamples))]), float(r[int(math.ceil((1.0 - tail) * resamples)) - 1])


# --- the decision ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    """What the samples say. min_detectable_pct, "the smallest change these runs could have detected",
    is half the width of the ratio's interval in log terms, 100 * (sqrt(high / low) - 1): a true change
    that large moves the interval off 1. None where the interval is unbounded."""

    verdict: str
    reason: str | None
    n_baseline: int
    n_current: int
    median_baseline_ms: float
    median_current_ms: float
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    confidence: float
    p_value: float
    u: float
    test: str
    min_detectable_pct: float | None
    baseline_runs: int = 1
    current_runs: int = 1
    #: the run-to-run noise the interval included, in percent (the larger side's), 0 for paired runs
    run_noise_pct: float = 0.0

    def summary(self) -> str:
        """e.g. "ratio 1.302 [1.271, 1.335], p<0.0001, could detect >= 3.9%"."""
        parts = ["ratio " + (f"{self.ratio:.3f}" if self.ratio is not None else "-") +
                 (f" [{self.ratio_low:.3f}, {self.ratio_high:.3f}]" if self.ratio_low is not None else ""),
                 "p" + ("" if p_text(self.p_value).startswith("<") else "=") + p_text(self.p_value)]
        if self.min_detectable_pct is not None:
            parts.append(f"could detect >= {fmt_pct(self.min_detectable_pct)}")
        return ", ".join(parts)


def p_text(p: float | None) -> str:
    """A p-value for a table: two significant digits, "<0.0001" below that, "-" when none."""
    return "-" if p is None else "<0.0001" if p < 1e-4 else f"{p:.2g}"


def fmt_pct(v: float) -> str:
    """A change in percent: one decimal below 10%, none above."""
    return f"{v:.1f}%" if v < 10 else f"{v:.0f}%"


def decide(baseline: Side | Sequence[float] | np.ndarray, current: Side | Sequence[float] | np.ndarray,
           rule: DecisionRule | None = None) -> Decision:
    """The verdict on two sides' per-inference latencies in ms (flat samples: one run of one repetition;
    see `Side` and `DecisionRule`). The U test runs on the pooled samples; the ratio compares the sides'
    `level`s (the ratio of medians for one run of one repetition a side)."""
    rule = rule or DecisionRule()
    bs, cs = Side.of(baseline, "baseline samples"), Side.of(current, "current samples")
    b, c = bs.pooled, cs.pooled
    mw = mann_whitney(b, c)
    med_b, med_c = float(np.median(b)), float(np.median(c))
    ratio = lo = hi = mdc = None
    if med_b > 0:
        ratio = math.exp(level(cs) - level(bs))
        lo, hi = ratio_interval(bs, cs, confidence=rule.confidence, resamples=rule.resamples, seed=rule.seed,
                                run_noise_pct=rule.run_noise_pct)
        if lo > 0 and math.isfinite(hi):
            mdc = 100.0 * (math.sqrt(hi / lo) - 1.0)
    noise = max(run_noise(bs, rule.run_noise_pct), run_noise(cs, rule.run_noise_pct))
    d = dict(n_baseline=int(b.size), n_current=int(c.size), median_baseline_ms=med_b, median_current_ms=med_c,
             ratio=ratio, ratio_low=lo, ratio_high=hi, confidence=rule.confidence, p_value=mw.p_value, u=mw.u,
             test=mw.method, min_detectable_pct=mdc, baseline_runs=len(bs.runs), current_runs=len(cs.runs),
             run_noise_pct=100.0 * math.expm1(noise))
    verdict, reason = verdict_of(Decision(PASS, None, **d), rule)
    return Decision(verdict, reason, **d)


def verdict_of(d: Decision, rule: DecisionRule) -> tuple[str, str | None]:
    fail_at, warn_at = 1 + rule.slowdown_pct / 100, 1 + min(rule.warn_pct, rule.slowdown_pct) / 100
    # Significant: the U test says the samples differ and the interval, which also holds the run-to-run
    # noise the test cannot see, leaves out "no change".
    significant = d.p_value < rule.alpha and (d.ratio is None or d.ratio_low > 1 or d.ratio_high < 1)
    if min(d.n_baseline, d.n_current) < rule.min_samples:
        return WARN, (f"latency undecided: too few samples ({d.n_baseline} in the baseline, {d.n_current} now; "
                      f"need >= {rule.min_samples} each)")
    if d.ratio is None:
        return PASS, "baseline median is 0 ms; latency not judged"
    s, slowdown = f"latency {100 * (d.ratio - 1):+.1f}% ({d.summary()})", f"+{rule.slowdown_pct:g}%"
    if significant and d.ratio > 1 and d.ratio_low > fail_at:
        return FAIL, f"{s}: the interval lies above {slowdown}"
    if significant and d.ratio < 1:
        return PASS, f"{s}: faster"
    if significant and d.ratio_high > warn_at:
        return WARN, f"{s}: significantly slower, not surely above {slowdown}"
    if significant:
        return PASS, f"{s}: significantly slower, but surely below +{min(rule.warn_pct, rule.slowdown_pct):g}%"
    if d.ratio_high > fail_at and (d.min_detectable_pct is None or d.min_detectable_pct > rule.slowdown_pct):
        return WARN, f"{s}: undecided, these runs cannot tell a {slowdown} change from noise"
    return PASS, None
