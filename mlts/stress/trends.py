"""Trends over a long run: a robust slope with a confidence interval, so that sustained inference
fails a driver that leaks or throttles at a steady rate, not one that had a noisy moment.

Theil-Sen (the median of the slopes between every pair of points) shrugs off outliers, which a
shared machine produces in bursts; its interval (Sen 1968) comes from the distribution of Kendall's
tau under no trend: with N pairwise slopes sorted, the interval runs from slope number (N - C) / 2
to (N + C) / 2, where C = z * sqrt(n (n - 1) (2 n + 5) / 18). A trend is only reported when the
whole interval says so (its lower bound is past the limit).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

MAX_POINTS = 1500  # pairwise slopes grow with the square: thin longer series evenly
Z_95 = 1.959963984540054  # two-sided 95%


@dataclass(frozen=True)
class Trend:
    """slope (units of y per unit of x) with its confidence interval, over `span` units of x."""

    slope: float
    low: float
    high: float
    points: int
    span: float

    @property
    def growth(self) -> float:
        """What the fitted slope adds over the whole series."""
        return self.slope * self.span


def theil_sen(x: Sequence[float], y: Sequence[float], z: float = Z_95) -> Trend | None:
    """The Theil-Sen slope of y over x with Sen's interval; None with fewer than 3 distinct x."""
    xs = np.asarray(x, np.float64)
    ys = np.asarray(y, np.float64)
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    if xs.size > MAX_POINTS:
        pick = np.linspace(0, xs.size - 1, MAX_POINTS).round().astype(np.int64)
        xs, ys = xs[pick], ys[pick]
    n = xs.size
    if n < 3 or np.unique(xs).size < 3:
        return None
    i, j = np.triu_indices(n, k=1)
    dx = xs[j] - xs[i]
    ok = dx != 0
    slopes = np.sort((ys[j] - ys[i])[ok] / dx[ok])
    count = slopes.size
    c = z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    lo = int(max(0, math.floor((count - c) / 2.0)))
    hi = int(min(count - 1, math.ceil((count + c) / 2.0)))
    return Trend(float(np.median(slopes)), float(slopes[lo]), float(slopes[hi]), int(n), float(xs.max() - xs.min()))


__all__ = ["Trend", "theil_sen"]
