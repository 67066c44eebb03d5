"""The thresholds of a baseline comparison (compare.py), and a run's own spread that latency changes
are weighed against when a record has no samples."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from mlts.runtime import MltsError, ResultCode

from .decision import DEFAULT_SLOWDOWN_PCT, DecisionRule, SamplingSettings, require_non_negative


@dataclass(frozen=True)
class Thresholds(SamplingSettings):
    """Defaults: a 5% slower median is worth a look (WARN), 15% is a regression (FAIL); a drop of
    0.5 accuracy points is a look, 2 points a regression (with the 1500-image held-out set, 0.5
    points is 7-8 images). noise_k scales the runs' own spread (1 = one spread). Those latency
    numbers judge records without samples; with samples, `rule()` (decision.DecisionRule) judges:
    a 10% slowdown FAILs only when the whole confidence interval is above it, so it is lower than 15%.
    The sampling settings (alpha, confidence, resamples, seed, min_samples, run_noise_pct) are the rule's."""

    latency_warn_pct: float = 5.0
    latency_fail_pct: float = 15.0
    accuracy_warn_points: float = 0.5
    accuracy_fail_points: float = 2.0
    noise_k: float = 1.0
    latency_slowdown_pct: float = DEFAULT_SLOWDOWN_PCT

    def __post_init__(self) -> None:
        require_non_negative(self, ("latency_warn_pct", "latency_fail_pct", "accuracy_warn_points",
                                    "accuracy_fail_points", "noise_k", "latency_slowdown_pct", "run_noise_pct"),
                             "threshold")
        if self.latency_warn_pct > self.latency_fail_pct:
            raise MltsError(ResultCode.BAD_DATA, f"threshold latency_warn_pct ({self.latency_warn_pct}) is above "
                                                 f"latency_fail_pct ({self.latency_fail_pct})")
        if self.accuracy_warn_points > self.accuracy_fail_points:
            raise MltsError(ResultCode.BAD_DATA, f"threshold accuracy_warn_points ({self.accuracy_warn_points}) is "
                                                 f"above accuracy_fail_points ({self.accuracy_fail_points})")
        self.rule()  # alpha, confidence, resamples, seed, min_samples: BAD_DATA naming the field

    def rule(self) -> DecisionRule:
        """The rule for records with samples; its WARN level is latency_warn_pct."""
        return DecisionRule(slowdown_pct=self.latency_slowdown_pct, warn_pct=self.latency_warn_pct,
                            **self.sampling_settings())

    def describe(self) -> str:
        return (f"latency with samples: {self.rule().describe()}; "
                f"latency without samples (median) WARN > {self.latency_warn_pct:g}%, "
                f"FAIL > {self.latency_fail_pct:g}% "
                f"when beyond noise ({self.noise_k:g} x the larger run spread, spread = max(p90 - p50, std/sqrt(n))); "
                f"accuracy drop WARN > {self.accuracy_warn_points:g}, FAIL > {self.accuracy_fail_points:g} points; "
                "CTS pass -> fail and ok -> error: FAIL; a current median that is missing, NaN, infinite or "
                "negative, or an accuracy that is not a finite number: FAIL (in the baseline: WARN); "
                "new or missing case: WARN; runs measured under different conditions (thread pools, a busy "
                "machine): WARN")

    def to_dict(self) -> dict:
        """The thresholds, then the sampling settings (the order `mlts compare --json` has always written)."""
        shared = self.sampling_settings()
        return {**{k: v for k, v in asdict(self).items() if k not in shared}, **shared}


def spread_ms(latency: dict | None) -> float:
    """A run's own variability: max(p90 - p50, std / sqrt(count)), 0 when unknown (or not finite)."""
    if not latency:
        return 0.0
    try:
        upper = float(latency["p90_ms"]) - float(latency["p50_ms"])
    except (KeyError, TypeError, ValueError, OverflowError):
        upper = 0.0
    try:
        sem = float(latency["std_ms"]) / math.sqrt(int(latency["count"]))
    except (KeyError, TypeError, ValueError, OverflowError, ZeroDivisionError):
        sem = 0.0
    return max([v for v in (upper, sem) if math.isfinite(v)] + [0.0])
