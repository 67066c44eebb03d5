"""Detection accuracy: mAP against hand-computed PASCAL VOC values and a brute-force recomputation, IoU at
its edges, agreement with the reference and its CTS verdict, and bad input."""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from support.op_runner import run_op

from mlts.benchmark.detection_metrics import (COCO_IOU_THRESHOLDS, DETECTION_AGREEMENT, DetectionAccuracy,
                                              average_precision, box_iou, detections_from_outputs,
                                              image_disagreement, mean_average_precision, truth_from_arrays)
from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

N = 6  # output rows of the crafted DETECTION_POSTPROCESSING results


def outputs(dets, capacity=N, dtype=np.float32):
    """The 4 DETECTION_POSTPROCESSING outputs of one image from [(score, (y1, x1, y2, x2), class)], padded."""
    scores = np.zeros((1, capacity), dtype)
    boxes = np.zeros((1, capacity, 4), dtype)
    classes = np.zeros((1, capacity), np.int32)
    for k, (s, b, c) in enumerate(dets):
        scores[0, k], boxes[0, k], classes[0, k] = s, b, c
    return [scores, boxes, classes, np.array([len(dets)], np.int32)]


def truth(boxes, classes):
    return np.array(boxes, np.float32).reshape(-1, 4), np.array(classes, np.int64)


def box(x, y=0.0, size=0.1):
    """A size x size box at (y, x)."""
    return (y, x, y + size, x + size)


def mean_ap(images, **kw):
    """mAP@0.5 and per-class AP of [(detections, (gt boxes, gt classes))]."""
    dets = [detections_from_outputs(outputs(d)) for d, _ in images]
    return mean_average_precision(dets, [truth_from_arrays(truth(*t)) for _, t in images], **kw)


# -- IoU -------------------------------------------------------------------------------------------
def test_iou_values_and_edges():
    unit = (0.0, 0.0, 1.0, 1.0)
    cases = [
        (unit, unit, 1.0),
        (unit, (0.0, 0.5, 1.0, 1.5), 0.5 / 1.5),          # half overlap: 0.5 / (1 + 1 - 0.5)
        (unit, (0.25, 0.25, 0.75, 0.75), 0.25),           # contained
        (unit, (0.0, 1.0, 1.0, 2.0), 0.0),                # touching edges
        (unit, (2.0, 2.0, 3.0, 3.0), 0.0),                # disjoint
        ((0.5, 0.5, 0.5, 0.5), (0.5, 0.5, 0.5, 0.5), 1.0),  # identical points: an exact hit
        ((0.5, 0.5, 0.5, 0.5), unit, 0.0),                # a point inside a box: zero area, no NaN
        ((0.5, 0.5, 0.5, 0.9), (0.5, 0.6, 0.5, 0.7), 0.0),  # two different zero-area boxes: zero union
        ((1.0, 1.0, 0.0, 0.0), unit, 0.0),                # inverted: zero area
        ((math.nan, 0.0, 1.0, 1.0), unit, 0.0),
        ((math.nan, 0.0, 1.0, 1.0), (math.nan, 0.0, 1.0, 1.0), 0.0),
        ((0.0, 0.0, math.inf, math.inf), unit, 0.0),
        ((0.0, 0.0, math.inf, math.inf), (0.0, 0.0, math.inf, math.inf), 0.0),
    ]
    for a, b, want in cases:
        got = box_iou([a], [b])
        assert got.shape == (1, 1) and got[0, 0] == pytest.approx(want), (a, b)
        assert box_iou([b], [a])[0, 0] == pytest.approx(want), (b, a)
    assert box_iou(np.zeros((0, 4)), [unit]).shape == (0, 1)
    assert box_iou([unit, box(5)], [unit, box(5), box(0.1)]).shape == (2, 3)


