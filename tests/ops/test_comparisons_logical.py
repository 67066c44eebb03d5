"""EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL and LOGICAL_AND/OR/NOT.

Expectations come from onnx.reference.ReferenceEvaluator (Equal, Less, LessOrEqual, Greater,
GreaterOrEqual, Not(Equal), And, Or, Not), with numpy broadcasting. Quantized comparisons compare
real values, so the reference runs on the dequantized inputs (scales chosen so that dequantization
is exact), including inputs whose scales and zero points differ. Bool results must match exactly.
"""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import OperandCode, OperandType, OperationCode
from support.onnx_reference import onnx_eval
from support.op_runner import Const, expect_error, run_op
from support.tolerance import assert_cts_close

F32, F16, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_INT32
U8, S8, B8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, OperandCode.TENSOR_BOOL8
T = OperandType.tensor
O = OperationCode
COMPARISONS = {O.EQUAL: "Equal", O.NOT_EQUAL: None, O.LESS: "Less", O.LESS_EQUAL: "LessOrEqual",
               O.GREATER: "Greater", O.GREATER_EQUAL: "GreaterOrEqual"}
RNG = np.random.default_rng(7)


def onnx_compare(code, a, b):
    if code == O.NOT_EQUAL:
        return onnx_eval("Not", onnx_eval("Equal", a, b))
    return onnx_eval(COMPARISONS[code], a, b)


def compare(code, ta, a, tb, b, out_shape):
    return run_op(code, [(ta, a), (tb, b)], [T(B8, out_shape)])[0]


SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((1,), (2, 2, 2)), ((1, 2, 1, 3), (2, 1, 3))]


def sample(code, shape):
    if code in (F32, F16):
        return RNG.choice(np.array([-2.5, -1.0, 0.0, 0.5, 1.0, 3.0], np.float32), shape).astype(
            np.float16 if code == F16 else np.float32)
    if code == I32:
        return RNG.choice(np.array([-2**31, -5, 0, 1, 5, 2**31 - 1], np.int32), shape)
    if code == B8:
        return RNG.integers(0, 2, shape).astype(np.bool_)
    lo, hi = (0, 256) if code == U8 else (-128, 128)
    return RNG.integers(lo, hi, shape).astype(np.uint8 if code == U8 else np.int8)


