"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR through the public API (run_op on nnapi-reference).

Expectations:
- onnx.reference Resize on NCHW data: bilinear is mode=linear with coordinate_transformation_mode
  asymmetric (no flag), align_corners or half_pixel; nearest neighbour is asymmetric + floor (no flag),
  align_corners + round_prefer_ceil, and half_pixel + round_prefer_ceil (ONNX's equivalent of TF's
  half-pixel nearest, floor((i + 0.5) * in / out));
- a per-pixel loop written from TFLite's reference bilinear formula in float32 (8-bit results rounded
  half up, floor(value + 0.5f), TFLite's static_cast<uint8_t>(value + 0.5f)), for bit-exact quantized
  and float16 results;
- examples from the AOSP 1.3 spec files (cited per case) and hand-computed values.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from support.direct import run_op_direct
from support.op_runner import Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

F32 = OperandCode.TENSOR_FLOAT32
F16 = OperandCode.TENSOR_FLOAT16
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
BILINEAR, NEAREST = OperationCode.RESIZE_BILINEAR, OperationCode.RESIZE_NEAREST_NEIGHBOR
MODES = {"legacy": (False, False), "align": (True, False), "half": (False, True)}

rng = np.random.default_rng(2024)
f32 = np.float32


# -- input lists ------------------------------------------------------------------------------------
def i32(v):
    return (OperandType.scalar(OperandCode.INT32), v)


def boolean(v):
    return (OperandType.scalar(OperandCode.BOOL), v)


def resize_inputs(x, t, width, height, nchw=None, align=None, half=None, scale_code=None):
    """NNAPI input list: INT32 width/height, or scales of `scale_code`; trailing flags where given."""
    if scale_code is None:
        ins = [(t, x), i32(width), i32(height)]
    else:
        s = OperandType.scalar(scale_code)
        ins = [(t, x), (s, width), (s, height)]
    flags = [nchw, align, half]
    while flags and flags[-1] is None:
        flags.pop()
    return ins + [boolean(bool(f)) for f in flags]


