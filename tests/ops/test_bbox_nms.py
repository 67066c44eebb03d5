"""AXIS_ALIGNED_BBOX_TRANSFORM and BOX_WITH_NMS_LIMIT through the public API (run_op on nnapi-reference).

Expectations: a float64 numpy transcription of NNAPI's documented box transform (center moved by
(dx * w, dy * h), size scaled by (exp(dw), exp(dh)), clipped to [0, width] x [0, height]); for
BOX_WITH_NMS_LIMIT, onnx.reference NonMaxSuppression for the hard kernel and a plain-Python loop of the
documented soft-NMS rules for all three kernels, on tie-free data; examples of AOSP's
V1_2/axis_aligned_bbox_transform.mod.py and V1_2/box_with_nms_limit_hard.mod.py; and the private NMS
helper's tie and order rules against a literal transcription of NNAPI's in-place swap loop.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support.direct import run_op_direct
from support.op_runner import Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import OperandCode, OperandType, OperationCode, ResultCode
from mlts.runtime.ops._boxes import greedy_nms, soft_suppression

F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
Q16A, I32 = OperandCode.TENSOR_QUANT16_ASYMM, OperandCode.TENSOR_INT32
INT = OperandType.scalar(OperandCode.INT32)
SCALAR = {F32: OperandType.scalar(OperandCode.FLOAT32), F16: OperandType.scalar(OperandCode.FLOAT16),
          U8: OperandType.scalar(OperandCode.FLOAT32), S8: OperandType.scalar(OperandCode.FLOAT32)}
BBOX, NMS = OperationCode.AXIS_ALIGNED_BBOX_TRANSFORM, OperationCode.BOX_WITH_NMS_LIMIT
QUANT = {U8: (0.05, 128), S8: (0.05, 0), Q16A: (0.125, 0)}
SCORE_QUANT = {U8: (1 / 256, 0), S8: (1 / 256, -128)}
RANGE = {U8: (0, 255), S8: (-128, 127), Q16A: (0, 65535)}

rng = np.random.default_rng(44)


def stored(values, code, quant=None):
    """(operand type, stored values, the real values they hold in float64) of `values` as `code`."""
    values = np.asarray(values, dtype=np.float64)
    if code in (F32, F16):
        t = OperandType.tensor(code, values.shape)
        v = values.astype(t.dtype)
        return t, v, v.astype(np.float64)
    scale, zp = quant or QUANT[code]
    t = OperandType.tensor(code, values.shape, scale, zp)
    q = np.clip(np.round(values / scale) + zp, *RANGE[code]).astype(t.dtype)
    return t, q, (q.astype(np.float64) - zp) * scale


# -- AXIS_ALIGNED_BBOX_TRANSFORM ---------------------------------------------------------------------
def expected_transform(rois, deltas, batches, info):
    """NNAPI's documented formula in float64: [num_rois, num_classes * 4]."""
    d = deltas.reshape(len(rois), -1, 4)
    x1, y1, x2, y2 = (rois[:, k:k + 1] for k in range(4))
    w, h = x2 - x1, y2 - y1
    cx, cy = x1 + w / 2, y1 + h / 2
    ncx, ncy = cx + d[..., 0] * w, cy + d[..., 1] * h
    nw, nh = w * np.exp(d[..., 2]), h * np.exp(d[..., 3])
    height, width = info[batches, 0][:, None], info[batches, 1][:, None]
    out = np.stack([np.clip(ncx - nw / 2, 0, width), np.clip(ncy - nh / 2, 0, height),
                    np.clip(ncx + nw / 2, 0, width), np.clip(ncy + nh / 2, 0, height)], axis=-1)
    return out.reshape(len(rois), -1)


def random_rois(n, extent=40.0):
    x1, y1 = rng.uniform(0, extent, n), rng.uniform(0, extent, n)
    return np.stack([x1, y1, x1 + rng.uniform(0, 30, n), y1 + rng.uniform(0, 30, n)], axis=1)


