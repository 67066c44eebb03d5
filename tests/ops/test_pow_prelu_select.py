"""POW, PRELU, SELECT against independent expectations.

Float: onnx.reference.ReferenceEvaluator Pow, PRelu and Where with broadcasting (float16 computed
from the same values in float32, compared with the float16 CTS tolerance), int32 SELECT exactly,
hand-computed IEEE special cases of POW. Quantized PRELU: exact match with a plain Python-int
transcription of NNAPI's kernel (two multipliers from the float32 scales: input/output for x >= 0,
input x alpha/output for x < 0, gemmlowp rounding), and within one step of dequantize -> float
PRELU -> requantize. Quantized SELECT: exact match with a per-element transcription of NNAPI's
requantize of both inputs to the output's scale and zero point, and within one step of the float
route. AOSP spec examples: V1_2/pow.mod.py, V1_3/pow_same_shape.mod.py, V1_2/prelu.mod.py,
V1_3/prelu_quant8_signed.mod.py, V1_2/select_v1_2.mod.py, V1_3/select_quant8_signed.mod.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from mlts.runtime import MltsError, OperandType, OperationCode, ResultCode
from support.int_reference import quantize_multiplier_ref, requantize_ref, rescale
from support.onnx_reference import onnx_eval
from support.op_data import B8, F16, F32, I32, S8, U8
from support.op_data import QUANT_RANGE as RANGE
from support.op_runner import Const, Input, expect_error, inferred_output_types, run_op
from support.tolerance import assert_cts_close

T = OperandType.tensor
O = OperationCode
DTYPE = {U8: np.uint8, S8: np.int8, F32: np.float32, F16: np.float16, I32: np.int32}
RNG = np.random.default_rng(17)


def run1(code, inputs, t_out):
    return run_op(code, inputs, [t_out])[0]


def inferred_dimensions(code, in_types, out_type):
    return inferred_output_types(code, [(t, Input()) for t in in_types], [out_type])[0].dimensions


# -- POW --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (1,)), ((3, 1, 2), (4, 1)), ((2,), (2, 2, 1, 2))],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_pow_against_onnx(ftype, shapes):
    sb, se = shapes
    base = RNG.uniform(0.1, 4, sb).astype(DTYPE[ftype])
    exponent = RNG.uniform(-3, 3, se).astype(DTYPE[ftype])
    out_shape = np.broadcast_shapes(sb, se)
    out = run1(O.POW, [(T(ftype, sb), base), (T(ftype, se), exponent)], T(ftype, out_shape))
    assert out.dtype == DTYPE[ftype] and out.shape == out_shape
    assert_cts_close(out, onnx_eval("Pow", base.astype(np.float32), exponent.astype(np.float32)), ftype)


@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_pow_aosp_spec_examples(ftype):
    """V1_2/pow.mod.py (base {2, 1} = [2, 3] against three exponent shapes) and V1_3/pow_same_shape.mod.py."""
    dt = DTYPE[ftype]
    base = np.array([[2.0], [3.0]], dt)
    cases = [((1,), [2.0], (2, 1), [4.0, 9.0]),
             ((1, 2), [2.0, 3.0], (2, 2), [4.0, 8.0, 9.0, 27.0]),
             ((3, 1, 2), [0.0, 0.5, 1.0, 2.0, 3.0, 4.0], (3, 2, 2),
              [1.0, 2 ** 0.5, 1.0, 3 ** 0.5, 2.0, 4.0, 3.0, 9.0, 8.0, 16.0, 27.0, 81.0])]
    for e_shape, e_data, o_shape, expected in cases:
        out = run1(O.POW, [(T(ftype, (2, 1)), base), (T(ftype, e_shape), np.array(e_data, dt).reshape(e_shape))],
                   T(ftype, o_shape))
        assert_cts_close(out, np.array(expected).reshape(o_shape), ftype)
    b, e = [1, 2, 3, 4, 5, 6], [4, 3, 2, 1, 0.5, 0]
    out = run1(O.POW, [(T(ftype, (3, 2, 1)), np.array(b, dt).reshape(3, 2, 1)),
                       (T(ftype, (3, 2, 1)), np.array(e, dt).reshape(3, 2, 1))], T(ftype, (3, 2, 1)))
    assert_cts_close(out, np.array([x ** y for x, y in zip(b, e)]).reshape(3, 2, 1), ftype)


def test_pow_ieee_special_values_without_warnings():
    base = np.array([-8.0, -2.0, -2.0, 0.0, 0.0, np.nan, 1.0, 2.0, 10.0], np.float32)
    exponent = np.array([1 / 3, 3.0, 2.0, -1.0, 0.0, 0.0, np.nan, -np.inf, 100.0], np.float32)
    t = T(F32, (9,))
    with np.errstate(all="raise"):
        out = run1(O.POW, [(t, base), (t, exponent)], t)
    np.testing.assert_array_equal(out, [np.nan, -8.0, 4.0, np.inf, 1.0, 1.0, 1.0, 0.0, np.inf])


def test_pow_validation_and_shapes():
    tf = T(F32, (2, 2))
    F = np.ones((2, 2), np.float32)
    expect_error(O.POW, [(tf, F)], [tf], "expected 2 inputs")
    expect_error(O.POW, [(T(I32, (2, 2)), F.astype(np.int32))] * 2, [T(I32, (2, 2))], "input 0", "TENSOR_INT32")
    tq = T(U8, (2, 2), 0.5, 0)
    expect_error(O.POW, [(tq, F.astype(np.uint8))] * 2, [tq], "input 0")
    expect_error(O.POW, [(tf, F), (T(F16, (2, 2)), F.astype(np.float16))], [tf], "input 1")
    expect_error(O.POW, [(tf, F), (tf, F)], [T(F16, (2, 2))], "output 0")
    expect_error(O.POW, [(tf, F), (T(F32, (3,)), np.ones(3, np.float32))], [tf], "broadcast")
    assert inferred_dimensions(O.POW, [T(F32, (3, 1)), T(F32, (2, 1, 4))], T(F32, (0, 0, 0))) == (2, 3, 4)


# -- PRELU ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("shapes", [((1, 2, 2, 3), (1, 1, 3)), ((2, 3), (2, 3)), ((4, 5), (1,)), ((2, 3, 4), (3, 1))],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_prelu_float_against_onnx(ftype, shapes):
    sx, sa = shapes
    x = RNG.uniform(-4, 4, sx).astype(DTYPE[ftype])
    alpha = RNG.uniform(-1, 2, sa).astype(DTYPE[ftype])
    out = run1(O.PRELU, [(T(ftype, sx), x), (T(ftype, sa), Const(alpha))], T(ftype, sx))
    assert out.dtype == DTYPE[ftype] and out.shape == sx
    assert_cts_close(out, onnx_eval("PRelu", x.astype(np.float32), alpha.astype(np.float32)), ftype)


def test_prelu_output_takes_the_broadcast_shape():
    """NNAPI's kernel broadcasts input and alpha both ways (calculateBroadcastedShape)."""
    x = np.array([[-1.0], [2.0]], np.float32)
    alpha = np.array([0.5, 2.0, -1.0], np.float32)
    out = run1(O.PRELU, [(T(F32, (2, 1)), x), (T(F32, (3,)), alpha)], T(F32, (2, 3)))
    np.testing.assert_array_equal(out, [[-0.5, -2.0, 1.0], [2.0, 2.0, 2.0]])
    assert inferred_dimensions(O.PRELU, [T(F32, (2, 1)), T(F32, (3,))], T(F32, (0, 0))) == (2, 3)


