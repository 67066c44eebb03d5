"""ROI_ALIGN and ROI_POOLING through the public API (run_op on nnapi-reference).

Expectations: onnx.reference RoiAlign (mode avg, output_half_pixel: NNAPI's sample positions) for float
ROI_ALIGN with equal strides and sampling ratios; plain loop transcriptions of NNAPI's documented
formulas (float64) for separate strides / ratios and for ROI_POOLING (onnx.reference has no MaxRoiPool);
hand-computed values; and a few vectors of AOSP's runtime/test/specs/V1_2/roi_align.mod.py and
roi_pooling.mod.py (and V1_3/*_quant8_signed.mod.py).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support.direct import run_op_direct
from support.op_runner import Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
Q16, I32 = OperandCode.TENSOR_QUANT16_ASYMM, OperandCode.TENSOR_INT32
ALIGN, POOL = OperationCode.ROI_ALIGN, OperationCode.ROI_POOLING
INT, BOOL = OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL)
QMIN, QMAX = {U8: 0, S8: -128}, {U8: 255, S8: 127}

rng = np.random.default_rng(18)


def roi_inputs(op, x, x_t, rois, batches, out_hw, strides, ratios=(0, 0), *, nchw=False, rois_t=None):
    """The operation's input list; `rois` are real boxes (quantized with scale 0.125 for 8-bit maps)."""
    rois = np.asarray(rois, dtype=np.float64).reshape(-1, 4)
    quant = x_t.code in (U8, S8)
    if rois_t is None:
        rois_t = OperandType.tensor(Q16 if quant else x_t.code, rois.shape, 0.125 if quant else 0.0)
    roi_values = np.round(rois / 0.125) if quant else rois
    stride_t = OperandType.scalar(OperandCode.FLOAT16 if x_t.code == F16 else OperandCode.FLOAT32)
    inputs = [(x_t, x), (rois_t, roi_values), (OperandType.tensor(I32, (len(batches),)), np.asarray(batches)),
              (INT, out_hw[0]), (INT, out_hw[1]), (stride_t, strides[0]), (stride_t, strides[1])]
    if op == ALIGN:
        inputs += [(INT, ratios[0]), (INT, ratios[1])]
    return inputs + [(BOOL, nchw)]


def out_type(x_t, n, out_hw, nchw=False, scale=None, zero_point=None):
    c = x_t.dimensions[1] if nchw else x_t.dimensions[3]
    dims = (n, c) + tuple(out_hw) if nchw else (n,) + tuple(out_hw) + (c,)
    return OperandType.tensor(x_t.code, dims, x_t.scale if scale is None else scale,
                              x_t.zero_point if zero_point is None else zero_point)


# -- independent references -----------------------------------------------------------------------
def onnx_roi_align(x_nchw, rois, batches, out_hw, spatial_scale, ratio):
    node = helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], mode="avg", output_height=out_hw[0],
                            output_width=out_hw[1], sampling_ratio=ratio, spatial_scale=spatial_scale,
                            coordinate_transformation_mode="output_half_pixel")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, None) for n, t in
                                            (("x", TensorProto.FLOAT), ("rois", TensorProto.FLOAT),
                                             ("b", TensorProto.INT64))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    feeds = {"x": x_nchw.astype(np.float32), "rois": np.asarray(rois, np.float32).reshape(-1, 4),
             "b": np.asarray(batches, np.int64)}
    return ReferenceEvaluator(model).run(None, feeds)[0]


