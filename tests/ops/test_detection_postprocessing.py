"""DETECTION_POSTPROCESSING through the public API (run_op on nnapi-reference).

Expectations: a plain float64 transcription of TensorFlow Lite's SSD post-processing as NNAPI documents
it (decode center-size anchors, greedy NMS by descending score, regular = per class then overall best,
fast = best class per anchor then its top classes), hand-computed values, and AOSP's vectors of
runtime/test/specs/V1_2/detection_postprocess.mod.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from support.op_runner import Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import OperandCode, OperandType, OperationCode

F32, F16, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_INT32
OP = OperationCode.DETECTION_POSTPROCESSING
INT, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)

rng = np.random.default_rng(11)


def run(scores, deltas, anchors, *, regular, max_detections, classes_per_detection=1, per_class=1,
        score_threshold=0.0, iou_threshold=0.5, background_in_label=False, scales=(10.0, 10.0, 5.0, 5.0),
        code=F32):
    batches = scores.shape[0]
    out_count = max_detections * (1 if regular else classes_per_detection)
    s = OperandType.scalar(OperandCode.FLOAT16 if code == F16 else OperandCode.FLOAT32)
    inputs = [(OperandType.tensor(code, a.shape), a) for a in (scores, deltas, anchors)]
    inputs += [(s, v) for v in scales] + [(BOOL, regular), (INT, max_detections), (INT, classes_per_detection),
                                          (INT, per_class), (s, score_threshold), (s, iou_threshold),
                                          (BOOL, background_in_label)]
    outs = [OperandType.tensor(code, (batches, out_count)), OperandType.tensor(code, (batches, out_count, 4)),
            OperandType.tensor(I32, (batches, out_count)), OperandType.tensor(I32, (batches,))]
    return run_op(OP, inputs, outs)


# -- the independent transcription ----------------------------------------------------------------
def iou(a, b):
    inter = max(min(a[2], b[2]) - max(a[0], b[0]), 0) * max(min(a[3], b[3]) - max(a[1], b[1]), 0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def greedy(candidates, boxes, iou_threshold, limit):
    """[(score, anchor)] kept by greedy NMS, best first."""
    kept = []
    for score, a in sorted(candidates, key=lambda t: -t[0]):
        if len(kept) == limit:
            break
        if all(iou(boxes[a], boxes[k]) < iou_threshold for _, k in kept):
            kept.append((score, a))
    return kept


def reference(scores, deltas, anchors, *, regular, max_detections, classes_per_detection=1, per_class=1,
              score_threshold=0.0, iou_threshold=0.5, background_in_label=False, scales=(10.0, 10.0, 5.0, 5.0)):
    """Per batch: the detections [(score, box (y1, x1, y2, x2), label)], best first."""
    result = []
    for s, d in zip(scores.astype(np.float64), deltas.astype(np.float64)):
        boxes = []
        for (ya, xa, ha, wa), (dy, dx, dh, dw) in zip(anchors.astype(np.float64), d[:, :4]):
            yc, xc = ya + ha * dy / scales[0], xa + wa * dx / scales[1]
            h, w = ha * math.exp(dh / scales[2]), wa * math.exp(dw / scales[3])
            boxes.append((yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2))
        offset = 0 if background_in_label else 1
        found = []
        if regular:
            for c in range(1, s.shape[1]):
                cands = [(s[a, c], a) for a in range(len(boxes)) if s[a, c] > score_threshold]
                found += [(score, a, c) for score, a in greedy(cands, boxes, iou_threshold, per_class)]
            found = sorted(found, key=lambda t: -t[0])[:max_detections]
        else:
            best = s[:, 1:].max(axis=1)
            cands = [(best[a], a) for a in range(len(boxes)) if best[a] > score_threshold]
            for _, a in greedy(cands, boxes, iou_threshold, max_detections):
                classes = sorted(range(1, s.shape[1]), key=lambda c: -s[a, c])[:classes_per_detection]
                found += [(s[a, c], a, c) for c in classes]
        result.append([(score, boxes[a], c - offset) for score, a, c in found])
    return result


def check_against(outputs, expected, code=F32):
    out_scores, out_boxes, out_classes, out_counts = outputs
    for b, detections in enumerate(expected):
        n = len(detections)
        assert out_counts[b] == n
        if n:
            assert_cts_close(out_scores[b, :n], np.array([t[0] for t in detections]), code)
            assert_cts_close(out_boxes[b, :n], np.array([t[1] for t in detections]), code)
            np.testing.assert_array_equal(out_classes[b, :n], [t[2] for t in detections])
        assert not out_scores[b, n:].any() and not out_boxes[b, n:].any() and not out_classes[b, n:].any()


# -- AOSP vectors ---------------------------------------------------------------------------------
SCORES = np.array([[0, .9, .8], [0, .75, .72], [0, .6, .5], [0, .93, .95], [0, .5, .4], [0, .3, .2]],
                  np.float32)[None]
DELTAS = np.array([[0, 0, 0, 0], [0, 1, 0, 0], [0, -1, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]],
                  np.float32)[None]
ANCHORS = np.array([[0.5, 0.5, 1, 1]] * 3 + [[0.5, 10.5, 1, 1]] * 2 + [[0.5, 100.5, 1, 1]], np.float32)


@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_aosp_regular_nms(code):
    """V1_2/detection_postprocess.mod.py TEST 1."""
    dtype = OperandType.tensor(code, ()).dtype
    scores, boxes, classes, counts = run(SCORES.astype(dtype), DELTAS.astype(dtype), ANCHORS.astype(dtype),
                                         regular=True, max_detections=3, code=code)
    assert_cts_close(scores, [[0.95, 0.93, 0.0]], code)
    assert_cts_close(boxes, [[[0, 10, 1, 11], [0, 10, 1, 11], [0, 0, 0, 0]]], code)
    np.testing.assert_array_equal(classes, [[1, 0, 0]])
    np.testing.assert_array_equal(counts, [2])


@pytest.mark.parametrize("background_in_label, labels", [(False, [1, 0, 0]), (True, [2, 1, 1])])
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_aosp_fast_nms(code, background_in_label, labels):
    """V1_2/detection_postprocess.mod.py TEST 3 and 4: box encodings of length 7 (the extra values unused)."""
    dtype = OperandType.tensor(code, ()).dtype
    deltas = np.concatenate([DELTAS, np.tile([1.0, 2.0, 3.0], (1, 6, 1))], axis=2).astype(dtype)
    scores, boxes, classes, counts = run(SCORES.astype(dtype), deltas, ANCHORS.astype(dtype), regular=False,
                                         max_detections=3, background_in_label=background_in_label, code=code)
    assert_cts_close(scores, [[0.95, 0.9, 0.3]], code)
    assert_cts_close(boxes, [[[0, 10, 1, 11], [0, 0, 1, 1], [0, 100, 1, 101]]], code)
    np.testing.assert_array_equal(classes, [labels])
    np.testing.assert_array_equal(counts, [3])


def test_hand_computed_fast_nms_with_several_classes_per_detection():
    # Two far-apart anchors, three classes and the background: each emits min(3, 5) = 3 classes, best first;
    # the output holds max detections x max classes per detection = 2 x 5 rows, the last 4 zero.
    scores = np.array([[[0.9, 0.2, 0.7, 0.5], [0.1, 0.6, 0.3, 0.8]]], np.float32)
    anchors = np.array([[0, 0, 2, 2], [10, 10, 2, 4]], np.float32)
    deltas = np.zeros((1, 2, 4), np.float32)
    out_scores, boxes, classes, counts = run(scores, deltas, anchors, regular=False, max_detections=2,
                                             classes_per_detection=5, scales=(1.0, 1.0, 1.0, 1.0))
    np.testing.assert_array_equal(counts, [6])
    # anchor 1 (best 0.8) first, then anchor 0 (best 0.7); labels are class - 1
    np.testing.assert_allclose(out_scores[0], [0.8, 0.6, 0.3, 0.7, 0.5, 0.2, 0, 0, 0, 0])
    np.testing.assert_array_equal(classes[0], [2, 0, 1, 1, 2, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(boxes[0, :6], [[9, 8, 11, 12]] * 3 + [[-1, -1, 1, 1]] * 3)


# -- random data against the transcription ---------------------------------------------------------
def random_problem(batches=2, anchors=24, classes=4, length=4):
    centers = rng.uniform(0, 6, (anchors, 2))
    sizes = rng.uniform(0.5, 3, (anchors, 2))
    return (rng.uniform(0, 1, (batches, anchors, classes)).astype(np.float32),
            rng.normal(0, 1, (batches, anchors, length)).astype(np.float32),
            np.concatenate([centers, sizes], axis=1).astype(np.float32))


@pytest.mark.parametrize("background_in_label", [False, True])
@pytest.mark.parametrize("params", [dict(regular=True, max_detections=6, per_class=2, score_threshold=0.3),
                                    dict(regular=True, max_detections=20, per_class=5, iou_threshold=0.2),
                                    dict(regular=False, max_detections=4, classes_per_detection=2,
                                         score_threshold=0.5),
                                    dict(regular=False, max_detections=10, classes_per_detection=3,
                                         iou_threshold=0.3)], ids=["regular", "regular-many", "fast", "fast-all"])
def test_against_transcription(params, background_in_label):
    scores, deltas, anchors = random_problem(length=6)
    outputs = run(scores, deltas, anchors, background_in_label=background_in_label, **params)
    check_against(outputs, reference(scores, deltas, anchors, background_in_label=background_in_label, **params))


def test_float16_against_transcription():
    scores, deltas, anchors = (a.astype(np.float16) for a in random_problem(batches=1))
    params = dict(regular=True, max_detections=5, per_class=3, score_threshold=0.25)
    outputs = run(scores, deltas, anchors, code=F16, **params)
    assert outputs[0].dtype == outputs[1].dtype == np.float16
    check_against(outputs, reference(scores, deltas, anchors, **params), F16)


# -- shapes and validation --------------------------------------------------------------------------
def test_build_time_shape_inference():
    def build(regular, classes_per_detection):
        inputs = [(OperandType.tensor(F32, dims), Input()) for dims in ((3, 10, 5), (3, 10, 4), (10, 4))]
        f = OperandType.scalar(OperandCode.FLOAT32)
        inputs += [(f, 1.0)] * 4 + [(BOOL, regular), (INT, 7), (INT, classes_per_detection), (INT, 2), (f, 0.1),
                                    (f, 0.5), (BOOL, False)]
        outs = [OperandType.tensor(F32, (0, 0)), OperandType.tensor(F32, (0, 0, 0)), OperandType.tensor(I32, (0, 0)),
                OperandType.tensor(I32, (0,))]
        return [t.dimensions for t in inferred_output_types(OP, inputs, outs)]

    assert build(True, 3) == [(3, 7), (3, 7, 4), (3, 7), (3,)]
    assert build(False, 3) == [(3, 21), (3, 21, 4), (3, 21), (3,)]


def valid_inputs():
    scores, deltas, anchors = random_problem(batches=1, anchors=3, classes=3)
    f = OperandType.scalar(OperandCode.FLOAT32)
    inputs = [(OperandType.tensor(F32, a.shape), a) for a in (scores, deltas, anchors)]
    inputs += [(f, 1.0)] * 4 + [(BOOL, True), (INT, 2), (INT, 1), (INT, 1), (f, 0.1), (f, 0.5), (BOOL, False)]
    outs = [OperandType.tensor(F32, (1, 2)), OperandType.tensor(F32, (1, 2, 4)), OperandType.tensor(I32, (1, 2)),
            OperandType.tensor(I32, (1,))]
    return inputs, outs


def replaced(inputs, i, value, t=None):
    bad = list(inputs)
    bad[i] = (t or bad[i][0], value)
    return bad


def test_rejects_bad_parameters():
    inputs, outs = valid_inputs()
    for i, value, words in ((3, 0.0, ("y scale",)), (6, -1.0, ("width scale",)), (11, -0.1, ("score threshold",)),
                            (12, -0.5, ("IoU threshold",)), (8, 0, ("max detections",)),
                            (10, 0, ("max detections per class",))):
        expect_error(OP, replaced(inputs, i, value), outs, f"input {i} (", *words)
    fast = replaced(inputs, 7, False)
    expect_error(OP, replaced(fast, 9, 0), outs, "input 9 (", "max classes per detection")


def test_rejects_bad_operands():
    inputs, outs = valid_inputs()
    one_class = np.zeros((1, 3, 1), np.float32)
    expect_error(OP, replaced(inputs, 0, one_class, OperandType.tensor(F32, (1, 3, 1))), outs, "input 0 (",
                 "at least one class")
    short = np.zeros((1, 3, 3), np.float32)
    expect_error(OP, replaced(inputs, 1, short, OperandType.tensor(F32, (1, 3, 3))), outs, "input 1 (", ">= 4")
    expect_error(OP, replaced(inputs, 2, np.zeros((4, 4)), OperandType.tensor(F32, (4, 4))), outs, "input 2 (",
                 "[3, 4]")
    expect_error(OP, replaced(inputs, 2, np.zeros((3, 4)), OperandType.tensor(F16, (3, 4))), outs, "input 2 (",
                 "TENSOR_FLOAT16 not allowed")
    expect_error(OP, replaced(inputs, 11, 0.1, OperandType.scalar(OperandCode.FLOAT16)), outs, "input 11 (")
    bad_outs = list(outs)
    bad_outs[2] = OperandType.tensor(F32, (1, 2))
    expect_error(OP, inputs, bad_outs, "output 2 (", "expected TENSOR_INT32")
