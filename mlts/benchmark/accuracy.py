"""Accuracy of a driver's outputs: against the nnapi-reference outputs on the same inputs (error sizes,
the CTS verdict of SPEC.md section 3, top-1/top-5 agreement) and against dataset labels (top-1/top-5).

A runner feeds one image at a time into an `AccuracyAccumulator` and stores `result()` in the record.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from mlts.runtime import MltsError, ResultCode

# SPEC.md section 3.
FLOAT32_ATOL = 1e-5
FLOAT32_RTOL = 5 * 1.1920928955078125e-7
FLOAT16_ATOL = 5 * 0.0009765625
FLOAT16_RTOL = 5 * 0.0009765625
#: Quantized results of one operation may be off by one step...
QUANT_TOLERANCE_PER_OP = 1
#: ...and a whole MobileNet quantized model by three: the default here, since the benchmark runs whole models.
QUANT_TOLERANCE_WHOLE_MODEL = 3

_QUANTIZED_DTYPES = (np.uint8, np.int8, np.uint16, np.int16)
_EXACT_DTYPES = (np.bool_, np.int32, np.int64, np.uint32)
_FLOAT32_DTYPES = (np.float32, np.float64)


@dataclass(frozen=True)
class Tolerance:
    """A CTS acceptance rule. kind "float32"/"float16": |expected - actual| <= atol + rtol*|expected|;
    "quantized": |expected - actual| <= max_diff in quantized steps; "exact": equal."""

    kind: str
    atol: float = 0.0
    rtol: float = 0.0
    max_diff: int = 0

    def within(self, actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
        """Elementwise: True where `actual` meets the rule (both NaN, or equal infinities, count as met)."""
        actual = np.asarray(actual)
        expected = np.asarray(expected)
        if self.kind == "quantized":
            return np.abs(actual.astype(np.int64) - expected.astype(np.int64)) <= self.max_diff
        if self.kind == "exact":
            return actual == expected
        a = actual.astype(np.float64)
        e = expected.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.abs(e - a) <= self.atol + self.rtol * np.abs(e)
        return close | (a == e) | (np.isnan(a) & np.isnan(e))

    def describe(self) -> str:
        if self.kind == "quantized":
            return f"quantized: off by at most {self.max_diff}"
        if self.kind == "exact":
            return "exact"
        return f"{self.kind}: |expected - actual| <= {self.atol:g} + {self.rtol:g} * |expected|"

    def to_dict(self) -> dict:
        return asdict(self)


def cts_tolerance(dtype, *, relaxed: bool = False,
                  quant_tolerance: int = QUANT_TOLERANCE_WHOLE_MODEL) -> Tolerance:
    """The SPEC.md section 3 rule for outputs of `dtype` (relaxed: float32 computed as float16)."""
    dt = np.dtype(dtype)
    if isinstance(quant_tolerance, bool) or not isinstance(quant_tolerance, (int, np.integer)) or quant_tolerance < 0:
        raise MltsError(ResultCode.BAD_DATA, f"quant_tolerance must be an integer >= 0, got {quant_tolerance!r}")
    if dt == np.float16 or (relaxed and dt in _FLOAT32_DTYPES):
        return Tolerance("float16", atol=FLOAT16_ATOL, rtol=FLOAT16_RTOL)
    if dt in _FLOAT32_DTYPES:
        return Tolerance("float32", atol=FLOAT32_ATOL, rtol=FLOAT32_RTOL)
    if dt in _QUANTIZED_DTYPES:
        return Tolerance("quantized", max_diff=int(quant_tolerance))
    if dt in _EXACT_DTYPES:
        return Tolerance("exact")
    raise MltsError(ResultCode.BAD_DATA, f"no CTS tolerance for output type {dt}")


@dataclass(frozen=True)
class OutputComparison:
    """Errors of one output against the reference. Elements where exactly one side is NaN or the two
    are different infinities are `nonfinite_mismatches`: not in the error sizes, always CTS violations."""

    elements: int
    sum_squared_error: float
    max_abs_error: float
    nonfinite_mismatches: int
    cts_violations: int

    @property
    def mse(self) -> float | None:
        finite = self.elements - self.nonfinite_mismatches
        return self.sum_squared_error / finite if finite else None


def compare_outputs(actual, expected, tolerance: Tolerance) -> OutputComparison:
    """Error sizes (in the output's own units: quantized steps for quantized outputs) and CTS violations."""
    a_arr = np.asarray(actual)
    e_arr = np.asarray(expected)
    if a_arr.shape != e_arr.shape:
        raise MltsError(ResultCode.BAD_DATA, f"output shape {a_arr.shape} differs from the reference's {e_arr.shape}")
    a = a_arr.astype(np.float64).ravel()
    e = e_arr.astype(np.float64).ravel()
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    nonfinite = ~same & ~(np.isfinite(a) & np.isfinite(e))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same | nonfinite, 0.0, a - e)
    return OutputComparison(
        elements=int(a.size),
        sum_squared_error=float(np.sum(diff * diff)),
        max_abs_error=float(np.max(np.abs(diff), initial=0.0)),
        nonfinite_mismatches=int(nonfinite.sum()),
        cts_violations=int((~tolerance.within(a_arr, e_arr)).sum()),
    )


