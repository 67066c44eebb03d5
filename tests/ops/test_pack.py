"""PACK through the public API (run_op on nnapi-reference).

Results against onnx.reference Unsqueeze (at the axis) of every input followed by Concat (along it),
hand values, and the rules of NNAPI's PACK documentation (feature level 6): the axis in [0, R], one
type, shape, scale and zero point for every input and the output.
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
from support.op_runner import Input, inferred_output_types, run_op

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

INT = OperandType.scalar(OperandCode.INT32)
OP = OperationCode.PACK

rng = np.random.default_rng(103)


def onnx_pack(parts, axis):
    names = [f"x{i}" for i in range(len(parts))]
    nodes = [helper.make_node("Unsqueeze", [n, "axes"], [n + "u"]) for n in names]
    nodes.append(helper.make_node("Concat", [n + "u" for n in names], ["y"], axis=axis))
    dtype = ONNX_TYPE[parts[0].dtype]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, dtype, None) for n in names],
                              [helper.make_tensor_value_info("y", dtype, None)],
                              initializer=[numpy_helper.from_array(np.array([axis], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, parts)))[0]


ttype = partial(op_data.tensor_type, quant={U8: (0.5, 3), S8: (0.5, -7)})


def sample(code, shape):
    dtype = ttype(code, ()).dtype
    if code in (U8, S8, I32):
        info = np.iinfo(dtype) if code != I32 else np.iinfo(np.int32)
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def run_pack(code, parts, axis, out_dims=None):
    t = ttype(code, parts[0].shape)
    if out_dims is None:
        out_dims = parts[0].shape[:axis] + (len(parts),) + parts[0].shape[axis:]
    return run_op(OP, [(INT, axis)] + [(t, p) for p in parts], [ttype(code, out_dims)])[0]


SHAPES = [(4,), (2, 3), (2, 1, 3), (1, 2, 2, 3), (2, 1, 1, 2, 2)]


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("code", [F32, F16, I32, U8, S8], ids=["f32", "f16", "i32", "u8", "s8"])
def test_against_onnx_every_axis(code, shape, count):
    parts = [sample(code, shape) for _ in range(count)]
    for axis in range(len(shape) + 1):
        y = run_pack(code, parts, axis)
        assert y.dtype == parts[0].dtype
        np.testing.assert_array_equal(y, onnx_pack(parts, axis))


def test_hand_values():
    a, b = np.array([[1, 2], [3, 4]], np.int32), np.array([[5, 6], [7, 8]], np.int32)
    assert run_pack(I32, [a, b], 0).tolist() == [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
    assert run_pack(I32, [a, b], 1).tolist() == [[[1, 2], [5, 6]], [[3, 4], [7, 8]]]
    assert run_pack(I32, [a, b], 2).tolist() == [[[1, 5], [2, 6]], [[3, 7], [4, 8]]]


def test_quantized_values_are_moved_unchanged():
    t = OperandType.tensor(U8, (3,), 0.125, 200)
    parts = [np.array([0, 200, 255], np.uint8), np.array([1, 2, 3], np.uint8)]
    (y,) = run_op(OP, [(INT, 1), (t, parts[0]), (t, parts[1])], [OperandType.tensor(U8, (3, 2), 0.125, 200)])
    assert y.tolist() == [[0, 1], [200, 2], [255, 3]]


# -- shapes -----------------------------------------------------------------------------------------
def inferred_dims(input_dims, axis, count=2, *, const_axis=True):
    inputs = [(INT, axis if const_axis else Input())] + [(OperandType.tensor(F32, input_dims), Input())] * count
    return inferred_output_types(OP, inputs, [OperandType.tensor(F32, (0,) * (len(input_dims) + 1))])[0].dimensions


def test_build_time_shape_inference():
    assert inferred_dims((2, 3), 0) == (2, 2, 3)
    assert inferred_dims((2, 3), 2, count=4) == (2, 3, 4)
    assert inferred_dims((5,), 1, count=1) == (5, 1)
    assert inferred_dims((2, 0), 1) == (0, 0, 0)
    assert inferred_dims((2, 3), 1, const_axis=False) == (0, 0, 0)


def test_unknown_dims_resolved_at_run_time():
    parts = [sample(F32, (2, 3)) for _ in range(2)]
    t = OperandType.tensor(F32, (0, 3))
    (y,) = run_op(OP, [(INT, 2), (t, parts[0]), (t, parts[1])], [OperandType.tensor(F32, (0, 0, 0))])
    np.testing.assert_array_equal(y, onnx_pack(parts, 2))


# -- validation -------------------------------------------------------------------------------------
def expect_bad_data(inputs, outputs, *words, result=ResultCode.BAD_DATA):
    with pytest.raises(MltsError) as info:
        run_op(OP, inputs, outputs)
    assert info.value.code == result
    assert "PACK" in str(info.value)
    for w in words:
        assert w in str(info.value), str(info.value)


def tensor(code, shape, scale=0.0, zp=0):
    t = OperandType.tensor(code, shape, scale, zp)
    return t, np.zeros(shape, t.dtype)


def test_rejects_bad_axis():
    two = [tensor(F32, (2, 3)), tensor(F32, (2, 3))]
    expect_bad_data([(INT, -1), *two], [OperandType.tensor(F32, (2, 3, 2))], "input 0", "axis -1 out of range [0, 2]")
    expect_bad_data([(INT, 3), *two], [OperandType.tensor(F32, (2, 3, 2))], "input 0", "axis 3 out of range")
    expect_bad_data([(OperandType.scalar(OperandCode.FLOAT32), 0.0), *two], [OperandType.tensor(F32, (2, 2, 3))],
                    "input 0", "FLOAT32")


def test_rejects_mismatched_inputs():
    expect_bad_data([(INT, 0), tensor(F32, (2, 3)), tensor(F16, (2, 3))], [OperandType.tensor(F32, (2, 2, 3))],
                    "input 2", "TENSOR_FLOAT16")
    expect_bad_data([(INT, 0), tensor(F32, (2, 3)), tensor(F32, (3, 2))], [OperandType.tensor(F32, (2, 2, 3))],
                    "input 2", "dimensions [3, 2] differ from input 1's [2, 3]")
    expect_bad_data([(INT, 0), tensor(F32, (2, 3)), tensor(F32, (2, 3, 1))], [OperandType.tensor(F32, (2, 2, 3))],
                    "input 2", "rank 3 does not match")
    expect_bad_data([(INT, 0), tensor(U8, (2,), 0.5, 3), tensor(U8, (2,), 0.25, 3)],
                    [OperandType.tensor(U8, (2, 2), 0.5, 3)], "input 2", "scale 0.25")
    expect_bad_data([(INT, 0), tensor(S8, (2,), 0.5, 3), tensor(S8, (2,), 0.5, 3)],
                    [OperandType.tensor(S8, (2, 2), 0.5, 4)], "input 1", "zp 3")


def test_rejects_bad_types_counts_and_ranks():
    expect_bad_data([(INT, 0), tensor(OperandCode.TENSOR_BOOL8, (2,))],
                    [OperandType.tensor(OperandCode.TENSOR_BOOL8, (1, 2))], "output 0", "TENSOR_BOOL8")
    expect_bad_data([(INT, 0)], [OperandType.tensor(F32, (1, 2))], "at least 2 inputs")
    expect_bad_data([(INT, 0), tensor(F32, ())], [OperandType.tensor(F32, (1,))], "input 1", "rank 0")


def test_rejects_shapes_known_only_at_run_time():
    t = OperandType.tensor(F32, (0, 3))
    expect_bad_data([(INT, 0), (t, np.zeros((2, 3), np.float32)), (t, np.zeros((1, 3), np.float32))],
                    [OperandType.tensor(F32, (0, 0, 0))], "input 2", "differ from input 1's",
                    result=ResultCode.OP_FAILED)