# -- expectations -----------------------------------------------------------------------------------
def onnx_resize(x_nchw, out_h, out_w, op, mode):
    """onnx.reference Resize of an NCHW float tensor to (out_h, out_w)."""
    align, half = MODES[mode]
    ctm = "align_corners" if align else "half_pixel" if half else "asymmetric"
    attrs = dict(coordinate_transformation_mode=ctm)
    if op == BILINEAR:
        attrs["mode"] = "linear"
    else:
        attrs.update(mode="nearest", nearest_mode="floor" if mode == "legacy" else "round_prefer_ceil")
    n, c = x_nchw.shape[:2]
    sizes = numpy_helper.from_array(np.array([n, c, out_h, out_w], dtype=np.int64), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[sizes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, {"x": x_nchw.astype(np.float32)})[0]


def onnx_resize_nhwc(x_nhwc, out_h, out_w, op, mode):
    y = onnx_resize(np.asarray(x_nhwc, np.float32).transpose(0, 3, 1, 2), out_h, out_w, op, mode)
    return y.transpose(0, 2, 3, 1)


def tflite_bilinear(x_nhwc, out_h, out_w, align, half):
    """TFLite's reference bilinear formula, pixel by pixel, in float32 scalars (NHWC)."""
    n, h, w, c = x_nhwc.shape
    xf = x_nhwc.astype(np.float32)

    def coordinate(i, in_size, out_size):
        ratio = f32(in_size - 1) / f32(out_size - 1) if align and out_size > 1 else f32(in_size) / f32(out_size)
        v = (f32(i) + f32(0.5)) * ratio - f32(0.5) if half else f32(i) * ratio
        low, high = max(math.floor(v), 0), min(math.ceil(v), in_size - 1)
        return low, high, f32(v - f32(low))

    out = np.empty((n, out_h, out_w, c), np.float32)
    one = f32(1)
    for i in range(out_h):
        y0, y1, dy = coordinate(i, h, out_h)
        for j in range(out_w):
            x0, x1, dx = coordinate(j, w, out_w)
            out[:, i, j, :] = (xf[:, y0, x0] * (one - dy) * (one - dx) + xf[:, y1, x0] * dy * (one - dx)
                               + xf[:, y0, x1] * (one - dy) * dx + xf[:, y1, x1] * dy * dx)
    return out


def tflite_bilinear_quant(q_nhwc, out_h, out_w, align, half):
    """The 8-bit result: the float32 value plus 0.5, rounded down."""
    v = tflite_bilinear(q_nhwc, out_h, out_w, align, half)
    return np.floor(v + f32(0.5)).astype(np.int64)


def run_resize(op, code, x_nhwc, out_h, out_w, mode="legacy", nchw=False, quant=(0.0, 0), **kw):
    """Run the op on an NHWC array (transposed to NCHW when asked); result back in NHWC."""
    align, half = MODES[mode]
    data = x_nhwc.transpose(0, 3, 1, 2) if nchw else x_nhwc
    t = OperandType.tensor(code, data.shape, *quant)
    n, h, w, c = x_nhwc.shape
    out_t = OperandType.tensor(code, (n, c, out_h, out_w) if nchw else (n, out_h, out_w, c), *quant)
    flags = dict(nchw=nchw, align=align, half=half) if mode != "legacy" or op == NEAREST or nchw else {}
    width, height = kw.pop("sizes", (out_w, out_h))
    (y,) = run_op(op, resize_inputs(data.astype(t.dtype), t, width, height, **flags, **kw), [out_t])
    assert y.dtype == t.dtype and y.shape == out_t.dimensions
    return y.transpose(0, 2, 3, 1) if nchw else y


# -- AOSP spec examples -----------------------------------------------------------------------------
# (op, input NHWC shape, input, (width, height) sizes or scales, mode, output NHWC shape, output,
#  (u8 scale, u8 zero point), source spec file)
SPEC_CASES = [
    (BILINEAR, (1, 2, 2, 1), [1.0, 1.0, 2.0, 2.0], (3, 3), "legacy", (1, 3, 3, 1),
     [1.0, 1.0, 1.0, 1.666666667, 1.666666667, 1.666666667, 2.0, 2.0, 2.0], (0.01, 0),
     "V1_0/resize_bilinear.mod.py"),
    (BILINEAR, (1, 2, 2, 2), [3, 4, 6, 10, 9, 10, 12, 16], (3, 3), "legacy", (1, 3, 3, 2),
     [3, 4, 5, 8, 6, 10, 7, 8, 9, 12, 10, 14, 9, 10, 11, 14, 12, 16], (0.25, 0), "V1_0/resize_bilinear_2.mod.py"),
    (BILINEAR, (1, 2, 2, 2), [3, 4, 6, 10, 9, 10, 12, 16], (1.6, 1.6), "legacy", (1, 3, 3, 2),
     [3, 4, 5, 8, 6, 10, 7, 8, 9, 12, 10, 14, 9, 10, 11, 14, 12, 16], (0.25, 0),
     "V1_2/resize_bilinear_v1_2.mod.py (TEST 2, scale)"),
    (BILINEAR, (1, 2, 2, 1), [1.0, 1.0, 2.0, 2.0], (1.8, 1.8), "legacy", (1, 3, 3, 1),
     [1.0, 1.0, 1.0, 1.666666667, 1.666666667, 1.666666667, 2.0, 2.0, 2.0], (0.01, 0),
     "V1_2/resize_bilinear_v1_2.mod.py (TEST 3, scale)"),
    (BILINEAR, (2, 2, 2, 1), [1, 2, 3, 4, 1, 2, 3, 4], (3, 3), "half", (2, 3, 3, 1),
     [1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4] * 2, (0.5, 128),
     "V1_3/resize_bilinear_v1_3.mod.py half_pixel_centers_2x2x2x1_to_2x3x3x1"),
    (BILINEAR, (1, 4, 4, 1), list(range(1, 17)), (3, 3), "align", (1, 3, 3, 1),
     [1, 2.5, 4, 7, 8.5, 10, 13, 14.5, 16], (0.5, 128), "V1_3/resize_bilinear_v1_3.mod.py align_corners_4x4_to_3x3"),
    (BILINEAR, (1, 3, 3, 1), list(range(1, 10)), (2, 2), "align", (1, 2, 2, 1), [1, 3, 7, 9], (0.5, 128),
     "V1_3/resize_bilinear_v1_3.mod.py align_corners_3x3_to_2x2"),
    (BILINEAR, (1, 2, 2, 1), [1, 2, 3, 4], (1, 1), "align", (1, 1, 1, 1), [1], (0.5, 128),
     "V1_3/resize_bilinear_v1_3.mod.py align_corners_2x2_to_1x1"),
    (NEAREST, (1, 2, 2, 1), [1, 2, 3, 4], (2.6, 1.1), "legacy", (1, 2, 5, 1), [1, 1, 1, 2, 2, 3, 3, 3, 4, 4],
     (0.25, 100), "V1_2/resize_nearest_neighbor.mod.py (test 4, scale)"),
    (NEAREST, (1, 4, 4, 1), list(range(1, 17)), (3, 3), "legacy", (1, 3, 3, 1), [1, 2, 3, 5, 6, 7, 9, 10, 11],
     (0.25, 100), "V1_2/resize_nearest_neighbor.mod.py (test 5)"),
    (NEAREST, (2, 2, 2, 2), [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8], (1.6, 1.8), "legacy", (2, 3, 3, 2),
     [1, 1, 1, 1, 2, 2, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 5, 5, 5, 5, 6, 6,
      5, 5, 5, 5, 6, 6, 7, 7, 7, 7, 8, 8], (0.25, 100), "V1_2/resize_nearest_neighbor.mod.py (test 8, scale)"),
    (NEAREST, (1, 2, 5, 1), [1, 2, 3, 4, 5, 1, 2, 3, 4, 5], (2, 2), "half", (1, 2, 2, 1), [2, 4, 2, 4], (0.5, 128),
     "V1_3/resize_nearest_neighbor_v1_3.mod.py half_pixel_centers_5x2_to_2x2"),
    (NEAREST, (1, 2, 2, 1), [1, 2, 3, 4], (1, 1), "half", (1, 1, 1, 1), [4], (0.5, 128),
     "V1_3/resize_nearest_neighbor_v1_3.mod.py half_pixel_centers_2x2_to_1x1"),
    (NEAREST, (1, 4, 4, 1), list(range(1, 17)), (3, 3), "half", (1, 3, 3, 1), [1, 3, 4, 9, 11, 12, 13, 15, 16],
     (0.5, 128), "V1_3/resize_nearest_neighbor_v1_3.mod.py half_pixel_centers_4x4_to_3x3"),
    (NEAREST, (1, 2, 2, 1), [1, 2, 3, 4], (5, 2), "half", (1, 2, 5, 1), [1, 1, 2, 2, 2, 3, 3, 4, 4, 4], (0.5, 128),
     "V1_3/resize_nearest_neighbor_v1_3.mod.py half_pixel_centers_2x2_to_2x5"),
    (NEAREST, (1, 4, 4, 1), list(range(1, 17)), (3, 3), "align", (1, 3, 3, 1), [1, 3, 4, 9, 11, 12, 13, 15, 16],
     (0.5, 128), "V1_3/resize_nearest_neighbor_v1_3.mod.py align_corners_4x4_to_3x3"),
    (NEAREST, (1, 2, 2, 1), [1, 2, 3, 4], (3, 3), "align", (1, 3, 3, 1), [1, 2, 2, 3, 4, 4, 3, 4, 4], (0.5, 128),
     "V1_3/resize_nearest_neighbor_v1_3.mod.py align_corners_2x2_to_3x3"),
]


def _quantize(values, scale, zp, lo, hi):
    return np.clip(np.floor(np.asarray(values, np.float64) / scale + 0.5) + zp, lo, hi)


@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("code", [F32, F16, U8, S8], ids=["f32", "f16", "u8", "s8"])
@pytest.mark.parametrize("case", SPEC_CASES, ids=[c[-1].split("/")[1] + f"-{i}" for i, c in enumerate(SPEC_CASES)])
def test_aosp_spec_examples(case, code, nchw):
    op, in_shape, x, sizes, mode, out_shape, expected, (scale, zp), _source = case
    x = np.asarray(x, np.float64).reshape(in_shape)
    expected = np.asarray(expected, np.float64).reshape(out_shape)
    scale_code = None
    if isinstance(sizes[0], float):
        scale_code = OperandCode.FLOAT16 if code == F16 else OperandCode.FLOAT32
    quant = (0.0, 0)
    if code in (U8, S8):
        zp = zp if code == U8 else zp - 128
        lo, hi = (0, 255) if code == U8 else (-128, 127)
        quant = (scale, zp)
        x, expected = _quantize(x, scale, zp, lo, hi), _quantize(expected, scale, zp, lo, hi)
    y = run_resize(op, code, x, out_shape[1], out_shape[2], mode, nchw, quant, sizes=sizes, scale_code=scale_code)
    assert_cts_close(y, expected, code)   # 8-bit: within one step, as CTS accepts


# -- float against ONNX -----------------------------------------------------------------------------
SHAPE_CASES = [  # (input NHWC shape, out_h, out_w)
    ((2, 3, 5, 2), 4, 7),     # upsample, uneven factors
    ((1, 7, 6, 3), 3, 4),     # downsample
    ((1, 4, 5, 1), 1, 1),     # to a single pixel
    ((2, 5, 3, 2), 5, 3),     # same size
    ((1, 3, 8, 2), 6, 3),     # up one way, down the other
]


@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", SHAPE_CASES, ids=[f"{c[0][1]}x{c[0][2]}to{c[1]}x{c[2]}" for c in SHAPE_CASES])
def test_bilinear_float32_against_onnx(case, mode, nchw):
    shape, out_h, out_w = case
    x = rng.standard_normal(shape).astype(np.float32)
    y = run_resize(BILINEAR, F32, x, out_h, out_w, mode, nchw)
    assert_cts_close(y, onnx_resize_nhwc(x, out_h, out_w, BILINEAR, mode), F32)
    # and bit for bit the TFLite reference formula
    np.testing.assert_array_equal(y, tflite_bilinear(x, out_h, out_w, *MODES[mode]))


@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", SHAPE_CASES, ids=[f"{c[0][1]}x{c[0][2]}to{c[1]}x{c[2]}" for c in SHAPE_CASES])
def test_nearest_float32_against_onnx(case, mode, nchw):
    shape, out_h, out_w = case
    x = rng.standard_normal(shape).astype(np.float32)
    y = run_resize(NEAREST, F32, x, out_h, out_w, mode, nchw)
    np.testing.assert_array_equal(y, onnx_resize_nhwc(x, out_h, out_w, NEAREST, mode))   # copies, exactly


@pytest.mark.parametrize("op", [BILINEAR, NEAREST], ids=["bilinear", "nearest"])
@pytest.mark.parametrize("mode", list(MODES))
def test_float16(op, mode):
    shape, out_h, out_w = SHAPE_CASES[0]
    x = rng.standard_normal(shape).astype(np.float16)
    y = run_resize(op, F16, x, out_h, out_w, mode)
    assert_cts_close(y, onnx_resize_nhwc(x, out_h, out_w, op, mode), F16)
    if op == BILINEAR:   # computed in float32 from the float16 values, rounded once
        np.testing.assert_array_equal(y, tflite_bilinear(x, out_h, out_w, *MODES[mode]).astype(np.float16))


# -- quantized --------------------------------------------------------------------------------------
@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("case", [0, 1, 4], ids=["up", "down", "mixed"])
def test_bilinear_quant8_bit_exact(case, code, mode, nchw):
    shape, out_h, out_w = SHAPE_CASES[case]
    lo, hi = (0, 255) if code == U8 else (-128, 127)
    q = rng.integers(lo, hi + 1, size=shape)
    quant = (0.05, 120 if code == U8 else -8)
    y = run_resize(BILINEAR, code, q, out_h, out_w, mode, nchw, quant)
    np.testing.assert_array_equal(y.astype(np.int64), tflite_bilinear_quant(q, out_h, out_w, *MODES[mode]))
    # Independently of the formula: ONNX's resize of the stored values (the output keeps the input's
    # scale and zero point), converted the same way, within one step (values at .5 may fall either side).
    interpolated = onnx_resize_nhwc(q, out_h, out_w, BILINEAR, mode).astype(np.float64)
    assert_cts_close(y, np.floor(interpolated + 0.5), code)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
def test_nearest_quant8_copies_values(code, mode):
    shape, out_h, out_w = SHAPE_CASES[4]
    lo, hi = (0, 255) if code == U8 else (-128, 127)
    q = rng.integers(lo, hi + 1, size=shape)
    y = run_resize(NEAREST, code, q, out_h, out_w, mode, quant=(0.3, 7))
    np.testing.assert_array_equal(y, onnx_resize_nhwc(q, out_h, out_w, NEAREST, mode).astype(y.dtype))


def test_bilinear_quant8_rounds_half_up_by_hand():
    # [0, 1] widened to 4 (no flag): positions 0, 0.5, 1, 1.5 give 0, 0.5, 1, 1; 0.5 + 0.5 truncates to 1.
    q = np.array([0, 1]).reshape(1, 1, 2, 1)
    y = run_resize(BILINEAR, U8, q, 1, 4, quant=(1.0, 0))
    np.testing.assert_array_equal(y.ravel(), [0, 1, 1, 1])
    # [10, 13] to 3 with half-pixel centers: positions -1/6 (clamped to the edge), 0.5, 7/6 (clamped)
    # give 10, 11.5, 13; 11.5 + 0.5 = 12.
    y = run_resize(BILINEAR, U8, np.array([10, 13]).reshape(1, 1, 2, 1), 1, 3, "half", quant=(1.0, 0))
    np.testing.assert_array_equal(y.ravel(), [10, 12, 13])


def test_bilinear_int8_rounds_half_up_by_hand():
    # [-3, -2] widened to 4: -3, -2.5, -2, -2; -2.5 rounds up to -2 (TFLite's static_cast<int8_t> of
    # value + 0.5f would also turn -3 into -2: see resize.py).
    q = np.array([-3, -2]).reshape(1, 1, 2, 1)
    y = run_resize(BILINEAR, S8, q, 1, 4, quant=(1.0, 0))
    np.testing.assert_array_equal(y.ravel(), [-3, -2, -2, -2])


@pytest.mark.parametrize("mode", list(MODES))
def test_bilinear_signed_and_unsigned_agree_up_to_offset(mode):
    shape, out_h, out_w = SHAPE_CASES[1]
    qu = rng.integers(0, 256, size=shape)
    yu = run_resize(BILINEAR, U8, qu, out_h, out_w, mode, quant=(0.1, 140))
    ys = run_resize(BILINEAR, S8, qu - 128, out_h, out_w, mode, quant=(0.1, 12))
    np.testing.assert_array_equal(yu.astype(np.int64), ys.astype(np.int64) + 128)


# -- parameters -------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", [BILINEAR, NEAREST], ids=["bilinear", "nearest"])
def test_scales_give_floor_of_size_times_scale_and_match_sizes(op):
    x = rng.standard_normal((1, 3, 5, 2)).astype(np.float32)
    t = OperandType.tensor(F32, x.shape)
    # floor(5 * 1.5) = 7, floor(3 * 1.7) = 5; the kernel then uses in / out, not 1 / scale
    (by_scale,) = run_op(op, resize_inputs(x, t, 1.5, 1.7, nchw=False, scale_code=OperandCode.FLOAT32),
                         [OperandType.tensor(F32, (0, 0, 0, 0))])
    (by_size,) = run_op(op, resize_inputs(x, t, 7, 5, nchw=False), [OperandType.tensor(F32, (1, 5, 7, 2))])
    assert by_scale.shape == (1, 5, 7, 2)
    np.testing.assert_array_equal(by_scale, by_size)


def test_output_size_is_computed_in_float32():
    # 0.9 as FLOAT16 is 0.89990: floor(10 * 0.8999) = 8. As FLOAT32 it is 0.89999998, and 10 times that
    # (8.99999976 exactly) rounds to 9.0 in float32 arithmetic: floor gives 9.
    x = np.zeros((1, 10, 10, 1))
    for code, scale_code, expected in ((F16, OperandCode.FLOAT16, 8), (F32, OperandCode.FLOAT32, 9)):
        t = OperandType.tensor(code, x.shape)
        (y,) = run_op(BILINEAR, resize_inputs(x.astype(t.dtype), t, 0.9, 0.9, scale_code=scale_code),
                      [OperandType.tensor(code, (0, 0, 0, 0))])
        assert y.shape == (1, expected, expected, 1)


@pytest.mark.parametrize("op", [BILINEAR, NEAREST], ids=["bilinear", "nearest"])
def test_omitted_trailing_flags_default_to_false(op):
    x = rng.standard_normal((1, 3, 4, 2)).astype(np.float32)
    t, out_t = OperandType.tensor(F32, x.shape), OperandType.tensor(F32, (1, 5, 6, 2))
    full = resize_inputs(x, t, 6, 5, nchw=False, align=False, half=False)
    (expected,) = run_op(op, full, [out_t])
    shortest = 3 if op == BILINEAR else 4
    for count in range(shortest, 6):
        (y,) = run_op(op, full[:count], [out_t])
        np.testing.assert_array_equal(y, expected)
    assert_cts_close(expected, onnx_resize_nhwc(x, 5, 6, op, "legacy"), F32)


def test_output_shape_unknown_dims_are_inferred():
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)   # NCHW: 3 channels, 4x5 image
    (y,) = run_op(BILINEAR, resize_inputs(x, OperandType.tensor(F32, (0, 0, 0, 0)), 7, 2, nchw=True),
                  [OperandType.tensor(F32, (0, 0, 0, 0))])
    assert y.shape == (2, 3, 2, 7)
    expected = onnx_resize(x, 2, 7, BILINEAR, "legacy")
    assert_cts_close(y, expected, F32)


