"""Latency statistics against numpy and hand-computed values; run-length rules with a fake clock."""
import json
import math

import numpy as np
import pytest

from mlts.benchmark.stats import (DEFAULT, PRESETS, QUICK, Histogram, LatencyStats, RunLengthRules, histogram,
                                  latency_stats, measure, percentile, preset)
from mlts.runtime import MltsError, ResultCode


# --- percentiles -------------------------------------------------------------------------------

@pytest.mark.parametrize("values, q, expected", [
    ([1, 2, 3, 4], 50, 2.5),
    ([1, 2, 3, 4], 90, 3.7),          # h = 0.9 * 3 = 2.7: 3 + 0.7 * (4 - 3)
    ([1, 2, 3, 4], 99, 3.97),
    ([1, 2, 3, 4], 0, 1.0),
    ([1, 2, 3, 4], 100, 4.0),
    ([1, 3], 25, 1.5),
    ([7], 95, 7.0),
    ([10, 20, 30, 40, 50], 95, 48.0),  # h = 3.8: 40 + 0.8 * 10
])
def test_percentile_hand_computed(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 99, 100, 101, 1001])
def test_percentile_matches_numpy_linear(n):
    rng = np.random.default_rng(n)
    values = sorted(rng.lognormal(mean=1.0, sigma=0.5, size=n).tolist())
    for q in (0, 1, 10, 25, 50, 90, 95, 99, 99.9, 100):
        assert percentile(values, q) == np.percentile(values, q)  # to the last bit


def test_percentile_rejects_bad_input():
    with pytest.raises(MltsError) as e:
        percentile([], 50)
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(MltsError):
        percentile([1.0], 101)


# --- latency statistics ------------------------------------------------------------------------

def test_latency_stats_hand_computed():
    s = latency_stats([0.004, 0.001, 0.003, 0.002])  # seconds, unsorted
    assert s.count == 4
    assert s.min_ms == pytest.approx(1.0) and s.max_ms == pytest.approx(4.0)
    assert s.mean_ms == pytest.approx(2.5)
    assert s.std_ms == pytest.approx(math.sqrt(1.25))  # population std: mean of squared deviations 1.25
    assert s.p50_ms == pytest.approx(2.5)
    assert s.p90_ms == pytest.approx(3.7)
    assert s.p95_ms == pytest.approx(3.85)
    assert s.p99_ms == pytest.approx(3.97)
    assert s.total_ms == pytest.approx(10.0)
    assert s.throughput_per_s == pytest.approx(400.0)  # 4 runs in 10 ms
    assert sum(s.histogram.counts) == 4


@pytest.mark.parametrize("seed, n", [(1, 5), (2, 50), (3, 500), (4, 5000)])
def test_latency_stats_match_numpy(seed, n):
    rng = np.random.default_rng(seed)
    durations = rng.gamma(shape=4.0, scale=0.002, size=n)  # seconds, skewed like real latencies
    ms = durations * 1000
    s = latency_stats(durations.tolist())
    assert s.min_ms == pytest.approx(ms.min(), rel=1e-12)
    assert s.max_ms == pytest.approx(ms.max(), rel=1e-12)
    assert s.mean_ms == pytest.approx(ms.mean(), rel=1e-12)
    assert s.std_ms == pytest.approx(ms.std(), rel=1e-9)  # numpy's default ddof=0
    for q, got in ((50, s.p50_ms), (90, s.p90_ms), (95, s.p95_ms), (99, s.p99_ms)):
        assert got == pytest.approx(np.percentile(ms, q), rel=1e-12)
    assert s.throughput_per_s == pytest.approx(n / durations.sum(), rel=1e-12)
    counts, edges = np.histogram(ms, bins=len(s.histogram.counts))
    assert s.histogram.counts == counts.tolist()
    assert s.histogram.edges_ms == pytest.approx(edges.tolist(), rel=1e-12)


def test_latency_stats_single_run_and_zero_time():
    s = latency_stats([0.005])
    assert (s.min_ms, s.p50_ms, s.p99_ms, s.max_ms, s.std_ms) == (5.0, 5.0, 5.0, 5.0, 0.0)
    assert s.histogram == Histogram(edges_ms=[5.0, 5.0], counts=[1])
    assert latency_stats([0.0, 0.0]).throughput_per_s is None  # no infinity in a JSON record


@pytest.mark.parametrize("bad", [[], [0.001, -0.001], [float("nan")], [float("inf")]])
def test_latency_stats_rejects_bad_durations(bad):
    with pytest.raises(MltsError) as e:
        latency_stats(bad)
    assert e.value.code == ResultCode.BAD_DATA


def test_histogram_bins_and_edges():
    h = histogram([0.0, 1.0, 2.0, 3.0, 4.0], bins=4)
    assert h.edges_ms == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert h.counts == [1, 1, 1, 2]  # half-open bins, the last one closed (numpy's rule)
    assert len(histogram(list(range(10000))).counts) == 20  # capped for a readable chart
    assert len(histogram([1.0, 2.0, 3.0, 4.0]).counts) == 2  # square-root rule
    with pytest.raises(MltsError):
        histogram([1.0], bins=0)


def test_latency_stats_round_trip_json():
    s = latency_stats([0.001, 0.002, 0.0025])
    back = LatencyStats.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s


# --- run-length rules --------------------------------------------------------------------------