def run_transform(roi_code, rois, deltas, batches, info, delta_code=None):
    """Run the operation on `rois`/`deltas`/`info` stored as the given types; (output, expected)."""
    roi_t, roi_v, roi_real = stored(rois, roi_code)
    delta_t, delta_v, delta_real = stored(deltas, delta_code or roi_code)
    info_t, info_v, info_real = stored(info, roi_code)
    batches = np.asarray(batches, np.int32)
    out_t = roi_t.with_dimensions(deltas.shape)
    (y,) = run_op(BBOX, [(roi_t, roi_v), (delta_t, delta_v), (OperandType.tensor(I32, batches.shape), batches),
                         (info_t, info_v)], [out_t])
    expected = expected_transform(roi_real, delta_real, batches, info_real)
    if roi_code == Q16A:
        expected = np.clip(np.round(expected / 0.125), 0, 65535)
    return y, expected


@pytest.mark.parametrize("roi_code, delta_code", [(F32, F32), (F16, F16), (Q16A, U8), (Q16A, S8)],
                         ids=["f32", "f16", "q16_u8", "q16_s8"])
@pytest.mark.parametrize("num_classes", [1, 3])
def test_transform_against_formula(roi_code, delta_code, num_classes):
    n = 7
    rois = random_rois(n)
    deltas = rng.uniform(-1.5, 1.5, (n, 4 * num_classes))
    batches = np.array([0, 0, 1, 1, 1, 2, 0])
    info = np.array([[48.0, 64.0], [32.0, 40.0], [64.0, 24.0]])
    y, expected = run_transform(roi_code, rois, deltas, batches, info, delta_code)
    assert y.dtype == OperandType.tensor(roi_code, ()).dtype and y.shape == (n, 4 * num_classes)
    assert_cts_close(y, expected, roi_code)


def test_transform_aosp_example():
    # V1_2/axis_aligned_bbox_transform.mod.py, TEST 1
    rois = np.array([[100, 150, 400, 430], [120, 60, 122, 61], [10, 20, 20, 50], [50, 120, 150, 250],
                     [400, 100, 1000, 2000]], np.float32)
    deltas = np.array([[0.2, 0.2, 0.1, 0.1, 0.3, -0.1, -0.2, 0.1], [-0.5, 0.2, 0.2, -0.5, -0.1, -0.1, 2.5, 3],
                       [-0.5, -0.5, 1, 1, 0.5, 0.5, -1.5, -1.2], [0.2, 0.2, -3, -4, 1, -0.5, 0.3, 0.5],
                       [0.3, -0.2, 1.1, -0.8, 0.1, 0.05, -0.5, -0.5]], np.float32)
    info = np.array([[512, 512], [128, 256], [256, 256], [1024, 512]], np.float32)
    expected = [[144.224350, 191.276062, 475.775635, 500.723938, 217.190384, 107.276062, 462.809631, 416.723938],
                [118.778594, 60.396736, 121.221406, 61.003266, 108.617508, 50.357232, 132.982498, 70.442772],
                [0, 0, 23.59140714, 60.77422571, 18.88435, 45.48208571, 21.11565, 54.51791429],
                [117.51063714, 209.80948286, 122.48935143, 212.19050857, 132.50705143, 12.83312286,
                 255.99999571, 227.16685714],
                [0, 243.1374815, 512, 1024, 512, 568.7958375, 512, 1024]]
    y, _ = run_transform(F32, rois, deltas, [0, 1, 2, 2, 3], info)
    assert_cts_close(y, expected, F32)


def test_transform_zero_rois():
    f = OperandType.tensor
    (y,) = run_op_direct(BBOX, [(f(F32, (0, 4)), np.zeros((0, 4))), (f(F32, (0, 8)), np.zeros((0, 8))),
                                (f(I32, (0,)), np.zeros(0)), (f(F32, (1, 2)), [[8, 8]])], [f(F32, (0, 8))])
    assert y.shape == (0, 8) and y.dtype == np.float32


