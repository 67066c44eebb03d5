"""Accuracy metrics on crafted outputs, including the CTS rules of SPEC.md section 3 at their edges."""
import numpy as np
import pytest

from mlts.benchmark.accuracy import (FLOAT16_ATOL, FLOAT32_ATOL, FLOAT32_RTOL, QUANT_TOLERANCE_PER_OP,
                                     QUANT_TOLERANCE_WHOLE_MODEL, AccuracyAccumulator, compare_outputs,
                                     cts_tolerance, top_k_agreement_hits, top_k_classes, top_k_label_hits)
from mlts.runtime import MltsError, ResultCode


def test_spec_numbers():
    assert FLOAT32_ATOL == 1e-5
    assert FLOAT32_RTOL == 5 * 2.0 ** -23
    assert FLOAT16_ATOL == 5 * 2.0 ** -10
    assert (QUANT_TOLERANCE_PER_OP, QUANT_TOLERANCE_WHOLE_MODEL) == (1, 3)


@pytest.mark.parametrize("dtype, relaxed, kind", [
    (np.float32, False, "float32"), (np.float32, True, "float16"), (np.float16, False, "float16"),
    (np.uint8, False, "quantized"), (np.int8, False, "quantized"), (np.int16, False, "quantized"),
    (np.int32, False, "exact"), (np.bool_, False, "exact"),
])
def test_tolerance_by_dtype(dtype, relaxed, kind):
    assert cts_tolerance(dtype, relaxed=relaxed).kind == kind


def test_tolerance_rejects_unknown_dtype_and_bad_quant_tolerance():
    with pytest.raises(MltsError) as e:
        cts_tolerance(np.complex64)
    assert e.value.code == ResultCode.BAD_DATA
    with pytest.raises(MltsError):
        cts_tolerance(np.uint8, quant_tolerance=-1)


def violations(actual, expected, **kw):
    expected = np.asarray(expected)
    return compare_outputs(np.asarray(actual, expected.dtype), expected, cts_tolerance(expected.dtype, **kw)).cts_violations


def test_float32_exactly_at_absolute_tolerance():
    below = np.float32(1e-5)  # the float32 nearest 1e-5 lies just under it
    assert float(below) <= 1e-5
    above = np.nextafter(below, np.float32(1))
    assert violations([below], np.zeros(1, np.float32)) == 0
    assert violations([above], np.zeros(1, np.float32)) == 1


def test_float32_exactly_at_relative_tolerance():
    e = np.float32(1024.0)
    ulp = 2.0 ** -13  # float32 spacing at 1024; rtol * 1024 = 5 ulps exactly
    assert violations([np.float32(1024 + 5 * ulp)], [e]) == 0  # 5 ulps <= 1e-5 + 5 ulps
    assert violations([np.float32(1024 - 5 * ulp)], [e]) == 0
    assert violations([np.float32(1024 + 6 * ulp)], [e]) == 1


def test_float16_and_relaxed_exactly_at_tolerance():
    tol = np.float16(5 * 2.0 ** -10)
    assert violations([tol], np.zeros(1, np.float16)) == 0
    assert violations([np.nextafter(tol, np.float16(1))], np.zeros(1, np.float16)) == 1
    assert violations([np.float32(tol)], np.zeros(1, np.float32), relaxed=True) == 0
    assert violations([np.float32(tol)], np.zeros(1, np.float32)) == 1  # float32 is stricter


def test_quantized_off_by_whole_model_or_per_op():
    e = np.array([0, 128, 255], np.uint8)
    assert violations([3, 125, 252], e) == 0
    assert violations([4, 128, 255], e) == 1
    assert violations([255, 128, 255], np.array([0, 128, 255], np.uint8)) == 1  # no uint8 wrap-around
    assert violations([1, 129, 254], e, quant_tolerance=QUANT_TOLERANCE_PER_OP) == 0
    assert violations([2, 128, 255], e, quant_tolerance=QUANT_TOLERANCE_PER_OP) == 1
    assert violations([-128, 127], np.array([-125, 124], np.int8)) == 0


def test_exact_types():
    assert violations([1, 2], np.array([1, 3], np.int32)) == 1
    assert violations([True, False], np.array([True, False])) == 0


def test_errors_and_nonfinite_values():
    e = np.array([1.0, 2.0, np.nan, np.inf, 0.0, 5.0], np.float32)
    a = np.array([1.5, 1.0, np.nan, np.inf, np.nan, -np.inf], np.float32)
    c = compare_outputs(a, e, cts_tolerance(np.float32))
    assert c.elements == 6
    assert c.nonfinite_mismatches == 2      # NaN for 0.0, -inf for 5.0
    assert c.cts_violations == 4            # 1.5 vs 1, 1 vs 2, and the two mismatches
    assert c.max_abs_error == 1.0
    assert c.mse == pytest.approx((0.25 + 1.0) / 4)  # over the 4 comparable elements