class FakeClock:
    """Time moves only when the measured function says it took time."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def timed_fn(clock, durations, returns=None):
    it = iter(durations)
    calls = []

    def fn():
        d = next(it)
        calls.append(d)
        clock.now += d
        return returns(len(calls)) if returns else None
    return fn, calls


def test_warmup_runs_are_excluded_and_first_inference_kept():
    clock = FakeClock()
    fn, calls = timed_fn(clock, [5.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    rules = RunLengthRules(warmup_runs=2, warmup_min_s=0, min_runs=3, min_s=0, max_s=100)
    m = measure(fn, rules, clock=clock)
    assert m.warmup_durations_s == [5.0, 4.0]
    assert m.durations_s == [1.0, 1.0, 1.0]
    assert m.first_s == 5.0
    assert m.stats().max_ms == 1000.0  # the slow warm-up runs are not in the statistics
    assert m.stopped_by == "minimums"
    assert m.summary() == {"warmup_runs_done": 2, "timed_runs": 3, "warmup_elapsed_s": 9.0, "elapsed_s": 3.0,
                           "stopped_by": "minimums", "repetitions": 1}


def test_warmup_minimum_time():
    clock = FakeClock()
    fn, _ = timed_fn(clock, [0.25] * 20)
    m = measure(fn, RunLengthRules(warmup_runs=1, warmup_min_s=0.5, min_runs=1, min_s=0, max_s=10), clock=clock)
    assert len(m.warmup_durations_s) == 2  # one run would satisfy the count, 0.5 s needs two
    assert len(m.durations_s) == 1


def test_no_warmup_first_inference_is_first_timed_run():
    clock = FakeClock()
    fn, _ = timed_fn(clock, [3.0, 1.0])
    m = measure(fn, RunLengthRules(warmup_runs=0, warmup_min_s=0, min_runs=2, min_s=0, max_s=10), clock=clock)
    assert m.warmup_durations_s == [] and m.first_s == 3.0 and m.durations_s == [3.0, 1.0]


@pytest.mark.parametrize("duration, expected_runs", [
    (0.125, 8),   # min time dominates: 8 x 0.125 s = 1 s
    (0.5, 5),     # min count dominates: 5 runs take 2.5 s > 1 s
])
def test_timed_runs_need_both_minimums(duration, expected_runs):
    clock = FakeClock()
    fn, _ = timed_fn(clock, [duration] * 100)
    m = measure(fn, RunLengthRules(warmup_runs=0, warmup_min_s=0, min_runs=5, min_s=1.0, max_s=60), clock=clock)
    assert len(m.durations_s) == expected_runs
    assert m.stopped_by == "minimums"


def test_max_time_cuts_off_timed_runs():
    clock = FakeClock()
    fn, _ = timed_fn(clock, [1.0] * 1000)
    m = measure(fn, RunLengthRules(warmup_runs=1, warmup_min_s=0, min_runs=100, min_s=0, max_s=5.0), clock=clock)
    assert len(m.durations_s) == 5
    assert m.stopped_by == "max_time"
    assert m.elapsed_s == 5.0


def test_max_time_also_bounds_warmup_and_one_timed_run_always_happens():
    clock = FakeClock()
    fn, calls = timed_fn(clock, [2.0] * 100)
    m = measure(fn, RunLengthRules(warmup_runs=50, warmup_min_s=0, min_runs=50, min_s=0, max_s=3.0), clock=clock)
    assert len(m.warmup_durations_s) == 2  # 4 s of warm-up > 3 s
    assert len(m.durations_s) == 2 and m.stopped_by == "max_time"
    clock2 = FakeClock()
    fn2, _ = timed_fn(clock2, [2.0] * 10)
    m2 = measure(fn2, RunLengthRules(warmup_runs=3, warmup_min_s=0, min_runs=5, min_s=0, max_s=0), clock=clock2)
    assert m2.warmup_durations_s == [] and len(m2.durations_s) == 1


def test_measure_collects_what_fn_returns_on_timed_runs():
    clock = FakeClock()
    fn, _ = timed_fn(clock, [1.0] * 10, returns=lambda i: {"in_driver_us": i})
    m = measure(fn, RunLengthRules(warmup_runs=1, warmup_min_s=0, min_runs=3, min_s=0, max_s=10), clock=clock)
    assert m.returns == [{"in_driver_us": 2}, {"in_driver_us": 3}, {"in_driver_us": 4}]


def test_measure_with_the_default_clock():
    m = measure(lambda: None, RunLengthRules(warmup_runs=1, warmup_min_s=0, min_runs=3, min_s=0, max_s=1))
    assert len(m.durations_s) == 3 and all(d >= 0 for d in m.durations_s)


def test_presets_and_describe():
    assert preset("quick") is QUICK and preset("default") is DEFAULT and set(PRESETS) == {"quick", "default"}
    assert QUICK.max_s < DEFAULT.max_s and QUICK.min_runs <= DEFAULT.min_runs
    text = DEFAULT.describe()
    assert "default" in text and f"{DEFAULT.min_runs} run" in text and f"{DEFAULT.max_s:g} s" in text
    assert RunLengthRules.from_dict(QUICK.to_dict()) == QUICK
    with pytest.raises(MltsError) as e:
        preset("slow")
    assert "quick" in e.value.message


@pytest.mark.parametrize("kwargs, field", [
    ({"min_runs": 0}, "min_runs"),
    ({"warmup_runs": -1}, "warmup_runs"),
    ({"min_s": -1.0}, "min_s"),
    ({"max_s": float("nan")}, "max_s"),
    ({"min_s": 10.0, "max_s": 5.0}, "max_s"),
    ({"min_runs": 2.5}, "min_runs"),
])
def test_bad_rules_name_the_field(kwargs, field):
    with pytest.raises(MltsError) as e:
        RunLengthRules(**kwargs)
    assert e.value.code == ResultCode.BAD_DATA and field in e.value.message
