"""CHANNEL_SHUFFLE through the public API (run_op on nnapi-reference).

Expectation: NNAPI's description written as an index map (output index i * groups + j along the axis
holds input index j * group size + i) and applied with np.take; hand-computed cases; the example of
AOSP's V1_2/channel_shuffle.mod.py. Shuffling moves values only, so every type is compared exactly.
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from support import op_data
from support.op_runner import Input, inferred_output_types, run_op

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

F32 = OperandCode.TENSOR_FLOAT32
F16 = OperandCode.TENSOR_FLOAT16
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
OP = OperationCode.CHANNEL_SHUFFLE
INT = OperandType.scalar(OperandCode.INT32)
ALL_CODES = [F32, F16, U8, S8]
CODE_IDS = ["f32", "f16", "u8", "s8"]
QUANT = {U8: (0.25, 128), S8: (0.25, -3)}

rng = np.random.default_rng(4)
ttype = partial(op_data.tensor_type, quant=QUANT)
sample = partial(op_data.random_data, rng)


def shuffle_reference(x, groups, axis):
    size = x.shape[axis]
    group_size = size // groups
    source = [j * group_size + i for i in range(group_size) for j in range(groups)]   # for output k = i * groups + j
    return np.take(x, source, axis=axis)


def shuffle(code, x, groups, axis, out_dims=None):
    (y,) = run_op(OP, [(ttype(code, x.shape), x), (INT, groups), (INT, axis)],
                  [ttype(code, x.shape if out_dims is None else out_dims)])
    assert y.dtype == x.dtype
    return y


CASES = [  # shape, groups, axis
    ((12,), 3, 0), ((12,), 4, -1), ((2, 6), 2, 1), ((6, 2), 3, -2), ((2, 3, 8), 4, 2), ((2, 9, 3), 3, -2),
    ((4, 2, 2, 3), 2, 0), ((2, 3, 4, 12), 3, 3), ((2, 6, 3, 4), 6, 1), ((1, 2, 10, 2), 5, -2),
    ((2, 2, 3, 12), 1, -1), ((2, 2, 3, 12), 12, -1),
]


@pytest.mark.parametrize("code", ALL_CODES, ids=CODE_IDS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_index_map(case, code):
    shape, groups, axis = CASES[case]
    x = sample(code, shape)
    np.testing.assert_array_equal(shuffle(code, x, groups, axis), shuffle_reference(x, groups, axis))


def test_hand_computed():
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(shuffle(F32, x, 2, 0), [0, 3, 1, 4, 2, 5])   # [[0 1 2] [3 4 5]] transposed
    np.testing.assert_array_equal(shuffle(F32, x, 3, -1), [0, 2, 4, 1, 3, 5])  # [[0 1] [2 3] [4 5]] transposed
    m = np.arange(8, dtype=np.int8).reshape(4, 2) - 4
    np.testing.assert_array_equal(shuffle(S8, m, 2, 0), m[[0, 2, 1, 3]])


# AOSP V1_2/channel_shuffle.mod.py: [2, 2, 3, 12] = 0..143, 3 groups on the last axis; AddAllDimsAndAxis moves
# that axis everywhere, which the np.moveaxis variants below do too.
AOSP_ROW = [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]


@pytest.mark.parametrize("code", ALL_CODES, ids=CODE_IDS)
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -4])
def test_aosp_example(code, axis):
    base = np.arange(2 * 2 * 3 * 12).reshape(2, 2, 3, 12)
    expected = (base // 12 * 12 + np.asarray(AOSP_ROW))        # each row of 12 shuffled the same way
    if code == S8:
        base, expected = base - 72, expected - 72               # stored int8 values
    dtype = ttype(code, ()).dtype
    x = np.moveaxis(base, 3, axis).astype(dtype)
    y = shuffle(code, x, 3, axis)
    np.testing.assert_array_equal(y, np.moveaxis(expected, 3, axis).astype(dtype))


def test_output_shape_inferred():
    x = sample(U8, (2, 3, 4, 6))
    np.testing.assert_array_equal(shuffle(U8, x, 3, -1, out_dims=(0, 0, 0, 0)), shuffle_reference(x, 3, -1))
    (y,) = run_op(OP, [(ttype(F16, (0, 0, 6)), x[0].astype(np.float16)), (INT, 2), (INT, 2)], [ttype(F16, (0, 0, 0))])
    np.testing.assert_array_equal(y, shuffle_reference(x[0].astype(np.float16), 2, 2))


def test_build_time_shape_inference():
    (out,) = inferred_output_types(OP, [(ttype(F32, (2, 3, 6)), Input()), (INT, 2), (INT, -1)], [ttype(F32, (0, 0, 0))])
    assert out.dimensions == (2, 3, 6)


# -- validation -----------------------------------------------------------------------------------
def expect_bad_data(inputs, outputs, *words):
    with pytest.raises(MltsError) as info:
        run_op(OP, inputs, outputs)
    assert info.value.code == ResultCode.BAD_DATA
    assert "CHANNEL_SHUFFLE" in str(info.value)
    for w in words:
        assert w in str(info.value), str(info.value)


def f32(shape):
    return (ttype(F32, shape), np.zeros(shape, np.float32))


def test_rejects_bad_num_groups():
    expect_bad_data([f32((2, 6)), (INT, 0), (INT, 1)], [ttype(F32, (2, 6))], "input 1", "> 0")
    expect_bad_data([f32((2, 6)), (INT, -2), (INT, 1)], [ttype(F32, (2, 6))], "input 1", "> 0")
    expect_bad_data([f32((2, 6)), (INT, 4), (INT, 1)], [ttype(F32, (2, 6))], "input 1", "size 6")
    expect_bad_data([f32((2, 6)), (INT, 4), (INT, -2)], [ttype(F32, (2, 6))], "input 1", "size 2")


def test_rejects_bad_axis():
    expect_bad_data([f32((2, 6)), (INT, 2), (INT, 2)], [ttype(F32, (2, 6))], "input 2", "[-2, 2)")
    expect_bad_data([f32((2, 6)), (INT, 2), (INT, -3)], [ttype(F32, (2, 6))], "input 2", "out of range")


def test_rejects_bad_tensors_and_counts():
    expect_bad_data([f32((1, 2, 2, 2, 2)), (INT, 2), (INT, -1)], [ttype(F32, (1, 2, 2, 2, 2))], "input 0", "rank 5")
    x = np.zeros((2, 4), np.int32)
    expect_bad_data([(OperandType.tensor(OperandCode.TENSOR_INT32, x.shape), x), (INT, 2), (INT, 1)],
                    [OperandType.tensor(OperandCode.TENSOR_INT32, x.shape)], "input 0", "TENSOR_INT32")
    expect_bad_data([f32((2, 4)), (OperandType.scalar(OperandCode.FLOAT32), 2.0), (INT, 1)], [ttype(F32, (2, 4))],
                    "input 1", "INT32")
    expect_bad_data([f32((2, 4)), (INT, 2)], [ttype(F32, (2, 4))], "3 inputs")


def test_rejects_changed_output_type_or_quantization():
    q = (OperandType.tensor(U8, (2, 4), 0.5, 3), np.zeros((2, 4), np.uint8))
    expect_bad_data([q, (INT, 2), (INT, 1)], [OperandType.tensor(U8, (2, 4), 0.25, 3)], "output 0", "scale")
    expect_bad_data([q, (INT, 2), (INT, 1)], [OperandType.tensor(S8, (2, 4), 0.5, 3)], "output 0")
    expect_bad_data([f32((2, 4)), (INT, 2), (INT, 1)], [OperandType.tensor(F16, (2, 4))], "output 0", "TENSOR_FLOAT16")
