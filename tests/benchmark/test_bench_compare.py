"""`compare` verdicts on crafted results: thresholds, the noise rule, status changes, the markdown."""
import json

import pytest

from mlts.benchmark.compare import compare
from mlts.benchmark.decision import FAIL, PASS, WARN
from mlts.benchmark.thresholds import Thresholds, spread_ms
from mlts.runtime import MltsError, ResultCode


def one_row(base, cur, **thresholds):
    c = compare([base], [cur], Thresholds(**thresholds))
    assert len(c.rows) == 1
    return c.rows[0], c


def test_identical_runs_pass(make_record):
    row, c = one_row(make_record(), make_record())
    assert row.verdict == PASS and c.verdict == PASS and c.exit_code() == 0
    assert row.delta_ms == 0 and row.delta_pct == 0


@pytest.mark.parametrize("cur_p50, verdict", [
    (10.4, PASS),   # +4%
    (10.5, PASS),   # +5%: not more than the WARN threshold
    (11.0, WARN),   # +10%
    (11.5, WARN),   # +15%: not more than the FAIL threshold
    (12.0, FAIL),   # +20%
    (8.0, PASS),    # faster
])
def test_latency_thresholds(make_record, cur_p50, verdict):
    row, c = one_row(make_record(p50=10.0), make_record(p50=cur_p50))
    assert row.verdict == verdict and c.exit_code() == (1 if verdict == FAIL else 0)
    assert row.delta_pct == pytest.approx(100 * (cur_p50 - 10) / 10)


def test_latency_change_within_noise_is_not_a_regression(make_record):
    # +20% (2 ms) but the current run's own spread p90 - p50 is 3 ms.
    row, _ = one_row(make_record(p50=10.0, spread=0.5), make_record(p50=12.0, spread=3.0))
    assert row.verdict == PASS and row.noise_ms == 3.0 and "within noise" in row.reasons[0]
    # The larger of the two spreads counts, whichever run it comes from.
    row, _ = one_row(make_record(p50=10.0, spread=3.0), make_record(p50=12.0, spread=0.0))
    assert row.verdict == PASS


@pytest.mark.parametrize("spread, verdict", [(2.0, PASS), (1.99, FAIL)])
def test_noise_boundary_is_exact(make_record, spread, verdict):
    row, _ = one_row(make_record(p50=10.0), make_record(p50=12.0, spread=spread))  # delta 2 ms
    assert row.verdict == verdict


def test_noise_k_scales_the_spread(make_record):
    base, cur = make_record(p50=10.0, spread=1.5), make_record(p50=12.0, spread=1.5)
    assert one_row(base, cur)[0].verdict == FAIL                  # 2 ms > 1 x 1.5 ms
    assert one_row(base, cur, noise_k=2.0)[0].verdict == PASS     # 2 ms <= 2 x 1.5 ms
    assert one_row(base, cur, noise_k=0)[0].verdict == FAIL


def test_spread_uses_standard_error_when_larger():
    # p90 == p50 (a quantized clock) but the runs scatter: std 4 ms over 4 runs -> 2 ms.
    lat = {"p50_ms": 10.0, "p90_ms": 10.0, "std_ms": 4.0, "count": 4}
    assert spread_ms(lat) == 2.0
    assert spread_ms({"p50_ms": 10.0, "p90_ms": 13.0, "std_ms": 4.0, "count": 4}) == 3.0
    assert spread_ms(None) == 0.0


def without_samples(record):
    """The record as written before records kept their samples."""
    for name in ("samples_ms", "samples_reservoir"):
        record["latency"].pop(name, None)
    return record


def test_noise_from_real_samples(make_record):
    base, noisy = [10] * 10, [9, 10, 11, 12, 13, 14, 15, 16, 20, 30]  # noisy: p50 13.5, p90 21
    row, _ = one_row(without_samples(make_record(runs=base)), without_samples(make_record(runs=noisy)))
    assert row.current_p50_ms == pytest.approx(13.5)
    assert row.noise_ms == pytest.approx(21.0 - 13.5)
    assert row.verdict == PASS  # +35% median, but within the current run's spread
    assert row.decided_on == "summary" and "no samples in baseline and current" in row.reasons[-1]
    # The same runs with their samples: 8 of 10 current runs are slower than every baseline run, a
    # real slowdown (Mann-Whitney p < 0.01), but 10 runs cannot show that it is surely above +10%.
    row, _ = one_row(make_record(runs=base), make_record(runs=noisy))
    assert row.decided_on == "samples" and row.p_value < 0.01 and row.ratio == pytest.approx(1.35)
    assert row.ratio_low < 1.10 < row.ratio_high and row.verdict == WARN


@pytest.mark.parametrize("cur_top1, verdict", [
    (0.697, PASS),  # -0.3 points
    (0.69, WARN),   # -1 point
    (0.68, WARN),   # -2 points: not more than the FAIL threshold
    (0.675, FAIL),  # -2.5 points
])
def test_accuracy_drop_points(make_record, cur_top1, verdict):
    row, _ = one_row(make_record(top1=0.70), make_record(top1=cur_top1))
    assert row.verdict == verdict
    assert row.accuracy["top1_accuracy"]["delta_points"] == pytest.approx(100 * (cur_top1 - 0.70))


def test_accuracy_gain_and_agreement_drop(make_record):
    assert one_row(make_record(top1=0.70), make_record(top1=0.75))[0].verdict == PASS
    row, _ = one_row(make_record(agree1=1.0), make_record(agree1=0.95))
    assert row.verdict == FAIL and "top1_agreement" in row.reasons[0]


