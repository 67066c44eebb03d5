"""MIRROR_PAD and REVERSE through the public API (run_op on nnapi-reference).

MIRROR_PAD REFLECT against onnx.reference Pad (mode "reflect"), SYMMETRIC against numpy's
np.pad(mode="symmetric") (ONNX has no such mode), the documented example [1, 2, 3] and the padding
limits of NNAPI's documentation (REFLECT: at most dim - 1; SYMMETRIC: at most dim). REVERSE against
np.flip and hand values. Both from NNAPI's documentation (feature level 7).
"""
from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from support import op_data
from support.onnx_reference import ONNX_TYPE
from support.op_data import F16, F32, I32, S8, U8
from support.op_runner import Const, Input, inferred_output_types, run_op

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

INT = OperandType.scalar(OperandCode.INT32)
MIRROR_PAD, REVERSE = OperationCode.MIRROR_PAD, OperationCode.REVERSE
REFLECT, SYMMETRIC = 0, 1
CODES = [F32, F16, I32, U8, S8]
CODE_IDS = ["f32", "f16", "i32", "u8", "s8"]

rng = np.random.default_rng(104)


def onnx_reflect_pad(x, paddings):
    paddings = np.asarray(paddings, dtype=np.int64)
    pads = numpy_helper.from_array(np.concatenate([paddings[:, 0], paddings[:, 1]]), "pads")
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", ONNX_TYPE[x.dtype], None)],
                              [helper.make_tensor_value_info("y", ONNX_TYPE[x.dtype], None)], initializer=[pads])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, {"x": x})[0]


ttype = partial(op_data.tensor_type, quant={U8: (0.5, 3), S8: (0.5, -7)})


def sample(code, shape):
    dtype = ttype(code, ()).dtype
    if code in (U8, S8):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    if code == I32:
        return rng.integers(-(2**31), 2**31, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def paddings_in(p, const=True):
    p = np.asarray(p, dtype=np.int32)
    return OperandType.tensor(I32, p.shape), Const(p) if const else p


def padded_dims(shape, paddings):
    return tuple(b + s + a for s, (b, a) in zip(shape, paddings))


def run_mirror_pad(code, x, paddings, mode, out_dims=None):
    out_dims = padded_dims(x.shape, paddings) if out_dims is None else out_dims
    return run_op(MIRROR_PAD, [(ttype(code, x.shape), x), paddings_in(paddings), (INT, mode)],
                  [ttype(code, out_dims)])[0]


# -- MIRROR_PAD -------------------------------------------------------------------------------------
PAD_CASES = [((5,), [[2, 1]]), ((2, 3), [[1, 1], [2, 0]]), ((3, 4, 2), [[2, 0], [0, 3], [1, 1]]),
             ((2, 3, 3, 4), [[0, 1], [1, 2], [2, 2], [3, 0]]), ((2, 2, 1, 2, 2), [[1, 1], [0, 1], [0, 0], [1, 0], [0, 0]])]


@pytest.mark.parametrize("case", range(len(PAD_CASES)))
@pytest.mark.parametrize("code", CODES, ids=CODE_IDS)
def test_reflect_against_onnx(case, code):
    shape, paddings = PAD_CASES[case]
    x = sample(code, shape)
    y = run_mirror_pad(code, x, paddings, REFLECT)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, onnx_reflect_pad(x, paddings))


@pytest.mark.parametrize("case", range(len(PAD_CASES)))
@pytest.mark.parametrize("code", CODES, ids=CODE_IDS)
def test_symmetric_against_numpy(case, code):
    shape, paddings = PAD_CASES[case]
    x = sample(code, shape)
    paddings = [[min(b + 1, s), min(a + 1, s)] for s, (b, a) in zip(shape, paddings)]  # up to the limit dim
    y = run_mirror_pad(code, x, paddings, SYMMETRIC)
    np.testing.assert_array_equal(y, np.pad(x, paddings, mode="symmetric"))


@pytest.mark.parametrize("mode, before, after, expected", [
    (REFLECT, 0, 2, [1, 2, 3, 2, 1]),             # NNAPI's documented example
    (SYMMETRIC, 0, 2, [1, 2, 3, 3, 2]),           # NNAPI's documented example
    (REFLECT, 2, 2, [3, 2, 1, 2, 3, 2, 1]),       # REFLECT's limit: dim - 1
    (SYMMETRIC, 3, 3, [3, 2, 1, 1, 2, 3, 3, 2, 1]),  # SYMMETRIC's limit: dim
    (SYMMETRIC, 1, 0, [1, 1, 2, 3]),
])
def test_hand_values(mode, before, after, expected):
    y = run_mirror_pad(F32, np.array([1, 2, 3], np.float32), [[before, after]], mode)
    assert y.tolist() == expected


def test_dimension_of_one():
    x = np.array([[7], [8]], np.int32)
    assert run_mirror_pad(I32, x, [[1, 0], [0, 0]], REFLECT).tolist() == [[8], [7], [8]]   # a size-1 dim: no padding
    assert run_mirror_pad(I32, x, [[0, 0], [1, 1]], SYMMETRIC).tolist() == [[7, 7, 7], [8, 8, 8]]