def loop_roi_align(x_nhwc, rois, batches, out_hw, strides, ratios):
    """NNAPI's documented ROI_ALIGN, one sample at a time in float64."""
    out = np.zeros((len(batches),) + tuple(out_hw) + (x_nhwc.shape[3],))
    in_h, in_w = x_nhwc.shape[1:3]
    for r, (box, b) in enumerate(zip(np.reshape(rois, (-1, 4)), batches)):
        x1, y1, x2, y2 = box[0] / strides[1], box[1] / strides[0], box[2] / strides[1], box[3] / strides[0]
        bin_h, bin_w = max(y2 - y1, 1) / out_hw[0], max(x2 - x1, 1) / out_hw[1]
        rh = ratios[0] or math.ceil(bin_h)
        rw = ratios[1] or math.ceil(bin_w)
        for i in range(out_hw[0]):
            for j in range(out_hw[1]):
                for a in range(rh):
                    for c in range(rw):
                        y = y1 + i * bin_h + (a + 0.5) * bin_h / rh
                        x = x1 + j * bin_w + (c + 0.5) * bin_w / rw
                        yl, xl = min(int(y), in_h - 1), min(int(x), in_w - 1)
                        yh, xh = min(yl + 1, in_h - 1), min(xl + 1, in_w - 1)
                        fy, fx = (y - yl if yl < in_h - 1 else 0), (x - xl if xl < in_w - 1 else 0)
                        m = x_nhwc[b].astype(np.float64)
                        out[r, i, j] += ((1 - fy) * (1 - fx) * m[yl, xl] + (1 - fy) * fx * m[yl, xh]
                                         + fy * (1 - fx) * m[yh, xl] + fy * fx * m[yh, xh])
                out[r, i, j] /= rh * rw
    return out


def loop_roi_pooling(x_nhwc, rois, batches, out_hw, strides, empty=0):
    """NNAPI's documented ROI_POOLING: corners rounded to cells, bins [floor(i * step), ceil((i + 1) * step))."""
    out = np.full((len(batches),) + tuple(out_hw) + (x_nhwc.shape[3],), empty, dtype=x_nhwc.dtype)
    in_h, in_w = x_nhwc.shape[1:3]
    for r, (box, b) in enumerate(zip(np.reshape(rois, (-1, 4)), batches)):
        x1, y1, x2, y2 = (math.floor(v + 0.5) for v in (box[0] / strides[1], box[1] / strides[0],
                                                        box[2] / strides[1], box[3] / strides[0]))
        step_h, step_w = max(y2 - y1 + 1, 1) / out_hw[0], max(x2 - x1 + 1, 1) / out_hw[1]
        for i in range(out_hw[0]):
            for j in range(out_hw[1]):
                h0, h1 = min(math.floor(i * step_h) + y1, in_h), min(math.ceil((i + 1) * step_h) + y1, in_h)
                w0, w1 = min(math.floor(j * step_w) + x1, in_w), min(math.ceil((j + 1) * step_w) + x1, in_w)
                if h1 > h0 and w1 > w0:
                    out[r, i, j] = x_nhwc[b, h0:h1, w0:w1].max(axis=(0, 1))
    return out


def nhwc(y, nchw):
    return y.transpose(0, 2, 3, 1) if nchw else y


def random_boxes(n, height, width, stride):
    """Boxes inside a height x width map (image coordinates, multiples of 1/8), some smaller than a cell."""
    x1 = rng.uniform(0, width - 1, n) * stride
    y1 = rng.uniform(0, height - 1, n) * stride
    x2 = np.minimum(x1 + rng.uniform(0.2, width, n) * stride, (width - 0.01) * stride)
    y2 = np.minimum(y1 + rng.uniform(0.2, height, n) * stride, (height - 0.01) * stride)
    return np.round(np.stack([x1, y1, x2, y2], axis=1) * 8) / 8


# -- ROI_ALIGN --------------------------------------------------------------------------------------
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_roi_align_float_against_onnx(code, nchw, ratio):
    maps = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)  # NCHW
    rois = random_boxes(5, 6, 7, 2.0)
    batches = np.array([0, 1, 1, 0, 1], np.int32)
    x = (maps if nchw else maps.transpose(0, 2, 3, 1)).astype(OperandType.tensor(code, ()).dtype)
    x_t = OperandType.tensor(code, x.shape)
    expected = onnx_roi_align(maps.astype(x.dtype).astype(np.float32), rois.astype(x.dtype), batches, (3, 2), 0.5,
                              ratio)
    (y,) = run_op(ALIGN, roi_inputs(ALIGN, x, x_t, rois, batches, (3, 2), (2.0, 2.0), (ratio, ratio), nchw=nchw),
                  [out_type(x_t, 5, (3, 2), nchw)])
    assert y.dtype == x.dtype
    assert_cts_close(nhwc(y, nchw), expected.transpose(0, 2, 3, 1), code)