# -- mAP: hand-computed ----------------------------------------------------------------------------
def test_perfect_detections_score_one():
    images = [([(0.9, box(0.1), 0), (0.8, box(0.5), 1)], ([box(0.1), box(0.5)], [0, 1])),
              ([(0.7, box(0.3), 1)], ([box(0.3)], [1]))]
    m, per_class = mean_ap(images)
    assert m == 1.0 and per_class == {0: 1.0, 1: 1.0}
    assert mean_ap(images, thresholds=COCO_IOU_THRESHOLDS)[0] == 1.0


def test_false_positive_ranked_first():
    # ranks: FP (0.9), TP, TP; 2 ground truths. recall 0, .5, 1; precision 0, 1/2, 2/3.
    # Interpolated precision is 2/3 on (0, 1]: AP = 2/3.
    images = [([(0.9, box(0.7), 0), (0.8, box(0.1), 0), (0.7, box(0.4), 0)], ([box(0.1), box(0.4)], [0, 0]))]
    assert mean_ap(images)[0] == pytest.approx(2 / 3)


def test_missed_ground_truth():
    # one of two ground truths found, first: recall 0.5 at precision 1, then nothing: AP = 0.5
    images = [([(0.9, box(0.1), 0)], ([box(0.1), box(0.4)], [0, 0])), ([], ([box(0.2)], [1]))]
    m, per_class = mean_ap(images)
    assert per_class == {0: 0.5, 1: 0.0}  # a class never detected has AP 0
    assert m == pytest.approx(0.25)


def test_duplicate_is_false_positive():
    # A found twice before B: TP, FP, TP over 2 ground truths -> recall .5, .5, 1; precision 1, .5, 2/3.
    # AP = 0.5 * 1 + 0.5 * 2/3 = 5/6.
    images = [([(0.9, box(0.1), 0), (0.8, box(0.1), 0), (0.7, box(0.6), 0)], ([box(0.1), box(0.6)], [0, 0]))]
    assert mean_ap(images)[0] == pytest.approx(5 / 6)


def test_match_takes_highest_iou_unmatched_ground_truth():
    # ground truths A and B overlap (IoU 2/3); two detections exactly on A: the first takes A, the second
    # takes B (IoU 2/3 >= 0.5, unmatched) and is a true positive; a third is a duplicate (both taken).
    a, b = (0.0, 0.0, 1.0, 1.0), (0.0, 0.2, 1.0, 1.2)
    assert box_iou([a], [b])[0, 0] == pytest.approx(2 / 3)
    m, _ = mean_ap([([(0.9, a, 0), (0.8, a, 0)], ([a, b], [0, 0]))])
    assert m == 1.0
    m, _ = mean_ap([([(0.9, a, 0), (0.8, a, 0), (0.95, a, 0)], ([a, b], [0, 0]))])
    assert m == 1.0  # the two best take A and B; the duplicate ranks last
    m, _ = mean_ap([([(0.9, a, 0), (0.95, box(3.0), 0), (0.8, a, 0)], ([a, b], [0, 0]))])
    # FP, TP, TP: recall 0, .5, 1; precision 0, .5, 2/3 -> AP 2/3
    assert m == pytest.approx(2 / 3)


def test_two_classes_and_a_class_without_ground_truth():
    # class 0: perfect (AP 1); class 1: a false positive ranked first, then its only ground truth
    # (recall 0, 1; precision 0, 1/2 -> AP 1/2); class 2 is only ever detected: left out of the mean.
    images = [([(0.9, box(0.1), 0), (0.8, box(0.7), 1), (0.99, box(0.5), 2)], ([box(0.1)], [0])),
              ([(0.6, box(0.3), 1)], ([box(0.3)], [1]))]
    m, per_class = mean_ap(images)
    assert per_class == {0: 1.0, 1: 0.5}
    assert m == 0.75