def transform_inputs(roi_t=None, delta_t=None, info_t=None, n=2, classes=2, batches=(0, 1)):
    roi_t = roi_t or OperandType.tensor(F32, (n, 4))
    if delta_t is None:
        delta_t = OperandType.tensor(U8, (n, 4 * classes), 0.05, 128) if roi_t.code == Q16A else \
            roi_t.with_dimensions((n, 4 * classes))
    info_t = info_t or roi_t.with_dimensions((2, 2))
    rois = np.tile([1, 1, 5, 6], (n, 1)) / (roi_t.scale or 1)
    return [(roi_t, rois), (delta_t, np.full(delta_t.dimensions, 0 if delta_t.code in (F32, F16) else 128)),
            (OperandType.tensor(I32, (n,)), np.array(batches, np.int32)),
            (info_t, np.full(info_t.dimensions, 10 / (info_t.scale or 1)))]


def test_transform_rejects_bad_types_and_quantization():
    out = [OperandType.tensor(F32, (2, 8))]
    expect_error(BBOX, transform_inputs(delta_t=OperandType.tensor(F16, (2, 8))), out, "input 1", "TENSOR_FLOAT16")
    expect_error(BBOX, transform_inputs(), [OperandType.tensor(F16, (2, 8))], "output 0")
    q_out = [OperandType.tensor(Q16A, (2, 8), 0.125, 0)]
    expect_error(BBOX, transform_inputs(OperandType.tensor(Q16A, (2, 4), 0.25, 0)), q_out, "input 0", "scale 0.125")
    expect_error(BBOX, transform_inputs(OperandType.tensor(Q16A, (2, 4), 0.125, 0),
                                        info_t=OperandType.tensor(Q16A, (2, 2), 0.125, 3)), q_out, "input 3")
    expect_error(BBOX, transform_inputs(OperandType.tensor(Q16A, (2, 4), 0.125, 0)),
                 [OperandType.tensor(Q16A, (2, 8), 0.125, 1)], "output 0", "zeroPoint 0")
    expect_error(BBOX, transform_inputs(OperandType.tensor(Q16A, (2, 4), 0.125, 0),
                                        delta_t=OperandType.tensor(Q16A, (2, 8), 0.125, 0)), q_out, "input 1")


def test_transform_rejects_bad_shapes():
    out = [OperandType.tensor(F32, (0, 0))]
    expect_error(BBOX, transform_inputs(delta_t=OperandType.tensor(F32, (2, 6))), out, "input 1", "num_classes * 4")
    expect_error(BBOX, transform_inputs(delta_t=OperandType.tensor(F32, (3, 8))), out, "input 1", "3 rows")
    expect_error(BBOX, transform_inputs(info_t=OperandType.tensor(F32, (2, 3))), out, "input 3", "[batches, 2]")
    expect_error(BBOX, transform_inputs(roi_t=OperandType.tensor(F32, (2, 4, 1))), out, "input 0", "rank 3")


def test_transform_fails_on_bad_data():
    out = [OperandType.tensor(F32, (2, 8))]
    expect_error(BBOX, transform_inputs(batches=(0, 2)), out, "input 2", "batch index 2",
                 result=ResultCode.OP_FAILED)
    inputs = transform_inputs()
    inputs[0] = (inputs[0][0], np.array([[1, 1, 5, 6], [5, 1, 1, 6]], np.float32))
    expect_error(BBOX, inputs, out, "input 0", "roi 1", result=ResultCode.OP_FAILED)


def test_transform_shape_inference():
    inputs = [(t, Input()) for t, _ in transform_inputs(n=5, classes=3, batches=(0,) * 5)]
    (t,) = inferred_output_types(BBOX, inputs, [OperandType.tensor(F32, (0, 0))])
    assert t.dimensions == (5, 12)
    inputs[0] = (OperandType.tensor(F32, (0, 4)), Input())  # num_rois unknown: nothing inferred
    (t,) = inferred_output_types(BBOX, inputs, [OperandType.tensor(F32, (0, 12))])
    assert t.dimensions == (0, 12)


