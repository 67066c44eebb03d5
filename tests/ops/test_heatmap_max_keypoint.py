"""HEATMAP_MAX_KEYPOINT through the public API (run_op on nnapi-reference).

Expectations: a float64 transcription of NNAPI's documented method (first maximum, mirrored 3 x 3
neighbourhood, Newton step of the quadratic Taylor expansion solved with numpy.linalg, clipped to 1.5
cells), hand-computed values (an exact quadratic heatmap, a flat one), and AOSP's vectors of
runtime/test/specs/V1_2/heatmap_max_keypoint.mod.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from support.op_runner import Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8, Q16 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, OperandCode.TENSOR_QUANT16_ASYMM
OP = OperationCode.HEATMAP_MAX_KEYPOINT
BOOL = OperandType.scalar(OperandCode.BOOL)

rng = np.random.default_rng(7)


def reference(maps_nhwc, boxes, tol=1e-5):
    """(scores [n, k], keypoints [n, k, 2]) by NNAPI's documented method, in float64."""
    n, size, _, k = maps_nhwc.shape
    scores, keypoints = np.zeros((n, k)), np.zeros((n, k, 2))
    mirror = {-1: 1, size: size - 2}
    for i in range(n):
        for j in range(k):
            m = maps_nhwc[i, :, :, j].astype(np.float64)
            r, c = divmod(int(np.argmax(m)), size)
            g = np.array([[m[mirror.get(r + dr, r + dr), mirror.get(c + dc, c + dc)] for dc in (-1, 0, 1)]
                          for dr in (-1, 0, 1)])
            b = -np.array([g[1, 2] - g[1, 0], g[2, 1] - g[0, 1]]) / 2
            a = np.array([[g[1, 0] - 2 * g[1, 1] + g[1, 2], (g[2, 2] - g[2, 0] - g[0, 2] + g[0, 0]) / 4],
                          [0.0, g[0, 1] - 2 * g[1, 1] + g[2, 1]]])
            a[1, 0] = a[0, 1]
            delta, score = np.zeros(2), g[1, 1]
            if abs(np.linalg.det(a)) >= tol + tol * a[0, 0] * a[1, 1]:
                delta = np.linalg.solve(a, b)
                if np.abs(delta).max() > 1.5:
                    delta *= 1.5 / np.abs(delta).max()
                score = g[1, 1] - b @ delta + delta @ a @ delta / 2
            x1, y1, x2, y2 = boxes[i].astype(np.float64)
            scores[i, j] = score
            keypoints[i, j] = [(c + delta[0] + 0.5) / size * (x2 - x1) + x1,
                               (r + delta[1] + 0.5) / size * (y2 - y1) + y1]
    return scores, keypoints


def run(maps, boxes, code=F32, *, nchw=False, quant=None):
    """Run on NHWC `maps` (transposed for NCHW); quant = (map scale, map zp, score scale, score zp)."""
    n, _, _, k = maps.shape
    x = maps.transpose(0, 3, 1, 2) if nchw else maps
    if quant:
        x_t = OperandType.tensor(code, x.shape, quant[0], quant[1])
        boxes_t = OperandType.tensor(Q16, boxes.shape, 0.125, 0)
        outs = [OperandType.tensor(code, (n, k), quant[2], quant[3]), OperandType.tensor(Q16, (n, k, 2), 0.125, 0)]
    else:
        x_t, boxes_t = OperandType.tensor(code, x.shape), OperandType.tensor(code, boxes.shape)
        outs = [OperandType.tensor(code, (n, k)), OperandType.tensor(code, (n, k, 2))]
    return run_op(OP, [(x_t, x), (boxes_t, boxes), (BOOL, nchw)], outs)


def random_boxes(n):
    corner = rng.uniform(0, 20, (n, 2))
    return np.round(np.concatenate([corner, corner + rng.uniform(1, 20, (n, 2))], axis=1) * 8) / 8


@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("size", [2, 5])
def test_float32_against_reference(size, nchw):
    maps = rng.standard_normal((4, size, size, 3)).astype(np.float32)
    boxes = random_boxes(4).astype(np.float32)
    scores, keypoints = run(maps, boxes, nchw=nchw)
    expected_scores, expected_keypoints = reference(maps, boxes)
    # float32 against float64: the 2 x 2 solve may lose a few more bits than NNAPI's 5 ULP on its own.
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(keypoints, expected_keypoints, rtol=1e-4, atol=1e-4)


def test_float16_against_reference():
    maps = rng.standard_normal((3, 4, 4, 2)).astype(np.float16)
    boxes = random_boxes(3).astype(np.float16)
    scores, keypoints = run(maps, boxes, F16)
    assert scores.dtype == keypoints.dtype == np.float16
    expected_scores, expected_keypoints = reference(maps, boxes, tol=1e-3)
    assert_cts_close(scores, expected_scores, F16)
    assert_cts_close(keypoints, expected_keypoints, F16)


def test_hand_computed_quadratic_and_flat_heatmaps():
    # 10 - (x - 1.2)^2 - (y - 0.9)^2 is its own Taylor expansion: peak at (1.2, 0.9) of value 10.
    ys, xs = np.mgrid[0:3, 0:3]
    quadratic = (10 - (xs - 1.2) ** 2 - (ys - 0.9) ** 2).astype(np.float32)
    flat = np.full((3, 3), 4, np.float32)  # singular Hessian: the first cell, unrefined
    maps = np.stack([quadratic, flat])[..., None]
    boxes = np.array([[0, 0, 3, 6], [3, 0, 6, 3]], np.float32)
    scores, keypoints = run(maps, boxes)
    np.testing.assert_allclose(scores[:, 0], [10.0, 4.0], rtol=1e-5)
    # x = (col + dx + 0.5) / 3 * width + x1; y likewise
    np.testing.assert_allclose(keypoints[:, 0], [[1.7, 2.8], [3.5, 0.5]], rtol=1e-5)