def test_cts_verdict_changes(make_record):
    row, _ = one_row(make_record(cts=True), make_record(cts=False))
    assert row.verdict == FAIL and "CTS" in row.reasons[0]
    row, _ = one_row(make_record(cts=False), make_record(cts=False))
    assert row.verdict == PASS and "still outside CTS" in row.reasons[0]
    assert one_row(make_record(cts=False), make_record(cts=True))[0].verdict == PASS


def test_status_changes(make_record):
    row, c = one_row(make_record(), make_record(status="error"))
    assert row.verdict == FAIL and "now error: driver failed" in row.reasons[0] and c.exit_code() == 1
    unsupported = make_record(status="unsupported", unsupported_ops=["LSTM"])
    row, _ = one_row(make_record(), unsupported)
    assert row.verdict == FAIL and "LSTM" in row.reasons[0]
    assert one_row(make_record(status="error"), make_record())[0].verdict == PASS
    assert one_row(make_record(status="error"), make_record(status="error"))[0].verdict == PASS
    assert one_row(unsupported, make_record(status="error"))[0].verdict == WARN


def test_new_and_missing_cases_warn(make_record):
    c = compare([make_record(mode="sync"), make_record(mode="burst")],
                [make_record(mode="sync"), make_record(mode="async")])
    by_mode = {r.mode: r for r in c.rows}
    assert by_mode["burst"].verdict == WARN and "missing" in by_mode["burst"].reasons[0]
    assert by_mode["async"].verdict == WARN and "new" in by_mode["async"].reasons[0]
    assert by_mode["sync"].verdict == PASS
    assert c.verdict == WARN and c.exit_code() == 0 and c.exit_code(fail_on_warn=True) == 1


def test_overall_is_the_worst_and_rows_sort_by_severity(make_record):
    base = [make_record(model=m) for m in ("a", "b", "c")]
    cur = [make_record(model="a"), make_record(model="b", p50=12.0), make_record(model="c", p50=11.0)]
    c = compare(base, cur)
    assert c.verdict == FAIL and [r.verdict for r in c.rows] == [FAIL, WARN, PASS]
    assert c.counts() == {FAIL: 1, WARN: 1, PASS: 1}


def test_only_benchmark_records_count_and_later_records_win(make_record):
    stress = {"kind": "stress", "test": "x", "outcome": "CRASH"}
    retried = [make_record(status="error"), make_record(p50=10.0)]
    c = compare([stress, make_record()], [stress] + retried)
    assert len(c.rows) == 1 and c.rows[0].verdict == PASS
    assert any("2 records" in n for n in c.notes)


def test_no_benchmark_records_is_bad_data(make_record):
    with pytest.raises(MltsError) as e:
        compare([{"kind": "stress"}], [make_record()])
    assert e.value.code == ResultCode.BAD_DATA and "baseline" in e.value.message


@pytest.mark.parametrize("kwargs, field", [
    ({"latency_warn_pct": -1}, "latency_warn_pct"),
    ({"latency_warn_pct": 20, "latency_fail_pct": 10}, "latency_warn_pct"),
    ({"accuracy_warn_points": 3, "accuracy_fail_points": 1}, "accuracy_warn_points"),
    ({"noise_k": float("nan")}, "noise_k"),
])
def test_bad_thresholds(kwargs, field):
    with pytest.raises(MltsError) as e:
        Thresholds(**kwargs)
    assert e.value.code == ResultCode.BAD_DATA and field in e.value.message


def test_markdown_summary(make_record):
    base = [make_record(model="a"), make_record(model="b"), make_record(model="c")]
    cur = [make_record(model="a"), make_record(model="b", p50=12.0),
           make_record(model="c", status="error", message="DEAD_OBJECT: driver | died")]
    md = compare(base, cur).to_markdown()
    assert md.startswith("### mlts compare: FAIL")
    assert "2 FAIL, 0 WARN, 1 PASS of 3 case(s)." in md
    assert ("| Verdict | Model | Driver | Mode | Median latency (ms) | Δ | Ratio [95% CI] | p | Could detect | "
            "Top-1 (%) |") in md
    # No samples in these records: the ratio is the medians' and "could detect" the noise (0 here).
    assert ("| FAIL | b | nnapi-reference | sync | 10.00 → 12.00 | +20.0% | 1.200 | - | ≥ 0.0% | "
            "70.0 → 70.0 |") in md
    assert "driver \\| died" in md  # a pipe in a message does not break the table
    assert "<summary>1 passing case(s)</summary>" in md
    assert "Preference" not in md
    all_pass = compare(base[:1], cur[:1]).to_markdown()
    assert "### mlts compare: PASS" in all_pass and "<summary>All cases pass</summary>" in all_pass


def test_json_output(make_record):
    c = compare([make_record()], [make_record(p50=12.0)])
    d = json.loads(c.to_json())
    assert d["verdict"] == FAIL and d["counts"][FAIL] == 1
    assert d["thresholds"]["latency_fail_pct"] == 15.0
    row = d["rows"][0]
    assert row["model"] == "mobilenet_v1_1.0_224" and row["delta_pct"] == pytest.approx(20.0)
    assert row["baseline_p50_ms"] == 10.0 and row["current_p50_ms"] == 12.0


def test_compile_times_and_their_first_use_are_not_compared(make_record):
    """Old records have no compilation_ms.first_use; compile times (first use or not) never decide a verdict."""
    timed = {"without_cache": 150.0, "save_to_cache": None, "with_cache": None, "first_use": 2447.0}
    for base, cur in ((make_record(), make_record(compilation_ms=timed)),
                      (make_record(compilation_ms=dict(timed, without_cache=15.0, first_use=None)),
                       make_record(compilation_ms={"without_cache": 900.0}))):
        row, c = one_row(base, cur)
        assert row.verdict == PASS and c.exit_code() == 0
