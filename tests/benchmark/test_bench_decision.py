"""Issue 13, "decide on the samples": the Mann-Whitney U test, the bootstrap of the median ratio, the
verdicts on synthetic samples with known answers, `mlts compare` on records with and without samples,
and the measurement-condition warnings."""
import itertools
import json
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from mlts.benchmark.compare import compare
from mlts.benchmark.condition_warnings import condition_warnings
from mlts.benchmark.decision import (FAIL, PASS, WARN, DecisionRule, Side, as_samples, bootstrap_medians, decide, level,
                                     mann_whitney, ratio_interval, run_noise, split_repetitions)
from mlts.benchmark.records import RESULTS_FILE
from mlts.benchmark.thresholds import Thresholds
from mlts.cli.compare import main
from mlts.runtime import MltsError, ResultCode


# --- Mann-Whitney U, by hand ----------------------------------------------------------------------

def test_exact_u_on_a_tiny_example():
    # Every current value above every baseline value: U = 3 * 3 = 9, the largest of C(6, 3) = 20
    # equally likely orderings, so one-sided 1/20 and two-sided p = 2/20.
    mw = mann_whitney([1, 2, 3], [4, 5, 6])
    assert mw.method == "exact" and mw.u == 9 and mw.p_value == pytest.approx(0.1)
    # Swapping the sides gives U = 0 and the same two-sided p.
    swapped = mann_whitney([4, 5, 6], [1, 2, 3])
    assert swapped.u == 0 and swapped.p_value == pytest.approx(0.1)
    # Interleaved, 1 < 2 < 3 < 4 < 5 < 6 as b c b c b c: U = 1 + 2 + 3 = 6 (pairs with c > b). The orderings
    # with U = u are the partitions of u into at most 3 parts of at most 3; for u = 9, 8, 7, 6:
    # (333), (332), (331 322), (330 321 222): 7 of 20, so p = 2 * 7/20.
    mw = mann_whitney([1, 3, 5], [2, 4, 6])
    assert mw.u == 6 and mw.p_value == pytest.approx(0.7)


def test_exact_distribution_matches_counting_every_ordering():
    """The exact p-value against brute force: every placement of the baseline among n1 + n2 ranks."""
    for n1, n2 in [(3, 4), (4, 4), (5, 2), (2, 6)]:
        for u_target in range(n1 * n2 + 1):
            us = []
            for pos in itertools.combinations(range(n1 + n2), n1):
                ranks_c = [i for i in range(n1 + n2) if i not in pos]
                us.append(sum(1 for i in ranks_c for p in pos if p < i))
            lower = Fraction(sum(u <= u_target for u in us), len(us))
            upper = Fraction(sum(u >= u_target for u in us), len(us))
            expected = min(1.0, float(2 * min(lower, upper)))
            # A sample with that U: current values placed between baseline values.
            pos = next(p for p, u in zip(itertools.combinations(range(n1 + n2), n1), us) if u == u_target)
            values = np.arange(n1 + n2, dtype=float)
            b, c = values[list(pos)], np.delete(values, list(pos))
            mw = mann_whitney(b, c, method="exact")
            assert mw.u == u_target and mw.p_value == pytest.approx(expected), (n1, n2, u_target)


def test_normal_approximation_with_ties_by_hand():
    # Pooled 1 2 3 3 3 4 5 6: the three 3s share rank (3+4+5)/3 = 4. Current ranks 4 + 6 + 7 + 8 = 25,
    # U = 25 - 4*5/2 = 15, mean n1 n2 / 2 = 8. Tie-corrected variance n1 n2/12 * ((N+1) - sum(t^3-t)/(N(N-1)))
    # = 16/12 * (9 - 24/56) = 80/7; z = (|15 - 8| - 1/2) / sqrt(80/7) = 1.92273; p = 2 (1 - Phi(z)) = 0.05451.
    mw = mann_whitney([1, 2, 3, 3], [3, 4, 5, 6])
    assert mw.method == "normal" and mw.u == 15
    assert mw.p_value == pytest.approx(math.erfc(6.5 / math.sqrt(80 / 7) / math.sqrt(2)))
    assert mw.p_value == pytest.approx(0.05451, abs=5e-5)