def aosp_test_1():
    """V1_2/heatmap_max_keypoint.mod.py TEST 1 (mirroring at every border, a clipped delta)."""
    base = [-10, -1, 4, -5, -8, -2, 9, 1, 7, -2, 3, -7, -2, 2, -3, 5]
    maps = np.array([base] * 5, np.float32)
    maps[1, 13], maps[2, 6], maps[3, 3], maps[4, 1] = 10, 4, 10, -56
    boxes = np.array([[5, 2, 10, 20], [1, 7, 30, 10], [8, 3, 15, 13], [6, 5, 19, 12], [5, 2, 10, 20]], np.float32)
    scores = np.array([9.071493, 10.00500, 7.187500, 10.00000, 10.689667])
    keypoints = np.array([[8.224462, 8.537316], [11.73000, 9.625000], [8.875000, 9.562500],
                          [17.37500, 5.875000], [9.569672, 2.000000]])
    return maps.reshape(5, 4, 4, 1), boxes, scores.reshape(5, 1), keypoints.reshape(5, 1, 2)


@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
def test_aosp_vector_float(nchw):
    maps, boxes, scores, keypoints = aosp_test_1()
    got_scores, got_keypoints = run(maps, boxes, nchw=nchw)
    assert_cts_close(got_scores, scores, F32)
    assert_cts_close(got_keypoints, keypoints, F32)


@pytest.mark.parametrize("code, quant", [(U8, (0.5, 128, 0.1, 10)), (S8, (0.5, 0, 0.1, -100))], ids=["u8", "s8"])
def test_aosp_vector_quantized(code, quant):
    maps, boxes, scores, keypoints = aosp_test_1()
    q_maps = np.round(maps / quant[0]) + quant[1]
    got_scores, got_keypoints = run(q_maps, boxes / 0.125, code, quant=quant)
    assert got_scores.dtype == OperandType.tensor(code, ()).dtype and got_keypoints.dtype == np.uint16
    assert_cts_close(got_scores, np.round(scores / quant[2]) + quant[3], code)
    assert_cts_close(got_keypoints, np.round(keypoints / 0.125), Q16)


def test_build_time_shape_inference():
    def build(dims, nchw):
        inputs = [(OperandType.tensor(F32, dims), Input()), (OperandType.tensor(F32, (dims[0], 4)), Input()),
                  (BOOL, nchw)]
        outs = [OperandType.tensor(F32, (0, 0)), OperandType.tensor(F32, (0, 0, 0))]
        return [t.dimensions for t in inferred_output_types(OP, inputs, outs)]

    assert build((6, 5, 5, 17), False) == [(6, 17), (6, 17, 2)]
    assert build((6, 17, 5, 5), True) == [(6, 17), (6, 17, 2)]


def inputs_of(maps_dims=(2, 3, 3, 4), boxes_dims=(2, 4), code=F32, boxes_t=None):
    maps_t = OperandType.tensor(code, maps_dims, 0.5 if code in (U8, S8) else 0.0)
    boxes_t = boxes_t or OperandType.tensor(F32 if code in (U8, S8) else code, boxes_dims)
    return [(maps_t, np.zeros(maps_dims)), (boxes_t, np.zeros(boxes_t.dimensions)), (BOOL, False)]


def outs_of(n=2, k=4, code=F32, box_code=F32, box_scale=0.0):
    return [OperandType.tensor(code, (n, k), 0.5 if code in (U8, S8) else 0.0),
            OperandType.tensor(box_code, (n, k, 2), box_scale)]


def test_rejects_bad_shapes_and_types():
    expect_error(OP, inputs_of((2, 3, 4, 4)), outs_of(), "input 0 (", "square")
    expect_error(OP, inputs_of((2, 1, 1, 4)), outs_of(), "input 0 (", "at least 2 x 2")
    expect_error(OP, inputs_of(boxes_dims=(3, 4)), outs_of(), "input 1 (", "shape [2, 4]")
    expect_error(OP, inputs_of(boxes_dims=(2, 4, 1)), outs_of(), "input 1 (", "rank 3")
    expect_error(OP, inputs_of(), outs_of(code=F16), "output 0 (", "TENSOR_FLOAT16")
    q16 = OperandType.tensor(Q16, (2, 4), 0.125, 0)
    expect_error(OP, inputs_of(code=U8), outs_of(code=U8, box_code=Q16, box_scale=0.125), "input 1 (",
                 "expected TENSOR_QUANT16_ASYMM")
    expect_error(OP, inputs_of(code=U8, boxes_t=OperandType.tensor(Q16, (2, 4), 0.25, 0)),
                 outs_of(code=U8, box_code=Q16, box_scale=0.125), "input 1 (", "scale 0.125")
    expect_error(OP, inputs_of(code=S8, boxes_t=q16), outs_of(code=S8, box_code=Q16, box_scale=0.5),
                 "output 1 (", "keypoints", "scale 0.125")
    expect_error(OP, inputs_of(code=S8, boxes_t=q16), outs_of(code=S8, box_code=F32), "output 1 (",
                 "TENSOR_FLOAT32 not allowed")


def test_inverted_box_fails_the_execution():
    inputs = inputs_of()
    inputs[1] = (inputs[1][0], np.array([[0, 0, 1, 1], [2, 0, 1, 1]], np.float32))
    with pytest.raises(MltsError) as info:
        run_op(OP, inputs, outs_of())
    assert info.value.code == ResultCode.OP_FAILED
    assert "input 1 (" in str(info.value) and "box 1" in str(info.value)