@pytest.mark.parametrize("code", list(COMPARISONS), ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", [F32, F16, I32, B8], ids=["f32", "f16", "i32", "bool8"])
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_unquantized_against_onnx(code, dtype, shapes):
    sa, sb = shapes
    a, b = sample(dtype, sa), sample(dtype, sb)
    out_shape = np.broadcast_shapes(sa, sb)
    out = compare(code, T(dtype, sa), a, T(dtype, sb), b, out_shape)
    assert out.dtype == np.bool_ and out.shape == out_shape
    if dtype == B8:  # ONNX orders booleans only through integers
        expected = onnx_compare(code, a.astype(np.int32), b.astype(np.int32))
    else:
        expected = onnx_compare(code, a, b)
    assert_cts_close(out, expected, B8)


def dequant(q, scale, zp):
    return ((q.astype(np.int32) - zp).astype(np.float32) * np.float32(scale)).astype(np.float32)


@pytest.mark.parametrize("code", list(COMPARISONS), ids=lambda c: c.name)
@pytest.mark.parametrize("qtype", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("params", [((0.5, 10), (0.5, 10)), ((0.5, 10), (0.25, 0)), ((1.0, 0), (0.125, 3))])
def test_quantized_compares_real_values(code, qtype, params):
    (sa_, za), (sb_, zb) = params
    if qtype == S8:
        za, zb = za - 128, zb - 128
    shape_a, shape_b = (3, 1, 8), (4, 8)
    a, b = sample(qtype, shape_a), sample(qtype, shape_b)
    # Make sure some elements are equal in real value across the two different quantizations.
    b[0, :] = np.clip(np.round(dequant(a[0, 0], sa_, za) / sb_) + zb, *( (0, 255) if qtype == U8 else (-128, 127)))
    out = compare(code, T(qtype, shape_a, sa_, za), a, T(qtype, shape_b, sb_, zb), b, (3, 4, 8))
    assert_cts_close(out, onnx_compare(code, dequant(a, sa_, za), dequant(b, sb_, zb)), B8)


def test_quantized_signed_matches_unsigned():
    u1, u2 = sample(U8, (2, 6)), sample(U8, (2, 6))
    s1, s2 = ((u.astype(np.int16) - 128).astype(np.int8) for u in (u1, u2))
    for code in COMPARISONS:
        out_u = compare(code, T(U8, (2, 6), 0.5, 100), u1, T(U8, (2, 6), 0.25, 140), u2, (2, 6))
        out_s = compare(code, T(S8, (2, 6), 0.5, -28), s1, T(S8, (2, 6), 0.25, 12), s2, (2, 6))
        np.testing.assert_array_equal(out_s, out_u)


def test_nan_and_int32_extremes():
    a = np.array([np.nan, 1.0, np.inf, -np.inf], np.float32)
    b = np.array([np.nan, np.nan, np.inf, 0.0], np.float32)
    for code in COMPARISONS:
        assert_cts_close(compare(code, T(F32, (4,)), a, T(F32, (4,)), b, (4,)), onnx_compare(code, a, b), B8)
    # A constant operand and int32 limits.
    x = np.array([-2**31, 2**31 - 1, 0], np.int32)
    out = run_op(O.LESS, [(T(I32, (3,)), x), (T(I32, (1,)), Const(np.array([0], np.int32)))], [T(B8, (3,))])[0]
    np.testing.assert_array_equal(out, [True, False, False])


# -- logical ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("code,onnx_op", [(O.LOGICAL_AND, "And"), (O.LOGICAL_OR, "Or")], ids=["and", "or"])
@pytest.mark.parametrize("shapes", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_logical_binary_against_onnx(code, onnx_op, shapes):
    sa, sb = shapes
    a, b = sample(B8, sa), sample(B8, sb)
    out_shape = np.broadcast_shapes(sa, sb)
    out = run_op(code, [(T(B8, sa), a), (T(B8, sb), b)], [T(B8, out_shape)])[0]
    assert out.dtype == np.bool_
    assert_cts_close(out, onnx_eval(onnx_op, a, b), B8)


@pytest.mark.parametrize("shape", [(1,), (2, 3), (2, 1, 2, 3)])
def test_logical_not_against_onnx(shape):
    a = sample(B8, shape)
    out = run_op(O.LOGICAL_NOT, [(T(B8, shape), a)], [T(B8, shape)])[0]
    assert_cts_close(out, onnx_eval("Not", a), B8)


def test_logical_truth_tables():
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    t = T(B8, (4,))
    np.testing.assert_array_equal(run_op(O.LOGICAL_AND, [(t, a), (t, b)], [t])[0], [False, False, False, True])
    np.testing.assert_array_equal(run_op(O.LOGICAL_OR, [(t, a), (t, b)], [t])[0], [False, True, True, True])
    np.testing.assert_array_equal(run_op(O.LOGICAL_NOT, [(t, a)], [t])[0], [True, True, False, False])


# -- validation ------------------------------------------------------------------------------------
F = np.zeros((2, 2), np.float32)
B = np.zeros((2, 2), np.bool_)


@pytest.mark.parametrize("code", list(COMPARISONS), ids=lambda c: c.name)
def test_comparison_validation(code):
    expect_error(code, [(T(F32, (2, 2)), F), (T(F16, (2, 2)), F.astype(np.float16))], [T(B8, (2, 2))])
    expect_error(code, [(T(F32, (2, 2)), F), (T(F32, (2, 2)), F)], [T(F32, (2, 2))])
    expect_error(code, [(T(F32, (2, 2)), F)], [T(B8, (2, 2))])
    expect_error(code, [(T(OperandCode.TENSOR_QUANT16_SYMM, (2, 2), 0.5), F.astype(np.int16))] * 2,
                    [T(B8, (2, 2))])
    expect_error(code, [(T(F32, (2, 3)), np.zeros((2, 3), np.float32)), (T(F32, (2, 2)), F)], [T(B8, (2, 3))])


@pytest.mark.parametrize("code", [O.LOGICAL_AND, O.LOGICAL_OR], ids=["and", "or"])
def test_logical_binary_validation(code):
    expect_error(code, [(T(B8, (2, 2)), B), (T(F32, (2, 2)), F)], [T(B8, (2, 2))])
    expect_error(code, [(T(U8, (2, 2), 1.0, 0), B.astype(np.uint8))] * 2, [T(B8, (2, 2))])
    expect_error(code, [(T(B8, (2, 2)), B)] * 2, [T(F32, (2, 2))])
    expect_error(code, [(T(B8, (2, 2)), B)], [T(B8, (2, 2))])


def test_logical_not_validation():
    expect_error(O.LOGICAL_NOT, [(T(F32, (2, 2)), F)], [T(B8, (2, 2))])
    expect_error(O.LOGICAL_NOT, [(T(B8, (2, 2)), B)], [T(I32, (2, 2))])
    expect_error(O.LOGICAL_NOT, [(T(B8, (2, 2)), B)] * 2, [T(B8, (2, 2))])