def test_roi_align_separate_strides_and_ratios_against_loops():
    x = rng.standard_normal((2, 8, 5, 3)).astype(np.float32)
    rois = np.array([[0, 0, 4.5, 7.5], [1, 2, 2.5, 3], [0.5, 6, 4.75, 8]])
    batches = [1, 0, 1]
    for strides, ratios in (((2.0, 1.0), (3, 1)), ((4.0, 0.5), (0, 2)), ((1.0, 1.0), (0, 0))):
        rois_s = rois * [strides[1], strides[0], strides[1], strides[0]]
        x_t = OperandType.tensor(F32, x.shape)
        (y,) = run_op(ALIGN, roi_inputs(ALIGN, x, x_t, rois_s, batches, (2, 3), strides, ratios),
                      [out_type(x_t, 3, (2, 3))])
        assert_cts_close(y, loop_roi_align(x, rois_s, batches, (2, 3), strides, ratios), F32)


def test_roi_align_hand_computed():
    # Samples on whole cells (ratio 1, bins of 2 x 2 cells): the values at (1, 1), (1, 3), (3, 1), (3, 3).
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)  # value 4y + x
    x_t = OperandType.tensor(F32, x.shape)
    (y,) = run_op(ALIGN, roi_inputs(ALIGN, x, x_t, [[0, 0, 4, 4]], [0], (2, 2), (1.0, 1.0), (1, 1)),
                  [out_type(x_t, 1, (2, 2))])
    np.testing.assert_array_equal(y[0, :, :, 0], [[5, 7], [13, 15]])
    # A 1 x 1 box at (0.5, 0.5), 2 x 2 bins of one sample each: 4y + x at y, x in {0.75, 1.25}.
    (y,) = run_op(ALIGN, roi_inputs(ALIGN, x, x_t, [[0.5, 0.5, 1.5, 1.5]], [0], (2, 2), (1.0, 1.0), (1, 1)),
                  [out_type(x_t, 1, (2, 2))])
    np.testing.assert_allclose(y[0, :, :, 0], [[3.75, 4.25], [5.75, 6.25]], rtol=1e-6)
    # One bin of 2 x 2 samples over it: their average is the value at the centre, 4 + 1.
    (y,) = run_op(ALIGN, roi_inputs(ALIGN, x, x_t, [[0.5, 0.5, 1.5, 1.5]], [0], (1, 1), (1.0, 1.0), (2, 2)),
                  [out_type(x_t, 1, (1, 1))])
    np.testing.assert_allclose(y.reshape(-1), [5.0], rtol=1e-6)


def aosp_roi_align_1():
    """V1_2/roi_align.mod.py TEST 1 (outputs real values); V1_3/roi_align_quant8_signed.mod.py for int8."""
    x = np.array([-10, -1, 4, -5, -8, -2, 9, 1, 7, -2, 3, -7, -2, 10, -3, 5], np.float64).reshape(1, 4, 4, 1)
    rois = [[2, 2, 4, 4], [0, 0, 8, 8], [2, 0, 4, 8], [0, 2, 8, 4]]
    expected = np.array([0.375, 5.125, -0.375, 2.875, -0.5, -0.3125, 3.1875, 1.125, 0.25, 4.25, 4.875, 0.625,
                         -0.1875, 1.125, 0.9375, -2.625]).reshape(4, 2, 2, 1)
    return x, rois, expected


@pytest.mark.parametrize("code, quant", [(F32, None), (U8, (0.25, 128, 0.0625, 128)), (S8, (0.25, 0, 0.0625, 0))],
                         ids=["f32", "u8", "s8"])