def test_build_time_shape_inference():
    def build(in_dims, out_dims, scale):
        scale_t = OperandType.scalar(OperandCode.FLOAT32)
        inputs = [(OperandType.tensor(F32, in_dims), Input()), (scale_t, scale), (scale_t, scale),
                  (OperandType.scalar(OperandCode.BOOL), False)]
        return inferred_output_types(NEAREST, inputs, [OperandType.tensor(F32, out_dims)])[0].dimensions

    assert build((2, 4, 6, 3), (0, 0, 0, 0), 1.5) == (2, 6, 9, 3)
    assert build((0, 4, 6, 3), (0, 0, 0, 0), 1.5) == (0, 0, 0, 0)   # not known until run time
    with pytest.raises(MltsError) as info:
        build((2, 4, 6, 3), (2, 6, 8, 3), 1.5)
    assert info.value.code == ResultCode.BAD_DATA and "output 0" in str(info.value)


@pytest.mark.parametrize("op", [BILINEAR, NEAREST], ids=["bilinear", "nearest"])
@pytest.mark.parametrize("code", [F32, U8], ids=["f32", "u8"])
def test_zero_batch_gives_empty_output(op, code):
    t = OperandType.tensor(code, (0, 2, 2, 3), 0.5 if code == U8 else 0.0, 0)
    out_t = OperandType.tensor(code, (0, 3, 5, 3), t.scale, 0)
    (y,) = run_op_direct(op, resize_inputs(np.zeros((0, 2, 2, 3)), t, 5, 3, nchw=False), [out_t])
    assert y.shape == (0, 3, 5, 3) and y.dtype == t.dtype