def test_prelu_float_special_values_without_warnings():
    x = np.array([-3e38, 3e38, -0.0, np.nan, -np.inf, -1.0], np.float32)
    alpha = np.array([2.0, 2.0, 5.0, 1.0, 0.0, np.inf], np.float32)
    t = T(F32, (6,))
    with np.errstate(all="raise"):
        out = run1(O.PRELU, [(t, x), (t, alpha)], t)
    # x >= 0 keeps x (so -0.0 stays -0.0); otherwise the float32 product x * alpha.
    np.testing.assert_array_equal(out, np.array([-np.inf, 3e38, -0.0, np.nan, np.nan, -np.inf], np.float32))
    assert np.signbit(out[2])


def prelu_ref(x, qx, alpha, qa, qo, qtype):
    """Per element: x - zp >= 0 ? rescale(x - zp) : rescale((x - zp) * (alpha - zp_alpha)), plus zp_out."""
    (sx, zx), (sa, za), (so, zo) = qx, qa, qo
    f = np.float32
    pos = quantize_multiplier_ref(float(f(sx) / f(so)))            # float32 division
    neg = quantize_multiplier_ref(float(f(sx) * f(sa)) / float(f(so)))  # float32 product, double division
    lo, hi = RANGE[qtype]
    xb, ab = np.broadcast_arrays(x, alpha)
    out = []
    for v, a in zip(xb.ravel().tolist(), ab.ravel().tolist()):
        c = v - zx
        r = rescale(c, *pos) if c >= 0 else rescale(c * (a - za), *neg)
        out.append(min(max(r + zo, lo), hi))
    return np.array(out).reshape(xb.shape)