# -- BOX_WITH_NMS_LIMIT ----------------------------------------------------------------------------
def iou64(a, b):
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def kernel_factor(kernel, iou, iou_threshold, sigma):
    if kernel == 0:
        return 1.0 if iou < iou_threshold else 0.0
    if kernel == 1:
        return 1.0 if iou < iou_threshold else 1.0 - iou
    return float(np.exp(-iou * iou / sigma))


def expected_nms_limit(scores, boxes, batches, score_threshold, max_det, kernel, iou_threshold, sigma, nms_threshold):
    """The documented algorithm, plainly, on tie-free data: [(score, roi, class, batch)] in output order."""
    n, classes = scores.shape
    boxes = boxes.reshape(n, classes, 4)
    out, start = [], 0
    while start < n:
        stop = start
        while stop < n and batches[stop] == batches[start]:
            stop += 1
        picks = []
        for c in range(1, classes):
            pending = [[scores[r, c], r] for r in range(start, stop) if scores[r, c] > score_threshold]
            chosen = []
            while pending and (max_det < 0 or len(chosen) < max_det):
                best = max(pending)
                pending.remove(best)
                chosen.append(best)
                for p in pending:
                    p[0] *= kernel_factor(kernel, iou64(boxes[p[1], c], boxes[best[1], c]), iou_threshold, sigma)
                pending = [p for p in pending if p[0] >= nms_threshold]
            picks += [(s, r, c) for s, r in chosen]
        picks.sort(key=lambda p: -p[0])
        picks = picks if max_det < 0 else picks[:max_det]
        out += [(s, r, c, batches[start]) for s, r, c in sorted(picks, key=lambda p: (p[2], -p[0]))]
        start = stop
    return out


def random_boxes(n, classes):
    """Boxes crowded into a 12 x 12 square, on the 0.125 grid (exact in every type)."""
    x1, y1 = rng.uniform(0, 5, (n, classes)), rng.uniform(0, 5, (n, classes))
    boxes = np.stack([x1, y1, x1 + rng.uniform(3, 7, (n, classes)), y1 + rng.uniform(3, 7, (n, classes))], -1)
    return np.round(boxes * 8).reshape(n, classes * 4) / 8


def tie_free_scores(code, n, classes):
    if code in SCORE_QUANT:
        return (rng.choice(np.arange(8, 250), n * classes, replace=False) / 256).reshape(n, classes)
    return ((rng.permutation(n * classes) + 1) / (n * classes + 1)).reshape(n, classes)


def run_nms_limit(code, scores, boxes, batches, params, score_quant=None):
    """Run BOX_WITH_NMS_LIMIT with `params` (score threshold, max detections, kernel, IoU threshold,
    sigma, NMS score threshold); (outputs, real input scores, real input boxes)."""
    score_t, score_v, score_real = stored(scores, code, score_quant or SCORE_QUANT.get(code))
    box_t, box_v, box_real = stored(boxes, Q16A if code in SCORE_QUANT else code)
    batches = np.asarray(batches, np.int32)
    s = SCALAR[code]
    inputs = [(score_t, score_v), (box_t, box_v), (OperandType.tensor(I32, batches.shape), batches),
              (s, params[0]), (INT, params[1]), (INT, params[2]), (s, params[3]), (s, params[4]), (s, params[5])]
    outputs = [score_t.with_dimensions((0,)), box_t.with_dimensions((0, 4)), OperandType.tensor(I32, (0,)),
               OperandType.tensor(I32, (0,))]
    return run_op(NMS, inputs, outputs), score_real, box_real


def scalar_params(code, params):
    """The float parameters as the operation sees them (FLOAT16 scalars are rounded)."""
    cast = np.float16 if code == F16 else np.float32
    return [float(cast(p)) if k not in (1, 2) else p for k, p in enumerate(params)]


