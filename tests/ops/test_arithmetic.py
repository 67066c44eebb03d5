"""ADD, SUB, MUL, DIV against independent expectations.

Float: onnx.reference.ReferenceEvaluator Add/Sub/Mul/Div followed by Relu / Clip for the fused
activation, with broadcasting (float16 computed from the same values in float32 and compared with the
float16 CTS tolerance). Quantized: a plain per-element Python-int transcription of NNAPI's kernels
(ADD/SUB: both inputs rescaled to twice the larger input scale after a 20-bit left shift; MUL: the
product of the offset inputs rescaled once), exact match expected, plus within one step of
dequantize -> float op -> requantize, and signed/unsigned agreement up to the 128 offset.
TENSOR_INT32: Python integers (DIV floors; NNAPI defines x / 0 as 0 in its CPU kernel).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode
from support.int_reference import multiplier_below_one, rescale
from support.onnx_reference import onnx_eval
from support.op_runner import Const, expect_error, run_op
from support.tolerance import assert_cts_close

F32, F16, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_INT32
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
T = OperandType.tensor
INT = OperandType.scalar(OperandCode.INT32)
O = OperationCode
ONNX_OP = {O.ADD: "Add", O.SUB: "Sub", O.MUL: "Mul", O.DIV: "Div"}
FUSES = list(FuseCode)
SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((1,), (2, 2, 3)), ((1, 2, 1, 3), (2, 2, 1))]
RNG = np.random.default_rng(11)


def binary(code, ta, a, tb, b, fuse, t_out):
    return run_op(code, [(ta, a), (tb, b), (INT, int(fuse))], [t_out])[0]


def onnx_with_activation(code, a, b, fuse):
    y = onnx_eval(ONNX_OP[code], a, b)
    if fuse == FuseCode.RELU:
        return onnx_eval("Relu", y)
    if fuse == FuseCode.RELU1:
        return onnx_eval("Clip", y, np.float32(-1), np.float32(1))
    if fuse == FuseCode.RELU6:
        return onnx_eval("Clip", y, np.float32(0), np.float32(6))
    return y


# -- float ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", list(ONNX_OP), ids=lambda c: c.name)
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("fuse", FUSES, ids=lambda f: f.name)
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_float_against_onnx(code, ftype, fuse, shapes):
    sa, sb = shapes
    dtype = np.float16 if ftype == F16 else np.float32
    a = RNG.uniform(-4, 4, sa).astype(dtype)
    b = RNG.uniform(-4, 4, sb).astype(dtype)
    if code == O.DIV:
        b = np.where(np.abs(b) < 0.25, dtype(0.5), b).astype(dtype)
    out_shape = np.broadcast_shapes(sa, sb)
    out = binary(code, T(ftype, sa), a, T(ftype, sb), b, fuse, T(ftype, out_shape))
    assert out.dtype == dtype and out.shape == out_shape
    expected = onnx_with_activation(code, a.astype(np.float32), b.astype(np.float32), fuse)
    assert_cts_close(out, expected, ftype)


def test_float_constant_operand_and_specials():
    a = np.array([1.0, -2.0, np.inf, 0.0], np.float32)
    b = Const(np.array([0.0], np.float32))
    with np.errstate(all="ignore"):
        expected = a / np.float32(0.0)
    out = run_op(O.DIV, [(T(F32, (4,)), a), (T(F32, (1,)), b), (INT, 0)], [T(F32, (4,))])[0]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("code", [O.ADD, O.SUB, O.MUL, O.DIV])
def test_float_overflow_and_invalid_are_ieee_results_not_warnings(code):
    """NNAPI's float kernels give inf and NaN; numpy's warnings (errors under -W error) must not escape,
    and the caller's numpy error state is left as it was."""
    big = np.float32(3e38)
    a = np.array([big, -big, np.inf, 0.0], np.float32)
    b = np.array([big if code != O.SUB else -big, -big if code != O.SUB else big, -np.inf if code != O.DIV else np.inf,
                  0.0], np.float32)
    with np.errstate(all="ignore"):
        expected = {O.ADD: a + b, O.SUB: a - b, O.MUL: a * b, O.DIV: a / b}[code]
    before = np.geterr()
    with np.errstate(all="raise"):  # the strictest a caller can set: ignored inside the kernel only
        out = run_op(code, [(T(F32, (4,)), a), (T(F32, (4,)), b), (INT, 0)], [T(F32, (4,))])[0]
        with pytest.raises(FloatingPointError):
            np.float32(3e38) * np.float32(10)  # the caller's own setting is back after the kernel
    np.testing.assert_array_equal(out, expected)
    assert np.geterr() == before


# -- int32 ----------------------------------------------------------------------------------------
def plain_int(code, a: int, b: int) -> int:
    if code == O.ADD:
        r = a + b
    elif code == O.SUB:
        r = a - b
    elif code == O.MUL:
        r = a * b
    else:
        r = 0 if b == 0 else a // b  # Python // floors
    return (r + 2**31) % 2**32 - 2**31  # int32 wrap-around


