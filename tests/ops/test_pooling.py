"""AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D through the public API (run_op on nnapi-reference).

Float results are checked against onnx.reference (AveragePool with count_include_pad=0, MaxPool,
LpPool p=2 divided by the LpPool of ones to get NNAPI's root-mean-square), on NCHW data; quantized
results against a plain Python integer computation, within one step of dequantize-pool-requantize,
and signed against unsigned.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support.op_runner import expect_error, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import OperandCode, OperandType, OperationCode

F32 = OperandCode.TENSOR_FLOAT32
F16 = OperandCode.TENSOR_FLOAT16
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
AVG, MAX, L2 = OperationCode.AVERAGE_POOL_2D, OperationCode.MAX_POOL_2D, OperationCode.L2_POOL_2D
SAME, VALID = 1, 2
FUSE_RANGE = {0: (-math.inf, math.inf), 1: (0.0, math.inf), 2: (-1.0, 1.0), 3: (0.0, 6.0)}

rng = np.random.default_rng(1234)


def i32(v):
    return (OperandType.scalar(OperandCode.INT32), v)


def boolean(v):
    return (OperandType.scalar(OperandCode.BOOL), v)


def pool_inputs(x, t: OperandType, padding, stride, filt, fuse, nchw=None):
    """NNAPI input list: `padding` is (left, right, top, bottom) or an implicit code."""
    ins = [(t, x)]
    if isinstance(padding, tuple):
        ins += [i32(p) for p in padding]
    else:
        ins.append(i32(padding))
    ins += [i32(stride[0]), i32(stride[1]), i32(filt[0]), i32(filt[1]), i32(fuse)]
    if nchw is not None:
        ins.append(boolean(nchw))
    return ins


def out_size(size, f, s, head, tail):
    return (size + head + tail - f) // s + 1


def same_pads(size, f, s):
    out = -(-size // s)
    total = max(0, (out - 1) * s + f - size)
    return total // 2, total - total // 2


def resolve_pads(h, w, padding, stride, filt):
    """(left, right, top, bottom) of an explicit or implicit padding."""
    if isinstance(padding, tuple):
        return padding
    if padding == VALID:
        return (0, 0, 0, 0)
    return same_pads(w, filt[0], stride[0]) + same_pads(h, filt[1], stride[1])


# -- ONNX expectations (NCHW) -----------------------------------------------------------------------
def onnx_run(op_type, x, **attrs):
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, {"x": x.astype(np.float32)})[0]


def onnx_pool(kind, x_nchw, padding, stride, filt, fuse):
    attrs = dict(kernel_shape=[filt[1], filt[0]], strides=[stride[1], stride[0]])
    if isinstance(padding, tuple):
        left, right, top, bottom = padding
        attrs["pads"] = [top, left, bottom, right]
    else:
        attrs["auto_pad"] = "SAME_UPPER" if padding == SAME else "VALID"
    if kind == AVG:
        y = onnx_run("AveragePool", x_nchw, count_include_pad=0, **attrs)
    elif kind == MAX:
        y = onnx_run("MaxPool", x_nchw, **attrs)
    else:
        y = onnx_run("LpPool", x_nchw, p=2, **attrs) / onnx_run("LpPool", np.ones_like(x_nchw), p=2, **attrs)
    lo, hi = FUSE_RANGE[fuse]
    return np.clip(y, lo, hi)


def run_float(kind, code, x_nhwc, padding, stride, filt, fuse, nchw):
    x_nchw = x_nhwc.transpose(0, 3, 1, 2)
    expected_nchw = onnx_pool(kind, x_nchw.astype(np.float32), padding, stride, filt, fuse)
    expected = expected_nchw if nchw else expected_nchw.transpose(0, 2, 3, 1)
    data = x_nchw if nchw else x_nhwc
    t = OperandType.tensor(code, data.shape)
    out_t = OperandType.tensor(code, expected.shape)
    (y,) = run_op(kind, pool_inputs(data.astype(t.dtype), t, padding, stride, filt, fuse, nchw), [out_t])
    assert y.dtype == t.dtype and y.shape == expected.shape
    assert_cts_close(y, expected, code)


FLOAT_CASES = [
    # (H, W, C, padding, stride (w, h), filter (w, h))
    (5, 6, 3, (1, 1, 1, 1), (1, 1), (3, 3)),
    (7, 6, 2, (0, 1, 2, 0), (2, 2), (3, 3)),
    (6, 8, 2, (1, 0, 0, 1), (3, 2), (2, 3)),
    (7, 7, 4, SAME, (2, 2), (3, 3)),
    (6, 5, 2, SAME, (1, 2), (4, 2)),
    (7, 9, 3, VALID, (3, 2), (2, 3)),
    (7, 7, 8, VALID, (1, 1), (7, 7)),
]


@pytest.mark.parametrize("kind", [AVG, MAX, L2], ids=["avg", "max", "l2"])
@pytest.mark.parametrize("case", range(len(FLOAT_CASES)))
def test_float32_against_onnx(kind, case):
    h, w, c, padding, stride, filt = FLOAT_CASES[case]
    x = rng.standard_normal((2, h, w, c)).astype(np.float32) * 3
    run_float(kind, F32, x, padding, stride, filt, fuse=0, nchw=None if case % 2 else False)


@pytest.mark.parametrize("kind", [AVG, MAX, L2], ids=["avg", "max", "l2"])
@pytest.mark.parametrize("fuse", [1, 2, 3])
def test_float32_fused_activation(kind, fuse):
    x = rng.standard_normal((1, 6, 6, 3)).astype(np.float32) * 4
    if kind == L2:
        x = x * 0.3  # keep some RMS values below the RELU1/RELU6 caps
    run_float(kind, F32, x, SAME, (2, 2), (2, 2), fuse, nchw=False)


@pytest.mark.parametrize("kind", [AVG, MAX, L2], ids=["avg", "max", "l2"])
@pytest.mark.parametrize("padding", [(1, 0, 1, 2), SAME], ids=["explicit", "implicit"])
def test_float32_nchw(kind, padding):
    x = rng.standard_normal((2, 7, 5, 3)).astype(np.float32)
    run_float(kind, F32, x, padding, (2, 1), (3, 3), fuse=1, nchw=True)


@pytest.mark.parametrize("kind", [AVG, MAX, L2], ids=["avg", "max", "l2"])
@pytest.mark.parametrize("nchw", [False, True])
def test_float16_within_cts_tolerance(kind, nchw):
    x = (rng.standard_normal((1, 7, 6, 4)) * 2).astype(np.float16)
    run_float(kind, F16, x, SAME, (2, 2), (3, 3), fuse=0, nchw=nchw)
    run_float(kind, F16, x, (1, 1, 0, 2), (1, 2), (2, 3), fuse=3, nchw=nchw)


# -- quantized --------------------------------------------------------------------------------------
def plain_quant_pool(kind, q, pads, stride, filt, signed, act):
    """Python-int reference on NHWC data: TFLite's integer average (count = real elements only)."""
    left, right, top, bottom = pads
    n, h, w, c = q.shape
    oh, ow = out_size(h, filt[1], stride[1], top, bottom), out_size(w, filt[0], stride[0], left, right)
    out = np.zeros((n, oh, ow, c), dtype=np.int64)
    for b in range(n):
        for oy in range(oh):
            for ox in range(ow):
                for ch in range(c):
                    vals = [int(q[b, y, x, ch])
                            for y in range(oy * stride[1] - top, oy * stride[1] - top + filt[1])
                            for x in range(ox * stride[0] - left, ox * stride[0] - left + filt[0])
                            if 0 <= y < h and 0 <= x < w]
                    if kind == MAX:
                        r = max(vals)
                    else:
                        s, cnt = sum(vals), len(vals)
                        if signed:   # round half away from zero
                            r = (abs(s) + cnt // 2) // cnt * (1 if s > 0 else -1)
                        else:        # round half up
                            r = (s + cnt // 2) // cnt
                    out[b, oy, ox, ch] = min(max(r, act[0]), act[1])
    return out


def float_requant_pool(kind, q, scale, zp, pads, stride, filt, qmin, qmax):
    """Dequantize, pool in float, requantize (the 'real' answer the integer result approximates)."""
    real = (q.astype(np.float64) - zp) * scale
    left, right, top, bottom = pads
    y = onnx_pool(kind, real.transpose(0, 3, 1, 2), (left, right, top, bottom), stride, filt, 0)
    return np.clip(np.round(y.astype(np.float64).transpose(0, 2, 3, 1) / scale) + zp, qmin, qmax)


def quant_act_range(fuse, scale, zp, qmin, qmax):
    lo, hi = FUSE_RANGE[fuse]
    lo_q = qmin if lo == -math.inf else max(qmin, zp + int(np.floor(lo / scale + 0.5)))
    hi_q = qmax if hi == math.inf else min(qmax, zp + int(np.floor(hi / scale + 0.5)))
    return lo_q, hi_q


def run_quant(kind, code, q, scale, zp, padding, stride, filt, fuse):
    t = OperandType.tensor(code, q.shape, scale, zp)
    pads = resolve_pads(q.shape[1], q.shape[2], padding, stride, filt)
    oh = out_size(q.shape[1], filt[1], stride[1], pads[2], pads[3])
    ow = out_size(q.shape[2], filt[0], stride[0], pads[0], pads[1])
    out_t = OperandType.tensor(code, (q.shape[0], oh, ow, q.shape[3]), scale, zp)
    (y,) = run_op(kind, pool_inputs(q.astype(t.dtype), t, padding, stride, filt, fuse), [out_t])
    assert y.dtype == t.dtype
    return y, pads


QUANT_CASES = [
    ((1, 0, 1, 1), (1, 1), (3, 2)),
    (SAME, (2, 2), (3, 3)),
    (VALID, (2, 1), (2, 3)),
    (SAME, (1, 1), (5, 5)),
]


@pytest.mark.parametrize("kind", [AVG, MAX], ids=["avg", "max"])
@pytest.mark.parametrize("case", range(len(QUANT_CASES)))
@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
def test_quant8_against_plain_integers(kind, case, code):
    padding, stride, filt = QUANT_CASES[case]
    signed = code == S8
    qmin, qmax = (-128, 127) if signed else (0, 255)
    scale, zp = 0.125, (-5 if signed else 123)
    q = rng.integers(qmin, qmax + 1, size=(2, 6, 7, 3))
    y, pads = run_quant(kind, code, q, scale, zp, padding, stride, filt, fuse=0)
    expected = plain_quant_pool(kind, q, pads, stride, filt, signed, (qmin, qmax))
    np.testing.assert_array_equal(y.astype(np.int64), expected)
    assert_cts_close(y, float_requant_pool(kind, q, scale, zp, pads, stride, filt, qmin, qmax), code)


@pytest.mark.parametrize("kind", [AVG, MAX], ids=["avg", "max"])
@pytest.mark.parametrize("fuse", [1, 2, 3])
@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
def test_quant8_fused_activation(kind, fuse, code):
    signed = code == S8
    qmin, qmax = (-128, 127) if signed else (0, 255)
    scale, zp = 0.05, (-28 if signed else 100)   # RELU6 -> [zp, zp + 120], RELU1 -> [zp - 20, zp + 20]
    q = rng.integers(qmin, qmax + 1, size=(1, 5, 5, 4))
    y, pads = run_quant(kind, code, q, scale, zp, SAME, (1, 1), (2, 2), fuse)
    act = quant_act_range(fuse, scale, zp, qmin, qmax)
    assert act[0] > qmin or act[1] < qmax
    expected = plain_quant_pool(kind, q, pads, (1, 1), (2, 2), signed, act)
    np.testing.assert_array_equal(y.astype(np.int64), expected)


@pytest.mark.parametrize("kind", [AVG, MAX], ids=["avg", "max"])
def test_signed_and_unsigned_agree_up_to_offset(kind):
    qu = rng.integers(0, 256, size=(1, 7, 7, 5))
    yu, _ = run_quant(kind, U8, qu, 0.1, 140, SAME, (2, 2), (3, 3), fuse=1)
    ys, _ = run_quant(kind, S8, qu - 128, 0.1, 12, SAME, (2, 2), (3, 3), fuse=1)
    diff = np.abs(yu.astype(np.int64) - 128 - ys.astype(np.int64))
    assert diff.max() <= (0 if kind == MAX else 1)


def test_quantized_average_rounds_like_tflite():
    # One channel, windows of two: sums 3 (1.5 -> 2 for both), -3 (signed: -1.5 -> -2, away from zero).
    yu, _ = run_quant(AVG, U8, np.array([1, 2, 7, 8]).reshape(1, 1, 4, 1), 1.0, 0, VALID, (2, 1), (2, 1), 0)
    assert yu.ravel().tolist() == [2, 8]
    ys, _ = run_quant(AVG, S8, np.array([-1, -2, 3, 4]).reshape(1, 1, 4, 1), 1.0, 0, VALID, (2, 1), (2, 1), 0)
    assert ys.ravel().tolist() == [-2, 4]
    # Padding is not counted: a 3x3 SAME window in a corner averages 4 values.
    q = np.array([[10, 20], [30, 41]]).reshape(1, 2, 2, 1)
    y, _ = run_quant(AVG, U8, q, 1.0, 0, SAME, (1, 1), (3, 3), 0)
    assert y.ravel().tolist() == [25] * 4     # (101 + 2) // 4


def test_mobilenet_sized_pools_run():
    x = rng.standard_normal((1, 56, 56, 32)).astype(np.float32)
    run_float(MAX, F32, x, SAME, (2, 2), (3, 3), fuse=0, nchw=False)
    q = rng.integers(0, 256, size=(1, 7, 7, 256))
    t = OperandType.tensor(U8, q.shape, 0.02, 128)
    (y,) = run_op(AVG, pool_inputs(q.astype(np.uint8), t, VALID, (1, 1), (7, 7), 0),
                  [OperandType.tensor(U8, (1, 1, 1, 256), 0.02, 128)])
    sums = q.sum(axis=(1, 2)).ravel()
    np.testing.assert_array_equal(y.ravel(), (sums + 24) // 49)


# -- validation -------------------------------------------------------------------------------------
def f32_input(shape=(1, 4, 4, 2)):
    return OperandType.tensor(F32, shape), np.zeros(shape, np.float32)


def test_rejects_zero_filter_size():
    t, x = f32_input()
    expect_error(MAX, pool_inputs(x, t, SAME, (1, 1), (0, 2), 0), [OperandType.tensor(F32, (1, 4, 4, 2))],
                    "filter width")


def test_rejects_zero_stride():
    t, x = f32_input()
    expect_error(AVG, pool_inputs(x, t, (0, 0, 0, 0), (1, 0), (2, 2), 0),
                    [OperandType.tensor(F32, (1, 3, 3, 2))], "stride height")


def test_rejects_padding_not_smaller_than_filter():
    t, x = f32_input()
    expect_error(AVG, pool_inputs(x, t, (2, 0, 0, 0), (1, 1), (2, 2), 0),
                    [OperandType.tensor(F32, (1, 3, 5, 2))], "padding")


def test_rejects_negative_padding_and_bad_padding_code():
    t, x = f32_input()
    expect_error(MAX, pool_inputs(x, t, (0, -1, 0, 0), (1, 1), (2, 2), 0),
                    [OperandType.tensor(F32, (1, 3, 2, 2))], "padding")
    expect_error(MAX, pool_inputs(x, t, 3, (1, 1), (2, 2), 0), [OperandType.tensor(F32, (1, 4, 4, 2))],
                    "padding code")


def test_rejects_filter_larger_than_padded_input():
    t, x = f32_input()
    expect_error(AVG, pool_inputs(x, t, VALID, (1, 1), (5, 2), 0), [OperandType.tensor(F32, (1, 3, 1, 2))])


def test_rejects_wrong_input_count():
    t, x = f32_input()
    inputs = pool_inputs(x, t, (0, 0, 0, 0), (1, 1), (2, 2), 0)[:9]
    expect_error(MAX, inputs, [OperandType.tensor(F32, (1, 3, 3, 2))], "inputs")


def test_rejects_changed_quantization_on_max_pool_output():
    q = np.zeros((1, 4, 4, 1), np.uint8)
    t = OperandType.tensor(U8, q.shape, 0.5, 3)
    expect_error(MAX, pool_inputs(q, t, SAME, (1, 1), (2, 2), 0),
                    [OperandType.tensor(U8, q.shape, 0.25, 3)], "scale")
    expect_error(AVG, pool_inputs(q, t, SAME, (1, 1), (2, 2), 0),
                    [OperandType.tensor(U8, q.shape, 0.5, 4)], "zp")


def test_rejects_quantized_l2_pool_and_wrong_types():
    q = np.zeros((1, 4, 4, 1), np.uint8)
    t = OperandType.tensor(U8, q.shape, 0.5, 3)
    expect_error(L2, pool_inputs(q, t, SAME, (1, 1), (2, 2), 0), [OperandType.tensor(U8, q.shape, 0.5, 3)],
                    "TENSOR_QUANT8_ASYMM")
    t32, x = f32_input()
    expect_error(MAX, pool_inputs(x, t32, SAME, (1, 1), (2, 2), 0), [OperandType.tensor(F16, x.shape)])
    bad_fuse = pool_inputs(x, t32, SAME, (1, 1), (2, 2), 7)
    expect_error(MAX, bad_fuse, [OperandType.tensor(F32, x.shape)], "activation")


def test_rejects_rank_3_input():
    x = np.zeros((4, 4, 2), np.float32)
    t = OperandType.tensor(F32, x.shape)
    expect_error(MAX, pool_inputs(x, t, SAME, (1, 1), (2, 2), 0), [OperandType.tensor(F32, x.shape)], "rank")