def test_paddings_as_model_input():
    x = sample(F32, (3, 4))
    (y,) = run_op(MIRROR_PAD, [(ttype(F32, x.shape), x), paddings_in([[1, 2], [3, 0]], const=False), (INT, REFLECT)],
                  [ttype(F32, (0, 0))])
    np.testing.assert_array_equal(y, onnx_reflect_pad(x, [[1, 2], [3, 0]]))


def inferred_pad_dims(input_dims, paddings, mode=REFLECT, *, const_paddings=True):
    inputs = [(OperandType.tensor(F32, input_dims), Input()),
              (OperandType.tensor(I32, (len(input_dims), 2)), Const(paddings) if const_paddings else Input()),
              (INT, mode)]
    return inferred_output_types(MIRROR_PAD, inputs, [OperandType.tensor(F32, (0,) * len(input_dims))])[0].dimensions


def test_mirror_pad_build_time_shape_inference():
    assert inferred_pad_dims((2, 3), [[1, 1], [0, 2]]) == (4, 5)
    assert inferred_pad_dims((2, 3), [[2, 2], [3, 0]], SYMMETRIC) == (6, 6)
    assert inferred_pad_dims((2, 0), [[1, 1], [0, 2]]) == (0, 0)
    assert inferred_pad_dims((2, 3), [[1, 1], [0, 2]], const_paddings=False) == (0, 0)


def expect_bad_data(code, inputs, outputs, *words, result=ResultCode.BAD_DATA):
    with pytest.raises(MltsError) as info:
        run_op(code, inputs, outputs)
    assert info.value.code == result
    assert code.name in str(info.value)
    for w in words:
        assert w in str(info.value), str(info.value)


def f32(shape):
    return OperandType.tensor(F32, shape), np.zeros(shape, np.float32)


def test_mirror_pad_rejects_paddings_beyond_the_mirror():
    expect_bad_data(MIRROR_PAD, [f32((3,)), paddings_in([[3, 0]]), (INT, REFLECT)], [OperandType.tensor(F32, (6,))],
                    "input 1", "exceed the REFLECT limit 2")
    expect_bad_data(MIRROR_PAD, [f32((3,)), paddings_in([[0, 4]]), (INT, SYMMETRIC)], [OperandType.tensor(F32, (7,))],
                    "input 1", "exceed the SYMMETRIC limit 3")
    expect_bad_data(MIRROR_PAD, [f32((2, 1)), paddings_in([[0, 0], [1, 0]]), (INT, REFLECT)],
                    [OperandType.tensor(F32, (2, 2))], "input 1", "dimension 1 (size 1)")
    # The dimension known only while running: the same check fails the execution.
    expect_bad_data(MIRROR_PAD, [(OperandType.tensor(F32, (0,)), np.zeros(3, np.float32)), paddings_in([[3, 0]]),
                                 (INT, REFLECT)], [OperandType.tensor(F32, (0,))], "input 1", "REFLECT limit 2",
                    result=ResultCode.OP_FAILED)


def test_mirror_pad_rejects_bad_operands():
    out = [OperandType.tensor(F32, (4, 3))]
    expect_bad_data(MIRROR_PAD, [f32((2, 3)), paddings_in([[1, 1], [0, -1]]), (INT, 1)], out, "input 1", ">= 0")
    expect_bad_data(MIRROR_PAD, [f32((2, 3)), paddings_in([[1, 1]]), (INT, 1)], out, "input 1", "[2, 2]")
    expect_bad_data(MIRROR_PAD, [f32((2, 3)), paddings_in([[1, 1, 0], [0, 0, 0]]), (INT, 1)], out, "input 1", "[rank, 2]")
    expect_bad_data(MIRROR_PAD, [f32((2, 3)), paddings_in([1, 1, 0, 0]), (INT, 1)], out, "input 1", "2-D")
    expect_bad_data(MIRROR_PAD, [f32((2, 3)), paddings_in([[1, 1], [0, 0]]), (INT, 2)], out, "input 2", "mode 2")
    expect_bad_data(MIRROR_PAD, [f32((2, 3)), paddings_in([[1, 1], [0, 0]]), (OperandType.scalar(OperandCode.FLOAT32), 0.0)],
                    out, "input 2", "FLOAT32")
    expect_bad_data(MIRROR_PAD, [f32(()), paddings_in([[0, 0]]), (INT, 1)], [OperandType.tensor(F32, ())],
                    "input 0", "rank 0")
    expect_bad_data(MIRROR_PAD, [f32((2, 3)), paddings_in([[1, 1], [0, 0]])], out, "inputs")
    expect_bad_data(MIRROR_PAD, [f32((2, 3)), paddings_in([[1, 1], [0, 0]]), (INT, 1)], [OperandType.tensor(I32, (4, 3))],
                    "output 0", "TENSOR_INT32")
    expect_bad_data(MIRROR_PAD, [f32((2, 3)), paddings_in([[1, 1], [0, 0]]), (INT, 1)], [OperandType.tensor(F32, (4, 3, 1))],
                    "output 0", "rank 3 does not match")
    q = (OperandType.tensor(U8, (2, 3), 0.5, 3), np.zeros((2, 3), np.uint8))
    expect_bad_data(MIRROR_PAD, [q, paddings_in([[1, 1], [0, 0]]), (INT, 1)], [OperandType.tensor(U8, (4, 3), 0.5, 4)],
                    "output 0", "zp")