def check_against(code, outputs, expected, boxes_in, score_type):
    scores, boxes, classes, batches = outputs
    assert len(scores) == len(expected), (scores, expected)
    exp_scores = np.array([e[0] for e in expected])
    if code in SCORE_QUANT:
        exp_scores = np.round(exp_scores / score_type[0]) + score_type[1]
    assert_cts_close(scores, exp_scores.reshape(-1), code)
    n, width = boxes_in.shape
    per_class = boxes_in.reshape(n, width // 4, 4)
    np.testing.assert_array_equal(boxes, np.array([per_class[r, c] for _, r, c, _ in expected]).reshape(-1, 4))
    np.testing.assert_array_equal(classes, [e[2] for e in expected])
    np.testing.assert_array_equal(batches, [e[3] for e in expected])


@pytest.mark.parametrize("code", [F32, F16, U8, S8], ids=["f32", "f16", "u8", "s8"])
@pytest.mark.parametrize("kernel, max_det", [(0, -1), (0, 3), (1, -1), (1, 2), (2, -1), (2, 4), (2, 0)])
def test_nms_limit_against_documented_algorithm(code, kernel, max_det):
    n, classes = 12, 4
    scores = tie_free_scores(code, n, classes)
    boxes = random_boxes(n, classes)
    batches = [0, 0, 0, 0, 0, 1, 1, 1, 1, 3, 3, 3]
    params = scalar_params(code, [0.25, max_det, kernel, 0.35, 0.6, 0.3])
    outputs, score_real, box_real = run_nms_limit(code, scores, boxes, batches, params)
    stored_boxes = stored(boxes, Q16A if code in SCORE_QUANT else code)[1]
    expected = expected_nms_limit(score_real, box_real, batches, *params)
    check_against(code, outputs, expected, stored_boxes, SCORE_QUANT.get(code))


def onnx_nms(boxes, scores, iou_threshold, score_threshold):
    """onnx.reference NonMaxSuppression of one class: the selected box indexes, best first."""
    node = helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["out"])
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in "bs"] + \
             [helper.make_tensor_value_info("m", TensorProto.INT64, None)] + \
             [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in "it"]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("out", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"b": boxes[None].astype(np.float32), "s": scores[None, None].astype(np.float32),
             "m": np.array([len(scores)], np.int64), "i": np.array([iou_threshold], np.float32),
             "t": np.array([score_threshold], np.float32)}
    return ReferenceEvaluator(model).run(None, feeds)[0][:, 2]


@pytest.mark.parametrize("max_det", [-1, 4])
def test_nms_limit_hard_kernel_against_onnx(max_det):
    n, classes = 14, 3
    scores = tie_free_scores(F32, n, classes)
    boxes = random_boxes(n, classes)
    batches = [0] * 8 + [1] * 6
    outputs, score_real, box_real = run_nms_limit(F32, scores, boxes, batches, [0.2, max_det, 0, 0.4, 1.0, 0.1])
    expected = []
    for rows in (np.arange(0, 8), np.arange(8, 14)):
        picks = [(score_real[rows[k], c], rows[k], c) for c in range(1, classes)
                 for k in onnx_nms(box_real.reshape(n, classes, 4)[rows, c], score_real[rows, c], 0.4, 0.2)]
        picks = sorted(picks, key=lambda p: -p[0])[:None if max_det < 0 else max_det]
        expected += [(s, r, c, batches[r]) for s, r, c in sorted(picks, key=lambda p: (p[2], -p[0]))]
    check_against(F32, outputs, expected, box_real, None)


AOSP_HARD_SCORES = [
    0.90, 0.95, 0.75, 0.80, 0.70, 0.85, 0.60, 0.90, 0.95, 0.90, 0.65, 0.90, 0.80, 0.85, 0.80, 0.60, 0.60, 0.20,
    0.60, 0.80, 0.40, 0.90, 0.55, 0.60, 0.90, 0.75, 0.70, 0.80, 0.70, 0.85, 0.90, 0.95, 0.75, 0.80, 0.85, 0.80,
    0.60, 0.90, 0.95, 0.60, 0.60, 0.20, 0.50, 0.90, 0.80, 0.90, 0.75, 0.70, 0.90, 0.65, 0.90, 0.90, 0.55, 0.60,
    0.60, 0.80, 0.40]
AOSP_HARD_ROI_BASES = [(1, 0), (2, 1), (3, 2), (4, 3), (5, 4), (6, 5), (7, 6), (8, 7), (9, 8), (2, 2), (1, 1),
                       (5, 5), (3, 3), (6, 6), (0, 0), (9, 9), (4, 4), (8, 8), (7, 7)]


