"""Issue 13, paired runs and slices (--repeat): the sign-test statistics on hand-computed cases, `mlts benchmark
--ab` between nnapi-reference and a driver that is really slower (benchmarks/slowed_driver.py), `--repeat N`
records, and `mlts compare` on merged runs."""
from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mlts.benchmark import runner as R
from mlts.benchmark.compare import compare
from mlts.benchmark.decision import FAIL, PASS, DecisionRule, decide
from mlts.benchmark.model_run import ModelRun
from mlts.benchmark.paired_stats import binomial_half_cdf, decide_paired, median_interval, sign_test
from mlts.benchmark.records import read_results
from mlts.benchmark.run_config import BenchmarkConfig
from mlts.benchmark.stats import RunLengthRules, latency_stats
from mlts.runtime import MltsError, ResultCode

from test_bench_runner import REF, TINY, register, tiny_zoo  # noqa: F401  (fixtures)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from slowed_driver import SlowedDriver  # noqa: E402

#: Enough pairs for a decision (at least decision.MIN_SAMPLES), in about a second on the tiny model.
PAIR_RULES = RunLengthRules(warmup_runs=2, warmup_min_s=0.0, min_runs=14, min_s=0.0, max_s=20.0, name="test")


# --- the statistics, by hand ----------------------------------------------------------------------------

def test_binomial_tails_and_the_sign_test_by_hand():
    assert binomial_half_cdf(1, 10) == pytest.approx(11 / 1024)       # (1 + 10) / 2^10
    assert binomial_half_cdf(2, 10) == pytest.approx(56 / 1024)       # + C(10, 2) = 45
    assert binomial_half_cdf(-1, 4) == 0 and binomial_half_cdf(4, 4) == 1
    # 6 of the 7 nonzero differences positive (the zero is dropped): P(X >= 6) = (7 + 1) / 128, two-sided 0.125
    assert sign_test(np.array([1.0, 1, 1, 1, 1, 1, -1, 0])) == (6, pytest.approx(0.125))
    assert sign_test(np.zeros(5)) == (0, 1.0)
    # the normal approximation beyond the exact range agrees with the exact tail where both apply
    assert binomial_half_cdf(480, 1001) == pytest.approx(
        sum(math.comb(1001, i) for i in range(481)) / 2 ** 1001, rel=0.02)


def test_median_interval_is_the_order_statistic_interval():
    d = np.arange(1.0, 11.0)  # n = 10 at 95%: P(X <= 1) = 0.0107 <= 0.025 < P(X <= 2): [d_(2), d_(9)]
    assert median_interval(d, 0.95) == (2.0, 9.0)
    assert median_interval(np.arange(1.0, 6.0), 0.95) == (1.0, 5.0)  # n = 5 cannot reach 95%: the range


def shared_drift(seed, n, ratio):
    """n pairs on a machine whose speed wanders by +-40% over the run, touching both sides alike."""
    rng = np.random.default_rng(seed)
    drift = np.exp(np.cumsum(rng.normal(0, 0.05, n)))
    return 10 * drift * rng.lognormal(0, 0.03, n), 10 * ratio * drift * rng.lognormal(0, 0.03, n)


def test_pairing_cancels_drift_that_hides_a_slowdown_from_separate_samples():
    paired, unpaired = Counter(), Counter()
    for seed in range(20):
        a, b = shared_drift(seed, 60, 1.3)
        paired[decide_paired(a, b).verdict] += 1
        unpaired[decide(a, b, DecisionRule(run_noise_pct=0)).verdict] += 1
    assert paired == {FAIL: 20}
    assert unpaired[FAIL] < 20  # the same samples, unpaired: the drift widens the interval
    same = Counter(decide_paired(*shared_drift(seed, 60, 1.0)).verdict for seed in range(20))
    assert same[FAIL] == 0 and same[PASS] >= 18, same


def test_paired_decision_fields_and_bad_input():
    a, b = shared_drift(3, 40, 1.3)
    d = decide_paired(a, b)
    assert d.test == "sign" and d.n_baseline == d.n_current == 40 and d.run_noise_pct == 0
    assert d.ratio == pytest.approx(float(np.exp(np.median(np.log(b / a)))))
    assert d.ratio_low < d.ratio < d.ratio_high
    with pytest.raises(MltsError) as e:
        decide_paired([1.0, 2.0], [1.0])
    assert e.value.code == ResultCode.BAD_DATA and "as many baseline as candidate runs" in e.value.message


