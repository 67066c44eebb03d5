"""REDUCE_SUM / PROD / MAX / MIN / ANY / ALL through the public API (run_op on nnapi-reference).

Float and quantized results against onnx.reference ReduceSum/ReduceProd/ReduceMax/ReduceMin, bool8
against numpy any/all, plus hand values for what NNAPI's kernel does at the edges (NaN, inf, zero in
a product) and examples from AOSP's V1_2/reduce_*.mod.py and V1_3/reduce_*_quant8_signed.mod.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from support.onnx_reference import ONNX_TYPE
from support.op_data import B8, F16, F32, I32, S8, U8
from support.op_runner import Const, Input, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

SUM, PROD = OperationCode.REDUCE_SUM, OperationCode.REDUCE_PROD
MAX, MIN = OperationCode.REDUCE_MAX, OperationCode.REDUCE_MIN
ANY, ALL = OperationCode.REDUCE_ANY, OperationCode.REDUCE_ALL
ONNX_NAME = {SUM: "ReduceSum", PROD: "ReduceProd", MAX: "ReduceMax", MIN: "ReduceMin"}

rng = np.random.default_rng(75)


def onnx_reduce(code, x, axes, keep):
    """onnx.reference on float32 (float16 data widened) or 8-bit integers; NNAPI's [1] for a scalar."""
    x = x.astype(np.float32) if x.dtype.kind == "f" else x
    elem = ONNX_TYPE[x.dtype]
    init = numpy_helper.from_array(np.asarray(sorted({a % x.ndim for a in axes}), dtype=np.int64), "axes")
    node = helper.make_node(ONNX_NAME[code], ["x", "axes"], ["y"], keepdims=int(keep))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, None)],
                              [helper.make_tensor_value_info("y", elem, None)], initializer=[init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    y = ReferenceEvaluator(model).run(None, {"x": x})[0]
    return y.reshape(1) if y.ndim == 0 else y


def reduce_inputs(t, x, axes, keep, *, const_axes=True):
    a = np.asarray(axes, dtype=np.int32)
    axes_value = Const(a) if const_axes else a
    return [(t, x), (OperandType.tensor(I32, a.shape), axes_value), (OperandType.scalar(OperandCode.BOOL), keep)]


def run_reduce(code, t, x, axes, keep, out_type, **kw):
    (y,) = run_op(code, reduce_inputs(t, x, axes, keep, **kw), [out_type])
    return y


CASES = [((3, 2), [-1], False), ((4, 3, 2), [1, 0, -3, -3], False), ((4, 3, 2), [0, 2], True),
         ((2, 3, 4, 5), [1, 2], True), ((2, 3, 4, 5), [3, -1, 0], False), ((2, 3, 4, 5), [0, 1, 2, 3], False),
         ((2, 3, 4, 5), [-4, 1, 2, 3], True), ((5,), [0], True), ((1,), [0], False)]


def float_data(code, shape, dtype):
    if code == PROD:   # magnitudes near 1 so that a product of up to 120 values stays finite
        return (rng.uniform(0.7, 1.4, shape) * rng.choice([-1, 1], shape)).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("op", [SUM, PROD, MAX, MIN], ids=["sum", "prod", "max", "min"])
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_float_against_onnx(case, op, code):
    shape, axes, keep = CASES[case]
    t = OperandType.tensor(code, shape)
    x = float_data(op, shape, t.dtype)
    expected = onnx_reduce(op, x, axes, keep)
    y = run_reduce(op, t, x, axes, keep, OperandType.tensor(code, expected.shape))
    assert y.dtype == t.dtype and y.shape == expected.shape
    assert_cts_close(y, expected, code)
    if op in (MAX, MIN):   # a selection: exactly one of the inputs
        np.testing.assert_array_equal(y, expected.astype(t.dtype))


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("op", [MAX, MIN], ids=["max", "min"])
@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
def test_quant8_against_onnx_keeps_quantization(case, op, code):
    shape, axes, keep = CASES[case]
    lo, hi = (0, 255) if code == U8 else (-128, 127)
    scale, zp = 0.25, (120 if code == U8 else -7)
    t = OperandType.tensor(code, shape, scale, zp)
    q = rng.integers(lo, hi + 1, size=shape).astype(t.dtype)
    expected = onnx_reduce(op, q, axes, keep)
    y = run_reduce(op, t, q, axes, keep, OperandType.tensor(code, expected.shape, scale, zp))
    assert y.dtype == t.dtype
    np.testing.assert_array_equal(y, expected)
    # The same real values as reducing the dequantized input (the scale is positive).
    real = (q.astype(np.float64) - zp) * scale
    np.testing.assert_array_equal((y.astype(np.float64) - zp) * scale, onnx_reduce(op, real.astype(np.float32),
                                                                                   axes, keep))


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("op", [ANY, ALL], ids=["any", "all"])
def test_bool8_against_numpy(case, op):
    shape, axes, keep = CASES[case]
    t = OperandType.tensor(B8, shape)
    # Mostly one value so that both outcomes of the other reduction occur.
    x = rng.random(shape) < (0.15 if op == ANY else 0.85)
    naxes = tuple(sorted({a % len(shape) for a in axes}))
    expected = (np.any if op == ANY else np.all)(x, axis=naxes, keepdims=keep)
    expected = expected.reshape(1) if expected.ndim == 0 else expected
    y = run_reduce(op, t, x, axes, keep, OperandType.tensor(B8, expected.shape))
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, expected)