# -- validation -------------------------------------------------------------------------------------
def f32_input(shape=(1, 2, 2, 1)):
    return np.zeros(shape, np.float32), OperandType.tensor(F32, shape)


def any_out(code=F32, *quant):
    return [OperandType.tensor(code, (0, 0, 0, 0), *quant)]


@pytest.mark.parametrize("op", [BILINEAR, NEAREST], ids=["bilinear", "nearest"])
def test_rejects_non_positive_output_size(op):
    x, t = f32_input()
    expect_error(op, resize_inputs(x, t, 0, 3, nchw=False), any_out(), "input 1 (", "width", "> 0")
    expect_error(op, resize_inputs(x, t, 3, -1, nchw=False), any_out(), "input 2 (", "height")


@pytest.mark.parametrize("op", [BILINEAR, NEAREST], ids=["bilinear", "nearest"])
def test_rejects_non_positive_scales_and_zero_sized_results(op):
    x, t = f32_input()
    scale = OperandCode.FLOAT32
    expect_error(op, resize_inputs(x, t, 0.0, 1.5, nchw=False, scale_code=scale), any_out(), "input 1 (", "scale")
    expect_error(op, resize_inputs(x, t, 1.5, -2.0, nchw=False, scale_code=scale), any_out(), "input 2 (", "scale")
    expect_error(op, resize_inputs(x, t, float("nan"), 1.5, nchw=False, scale_code=scale), any_out(), "input 1 (")
    # floor(2 * 0.4) = 0: found once the input shape is known
    expect_error(op, resize_inputs(x, t, 1.5, 0.4, nchw=False, scale_code=scale), any_out(), "input 2 (", "= 0")