def test_voc_all_point_interpolation_five_detections():
    # Class 0, 3 ground truths over 3 images; 5 detections ranked across images: TP, FP, FP, TP, TP.
    #   rank       1    2    3    4    5
    #   recall    1/3  1/3  1/3  2/3   1
    #   precision  1   1/2  1/3  1/2  3/5
    # All-point interpolation (best precision at recall >= r): 1 on (0, 1/3], 3/5 on (1/3, 2/3] and
    # (2/3, 1]: AP = (1 + 3/5 + 3/5) / 3 = 11/15 = 0.7333.
    # (Not interpolated: (1 + 1/2 + 3/5) / 3 = 0.7; VOC2007's 11 points: (4 * 1 + 7 * 3/5) / 11 = 0.7455.)
    images = [([(0.95, box(0.1), 0)], ([box(0.1)], [0])),                     # rank 1: TP
              ([(0.9, box(0.8), 0), (0.5, box(0.2), 0)], ([box(0.2)], [0])),   # ranks 2: FP, 5: TP
              ([(0.8, box(0.9), 0), (0.6, box(0.3), 0)], ([box(0.3)], [0]))]   # ranks 3: FP, 4: TP
    m, _ = mean_ap(images)
    assert m == pytest.approx(11 / 15)
    assert average_precision([1 / 3, 1 / 3, 1 / 3, 2 / 3, 1], [1, 1 / 2, 1 / 3, 1 / 2, 3 / 5]) == pytest.approx(11 / 15)