def test_axes_as_model_input_and_unknown_output_dims():
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    y = run_reduce(SUM, OperandType.tensor(F32, x.shape), x, [2, -2], False, OperandType.tensor(F32, (0,)),
                   const_axes=False)
    assert_cts_close(y, x.astype(np.float64).sum(axis=(1, 2)), F32)
    q = np.array([[[True, False]], [[False, False]]])
    y = run_reduce(ANY, OperandType.tensor(B8, q.shape), q, [0, 1, 2], True, OperandType.tensor(B8, (0, 0, 0)),
                   const_axes=False)
    np.testing.assert_array_equal(y, [[[True]]])


# -- AOSP spec examples (data from the .mod.py files named) -----------------------------------------
SPEC_X = np.arange(1, 25, dtype=np.float64).reshape(4, 3, 2) / 10   # 0.1 .. 2.4


@pytest.mark.parametrize("op, axes, keep, expected", [
    (SUM, [-1], False, [-3, 7, -1]),                          # V1_2/reduce_sum.mod.py
    (PROD, [-1], False, [2, 12, -30]),                        # V1_2/reduce_prod.mod.py
    (MAX, [-1], False, [-1, 4, 5]),                           # V1_2/reduce_max.mod.py
    (MIN, [-1], False, [-2, 3, -6]),                          # V1_3/reduce_min_quant8_signed.mod.py
])
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_spec_examples_3x2(op, axes, keep, expected, code):
    x = np.array([[-1, -2], [3, 4], [5, -6]])
    t = OperandType.tensor(code, (3, 2))
    y = run_reduce(op, t, x.astype(t.dtype), axes, keep, OperandType.tensor(code, (3,)))
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("op, axes, keep, shape, expected", [
    (SUM, [1, 0, -3, -3], False, (2,), [14.4, 15.6]),             # V1_2/reduce_sum.mod.py
    (SUM, [0, 2], True, (1, 3, 1), [8.4, 10.0, 11.6]),
    (MAX, [1, 0, -3, -3], False, (2,), [2.3, 2.4]),               # V1_2/reduce_max.mod.py
    (MAX, [0, 2], True, (1, 3, 1), [2.0, 2.2, 2.4]),
    (MIN, [1, 0, -3, -3], False, (2,), [0.1, 0.2]),               # V1_2/reduce_min.mod.py
    (MIN, [0, 2], True, (1, 3, 1), [0.1, 0.3, 0.5]),
])
def test_spec_examples_4x3x2(op, axes, keep, shape, expected):
    y = run_reduce(op, OperandType.tensor(F32, (4, 3, 2)), SPEC_X.astype(np.float32), axes, keep,
                   OperandType.tensor(F32, shape))
    assert_cts_close(y, np.reshape(expected, shape), F32)