@pytest.mark.parametrize("code", list(ONNX_OP), ids=lambda c: c.name)
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_int32(code, shapes):
    sa, sb = shapes
    a = RNG.integers(-50, 50, sa).astype(np.int32)
    b = RNG.integers(-7, 8, sb).astype(np.int32)
    out_shape = np.broadcast_shapes(sa, sb)
    out = binary(code, T(I32, sa), a, T(I32, sb), b, FuseCode.NONE, T(I32, out_shape))
    assert out.dtype == np.int32
    ab, bb = np.broadcast_arrays(a, b)
    expected = np.array([plain_int(code, int(x), int(y)) for x, y in zip(ab.ravel(), bb.ravel())]).reshape(out_shape)
    np.testing.assert_array_equal(out, expected)
    if code != O.DIV:
        np.testing.assert_array_equal(out, onnx_eval(ONNX_OP[code], ab.copy(), bb.copy()))


def test_int32_div_floors_and_wraps():
    a = np.array([7, -7, 7, -7, 0, 5, -2**31], np.int32)
    b = np.array([2, 2, -2, -2, 3, 0, -1], np.int32)
    out = binary(O.DIV, T(I32, (7,)), a, T(I32, (7,)), b, 0, T(I32, (7,)))
    np.testing.assert_array_equal(out, [3, -4, -4, 3, 0, 0, -2**31])
    big = np.array([2**31 - 1, -2**31], np.int32)
    out = binary(O.ADD, T(I32, (2,)), big, T(I32, (2,)), np.array([1, -1], np.int32), 0, T(I32, (2,)))
    np.testing.assert_array_equal(out, [-2**31, 2**31 - 1])


# -- quantized: the plain integer reference ---------------------------------------------------------
def f32(v: float) -> float:
    return float(np.float32(v))


def act_range(fuse, scale, zp, qmin, qmax):
    def quantize(v):  # zero point + std::round(v / scale) with the division in float32
        r = float(np.float32(v) / np.float32(scale))
        return zp + int(math.floor(abs(r) + 0.5)) * (1 if r >= 0 else -1)
    if fuse == FuseCode.RELU:
        return max(qmin, quantize(0.0)), qmax
    if fuse == FuseCode.RELU1:
        return max(qmin, quantize(-1.0)), min(qmax, quantize(1.0))
    if fuse == FuseCode.RELU6:
        return max(qmin, quantize(0.0)), min(qmax, quantize(6.0))
    return qmin, qmax


def reference_quant(code, a, qa, b, qb, fuse, qo, qmin, qmax):
    (sa, za), (sb, zb), (so, zo) = qa, qb, qo
    sa, sb, so = f32(sa), f32(sb), f32(so)
    lo, hi = act_range(fuse, so, zo, qmin, qmax)
    ab, bb = np.broadcast_arrays(a, b)
    out = []
    for x, y in zip(ab.ravel().tolist(), bb.ravel().tolist()):
        if code == O.MUL:
            m, e = multiplier_below_one(f32(sa * sb) / so)
            r = rescale((x - za) * (y - zb), m, e) + zo
        else:
            twice = 2 * max(sa, sb)
            m1, e1 = multiplier_below_one(sa / twice)
            m2, e2 = multiplier_below_one(sb / twice)
            mo, eo = multiplier_below_one(twice / ((1 << 20) * so))
            if code == O.SUB:
                m2 = -m2
            total = rescale((x - za) << 20, m1, e1) + rescale((y - zb) << 20, m2, e2)
            r = rescale(total, mo, eo) + zo
        out.append(min(max(r, lo), hi))
    return np.array(out).reshape(ab.shape)


def float_requant(code, a, qa, b, qb, fuse, qo, qmin, qmax):
    ra = (a.astype(np.float64) - qa[1]) * qa[0]
    rb = (b.astype(np.float64) - qb[1]) * qb[0]
    y = {O.ADD: np.add, O.SUB: np.subtract, O.MUL: np.multiply}[code](ra, rb)
    y = {FuseCode.NONE: y, FuseCode.RELU: np.maximum(y, 0), FuseCode.RELU1: np.clip(y, -1, 1),
         FuseCode.RELU6: np.clip(y, 0, 6)}[fuse]
    return np.clip(np.round(y / qo[0]) + qo[1], qmin, qmax)


QUANT_PARAMS = [((0.5, 120), (0.5, 120), (1.0, 128)),
                ((0.1, 100), (0.25, 30), (0.2, 90)),
                ((0.03, 0), (0.07, 255), (0.05, 50)),
                ((1 / 16, 128), (0.5, 128), (0.75, 128))]