def aosp_hard_rois():
    """The rois of V1_2/box_with_nms_limit_hard.mod.py TEST 1 (class 0: [a, a, a+9, a+9]; classes 1, 2:
    [b, b, b+10, b+10]; the row [0, 0, 1, 1, 0, 0, 2, 2, ...] is the exception)."""
    rows = [[a, a, a + 9, a + 9] + [b, b, b + 10, b + 10] * 2 for a, b in AOSP_HARD_ROI_BASES]
    rows[14] = [0, 0, 1, 1] + [0, 0, 2, 2] * 2
    return np.array(rows, np.float64)


@pytest.mark.parametrize("code", [F32, F16, U8, S8], ids=["f32", "f16", "u8", "s8"])
def test_nms_limit_aosp_hard_example(code):
    # V1_2/box_with_nms_limit_hard.mod.py TEST 1 (scores quantized with scale 0.01 as its quant8 variant;
    # V1_3/box_with_nms_limit_quant8_signed.mod.py for the signed one)
    quant = {U8: (0.01, 0), S8: (0.01, -128)}
    (scores, boxes, classes, batches), _, _ = run_nms_limit(
        code, np.reshape(AOSP_HARD_SCORES, (19, 3)), aosp_hard_rois(), [0] * 9 + [1] * 10,
        [0.3, -1, 0, 0.4, 1.0, 0.3], quant.get(code))
    expected_scores = np.array([0.95, 0.85, 0.75, 0.95, 0.7, 0.95, 0.9, 0.85, 0.75, 0.95, 0.8, 0.7])
    if code in quant:
        expected_scores = np.round(expected_scores / 0.01) + quant[code][1]
    assert_cts_close(scores, expected_scores, code)
    expected_boxes = np.array([[0, 0, 10, 10], [4, 4, 14, 14], [8, 8, 18, 18], [2, 2, 12, 12], [8, 8, 18, 18],
                               [1, 1, 11, 11], [0, 0, 2, 2], [5, 5, 15, 15], [9, 9, 19, 19], [3, 3, 13, 13],
                               [0, 0, 2, 2], [9, 9, 19, 19]])
    assert_cts_close(boxes, expected_boxes * (8 if code in quant else 1), Q16A if code in quant else code)
    np.testing.assert_array_equal(classes, [1, 1, 1, 2, 2, 1, 1, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(batches, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1])


def test_nms_limit_batches_are_runs_of_equal_indexes():
    # a batch index that comes back after another starts a new batch: each run is suppressed on its own
    scores = np.array([[0.0, 0.9], [0.0, 0.8], [0.0, 0.7]])
    boxes = np.tile([0, 0, 4, 4], (3, 2)).astype(np.float64)  # all identical: IoU 1
    (s, _, _, b), _, _ = run_nms_limit(F32, scores, boxes, [5, 2, 5], [0.1, -1, 0, 0.5, 1.0, 0.1])
    np.testing.assert_array_equal(b, [5, 2, 5])
    assert_cts_close(s, [0.9, 0.8, 0.7], F32)
    (s, _, _, b), _, _ = run_nms_limit(F32, scores, boxes, [5, 5, 2], [0.1, -1, 0, 0.5, 1.0, 0.1])
    np.testing.assert_array_equal(b, [5, 2])


def test_nms_limit_hard_kernel_keeps_zeroed_boxes_below_a_nonpositive_nms_threshold():
    scores = np.array([[0.0, 0.9], [0.0, 0.8]])
    boxes = np.tile([0, 0, 4, 4], (2, 2)).astype(np.float64)
    (s, _, c, _), _, _ = run_nms_limit(F32, scores, boxes, [0, 0], [0.1, -1, 0, 0.5, 1.0, 0.0])
    assert_cts_close(s, [0.9, 0.0], F32)  # suppressed to 0, yet not below the NMS score threshold 0
    np.testing.assert_array_equal(c, [1, 1])


def test_nms_limit_zero_sized_outputs():
    scores = np.array([[0.9, 0.1], [0.2, 0.05]])
    outputs, _, _ = run_nms_limit(F32, scores, np.tile([1, 1, 5, 5], (2, 2)), [0, 0], [0.3, -1, 0, 0.4, 1.0, 0.3])
    assert [o.shape for o in outputs] == [(0,), (0, 4), (0,), (0,)]
    f = OperandType.tensor
    results = run_op_direct(NMS, [(f(U8, (0, 2), 0.1, 0), np.zeros((0, 2))), (f(Q16A, (0, 8), 0.125, 0),
                                  np.zeros((0, 8))), (f(I32, (0,)), np.zeros(0)), (SCALAR[U8], 0.3), (INT, -1),
                                  (INT, 0), (SCALAR[U8], 0.4), (SCALAR[U8], 1.0), (SCALAR[U8], 0.3)],
                            [f(U8, (0,), 0.1, 0), f(Q16A, (0, 4), 0.125, 0), f(I32, (0,)), f(I32, (0,))])
    assert [(r.shape, r.dtype) for r in results] == [((0,), np.uint8), ((0, 4), np.uint16), ((0,), np.int32),
                                                     ((0,), np.int32)]


def nms_inputs(code=F32, n=2, classes=2, box_t=None, kernel=0, boxes=None):
    score_t = OperandType.tensor(code, (n, classes), *SCORE_QUANT.get(code, (0.0, 0)))
    box_t = box_t or (OperandType.tensor(Q16A, (n, classes * 4), 0.125, 0) if code in SCORE_QUANT
                      else OperandType.tensor(code, (n, classes * 4)))
    s = SCALAR[code]
    if boxes is None:
        boxes = np.tile([1, 1, 5, 5], (n, classes)) * (8 if box_t.code == Q16A else 1)
    return [(score_t, np.full((n, classes), 100 if code in SCORE_QUANT else 0.5)), (box_t, boxes),
            (OperandType.tensor(I32, (n,)), np.zeros(n, np.int32)), (s, 0.1), (INT, -1), (INT, kernel), (s, 0.4),
            (s, 1.0), (s, 0.1)]


def nms_outputs(code=F32, box_code=None):
    q = SCORE_QUANT.get(code, (0.0, 0))
    box_code = box_code or (Q16A if code in SCORE_QUANT else code)
    return [OperandType.tensor(code, (0,), *q), OperandType.tensor(box_code, (0, 4), 0.125 if box_code == Q16A else 0),
            OperandType.tensor(I32, (0,)), OperandType.tensor(I32, (0,))]


def test_nms_limit_rejects_bad_types_quantization_and_kernel():
    expect_error(NMS, nms_inputs(kernel=3), nms_outputs(), "input 5", "NMS kernel 3")
    inputs = nms_inputs(F16)
    inputs[3] = (SCALAR[F32], 0.1)
    expect_error(NMS, inputs, nms_outputs(F16), "input 3", "FLOAT32")
    expect_error(NMS, nms_inputs(U8, box_t=OperandType.tensor(Q16A, (2, 8), 0.25, 0)), nms_outputs(U8),
                 "input 1", "scale 0.125")
    expect_error(NMS, nms_inputs(U8, box_t=OperandType.tensor(F32, (2, 8))), nms_outputs(U8), "input 1")
    outputs = nms_outputs(S8)
    outputs[0] = OperandType.tensor(S8, (0,), 0.5, 0)
    expect_error(NMS, nms_inputs(S8), outputs, "output 0", "must equal input 0")
    outputs = nms_outputs(U8)
    outputs[1] = OperandType.tensor(Q16A, (0, 4), 0.125, 7)
    expect_error(NMS, nms_inputs(U8), outputs, "output 1", "zeroPoint 0")
    outputs = nms_outputs()
    outputs[2] = OperandType.tensor(F32, (0,))
    expect_error(NMS, nms_inputs(), outputs, "output 2", "TENSOR_FLOAT32")
    outputs = nms_outputs()
    outputs[1] = OperandType.tensor(F32, (0, 5))
    expect_error(NMS, nms_inputs(), outputs, "output 1", "[n, 4]")


def test_nms_limit_rejects_bad_shapes_and_boxes():
    expect_error(NMS, nms_inputs(classes=1), nms_outputs(), "input 0", "at least 2 classes")
    expect_error(NMS, nms_inputs(box_t=OperandType.tensor(F32, (2, 12)), boxes=np.ones((2, 12))), nms_outputs(),
                 "input 1", "[2, 8]")
    inputs = nms_inputs()
    inputs[2] = (OperandType.tensor(I32, (3,)), np.zeros(3, np.int32))
    expect_error(NMS, inputs, nms_outputs(), "input 2", "3 elements")
    bad = np.tile([1, 1, 5, 5], (2, 2)).astype(np.float32)
    bad[1, 5] = 9  # y1 > y2 in roi 1, class 1
    expect_error(NMS, nms_inputs(boxes=bad), nms_outputs(), "input 1", "box 1 of roi 1", result=ResultCode.OP_FAILED)


def test_nms_limit_output_shapes_are_known_only_at_run_time():
    inputs = [(t, Input()) if not t.is_scalar else (t, v) for t, v in nms_inputs()]
    declared = nms_outputs()
    declared[0] = OperandType.tensor(F32, (3,))
    assert inferred_output_types(NMS, inputs, declared) == declared


# -- the NMS helper's order rules -----------------------------------------------------------------
def swap_loop_nms(scores, boxes, candidates, max_det, kernel, iou_threshold, sigma, nms_threshold):
    """NNAPI's single-class soft NMS kernel as its reference code runs it: the first maximum of the pending
    range comes to the front; a dropped candidate swaps with the last pending one, which is examined next."""
    f32 = np.float32
    sel, start, end = list(candidates), 0, len(candidates)
    limit = end if max_det < 0 else max_det
    while start < end and start < limit:
        best = start
        for k in range(start + 1, end):
            if scores[sel[k]] > scores[sel[best]]:
                best = k
        sel[start], sel[best] = sel[best], sel[start]
        a = boxes[sel[start]]
        i = start + 1
        while i < end:
            b = boxes[sel[i]]
            inter = max(min(b[2], a[2]) - max(b[0], a[0]), f32(0)) * max(min(b[3], a[3]) - max(b[1], a[1]), f32(0))
            iou = inter / ((b[2] - b[0]) * (b[3] - b[1]) + (a[2] - a[0]) * (a[3] - a[1]) - inter)
            if kernel == 0:
                factor = f32(1) if iou < f32(iou_threshold) else f32(0)
            elif kernel == 1:
                factor = f32(1) if iou < f32(iou_threshold) else f32(1) - iou
            else:
                factor = np.exp(f32(-1) * iou * iou / f32(sigma))
            scores[sel[i]] = f32(scores[sel[i]] * factor)
            if scores[sel[i]] < f32(nms_threshold):
                end -= 1
                sel[i], sel[end] = sel[end], sel[i]
            else:
                i += 1
        start += 1
    return sel[:start]


@pytest.mark.parametrize("kernel", [0, 1, 2])
@pytest.mark.parametrize("max_det", [-1, 5])
def test_greedy_nms_order_and_ties_follow_nnapi(kernel, max_det):
    for _ in range(8):
        n = 40
        scores = rng.integers(1, 6, n).astype(np.float32) / 4  # many ties
        xy = rng.integers(0, 8, (n, 2))
        boxes = np.concatenate([xy, xy + rng.integers(1, 6, (n, 2))], axis=1).astype(np.float32)
        candidates = rng.permutation(n)[:30]
        expected_scores = scores.copy()
        expected = swap_loop_nms(expected_scores, boxes, candidates, max_det, kernel, 0.3, 0.5, 0.2)
        got = greedy_nms(scores, boxes, candidates, max_det, soft_suppression(kernel, 0.3, 0.5, 0.2))
        assert got.tolist() == expected
        np.testing.assert_array_equal(scores, expected_scores)