def test_mse_and_max_abs_error_against_numpy():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(3, 100)).astype(np.float32)
    a = (e + rng.normal(scale=1e-3, size=e.shape)).astype(np.float32)
    c = compare_outputs(a, e, cts_tolerance(np.float32))
    d = a.astype(np.float64) - e.astype(np.float64)
    assert c.mse == pytest.approx(np.mean(d ** 2), rel=1e-12)
    assert c.max_abs_error == pytest.approx(np.max(np.abs(d)), rel=1e-12)


def test_shape_mismatch_is_bad_data():
    with pytest.raises(MltsError) as e:
        compare_outputs(np.zeros(3), np.zeros(4), cts_tolerance(np.float32))
    assert e.value.code == ResultCode.BAD_DATA


def test_top_k_ranking_ties_and_nan():
    scores = np.array([[0.1, 0.5, 0.5, 0.2],        # tie: the lower index ranks first
                       [0.0, 0.0, 0.0, 0.0],        # constant output: class order
                       [np.nan, 0.1, 0.3, 0.2]])    # NaN ranks last
    assert top_k_classes(scores, 2).tolist() == [[1, 2], [0, 1], [2, 3]]
    assert top_k_label_hits(scores, [2, 3, 0], 1).tolist() == [False, False, False]
    assert top_k_label_hits(scores, [2, 1, 1], 2).tolist() == [True, True, False]
    assert top_k_label_hits(scores, [0, 3, 0], 5).tolist() == [True, True, True]  # k > classes: every class
    with pytest.raises(MltsError):
        top_k_label_hits(scores, [1, 2], 1)


def test_agreement_counts_any_tied_reference_best():
    ref = np.array([[0, 9, 9, 1], [5, 1, 2, 3]], np.uint8)
    drv = np.array([[0, 8, 9, 1], [1, 2, 3, 9]], np.uint8)  # row 0 picks class 2 (tied best in ref)
    assert top_k_agreement_hits(drv, ref, 1).tolist() == [True, False]
    assert top_k_agreement_hits(drv, ref, 3).tolist() == [True, False]  # class 0 is last in drv's row 1
    assert top_k_agreement_hits(drv, ref, 4).tolist() == [True, True]


def test_accumulator_one_image_at_a_time_equals_batch():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(20, 10)).astype(np.float32)
    drv = ref.copy()
    drv[3] = np.roll(drv[3], 1)                        # disagrees at top-1
    drv[7, 0] += np.float32(0.5)                       # small change
    labels = rng.integers(0, 10, size=20)
    one = AccuracyAccumulator()
    for i in range(20):
        one.add(drv[i:i + 1], ref[i:i + 1], label=int(labels[i]))
    batch = AccuracyAccumulator()
    batch.add(drv, ref, label=labels)
    assert one.result() == batch.result()
    r = one.result()
    assert r["reference_samples"] == 20 and r["label_samples"] == 20
    assert r["top1_agreement"] == pytest.approx(np.mean(drv.argmax(1) == ref.argmax(1)))
    assert r["top1_accuracy"] == pytest.approx(np.mean(drv.argmax(1) == labels))
    top5 = np.argsort(-drv, axis=1, kind="stable")[:, :5]
    assert r["top5_accuracy"] == pytest.approx(np.mean((top5 == labels[:, None]).any(1)))
    assert r["cts_pass"] is False and r["cts_violations"] > 0
    assert r["cts_tolerance"]["kind"] == "float32" and r["output_dtype"] == "float32"
    d = drv.astype(np.float64) - ref
    assert r["mse"] == pytest.approx(np.mean(d ** 2)) and r["max_abs_error"] == pytest.approx(np.abs(d).max())


def test_accumulator_quantized_whole_model_default_and_per_op():
    ref = np.array([[10, 200, 30]], np.uint8)
    drv = np.array([[12, 198, 31]], np.uint8)
    acc = AccuracyAccumulator()
    acc.add(drv, ref)
    r = acc.result()
    assert r["cts_pass"] is True and r["max_abs_error"] == 2.0 and r["cts_tolerance"]["max_diff"] == 3
    strict = AccuracyAccumulator(quant_tolerance=1)
    strict.add(drv, ref)
    assert strict.result()["cts_pass"] is False and strict.result()["cts_violations"] == 2


def test_accumulator_labels_only_and_empty():
    acc = AccuracyAccumulator()
    acc.add(np.array([0.1, 0.7, 0.2]), label=1)
    acc.add(np.array([0.8, 0.1, 0.1]), label=2)
    r = acc.result()
    assert r["top1_accuracy"] == 0.5 and r["top5_accuracy"] == 1.0 and r["label_samples"] == 2
    assert r["mse"] is None and r["cts_pass"] is None and r["top1_agreement"] is None
    empty = AccuracyAccumulator().result()
    assert empty["top1_accuracy"] is None and empty["cts_pass"] is None