def test_u_edge_cases():
    assert mann_whitney([5.0] * 6, [5.0] * 6).p_value == 1.0       # all tied: no evidence at all
    assert mann_whitney([1, 2, 3], [1, 2, 3]).p_value == 1.0
    with pytest.raises(MltsError) as e:
        mann_whitney([1, 2, 2], [3, 4], method="exact")
    assert e.value.code == ResultCode.BAD_DATA and "ties" in e.value.message
    # Normal and exact agree closely at 20 per side (no ties).
    rng = np.random.default_rng(5)
    b, c = rng.normal(10, 1, 20), rng.normal(10.6, 1, 20)
    assert mann_whitney(b, c, method="normal").p_value == pytest.approx(
        mann_whitney(b, c, method="exact").p_value, abs=0.01)


# --- the bootstrap of the median, against enumerating every resample --------------------------------

def exact_bootstrap_median_distribution(x):
    """P(median of a resample = m) for every m, over all n^n equally likely resamples."""
    counts = Counter(float(np.median(r)) for r in itertools.product(x, repeat=len(x)))
    return {m: k / len(x) ** len(x) for m, k in counts.items()}


@pytest.mark.parametrize("x, known", [
    ([1.0], {1.0: 1.0}),
    ([1.0, 2.0], {1.0: 0.25, 1.5: 0.5, 2.0: 0.25}),                 # (1,1) (1,2) (2,1) (2,2)
    ([1.0, 2.0, 3.0], {1.0: 7 / 27, 2.0: 13 / 27, 3.0: 7 / 27}),    # median 1: at least two draws of 1
    ([1.0, 2.0, 4.0, 8.0], None),
    ([1.0, 1.5, 2.0, 5.0, 9.0], None),
])
def test_bootstrap_medians_have_the_resampling_distribution(x, known):
    expected = known or exact_bootstrap_median_distribution(x)
    if known:
        assert exact_bootstrap_median_distribution(x) == pytest.approx(known)
    draws = bootstrap_medians(np.array(x), 200_000, np.random.default_rng(1))
    seen = Counter(draws.tolist())
    assert set(seen) <= set(expected)
    for m, p in expected.items():  # 200,000 draws: a proportion's standard error is at most 0.0011
        assert seen[m] / draws.size == pytest.approx(p, abs=0.006), m


def test_ratio_interval_is_seeded_and_brackets_a_known_ratio():
    rng = np.random.default_rng(2)
    b = rng.lognormal(np.log(10), 0.1, 5000)
    c = 1.3 * rng.lognormal(np.log(10), 0.1, 5000)
    lo, hi = ratio_interval(b, c, seed=7)
    assert (lo, hi) == ratio_interval(b, c, seed=7) and (lo, hi) != ratio_interval(b, c, seed=8)
    # The median of lognormal(log 10, 0.1) is 10; its standard error at n = 5000 is about
    # 1.2533 * 0.1 / sqrt(5000) = 0.18% per side: the 95% interval is about 1.3 * (1 -+ 0.5%).
    assert 1.28 < lo < 1.3 < hi < 1.32
    # ... and its width is what those standard errors give (2 * 1.96 * 1.3 * sqrt(2) * 0.18% = 0.013),
    # neither a degenerate point nor a loose band
    assert 0.008 < hi - lo < 0.02


# --- run-to-run noise, repetitions and several runs ---------------------------------------------------

def runs_of(kind, seed, side, runs, reps, n, ratio=1.0, offset_sd=0.0):
    """`runs` runs of `reps` repetitions of n latencies; each run's level moves by a lognormal offset of sd
    `offset_sd` (what separate processes on a shared machine do), the same for its repetitions."""
    rng = np.random.default_rng([seed, side, 99])
    out = []
    for r in range(runs):
        shift = math.exp(rng.normal(0.0, offset_sd))
        out.append(tuple(shift * sample(kind, seed * 1000 + r * 10 + j, side, n, ratio) for j in range(reps)))
    return Side(tuple(out))