@pytest.mark.parametrize("code", [O.ADD, O.SUB, O.MUL], ids=lambda c: c.name)
@pytest.mark.parametrize("fuse", FUSES, ids=lambda f: f.name)
@pytest.mark.parametrize("params", QUANT_PARAMS, ids=["same", "mixed", "wide", "coarse"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 1, 5), (3, 1)), ((4,), (2, 2, 4))],
                         ids=["same", "bcast", "bcast2"])
def test_quant_against_integer_reference(code, fuse, params, shapes):
    qa, qb, qo = params
    if code == O.MUL and qo[0] <= qa[0] * qb[0]:
        qo = (qa[0] * qb[0] * 1.5, qo[1])
    sa, sb = shapes
    a = RNG.integers(0, 256, sa).astype(np.uint8)
    b = RNG.integers(0, 256, sb).astype(np.uint8)
    out_shape = np.broadcast_shapes(sa, sb)
    u = binary(code, T(U8, sa, *qa), a, T(U8, sb, *qb), b, fuse, T(U8, out_shape, *qo))
    assert u.dtype == np.uint8 and u.shape == out_shape
    np.testing.assert_array_equal(u, reference_quant(code, a.astype(int), qa, b.astype(int), qb, fuse, qo, 0, 255))
    assert_cts_close(u, float_requant(code, a, qa, b, qb, fuse, qo, 0, 255), U8)

    shift = lambda p: (p[0], p[1] - 128)  # noqa: E731
    sa_, sb_ = (a.astype(np.int16) - 128).astype(np.int8), (b.astype(np.int16) - 128).astype(np.int8)
    s = binary(code, T(S8, sa, *shift(qa)), sa_, T(S8, sb, *shift(qb)), sb_, fuse, T(S8, out_shape, *shift(qo)))
    assert s.dtype == np.int8
    np.testing.assert_array_equal(
        s, reference_quant(code, sa_.astype(int), shift(qa), sb_.astype(int), shift(qb), fuse, shift(qo), -128, 127))
    np.testing.assert_array_equal(s.astype(np.int16) + 128, u.astype(np.int16))


def test_quant_add_cts_vector():
    # NNAPI CTS add_quant8 style: equal scales, zero point 0.
    a = np.array([[1, 2], [3, 4]], np.uint8)
    b = np.array([[5, 6], [7, 8]], np.uint8)
    t = T(U8, (2, 2), 2.0, 0)
    np.testing.assert_array_equal(binary(O.ADD, t, a, t, b, 0, T(U8, (2, 2), 2.0, 0)), [[6, 8], [10, 12]])
    np.testing.assert_array_equal(binary(O.MUL, t, a, t, b, 0, T(U8, (2, 2), 4.0 * 2, 0)), [[3, 6], [11, 16]])


# -- validation ------------------------------------------------------------------------------------
F = np.zeros((2, 2), np.float32)
Q = np.zeros((2, 2), np.uint8)


@pytest.mark.parametrize("code", list(ONNX_OP), ids=lambda c: c.name)
def test_validation(code):
    tf = T(F32, (2, 2))
    expect_error(code, [(tf, F), (tf, F)], [tf])
    expect_error(code, [(tf, F), (T(F16, (2, 2)), F.astype(np.float16)), (INT, 0)], [tf])
    expect_error(code, [(tf, F), (tf, F), (INT, 0)], [T(F16, (2, 2))])
    expect_error(code, [(tf, F), (tf, F), (INT, 7)], [tf])
    expect_error(code, [(tf, F), (T(F32, (3, 2)), np.zeros((3, 2), np.float32)), (INT, 0)], [tf])
    five = T(F32, (1, 1, 1, 2, 2))
    expect_error(code, [(five, F.reshape(five.dimensions)), (tf, F), (INT, 0)], [five])
    ti = T(I32, (2, 2))
    expect_error(code, [(ti, F.astype(np.int32)), (ti, F.astype(np.int32)), (INT, 1)], [ti])
    tb = T(OperandCode.TENSOR_BOOL8, (2, 2))
    expect_error(code, [(tb, F.astype(bool)), (tb, F.astype(bool)), (INT, 0)], [tb])


def test_quant_specific_validation():
    tq = T(U8, (2, 2), 0.5, 0)
    expect_error(O.DIV, [(tq, Q), (tq, Q), (INT, 0)], [tq])
    # MUL needs output scale > input1 scale * input2 scale.
    expect_error(O.MUL, [(tq, Q), (tq, Q), (INT, 0)], [T(U8, (2, 2), 0.25, 0)])
    ts = T(S8, (2, 2), 0.5, 0)
    expect_error(O.MUL, [(ts, Q.astype(np.int8)), (ts, Q.astype(np.int8)), (INT, 0)], [T(S8, (2, 2), 0.2, 0)])
    expect_error(O.ADD, [(tq, Q), (ts, Q.astype(np.int8)), (INT, 0)], [tq])
