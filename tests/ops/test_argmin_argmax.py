"""ARGMAX / ARGMIN through the public API (run_op on nnapi-reference).

Results against onnx.reference ArgMax/ArgMin (keepdims=0, select_last_index=0: ties pick the
smallest index), hand values for NaN (NNAPI's strict-comparison scan) and the examples of AOSP's
V1_2/argmax_*.mod.py, argmin_*.mod.py and V1_3/arg{max,min}_quant8_signed.mod.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support.onnx_reference import ONNX_TYPE
from support.op_data import F16, F32, I32, S8, U8
from support.op_runner import Input, inferred_output_types, run_op

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

ARGMAX, ARGMIN = OperationCode.ARGMAX, OperationCode.ARGMIN

rng = np.random.default_rng(39)


def onnx_arg(op, x, axis):
    node = helper.make_node("ArgMax" if op == ARGMAX else "ArgMin", ["x"], ["y"], axis=axis, keepdims=0,
                            select_last_index=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", ONNX_TYPE[x.dtype], None)],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    y = ReferenceEvaluator(model).run(None, {"x": x})[0]
    return y.reshape(1) if y.ndim == 0 else y   # NNAPI: a rank-1 input gives [1]


def tensor_type(code, shape):
    if code == U8:
        return OperandType.tensor(code, shape, 0.5, 128)
    if code == S8:
        return OperandType.tensor(code, shape, 0.5, -3)
    return OperandType.tensor(code, shape)


def data_with_ties(code, shape):
    """Few distinct values, so that ties (and the smallest-index rule) occur in most rows."""
    levels = rng.integers(-4, 5, size=shape)
    if code == U8:
        return (levels + 128).astype(np.uint8)
    if code in (F32, F16):
        return (levels * 0.75).astype(tensor_type(code, shape).dtype)
    return levels.astype(tensor_type(code, shape).dtype)


def run_arg(op, t, x, axis, out_shape):
    (y,) = run_op(op, [(t, x), (OperandType.scalar(OperandCode.INT32), axis)], [OperandType.tensor(I32, out_shape)])
    return y


CASES = [((7,), -1), ((3, 5), 0), ((3, 5), 1), ((2, 3, 6), 1), ((2, 3, 6), -1), ((2, 3, 4, 5), 2),
         ((2, 3, 4, 5), -4), ((2, 1, 2, 2, 3), 3)]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("op", [ARGMAX, ARGMIN], ids=["argmax", "argmin"])
@pytest.mark.parametrize("code", [F32, F16, I32, U8, S8], ids=["f32", "f16", "i32", "u8", "s8"])
def test_against_onnx(case, op, code):
    shape, axis = CASES[case]
    x = data_with_ties(code, shape)
    expected = onnx_arg(op, x, axis)
    y = run_arg(op, tensor_type(code, shape), x, axis, expected.shape)
    assert y.dtype == np.int32 and y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)


def test_ties_pick_the_smallest_index():
    x = np.array([[3, 1, 3, 1], [2, 2, 2, 2]], np.int32)
    t = OperandType.tensor(I32, x.shape)
    assert run_arg(ARGMAX, t, x, 1, (2,)).tolist() == [0, 0]
    assert run_arg(ARGMIN, t, x, 1, (2,)).tolist() == [1, 0]
    assert run_arg(ARGMAX, t, x, 0, (4,)).tolist() == [0, 1, 0, 1]


def test_int32_extremes():
    x = np.array([[-2**31, 2**31 - 1, 0], [2**31 - 1, -2**31, 2**31 - 1]], np.int32)
    t = OperandType.tensor(I32, x.shape)
    assert run_arg(ARGMAX, t, x, -1, (2,)).tolist() == [1, 0]
    assert run_arg(ARGMIN, t, x, -1, (2,)).tolist() == [0, 1]


@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_nan_never_wins_and_a_leading_nan_keeps_index_0(code):
    t = OperandType.tensor(code, (5, 3))
    x = np.array([[1, np.nan, 2], [np.nan, 5, -5], [-np.inf, np.nan, -np.inf], [np.nan, np.nan, np.nan],
                  [np.inf, -np.inf, np.nan]], t.dtype)
    assert run_arg(ARGMAX, t, x, 1, (5,)).tolist() == [2, 0, 0, 0, 0]
    assert run_arg(ARGMIN, t, x, 1, (5,)).tolist() == [0, 0, 0, 0, 1]


def test_quantized_signed_and_unsigned_agree():
    qu = rng.integers(0, 256, size=(3, 4, 5))
    for op in (ARGMAX, ARGMIN):
        for axis in range(3):
            a = run_arg(op, OperandType.tensor(U8, qu.shape, 0.1, 128), qu.astype(np.uint8), axis, (0, 0))
            b = run_arg(op, OperandType.tensor(S8, qu.shape, 0.1, 0), (qu - 128).astype(np.int8), axis, (0, 0))
            np.testing.assert_array_equal(a, b)


# -- AOSP spec examples ---------------------------------------------------------------------------
SPEC_X = np.array([[1.0, 2.0], [4.0, 3.0]])


@pytest.mark.parametrize("op, axis, expected", [
    (ARGMAX, 1, [1, 0]), (ARGMAX, 0, [1, 1]), (ARGMAX, -1, [1, 0]),     # V1_2/argmax_{1,2,3}.mod.py
    (ARGMIN, 1, [0, 1]), (ARGMIN, 0, [0, 0]), (ARGMIN, -1, [0, 1]),     # V1_2/argmin_{1,2,3}.mod.py
])
@pytest.mark.parametrize("code", [F32, F16, I32, U8, S8], ids=["f32", "f16", "i32", "u8", "s8"])
def test_spec_examples(op, axis, expected, code):
    # Quant8 variations: scale 1.0, zero point 0 (V1_3/arg{max,min}_quant8_signed.mod.py for signed).
    t = OperandType.tensor(code, (2, 2), 1.0, 0) if code in (U8, S8) else OperandType.tensor(code, (2, 2))
    assert run_arg(op, t, SPEC_X.astype(t.dtype), axis, (2,)).tolist() == expected


@pytest.mark.parametrize("op, x, expected", [(ARGMAX, [1.0, 2.0, 4.0], 2), (ARGMIN, [4.0, 2.0, 1.0], 2)])
def test_spec_rank_1_gives_shape_1(op, x, expected):
    # V1_2/argmax_b155660285.mod.py, V1_2/argmin_b155660285.mod.py
    y = run_arg(op, OperandType.tensor(F32, (3,)), np.array(x, np.float32), 0, (1,))
    assert y.shape == (1,) and y.tolist() == [expected]


# -- build-time shape inference -------------------------------------------------------------------
def inferred_dims(input_dims, axis, *, const_axis=True):
    inputs = [(OperandType.tensor(F32, input_dims), Input()),
              (OperandType.scalar(OperandCode.INT32), axis if const_axis else Input())]
    (out,) = inferred_output_types(ARGMAX, inputs, [OperandType.tensor(I32, (0,) * max(len(input_dims) - 1, 1))])
    return out.dimensions


def test_build_time_shape_inference():
    assert inferred_dims((2, 3, 4), -2) == (2, 4)
    assert inferred_dims((6,), 0) == (1,)
    assert inferred_dims((2, 0, 4), 0) == (0, 0)
    assert inferred_dims((2, 3, 4), 1, const_axis=False) == (0, 0)


def test_axis_as_model_input_runs():
    x = np.array([[3, 1, 2], [0, 5, -1]], np.float32)
    (out,) = run_op(ARGMIN, [(OperandType.tensor(F32, (2, 3)), x), (OperandType.scalar(OperandCode.INT32), Input(-1))],
                    [OperandType.tensor(I32, (0,))])
    assert out.tolist() == [1, 2]


# -- validation -------------------------------------------------------------------------------------
def expect_error(op, inputs, outputs, *words):
    with pytest.raises(MltsError) as info:
        run_op(op, inputs, outputs)
    assert info.value.code == ResultCode.BAD_DATA
    assert op.name in str(info.value)
    for w in words:
        assert w in str(info.value)


def axis_in(v, code=OperandCode.INT32):
    return OperandType.scalar(code), v


@pytest.mark.parametrize("op", [ARGMAX, ARGMIN])
def test_rejects_bad_operands(op):
    t = OperandType.tensor(F32, (2, 3))
    x = np.zeros((2, 3), np.float32)
    i32_out = [OperandType.tensor(I32, (2,))]
    expect_error(op, [(t, x), axis_in(2)], i32_out, "input 1", "axis 2")
    expect_error(op, [(t, x), axis_in(-3)], i32_out, "input 1", "axis -3")
    expect_error(op, [(t, x), axis_in(1.0, OperandCode.FLOAT32)], i32_out, "input 1", "FLOAT32")
    expect_error(op, [(t, x), axis_in(1)], [OperandType.tensor(F32, (2,))], "output 0", "TENSOR_FLOAT32")
    expect_error(op, [(t, x)], i32_out, "inputs")
    tb = OperandType.tensor(OperandCode.TENSOR_BOOL8, (2, 3))
    expect_error(op, [(tb, x.astype(bool)), axis_in(1)], i32_out, "input 0", "TENSOR_BOOL8")
    t0 = OperandType.tensor(F32, ())
    expect_error(op, [(t0, np.float32(1)), axis_in(0)], [OperandType.tensor(I32, (1,))], "input 0", "rank 0")