def test_spec_example_prod():
    # V1_2/reduce_prod.mod.py
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 1.00, 1.10, 1.20, 1.30, 1.40, 1.50, 1.60,
                  1.70, 1.80, 1.90, 2.00, 2.10, 2.20, 2.30, 2.40], np.float32).reshape(4, 3, 2)
    t = OperandType.tensor(F32, (4, 3, 2))
    y = run_reduce(PROD, t, x, [1, 0, -3, -3], False, OperandType.tensor(F32, (2,)))
    assert_cts_close(y, [3.16234143225e+4, 1.9619905536e+4], F32)
    y = run_reduce(PROD, t, x, [0, 2], True, OperandType.tensor(F32, (1, 3, 1)))
    assert_cts_close(y, np.reshape([7.74592e+2, 1.197504e+3, 6.6889152e+2], (1, 3, 1)), F32)


@pytest.mark.parametrize("code, zp", [(U8, 127), (S8, -1)])
@pytest.mark.parametrize("op, expected", [(MAX, [-1, 4, 5]), (MIN, [-2, 3, -6])])
def test_spec_examples_quant8(code, zp, op, expected):
    # V1_2/reduce_max.mod.py (quant8 0.5, 127), V1_3/reduce_{max,min}_quant8_signed.mod.py (0.5, -1)
    real = np.array([[-1, -2], [3, 4], [5, -6]])
    t = OperandType.tensor(code, (3, 2), 0.5, zp)
    y = run_reduce(op, t, (real / 0.5 + zp).astype(t.dtype), [-1], False, OperandType.tensor(code, (3,), 0.5, zp))
    np.testing.assert_array_equal(y.astype(np.int64), np.array(expected) * 2 + zp)


@pytest.mark.parametrize("op, x, expected", [
    (ANY, [False] * 6 + [False, True, False, False, False, True], ([1, 0, -3, -3], False, [False, True])),
    (ANY, [False] * 6 + [False, True, False, False, False, True], ([0, 2], True, [True, False, True])),
    (ALL, [True] * 5 + [False] + [True] * 6, ([1, 0, -3, -3], False, [True, False])),
    (ALL, [True] * 8 + [False] + [True] * 3, ([0, 2], True, [True, False, True])),
])
def test_spec_examples_bool8(op, x, expected):
    # V1_2/reduce_any.mod.py, V1_2/reduce_all.mod.py
    axes, keep, values = expected
    shape = (1, 3, 1) if keep else (len(values),)
    y = run_reduce(op, OperandType.tensor(B8, (2, 3, 2)), np.reshape(x, (2, 3, 2)), axes, keep,
                   OperandType.tensor(B8, shape))
    np.testing.assert_array_equal(y, np.reshape(values, shape))


@pytest.mark.parametrize("op, code, value", [(SUM, F32, 3.0), (PROD, F32, 3.0), (MAX, F32, 3.0), (MIN, F32, 3.0),
                                             (ANY, B8, False), (ALL, B8, False)])
def test_spec_reduce_everything_gives_shape_1(op, code, value):
    # V1_2/reduce_*_b155508675.mod.py: [1, 1, 1] over axes [0, 1, 2] without keep_dims is [1].
    t = OperandType.tensor(code, (1, 1, 1))
    y = run_reduce(op, t, np.full((1, 1, 1), value, t.dtype), [0, 1, 2], False, OperandType.tensor(code, (0,)))
    assert y.shape == (1,)
    assert y[0] == value


