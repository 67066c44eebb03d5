"""SLICE, STRIDED_SLICE and SPLIT through the public API (run_op on nnapi-reference).

These operations only move data, so every type must come back bit-exact. Expectations: onnx.reference
Slice and Split run on the same data in its own dtype, numpy basic indexing (Python slices, integer
indices for shrunk axes) for STRIDED_SLICE with masks, and examples from AOSP's spec files.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from support import op_data
from support.onnx_reference import onnx_eval, onnx_outputs
from support.op_data import int_scalar, int_vec
from support.op_data import ALL_TYPES, F16, F32, I32, S8, U8
from support.op_data import TYPE_IDS as IDS
from support.op_runner import Const, expect_error, run_op

from mlts.runtime import OperandCode, OperandType, OperationCode, ResultCode

INT32 = OperandCode.INT32
SLICE, STRIDED_SLICE, SPLIT = OperationCode.SLICE, OperationCode.STRIDED_SLICE, OperationCode.SPLIT
QUANT = {U8: (0.5, 120), S8: (0.25, -3)}
INT64_MAX = np.iinfo(np.int64).max

rng = np.random.default_rng(2024)
tensor_type = partial(op_data.tensor_type, quant=QUANT)
random_data = partial(op_data.random_data, rng)


def f32_input(shape):
    return (tensor_type(F32, shape), np.zeros(shape, np.float32))


# -- SLICE ------------------------------------------------------------------------------------------
SLICE_CASES = [((4,), [1], [2]), ((2, 3), [1, 0], [1, 2]), ((2, 3, 2), [0, 0, 0], [2, 3, 2]),
               ((3, 2, 3, 1), [1, 0, 0, 0], [2, 1, -1, 1]), ((2, 3, 4), [0, 1, 3], [-1, -1, 1]),
               ((1, 2, 3, 4, 5), [0, 1, 1, 2, 0], [1, 1, 2, 2, -1])]


@pytest.mark.parametrize("code", ALL_TYPES, ids=IDS.get)
@pytest.mark.parametrize("case", range(len(SLICE_CASES)))
def test_slice_against_onnx(code, case):
    shape, begin, size = SLICE_CASES[case]
    x = random_data(code, shape)
    ends = [INT64_MAX if s == -1 else b + s for b, s in zip(begin, size)]
    expected = onnx_eval("Slice", x, np.array(begin, np.int64), np.array(ends, np.int64), opset=18)
    (y,) = run_op(SLICE, [(tensor_type(code, shape), x), int_vec(begin), int_vec(size)],
                  [tensor_type(code, expected.shape)])
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, expected)


def test_slice_spec_examples():
    # AOSP V1_2/slice.mod.py: the quant8 case (scale 2, zero point 128) and the size -1 case.
    data = np.array([1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6]).reshape(3, 2, 3, 1)
    t = OperandType.tensor(U8, (3, 2, 3, 1), 2.0, 128)
    (y,) = run_op(SLICE, [(t, data.astype(np.uint8)), int_vec([1, 0, 0, 0]), int_vec([2, 1, 3, 1])],
                  [OperandType.tensor(U8, (2, 1, 3, 1), 2.0, 128)])
    np.testing.assert_array_equal(y.ravel(), [3, 3, 3, 5, 5, 5])
    (y,) = run_op(SLICE, [(tensor_type(I32, data.shape), data), int_vec([1, 0, 0, 0]), int_vec([2, 1, -1, 1])],
                  [tensor_type(I32, (2, 1, 3, 1))])
    np.testing.assert_array_equal(y.ravel(), [3, 3, 3, 5, 5, 5])


def test_slice_parameters_known_only_at_run_time():
    x = random_data(F32, (3, 4, 5))
    (y,) = run_op(SLICE, [(tensor_type(F32, x.shape), x), int_vec([1, 2, 0], const=False),
                          int_vec([2, -1, 3], const=False)], [tensor_type(F32, (0, 0, 0))])
    np.testing.assert_array_equal(y, x[1:3, 2:, 0:3])


def test_slice_size_zero_gives_zero_sized_output():
    x = random_data(F32, (2, 3))
    (y,) = run_op(SLICE, [(tensor_type(F32, x.shape), x), int_vec([1, 3]), int_vec([1, 0])],
                  [tensor_type(F32, (1, 0))])
    assert y.shape == (1, 0)


def test_slice_rejects_bad_parameters():
    x = f32_input((2, 3))
    out = [tensor_type(F32, (1, 1))]
    expect_error(SLICE, [x, int_vec([2, 0]), int_vec([1, 1])], out, "input 2", "exceeds dimension 0")
    expect_error(SLICE, [x, int_vec([3, 0]), int_vec([-1, 1])], out, "input 1", "begin[0] = 3 exceeds")
    expect_error(SLICE, [x, int_vec([0, 2]), int_vec([1, 2])], out, "input 2", "exceeds dimension 1")
    expect_error(SLICE, [x, int_vec([-1, 0]), int_vec([1, 1])], out, "input 1", "negative")
    expect_error(SLICE, [x, int_vec([0, 0]), int_vec([1, -2])], out, "input 2", "size[1] = -2")
    expect_error(SLICE, [x, int_vec([0, 0, 0]), int_vec([1, 1, 1])], out, "input 1", "2 entries")
    expect_error(SLICE, [x, int_vec([[0, 0]]), int_vec([1, 1])], out, "input 1", "1-D")
    expect_error(SLICE, [x, int_vec([0, 0])], out, "inputs")
    # The declared output shape must match the computed one.
    expect_error(SLICE, [x, int_vec([0, 0]), int_vec([1, 2])], out, "output 0", "[1, 2]")


def test_slice_rejects_bad_types_and_quantization():
    q = (tensor_type(U8, (2, 3)), np.zeros((2, 3), np.uint8))
    expect_error(SLICE, [q, int_vec([0, 0]), int_vec([1, 1])], [OperandType.tensor(U8, (1, 1), 0.5, 121)],
                 "output 0", "zp")
    expect_error(SLICE, [q, int_vec([0, 0]), int_vec([1, 1])], [tensor_type(S8, (1, 1))], "output 0")
    b = (OperandType.tensor(OperandCode.TENSOR_QUANT16_ASYMM, (2, 3), 0.5, 0), np.zeros((2, 3), np.uint16))
    expect_error(SLICE, [b, int_vec([0, 0]), int_vec([1, 1])],
                 [OperandType.tensor(OperandCode.TENSOR_QUANT16_ASYMM, (1, 1), 0.5, 0)], "input 0", "not allowed")
    floats = (OperandType.tensor(F32, (2,)), Const(np.zeros(2, np.float32)))
    expect_error(SLICE, [f32_input((2, 3)), floats, int_vec([1, 1])], [tensor_type(F32, (1, 1))], "input 1")


# -- STRIDED_SLICE ----------------------------------------------------------------------------------
def numpy_strided_slice(x, begin, end, strides, begin_mask, end_mask, shrink_mask):
    """numpy basic indexing: masked bounds become None, shrunk axes an integer index."""
    index = []
    for d in range(x.ndim):
        if shrink_mask >> d & 1:
            index.append(begin[d])
            continue
        start = None if begin_mask >> d & 1 else begin[d]
        stop = None if end_mask >> d & 1 else end[d]
        index.append(slice(start, stop, strides[d]))
    y = x[tuple(index)]
    return y.reshape(1) if y.ndim == 0 else y   # NNAPI: shrinking every axis leaves shape [1]


STRIDED_CASES = [  # shape, begin, end, strides, begin_mask, end_mask, shrink_axis_mask
    ((6,), [1], [5], [2], 0, 0, 0),
    ((6,), [-2], [-6], [-1], 0, 0, 0),
    ((6,), [-10], [100], [1], 0, 0, 0),            # clamped to the whole range
    ((6,), [100], [-100], [-2], 0, 0, 0),          # clamped, backwards
    ((6,), [4], [2], [1], 0, 0, 0),                # empty
    ((2, 3), [1, -1], [2, -4], [2, -1], 0, 0, 0),
    ((2, 3), [1, 0], [2, 2], [1, 1], 1, 2, 0),
    ((3, 4), [2, 3], [0, 0], [-1, -2], 3, 3, 0),   # masks with negative strides: whole range, backwards
    ((3, 4), [1, 0], [2, 4], [1, 1], 0, 0, 1),     # shrink axis 0
    ((3, 4), [-1, 2], [0, 3], [1, 1], 0, 1, 3),    # shrink both: shape [1]
    ((2, 3, 4), [0, 2, -1], [2, 0, 0], [1, -1, -3], 0, 0, 0),
    ((2, 3, 4, 5), [1, 0, 1, 4], [2, 3, 3, 0], [1, 2, 1, -2], 0, 2, 1),
    ((2, 3, 4, 5), [0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1], -1, -1, 0),   # every mask bit set: identity
]


@pytest.mark.parametrize("code", [F32, F16, U8, S8], ids=IDS.get)
@pytest.mark.parametrize("case", range(len(STRIDED_CASES)))
def test_strided_slice_against_numpy_indexing(code, case):
    shape, begin, end, strides, bmask, emask, smask = STRIDED_CASES[case]
    x = random_data(code, shape)
    expected = numpy_strided_slice(x, begin, end, strides, bmask, emask, smask)
    ins = [(tensor_type(code, shape), x), int_vec(begin), int_vec(end), int_vec(strides),
           int_scalar(bmask), int_scalar(emask), int_scalar(smask)]
    (y,) = run_op(STRIDED_SLICE, ins, [tensor_type(code, expected.shape)])
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("case", [c for c, s in enumerate(STRIDED_CASES) if s[4] == s[5] == s[6] == 0])
def test_strided_slice_against_onnx_slice(case):
    shape, begin, end, strides, *_ = STRIDED_CASES[case]
    x = random_data(F32, shape)
    consts = [np.array(c, np.int64) for c in (begin, end, range(len(shape)), strides)]
    expected = onnx_eval("Slice", x, *consts, opset=18)
    ins = [(tensor_type(F32, shape), x), int_vec(begin), int_vec(end), int_vec(strides),
           int_scalar(0), int_scalar(0), int_scalar(0)]
    (y,) = run_op(STRIDED_SLICE, ins, [tensor_type(F32, expected.shape)])
    np.testing.assert_array_equal(y, expected)


def test_strided_slice_spec_examples():
    # AOSP V1_3/strided_slice_quant8_signed.mod.py (scale 1, zero point -128).
    q = np.array([-127, -126, -125, -124, -123, -122], dtype=np.int8)
    t = OperandType.tensor(S8, (2, 3), 1.0, -128)
    cases = [([1, 0], [2, 2], [1, 1], 0, 2, 0, (1, 3), [-124, -123, -122]),
             ([0, 0], [1, 3], [1, 1], 0, 0, 1, (3,), [-127, -126, -125]),
             ([1, -1], [2, -4], [2, -1], 0, 0, 0, (1, 3), [-122, -123, -124]),
             ([1, 0], [2, 2], [1, 1], 1, 0, 0, (2, 2), [-127, -126, -124, -123])]
    for begin, end, strides, bmask, emask, smask, shape, expected in cases:
        ins = [(t, q.reshape(2, 3)), int_vec(begin), int_vec(end), int_vec(strides),
               int_scalar(bmask), int_scalar(emask), int_scalar(smask)]
        (y,) = run_op(STRIDED_SLICE, ins, [OperandType.tensor(S8, shape, 1.0, -128)])
        np.testing.assert_array_equal(y.ravel(), expected)
    # AOSP V1_1/strided_slice_b155662254.mod.py: a rank-1 input shrunk to shape [1].
    x = np.array([0.0, 1.0, 2.0, 3.0], dtype=np.float32)
    ins = [(tensor_type(F32, (4,)), x), int_vec([0]), int_vec([1]), int_vec([1]),
           int_scalar(0), int_scalar(0), int_scalar(1)]
    (y,) = run_op(STRIDED_SLICE, ins, [tensor_type(F32, (1,))])
    np.testing.assert_array_equal(y, [0.0])


def test_strided_slice_spec_invalid_shrinks():
    # AOSP V1_2/strided_slice_invalid.mod.py: a shrunk axis selecting 2 elements; a shrunk axis with a
    # negative stride (selecting one element, but NNAPI only allows positive strides there).
    x = f32_input((2, 3))
    base = [int_scalar(0), int_scalar(0), int_scalar(1)]
    expect_error(STRIDED_SLICE, [x, int_vec([0, 0]), int_vec([2, 3]), int_vec([1, 1]), *base],
                 [tensor_type(F32, (3,))], "input 6", "selects 2 elements")
    expect_error(STRIDED_SLICE, [x, int_vec([1, 0]), int_vec([0, 3]), int_vec([-1, 1]), *base],
                 [tensor_type(F32, (3,))], "input 6", "not positive")


def test_strided_slice_parameters_known_only_at_run_time():
    x = random_data(F16, (4, 5))
    ins = [(tensor_type(F16, x.shape), x), int_vec([3, 0], const=False), int_vec([0, 5], const=False),
           int_vec([-1, 2], const=False), int_scalar(0), int_scalar(0), int_scalar(0)]
    (y,) = run_op(STRIDED_SLICE, ins, [tensor_type(F16, (0, 0))])
    np.testing.assert_array_equal(y, x[3:0:-1, 0:5:2])
    # A bad stride that only arrives with the request fails the execution.
    ins[3] = int_vec([1, 0], const=False)
    expect_error(STRIDED_SLICE, ins, [tensor_type(F16, (0, 0))], "input 3", "non-zero", result=ResultCode.OP_FAILED)


def test_strided_slice_rejects_bad_operands():
    x = f32_input((2, 3))
    masks = [int_scalar(0), int_scalar(0), int_scalar(0)]
    out = [tensor_type(F32, (1, 1))]
    expect_error(STRIDED_SLICE, [x, int_vec([0, 0]), int_vec([1, 1]), int_vec([1, 0]), *masks], out,
                 "input 3", "non-zero")
    expect_error(STRIDED_SLICE, [x, int_vec([0]), int_vec([1, 1]), int_vec([1, 1]), *masks], out,
                 "input 1", "2 entries")
    expect_error(STRIDED_SLICE, [x, int_vec([0, 0]), int_vec([1, 1]), int_vec([1, 1]), *masks[:2]], out, "inputs")
    x5 = f32_input((1, 1, 1, 1, 2))
    expect_error(STRIDED_SLICE, [x5, int_vec([0] * 5), int_vec([1] * 5), int_vec([1] * 5), *masks],
                 [tensor_type(F32, (1, 1, 1, 1, 1))], "input 0", "rank")
    i = (tensor_type(I32, (2, 3)), np.zeros((2, 3), np.int32))
    expect_error(STRIDED_SLICE, [i, int_vec([0, 0]), int_vec([1, 1]), int_vec([1, 1]), *masks],
                 [tensor_type(I32, (1, 1))], "input 0", "TENSOR_INT32 not allowed")
    q = (tensor_type(S8, (2, 3)), np.zeros((2, 3), np.int8))
    expect_error(STRIDED_SLICE, [q, int_vec([0, 0]), int_vec([1, 1]), int_vec([1, 1]), *masks],
                 [OperandType.tensor(S8, (1, 1), 0.5, -3)], "output 0", "scale")
    bad_mask = (OperandType.scalar(OperandCode.FLOAT32), 0.0)
    expect_error(STRIDED_SLICE, [x, int_vec([0, 0]), int_vec([1, 1]), int_vec([1, 1]), *masks[:2], bad_mask],
                 out, "input 6")


# -- SPLIT ------------------------------------------------------------------------------------------
SPLIT_CASES = [((6,), 0, 3), ((2, 3), 0, 2), ((2, 2, 2), -2, 2), ((2, 4, 6), 2, 3), ((4, 1, 2, 3), -4, 4),
               ((3, 5), 1, 1)]


@pytest.mark.parametrize("code", ALL_TYPES, ids=IDS.get)
@pytest.mark.parametrize("case", range(len(SPLIT_CASES)))
def test_split_against_onnx(code, case):
    shape, axis, count = SPLIT_CASES[case]
    x = random_data(code, shape)
    expected = onnx_outputs("Split", x, n_outputs=count, opset=18, axis=axis, num_outputs=count)
    ys = run_op(SPLIT, [(tensor_type(code, shape), x), int_scalar(axis), int_scalar(count)],
                [tensor_type(code, e.shape) for e in expected])
    assert len(ys) == count
    for y, e in zip(ys, expected):
        assert y.dtype == x.dtype
        np.testing.assert_array_equal(y, e)


def test_split_spec_example_and_unknown_output_dims():
    # AOSP V1_3/split_quant8_signed.mod.py: [2, 3] (scale 2, zero point -125) split in 2 along axis 0.
    t = OperandType.tensor(S8, (2, 3), 2.0, -125)
    q = np.array([[-127, -126, -125], [-124, -123, -122]], dtype=np.int8)
    out = OperandType.tensor(S8, (0, 0), 2.0, -125)
    a, b = run_op(SPLIT, [(t, q), int_scalar(0), int_scalar(2)], [out, out])
    np.testing.assert_array_equal(a, [[-127, -126, -125]])
    np.testing.assert_array_equal(b, [[-124, -123, -122]])


def test_split_rejects_bad_parameters():
    x = f32_input((4, 6))
    two = [tensor_type(F32, (4, 3))] * 2
    expect_error(SPLIT, [x, int_scalar(1), int_scalar(3)], two, "input 2", "3 but the operation has 2")
    expect_error(SPLIT, [x, int_scalar(2), int_scalar(2)], two, "input 1", "out of range")
    expect_error(SPLIT, [x, int_scalar(-3), int_scalar(2)], two, "input 1", "out of range")
    expect_error(SPLIT, [f32_input((4, 5)), int_scalar(1), int_scalar(2)], [tensor_type(F32, (4, 0))] * 2,
                 "input 2", "cannot be split")
    q = (tensor_type(U8, (4, 6)), np.zeros((4, 6), np.uint8))
    outs = [tensor_type(U8, (4, 3)), OperandType.tensor(U8, (4, 3), 0.5, 0)]
    expect_error(SPLIT, [q, int_scalar(1), int_scalar(2)], outs, "output 1", "zp")
    expect_error(SPLIT, [x, int_scalar(1)], two, "inputs")
