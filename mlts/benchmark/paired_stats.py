"""The decision on paired latencies: baseline and candidate timed in alternation in one process.

Pair i holds one baseline run a_i and the candidate run b_i next to it, so whatever the machine did
at that moment (load, clock speed) touched both. The statistic is the log ratio d_i = log(b_i / a_i):

- the ratio is exp(median d), the typical candidate/baseline ratio of neighbouring runs;
- its interval is the distribution-free interval for a median from order statistics (the one the
  sign test gives): [d_(j), d_(n+1-j)] with the largest j whose binomial tail P(Bin(n, 1/2) < j) is at
  most (1 - confidence) / 2, exact up to `EXACT_MAX_PAIRS` pairs, else the normal approximation;
- significance is the two-sided sign test on the signs of d (ties dropped), consistent with the interval.

No run-to-run noise is assumed: both sides share the process and the machine's state. The verdict is
`decision.verdict_of`, the same rule as for separate runs.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from mlts.runtime import MltsError, ResultCode

from .decision import TINY_MS, Decision, DecisionRule, PASS, as_samples, verdict_of

EXACT_MAX_PAIRS = 1000  # 2**1000 still fits in a float; beyond, the normal approximation is exact enough


def binomial_half_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Bin(n, 1/2); exact (integers) up to EXACT_MAX_PAIRS, else normal with continuity."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if n <= EXACT_MAX_PAIRS:
        return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    z = (k + 0.5 - n / 2.0) / (math.sqrt(n) / 2.0)
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def sign_test(d: np.ndarray) -> tuple[int, float]:
    """(positives, two-sided p) of the sign test of `d` against 0; zeros are dropped."""
    positives, nonzero = int(np.sum(d > 0)), int(np.sum(d != 0))
    if nonzero == 0:
        return 0, 1.0
    tail = min(binomial_half_cdf(positives, nonzero), 1.0 - binomial_half_cdf(positives - 1, nonzero))
    return positives, min(1.0, 2.0 * tail)


def median_interval(sorted_d: np.ndarray, confidence: float) -> tuple[float, float]:
    """The order-statistic interval for the median of `sorted_d` (see the module docstring); the whole
    range when too few values reach the confidence (fewer than 6 at 95%)."""
    n = sorted_d.size
    tail = (1.0 - confidence) / 2.0
    j = 0
    lo, hi = 1, (n + 1) // 2
    while lo <= hi:  # the largest j with P(X <= j - 1) <= tail; the cdf grows with j
        mid = (lo + hi) // 2
        if binomial_half_cdf(mid - 1, n) <= tail:
            j, lo = mid, mid + 1
        else:
            hi = mid - 1
    j = max(j, 1)
    return float(sorted_d[j - 1]), float(sorted_d[n - j])


def decide_paired(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray,
                  rule: DecisionRule | None = None) -> Decision:
    """The verdict on paired latencies in ms (baseline[i] and candidate[i] timed next to each other)."""
    rule = rule or DecisionRule(run_noise_pct=0.0)
    a, b = as_samples(baseline, "baseline latencies"), as_samples(candidate, "candidate latencies")
    if a.size != b.size:
        raise MltsError(ResultCode.BAD_DATA, f"paired latencies need as many baseline as candidate runs, "
                                             f"got {a.size} and {b.size}")
    d = np.sort(np.log(np.maximum(b, TINY_MS)) - np.log(np.maximum(a, TINY_MS)))
    positives, p = sign_test(d)
    lo, hi = median_interval(d, rule.confidence)
    ratio, low, high = math.exp(float(np.median(d))), math.exp(lo), math.exp(hi)
    fields = dict(n_baseline=int(a.size), n_current=int(b.size), median_baseline_ms=float(np.median(a)),
                  median_current_ms=float(np.median(b)), ratio=ratio, ratio_low=low, ratio_high=high,
                  confidence=rule.confidence, p_value=p, u=float(positives), test="sign",
                  min_detectable_pct=100.0 * (math.sqrt(high / low) - 1.0), run_noise_pct=0.0)
    verdict, reason = verdict_of(Decision(PASS, None, **fields), rule)
    return Decision(verdict, reason, **fields)