@pytest.mark.parametrize("op", [BILINEAR, NEAREST], ids=["bilinear", "nearest"])
def test_rejects_align_corners_with_half_pixel_centers(op):
    x, t = f32_input()
    expect_error(op, resize_inputs(x, t, 3, 3, nchw=False, align=True, half=True), any_out(),
                    "input 5 (", "align_corners and half_pixel_centers")


@pytest.mark.parametrize("op", [BILINEAR, NEAREST], ids=["bilinear", "nearest"])
def test_rejects_wrong_ranks(op):
    for shape in ((2, 2, 1), (1, 1, 2, 2, 1)):
        x, t = f32_input(shape)
        expect_error(op, resize_inputs(x, t, 3, 3, nchw=False), [OperandType.tensor(F32, shape)], "input 0 (",
                        "rank")


def test_rejects_wrong_scalar_types():
    x, t = f32_input()
    mixed = [(t, x), i32(3), (OperandType.scalar(OperandCode.FLOAT32), 1.5)]
    expect_error(BILINEAR, mixed, any_out(), "input 1 (", "INT32")
    h = (1, 2, 2, 1)
    half_t = OperandType.tensor(F16, h)
    expect_error(BILINEAR, resize_inputs(x.astype(np.float16), half_t, 1.5, 1.5, scale_code=OperandCode.FLOAT32),
                    any_out(F16), "input 2 (", "FLOAT32")
    q_t = OperandType.tensor(U8, h, 0.5, 3)
    expect_error(BILINEAR, resize_inputs(x.astype(np.uint8), q_t, 1.5, 1.5, scale_code=OperandCode.FLOAT16),
                    any_out(U8, 0.5, 3), "input 2 (", "FLOAT16")
    flag_as_int = resize_inputs(x, t, 3, 3)[:3] + [i32(0)]
    expect_error(BILINEAR, flag_as_int, any_out(), "input 3 (", "BOOL")