def _rows(scores) -> np.ndarray:
    """Classification scores as (samples, classes) float64, NaN ranked lowest (a NaN is never a top class)."""
    s = np.asarray(scores)
    if s.ndim == 0:
        raise MltsError(ResultCode.BAD_DATA, "classification scores must have a class dimension")
    s = s.astype(np.float64).reshape(-1, s.shape[-1])
    return np.where(np.isnan(s), -np.inf, s)


def top_k_classes(scores, k: int) -> np.ndarray:
    """(samples, min(k, classes)) class indices, best first; ties go to the lower class index, so a
    constant (broken) output never scores well."""
    s = _rows(scores)
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


def top_k_label_hits(scores, labels, k: int) -> np.ndarray:
    """Per sample: is the label among the k best classes."""
    top = top_k_classes(scores, k)
    lab = np.asarray(labels, dtype=np.int64).reshape(-1)
    if lab.shape[0] != top.shape[0]:
        raise MltsError(ResultCode.BAD_DATA, f"{lab.shape[0]} label(s) for {top.shape[0]} output row(s)")
    return (top == lab[:, None]).any(axis=1)


def top_k_agreement_hits(actual, expected, k: int) -> np.ndarray:
    """Per sample: does one of the driver's k best classes score highest in the reference (any of the
    reference's tied best classes counts, since the reference itself does not prefer one)."""
    ref = _rows(expected)
    top = top_k_classes(actual, k)
    if ref.shape[0] != top.shape[0]:
        raise MltsError(ResultCode.BAD_DATA, f"{top.shape[0]} output row(s) for {ref.shape[0]} reference row(s)")
    ref_best = ref == ref.max(axis=1, keepdims=True)
    return np.take_along_axis(ref_best, top, axis=1).any(axis=1)


