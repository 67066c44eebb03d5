"""MAXIMUM, MINIMUM against independent expectations.

Float and int32: onnx.reference.ReferenceEvaluator Max / Min with broadcasting (float16 compared with
the float16 CTS tolerance, int32 exactly), plus hand-written std::max / std::min cases for NaN and
signed zeros. Quantized (uint8 and int8, inputs and output each with their own scale and zero
point): exact match with a per-element Python transcription of NNAPI's requantize (the real value
(q - zp) * scale in float32, divided by the output scale in double, plus the output zero point,
clamped, rounded half away from zero) followed by max / min, and within one step of dequantize ->
float max / min -> requantize; plus the AOSP spec examples (V1_2/maximum.mod.py, minimum.mod.py,
V1_3/maximum_quant8_signed.mod.py, minimum_quant8_signed.mod.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import OperandType, OperationCode
from support.int_reference import requantize_ref
from support.onnx_reference import onnx_eval
from support.op_data import B8, F16, F32, I32, S8, U8
from support.op_data import QUANT_RANGE as RANGE
from support.op_runner import Const, Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

T = OperandType.tensor
O = OperationCode
ONNX_OP = {O.MAXIMUM: "Max", O.MINIMUM: "Min"}
OPS = list(ONNX_OP)
SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((1,), (2, 2, 3)), ((1, 2, 1, 3, 1), (2, 1, 1, 2))]
DTYPE = {U8: np.uint8, S8: np.int8}
RNG = np.random.default_rng(5)


def binary(code, ta, a, tb, b, t_out):
    return run_op(code, [(ta, a), (tb, b)], [t_out])[0]


# -- float and int32 --------------------------------------------------------------------------------
@pytest.mark.parametrize("code", OPS, ids=lambda c: c.name)
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_float_against_onnx(code, ftype, shapes):
    sa, sb = shapes
    dtype = np.float16 if ftype == F16 else np.float32
    a = RNG.uniform(-5, 5, sa).astype(dtype)
    b = RNG.uniform(-5, 5, sb).astype(dtype)
    out_shape = np.broadcast_shapes(sa, sb)
    out = binary(code, T(ftype, sa), a, T(ftype, sb), b, T(ftype, out_shape))
    assert out.dtype == dtype and out.shape == out_shape
    assert_cts_close(out, onnx_eval(ONNX_OP[code], a, b), ftype)
    np.testing.assert_array_equal(out, onnx_eval(ONNX_OP[code], a, b))  # a max / min is exact


@pytest.mark.parametrize("code", OPS, ids=lambda c: c.name)
@pytest.mark.parametrize("shapes", SHAPES[:4], ids=lambda s: f"{s[0]}x{s[1]}")
def test_int32_against_onnx(code, shapes):
    sa, sb = shapes
    a = RNG.integers(-2**31, 2**31, sa, dtype=np.int64).astype(np.int32)
    b = RNG.integers(-2**31, 2**31, sb, dtype=np.int64).astype(np.int32)
    out_shape = np.broadcast_shapes(sa, sb)
    out = binary(code, T(I32, sa), a, T(I32, sb), b, T(I32, out_shape))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, onnx_eval(ONNX_OP[code], a, b))


def test_float_nan_and_signed_zero_follow_std_max_min():
    """std::max(a, b) is (a < b) ? b : a and std::min(a, b) is (b < a) ? b : a: a NaN in the first input
    comes out, one in the second does not, and of two equal zeros the first is returned."""
    nan = np.nan
    a = np.array([nan, 1.0, -0.0, 0.0, -np.inf], np.float32)
    b = np.array([1.0, nan, 0.0, -0.0, np.inf], np.float32)
    t = T(F32, (5,))
    with np.errstate(all="raise"):
        mx = binary(O.MAXIMUM, t, a, t, b, t)
        mn = binary(O.MINIMUM, t, a, t, b, t)
    np.testing.assert_array_equal(mx, [nan, 1.0, -0.0, 0.0, np.inf])
    np.testing.assert_array_equal(mn, [nan, 1.0, -0.0, 0.0, -np.inf])
    assert np.signbit(mx[2]) and not np.signbit(mx[3])
    assert np.signbit(mn[2]) and not np.signbit(mn[3])


def test_constant_second_input():
    a = np.array([[1.0, -2.0], [3.0, -4.0]], np.float32)
    out = run_op(O.MAXIMUM, [(T(F32, (2, 2)), a), (T(F32, (1,)), Const(np.array([0.5], np.float32)))],
                 [T(F32, (2, 2))])[0]
    np.testing.assert_array_equal(out, [[1.0, 0.5], [3.0, 0.5]])


# -- quantized --------------------------------------------------------------------------------------
def reference_quant(code, a, qa, b, qb, qo, qtype):
    lo, hi = RANGE[qtype]
    pick = max if code == O.MAXIMUM else min
    ab, bb = np.broadcast_arrays(a, b)
    out = [pick(requantize_ref(x, *qa, *qo, lo, hi), requantize_ref(y, *qb, *qo, lo, hi))
           for x, y in zip(ab.ravel().tolist(), bb.ravel().tolist())]
    return np.array(out).reshape(ab.shape)


def float_requant(code, a, qa, b, qb, qo, qtype):
    ra = (a.astype(np.float64) - qa[1]) * qa[0]
    rb = (b.astype(np.float64) - qb[1]) * qb[0]
    y = np.maximum(ra, rb) if code == O.MAXIMUM else np.minimum(ra, rb)
    return np.clip(np.round(y / qo[0]) + qo[1], *RANGE[qtype])


QUANT_PARAMS = {  # (input 0, input 1, output) (scale, zero point), unsigned zero points
    "same": ((0.5, 128), (0.5, 128), (0.5, 128)),
    "aosp": ((0.5, 127), (1.0, 100), (2.0, 80)),
    "fine_out": ((0.1, 100), (0.3, 30), (0.05, 140)),
    "odd": ((0.0173, 3), (0.0411, 250), (0.0297, 77)),
}


@pytest.mark.parametrize("code", OPS, ids=lambda c: c.name)
@pytest.mark.parametrize("qtype", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("params", list(QUANT_PARAMS), ids=str)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 1, 5), (3, 1))], ids=["same", "bcast"])
def test_quant_against_integer_reference(code, qtype, params, shapes):
    shift = 0 if qtype == U8 else 128
    qa, qb, qo = ((s, z - shift) for s, z in QUANT_PARAMS[params])
    sa, sb = shapes
    lo, hi = RANGE[qtype]
    a = RNG.integers(lo, hi + 1, sa).astype(DTYPE[qtype])
    b = RNG.integers(lo, hi + 1, sb).astype(DTYPE[qtype])
    out_shape = np.broadcast_shapes(sa, sb)
    out = binary(code, T(qtype, sa, *qa), a, T(qtype, sb, *qb), b, T(qtype, out_shape, *qo))
    assert out.dtype == DTYPE[qtype] and out.shape == out_shape
    np.testing.assert_array_equal(out, reference_quant(code, a.astype(int), qa, b.astype(int), qb, qo, qtype))
    assert_cts_close(out, float_requant(code, a, qa, b, qb, qo, qtype), qtype)


AOSP_SIMPLE = ([1.0, 0.0, -1.0, 11.0, -2.0, -1.44], [-1.0, 0.0, 1.0, 12.0, -3.0, -1.43])
AOSP_BROADCAST = ([1.0, 0.0, -1.0, -2.0, -1.44, 11.0], [0.5, 2.0])


@pytest.mark.parametrize("code", OPS, ids=lambda c: c.name)
@pytest.mark.parametrize("qtype, zps", [(U8, (127, 100, 80)), (S8, (-1, -28, -48))], ids=["u8", "s8"])
def test_aosp_spec_quant8_examples(code, qtype, zps):
    """V1_2/maximum.mod.py, minimum.mod.py and their V1_3 quant8_signed variants: float data quantized
    with input scales 0.5 and 1.0 and output scale 2.0 (CTS tolerance: one step)."""
    lo, hi = RANGE[qtype]
    za, zb, zo = zps

    def quantize(values, scale, zp):
        return np.clip(np.round(np.array(values) / scale) + zp, lo, hi).astype(DTYPE[qtype])

    for (x, y), sb in ((AOSP_SIMPLE, (3, 1, 2)), (AOSP_BROADCAST, (2,))):
        fa, fb = np.array(x).reshape(3, 1, 2), np.array(y).reshape(sb)
        expected = np.maximum(fa, fb) if code == O.MAXIMUM else np.minimum(fa, fb)
        out = binary(code, T(qtype, (3, 1, 2), 0.5, za), quantize(fa, 0.5, za), T(qtype, sb, 1.0, zb),
                     quantize(fb, 1.0, zb), T(qtype, (3, 1, 2), 2.0, zo))
        assert_cts_close(out, quantize(expected, 2.0, zo), qtype)


@pytest.mark.parametrize("qtype, zp, a, b, expected_max, expected_min",
                         [(U8, 128, [60, 128], [128, 200], [128, 255], [0, 128]),
                          (S8, 0, [-68, 0], [0, 72], [0, 127], [-128, 0])], ids=["u8", "s8"])
def test_aosp_spec_overflow_example(qtype, zp, a, b, expected_max, expected_min):
    """The "overflow" examples of V1_2/maximum.mod.py / minimum.mod.py (and quant8_signed): the inputs
    requantized to the finer output scale saturate at the type's bounds."""
    t_in, t_out = T(qtype, (2,), 1.0, zp), T(qtype, (2,), 0.5, zp)
    a, b = np.array(a, DTYPE[qtype]), np.array(b, DTYPE[qtype])
    np.testing.assert_array_equal(binary(O.MAXIMUM, t_in, a, t_in, b, t_out), expected_max)
    np.testing.assert_array_equal(binary(O.MINIMUM, t_in, a, t_in, b, t_out), expected_min)


