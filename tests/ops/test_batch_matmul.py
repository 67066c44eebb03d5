"""BATCH_MATMUL through the public API (run_op on nnapi-reference).

Float and int32 results against onnx.reference MatMul (after a Transpose of the last two axes for
adj_x / adj_y); quant8 signed exact against an integer computation written here from NNAPI's
documented requantization (int32 sums of centred products, quant.py's fixed-point multiplier of
scale_x * scale_y / scale_out, output zero point, int8 clamp) and within one step of the float path;
the examples of AOSP's AIDL_V2/batch_matmul.mod.py (packages/modules/NeuralNetworks; data only).
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from support.onnx_reference import ONNX_TYPE
from support.op_data import F16, F32, I32, S8, U8
from support.op_runner import Input, inferred_output_types, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode
from mlts.runtime.ops.quant import multiply_by_quantized_multiplier, quantize_multiplier

BOOL = OperandType.scalar(OperandCode.BOOL)
OP = OperationCode.BATCH_MATMUL

rng = np.random.default_rng(102)


def onnx_matmul(x, y, adj_x, adj_y):
    nodes, names = [], []
    for name, value, adj in (("x", x, adj_x), ("y", y, adj_y)):
        if adj:
            perm = list(range(value.ndim - 2)) + [value.ndim - 1, value.ndim - 2]
            nodes.append(helper.make_node("Transpose", [name], [name + "t"], perm=perm))
            name += "t"
        names.append(name)
    nodes.append(helper.make_node("MatMul", names, ["z"]))
    dtype = ONNX_TYPE[x.dtype]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, dtype, None) for n in ("x", "y")],
                              [helper.make_tensor_value_info("z", dtype, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, {"x": x, "y": y})[0]


def operand_shapes(batch, rows, depth, cols, adj_x, adj_y):
    x = tuple(batch) + ((depth, rows) if adj_x else (rows, depth))
    y = tuple(batch) + ((cols, depth) if adj_y else (depth, cols))
    return x, y, tuple(batch) + (rows, cols)


def run_bmm(tx, x, ty, y, adj_x, adj_y, t_out):
    return run_op(OP, [(tx, x), (ty, y), (BOOL, adj_x), (BOOL, adj_y)], [t_out])[0]


CASES = [((), 3, 4, 5), ((2,), 2, 3, 4), ((1,), 1, 7, 1), ((2, 3), 3, 2, 4), ((2, 1), 4, 5, 3)]
ADJ = [(False, False), (True, False), (False, True), (True, True)]
#: every case with every adj_x / adj_y combination at least once, in few runs
CASE_ADJ = [(c, *ADJ[(c + shift) % 4]) for c in range(len(CASES)) for shift in (0, 2)]


@pytest.mark.parametrize("case, adj_x, adj_y", CASE_ADJ)
@pytest.mark.parametrize("code", [F32, F16, I32], ids=["f32", "f16", "i32"])
def test_against_onnx(case, adj_x, adj_y, code):
    sx, sy, so = operand_shapes(*CASES[case], adj_x, adj_y)
    dtype = OperandType.tensor(code, ()).dtype
    if code == I32:
        x, y = rng.integers(-1000, 1000, sx).astype(dtype), rng.integers(-1000, 1000, sy).astype(dtype)
    else:
        x, y = rng.standard_normal(sx).astype(dtype), rng.standard_normal(sy).astype(dtype)
    expected = onnx_matmul(x, y, adj_x, adj_y)
    z = run_bmm(OperandType.tensor(code, sx), x, OperandType.tensor(code, sy), y, adj_x, adj_y,
                OperandType.tensor(code, so))
    assert z.dtype == dtype
    assert_cts_close(z, expected, code)


def test_int32_sums_wrap_like_c_int32():
    x = np.array([[2**30, 2**30]], np.int32)
    y = np.array([[2], [1]], np.int32)
    z = run_bmm(OperandType.tensor(I32, (1, 2)), x, OperandType.tensor(I32, (2, 1)), y, False, False,
                OperandType.tensor(I32, (1, 1)))
    assert z.tolist() == [[-(2**30)]]   # 3 * 2**30 wrapped to int32


def test_adjoint_flags_may_be_omitted():
    x, y = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
    (z,) = run_op(OP, [(OperandType.tensor(F32, x.shape), x), (OperandType.tensor(F32, y.shape), y),
                       (BOOL, None), (BOOL, None)], [OperandType.tensor(F32, (2, 3, 5))])
    assert_cts_close(z, onnx_matmul(x, y, False, False), F32)


# -- quant8 signed ----------------------------------------------------------------------------------
def integer_reference(qx, tx, qy, ty, t_out, adj_x, adj_y):
    """NNAPI's documented integer path, written out: centred int products summed per output element,
    rescaled by the fixed-point form of scale_x * scale_y / scale_out, offset, clamped to int8."""
    cx = qx.astype(np.int64) - tx.zero_point
    cy = qy.astype(np.int64) - ty.zero_point
    if adj_x:
        cx = np.swapaxes(cx, -1, -2)
    if adj_y:
        cy = np.swapaxes(cy, -1, -2)
    acc = (cx[..., :, :, None] * cy[..., None, :, :]).sum(axis=-2)
    real = float(np.float32(tx.scale) * np.float32(ty.scale)) / float(np.float32(t_out.scale))
    multiplier, shift = quantize_multiplier(real)
    out = multiply_by_quantized_multiplier(acc, multiplier, shift) + t_out.zero_point
    return np.clip(out, -128, 127)


def float_reference(qx, tx, qy, ty, t_out, adj_x, adj_y):
    x = (qx.astype(np.float64) - tx.zero_point) * tx.scale
    y = (qy.astype(np.float64) - ty.zero_point) * ty.scale
    if adj_x:
        x = np.swapaxes(x, -1, -2)
    if adj_y:
        y = np.swapaxes(y, -1, -2)
    return np.clip(np.round(x @ y / t_out.scale) + t_out.zero_point, -128, 127)


QUANT = [((0.25, 0), (0.5, -64), (1.0, -128)), ((0.02, 5), (0.03, -3), (0.05, 10)),
         ((0.1, -20), (0.07, 11), (0.001, 0)), ((0.5, 0), (0.5, 0), (2.0, -1))]


@pytest.mark.parametrize("case, adj_x, adj_y", CASE_ADJ)
@pytest.mark.parametrize("quant", range(len(QUANT)))
def test_quant8_signed_exact(case, adj_x, adj_y, quant):
    sx, sy, so = operand_shapes(*CASES[case], adj_x, adj_y)
    (qsx, zx), (qsy, zy), (qso, zo) = QUANT[quant]
    tx, ty, t_out = OperandType.tensor(S8, sx, qsx, zx), OperandType.tensor(S8, sy, qsy, zy), \
        OperandType.tensor(S8, so, qso, zo)
    qx, qy = rng.integers(-128, 128, sx).astype(np.int8), rng.integers(-128, 128, sy).astype(np.int8)
    z = run_bmm(tx, qx, ty, qy, adj_x, adj_y, t_out)
    assert z.dtype == np.int8
    np.testing.assert_array_equal(z, integer_reference(qx, tx, qy, ty, t_out, adj_x, adj_y))
    assert np.abs(z.astype(np.int64) - float_reference(qx, tx, qy, ty, t_out, adj_x, adj_y)).max() <= 1


# -- AOSP spec examples (AIDL_V2/batch_matmul.mod.py) -----------------------------------------------
SPEC_X = np.array([1, 2, 3, 4, 5, 6], np.float64)
SPEC_Y = np.arange(7, 19, dtype=np.float64)
SPEC_OUT = np.array([74, 80, 86, 92, 173, 188, 203, 218], np.float64)
SPEC = {  # name: (x dims, x data, y dims, y data, adj_x, adj_y, batch)
    "Simple": ((1, 2, 3), SPEC_X, (1, 3, 4), SPEC_Y, False, False, 1),
    "RHSAdjoint": ((1, 2, 3), SPEC_X, (1, 4, 3), [7, 11, 15, 8, 12, 16, 9, 13, 17, 10, 14, 18], False, True, 1),
    "LHSAdjoint": ((1, 3, 2), [1, 4, 2, 5, 3, 6], (1, 3, 4), SPEC_Y, True, False, 1),
    "TwoBatchSize": ((2, 2, 3), np.tile(SPEC_X, 2), (2, 3, 4), np.tile(SPEC_Y, 2), False, False, 2),
}


@pytest.mark.parametrize("name", SPEC)
@pytest.mark.parametrize("code", [F32, F16, I32, S8], ids=["f32", "f16", "i32", "s8"])
def test_spec_examples(name, code):
    dx, x, dy, y, adj_x, adj_y, batch = SPEC[name]
    x, y, expected = np.asarray(x, np.float64), np.asarray(y, np.float64), np.tile(SPEC_OUT, batch)
    out_dims = (batch, 2, 4)
    if code == S8:  # the spec's quant8_signed variation
        tx, ty, t_out = OperandType.tensor(S8, dx, 0.25, 0), OperandType.tensor(S8, dy, 0.5, -64), \
            OperandType.tensor(S8, out_dims, 1.0, -128)
        x, y, expected = x / 0.25, y / 0.5 - 64, expected - 128
    else:
        tx, ty, t_out = OperandType.tensor(code, dx), OperandType.tensor(code, dy), OperandType.tensor(code, out_dims)
    z = run_bmm(tx, x.astype(tx.dtype).reshape(dx), ty, y.astype(ty.dtype).reshape(dy), adj_x, adj_y, t_out)
    np.testing.assert_array_equal(z.ravel(), expected.astype(t_out.dtype))


# -- shapes -----------------------------------------------------------------------------------------
def inferred_dims(dx, dy, adj_x, adj_y, *, const_adj=True):
    inputs = [(OperandType.tensor(F32, dx), Input()), (OperandType.tensor(F32, dy), Input()),
              (BOOL, adj_x if const_adj else Input()), (BOOL, adj_y if const_adj else Input())]
    return inferred_output_types(OP, inputs, [OperandType.tensor(F32, (0,) * len(dx))])[0].dimensions


def test_build_time_shape_inference():
    assert inferred_dims((2, 3, 4), (2, 4, 5), False, False) == (2, 3, 5)
    assert inferred_dims((4, 3), (5, 4), True, True) == (3, 5)
    assert inferred_dims((1, 2, 4, 3), (1, 2, 4, 5), True, False) == (1, 2, 3, 5)
    assert inferred_dims((2, 0, 4), (2, 4, 5), False, False) == (0, 0, 0)
    assert inferred_dims((2, 3, 4), (2, 4, 5), False, False, const_adj=False) == (0, 0, 0)


def test_unknown_dims_resolved_at_run_time():
    x, y = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    z = run_bmm(OperandType.tensor(F32, (0, 0)), x, OperandType.tensor(F32, (0, 0)), y, True, True,
                OperandType.tensor(F32, (0, 0)))
    assert_cts_close(z, onnx_matmul(x, y, True, True), F32)


# -- validation -------------------------------------------------------------------------------------
def expect_bad_data(inputs, outputs, *words, result=ResultCode.BAD_DATA):
    with pytest.raises(MltsError) as info:
        run_op(OP, inputs, outputs)
    assert info.value.code == result
    assert "BATCH_MATMUL" in str(info.value)
    for w in words:
        assert w in str(info.value), str(info.value)


def tensor(code, shape, scale=0.0, zp=0):
    t = OperandType.tensor(code, shape, scale, zp)
    return t, np.zeros(shape, t.dtype)


FLAGS = [(BOOL, False), (BOOL, False)]


def test_rejects_types_nnapi_does_not_allow():
    # NNAPI's BATCH_MATMUL takes quant8 asymm SIGNED only, not TENSOR_QUANT8_ASYMM.
    expect_bad_data([tensor(U8, (2, 3), 0.5, 3), tensor(U8, (3, 2), 0.5, 3), *FLAGS],
                    [OperandType.tensor(U8, (2, 2), 0.5, 3)], "input 0", "TENSOR_QUANT8_ASYMM not allowed")
    expect_bad_data([tensor(OperandCode.TENSOR_BOOL8, (2, 3)), tensor(OperandCode.TENSOR_BOOL8, (3, 2)), *FLAGS],
                    [OperandType.tensor(OperandCode.TENSOR_BOOL8, (2, 2))], "input 0", "TENSOR_BOOL8")


def test_rejects_mismatched_types():
    expect_bad_data([tensor(F32, (2, 3)), tensor(F16, (3, 2)), *FLAGS], [OperandType.tensor(F32, (2, 2))],
                    "input 1", "TENSOR_FLOAT16")
    expect_bad_data([tensor(F32, (2, 3)), tensor(F32, (3, 2)), *FLAGS], [OperandType.tensor(I32, (2, 2))],
                    "output 0", "TENSOR_INT32")
    expect_bad_data([tensor(F32, (2, 3)), tensor(F32, (3, 2)), (OperandType.scalar(OperandCode.INT32), 0), FLAGS[1]],
                    [OperandType.tensor(F32, (2, 2))], "input 2", "INT32")
    expect_bad_data([tensor(F32, (2, 3)), tensor(F32, (3, 2)), FLAGS[0], (OperandType.scalar(OperandCode.INT32), 0)],
                    [OperandType.tensor(F32, (2, 2))], "input 3", "INT32")


def test_rejects_bad_ranks_and_counts():
    expect_bad_data([tensor(F32, (3,)), tensor(F32, (3, 2)), *FLAGS], [OperandType.tensor(F32, (2,))],
                    "input 0", "rank 1 is below the minimum of 2")
    expect_bad_data([tensor(F32, (1, 1, 1, 2, 3)), tensor(F32, (1, 1, 1, 3, 2)), *FLAGS],
                    [OperandType.tensor(F32, (1, 1, 1, 2, 2))], "input 0", "rank 5 exceeds the maximum of 4")
    expect_bad_data([tensor(F32, (1, 2, 3)), tensor(F32, (3, 2)), *FLAGS], [OperandType.tensor(F32, (1, 2, 2))],
                    "input 1", "rank 2 differs from input 0's rank 3")
    expect_bad_data([tensor(F32, (2, 3)), tensor(F32, (3, 2)), FLAGS[0]], [OperandType.tensor(F32, (2, 2))],
                    "expected 4 inputs")


def test_rejects_shapes_that_do_not_multiply():
    expect_bad_data([tensor(F32, (2, 3)), tensor(F32, (2, 3)), *FLAGS], [OperandType.tensor(F32, (2, 3))],
                    "input 1", "cannot multiply [2, 3] by [2, 3]")
    expect_bad_data([tensor(F32, (2, 3)), tensor(F32, (3, 2)), (BOOL, True), (BOOL, False)],
                    [OperandType.tensor(F32, (3, 2))], "input 1", "adj_x=True")
    expect_bad_data([tensor(F32, (2, 2, 3)), tensor(F32, (3, 3, 2)), *FLAGS], [OperandType.tensor(F32, (2, 2, 2))],
                    "input 1", "batch dimensions [3] differ from input 0's [2]")


def test_rejects_shapes_known_only_at_run_time():
    expect_bad_data([(OperandType.tensor(F32, (0, 0)), np.zeros((2, 3), np.float32)), tensor(F32, (4, 2)), *FLAGS],
                    [OperandType.tensor(F32, (0, 0))], "input 1", "cannot multiply", result=ResultCode.OP_FAILED)