def test_level_is_the_log_of_each_runs_pooled_median_averaged_over_runs():
    assert level(Side.of([1.0, 2.0, 4.0], "x")) == pytest.approx(math.log(2.0))
    side = Side(((np.array([1.0, 2.0, 3.0]), np.array([8.0])), (np.array([4.0]),)))
    # run 1 pooled: [1, 2, 3, 8], median 2.5; run 2: 4; the mean of the logs: log sqrt(10)
    assert level(side) == pytest.approx(math.log(math.sqrt(10.0)))
    assert side.pooled.tolist() == [1.0, 2.0, 3.0, 8.0, 4.0] and len(side.groups) == 3


def test_run_noise_is_the_floor_or_the_robust_spread_of_three_or_more_groups():
    one = Side.of([10.0] * 20, "x")
    assert run_noise(one, 2.5) == pytest.approx(math.log(1.025)) and run_noise(one, 0) == 0
    # slices with medians 10, 11, 12: 1.4826 x the median absolute deviation of their logs (log 12/11)
    spread = Side(((np.full(5, 10.0), np.full(5, 11.0), np.full(5, 12.0)),))
    assert run_noise(spread, 2.5) == pytest.approx(1.4826 * math.log(12 / 11))
    # one slice that met contention (+60%) is not spread: 1.4826 x log(10.1/10) is under the floor
    contended = Side(((np.full(5, 10.0), np.full(5, 10.1), np.full(5, 16.0)),))
    assert run_noise(contended, 2.5) == pytest.approx(math.log(1.025))
    assert run_noise(Side(((np.full(5, 10.0), np.full(5, 30.0)),)), 2.5) == pytest.approx(math.log(1.025))


def test_a_contended_slice_moves_the_pooled_level_little():
    rng = np.random.default_rng(8)
    quiet = [10 * rng.lognormal(0, 0.03, 20) for _ in range(3)]
    hit = Side((tuple(quiet[:2]) + (1.6 * quiet[2],),))
    d = decide(Side((tuple(quiet),)), hit)
    assert d.verdict != FAIL and d.ratio < 1.06, d


def test_the_floor_widens_the_interval_by_the_expected_amount():
    # Quiet samples (sampling noise near 0): the interval is the run noise alone, a log-normal of
    # sd sqrt(2) * log(1.025) = 3.49%, so its 95% bounds are exp(-+1.96 * 0.0349) = 0.934 and 1.071.
    b = np.linspace(9.999, 10.001, 2001)
    lo, hi = ratio_interval(b, b, run_noise_pct=2.5, resamples=20000)
    assert lo == pytest.approx(0.934, abs=0.004) and hi == pytest.approx(1.071, abs=0.004)
    assert ratio_interval(b, b, run_noise_pct=0) == pytest.approx((1.0, 1.0), abs=1e-3)


def test_separate_runs_that_shift_do_not_fail_identical_builds():
    """Each run's level moves by 4% (sd) while its samples are quiet: sampling statistics alone call
    most identical pairs different; with the run noise they never FAIL."""
    counts_sampling, counts_default = Counter(), Counter()
    for seed in range(40):
        b = runs_of("bimodal", seed, 0, 1, 1, 200, offset_sd=0.04)
        c = runs_of("bimodal", seed, 1, 1, 1, 200, offset_sd=0.04)
        counts_sampling[decide(b, c, SAMPLING_ONLY).verdict] += 1
        counts_default[decide(b, c).verdict] += 1
    assert counts_default[FAIL] == 0, counts_default
    assert counts_sampling[FAIL] >= 1, counts_sampling  # observed: 1 FAIL (a 12% shift between two runs)
    # and a 1.3x slower build still FAILs under the same offsets
    fails = sum(decide(runs_of("lognormal", s, 0, 1, 1, 200, offset_sd=0.02),
                       runs_of("lognormal", s, 1, 1, 1, 200, 1.3, offset_sd=0.02)).verdict == FAIL for s in range(20))
    assert fails >= 19