# -- NNAPI kernel edge cases (hand values) ------------------------------------------------------------
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_prod_with_a_zero_is_zero_even_beside_inf_or_nan(code):
    t = OperandType.tensor(code, (4, 3))
    x = np.array([[0, np.inf, 2], [np.nan, -0.0, 5], [np.inf, 2, -1], [np.nan, 1, 2]], t.dtype)
    y = run_reduce(PROD, t, x, [1], False, OperandType.tensor(code, (4,)))
    assert y[:2].tolist() == [0, 0] and not np.signbit(y[1])
    assert y[2] == -np.inf and np.isnan(y[3])


@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_max_min_skip_nan_and_start_from_the_finite_bounds(code):
    t = OperandType.tensor(code, (4, 2))
    lowest, highest = float(np.finfo(t.dtype).min), float(np.finfo(t.dtype).max)
    x = np.array([[np.nan, 1.5], [-7, np.nan], [np.nan, np.nan], [-np.inf, np.inf]], t.dtype)
    y = run_reduce(MAX, t, x, [-1], False, OperandType.tensor(code, (4,)))
    assert y.tolist() == [1.5, -7, lowest, np.inf]
    y = run_reduce(MIN, t, x, [-1], False, OperandType.tensor(code, (4,)))
    assert y.tolist() == [1.5, -7, highest, -np.inf]
    only_inf = np.array([[-np.inf], [np.inf]], t.dtype)
    t1 = OperandType.tensor(code, (2, 1))
    assert run_reduce(MAX, t1, only_inf, [1], False, OperandType.tensor(code, (2,))).tolist() == [lowest, np.inf]
    assert run_reduce(MIN, t1, only_inf, [1], False, OperandType.tensor(code, (2,))).tolist() == [-np.inf, highest]


def test_sum_float16_rounds_once_and_overflows_to_inf():
    t = OperandType.tensor(F16, (2, 3))
    x = np.array([[2048, 1, 1], [60000, 6000, 1]], np.float16)
    y = run_reduce(SUM, t, x, [1], True, OperandType.tensor(F16, (2, 1)))
    # 2050 is exact in float16 (one rounding of the exact sum); step by step 2048 + 1 + 1 gives 2048.
    assert y.ravel().tolist() == [2050, np.inf]


def test_duplicate_and_negative_axes_reduce_once():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = OperandType.tensor(F32, x.shape)
    y = run_reduce(SUM, t, x, [2, -1, 2, 0, -3], True, OperandType.tensor(F32, (1, 3, 1)))
    # x[i, j, k] = 12 i + 4 j + k summed over i < 2, k < 4: 48 + 32 j + 12.
    np.testing.assert_array_equal(y.ravel(), [60, 92, 124])


# -- build-time shape inference -------------------------------------------------------------------
def inferred_dims(input_dims, axes, keep, *, const_axes=True, code=F32):
    inputs = [(OperandType.tensor(code, input_dims), Input()),
              (OperandType.tensor(I32, (len(axes),)), Const(axes) if const_axes else Input()),
              (OperandType.scalar(OperandCode.BOOL), keep)]
    out_type = OperandType.tensor(code, (0,) * (len(input_dims) if keep else 1))
    return inferred_output_types(MAX, inputs, [out_type])[0].dimensions


def test_build_time_shape_inference():
    assert inferred_dims((2, 3, 4), [0, -1], True) == (1, 3, 1)
    assert inferred_dims((2, 3, 4), [0, 2, 1], False) == (1,)
    # Not known until run time: an unknown input dimension, or axes that are a model input.
    assert inferred_dims((2, 0, 4), [0, 2], True) == (0, 0, 0)
    assert inferred_dims((2, 3, 4), [1], True, const_axes=False) == (0, 0, 0)


def test_declared_output_shape_must_match():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(MltsError) as info:
        run_reduce(SUM, OperandType.tensor(F32, (2, 3)), x, [1], False, OperandType.tensor(F32, (3,)))
    assert info.value.code == ResultCode.BAD_DATA and "REDUCE_SUM" in str(info.value)


# -- validation -------------------------------------------------------------------------------------
def expect_error(op, inputs, outputs, *words, code=ResultCode.BAD_DATA):
    with pytest.raises(MltsError) as info:
        run_op(op, inputs, outputs)
    assert info.value.code == code
    assert op.name in str(info.value)
    for w in words:
        assert w in str(info.value)


