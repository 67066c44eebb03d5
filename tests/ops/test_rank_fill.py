"""RANK and FILL through the public API (run_op on nnapi-reference).

RANK against onnx.reference Size(Shape(x)) and numpy's ndim for every type NNAPI lists; FILL against
onnx.reference ConstantOfShape and numpy's full. The RANK -> FILL chain of AOSP's V1_3/rank.mod.py
(RANK's INT32 scalar output as FILL's value) runs as a two-operation model.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from support.op_data import int_vec
from support.op_runner import Const, expect_error, run_op

from mlts.runtime import (Compilation, Execution, Model, OperandCode, OperandType, OperationCode, ResultCode,
                          SymmPerChannelQuantParams, devices)

F32 = OperandCode.TENSOR_FLOAT32
F16 = OperandCode.TENSOR_FLOAT16
I32 = OperandCode.TENSOR_INT32
INT32 = OperandCode.INT32
RANK, FILL = OperationCode.RANK, OperationCode.FILL

rng = np.random.default_rng(99)


# -- RANK -------------------------------------------------------------------------------------------
def onnx_rank(x):
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return int(ReferenceEvaluator(model).run(None, {"x": np.zeros(x.shape, np.float32)})[0])


def rank_input(code, shape):
    """An operand of `code` and `shape` (quantization parameters valid for the type), with data."""
    per_channel = None
    scale, zp = 0.0, 0
    if code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        per_channel = SymmPerChannelQuantParams(scales=[0.5] * shape[0], channel_dim=0)
    elif code in (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT16_ASYMM):
        scale, zp = 0.1, 128
    elif code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED:
        scale, zp = 0.1, -3
    elif code in (OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT16_SYMM):
        scale = 0.25
    t = OperandType.tensor(code, shape, scale, zp, per_channel)
    return t, np.ones(shape).astype(t.dtype)


RANK_TYPES = [F32, F16, I32, OperandCode.TENSOR_BOOL8, OperandCode.TENSOR_QUANT8_ASYMM,
              OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, OperandCode.TENSOR_QUANT8_SYMM,
              OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, OperandCode.TENSOR_QUANT16_SYMM,
              OperandCode.TENSOR_QUANT16_ASYMM]


@pytest.mark.parametrize("code", RANK_TYPES, ids=lambda c: c.name)
@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 1, 3, 1), (1, 2, 1, 2, 1, 2)], ids=len)
def test_rank_against_onnx(code, shape):
    t, x = rank_input(code, shape)
    (y,) = run_op(RANK, [(t, x)], [OperandType.scalar(INT32)])
    assert y.dtype == np.int32 and y.shape == ()
    assert int(y) == onnx_rank(x) == x.ndim


def test_rank_spec_examples_and_unknown_input_dims():
    # AOSP V1_3/rank.mod.py: [3] -> 1, [2, 3] -> 2 (here with the input's dimensions unknown at build time).
    (y,) = run_op(RANK, [(OperandType.tensor(F32, (3,)), np.array([5, 7, 10], np.float32))],
                  [OperandType.scalar(INT32)])
    assert int(y) == 1
    (y,) = run_op(RANK, [(OperandType.tensor(F32, (0, 0)), np.arange(6, dtype=np.float32).reshape(2, 3))],
                  [OperandType.scalar(INT32)])
    assert int(y) == 2


def test_rank_rejects_bad_operands():
    x = (OperandType.tensor(F32, (2, 3)), np.zeros((2, 3), np.float32))
    expect_error(RANK, [x], [OperandType.tensor(I32, (1,))], "output 0", "TENSOR_INT32 not allowed")
    expect_error(RANK, [x], [OperandType.scalar(OperandCode.FLOAT32)], "output 0", "FLOAT32 not allowed")
    expect_error(RANK, [(OperandType.scalar(INT32), 3)], [OperandType.scalar(INT32)], "input 0", "INT32 not allowed")
    expect_error(RANK, [x, x], [OperandType.scalar(INT32)], "inputs")


# -- FILL -------------------------------------------------------------------------------------------
VALUE_TYPE = {F32: OperandCode.FLOAT32, F16: OperandCode.FLOAT16, I32: INT32}


def onnx_constant_of_shape(dims, value, dtype):
    node = helper.make_node("ConstantOfShape", ["dims"], ["y"], value=numpy_helper.from_array(
        np.array([value], dtype=dtype), "value"))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("dims", TensorProto.INT64, None)],
                              [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                                             None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, {"dims": np.asarray(dims, np.int64)})[0]


FILL_CASES = [([5], 3.0), ([2, 3, 4], -1.5), ([1, 2, 3, 4, 5], 0.25), ([3, 1], 7.0), ([1], -0.0)]


@pytest.mark.parametrize("code", [F32, F16, I32], ids=["f32", "f16", "i32"])
@pytest.mark.parametrize("case", range(len(FILL_CASES)))
def test_fill_against_onnx(code, case):
    dims, value = FILL_CASES[case]
    out_type = OperandType.tensor(code, dims)
    if code == I32:
        value = int(value * 1000003)
    expected = onnx_constant_of_shape(dims, value, out_type.dtype)
    (y,) = run_op(FILL, [int_vec(dims), (OperandType.scalar(VALUE_TYPE[code]), value)], [out_type])
    assert y.dtype == out_type.dtype
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(expected))


def test_fill_shape_known_only_at_run_time():
    (y,) = run_op(FILL, [int_vec([2, 3, 4], const=False), (OperandType.scalar(OperandCode.FLOAT16), 2.5)],
                  [OperandType.tensor(F16, (0, 0, 0))])
    np.testing.assert_array_equal(y, np.full((2, 3, 4), 2.5, np.float16))
    (y,) = run_op(FILL, [int_vec([3, 0], const=False), (OperandType.scalar(INT32), 9)],
                  [OperandType.tensor(I32, (0, 0))])
    assert y.shape == (3, 0)


def test_rank_feeds_fill():
    # AOSP V1_3/rank.mod.py "internal_output": FILL(dims, RANK(x)) with x of shape [2, 3] and dims [2, 3, 4].
    model = Model()
    x = model.add_operand(OperandType.tensor(F32, (2, 3)))
    rank = model.add_operand(OperandType.scalar(INT32))
    dims = model.add_operand(OperandType.tensor(I32, (3,)))
    out = model.add_operand(OperandType.tensor(I32, (2, 3, 4)))
    model.add_operation(RANK, [x], [rank])
    model.add_operation(FILL, [dims, rank], [out])
    model.identify_inputs_and_outputs([x, dims], [out])
    model.finish()
    compilation = Compilation.for_devices(model, [d for d in devices() if d.name == "nnapi-reference"])
    compilation.finish()
    execution = Execution(compilation)
    execution.set_input(0, np.arange(6, dtype=np.float32).reshape(2, 3))
    execution.set_input(1, np.array([2, 3, 4], np.int32))
    execution.compute()
    np.testing.assert_array_equal(execution.get_output(0), np.full((2, 3, 4), 2, np.int32))


def test_fill_rejects_bad_operands():
    f32_value = (OperandType.scalar(OperandCode.FLOAT32), 1.0)
    expect_error(FILL, [int_vec([2, 3]), f32_value], [OperandType.tensor(I32, (2, 3))], "input 1",
                 "FLOAT32 not allowed")
    expect_error(FILL, [int_vec([2, 3]), (OperandType.scalar(INT32), 1)], [OperandType.tensor(F16, (2, 3))],
                 "input 1", "expected FLOAT16")
    q = OperandType.tensor(OperandCode.TENSOR_QUANT8_ASYMM, (2, 3), 0.5, 0)
    expect_error(FILL, [int_vec([2, 3]), (OperandType.scalar(INT32), 1)], [q], "output 0", "not allowed")
    expect_error(FILL, [int_vec([2, -3]), f32_value], [OperandType.tensor(F32, (2, 3))], "input 0", ">= 0")
    expect_error(FILL, [int_vec([2, -3], const=False), f32_value], [OperandType.tensor(F32, (0, 0))], "input 0",
                 ">= 0", result=ResultCode.OP_FAILED)
    expect_error(FILL, [int_vec([[2, 3]]), f32_value], [OperandType.tensor(F32, (2, 3))], "input 0", "rank 2")
    expect_error(FILL, [int_vec([2, 3], const=False), f32_value], [OperandType.tensor(F32, (0, 0, 0))],
                 "input 0", "rank 3")
    expect_error(FILL, [int_vec([2, 3]), f32_value], [OperandType.tensor(F32, (3, 2))], "output 0", "[2, 3]")
    floats = (OperandType.tensor(F32, (2,)), Const(np.array([2, 3], np.float32)))
    expect_error(FILL, [floats, f32_value], [OperandType.tensor(F32, (2, 3))], "input 0", "TENSOR_FLOAT32")