# --- mlts benchmark --ab ----------------------------------------------------------------------------

def slowed(name, factor):
    d = SlowedDriver(factor)
    d.name = name
    return d


def test_paired_run_fails_a_slower_driver_and_passes_an_equal_one(tiny_zoo, register, tmp_path):
    from mlts.benchmark.paired import PairedRunner

    register(slowed("slow-x2", 2.0), slowed("same-x1", 1.0))
    verdicts = {}
    for cand in ("slow-x2", "same-x1"):
        cfg = BenchmarkConfig(models=[TINY], drivers=[REF, cand], ab=[REF, cand], images=2, rules=PAIR_RULES,
                              preset="test")
        PairedRunner(cfg, tmp_path / cand).run()
        recs = {r["driver"]: r for r in read_results(tmp_path / cand).benchmark_records()}
        assert set(recs) == {REF, cand} and all(r["status"] == "ok" for r in recs.values())
        p = recs[cand]["paired"]
        assert "paired" not in recs[REF]
        assert p["pairs"] == recs[REF]["latency"]["count"] == recs[cand]["latency"]["count"] >= 14
        assert p["baseline_driver"] == REF and p["candidate_driver"] == cand and p["order"] == "ABBA"
        assert recs[cand]["accuracy"]["top1_agreement"] == 1.0
        for r in recs.values():  # each side's first compilation in the run is timed apart from its compile time
            assert r["compilation_ms"]["first_use"] > 0 and r["compilation_ms"]["without_cache"] > 0
        verdicts[cand] = p
    assert verdicts["slow-x2"]["verdict"] == FAIL and 1.8 < verdicts["slow-x2"]["ratio"] < 2.2
    assert verdicts["slow-x2"]["ratio_low"] > 1.1
    assert verdicts["same-x1"]["verdict"] != FAIL and 0.9 < verdicts["same-x1"]["ratio"] < 1.1


def test_cli_ab_exits_1_on_a_paired_failure_and_rejects_clashing_options(tiny_zoo, register, tmp_path, capsys):
    from mlts.cli import main

    register(slowed("slow-x2", 2.0))
    code = main(["benchmark", "--quick", "--models", TINY, "--images", "0", "--no-report",
                 "--ab", "slow-x2", "--out", str(tmp_path / "ab")])  # one name: against nnapi-reference
    err = capsys.readouterr().err
    assert code == 1 and "### mlts benchmark --ab" in err and f"| FAIL | {TINY} | {REF} → slow-x2 |" in err
    run = json.loads((tmp_path / "ab" / R.RUN_FILE).read_text())
    assert run["config"]["ab"] == [REF, "slow-x2"]
    for extra, said in ((["--drivers", REF], "leave out --drivers"), (["--repeat", "2"], "leave out --repeat")):
        assert main(["benchmark", "--ab", "slow-x2", *extra, "--out", str(tmp_path / "x")]) == 1
        assert said in capsys.readouterr().err
    assert main(["benchmark", "--ab", "no-such-driver", "--out", str(tmp_path / "y")]) == 1
    assert "--ab: no driver named no-such-driver" in capsys.readouterr().err


# --- --repeat N ---------------------------------------------------------------------------------------

def test_slices_are_kept_apart_and_feed_the_comparison(tiny_zoo, tmp_path):
    rules = RunLengthRules(warmup_runs=1, warmup_min_s=0.0, min_runs=18, min_s=0.0, max_s=15.0, name="test")
    for name in ("a", "b"):
        cfg = BenchmarkConfig(models=[TINY], drivers=[REF], images=0, rules=rules, preset="test", repeat=3)
        R.BenchmarkRunner(cfg, tmp_path / name).run()
    rec = read_results(tmp_path / "a").benchmark_records()[0]
    lat = rec["latency"]
    assert lat["repetition_counts"] == [6, 6, 6] and lat["count"] == 18 and len(lat["samples_ms"]) == 18
    assert rec["run_length"]["repetitions"] == 3 and rec["config"]["repeat"] == 3
    assert rec["run_length"]["slice_rules"]["min_runs"] == 6 and rec["run_length"]["slice_rules"]["max_s"] == 5.0
    assert rec["run_length"]["warmup_runs_done"] == 3  # one per slice: other cases ran in between
    row = compare(read_results(tmp_path / "a").records, read_results(tmp_path / "b").records).rows[0]
    assert row.decided_on == "samples" and row.baseline_samples == row.current_samples == 18
    with pytest.raises(MltsError) as e:
        BenchmarkConfig(models=[TINY], drivers=[REF], repeat=0)
    assert e.value.code == ResultCode.BAD_DATA and "repeat must be an integer from 1" in e.value.message