def prelu_float_requant(x, qx, alpha, qa, qo, qtype):
    rx = (x.astype(np.float64) - qx[1]) * qx[0]
    ra = (alpha.astype(np.float64) - qa[1]) * qa[0]
    y = np.where(rx >= 0, rx, rx * ra)
    return np.clip(np.round(y / qo[0]) + qo[1], *RANGE[qtype])


PRELU_PARAMS = {  # input, alpha, output (scale, unsigned zero point): the four cases of V1_2/prelu.mod.py
    "gt": ((0.25, 128), (0.25, 50), (0.5, 120)),
    "eq1": ((0.25, 128), (0.25, 50), (0.25, 120)),
    "eq2": ((0.25, 128), (0.5, 50), (0.125, 120)),
    "lt": ((0.25, 128), (0.5, 50), (0.1, 120)),
    "odd": ((0.0371, 97), (0.0123, 140), (0.0519, 30)),
}


@pytest.mark.parametrize("qtype", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("params", list(PRELU_PARAMS), ids=str)
@pytest.mark.parametrize("shapes", [((2, 3, 4), (4,)), ((3, 5), (3, 5))], ids=["bcast", "same"])
def test_prelu_quant_against_integer_reference(qtype, params, shapes):
    shift = 0 if qtype == U8 else 128
    qx, qa, qo = ((s, z - shift) for s, z in PRELU_PARAMS[params])
    sx, sa = shapes
    lo, hi = RANGE[qtype]
    x = RNG.integers(lo, hi + 1, sx).astype(DTYPE[qtype])
    alpha = RNG.integers(lo, hi + 1, sa).astype(DTYPE[qtype])
    out = run1(O.PRELU, [(T(qtype, sx, *qx), x), (T(qtype, sa, *qa), alpha)], T(qtype, sx, *qo))
    assert out.dtype == DTYPE[qtype] and out.shape == sx
    np.testing.assert_array_equal(out, prelu_ref(x.astype(int), qx, alpha.astype(int), qa, qo, qtype))
    assert_cts_close(out, prelu_float_requant(x, qx, alpha, qa, qo, qtype), qtype)


@pytest.mark.parametrize("qtype", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("params", ["gt", "eq1", "eq2", "lt"])
def test_prelu_aosp_spec_examples(qtype, params):
    """V1_2/prelu.mod.py and V1_3/prelu_quant8_signed.mod.py: alpha {1, 1, 3} = [0, 1, 2] (a constant)."""
    shift = 0 if qtype == U8 else 128
    (sx, zx), (sa, za), (so, zo) = ((s, z - shift) for s, z in PRELU_PARAMS[params])
    x = np.array([0, 0, 0, 1, 1, 1, -1, -1, -1, -2, -2, -2], np.float64).reshape(1, 2, 2, 3)
    expected = np.array([0, 0, 0, 1, 1, 1, 0, -1, -2, 0, -2, -4], np.float64).reshape(1, 2, 2, 3)
    alpha = np.array([0, 1, 2], np.float64).reshape(1, 1, 3)
    lo, hi = RANGE[qtype]

    def quantize(v, s, z):
        return np.clip(np.round(v / s) + z, lo, hi).astype(DTYPE[qtype])

    out = run1(O.PRELU, [(T(qtype, x.shape, sx, zx), quantize(x, sx, zx)),
                         (T(qtype, alpha.shape, sa, za), Const(quantize(alpha, sa, za)))], T(qtype, x.shape, so, zo))
    assert_cts_close(out, quantize(expected, so, zo), qtype, max_quant_diff=0)


def test_prelu_validation():
    tf = T(F32, (2, 2))
    F = np.ones((2, 2), np.float32)
    expect_error(O.PRELU, [(tf, F)], [tf], "expected 2 inputs")
    expect_error(O.PRELU, [(T(I32, (2, 2)), F.astype(np.int32))] * 2, [T(I32, (2, 2))], "input 0", "TENSOR_INT32")
    expect_error(O.PRELU, [(tf, F), (T(F16, (2, 2)), F.astype(np.float16))], [tf], "input 1")
    tq, ts = T(U8, (2, 2), 0.5, 0), T(S8, (2, 2), 0.5, 0)
    expect_error(O.PRELU, [(tq, F.astype(np.uint8)), (ts, F.astype(np.int8))], [tq], "input 1")
    expect_error(O.PRELU, [(tq, F.astype(np.uint8))] * 2, [ts], "output 0")
    expect_error(O.PRELU, [(tf, F), (T(F32, (3,)), np.ones(3, np.float32))], [tf], "broadcast")


# -- SELECT -----------------------------------------------------------------------------------------
def values(code, shape):
    if code in (F32, F16):
        return RNG.uniform(-10, 10, shape).astype(DTYPE[code])
    if code == I32:
        return RNG.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32)
    lo, hi = RANGE[code]
    return RNG.integers(lo, hi + 1, shape).astype(DTYPE[code])


@pytest.mark.parametrize("code", [F32, F16, I32], ids=["f32", "f16", "i32"])
@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 1, 2, 1, 3)], ids=str)
def test_select_against_onnx_where(code, shape):
    condition = RNG.integers(0, 2, shape).astype(np.bool_)
    a, b = values(code, shape), values(code, shape)
    out = run1(O.SELECT, [(T(B8, shape), condition), (T(code, shape), a), (T(code, shape), b)], T(code, shape))
    assert out.dtype == DTYPE[code]
    np.testing.assert_array_equal(out, onnx_eval("Where", condition, a, b))