def test_map50_95_averages_coco_thresholds():
    # one detection at IoU 0.75 with its ground truth: a hit at 0.50 ... 0.75 (6 of 10 thresholds)
    unit, three_quarters = (0.0, 0.0, 1.0, 1.0), (0.0, 0.0, 0.75, 1.0)
    assert box_iou([unit], [three_quarters])[0, 0] == 0.75
    acc = DetectionAccuracy()
    acc.add(outputs([(0.9, three_quarters, 0)]), truth=truth([unit], [0]))
    r = acc.result()
    assert r["map50"] == 1.0 and r["map50_95"] == pytest.approx(0.6)
    assert COCO_IOU_THRESHOLDS == (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


# -- mAP: an independent brute-force recomputation -------------------------------------------------
def brute_force_map(images, iou_threshold):
    """Per class: rank with sorted(), match by scalar IoU loops, AP summed over recall steps."""
    def iou(a, b):
        h = min(a[2], b[2]) - max(a[0], b[0])
        w = min(a[3], b[3]) - max(a[1], b[1])
        inter = h * w if h > 0 and w > 0 else 0.0
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union

    classes = sorted({c for _, (_, gt_classes) in images for c in gt_classes})
    aps = []
    for cls in classes:
        positives = sum(c == cls for _, (_, gtc) in images for c in gtc)
        ranked = sorted(((s, i, b) for i, (dets, _) in enumerate(images) for s, b, c in dets if c == cls),
                        key=lambda t: -t[0])
        used = set()
        curve = []  # (recall, precision) after each detection
        tp = 0
        for k, (_, i, b) in enumerate(ranked, 1):
            gt_boxes, gt_classes = images[i][1]
            best, best_j = -1.0, None
            for j, (g, c) in enumerate(zip(gt_boxes, gt_classes)):
                if c == cls and (i, j) not in used and iou(b, g) >= iou_threshold and iou(b, g) > best:
                    best, best_j = iou(b, g), j
            if best_j is not None:
                used.add((i, best_j))
                tp += 1
            curve.append((tp / positives, tp / k))
        ap, previous = 0.0, 0.0
        for r, _ in curve:
            if r > previous:
                ap += (r - previous) * max(p for r2, p in curve if r2 >= r)
                previous = r
        aps.append(ap)
    return sum(aps) / len(aps)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_map_matches_brute_force(seed):
    rng = random.Random(seed)

    def rand_box():
        y, x, s = rng.uniform(0, 0.7), rng.uniform(0, 0.7), rng.uniform(0.1, 0.3)
        return (y, x, y + s, x + s)

    scores = rng.sample(range(1, 10_000), 200)  # distinct: ranking does not depend on tie order
    images = []
    for _ in range(15):
        gt = [(rand_box(), rng.randrange(3)) for _ in range(rng.randrange(0, 4))]
        dets = []
        for g, c in gt:  # jittered copies (some duplicates), some with the wrong class
            for _ in range(rng.randrange(0, 3)):
                jitter = [v + rng.uniform(-0.04, 0.04) for v in g]
                dets.append((scores.pop() / 10_000, tuple(jitter), c if rng.random() < 0.8 else rng.randrange(3)))
        dets += [(scores.pop() / 10_000, rand_box(), rng.randrange(3)) for _ in range(rng.randrange(0, 3))]
        dets = sorted(dets, key=lambda d: -d[0])[:N]
        dets = [(np.float32(s), tuple(np.float32(v) for v in b), c) for s, b, c in dets]
        gt = [(tuple(np.float32(v) for v in g), c) for g, c in gt]
        images.append((dets, ([g for g, _ in gt], [c for _, c in gt])))
    acc = DetectionAccuracy()
    for dets, (gt_boxes, gt_classes) in images:
        acc.add(outputs(dets), truth=truth(gt_boxes, gt_classes))
    r = acc.result()
    assert r["map50"] == pytest.approx(brute_force_map(images, 0.5), abs=1e-12)
    coco = [brute_force_map(images, t) for t in (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)]
    assert r["map50_95"] == pytest.approx(sum(coco) / 10, abs=1e-12)
    assert 0 < r["map50_95"] < r["map50"] < 1


# -- agreement with the reference and the verdict ---------------------------------------------------
REF = [(0.9, box(0.1), 0), (0.8, box(0.5), 1), (0.7, box(0.3, 0.4), 0)]


def agreement(driver_images, reference_images, **kw):
    acc = DetectionAccuracy(**kw)
    for d, r in zip(driver_images, reference_images):
        acc.add(outputs(d), expected=outputs(r))
    result = acc.result()
    json.dumps(result, allow_nan=False)
    return result


def test_identical_detections_pass():
    r = agreement([REF], [REF])
    assert r["detection_agreement"] == 1.0 and r["mean_iou"] == 1.0
    assert r["max_score_diff"] == 0.0 and r["max_box_diff"] == 0.0
    assert r["cts_pass"] is True and r["cts_violations"] == 0 and r["strict_images"] == 1
    assert r["count_mismatches"] == 0 and r["extra_detections"] == 0
    assert r["cts_tolerance"]["kind"] == "float32" and "NMS" in r["cts_tolerance"]["rule"]
    assert "verdict_reason" not in r
    assert r["top1_accuracy"] is None and r["top1_agreement"] is None and r["metric"] == "detection"


def test_reordered_equal_scores_pass():
    ref = [(0.8, box(0.1), 0), (0.8, box(0.5), 1)]
    r = agreement([ref[::-1]], [ref])
    assert r["strict_images"] == 0  # element-wise (CTS harness) comparison fails...
    assert r["cts_pass"] is True and r["cts_violations"] == 0  # ...but the detections are the same
    assert r["detection_agreement"] == 1.0


def test_scores_within_tolerance_pass_and_beyond_fail():
    nudged = [(s + 5e-6, b, c) for s, b, c in REF]  # float32 atol is 1e-5
    r = agreement([nudged], [REF])
    assert r["strict_images"] == 1 and r["cts_pass"] is True
    off = [(s - 1e-3, b, c) for s, b, c in REF]  # same boxes and order, scores out of tolerance
    r = agreement([off], [REF])
    assert r["detection_agreement"] == 1.0 and r["cts_pass"] is False and r["cts_violations"] == 1
    assert r["max_score_diff"] == pytest.approx(1e-3, rel=1e-3)
    assert "3 matched pair(s)" in r["verdict_reason"]


def test_one_box_shifted_far_fails_naming_the_count():
    driver = [REF[0], REF[1], (0.7, box(0.8, 0.8), 0)]
    r = agreement([driver], [REF])
    assert r["detection_agreement"] == pytest.approx(2 / 3)
    assert r["cts_pass"] is False and r["cts_violations"] == 1 and r["extra_detections"] == 1
    assert r["max_box_diff"] == 0.0 and r["mean_iou"] == 1.0  # the two matched pairs are exact
    assert "1 image(s)" in r["verdict_reason"] and "2 of 3 reference detection(s) matched" in r["verdict_reason"]


def test_wrong_class_is_not_a_match_and_count_mismatch_is_counted():
    r = agreement([[REF[0], REF[1], (0.7, REF[2][1], 1)]], [REF])
    assert r["detection_agreement"] == pytest.approx(2 / 3) and r["cts_pass"] is False
    r = agreement([REF + [(0.1, box(0.9, 0.9), 1)]], [REF])
    assert r["count_mismatches"] == 1 and r["extra_detections"] == 1 and r["cts_pass"] is False


def test_matched_pair_below_box_iou_bound_fails():
    moved = (REF[2][1][0], REF[2][1][1] + 0.02, REF[2][1][2], REF[2][1][3] + 0.02)  # IoU 0.08 / 0.12 = 2/3
    r = agreement([[REF[0], REF[1], (0.7, moved, 0)]], [REF])
    assert r["detection_agreement"] == 1.0 and r["mean_iou"] < 1 and r["cts_pass"] is False
    half = [(0.9, (0.0, 0.0, 1.0, 1.0), 0)], [(0.9, (0.0, 0.0, 1.0, 0.5), 0)]  # IoU exactly 0.5: a match
    r = agreement([half[1]], [half[0]])
    assert r["detection_agreement"] == 1.0 and r["mean_iou"] == 0.5 and r["cts_pass"] is False


def test_one_image_rule_for_whole_models():
    """image_disagreement (the stress suite's check of a detector's outputs) is the verdict's per-image rule,
    under the whole-model float16 tolerance by default."""
    assert image_disagreement(outputs(REF), outputs(REF)) is None
    tie = [(0.8, box(0.1), 0), (0.8, box(0.5), 1)]
    assert image_disagreement(outputs(tie[::-1]), outputs(tie)) is None  # an NMS tie resolved the other way
    nudged = [(s + 2e-3, b, c) for s, b, c in REF]  # within 5 * 2^-10 (float16), beyond float32's 1e-5
    assert image_disagreement(outputs(nudged), outputs(REF)) is None
    why = image_disagreement(outputs([REF[0], REF[1], (0.7, box(0.8, 0.8), 0)]), outputs(REF))
    assert "2 of 3 matched" in why and "1 of 3 left over" in why
    why = image_disagreement(outputs([REF[0], REF[1], (0.7, REF[2][1], 1)]), outputs(REF))  # wrong class
    assert "2 of 3 matched" in why
    off = [(s - 0.05, b, c) for s, b, c in REF]
    assert "3 matched pairs with box IoU < 0.9 or a score outside" in image_disagreement(outputs(off), outputs(REF))
    assert "expected 4 outputs" in image_disagreement(outputs(REF)[:3], outputs(REF))  # malformed: a reason


def test_rare_nms_differences_tolerated_up_to_one_percent():
    one = [(0.9, box(0.1), 0)]
    images = 100
    r = agreement([one] * images + [[]], [one] * (images + 1))  # one detection of 101 missing
    assert r["detection_agreement"] == pytest.approx(100 / 101) and 100 / 101 >= DETECTION_AGREEMENT
    assert r["cts_violations"] == 1 and r["cts_pass"] is True and "tolerated" in r["verdict_reason"]
    r = agreement([one] * 50 + [[]], [one] * 51)  # 1 of 51: too many
    assert r["cts_pass"] is False


def test_pair_bounds_are_not_applied_to_images_within_the_cts_rule():
    # a 2e-5 box moved by 5e-6 (inside float32's atol of 1e-5) has IoU 0.6 with itself: the image still
    # passes element-wise, and must not block the NMS allowance another image needs
    tiny = [(0.9, (0.5, 0.5, 0.50002, 0.50002), 0)]
    moved = [(0.9, (0.5, 0.500005, 0.50002, 0.500025), 0)]
    one = [(0.9, box(0.1), 0)]
    r = agreement([moved] + [one] * 100 + [[]], [tiny] + [one] * 101)
    assert r["strict_images"] == 101 and r["mean_iou"] < 1
    assert r["cts_violations"] == 1 and r["cts_pass"] is True


def test_score_threshold_limits_what_the_reference_requires():
    ref = REF + [(0.05, box(0.9, 0.9), 1)]
    r = agreement([REF], [ref], score_threshold=0.5)
    assert r["detection_agreement"] == 1.0 and r["cts_pass"] is True and r["strict_images"] == 0
    assert r["cts_tolerance"]["score_threshold"] == 0.5
    r = agreement([REF], [ref])
    assert r["detection_agreement"] == 0.75 and r["cts_pass"] is False


def test_relaxed_and_float16_use_the_float16_rule():
    assert agreement([REF], [REF], relaxed=True)["cts_tolerance"]["kind"] == "float16"
    acc = DetectionAccuracy()
    acc.add(outputs(REF, dtype=np.float16), expected=outputs(REF, dtype=np.float16))
    assert acc.result()["cts_tolerance"]["kind"] == "float16"


def test_nan_driver_outputs_fail_without_nan_in_the_result():
    driver = [(math.nan, REF[0][1], 0), REF[1], (0.7, (math.nan, 0.4, 0.4, 0.5), 0)]
    r = agreement([driver], [REF])
    assert r["cts_pass"] is False and r["detection_agreement"] == pytest.approx(2 / 3)


def test_no_reference_and_no_truth_give_none():
    acc = DetectionAccuracy(class_names=["circle", "square"])
    # class 0: 0.9 misses, 0.7 finds one of 2 objects: recall 0, 1/2; precision 0, 1/2 -> AP 1/4
    acc.add(outputs(REF), truth=truth([box(0.3, 0.4), box(0.5), box(0.7)], [0, 1, 0]))
    r = acc.result()
    assert r["images"] == 1 and r["reference_samples"] == 0
    assert r["cts_pass"] is None and r["detection_agreement"] is None and r["cts_tolerance"] is None
    assert r["per_class_ap"] == {"circle": 0.25, "square": 1.0} and r["map50"] == 0.625
    json.dumps(r, allow_nan=False)
    empty = DetectionAccuracy().result()
    assert empty["map50"] is None and empty["per_class_ap"] == {} and empty["images"] == 0


def test_real_detection_postprocessing_outputs():
    """AOSP's vector 2 (specs/V1_2/detection_postprocess.mod.py, fast NMS) run on nnapi-reference, scored
    against its own ground truth and itself."""
    scores = np.array([[0, .9, .8], [0, .75, .72], [0, .6, .5], [0, .93, .95], [0, .5, .4], [0, .3, .2]],
                      np.float32)[None]
    deltas = np.array([[0, 0, 0, 0], [0, 1, 0, 0], [0, -1, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]],
                      np.float32)[None]
    anchors = np.array([[.5, .5, 1, 1], [.5, .5, 1, 1], [.5, .5, 1, 1], [.5, 10.5, 1, 1], [.5, 10.5, 1, 1],
                        [.5, 100.5, 1, 1]], np.float32)
    f32, i32 = OperandType.scalar(OperandCode.FLOAT32), OperandType.scalar(OperandCode.INT32)
    flag = OperandType.scalar(OperandCode.BOOL)
    inputs = [(OperandType.tensor(OperandCode.TENSOR_FLOAT32, a.shape), a) for a in (scores, deltas, anchors)]
    inputs += [(f32, 10.0), (f32, 10.0), (f32, 5.0), (f32, 5.0), (flag, False), (i32, 3), (i32, 1), (i32, 1),
               (f32, 0.0), (f32, 0.5), (flag, False)]
    outs = [OperandType.tensor(OperandCode.TENSOR_FLOAT32, (1, 3)),
            OperandType.tensor(OperandCode.TENSOR_FLOAT32, (1, 3, 4)),
            OperandType.tensor(OperandCode.TENSOR_INT32, (1, 3)), OperandType.tensor(OperandCode.TENSOR_INT32, (1,))]
    got = run_op(OperationCode.DETECTION_POSTPROCESSING, inputs, outs)
    assert got[3].tolist() == [3] and got[2].tolist() == [[1, 0, 0]]
    acc = DetectionAccuracy()
    # truth: the class-1 object at x 10..11 and the class-0 one at x 0..1, a missed class-0 object far away
    acc.add(got, expected=got, truth=truth([(0, 10, 1, 11), (0, 0, 1, 1), (0, 50, 1, 51)], [1, 0, 0]))
    r = acc.result()
    assert r["cts_pass"] is True and r["strict_images"] == 1
    # class 0: detections 0.9 (TP, x 0..1) then 0.3 (FP, x 100..101) over 2 objects: AP 0.5; class 1: AP 1
    assert r["per_class_ap"] == {"0": 0.5, "1": 1.0} and r["map50"] == 0.75


# -- bad input --------------------------------------------------------------------------------------
def bad(fn, *words):
    with pytest.raises(MltsError) as e:
        fn()
    assert e.value.code == ResultCode.BAD_DATA
    for w in words:
        assert w in str(e.value), str(e.value)


def test_bad_outputs_are_bad_data():
    good = outputs(REF)
    acc = DetectionAccuracy()
    bad(lambda: acc.add(good[:3]), "expected 4 outputs", "got 3")
    bad(lambda: acc.add(good[0]), "expected 4 outputs")
    bad(lambda: acc.add([np.zeros((2, N), np.float32)] + good[1:]), "scores", "[1, N]")
    bad(lambda: acc.add([good[0], np.zeros((1, N, 3), np.float32)] + good[2:]), "boxes", "[1, 6, 4]")
    bad(lambda: acc.add(good[:2] + [np.zeros((1, N - 1), np.int32), good[3]]), "classes", "[1, 6]")
    bad(lambda: acc.add(good[:2] + [good[2].astype(np.float32), good[3]]), "classes", "integer")
    bad(lambda: acc.add(good[:3] + [np.array([N + 1], np.int32)]), "num_detections 7", "0..6")
    bad(lambda: acc.add(good[:3] + [np.array([-1], np.int32)]), "num_detections -1")
    bad(lambda: acc.add(good[:3] + [np.array([1, 2], np.int32)]), "num_detections", "shape [1]")
    neg = good[2].copy()
    neg[0, 0] = -1
    bad(lambda: acc.add(good[:2] + [neg, good[3]]), "negative class")
    bad(lambda: acc.add(good, expected=outputs(REF, capacity=N + 1)), "6 rows", "7")
    bad(lambda: acc.add(good, expected=good[:2]), "reference output", "expected 4 outputs")
    assert acc.images == 0  # nothing half-added


def test_bad_truth_is_bad_data():
    acc = DetectionAccuracy(class_names=["circle"])
    good = outputs(REF)
    bad(lambda: acc.add(good, truth=(np.zeros((2, 4), np.float32),)), "ground truth")
    bad(lambda: acc.add(good, truth=(np.zeros((2, 4), np.float32), np.zeros(3, np.int64))), "[2, 4]", "[3]")
    bad(lambda: acc.add(good, truth=(np.zeros((1, 4), np.float32), np.array([0.5]))), "integers")
    bad(lambda: acc.add(good, truth=(np.full((1, 4), np.nan, np.float32), np.array([0]))), "finite")
    bad(lambda: acc.add(good, truth=truth([box(0.1)], [1])), "class 1 has no name")
    acc.add(good, truth=(np.zeros((0, 4), np.float32), np.zeros(0, np.int64)))  # an image without objects
    assert acc.result()["map50"] is None and acc.result()["truth_samples"] == 1