# -- REVERSE ----------------------------------------------------------------------------------------
def axis_in(axis, const=True):
    a = np.asarray(axis, dtype=np.int32).reshape(-1)
    return OperandType.tensor(I32, a.shape), Const(a) if const else a


def run_reverse(code, x, axis, out_dims=None):
    return run_op(REVERSE, [(ttype(code, x.shape), x), axis_in(axis)],
                  [ttype(code, x.shape if out_dims is None else out_dims)])[0]


@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 3, 4), (1, 2, 3, 2), (2, 1, 2, 1, 2, 1, 2, 3)])
@pytest.mark.parametrize("code", CODES, ids=CODE_IDS)
def test_reverse_against_numpy_every_axis(code, shape):
    x = sample(code, shape)
    for axis in range(len(shape)):
        y = run_reverse(code, x, axis)
        assert y.dtype == x.dtype
        np.testing.assert_array_equal(y, np.flip(x, axis))


def test_reverse_hand_values():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    assert run_reverse(I32, x, 0).tolist() == [[4, 5, 6], [1, 2, 3]]
    assert run_reverse(I32, x, 1).tolist() == [[3, 2, 1], [6, 5, 4]]


def test_reverse_axis_as_model_input_and_unknown_dims():
    x = sample(F16, (2, 3, 4))
    (y,) = run_op(REVERSE, [(ttype(F16, (0, 0, 0)), x), axis_in(1, const=False)], [ttype(F16, (0, 0, 0))])
    np.testing.assert_array_equal(y, np.flip(x, 1))


def test_reverse_build_time_shape_inference():
    (out,) = inferred_output_types(REVERSE, [(OperandType.tensor(F32, (2, 3, 4)), Input()),
                                             (OperandType.tensor(I32, (1,)), Const([2]))],
                                   [OperandType.tensor(F32, (0, 0, 0))])
    assert out.dimensions == (2, 3, 4)


def test_reverse_rejects_bad_axis():
    out = [OperandType.tensor(F32, (2, 3))]
    expect_bad_data(REVERSE, [f32((2, 3)), axis_in(-1)], out, "input 1", "axis -1 out of range [0, 2)")
    expect_bad_data(REVERSE, [f32((2, 3)), axis_in(2)], out, "input 1", "axis 2 out of range")
    expect_bad_data(REVERSE, [f32((2, 3)), axis_in([0, 1])], out, "input 1", "shape [1], got [2]")
    expect_bad_data(REVERSE, [f32((2, 3)), (OperandType.tensor(I32, (1, 1)), Const(np.zeros((1, 1), np.int32)))],
                    out, "input 1", "1-D")
    expect_bad_data(REVERSE, [f32((2, 3)), (INT, 0)], out, "input 1", "INT32")
    # Unknown dimensions but a known rank: caught while building; an unknown rank: while running.
    expect_bad_data(REVERSE, [(OperandType.tensor(F32, (0, 0)), np.zeros((2, 3), np.float32)), axis_in(2)],
                    [OperandType.tensor(F32, (0, 0))], "input 1", "axis 2 out of range")
    expect_bad_data(REVERSE, [(OperandType.tensor(F32, None), np.zeros((2, 3), np.float32)), axis_in(2)],
                    [OperandType.tensor(F32, None)], "input 1", "axis 2 out of range", result=ResultCode.OP_FAILED)


def test_reverse_rejects_bad_operands():
    expect_bad_data(REVERSE, [f32((1,) * 9), axis_in(0)], [OperandType.tensor(F32, (1,) * 9)], "input 0",
                    "rank 9 exceeds the maximum of 8")
    expect_bad_data(REVERSE, [f32(()), axis_in(0)], [OperandType.tensor(F32, ())], "input 0", "rank 0")
    tb = OperandType.tensor(OperandCode.TENSOR_BOOL8, (2,))
    expect_bad_data(REVERSE, [(tb, np.zeros(2, bool)), axis_in(0)], [tb], "input 0", "TENSOR_BOOL8")
    expect_bad_data(REVERSE, [f32((2, 3)), axis_in(0)], [OperandType.tensor(F16, (2, 3))], "output 0", "TENSOR_FLOAT16")
    expect_bad_data(REVERSE, [f32((2, 3)), axis_in(0)], [OperandType.tensor(F32, (3, 2))], "output 0", "dimensions")
    expect_bad_data(REVERSE, [f32((2, 3))], [OperandType.tensor(F32, (2, 3))], "inputs")
    q = (OperandType.tensor(S8, (2, 3), 0.5, 3), np.zeros((2, 3), np.int8))
    expect_bad_data(REVERSE, [q, axis_in(0)], [OperandType.tensor(S8, (2, 3), 0.25, 3)], "output 0", "scale")