def test_rejects_wrong_types_and_quantization():
    x, t = f32_input()
    i_t = OperandType.tensor(OperandCode.TENSOR_INT32, x.shape)
    expect_error(BILINEAR, resize_inputs(x.astype(np.int32), i_t, 3, 3), any_out(OperandCode.TENSOR_INT32),
                    "input 0 (", "TENSOR_INT32")
    expect_error(NEAREST, resize_inputs(x, t, 3, 3, nchw=False), any_out(F16), "output 0")
    q = np.zeros(x.shape, np.uint8)
    q_t = OperandType.tensor(U8, x.shape, 0.5, 3)
    expect_error(BILINEAR, resize_inputs(q, q_t, 3, 3), any_out(U8, 0.25, 3), "output 0", "scale")
    expect_error(NEAREST, resize_inputs(q, q_t, 3, 3, nchw=False), any_out(U8, 0.5, 4), "output 0", "zp")


def test_rejects_wrong_input_counts_and_omitted_flags():
    x, t = f32_input()
    expect_error(BILINEAR, resize_inputs(x, t, 3, 3)[:2], any_out(), "inputs")
    expect_error(BILINEAR, resize_inputs(x, t, 3, 3, False, False, False) + [boolean(False)], any_out(), "inputs")
    expect_error(NEAREST, resize_inputs(x, t, 3, 3), any_out(), "inputs")   # its layout flag is required
    omitted = resize_inputs(x, t, 3, 3)[:3] + [(OperandType.scalar(OperandCode.BOOL), None)]
    expect_error(BILINEAR, omitted, any_out(), "input 3 (", "omitted")


def test_rejects_declared_output_shape_mismatch():
    x, t = f32_input()
    expect_error(BILINEAR, resize_inputs(x, t, 3, 3), [OperandType.tensor(F32, (1, 3, 4, 1))], "output 0")