def test_repetitions_spread_feeds_the_interval():
    """Three repetitions a side whose levels wander by 8%: the measured spread widens the interval
    past the floor, so a 12% shift that pure sampling would FAIL is not surely above +10%."""
    b = runs_of("lognormal", 5, 0, 1, 3, 100, offset_sd=0.0)
    wander = Side((tuple(g * f for g, f in zip(runs_of("lognormal", 5, 1, 1, 3, 100).runs[0], (1.04, 1.12, 1.20))),))
    d = decide(b, wander)
    assert d.run_noise_pct > 2.5 and d.verdict != FAIL, d
    assert decide(b, wander, DecisionRule(run_noise_pct=0)).ratio == pytest.approx(d.ratio)


def test_more_runs_narrow_the_interval():
    one = decide(runs_of("lognormal", 7, 0, 1, 1, 100), runs_of("lognormal", 7, 1, 1, 1, 100))
    four = decide(runs_of("lognormal", 7, 0, 4, 1, 100), runs_of("lognormal", 7, 1, 4, 1, 100))
    assert four.baseline_runs == 4 and four.current_runs == 4
    assert four.min_detectable_pct < one.min_detectable_pct


@pytest.mark.parametrize("counts, said", [([3, 3], "add up to 6, but there are 5"), ([0, 5], "counts >= 1"),
                                          ("5", "counts >= 1"), ([2.5, 2.5], "counts >= 1"), ([], "counts >= 1")])
def test_bad_repetition_counts(counts, said):
    with pytest.raises(MltsError) as e:
        split_repetitions(np.arange(5.0), counts, "latency.repetition_counts")
    assert e.value.code == ResultCode.BAD_DATA and said in e.value.message
    parts = split_repetitions(np.arange(5.0), [2, 3], "x")
    assert [p.tolist() for p in parts] == [[0.0, 1.0], [2.0, 3.0, 4.0]]


# --- bad input ------------------------------------------------------------------------------------

@pytest.mark.parametrize("values, said", [
    ([1.0, float("nan")], "x[1] is NaN"), ([1.0, 2.0, float("inf")], "x[2] is not finite"),
    ([1.0, -2.0], "x[1] is negative"), ([1.0, "2"], "x[1] is not a number"), ([True, 1.0], "x[0] is not a number"),
    ([], "x is empty"), ("1,2,3", "x must be a list"), ({"a": 1}, "x must be a list"), ([[1.0], [2.0]], "not a number"),
    ([1.0, 10 ** 400], "not a float"),
])
def test_bad_samples_are_bad_data_naming_the_field(values, said):
    with pytest.raises(MltsError) as e:
        as_samples(values, "x")
    assert e.value.code == ResultCode.BAD_DATA and said in e.value.message


@pytest.mark.parametrize("kwargs, name", [({"alpha": 0}, "alpha"), ({"alpha": 1.5}, "alpha"),
                                          ({"confidence": 1.0}, "confidence"), ({"resamples": 10}, "resamples"),
                                          ({"min_samples": 0}, "min_samples"), ({"slowdown_pct": -1}, "slowdown_pct")])
def test_bad_rules(kwargs, name):
    with pytest.raises(MltsError) as e:
        DecisionRule(**kwargs)
    assert e.value.code == ResultCode.BAD_DATA and name in e.value.message


# --- verdicts on synthetic samples with known answers --------------------------------------------------

def sample(kind, seed, side, n, ratio=1.0):
    """n latencies (ms) of a distribution whose median is `ratio` times the unshifted one's."""
    rng = np.random.default_rng([seed, side])
    if kind == "lognormal":      # a noisy machine: about +-25% around 10 ms
        x = rng.lognormal(0.0, 0.25, n)
    elif kind == "heavy":        # lognormal sigma 1: the slowest runs are 10-100x the median
        x = rng.lognormal(0.0, 1.0, n)
    elif kind == "pareto":       # Pareto, shape 1.5: infinite variance
        x = 1.0 + rng.pareto(1.5, n)
    else:                        # bimodal: 60% near 10 ms, 40% near 20 ms (e.g. a cache miss path)
        x = np.where(rng.random(n) < 0.6, rng.normal(1.0, 0.05, n), rng.normal(2.0, 0.1, n))
    return 10.0 * ratio * x