def test_requantize_rounds_half_away_from_zero():
    # scale 1.0 -> 2.0: (q - zp) / 2 lands on .5 for odd offsets; halves go away from zero.
    t_in, t_out = T(S8, (4,), 1.0, 0), T(S8, (4,), 2.0, 0)
    a = np.array([1, -1, 3, -3], np.int8)
    out = binary(O.MAXIMUM, t_in, a, t_in, np.full(4, -128, np.int8), t_out)
    np.testing.assert_array_equal(out, [1, -1, 2, -2])


# -- shapes and validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("code", OPS, ids=lambda c: c.name)
def test_shape_inference_at_build_and_run_time(code):
    (out,) = inferred_output_types(code, [(T(F32, (2, 1, 3)), Input()), (T(F32, (4, 1)), Input())], [T(F32, (0, 0, 0))])
    assert out.dimensions == (2, 4, 3)
    # An unknown input dimension leaves the output to be inferred when the inputs are known.
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    b = np.array([0.0, 1.0, 5.0], np.float32)
    inputs = [(T(F32, (0, 3)), a), (T(F32, (3,)), b)]
    assert inferred_output_types(code, inputs, [T(F32, (0, 0))])[0].dimensions == (0, 0)
    (y,) = run_op(code, inputs, [T(F32, (0, 0))])
    np.testing.assert_array_equal(y, onnx_eval(ONNX_OP[code], a, b))