class AccuracyAccumulator:
    """Running accuracy of one model output over many images; `add` one image (or batch) at a time.

    The CTS rule comes from the reference's dtype (or is given). Fractions (agreement, accuracy) are
    0..1. `result()` is the record's `accuracy` field.
    """

    def __init__(self, *, relaxed: bool = False, quant_tolerance: int = QUANT_TOLERANCE_WHOLE_MODEL,
                 tolerance: Tolerance | None = None, classification: bool = True):
        self.relaxed = relaxed
        self.quant_tolerance = quant_tolerance
        self.tolerance = tolerance
        self.classification = classification
        self.output_dtype: str | None = None
        self.reference_samples = 0
        self.elements = 0
        self.sum_squared_error = 0.0
        self.max_abs_error = 0.0
        self.nonfinite_mismatches = 0
        self.cts_violations = 0
        self.top1_agree = 0
        self.top5_agree = 0
        self.label_samples = 0
        self.top1_hits = 0
        self.top5_hits = 0

    def add(self, actual, expected=None, label=None) -> None:
        """Score one driver output against the reference output and/or the label(s) of its input."""
        actual = np.asarray(actual)
        if self.output_dtype is None:
            self.output_dtype = str(actual.dtype)
        if expected is not None:
            expected = np.asarray(expected)
            if self.tolerance is None:
                self.tolerance = cts_tolerance(expected.dtype, relaxed=self.relaxed,
                                               quant_tolerance=self.quant_tolerance)
            c = compare_outputs(actual, expected, self.tolerance)
            self.elements += c.elements
            self.sum_squared_error += c.sum_squared_error
            self.max_abs_error = max(self.max_abs_error, c.max_abs_error)
            self.nonfinite_mismatches += c.nonfinite_mismatches
            self.cts_violations += c.cts_violations
            if self.classification and actual.ndim >= 1:
                self.reference_samples += int(actual.size // actual.shape[-1]) if actual.shape[-1] else 0
                self.top1_agree += int(top_k_agreement_hits(actual, expected, 1).sum())
                self.top5_agree += int(top_k_agreement_hits(actual, expected, 5).sum())
            else:
                self.reference_samples += 1
        if label is not None:
            if not self.classification:
                raise MltsError(ResultCode.BAD_DATA, "labels given for an output that is not a classification")
            self.top1_hits += int(top_k_label_hits(actual, label, 1).sum())
            self.top5_hits += int(top_k_label_hits(actual, label, 5).sum())
            self.label_samples += int(np.asarray(label).size)

    def result(self) -> dict:
        """The metrics as plain JSON values; a metric with nothing to measure is None."""
        has_ref = self.elements > 0 or self.reference_samples > 0
        finite = self.elements - self.nonfinite_mismatches
        ref_rows = self.reference_samples if (has_ref and self.classification) else 0
        return {
            "output_dtype": self.output_dtype,
            "reference_samples": self.reference_samples if has_ref else 0,
            "mse": (self.sum_squared_error / finite) if has_ref and finite else None,
            "max_abs_error": self.max_abs_error if has_ref and finite else None,
            "nonfinite_mismatches": self.nonfinite_mismatches if has_ref else None,
            "cts_tolerance": self.tolerance.to_dict() if (has_ref and self.tolerance) else None,
            "cts_violations": self.cts_violations if has_ref else None,
            "cts_pass": (self.cts_violations == 0) if has_ref else None,
            "top1_agreement": self.top1_agree / ref_rows if ref_rows else None,
            "top5_agreement": self.top5_agree / ref_rows if ref_rows else None,
            "label_samples": self.label_samples,
            "top1_accuracy": self.top1_hits / self.label_samples if self.label_samples else None,
            "top5_accuracy": self.top5_hits / self.label_samples if self.label_samples else None,
        }


#: A quantized model's top-1 agreement with the reference must be at least this (with every operation
#: within QUANT_TOLERANCE_PER_OP given the reference's inputs).
QUANTIZED_TOP1_AGREEMENT = 0.99
#: ...a quantized detector's mAP@0.5 at most this far below nnapi-reference's on the same images (2 points, compare's
#: accuracy threshold): a driver within one step per operation moves scores by a few steps, which moves detections
#: near the score threshold or an NMS tie (measured: a single-rounding driver matched 95.7% of the reference's
#: detections with the same mAP), so matched-detection agreement is a figure for detectors, not the verdict
QUANTIZED_MAP_DROP = 0.02
QUANTIZED_VERDICT_RULE = ("every operation within one quantization step given nnapi-reference's inputs, and top-1 "
                          f"agreement with nnapi-reference >= {QUANTIZED_TOP1_AGREEMENT:.0%} (detectors: mAP@0.5 at "
                          f"most {QUANTIZED_MAP_DROP:g} below nnapi-reference's); the whole-model difference is a "
                          "figure, not judged")


def apply_quantized_verdict(result: dict, per_operation: dict, *, agreement_key: str = "top1_agreement") -> None:
    """Judge a quantized model's `result` (a task scorer's result()) by NNAPI's per-operation rule: a driver
    that rounds differently once per operation drifts by several steps over a whole network and still
    passes; one that gets an operation wrong fails, naming it (op_diff.per_operation_verdict). The
    whole-model check is the task's agreement with the reference (`agreement_key`: top-1 for classifiers,
    matched detections for detectors), at least QUANTIZED_TOP1_AGREEMENT."""
    agreement = result.get(agreement_key)
    if agreement_key == "map50":  # a detector: its mAP against nnapi-reference's on the same images
        reference = result.get("reference_map50")
        agrees = agreement is None or reference is None or agreement >= reference - QUANTIZED_MAP_DROP - 1e-9
    else:
        agrees = agreement is None or agreement >= QUANTIZED_TOP1_AGREEMENT
    if agreement_key == "top1_agreement":
        result["whole_model"] = {"max_steps": result.get("max_abs_error"),
                                 "elements_over_3_steps": result.get("cts_violations")}
    else:  # a detector's outputs are float (its postprocessing is): the images outside the detection rule
        result["whole_model"] = {"images_outside_rule": result.get("cts_violations"),
                                 "rule": (result.get("cts_tolerance") or {}).get("rule"),
                                 "reason": result.pop("verdict_reason", None)}
    result["per_operation"] = per_operation
    result["verdict_rule"] = QUANTIZED_VERDICT_RULE
    result["cts_tolerance"] = {**Tolerance("quantized", max_diff=QUANT_TOLERANCE_PER_OP).to_dict(),
                               "scope": "per operation"}
    result["cts_violations"] = per_operation["operations_out_of_tolerance"] + len(per_operation["operations_failed"])
    result["cts_pass"] = bool(per_operation["pass"] and agrees)
    reasons = []
    if not per_operation["pass"]:
        bad = per_operation["first_out_of_tolerance"]
        reasons.append(f"operation {bad['index']} {bad['operation']} ({bad['origin']}) is off by {bad['difference']}"
                       if bad else f"operations failed: {'; '.join(per_operation['operations_failed'])}")
    if not agrees and agreement_key == "map50":
        reasons.append(f"mAP@0.5 {agreement:.3f} is more than {QUANTIZED_MAP_DROP:g} below nnapi-reference's "
                       f"{result['reference_map50']:.3f}")
    elif not agrees:
        what = "top-1 agreement" if agreement_key == "top1_agreement" else agreement_key.replace("_", " ")
        reasons.append(f"{what} {agreement:.1%} < {QUANTIZED_TOP1_AGREEMENT:.0%}")
    if reasons:
        result["verdict_reason"] = "; ".join(reasons)