@pytest.mark.parametrize("op, code", [(SUM, U8), (PROD, S8), (SUM, B8), (MAX, I32), (MIN, B8), (ANY, F32),
                                      (ALL, U8), (PROD, I32)])
def test_rejects_input_types_nnapi_does_not_allow(op, code):
    t = OperandType.tensor(code, (2, 3), 0.5 if code in (U8, S8) else 0.0, 0)
    expect_error(op, reduce_inputs(t, np.zeros((2, 3), t.dtype), [1], False), [t.with_dimensions((2,))],
                 "input 0", code.name)


def test_keep_dims_must_be_bool_not_int32():
    t = OperandType.tensor(F32, (2, 3))
    inputs = reduce_inputs(t, np.zeros((2, 3), np.float32), [1], False)[:2] + \
        [(OperandType.scalar(OperandCode.INT32), 1)]
    expect_error(SUM, inputs, [OperandType.tensor(F32, (2, 1))], "input 2", "INT32")


def test_rejects_bad_axes():
    t = OperandType.tensor(F32, (2, 3))
    x = np.zeros((2, 3), np.float32)
    expect_error(MAX, reduce_inputs(t, x, [2], False), [OperandType.tensor(F32, (2,))], "input 1", "axis 2")
    expect_error(MAX, reduce_inputs(t, x, [0, -3], False), [OperandType.tensor(F32, (1,))], "axis -3")
    float_axes = [(t, x), (OperandType.tensor(F32, (1,)), Const(np.array([1], np.float32))),
                  (OperandType.scalar(OperandCode.BOOL), False)]
    expect_error(MAX, float_axes, [OperandType.tensor(F32, (2,))], "input 1", "TENSOR_FLOAT32")
    axes2d = np.array([[0, 1]], np.int32)
    expect_error(MAX, [(t, x), (OperandType.tensor(I32, axes2d.shape), Const(axes2d)),
                       (OperandType.scalar(OperandCode.BOOL), False)], [OperandType.tensor(F32, (1,))], "1-D")
    # Axes known only at run time: the same check, when the operation runs.
    expect_error(MAX, reduce_inputs(t, x, [5], False, const_axes=False), [OperandType.tensor(F32, (0,))],
                 "axis 5", code=ResultCode.OP_FAILED)


def test_rejects_bad_outputs_counts_and_rank():
    t = OperandType.tensor(U8, (2, 3), 0.5, 10)
    q = np.zeros((2, 3), np.uint8)
    expect_error(MAX, reduce_inputs(t, q, [1], False), [OperandType.tensor(U8, (2,), 0.25, 10)], "output 0", "scale")
    expect_error(MIN, reduce_inputs(t, q, [1], False), [OperandType.tensor(U8, (2,), 0.5, 11)], "output 0")
    expect_error(MIN, reduce_inputs(t, q, [1], False), [OperandType.tensor(S8, (2,), 0.5, 10)], "output 0")
    tf = OperandType.tensor(F32, (2, 3))
    x = np.zeros((2, 3), np.float32)
    expect_error(SUM, reduce_inputs(tf, x, [1], False), [OperandType.tensor(F16, (2,))], "output 0", "TENSOR_FLOAT16")
    expect_error(ANY, reduce_inputs(OperandType.tensor(B8, (2, 3)), x.astype(bool), [1], False),
                 [OperandType.tensor(F32, (2,))], "output 0")
    expect_error(SUM, reduce_inputs(tf, x, [1], False)[:2], [OperandType.tensor(F32, (2,))], "inputs")
    t5 = OperandType.tensor(F32, (1, 1, 1, 1, 2))
    expect_error(PROD, reduce_inputs(t5, np.zeros((1, 1, 1, 1, 2), np.float32), [4], False),
                 [OperandType.tensor(F32, (1, 1, 1, 1))], "input 0", "rank 5")