def test_repetition_counts_follow_the_reservoir():
    # 3 repetitions of 6,000 runs: the record keeps a 10,000-sample reservoir, split as the runs fell
    durations = [0.001] * 18_000
    stats = latency_stats(durations, repetitions=[6000, 6000, 6000])
    assert stats.samples_reservoir and sum(stats.repetition_counts) == 10_000
    assert all(3000 < k < 3700 for k in stats.repetition_counts)  # a uniform third each, give or take
    assert latency_stats([0.001] * 10, repetitions=[10]).repetition_counts is None
    with pytest.raises(MltsError):
        latency_stats([0.001] * 10, repetitions=[4, 4])


# --- merged runs in mlts compare ------------------------------------------------------------------------

def record(samples, model="m", counts=None, run_id=None):
    lat = latency_stats([s / 1000 for s in samples]).to_dict()
    lat["repetition_counts"] = counts
    return {"kind": "benchmark", "schema_version": 1, "model": model, "driver": "d", "mode": "sync",
            "preference": "FAST_SINGLE_ANSWER", "status": "ok", "latency": lat, "run_id": run_id}


def test_merged_runs_are_separate_runs_and_narrow_the_interval():
    rng = np.random.default_rng(4)
    runs = [record(10 * rng.lognormal(0, 0.05, 50), run_id=f"run-{k}") for k in range(4)]
    current = record(10 * rng.lognormal(0, 0.05, 50))
    one = compare(runs[-1:], [current]).rows[0]
    four = compare(runs, [current])
    row = four.rows[0]
    assert (row.baseline_runs, row.current_runs) == (4, 1) and one.baseline_runs == 1
    assert row.baseline_samples == 200 and row.min_detectable_pct < one.min_detectable_pct
    assert any("latency decided on the samples of every ok run" in n for n in four.notes)
    # the same runs merged twice are still four runs, not eight
    assert compare(runs + runs, [current]).rows[0].baseline_runs == 4
    # repetition counts that do not add up: a current record is not a valid measurement
    bad = record(10 * rng.lognormal(0, 0.05, 20), counts=[5, 5])
    row = compare(runs, [bad]).rows[0]
    assert row.verdict == FAIL and "latency.repetition_counts add up to 10, but there are 20 samples" in " ".join(row.reasons)


def test_an_interrupt_in_a_later_pass_writes_no_partial_case_and_resume_times_it_again(tiny_zoo, tmp_path,
                                                                                      monkeypatch):
    rules = RunLengthRules(warmup_runs=1, warmup_min_s=0.0, min_runs=3, min_s=0.0, max_s=5.0, name="test")
    cfg = BenchmarkConfig(models=[TINY], drivers=[REF], images=0, rules=rules, preset="test", repeat=3)

    def interrupted(self, case, k):
        raise KeyboardInterrupt

    with monkeypatch.context() as mp:
        mp.setattr(ModelRun, "time_slice", interrupted)
        summary = R.BenchmarkRunner(cfg, tmp_path / "run").run()
    assert summary.interrupted and read_results(tmp_path / "run").benchmark_records() == []
    summary = R.BenchmarkRunner(cfg, tmp_path / "run").run()
    recs = read_results(tmp_path / "run").benchmark_records()
    assert not summary.interrupted and len(recs) == 1 and recs[0]["latency"]["repetition_counts"] == [1, 1, 1]


def test_a_pair_that_did_not_run_fails_the_run(tiny_zoo, register, tmp_path, capsys):
    """A candidate that crashes leaves no paired result: that is a FAIL (nothing was compared), not an
    empty table and exit status 0."""
    from mlts.cli import main

    code = main(["benchmark", "--quick", "--models", TINY, "--images", "0", "--no-report",
                 "--driver", "faulty:crash@execute", "--ab", "faulty-crash-execute", "--out", str(tmp_path / "ab")])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"| FAIL | {TINY} | {REF} → faulty-crash-execute | sync | 0 |" in err and "not compared: the case is error" in err
