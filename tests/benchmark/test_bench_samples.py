"""latency.samples_ms: every timed latency kept in the record, or a seeded uniform reservoir of 10,000."""
from __future__ import annotations

import math

import pytest

from mlts.benchmark.stats import MAX_SAMPLES, LatencyStats, keep_samples, latency_stats, reservoir_indices
from mlts.runtime import MltsError


def test_samples_are_every_latency_in_timed_order_rounded_to_a_tenth_of_a_microsecond():
    s = latency_stats([0.003, 0.001, 0.00123456789, 0.002])  # seconds, in the order they were timed
    assert s.samples_ms == [3.0, 1.0, 1.2346, 2.0] and s.samples_reservoir is False
    assert s.count == 4 and s.min_ms == pytest.approx(1.0) and s.max_ms == pytest.approx(3.0)
    d = s.to_dict()
    assert d["samples_ms"] == [3.0, 1.0, 1.2346, 2.0] and d["samples_reservoir"] is False


def test_a_reservoir_of_25000_keeps_exactly_10000_in_timed_order_and_the_same_ones_every_time():
    n = 25_000
    values = [1.0 + i * 0.001 for i in range(n)]  # strictly increasing: timed order is ascending order
    kept, reservoir = keep_samples(values)
    assert reservoir is True and len(kept) == MAX_SAMPLES == 10_000
    assert all(a < b for a, b in zip(kept, kept[1:]))  # order preserved, no duplicates
    assert set(kept) <= {round(v, 4) for v in values}
    assert keep_samples(values) == (kept, True)  # seeded: deterministic
    assert keep_samples(values, seed=12345)[0] != kept  # ...but a sample, not a fixed rule
    # Uniform over the whole run, not the first 10,000: each fifth of the runs keeps about 2,000
    # (hypergeometric standard deviation ~31; 200 is more than six of them).
    idx = reservoir_indices(n, MAX_SAMPLES)
    fifths = [sum(1 for i in idx if k * n // 5 <= i < (k + 1) * n // 5) for k in range(5)]
    assert all(abs(c - 2000) < 200 for c in fifths), fifths


def test_statistics_use_every_run_while_the_record_keeps_the_reservoir():
    n = 25_000
    durations = [(i % 100 + 1) / 1e5 for i in range(n)]  # 0.01 .. 1.00 ms
    s = latency_stats(durations)
    assert s.count == n and s.samples_reservoir is True and len(s.samples_ms) == MAX_SAMPLES
    assert s.mean_ms == pytest.approx(math.fsum(d * 1000 for d in durations) / n)
    assert sum(s.histogram.counts) == n


def test_up_to_the_limit_nothing_is_dropped_and_the_limit_is_checked():
    assert keep_samples([1.0] * MAX_SAMPLES) == ([1.0] * MAX_SAMPLES, False)
    assert reservoir_indices(0, 5) == []
    with pytest.raises(MltsError, match="reservoir size"):
        reservoir_indices(10, 0)
    assert latency_stats([0.001], samples=False).samples_ms is None


def test_latency_round_trips_with_and_without_samples():
    s = latency_stats([0.002, 0.001])
    assert LatencyStats.from_dict(s.to_dict()) == s
    old = s.to_dict()
    del old["samples_ms"], old["samples_reservoir"]  # a record written before samples were kept
    loaded = LatencyStats.from_dict(old)
    assert loaded.samples_ms is None and loaded.samples_reservoir is False and loaded.p50_ms == s.p50_ms