#: Samples drawn from one distribution have no run-to-run noise: these tests judge the sampling statistics.
SAMPLING_ONLY = DecisionRule(run_noise_pct=0)


def verdicts(kind, ratio, seeds, n, rule=SAMPLING_ONLY):
    counts = Counter()
    for seed in seeds:
        d = decide(sample(kind, seed, 0, n), sample(kind, seed, 1, n, ratio), rule)
        if d.verdict == FAIL:  # what the rule guarantees, whatever the data
            assert d.p_value < 0.01 and d.ratio_low > 1.10 and d.ratio > 1
        counts[d.verdict] += 1
    return counts


def test_identical_distributions_pass():
    counts = verdicts("lognormal", 1.0, range(100), 200)
    assert counts[PASS] >= 95, counts  # observed: 100 of 100


def test_thirty_percent_slower_fails_every_time():
    assert verdicts("lognormal", 1.3, range(20), 200) == {FAIL: 20}


def test_ten_percent_slower_rarely_fails():
    # A true ratio of exactly 1.10 FAILs only when the interval's lower bound is above 1.10, which a
    # 95% interval does in about 2.5% of trials at most.
    counts = verdicts("lognormal", 1.1, range(100), 200)
    assert counts[FAIL] <= 5, counts  # observed: 0 FAIL, 85 WARN, 15 PASS


def test_five_percent_slower_never_fails():
    counts = verdicts("lognormal", 1.05, range(20), 200)
    assert counts[FAIL] == 0 and counts[PASS] + counts[WARN] == 20, counts  # observed: 14 PASS, 6 WARN


@pytest.mark.parametrize("kind", ["heavy", "pareto", "bimodal"])
def test_heavy_tails_and_two_modes(kind):
    assert verdicts(kind, 1.3, range(10), 2000) == {FAIL: 10}
    assert verdicts(kind, 1.0, range(10), 2000)[FAIL] == 0  # observed: 10 PASS each


def test_faster_is_an_improvement_never_a_failure():
    d = decide(sample("lognormal", 1, 0, 300), sample("lognormal", 1, 1, 300, 0.7))
    assert d.verdict == PASS and d.ratio == pytest.approx(0.7, abs=0.05) and d.ratio_high < 1
    assert d.reason.startswith("latency -") and d.reason.endswith(": faster")


def test_too_few_samples_and_undecided_runs_warn():
    d = decide([10.0, 11.0, 12.0, 10.5], [20.0, 21.0, 22.0, 20.5])
    assert d.verdict == WARN and "too few samples (4 in the baseline, 4 now; need >= 5 each)" in d.reason
    # Eight very noisy runs a side: the interval reaches far past +10%, the runs cannot decide.
    d = decide(sample("heavy", 3, 0, 8), sample("heavy", 3, 1, 8))
    assert d.verdict == WARN and "cannot tell a +10% change from noise" in d.reason
    assert d.min_detectable_pct > 10


def test_a_small_but_certain_slowdown_passes_with_a_note():
    # 10,000 quiet runs 2% slower: significant, but the whole interval lies below the +5% worth a look.
    quiet = np.linspace(9.9, 10.1, 10000)
    d = decide(quiet, quiet * 1.02, SAMPLING_ONLY)
    assert d.verdict == PASS and d.p_value < 1e-6 and d.ratio_high < 1.05 and "surely below +5%" in d.reason


def test_minimum_detectable_change_and_determinism():
    b, c = sample("lognormal", 6, 0, 200), sample("lognormal", 6, 1, 200)
    d = decide(b, c, SAMPLING_ONLY)
    assert d == decide(b.tolist(), c.tolist(), SAMPLING_ONLY)  # seeded: the same inputs, the same decision
    assert d.min_detectable_pct == pytest.approx(100 * (math.sqrt(d.ratio_high / d.ratio_low) - 1))
    # Expected from the noise: log-ratio standard error sqrt(2) * 1.2533 * 0.25 / sqrt(200) = 3.1%,
    # so the half-width of a 95% interval is about 1.96 * 3.1% = 6%.
    assert 4 < d.min_detectable_pct < 8
    assert "could detect >= " in d.summary()


