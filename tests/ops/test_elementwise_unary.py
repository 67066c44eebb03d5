"""ABS, EXP, LOG, NEG, RSQRT, SIN, SQRT, FLOOR, ELU against independent expectations.

Float: onnx.reference.ReferenceEvaluator on Abs / Exp / Log / Neg / Sqrt / Sin / Floor / Elu and
Reciprocal(Sqrt) for RSQRT, float32 within the CTS float32 tolerance, float16 within the CTS float16
tolerance of the reference computed in float32 from the same float16 values. int32 ABS / NEG against
ONNX Abs / Neg and hand values. IEEE special values (inf, NaN, signed zeros) by hand, with numpy's
warnings turned into errors. ELU also against the AOSP V1_3/elu.mod.py vectors and NNAPI's formula
max(0, x) + min(0, alpha * (exp(x) - 1)) for alphas ONNX's Elu does not cover.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode
from support.onnx_reference import onnx_eval
from support.op_runner import Input, inferred_output_types, run_op
from support.tolerance import assert_cts_close

F32, F16, I32 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_INT32
U8 = OperandCode.TENSOR_QUANT8_ASYMM
T = OperandType.tensor
ALPHA = {F32: OperandType.scalar(OperandCode.FLOAT32), F16: OperandType.scalar(OperandCode.FLOAT16)}
NP = {F32: np.float32, F16: np.float16, I32: np.int32}

ONNX_NAME = {OperationCode.ABS: "Abs", OperationCode.EXP: "Exp", OperationCode.LOG: "Log",
             OperationCode.NEG: "Neg", OperationCode.SIN: "Sin", OperationCode.SQRT: "Sqrt",
             OperationCode.FLOOR: "Floor", OperationCode.RSQRT: "Sqrt"}
UNARY = list(ONNX_NAME)
POSITIVE_ONLY = {OperationCode.LOG, OperationCode.SQRT, OperationCode.RSQRT}


def onnx_expected(code, x):
    y = onnx_eval(ONNX_NAME[code], x)
    return onnx_eval("Reciprocal", y) if code == OperationCode.RSQRT else y


def run1(code, x, ftype, shape="x", out_shape="x"):
    """Run `code` on `x`; the operand types' dimensions default to x's (None: unknown rank)."""
    shape = x.shape if shape == "x" else shape
    out_shape = x.shape if out_shape == "x" else out_shape
    return run_op(code, [(T(ftype, shape), x)], [T(ftype, out_shape)])[0]


def run_elu(x, alpha, ftype):
    return run_op(OperationCode.ELU, [(T(ftype, x.shape), x), (ALPHA[ftype], alpha)], [T(ftype, x.shape)])[0]


def sample(code, shape):
    """Inputs in each function's domain, spread like the AOSP V1_2 specs' (i - 60) / 10 ramps."""
    n = int(np.prod(shape))
    x = np.linspace(0.05, 12.0, n) if code in POSITIVE_ONLY else np.linspace(-6.05, 6.05, n)
    return x.reshape(shape)


# -- float against ONNX --------------------------------------------------------------------------------
@pytest.mark.parametrize("code", UNARY, ids=lambda c: c.name)
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_float_against_onnx(code, ftype):
    shape = (2, 3, 4, 5) if code == OperationCode.FLOOR else (1, 2, 3, 4, 5)  # the AOSP V1_2 specs' shape
    x = sample(code, shape).astype(NP[ftype])
    out = run1(code, x, ftype)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert_cts_close(out, onnx_expected(code, x.astype(np.float32)), ftype)


@pytest.mark.parametrize("code", [*UNARY, OperationCode.ELU], ids=lambda c: c.name)
@pytest.mark.parametrize("shape", [(), (7,), (2, 5), (2, 1, 3), (1, 2, 2, 3)], ids=lambda s: f"rank{len(s)}")
def test_float_ranks(code, shape):
    x = np.asarray(sample(code, shape), np.float32)
    if code == OperationCode.ELU:
        out, expected = run_elu(x, 0.5, F32), onnx_eval("Elu", x, alpha=0.5)
    else:
        out, expected = run1(code, x, F32), onnx_expected(code, x)
    assert_cts_close(out, expected, F32)


def test_float32_rounded_once():
    # Computed wider and rounded once: the correctly rounded float32 of the float64 function.
    x = np.array([0.1, 0.7, 1.3, 2.9, 5.5, 10.25, 33.0, 77.7], np.float32)
    for code, fn in ((OperationCode.EXP, np.exp), (OperationCode.LOG, np.log), (OperationCode.SIN, np.sin),
                     (OperationCode.SQRT, np.sqrt), (OperationCode.RSQRT, lambda v: 1 / np.sqrt(v))):
        np.testing.assert_array_equal(run1(code, x, F32), fn(x.astype(np.float64)).astype(np.float32))


def test_hand_values():
    x = np.array([-2.5, -1.0, -0.5, 0.0, 0.25, 1.0, 4.0, 10.2], np.float32)
    np.testing.assert_array_equal(run1(OperationCode.ABS, x, F32),
                                  np.array([2.5, 1, 0.5, 0, 0.25, 1, 4, 10.2], np.float32))
    np.testing.assert_array_equal(run1(OperationCode.NEG, x, F32),
                                  np.array([2.5, 1, 0.5, 0, -0.25, -1, -4, -10.2], np.float32))
    np.testing.assert_array_equal(run1(OperationCode.FLOOR, x, F32), [-3, -1, -1, 0, 0, 1, 4, 10])
    p = np.array([0.25, 1.0, 4.0, 16.0], np.float32)
    np.testing.assert_array_equal(run1(OperationCode.SQRT, p, F32), [0.5, 1, 2, 4])
    np.testing.assert_array_equal(run1(OperationCode.RSQRT, p, F32), [2, 1, 0.5, 0.25])
    assert_cts_close(run1(OperationCode.LOG, np.array([1, np.e, 100], np.float32), F32), [0, 1, 4.6051702], F32)
    assert_cts_close(run1(OperationCode.EXP, np.array([0, 1, -1], np.float32), F32),
                     [1, 2.7182818, 0.36787944], F32)
    assert_cts_close(run1(OperationCode.SIN, np.array([0, np.pi / 2, np.pi / 6, -np.pi / 2], np.float32), F32),
                     [0, 1, 0.5, -1], F32)


def test_floor_aosp_vectors():
    # AOSP V1_0/floor.mod.py and V1_2/floor_float16.mod.py
    x = [-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 10.2]
    expected = [-2.0, -1.0, -1.0, 0.0, 0.0, 1.0, 1.0, 10]
    for ftype in (F32, F16):
        out = run1(OperationCode.FLOOR, np.array(x, NP[ftype]).reshape(1, 2, 2, 2), ftype)
        np.testing.assert_array_equal(out.ravel(), expected)


# -- IEEE special values --------------------------------------------------------------------------------
SPECIAL_CASES = [
    (OperationCode.LOG, [0.0, -0.0, -1.0, np.inf, np.nan], [-np.inf, -np.inf, np.nan, np.inf, np.nan]),
    (OperationCode.SQRT, [0.0, -0.0, -1.0, np.inf, -np.inf], [0.0, -0.0, np.nan, np.inf, np.nan]),
    (OperationCode.RSQRT, [0.0, -0.0, -4.0, np.inf, np.nan], [np.inf, -np.inf, np.nan, 0.0, np.nan]),
    (OperationCode.EXP, [np.inf, -np.inf, 1000.0, -1000.0, np.nan], [np.inf, 0.0, np.inf, 0.0, np.nan]),
    (OperationCode.SIN, [np.inf, -np.inf, np.nan, 0.0, -0.0], [np.nan, np.nan, np.nan, 0.0, -0.0]),
    (OperationCode.FLOOR, [np.inf, -np.inf, np.nan, -0.0, -1e-3], [np.inf, -np.inf, np.nan, -0.0, -1.0]),
    (OperationCode.ABS, [-np.inf, np.inf, np.nan, -0.0, -6e4], [np.inf, np.inf, np.nan, 0.0, 6e4]),
    (OperationCode.NEG, [-np.inf, np.inf, np.nan, 0.0, 6e4], [np.inf, -np.inf, np.nan, -0.0, -6e4]),
]


@pytest.mark.parametrize("code,x,expected", SPECIAL_CASES, ids=[c[0].name for c in SPECIAL_CASES])
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_ieee_special_values_without_warnings(code, x, expected, ftype):
    dtype = NP[ftype]
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        out = run1(code, np.array(x, dtype), ftype)
    want = np.array(expected, dtype)
    np.testing.assert_array_equal(out, want)  # NaN where NaN is expected
    number = ~np.isnan(want)  # a NaN's sign is not specified
    np.testing.assert_array_equal(np.signbit(out[number]), np.signbit(want[number]))


def test_float16_overflow_and_underflow():
    # exp(12) = 162754.8 exceeds float16's largest 65504: inf; exp(-20) is below its smallest subnormal: 0.
    out = run1(OperationCode.EXP, np.array([12.0, -20.0, 11.0], np.float16), F16)
    np.testing.assert_array_equal(out, np.array([np.inf, 0.0, np.exp(np.float32(11.0))], np.float16))
    # rsqrt of float16's smallest subnormal (2**-24) is 4096, representable.
    np.testing.assert_array_equal(run1(OperationCode.RSQRT, np.array([2.0**-24], np.float16), F16), [4096.0])


# -- int32 ABS / NEG --------------------------------------------------------------------------------------
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


@pytest.mark.parametrize("code", [OperationCode.ABS, OperationCode.NEG], ids=lambda c: c.name)
def test_int32_against_onnx(code):
    # AOSP V1_3/abs_int32.mod.py: i - 60 for i < 119, then -(2**24 + 1) (not exact in float32).
    x = np.array([i - 60 for i in range(119)] + [-(2**24 + 1)], np.int32).reshape(1, 2, 3, 4, 5)
    out = run1(code, x, I32)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, onnx_eval(ONNX_NAME[code], x))


def test_int32_hand_values_and_wraparound():
    x = np.array([0, 1, -1, 7, -123456789, INT32_MAX, -INT32_MAX, INT32_MIN], np.int32)
    np.testing.assert_array_equal(run1(OperationCode.ABS, x, I32),
                                  [0, 1, 1, 7, 123456789, INT32_MAX, INT32_MAX, INT32_MIN])
    np.testing.assert_array_equal(run1(OperationCode.NEG, x, I32),
                                  [0, -1, 1, -7, 123456789, -INT32_MAX, INT32_MAX, INT32_MIN])


# -- ELU ---------------------------------------------------------------------------------------------------
ELU_SPEC_CASES = [  # AOSP V1_3/elu.mod.py: alpha_one, alpha01, alpha10
    (1.0, (8,), [0, -6, 2, -4, 3, -2, 10, -0.1],
     [0.0, -0.997521, 2.0, -0.981684, 3.0, -0.864665, 10.0, -0.0951626]),
    (0.1, (2, 2), [-0.2, -0.1, 0.0, 0.1], [-0.018127, -0.009516, 0, 0.1]),
    (10.0, (2, 1, 1, 1, 2), [-10, -5, 0, 5], [-9.999546, -9.932620, 0, 5]),
]


@pytest.mark.parametrize("alpha,shape,x,expected", ELU_SPEC_CASES, ids=["alpha_one", "alpha01", "alpha10"])
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_elu_aosp_vectors(alpha, shape, x, expected, ftype):
    out = run_elu(np.array(x, NP[ftype]).reshape(shape), alpha, ftype)
    assert out.dtype == NP[ftype] and out.shape == shape
    assert_cts_close(out.ravel(), np.array(expected), ftype)


@pytest.mark.parametrize("alpha", [1.0, 0.2, 2.5, 0.0])
@pytest.mark.parametrize("ftype", [F32, F16], ids=["f32", "f16"])
def test_elu_against_onnx(alpha, ftype):
    x = np.linspace(-9, 9, 60).astype(NP[ftype]).reshape(3, 4, 5)
    alpha16 = float(NP[ftype](alpha))  # the FLOAT16 alpha is itself rounded
    expected = onnx_eval("Elu", x.astype(np.float32), alpha=alpha16)
    assert_cts_close(run_elu(x, alpha, ftype), expected, ftype)


def test_elu_negative_alpha_follows_nnapi_formula():
    # max(0, x) + min(0, alpha * (exp(x) - 1)): with alpha < 0 positive x also get the (negative) product.
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0], np.float32)
    alpha = -0.5
    expected = np.maximum(x, 0) + np.minimum(0, alpha * (np.exp(x.astype(np.float64)) - 1))
    assert_cts_close(run_elu(x, alpha, F32), expected, F32)
    assert_cts_close(run_elu(x, alpha, F32)[3:], [0.5 - 0.5 * (np.exp(0.5) - 1), 2 - 0.5 * (np.exp(2) - 1)], F32)


def test_elu_special_values_without_warnings():
    x = np.array([np.inf, -np.inf, np.nan, 100.0, -100.0, -0.0], np.float32)
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        np.testing.assert_array_equal(run_elu(x, 1.5, F32), [np.inf, -1.5, np.nan, 100.0, -1.5, 0.0])
        # alpha 0: the product 0 * inf is NaN, which min(0, .) ignores as NNAPI's std::min does.
        np.testing.assert_array_equal(run_elu(x, 0.0, F32), [np.inf, 0.0, np.nan, 100.0, 0.0, 0.0])
        np.testing.assert_array_equal(run_elu(x.astype(np.float16), 2.0, F16),
                                      np.array([np.inf, -2.0, np.nan, 100.0, -2.0, 0.0], np.float16))


# -- shapes --------------------------------------------------------------------------------------------------
def inferred_dims(code, in_dims, out_dims, ftype=F32):
    inputs = [(T(ftype, in_dims), Input())] + ([(ALPHA[ftype], 1.0)] if code == OperationCode.ELU else [])
    return inferred_output_types(code, inputs, [T(ftype, out_dims)])[0].dimensions


@pytest.mark.parametrize("code", [OperationCode.SQRT, OperationCode.FLOOR, OperationCode.ELU], ids=lambda c: c.name)
def test_build_time_shape_inference(code):
    assert inferred_dims(code, (2, 3, 4), (0, 0, 0)) == (2, 3, 4)
    assert inferred_dims(code, (2, 0, 4), (0, 0, 0)) == (0, 0, 0)  # not known before execution


@pytest.mark.parametrize("code", [OperationCode.ABS, OperationCode.LOG, OperationCode.FLOOR], ids=lambda c: c.name)
def test_unknown_dims_resolved_at_execution(code):
    x = sample(code, (3, 5)).astype(np.float32)
    out = run1(code, x, F32, shape=(0, 5), out_shape=(0, 0))
    assert out.shape == (3, 5)
    assert_cts_close(out, onnx_expected(code, x), F32)
    out = run1(code, x, F32, shape=None, out_shape=(0, 0))  # unknown rank
    assert_cts_close(out, onnx_expected(code, x), F32)


# -- validation ------------------------------------------------------------------------------------------------
def expect_bad_data(code, inputs, outputs, *words):
    with pytest.raises(MltsError) as info:
        run_op(code, inputs, outputs)
    assert info.value.code == ResultCode.BAD_DATA
    message = str(info.value)
    assert code.name in message
    for w in words:
        assert w in message, message


def tensor(ftype, shape=(2, 3)):
    return (T(ftype, shape), np.zeros(shape, NP.get(ftype, np.uint8)))


@pytest.mark.parametrize("code", [OperationCode.EXP, OperationCode.LOG, OperationCode.RSQRT, OperationCode.SIN,
                                  OperationCode.SQRT, OperationCode.FLOOR], ids=lambda c: c.name)
def test_float_only_ops_reject_int32_and_quant(code):
    expect_bad_data(code, [tensor(I32)], [T(I32, (2, 3))], "input 0", "TENSOR_INT32")
    expect_bad_data(code, [(T(U8, (2, 3), 0.5, 0), np.zeros((2, 3), np.uint8))], [T(U8, (2, 3), 0.5, 0)],
                    "input 0", "TENSOR_QUANT8_ASYMM")


@pytest.mark.parametrize("code", [OperationCode.ABS, OperationCode.NEG], ids=lambda c: c.name)
def test_abs_neg_reject_quant_and_bool(code):
    expect_bad_data(code, [(T(U8, (2, 3), 0.5, 0), np.zeros((2, 3), np.uint8))], [T(U8, (2, 3), 0.5, 0)],
                    "input 0", "TENSOR_QUANT8_ASYMM")
    expect_bad_data(code, [(T(OperandCode.TENSOR_BOOL8, (2,)), np.zeros(2, np.bool_))],
                    [T(OperandCode.TENSOR_BOOL8, (2,))], "input 0", "TENSOR_BOOL8")


@pytest.mark.parametrize("code", UNARY, ids=lambda c: c.name)
def test_rejects_output_type_and_counts(code):
    expect_bad_data(code, [tensor(F32)], [T(F16, (2, 3))], "output 0", "TENSOR_FLOAT16")
    expect_bad_data(code, [tensor(F16)], [T(F32, (2, 3))], "output 0", "TENSOR_FLOAT32")
    expect_bad_data(code, [tensor(F32), tensor(F32)], [T(F32, (2, 3))], "expected 1 inputs")
    expect_bad_data(code, [tensor(F32)], [T(F32, (2, 3)), T(F32, (2, 3))], "expected 1 outputs")


@pytest.mark.parametrize("code", [OperationCode.EXP, OperationCode.FLOOR, OperationCode.ELU], ids=lambda c: c.name)
def test_rejects_output_shape_conflicts(code):
    # Known at build time: shape inference; partly unknown: the declared dimensions still must agree.
    for in_dims, out_dims in (((2, 3), (2, 4)), ((2, 3), (2, 3, 1)), ((0, 3), (2, 4)), ((2, 0), (0, 0, 0))):
        with pytest.raises(MltsError) as info:
            inferred_dims(code, in_dims, out_dims)
        assert info.value.code == ResultCode.BAD_DATA
        assert code.name in str(info.value) and "output 0" in str(info.value)


def test_floor_rank_at_most_4():
    shape = (1, 1, 1, 2, 2)
    x = np.zeros(shape, np.float32)
    expect_bad_data(OperationCode.FLOOR, [(T(F32, shape), x)], [T(F32, shape)], "input 0", "rank 5")
    # Unknown rank at build time: checked once the shape is known, the execution fails.
    with pytest.raises(MltsError) as info:
        run1(OperationCode.FLOOR, x, F32, shape=None, out_shape=shape)
    assert info.value.code == ResultCode.OP_FAILED
    assert "FLOOR" in str(info.value) and "rank 5" in str(info.value)


def test_elu_validation():
    x32, x16 = tensor(F32), tensor(F16)
    elu = OperationCode.ELU
    expect_bad_data(elu, [x32, (ALPHA[F16], 1.0)], [T(F32, (2, 3))], "input 1", "FLOAT16")
    expect_bad_data(elu, [x16, (ALPHA[F32], 1.0)], [T(F16, (2, 3))], "input 1", "FLOAT32")
    expect_bad_data(elu, [x32], [T(F32, (2, 3))], "expected 2 inputs")
    expect_bad_data(elu, [x32, (ALPHA[F32], 1.0), (ALPHA[F32], 1.0)], [T(F32, (2, 3))], "expected 2 inputs")
    expect_bad_data(elu, [tensor(I32), (OperandType.scalar(OperandCode.INT32), 1)], [T(I32, (2, 3))],
                    "input 0", "TENSOR_INT32")
    expect_bad_data(elu, [x32, (ALPHA[F32], 1.0)], [T(F16, (2, 3))], "output 0")
    expect_bad_data(elu, [x32, (ALPHA[F32], None)], [T(F32, (2, 3))], "input 1")