F = np.zeros((2, 2), np.float32)


@pytest.mark.parametrize("code", OPS, ids=lambda c: c.name)
def test_validation(code):
    tf = T(F32, (2, 2))
    expect_error(code, [(tf, F)], [tf], "expected 2 inputs")
    expect_error(code, [(tf, F), (tf, F), (tf, F)], [tf], "expected 2 inputs")
    expect_error(code, [(tf, F), (T(F16, (2, 2)), F.astype(np.float16))], [tf], "input 1", "TENSOR_FLOAT16")
    expect_error(code, [(tf, F), (tf, F)], [T(F16, (2, 2))], "output 0")
    tb = T(B8, (2, 2))
    expect_error(code, [(tb, F.astype(bool)), (tb, F.astype(bool))], [tb], "input 0", "TENSOR_BOOL8")
    expect_error(code, [(tf, F), (T(F32, (3, 2)), np.zeros((3, 2), np.float32))], [tf], "broadcast")
    tq, ts = T(U8, (2, 2), 0.5, 0), T(S8, (2, 2), 0.5, 0)
    expect_error(code, [(tq, F.astype(np.uint8)), (ts, F.astype(np.int8))], [tq], "input 1")
    expect_error(code, [(tq, F.astype(np.uint8)), (tq, F.astype(np.uint8))], [ts], "output 0")