def test_thirty_cases_of_ten_thousand_samples_are_quick(make_record):
    base, cur = [], []
    for k in range(30):
        base.append(sampled(make_record, sample("lognormal", k, 0, 10_000), model=f"m{k}"))
        ratio = 1.3 if k % 3 == 0 else 1.0  # 10 of the 30 cases 30% slower
        cur.append(sampled(make_record, sample("lognormal", k, 1, 10_000, ratio), model=f"m{k}"))
    c = compare(base, cur)
    assert c.counts()[FAIL] == 10 and c.counts()[PASS] + c.counts()[WARN] == 20


# --- mlts compare on records --------------------------------------------------------------------------

def sampled(make_record, samples, **kw):
    """A record whose latency carries these samples (and their median as p50)."""
    rec = make_record(p50=float(np.median(samples)), **kw)
    rec["latency"]["samples_ms"] = [float(x) for x in samples]
    return rec


def test_compare_decides_on_samples(make_record):
    base = sampled(make_record, sample("lognormal", 1, 0, 500))
    cur = sampled(make_record, sample("lognormal", 1, 1, 500, 1.3))
    c = compare([base], [cur])
    row = c.rows[0]
    assert row.verdict == FAIL and row.decided_on == "samples" and row.noise_ms is None
    assert row.baseline_samples == row.current_samples == 500
    assert row.ratio_low < row.ratio < row.ratio_high and 1.10 < row.ratio_low and row.p_value < 1e-6
    assert "the interval lies above +10%" in row.reasons[0] and "could detect >= " in row.reasons[0]
    d = json.loads(c.to_json())["rows"][0]
    for name in ("p_value", "ratio", "ratio_low", "ratio_high", "min_detectable_pct"):
        assert isinstance(d[name], float), name
    md = c.to_markdown()
    assert "| Ratio [95% CI] | p | Could detect |" in md
    assert f"| {row.ratio:.3f} [{row.ratio_low:.3f}, {row.ratio_high:.3f}] | <0.0001 | ≥ " in md
    # A wider slowdown threshold turns the same data into a WARN: slower, but not surely above +40%.
    row = compare([base], [cur], Thresholds(latency_slowdown_pct=40)).rows[0]
    assert row.verdict == WARN and "not surely above +40%" in row.reasons[0]


def test_a_record_without_samples_is_decided_on_the_summary(make_record):
    base = make_record(p50=10.0)  # an old record: no samples
    cur = sampled(make_record, sample("lognormal", 2, 1, 300, 1.3))
    row = compare([base], [cur]).rows[0]
    assert row.decided_on == "summary" and row.p_value is None and row.ratio_low is None
    assert row.reasons[-1] == "no samples in baseline: decided on the summary statistics"
    assert row.verdict == compare([base], [make_record(p50=cur["latency"]["p50_ms"])]).rows[0].verdict
    row = compare([cur], [base]).rows[0]
    assert row.reasons[-1] == "no samples in current: decided on the summary statistics"


def test_bad_samples_fail_the_current_and_warn_the_baseline(make_record):
    good = sampled(make_record, sample("lognormal", 3, 0, 50))
    bad = sampled(make_record, sample("lognormal", 3, 1, 50))
    bad["latency"]["samples_ms"][3] = float("nan")
    row = compare([good], [bad]).rows[0]
    assert row.verdict == FAIL and "current latency.samples_ms[3] is NaN: not a valid measurement" in row.reasons
    row = compare([bad], [good]).rows[0]
    assert row.verdict == WARN and "baseline latency.samples_ms[3] is NaN; samples not used" in row.reasons
    assert row.decided_on == "summary"


def test_the_cli_names_the_file_of_bad_samples(tmp_path, make_record, capsys):
    rec = sampled(make_record, sample("lognormal", 4, 0, 20))
    base = tmp_path / "base"
    base.mkdir()
    (base / RESULTS_FILE).write_text(json.dumps(rec) + "\n")
    rec["latency"]["samples_ms"][0] = "fast"
    cur = tmp_path / "cur"
    cur.mkdir()
    (cur / RESULTS_FILE).write_text(json.dumps(rec) + "\n")
    assert main([str(base), str(cur), "--json"]) == 1
    reason = json.loads(capsys.readouterr().out)["rows"][0]["reasons"][0]
    assert "current latency.samples_ms[0] is not a number ('fast')" in reason and str(cur / RESULTS_FILE) in reason


