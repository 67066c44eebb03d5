"""Accuracy of a detector ending in NNAPI DETECTION_POSTPROCESSING: mean average precision against ground
truth, and agreement of a driver's detections with nnapi-reference's, with a CTS verdict.

Outputs of one image (DETECTION_POSTPROCESSING): scores [1, N], boxes [1, N, 4] (ymin, xmin, ymax, xmax,
normalized), classes [1, N] (0-based, background excluded), num_detections [1]; rows past num_detections are
padding. Ground truth: boxes [n, 4] in the same convention and 0-based classes [n].

mAP@0.5 is PASCAL VOC 2010+'s: per class over all images, detections ranked by descending score (ties keep
image, then output order), each matching the highest-IoU still-unmatched ground truth of its class with
IoU >= 0.5 (else, a duplicate included, a false positive); AP is the area under the all-point interpolated
precision/recall curve; classes without ground truth are left out of the mean. mAP@0.5:0.95 averages it over
COCO's ten thresholds with the same matching and area (not COCO's 101-point sampling, so it is close to but
not pycocotools' number).

The verdict. AOSP's CTS harness (nn/tools/test_generator/test_harness/TestHarness.cpp, checkResults) has no
special case for DETECTION_POSTPROCESSING or BOX_WITH_NMS_LIMIT: every output buffer is compared element by
element in output order, floats within atol + rtol * |expected|, TENSOR_INT32 within 1. Its vectors
(specs/V1_2/detection_postprocess.mod.py, box_with_nms_limit_*.mod.py) are hand-made with well separated
scores and boxes, so NMS is never near a tie there. A whole model is not: a driver's float rounding moves a
score by an ulp, which can reorder two near-equal detections, swap which of two overlapping anchors survives
NMS, or move a detection across the score threshold; element-wise comparison then fails a correct driver.
So an image passes if either
- (CTS) its valid rows equal the reference's in the same order: same count, same classes (exactly: an
  off-by-one class is a wrong class, though the generic harness would accept it), scores and boxes within
  `accuracy.cts_tolerance` of the output dtype (padding rows are not data and are not compared), or
- (NMS-tolerant) every reference detection is matched (same class, IoU >= 0.5), no driver detection is left
  over, and every matched pair has box IoU >= 0.9 and a score within the tolerance.
The run passes if every image passes, or if the only failures are unmatched detections on either side,
at most 1% of the reference's and of the driver's (ties resolved differently), with no matched pair of an
image that differs from the reference outside the IoU/score bounds. `cts_violations` counts the images that
pass neither rule; the figures (agreement, IoU, differences) cover every image with a reference.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mlts.runtime import MltsError, ResultCode

from .accuracy import Tolerance, cts_tolerance

#: a detection matches a ground truth / reference detection of its class at this IoU
MATCH_IOU = 0.5
#: COCO's IoU thresholds 0.50, 0.55, ..., 0.95
COCO_IOU_THRESHOLDS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))
#: the NMS-tolerant verdict: fraction of detections (both sides) that must be matched over the run...
DETECTION_AGREEMENT = 0.99
#: ...and the least box IoU of every matched pair
MATCHED_PAIR_IOU = 0.9
OUTPUT_NAMES = ("scores", "boxes", "classes", "num_detections")
VERDICT_RULE = (
    "CTS: every image's valid detections equal nnapi-reference's in the same order (same count and classes, "
    "scores and boxes within the float tolerance); or, NMS being discontinuous: every matched pair (same class, "
    f"IoU >= {MATCH_IOU}) has box IoU >= {MATCHED_PAIR_IOU} and a score within the float tolerance, and at least "
    f"{DETECTION_AGREEMENT:.0%} of the reference's and of the driver's detections are matched")


def box_iou(boxes_a, boxes_b) -> np.ndarray:
    """[n, m] IoU of (ymin, xmin, ymax, xmax) boxes, in float64. An inverted side counts as zero length.
    Identical finite boxes have IoU 1 (zero-area ones too: a point predicted exactly is a hit); otherwise
    a zero union gives 0, and so does any box with a non-finite coordinate."""
    a = np.asarray(boxes_a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(boxes_b, dtype=np.float64).reshape(-1, 4)
    ay1, ax1, ay2, ax2 = (a[:, i, None] for i in range(4))
    by1, bx1, by2, bx2 = (b[None, :, i] for i in range(4))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        inter = (np.clip(np.minimum(ay2, by2) - np.maximum(ay1, by1), 0, None)
                 * np.clip(np.minimum(ax2, bx2) - np.maximum(ax1, bx1), 0, None))
        area_a = np.clip(ay2 - ay1, 0, None) * np.clip(ax2 - ax1, 0, None)
        area_b = np.clip(by2 - by1, 0, None) * np.clip(bx2 - bx1, 0, None)
        union = area_a + area_b - inter
        iou = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
    finite_a = np.isfinite(a).all(axis=1)[:, None]
    finite_b = np.isfinite(b).all(axis=1)[None, :]
    identical = (a[:, None, :] == b[None, :, :]).all(axis=2)
    iou = np.where(finite_a & finite_b & np.isfinite(iou), iou, 0.0)
    return np.where(identical & finite_a & finite_b, 1.0, iou)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """VOC 2010+ AP: area under the all-point interpolated curve (precision at recall r = the best
    precision at any recall >= r) for a ranked list's cumulative recall and precision."""
    mrec = np.concatenate([[0.0], np.asarray(recall, dtype=np.float64), [1.0]])
    mpre = np.concatenate([[0.0], np.asarray(precision, dtype=np.float64), [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    steps = np.flatnonzero(mrec[1:] != mrec[:-1])
    return float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))


@dataclass(frozen=True)
class Detections:
    """The valid detections of one image, in output order: scores [k], boxes [k, 4] (float64), classes [k]."""

    scores: np.ndarray
    boxes: np.ndarray
    classes: np.ndarray
    dtype: str = "float32"
    capacity: int = 0

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def detections_from_outputs(outputs: Sequence, what: str = "driver output") -> Detections:
    """Check the 4 DETECTION_POSTPROCESSING outputs of one image and keep their first num_detections rows."""
    if isinstance(outputs, np.ndarray) or not isinstance(outputs, (list, tuple)) or len(outputs) != 4:
        got = len(outputs) if isinstance(outputs, (list, tuple)) else type(outputs).__name__
        raise _bad(f"detection {what}: expected 4 outputs ({', '.join(OUTPUT_NAMES)}), got {got}")
    scores, boxes, classes, count = (np.asarray(o) for o in outputs)
    if scores.ndim != 2 or scores.shape[0] != 1:
        raise _bad(f"detection {what}: scores must have shape [1, N] (one image), got {list(scores.shape)}")
    capacity = scores.shape[1]
    for name, arr, shape in (("boxes", boxes, (1, capacity, 4)), ("classes", classes, (1, capacity))):
        if arr.shape != shape:
            raise _bad(f"detection {what}: {name} must have shape {list(shape)}, got {list(arr.shape)}")
    if count.size != 1 or count.ndim > 1:
        raise _bad(f"detection {what}: num_detections must have shape [1], got {list(count.shape)}")
    for name, arr, kinds in (("scores", scores, "f"), ("boxes", boxes, "f"), ("classes", classes, "iu"),
                             ("num_detections", count, "iu")):
        if arr.dtype.kind not in kinds:
            wanted = "floating point" if kinds == "f" else "integer"
            raise _bad(f"detection {what}: {name} must be {wanted}, got {arr.dtype}")
    n = int(count.reshape(-1)[0])
    if not 0 <= n <= capacity:
        raise _bad(f"detection {what}: num_detections {n} is outside 0..{capacity}")
    valid_classes = classes[0, :n].astype(np.int64)
    if (valid_classes < 0).any():
        raise _bad(f"detection {what}: negative class {int(valid_classes.min())} among the valid detections")
    return Detections(scores[0, :n].astype(np.float64), boxes[0, :n].astype(np.float64), valid_classes,
                      str(scores.dtype), capacity)


def truth_from_arrays(truth: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Check one image's ground truth (boxes [n, 4], classes [n]) as float64 boxes and int64 classes."""
    if not isinstance(truth, (list, tuple)) or len(truth) != 2:
        raise _bad("detection ground truth: expected (boxes [n, 4], classes [n])")
    boxes, classes = np.asarray(truth[0]), np.asarray(truth[1])
    if boxes.size == 0 and classes.size == 0:
        return np.zeros((0, 4)), np.zeros(0, dtype=np.int64)
    if boxes.ndim != 2 or boxes.shape[1] != 4 or classes.shape != (boxes.shape[0],):
        raise _bad(f"detection ground truth: boxes {list(boxes.shape)} and classes {list(classes.shape)} "
                   "must have shapes [n, 4] and [n]")
    if classes.dtype.kind not in "iu" or (classes < 0).any():
        raise _bad(f"detection ground truth: classes must be integers >= 0, got {classes.dtype} {classes.tolist()}")
    if boxes.dtype.kind != "f" or not np.isfinite(boxes).all():
        raise _bad("detection ground truth: boxes must be finite floating point values")
    return boxes.astype(np.float64), classes.astype(np.int64)


def _ranked_hits(detections: Sequence[Detections], truths: Sequence[tuple[np.ndarray, np.ndarray]],
                 thresholds: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """All detections of all images ranked by descending score (ties: image, then output order; NaN last):
    their classes [k], and [thresholds, k] flags saying which are true positives. Classes are matched in
    one pass, since a detection only ever sees the ground truth of its own class."""
    limits = np.asarray(thresholds, dtype=np.float64)[:, None]
    overlaps, image_of, row_of = [], [], []
    for image, (dets, (gt_boxes, gt_classes)) in enumerate(zip(detections, truths)):
        same_class = dets.classes[:, None] == gt_classes[None, :]
        overlaps.append(np.where(same_class, box_iou(dets.boxes, gt_boxes), -1.0))
        image_of += [image] * len(dets)
        row_of += range(len(dets))
    scores = np.concatenate([d.scores for d in detections] + [np.zeros(0)])
    classes = np.concatenate([d.classes for d in detections] + [np.zeros(0, np.int64)])
    order = np.argsort(-np.where(np.isnan(scores), -np.inf, scores), kind="stable")
    matched = [np.zeros((len(limits), len(gt_classes)), dtype=bool) for _, gt_classes in truths]
    hits = np.zeros((len(limits), len(order)), dtype=bool)
    every_threshold = np.arange(len(limits))
    for rank, k in enumerate(order):
        ious = overlaps[image_of[k]][row_of[k]]
        if not ious.size:
            continue
        taken = matched[image_of[k]]
        candidates = np.where(taken | (ious[None, :] < limits), -1.0, ious[None, :])
        best = np.argmax(candidates, axis=1)
        hit = candidates[every_threshold, best] >= 0
        taken[every_threshold[hit], best[hit]] = True
        hits[:, rank] = hit
    return classes[order], hits


def average_precisions(detections: Sequence[Detections], truths: Sequence[tuple[np.ndarray, np.ndarray]],
                       thresholds: Sequence[float] = (MATCH_IOU,)) -> dict[int, np.ndarray]:
    """{class: AP at each of `thresholds`} for every class with ground truth."""
    ranked_classes, hits = _ranked_hits(detections, truths, thresholds)
    positives = np.bincount(np.concatenate([c for _, c in truths] + [np.zeros(0, np.int64)]))
    result = {}
    for cls in np.flatnonzero(positives):
        mine = hits[:, ranked_classes == cls]
        tp = np.cumsum(mine, axis=1)
        precision = tp / np.arange(1, mine.shape[1] + 1)
        result[int(cls)] = np.array([average_precision(row / positives[cls], p) if row.size else 0.0
                                     for row, p in zip(tp, precision)])
    return result


def mean_average_precision(detections: Sequence[Detections], truths: Sequence[tuple[np.ndarray, np.ndarray]],
                           thresholds: Sequence[float] = (MATCH_IOU,)) -> tuple[float | None, dict[int, float]]:
    """(mAP averaged over classes with ground truth and over `thresholds`, {class: AP averaged over
    thresholds}); mAP is None when no image has ground truth."""
    per_class = {c: float(np.mean(aps)) for c, aps in average_precisions(detections, truths, thresholds).items()}
    return (float(np.mean(list(per_class.values()))) if per_class else None), per_class


@dataclass(frozen=True)
class ImageAgreement:
    """A driver's detections of one image against the reference's (`considered`: score >= the threshold)."""

    strict: bool               # the CTS rule: same rows in the same order within the tolerance
    count_mismatch: bool       # num_detections differs
    reference_detections: int  # reference detections considered
    matched: int               # of those, matched by a driver detection
    driver_detections: int     # driver detections considered
    extra: int                 # of those, matched to no reference detection
    pair_ious: tuple[float, ...]
    max_score_diff: float
    max_box_diff: float
    pair_violations: int       # matched pairs with box IoU < MATCHED_PAIR_IOU or a score outside the tolerance

    @property
    def passes(self) -> bool:
        return self.strict or (self.matched == self.reference_detections and self.extra == 0
                               and self.pair_violations == 0)


def _strictly_equal(actual: Detections, expected: Detections, tolerance: Tolerance) -> bool:
    if len(actual) != len(expected) or not np.array_equal(actual.classes, expected.classes):
        return False
    return bool(tolerance.within(actual.scores, expected.scores).all()
                and tolerance.within(actual.boxes, expected.boxes).all())


def _finite_max(values: np.ndarray) -> float:
    """The largest finite value (0 when none): a non-finite output already fails the tolerance."""
    return float(np.max(values[np.isfinite(values)], initial=0.0))


def compare_detections(actual: Detections, expected: Detections, tolerance: Tolerance,
                       score_threshold: float | None = None) -> ImageAgreement:
    """Match each reference detection, in the reference's order, to the still-unmatched driver detection of
    its class with the highest IoU (a match needs IoU >= MATCH_IOU). Every valid detection takes part in the
    matching, so a driver detection just above the threshold paired with a reference one just below is not
    "extra"; the counts and pair figures cover the detections with score >= `score_threshold`."""
    overlap = box_iou(expected.boxes, actual.boxes)
    overlap = np.where(expected.classes[:, None] == actual.classes[None, :], overlap, -1.0)
    taken = np.zeros(len(actual), dtype=bool)
    pairs = []
    for r in range(len(expected)):
        candidates = np.where(taken, -1.0, overlap[r])
        if candidates.size and candidates.max() >= MATCH_IOU:
            j = int(np.argmax(candidates))
            taken[j] = True
            pairs.append((r, j))

    def considered(scores: np.ndarray) -> np.ndarray:
        return np.ones(scores.shape, bool) if score_threshold is None else scores >= score_threshold

    ref_considered, drv_considered = considered(expected.scores), considered(actual.scores)
    ref_rows, drv_rows = (np.array([p[i] for p in pairs if ref_considered[p[0]]], dtype=np.int64) for i in (0, 1))
    ious = overlap[ref_rows, drv_rows]
    with np.errstate(invalid="ignore", over="ignore"):
        score_diffs = np.abs(actual.scores[drv_rows] - expected.scores[ref_rows])
        box_diffs = np.abs(actual.boxes[drv_rows] - expected.boxes[ref_rows])
    score_ok = tolerance.within(actual.scores[drv_rows], expected.scores[ref_rows])
    violations = int(np.sum((ious < MATCHED_PAIR_IOU) | ~score_ok))
    return ImageAgreement(
        strict=_strictly_equal(actual, expected, tolerance),
        count_mismatch=len(actual) != len(expected),
        reference_detections=int(ref_considered.sum()),
        matched=len(ref_rows),
        driver_detections=int(drv_considered.sum()),
        extra=int((drv_considered & ~taken).sum()),
        pair_ious=tuple(ious.tolist()),
        max_score_diff=_finite_max(score_diffs),
        max_box_diff=_finite_max(box_diffs),
        pair_violations=violations,
    )


def image_disagreement(actual: Sequence, expected: Sequence, tolerance: Tolerance | None = None) -> str | None:
    """Why a driver's DETECTION_POSTPROCESSING outputs of one image fail the verdict's per-image rule
    against the reference's (the CTS rule or the NMS-tolerant one, see the module doc), or None when they
    pass. Default tolerance: the whole-model float16 rule (accuracy.cts_tolerance, relaxed)."""
    tolerance = tolerance or cts_tolerance(np.float32, relaxed=True)
    try:
        reference = detections_from_outputs(expected, "reference output")
        driver = detections_from_outputs(actual)
    except MltsError as e:
        return e.message
    a = compare_detections(driver, reference, tolerance)
    if a.passes:
        return None
    return (f"detections differ from nnapi-reference's beyond NMS ties: {a.matched} of {a.reference_detections} "
            f"matched (same class, IoU >= {MATCH_IOU}), {a.extra} of {a.driver_detections} left over, "
            f"{a.pair_violations} matched pairs with box IoU < {MATCHED_PAIR_IOU} or a score outside the tolerance "
            f"(largest differences: score {a.max_score_diff:.3g}, box {a.max_box_diff:.3g})")


class DetectionAccuracy:
    """Running detection accuracy over many images, like `accuracy.AccuracyAccumulator`; `add` one image at
    a time, `result()` is the record's `accuracy` field.

    class_names: names for `per_class_ap` (else the class index as a string). score_threshold: reference
    detections below it are not required of the driver (default: every valid one). The CTS tolerance comes
    from the reference's score dtype (float16 when `relaxed`) unless `tolerance` is given.
    """

    def __init__(self, *, class_names: Sequence[str] | None = None, score_threshold: float | None = None,
                 relaxed: bool = False, tolerance: Tolerance | None = None):
        self.class_names = list(class_names) if class_names is not None else None
        self.score_threshold = score_threshold
        self.relaxed = relaxed
        self.tolerance = tolerance
        self.images = 0
        self._detections: list[Detections] = []
        self._truths: list[tuple[np.ndarray, np.ndarray]] = []
        self._reference_detections: list[Detections] = []  # where both the reference and the truth are given
        self._comparisons: list[tuple[int, ImageAgreement]] = []

    def add(self, outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray] | None = None,
            truth: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Score one image's 4 outputs against the reference's outputs and/or its ground truth."""
        actual = detections_from_outputs(outputs)
        gt = reference = None
        if truth is not None:
            gt = truth_from_arrays(truth)
            if self.class_names is not None and gt[1].size and gt[1].max() >= len(self.class_names):
                raise _bad(f"detection ground truth: class {int(gt[1].max())} has no name "
                           f"({len(self.class_names)} class names)")
        if expected is not None:
            reference = detections_from_outputs(expected, "reference output")
            if reference.capacity != actual.capacity:
                raise _bad(f"detection driver output has {actual.capacity} rows, the reference's {reference.capacity}")
        if gt is not None:
            self._detections.append(actual)
            self._truths.append(gt)
            if reference is not None:
                self._reference_detections.append(reference)
        if reference is not None:
            if self.tolerance is None:
                self.tolerance = cts_tolerance(reference.dtype, relaxed=self.relaxed)
            self._comparisons.append((self.images, compare_detections(actual, reference, self.tolerance,
                                                                      self.score_threshold)))
        self.images += 1

    def _class_key(self, cls: int) -> str:
        return self.class_names[cls] if self.class_names is not None else str(cls)

    def _ground_truth_result(self) -> dict:
        if not self._truths:
            return {"truth_samples": 0, "map50": None, "map50_95": None, "per_class_ap": {}, "reference_map50": None}
        per_threshold = average_precisions(self._detections, self._truths, COCO_IOU_THRESHOLDS)
        at_50 = COCO_IOU_THRESHOLDS.index(MATCH_IOU)
        per_class = {c: float(aps[at_50]) for c, aps in per_threshold.items()}
        map50 = float(np.mean(list(per_class.values()))) if per_class else None
        map50_95 = float(np.mean([aps.mean() for aps in per_threshold.values()])) if per_class else None
        reference_map50 = None
        if self._reference_detections and len(self._reference_detections) == len(self._truths):
            reference_map50 = mean_average_precision(self._reference_detections, self._truths)[0]
        return {"truth_samples": len(self._truths), "map50": map50, "map50_95": map50_95,
                "per_class_ap": {self._class_key(c): ap for c, ap in per_class.items()},
                "reference_map50": reference_map50}

    def _reference_result(self) -> dict:
        comparisons = [c for _, c in self._comparisons]
        if not comparisons:
            return {"reference_samples": 0, "reference_detections": 0, "driver_detections": 0,
                    "detection_agreement": None, "mean_iou": None, "max_score_diff": None, "max_box_diff": None,
                    "count_mismatches": None, "extra_detections": None, "strict_images": None,
                    "cts_tolerance": None, "cts_violations": None, "cts_pass": None}
        ref_total = sum(c.reference_detections for c in comparisons)
        drv_total = sum(c.driver_detections for c in comparisons)
        matched = sum(c.matched for c in comparisons)
        extra = sum(c.extra for c in comparisons)
        ious = [iou for c in comparisons for iou in c.pair_ious]
        pair_violations = sum(c.pair_violations for c in comparisons if not c.strict)
        failing = [(image, c) for image, c in self._comparisons if not c.passes]
        agreement = matched / ref_total if ref_total else None
        driver_agreement = (drv_total - extra) / drv_total if drv_total else 1.0
        tolerated = (pair_violations == 0 and (agreement is None or agreement >= DETECTION_AGREEMENT)
                     and driver_agreement >= DETECTION_AGREEMENT)
        result = {
            "reference_samples": len(comparisons),
            "reference_detections": ref_total,
            "driver_detections": drv_total,
            "detection_agreement": agreement,
            "mean_iou": float(np.mean(ious)) if ious else None,
            "max_score_diff": max(c.max_score_diff for c in comparisons) if ious else None,
            "max_box_diff": max(c.max_box_diff for c in comparisons) if ious else None,
            "count_mismatches": sum(c.count_mismatch for c in comparisons),
            "extra_detections": extra,
            "strict_images": sum(c.strict for c in comparisons),
            "cts_tolerance": {**self.tolerance.to_dict(), "rule": VERDICT_RULE, "match_iou": MATCH_IOU,
                              "matched_pair_iou": MATCHED_PAIR_IOU, "detection_agreement": DETECTION_AGREEMENT,
                              "score_threshold": self.score_threshold},
            "cts_violations": len(failing),
            "cts_pass": not failing or tolerated,
        }
        if failing:
            result["verdict_reason"] = self._verdict_reason(failing, matched, ref_total, extra, drv_total,
                                                            pair_violations, tolerated)
        return result

    @staticmethod
    def _verdict_reason(failing, matched, ref_total, extra, drv_total, pair_violations, tolerated) -> str:
        first_image, first = failing[0]
        reasons = [f"{len(failing)} image(s) differ from nnapi-reference beyond the CTS rule (first: image "
                   f"{first_image}, {first.matched} of {first.reference_detections} reference detection(s) "
                   f"matched, {first.extra} extra)"]
        reasons.append(f"{matched} of {ref_total} reference detection(s) matched, {extra} of {drv_total} "
                       "driver detection(s) extra")
        if pair_violations:
            reasons.append(f"{pair_violations} matched pair(s) with box IoU < {MATCHED_PAIR_IOU} or a score "
                           "outside the tolerance")
        if tolerated:
            reasons.append(f"tolerated: within {DETECTION_AGREEMENT:.0%} agreement (NMS ties)")
        return "; ".join(reasons)

    def result(self) -> dict:
        """The metrics as plain JSON values; a metric with nothing to measure is None."""
        return {"metric": "detection", "images": self.images, **self._ground_truth_result(),
                **self._reference_result(), "top1_accuracy": None, "top1_agreement": None}