SELECT_PARAMS = {"aosp": ((1.5, 129), (0.5, 127), (1.0, 128)), "same": ((0.5, 100), (0.5, 100), (0.5, 100)),
                 "odd": ((0.0731, 12), (0.0213, 201), (0.0457, 133))}


@pytest.mark.parametrize("qtype", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("params", list(SELECT_PARAMS), ids=str)
def test_select_quant_against_requantize_reference(qtype, params):
    shift = 0 if qtype == U8 else 128
    qa, qb, qo = ((s, z - shift) for s, z in SELECT_PARAMS[params])
    shape = (3, 4, 5)
    lo, hi = RANGE[qtype]
    condition = RNG.integers(0, 2, shape).astype(np.bool_)
    a, b = values(qtype, shape), values(qtype, shape)
    out = run1(O.SELECT, [(T(B8, shape), condition), (T(qtype, shape, *qa), a), (T(qtype, shape, *qb), b)],
               T(qtype, shape, *qo))
    assert out.dtype == DTYPE[qtype]
    expected = [requantize_ref(x, *qa, *qo, lo, hi) if c else requantize_ref(y, *qb, *qo, lo, hi)
                for c, x, y in zip(condition.ravel(), a.astype(int).ravel().tolist(), b.astype(int).ravel().tolist())]
    np.testing.assert_array_equal(out, np.array(expected).reshape(shape))
    real = np.where(condition, (a.astype(np.float64) - qa[1]) * qa[0], (b.astype(np.float64) - qb[1]) * qb[0])
    assert_cts_close(out, np.clip(np.round(real / qo[0]) + qo[1], lo, hi), qtype)


@pytest.mark.parametrize("qtype, zps", [(U8, (129, 127, 128)), (S8, (1, -1, 0))], ids=["u8", "s8"])
def test_select_aosp_spec_examples(qtype, zps):
    """V1_2/select_v1_2.mod.py and V1_3/select_quant8_signed.mod.py (scales 1.5, 0.5 -> 1.0)."""
    za, zb, zo = zps
    lo, hi = RANGE[qtype]
    cases = [((3,), [True, False, True], [1, 2, 3], [4, 5, 6], [1, 5, 3]),
             ((2, 2), [False, True, False, True], [1, 2, 3, 4], [5, 6, 7, 8], [5, 2, 7, 4]),
             ((2, 1, 2, 1, 2), [True, False] * 4, list(range(1, 9)), list(range(9, 17)),
              [1, 10, 3, 12, 5, 14, 7, 16])]

    def quantize(v, s, z, shape):
        return np.clip(np.round(np.array(v, np.float64) / s) + z, lo, hi).astype(DTYPE[qtype]).reshape(shape)

    for shape, c, a, b, expected in cases:
        out = run1(O.SELECT, [(T(B8, shape), np.array(c).reshape(shape)),
                              (T(qtype, shape, 1.5, za), quantize(a, 1.5, za, shape)),
                              (T(qtype, shape, 0.5, zb), quantize(b, 0.5, zb, shape))], T(qtype, shape, 1.0, zo))
        # One step apart at most: the spec quantizes 1 / 1.5 to 1, which reads back as 1.5 and requantizes to 2.
        assert_cts_close(out, quantize(expected, 1.0, zo, shape), qtype)


def test_select_shape_inference():
    shape = (2, 3)
    assert inferred_dimensions(O.SELECT, [T(B8, shape), T(F32, shape), T(F32, shape)], T(F32, (0, 0))) == shape
    assert inferred_dimensions(O.SELECT, [T(B8, (0, 3)), T(F32, shape), T(F32, shape)], T(F32, (0, 0))) == (0, 0)
    # Partly known shapes that already disagree are refused when the model is built.
    for condition, second, where in (((0, 2), (2, 3), "input 0"), ((2, 3), (0, 3, 1), "input 2")):
        with pytest.raises(MltsError) as err:
            inferred_dimensions(O.SELECT, [T(B8, condition), T(F32, (0, 3)), T(F32, second)], T(F32, (0, 0)))
        assert err.value.code == ResultCode.BAD_DATA and where in str(err.value)


def test_select_validation():
    shape = (2, 2)
    c = np.array([[True, False], [False, True]])
    tf, F = T(F32, shape), np.ones(shape, np.float32)
    tc = T(B8, shape)
    expect_error(O.SELECT, [(tc, c), (tf, F)], [tf], "expected 3 inputs")
    expect_error(O.SELECT, [(T(I32, shape), c.astype(np.int32)), (tf, F), (tf, F)], [tf], "input 0")
    expect_error(O.SELECT, [(tc, c), (tc, c), (tc, c)], [tc], "input 1", "TENSOR_BOOL8")
    expect_error(O.SELECT, [(tc, c), (tf, F), (T(F16, shape), F.astype(np.float16))], [tf], "input 2")
    expect_error(O.SELECT, [(tc, c), (tf, F), (tf, F)], [T(I32, shape)], "output 0")
    expect_error(O.SELECT, [(T(B8, (2, 1)), c[:, :1]), (tf, F), (tf, F)], [tf], "input 0", "condition shape")
    expect_error(O.SELECT, [(tc, c), (tf, F), (T(F32, (1, 2)), F[:1])], [tf], "input 2", "[1, 2]")
    tq, ts = T(U8, shape, 0.5, 0), T(S8, shape, 0.5, 0)
    expect_error(O.SELECT, [(tc, c), (tq, F.astype(np.uint8)), (ts, F.astype(np.int8))], [tq], "input 2")