def test_cli_options_for_the_rule(tmp_path, make_record, capsys):
    base = tmp_path / "base"
    base.mkdir()
    (base / RESULTS_FILE).write_text(json.dumps(sampled(make_record, sample("lognormal", 5, 0, 400))) + "\n")
    cur = tmp_path / "cur"
    cur.mkdir()
    (cur / RESULTS_FILE).write_text(json.dumps(sampled(make_record, sample("lognormal", 5, 1, 400, 1.3))) + "\n")
    assert main([str(base), str(cur)]) == 1
    assert main([str(base), str(cur), "--latency-slowdown", "50"]) == 0
    capsys.readouterr()
    assert main([str(base), str(cur), "--alpha", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "alpha" in err


# --- measurement conditions ---------------------------------------------------------------------------

def conditions(blas=4, openmp=4, numba=None, requested=None, share=0.05):
    return {"threads": {"blas": blas, "openmp": openmp, "numba": numba}, "requested_threads": requested,
            "load_before": [0.5, 0.4, 0.3], "load_after": [0.6, 0.4, 0.3], "cpu_freq_mhz": 2400.0,
            "other_cpu_share": share}


@pytest.mark.parametrize("base, cur, expected", [
    (conditions(), conditions(), []),
    (conditions(blas=4), conditions(blas=1), ["thread pools differ: blas 4 → 1"]),
    (conditions(numba=None), conditions(numba=8), []),  # a pool unknown on one side is not compared
    (conditions(requested=None), conditions(requested=2), ["requested threads differ: default → 2"]),
    (conditions(share=0.10), conditions(share=0.30), []),
    (conditions(share=0.10), conditions(share=0.40),
     ["other processes' CPU share differs: 10% in the baseline, 40% now"]),
    (conditions(share=0.10), conditions(share=0.70),
     ["the machine was busy: other processes took 70% of the CPU time in the current run (10% in the other run)"]),
    (conditions(share=0.55), conditions(share=None),
     ["the machine was busy: other processes took 55% of the CPU time in the baseline"]),
    (conditions(share="high"), conditions(blas="four"),
     ["baseline conditions.other_cpu_share is not a share in 0..1 ('high'); not checked",
      "current conditions.threads.blas is not a thread count ('four'); not checked"]),
    ([1, 2], conditions(), ["baseline conditions is not an object (list); not checked"]),
])
def test_condition_warnings(base, cur, expected):
    assert condition_warnings(base, cur) == expected


def test_conditions_in_compare(make_record):
    rows = lambda c: {r.model: r for r in c.rows}  # noqa: E731
    base = [make_record(model="a", conditions=conditions()), make_record(model="b", conditions=conditions()),
            make_record(model="c", p50=10.0, conditions=conditions())]
    cur = [make_record(model="a", conditions=conditions(share=0.8)), make_record(model="b", conditions=conditions()),
           make_record(model="c", p50=20.0, conditions=conditions(openmp=16))]
    c = compare(base, cur)
    by = rows(c)
    assert by["a"].verdict == WARN and "the machine was busy" in by["a"].reasons[0]
    assert by["b"].verdict == PASS and not c.notes
    assert by["c"].verdict == FAIL and "thread pools differ: openmp 4 → 16" in by["c"].reasons  # not softened
    # Conditions missing on either side: no warning, but one note for the whole comparison.
    c = compare([make_record(model="a"), make_record(model="b", conditions=conditions())],
                [make_record(model="a", conditions=conditions(share=0.9)), make_record(model="b")])
    assert all(r.verdict == PASS for r in c.rows)
    assert c.notes == ["measurement conditions (thread pools, machine load) were not recorded in 1 baseline "
                       "record(s) and 1 current record(s); those cases were compared without checking them"]
