"""GATHER, TILE and EXPAND_DIMS through the public API (run_op on nnapi-reference).

These operations only move data, so every type must come back bit-exact. Expectations: onnx.reference
Gather, Tile and Unsqueeze run on the same data in its own dtype, numpy (np.take, np.tile) where ONNX
has no counterpart, hand values and examples from AOSP's spec files.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from support import op_data
from support.onnx_reference import onnx_eval
from support.op_data import int_scalar, int_vec
from support.op_data import ALL_TYPES, F16, F32, I32, S8, U8
from support.op_data import TYPE_IDS as IDS
from support.op_runner import Const, expect_error, run_op

from mlts.runtime import OperandCode, OperandType, OperationCode, ResultCode

INT32 = OperandCode.INT32
GATHER, TILE, EXPAND_DIMS = OperationCode.GATHER, OperationCode.TILE, OperationCode.EXPAND_DIMS
QUANT = {U8: (0.5, 127), S8: (0.5, -1)}

rng = np.random.default_rng(1234)
tensor_type = partial(op_data.tensor_type, quant=QUANT)
random_data = partial(op_data.random_data, rng)


def f32_input(shape):
    return (tensor_type(F32, shape), np.zeros(shape, np.float32))


# -- GATHER -----------------------------------------------------------------------------------------
GATHER_CASES = [((2, 2), 0, [1, 0]), ((3,), 0, [1]), ((1, 2, 3), -1, [2, 0]), ((4, 1), 0, [1, 3]),
                ((1, 3, 2), 1, [[2, 0], [1, 0], [0, 1]]), ((2, 3, 4, 5), 2, [3, 3, 0, 1, 2]),
                ((2, 3, 4), -3, [[[1]], [[0]]]), ((5, 2, 1, 2, 3), 3, [1, 0, 1])]


@pytest.mark.parametrize("code", ALL_TYPES, ids=IDS.get)
@pytest.mark.parametrize("case", range(len(GATHER_CASES)))
def test_gather_against_onnx(code, case):
    shape, axis, indices = GATHER_CASES[case]
    x = random_data(code, shape)
    expected = onnx_eval("Gather", x, np.array(indices, np.int64), opset=18, axis=axis)
    (y,) = run_op(GATHER, [(tensor_type(code, shape), x), int_scalar(axis), int_vec(indices)],
                  [tensor_type(code, expected.shape)])
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, expected)


def test_gather_spec_examples():
    # AOSP V1_2/gather.mod.py (axis -1 case) and V1_2/gather_higher_rank.mod.py (indices [3, 2], quant8).
    x = np.array([[[1, 2, 3], [4, 5, 6]]], dtype=np.float32)
    (y,) = run_op(GATHER, [(tensor_type(F32, (1, 2, 3)), x), int_scalar(-1), int_vec([2, 0])],
                  [tensor_type(F32, (1, 2, 2))])
    np.testing.assert_array_equal(y.ravel(), [3, 1, 6, 4])
    q = np.array([1, 2, 3, 4, 5, 6], dtype=np.uint8).reshape(1, 3, 2)
    (y,) = run_op(GATHER, [(tensor_type(U8, (1, 3, 2)), q), int_scalar(1), int_vec([[2, 0], [1, 0], [0, 1]])],
                  [tensor_type(U8, (1, 3, 2, 2))])
    np.testing.assert_array_equal(y.ravel(), [5, 6, 1, 2, 3, 4, 1, 2, 1, 2, 3, 4])


def test_gather_indices_as_model_input_and_unknown_output_dims():
    x = random_data(S8, (3, 4))
    idx = np.array([[3, 0, 0], [2, 1, 3]], dtype=np.int32)
    (y,) = run_op(GATHER, [(tensor_type(S8, x.shape), x), int_scalar(1), int_vec(idx, const=False)],
                  [tensor_type(S8, (0, 0, 0))])
    np.testing.assert_array_equal(y, np.take(x, idx, axis=1))


@pytest.mark.parametrize("bad", [4, -1], ids=["past-end", "negative"])
@pytest.mark.parametrize("const", [True, False], ids=["const", "model-input"])
def test_gather_out_of_range_index_fails_the_execution(bad, const):
    # NNAPI checks indices only while running (OP_FAILED), constant or not.
    x = f32_input((3, 4))
    expect_error(GATHER, [x, int_scalar(1), int_vec([0, bad], const=const)], [tensor_type(F32, (3, 2))],
                 "input 2", f"index {bad} is out of range [0, 4)", result=ResultCode.OP_FAILED)


def test_gather_rejects_bad_operands():
    x = f32_input((3, 4))
    out = [tensor_type(F32, (3, 2))]
    expect_error(GATHER, [x, int_scalar(2), int_vec([0, 1])], out, "input 1", "out of range")
    expect_error(GATHER, [x, int_scalar(-3), int_vec([0, 1])], out, "input 1", "out of range")
    floats = (OperandType.tensor(F32, (2,)), Const(np.zeros(2, np.float32)))
    expect_error(GATHER, [x, int_scalar(1), floats], out, "input 2", "TENSOR_FLOAT32 not allowed")
    expect_error(GATHER, [x, int_vec([1]), int_vec([0, 1])], out, "input 1")
    expect_error(GATHER, [x, int_scalar(1)], out, "inputs")
    q = (tensor_type(U8, (3, 4)), np.zeros((3, 4), np.uint8))
    expect_error(GATHER, [q, int_scalar(1), int_vec([0, 1])], [OperandType.tensor(U8, (3, 2), 0.25, 127)],
                 "output 0", "scale")
    expect_error(GATHER, [x, int_scalar(1), int_vec([0, 1])], [tensor_type(F32, (2, 3))], "output 0", "[3, 2]")
    b = (OperandType.tensor(OperandCode.TENSOR_BOOL8, (3, 4)), np.zeros((3, 4), np.bool_))
    expect_error(GATHER, [b, int_scalar(1), int_vec([0, 1])], [OperandType.tensor(OperandCode.TENSOR_BOOL8, (3, 2))],
                 "input 0", "not allowed")


# -- TILE -------------------------------------------------------------------------------------------
TILE_CASES = [((3,), [2]), ((2, 3), [1, 2]), ((1, 2, 3), [2, 3, 1]), ((2, 1, 3, 1), [1, 4, 1, 2]),
              ((2, 2, 1, 1, 2), [2, 1, 3, 1, 1])]


@pytest.mark.parametrize("code", ALL_TYPES, ids=IDS.get)
@pytest.mark.parametrize("case", range(len(TILE_CASES)))
def test_tile_against_onnx(code, case):
    shape, multiples = TILE_CASES[case]
    x = random_data(code, shape)
    expected = onnx_eval("Tile", x, np.array(multiples, np.int64), opset=18)
    (y,) = run_op(TILE, [(tensor_type(code, shape), x), int_vec(multiples)], [tensor_type(code, expected.shape)])
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, expected)


def test_tile_spec_example():
    # AOSP V1_2/tile_3.mod.py: [1, 2, 3] tiled [2, 3, 1] (int32 variation).
    x = np.array([[[11, 12, 13], [21, 22, 23]]], dtype=np.int32)
    (y,) = run_op(TILE, [(tensor_type(I32, (1, 2, 3)), x), int_vec([2, 3, 1])], [tensor_type(I32, (2, 6, 3))])
    np.testing.assert_array_equal(y.ravel(), [11, 12, 13, 21, 22, 23] * 6)


def test_tile_multiples_as_model_input_and_zero_multiple():
    x = random_data(F16, (2, 3))
    (y,) = run_op(TILE, [(tensor_type(F16, x.shape), x), int_vec([3, 1], const=False)], [tensor_type(F16, (0, 0))])
    np.testing.assert_array_equal(y, np.tile(x, (3, 1)))
    (y,) = run_op(TILE, [(tensor_type(F16, x.shape), x), int_vec([2, 0])], [tensor_type(F16, (4, 0))])
    assert y.shape == (4, 0)


def test_tile_rejects_bad_multiples():
    x = f32_input((2, 3))
    expect_error(TILE, [x, int_vec([2])], [tensor_type(F32, (4, 3))], "input 1", "2 entries")
    expect_error(TILE, [x, int_vec([1, -1])], [tensor_type(F32, (2, 3))], "input 1", ">= 0")
    expect_error(TILE, [x, int_vec([[1, 1]])], [tensor_type(F32, (2, 3))], "input 1", "1-D")
    expect_error(TILE, [x, int_vec([1, -2], const=False)], [tensor_type(F32, (0, 0))], "input 1", ">= 0",
                 result=ResultCode.OP_FAILED)
    expect_error(TILE, [x, int_vec([1, 2])], [tensor_type(F32, (2, 3))], "output 0", "[2, 6]")
    q = (tensor_type(S8, (2, 3)), np.zeros((2, 3), np.int8))
    expect_error(TILE, [q, int_vec([1, 1])], [OperandType.tensor(S8, (2, 3), 0.5, 0)], "output 0", "zp")


# -- EXPAND_DIMS ------------------------------------------------------------------------------------
EXPAND_CASES = [((2, 2), 0), ((2, 2), 1), ((2, 2), 2), ((2, 2), -1), ((2, 2), -3), ((5,), 0), ((5,), -1),
                ((2, 3, 4, 5), 4), ((2, 3, 4, 5), -5), ((1, 2, 1, 3, 1), 3)]


@pytest.mark.parametrize("code", ALL_TYPES, ids=IDS.get)
@pytest.mark.parametrize("case", range(len(EXPAND_CASES)))
def test_expand_dims_against_onnx_unsqueeze(code, case):
    shape, axis = EXPAND_CASES[case]
    x = random_data(code, shape)
    expected = onnx_eval("Unsqueeze", x, np.array([axis], np.int64), opset=18)
    (y,) = run_op(EXPAND_DIMS, [(tensor_type(code, shape), x), int_scalar(axis)],
                  [tensor_type(code, expected.shape)])
    assert y.dtype == x.dtype and y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)


def test_expand_dims_spec_example_quant8_signed():
    # AOSP V1_3/expand_dims_quant8_signed.mod.py: scale 0.5, zero point -1; axis -1 on [2, 2].
    data = np.array([1.2, -3.4, 5.6, 7.8])
    q = np.clip(np.floor(data / 0.5 + 0.5) - 1, -128, 127).astype(np.int8).reshape(2, 2)
    (y,) = run_op(EXPAND_DIMS, [(tensor_type(S8, (2, 2)), q), int_scalar(-1)], [tensor_type(S8, (2, 2, 1))])
    np.testing.assert_array_equal(y, q.reshape(2, 2, 1))


def test_expand_dims_unknown_output_dims():
    x = random_data(I32, (3, 2))
    (y,) = run_op(EXPAND_DIMS, [(tensor_type(I32, x.shape), x), int_scalar(1)], [tensor_type(I32, (0, 0, 0))])
    np.testing.assert_array_equal(y, x.reshape(3, 1, 2))


def test_expand_dims_rejects_bad_axis():
    x = f32_input((2, 3))
    expect_error(EXPAND_DIMS, [x, int_scalar(3)], [tensor_type(F32, (2, 3, 1))], "input 1", "out of range [-3, 3)")
    expect_error(EXPAND_DIMS, [x, int_scalar(-4)], [tensor_type(F32, (1, 2, 3))], "input 1", "out of range")
    expect_error(EXPAND_DIMS, [x, (OperandType.scalar(OperandCode.FLOAT32), 1.0)], [tensor_type(F32, (2, 1, 3))],
                 "input 1", "FLOAT32 not allowed")
    expect_error(EXPAND_DIMS, [x, int_scalar(0)], [tensor_type(F32, (2, 3))], "output 0")
    expect_error(EXPAND_DIMS, [x, int_scalar(0)], [tensor_type(F16, (1, 2, 3))], "output 0", "TENSOR_FLOAT16")