def test_roi_align_aosp_vector(code, quant):
    x, rois, expected = aosp_roi_align_1()
    if quant:
        x_t = OperandType.tensor(code, x.shape, quant[0], quant[1])
        x = np.round(x / quant[0]) + quant[1]
        o_t = out_type(x_t, 4, (2, 2), scale=quant[2], zero_point=quant[3])
        expected = np.round(expected / quant[2]) + quant[3]
    else:
        x_t = OperandType.tensor(code, x.shape)
        o_t = out_type(x_t, 4, (2, 2))
    (y,) = run_op(ALIGN, roi_inputs(ALIGN, x, x_t, rois, [0] * 4, (2, 2), (2.0, 2.0), (4, 4)), [o_t])
    assert_cts_close(y, expected, code)


@pytest.mark.parametrize("code, zero_point", [(U8, 131), (S8, -7)], ids=["u8", "s8"])
def test_roi_align_quantized_against_float(code, zero_point):
    """8-bit maps: NNAPI quantizes the bilinear weights to 1/255 steps, so the integer kernel may stray from
    the exact real result by up to 4 x 1/510 of the largest |value - zero point| (here under 2 steps)."""
    q = rng.integers(QMIN[code], QMAX[code] + 1, (1, 5, 6, 2))
    x_t = OperandType.tensor(code, q.shape, 0.05, zero_point)
    rois = random_boxes(4, 5, 6, 1.0)
    o_t = out_type(x_t, 4, (2, 3), scale=0.04, zero_point=zero_point // 2)
    (y,) = run_op(ALIGN, roi_inputs(ALIGN, q, x_t, rois, [0] * 4, (2, 3), (1.0, 1.0), (2, 2)), [o_t])
    real = loop_roi_align((q - zero_point) * 0.05, rois, [0] * 4, (2, 3), (1.0, 1.0), (2, 2))
    expected = np.clip(np.round(real / 0.04) + o_t.zero_point, QMIN[code], QMAX[code])
    assert_cts_close(y, expected, code, max_quant_diff=2)



def test_roi_align_quantized_on_whole_cells_is_exact():
    q = (np.arange(16, dtype=np.uint8) * 5 + 3).reshape(1, 4, 4, 1)  # real (q - 3) * 0.5
    x_t = OperandType.tensor(U8, q.shape, 0.5, 3)
    (y,) = run_op(ALIGN, roi_inputs(ALIGN, q, x_t, [[0, 0, 4, 4]], [0], (2, 2), (1.0, 1.0), (1, 1)),
                  [out_type(x_t, 1, (2, 2), scale=0.25, zero_point=1)])
    # real values at cells 5, 7, 13, 15: 12.5, 17.5, 32.5, 37.5; requantized: real / 0.25 + 1
    np.testing.assert_array_equal(y[0, :, :, 0], [[51, 71], [131, 151]])


def test_roi_align_quantized_multiplier_must_be_below_one():
    q = np.zeros((1, 2, 2, 1), np.uint8)
    x_t = OperandType.tensor(U8, q.shape, 1.0, 0)
    expect_error(ALIGN, roi_inputs(ALIGN, q, x_t, [[0, 0, 1, 1]], [0], (1, 1), (1.0, 1.0), (1, 1)),
                 [out_type(x_t, 1, (1, 1), scale=0.001, zero_point=0)], "below 1", result=ResultCode.OP_FAILED)


# -- ROI_POOLING ------------------------------------------------------------------------------------
@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("code", [F32, F16, U8, S8], ids=["f32", "f16", "u8", "s8"])
def test_roi_pooling_against_loops(code, nchw):
    quant = code in (U8, S8)
    shape = (2, 7, 6, 3)
    x_t0 = OperandType.tensor(code, shape, 0.1 if quant else 0.0, 5 if quant else 0)
    base = (rng.integers(QMIN[code], QMAX[code] + 1, shape) if quant else rng.standard_normal(shape)).astype(x_t0.dtype)
    rois = random_boxes(6, 7, 6, 4.0)
    batches = [1, 0, 0, 1, 1, 0]
    x = base.transpose(0, 3, 1, 2) if nchw else base
    x_t = OperandType.tensor(code, x.shape, x_t0.scale, x_t0.zero_point)
    (y,) = run_op(POOL, roi_inputs(POOL, x, x_t, rois, batches, (2, 3), (4.0, 4.0), nchw=nchw),
                  [out_type(x_t, 6, (2, 3), nchw)])
    expected = loop_roi_pooling(base, rois, batches, (2, 3), (4.0, 4.0), x_t.zero_point)
    np.testing.assert_array_equal(nhwc(y, nchw), expected)


def test_roi_pooling_aosp_vector_with_empty_region():
    """V1_2/roi_pooling.mod.py TEST 3: strides 2 (height) and 1 (width); the last box is one cell."""
    x = np.zeros((4, 4, 4, 1), np.float32)
    x[2, :, :, 0] = np.array([-10, -1, 4, -5, -8, -2, 9, 1, 7, -2, 3, -7, -2, 10, -3, 5]).reshape(4, 4)
    rois = [[1, 2, 2, 4], [0, 0, 3, 6], [1, 0, 2, 6], [0, 2, 3, 4], [0, 0, 0, 0]]
    x_t = OperandType.tensor(F32, x.shape)
    (y,) = run_op(POOL, roi_inputs(POOL, x, x_t, rois, [2] * 5, (2, 2), (2.0, 1.0)), [out_type(x_t, 5, (2, 2))])
    np.testing.assert_array_equal(y.reshape(-1), [-2, 9, -2, 3, -1, 9, 10, 5, -1, 9, 10, 3, -2, 9, 7, 3,
                                                  -10, -10, -10, -10])
    # V1_2/roi_pooling.mod.py TEST 1, last box: a cell past the map (bins empty) gives the zero point.
    q = np.full((1, 4, 4, 1), 200, np.uint8)
    q_t = OperandType.tensor(U8, q.shape, 0.25, 128)
    (y,) = run_op(POOL, roi_inputs(POOL, q, q_t, [[8, 8, 8, 8]], [0], (2, 2), (2.0, 2.0)), [out_type(q_t, 1, (2, 2))])
    np.testing.assert_array_equal(y.reshape(-1), [128, 128, 128, 128])


def test_zero_rois_give_an_empty_output():
    x = np.ones((1, 3, 2, 2), np.float32)  # NCHW, depth 3
    for op in (ALIGN, POOL):
        x_t = OperandType.tensor(F32, x.shape)
        inputs = roi_inputs(op, x, x_t, np.zeros((0, 4)), np.zeros(0, np.int32), (2, 2), (1.0, 1.0), nchw=True)
        (y,) = run_op_direct(op, inputs, [OperandType.tensor(F32, (0, 0, 0, 0))])
        assert y.shape == (0, 3, 2, 2)


# -- shapes and validation --------------------------------------------------------------------------
@pytest.mark.parametrize("op", [ALIGN, POOL], ids=["align", "pooling"])
def test_build_time_shape_inference(op):
    x_t = OperandType.tensor(F32, (2, 3, 5, 7))

    def build(roi_dims, nchw):
        inputs = roi_inputs(op, Input(), x_t, np.zeros((1, 4)), [0], (4, 6), (1.0, 1.0), nchw=nchw,
                            rois_t=OperandType.tensor(F32, roi_dims))
        inputs[1] = (inputs[1][0], Input())
        inputs[2] = (OperandType.tensor(I32, roi_dims[:1]), Input())
        return inferred_output_types(op, inputs, [OperandType.tensor(F32, (0, 0, 0, 0))])[0].dimensions

    assert build((9, 4), False) == (9, 4, 6, 7)
    assert build((9, 4), True) == (9, 3, 4, 6)
    assert build((0, 4), False) == (0, 0, 0, 0)  # the number of boxes is known at run time only


def valid(op, code=F32):
    quant = code in (U8, S8)
    x = np.zeros((1, 4, 4, 2), OperandType.tensor(code, ()).dtype)
    x_t = OperandType.tensor(code, x.shape, 0.5 if quant else 0.0, 0)
    return roi_inputs(op, x, x_t, [[0, 0, 2, 2]], [0], (2, 2), (1.0, 1.0)), [out_type(x_t, 1, (2, 2))]


@pytest.mark.parametrize("op", [ALIGN, POOL], ids=["align", "pooling"])
def test_rejects_bad_parameters(op):
    inputs, outs = valid(op)
    for i, value, words in ((3, 0, ("input 3 (", "output height")), (4, -2, ("input 4 (", "output width")),
                            (5, 0.0, ("input 5 (", "height stride")), (6, -1.0, ("input 6 (", "width stride"))):
        bad = list(inputs)
        bad[i] = (bad[i][0], value)
        expect_error(op, bad, outs, *words)
    if op == ALIGN:
        bad = list(inputs)
        bad[8] = (INT, -1)
        expect_error(op, bad, outs, "input 8 (", "sampling ratio")


@pytest.mark.parametrize("op", [ALIGN, POOL], ids=["align", "pooling"])
def test_rejects_bad_operands(op):
    inputs, outs = valid(op)
    bad = list(inputs)
    bad[2] = (OperandType.tensor(I32, (2,)), np.zeros(2, np.int32))
    expect_error(op, bad, outs, "input 2 (", "2 batch indices for 1 boxes")
    bad = list(inputs)
    bad[1] = (OperandType.tensor(F32, (1, 5)), np.zeros((1, 5)))
    expect_error(op, bad, outs, "input 1 (", "[num_rois, 4]")
    bad = list(inputs)
    bad[5] = (OperandType.scalar(OperandCode.FLOAT16), 1.0)
    expect_error(op, bad, outs, "input 5 (", "FLOAT16 not allowed")
    expect_error(op, inputs, [OperandType.tensor(F16, (1, 2, 2, 2))], "output 0 (", "TENSOR_FLOAT16")
    q_inputs, q_outs = valid(op, U8)
    bad = list(q_inputs)
    bad[1] = (OperandType.tensor(F32, (1, 4)), np.zeros((1, 4)))
    expect_error(op, bad, q_outs, "input 1 (", "expected TENSOR_QUANT16_ASYMM")
    bad[1] = (OperandType.tensor(Q16, (1, 4), 0.25, 0), np.zeros((1, 4)))
    expect_error(op, bad, q_outs, "input 1 (", "scale 0.125")


def test_roi_pooling_output_keeps_the_input_quantization():
    inputs, _ = valid(POOL, S8)
    expect_error(POOL, inputs, [OperandType.tensor(S8, (1, 2, 2, 2), 0.25, 0)], "output 0 (", "quantization")
    inputs, _ = valid(ALIGN, S8)  # ROI_ALIGN's output has its own scale
    run_op(ALIGN, inputs, [OperandType.tensor(S8, (1, 2, 2, 2), 0.25, 3)])


@pytest.mark.parametrize("op", [ALIGN, POOL], ids=["align", "pooling"])
@pytest.mark.parametrize("box, batch, words", [([0, 0, 5, 2], 0, ("input 1 (", "beyond the 4 x 4")),
                                               ([-1, 0, 2, 2], 0, ("input 1 (", "negative")),
                                               ([2, 0, 1, 2], 0, ("input 1 (", "x2 < x1")),
                                               ([0, 0, 2, 2], 1, ("input 2 (", "batch index 1"))])
def test_bad_boxes_fail_the_execution(op, box, batch, words):
    inputs, outs = valid(op)
    inputs[1] = (inputs[1][0], np.array([box], np.float32))
    inputs[2] = (inputs[2][0], np.array([batch], np.int32))
    with pytest.raises(MltsError) as info:
        run_op(op, inputs, outs)
    assert info.value.code == ResultCode.OP_FAILED
    assert all(w in str(info.value) for w in words), str(info.value)
