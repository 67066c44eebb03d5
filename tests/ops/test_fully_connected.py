"""FULLY_CONNECTED against independent expectations.

Float: onnx.reference.ReferenceEvaluator on Reshape + Gemm(transB=1) (+ Relu/Clip) in float64.
Quantized: a plain Python-int loop with its own fixed-point rescale (exact), plus within one step of
dequantize -> float -> requantize, and signed/unsigned agreement up to the 128 offset.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from conv_reference import f32, requantize_sums
from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode
from mlts.runtime.operand_type import SymmPerChannelQuantParams
from support.op_runner import Const, expect_error, run_op
from support.tolerance import assert_cts_close

OP = OperationCode.FULLY_CONNECTED
F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
PC = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
I32 = OperandCode.TENSOR_INT32
INT = OperandType.scalar(OperandCode.INT32)


def fc_inputs(x_t, x, w_t, w, b_t, b, fuse=0):
    return [(x_t, x), (w_t, Const(w)), (b_t, Const(b)), (INT, fuse)]


def onnx_fc(x, w, b, fuse=0):
    """Float64 ONNX Reshape([-1, input_size]) + Gemm(transB=1) + activation."""
    inits = [helper.make_tensor("shape", TensorProto.INT64, [2], [-1, w.shape[1]])]
    nodes = [helper.make_node("Reshape", ["X", "shape"], ["X2"]),
             helper.make_node("Gemm", ["X2", "W", "B"], ["G"], transB=1)]
    if fuse == FuseCode.NONE:
        nodes.append(helper.make_node("Identity", ["G"], ["Y"]))
    elif fuse == FuseCode.RELU:
        nodes.append(helper.make_node("Relu", ["G"], ["Y"]))
    else:
        lo, hi = (-1.0, 1.0) if fuse == FuseCode.RELU1 else (0.0, 6.0)
        inits += [helper.make_tensor("lo", TensorProto.DOUBLE, [], [lo]), helper.make_tensor("hi", TensorProto.DOUBLE, [], [hi])]
        nodes.append(helper.make_node("Clip", ["G", "lo", "hi"], ["Y"]))
    graph = helper.make_graph(nodes, "fc", [helper.make_tensor_value_info(n, TensorProto.DOUBLE, None) for n in "XWB"],
                              [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"X": np.asarray(x, np.float64), "W": np.asarray(w, np.float64), "B": np.asarray(b, np.float64)}
    return ReferenceEvaluator(model).run(None, feeds)[0]


FLOAT_CASES = [
    # id, input shape, (units, input_size), fuse
    ("rank2", (3, 5), (4, 5), FuseCode.NONE),
    ("rank2-batch1-relu", (1, 7), (3, 7), FuseCode.RELU),
    ("rank3-flatten", (1, 2, 10), (6, 5), FuseCode.RELU1),
    ("rank4-flatten", (2, 2, 3, 4), (5, 6), FuseCode.RELU6),
    ("rank4-mobilenet-head", (1, 1, 1, 64), (10, 64), FuseCode.NONE),
]


def _float_case(case, code, rng):
    _, xs, ws, fuse = case
    dtype = np.float32 if code == F32 else np.float16
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    expected = onnx_fc(x, w, b, fuse)
    ins = fc_inputs(OperandType.tensor(code, x.shape), x, OperandType.tensor(code, w.shape), w,
                    OperandType.tensor(code, b.shape), b, fuse)
    return ins, expected


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
def test_float32(case):
    ins, expected = _float_case(case, F32, np.random.default_rng(zlib.crc32(case[0].encode())))
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, expected.shape)])
    assert out.dtype == np.float32
    assert_cts_close(out, expected, F32)


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
def test_float16(case):
    ins, expected = _float_case(case, F16, np.random.default_rng(zlib.crc32(case[0].encode())))
    (out,) = run_op(OP, ins, [OperandType.tensor(F16, expected.shape)])
    assert out.dtype == np.float16
    assert_cts_close(out, expected, F16)


def test_output_shape_inferred():
    ins, expected = _float_case(FLOAT_CASES[3], F32, np.random.default_rng(2))
    (out,) = run_op(OP, ins, [OperandType.tensor(F32, (0, 0))])
    assert out.shape == (8, 5)
    assert_cts_close(out, expected, F32)


# -- independent integer reference ------------------------------------------------------------------
def ref_fc_quant(x, zx, sx, w, zw, sw, bias, out_scale, out_zp, fuse, qrange):
    units, size = w.shape
    rows = x.reshape(-1, size).astype(int).tolist()
    wl = w.astype(int).tolist()
    sums = np.zeros((len(rows), units), dtype=np.int64)
    for r, row in enumerate(rows):
        for u in range(units):
            sums[r, u] = sum((a - zx) * (b - zw) for a, b in zip(row, wl[u]))
    return requantize_sums(sums, bias, sx, [sw] * units, out_scale, out_zp, fuse, qrange)


QUANT_CASES = [
    # id, input shape, (units, size), fuse, sx, sw, out_scale
    ("rank2", (3, 8), (5, 8), FuseCode.NONE, 0.05, 0.01, 0.3),
    ("rank4-relu", (2, 1, 2, 6), (4, 6), FuseCode.RELU, 0.05, 0.01, 0.2),
    ("relu6", (2, 10), (6, 10), FuseCode.RELU6, 0.05, 0.01, 0.04),
    ("relu1", (4, 5), (3, 5), FuseCode.RELU1, 0.05, 0.01, 0.01),
    ("multiplier>1", (3, 4), (4, 4), FuseCode.NONE, 0.05, 0.01, 0.0002),
    ("ties", (4, 6), (5, 6), FuseCode.NONE, 0.5, 0.5, 1.0),
    ("wide-float64-path", (3, 1200), (4, 1200), FuseCode.NONE, 0.01, 0.01, 0.5),
]


def _quant_case(case, rng):
    name, xs, ws, fuse, sx, sw, out_scale = case
    zx, zw = 119, 135
    small = name in ("multiplier>1", "ties")
    x = rng.integers(zx - 4, zx + 5, xs) if small else rng.integers(0, 256, xs)
    w = rng.integers(zw - 4, zw + 5, ws) if small else rng.integers(0, 256, ws)
    bias = rng.integers(-10, 11, ws[0]) if small else rng.integers(-3000, 3000, ws[0])
    if name == "wide-float64-path":  # extreme values: partial sums beyond float32's exact 2**24
        zx = zw = 128
        x, w = rng.choice([0, 255], xs), rng.choice([0, 255], ws)
        assert 128 * 128 * ws[1] >= 2**24
    return dict(x=x, zx=zx, sx=sx, w=w, zw=zw, sw=sw, bias=bias, fuse=fuse, out_scale=out_scale)


def _run_quant(c, code, out_shape, shift=0):
    x, w = c["x"] + shift, c["w"] + shift
    ins = fc_inputs(OperandType.tensor(code, x.shape, c["sx"], c["zx"] + shift), x,
                    OperandType.tensor(code, w.shape, c["sw"], c["zw"] + shift), w,
                    OperandType.tensor(I32, c["bias"].shape, f32(f32(c["sx"]) * f32(c["sw"])), 0), c["bias"], c["fuse"])
    (out,) = run_op(OP, ins, [OperandType.tensor(code, out_shape, c["out_scale"], 128 + shift)])
    return out


@pytest.mark.parametrize("case", QUANT_CASES, ids=[c[0] for c in QUANT_CASES])
def test_quant8(case):
    c = _quant_case(case, np.random.default_rng(zlib.crc32(case[0].encode())))
    expected = ref_fc_quant(c["x"], c["zx"], c["sx"], c["w"], c["zw"], c["sw"], c["bias"], c["out_scale"], 128,
                            c["fuse"], (0, 255))
    assert len(np.unique(expected)) > 3, "test data should not saturate"
    out = _run_quant(c, U8, expected.shape)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, expected)
    real = onnx_fc((c["x"] - c["zx"]) * c["sx"], (c["w"] - c["zw"]) * c["sw"], c["bias"] * c["sx"] * c["sw"], c["fuse"])
    approx = np.clip(np.sign(real) * np.floor(np.abs(real) / c["out_scale"] + 0.5) + 128, 0, 255)
    assert_cts_close(out, approx, U8)
    signed = _run_quant(c, S8, expected.shape, -128)
    assert signed.dtype == np.int8
    np.testing.assert_array_equal(signed.astype(np.int64) + 128, out.astype(np.int64))


# -- validation failures ----------------------------------------------------------------------------
def _valid(**over):
    x = np.full((2, 4), 128, np.uint8)
    w = np.full((3, 4), 130, np.uint8)
    b = np.zeros(3, np.int32)
    a = dict(x_t=OperandType.tensor(U8, x.shape, 0.5, 128), x=x, w_t=OperandType.tensor(U8, w.shape, 0.25, 128), w=w,
             b_t=OperandType.tensor(I32, b.shape, 0.125, 0), b=b)
    a.update(over)
    return fc_inputs(a["x_t"], a["x"], a["w_t"], a["w"], a["b_t"], a["b"])


OUT_Q = OperandType.tensor(U8, (2, 3), 1.0, 128)


def _expect_bad_data(ins, out_t, *words):
    expect_error(OP, ins, [out_t], "operation 0", *words)


def test_valid_inputs_run():
    (out,) = run_op(OP, _valid(), [OUT_Q])
    assert out.shape == (2, 3)


def test_bad_bias_scale():
    _expect_bad_data(_valid(b_t=OperandType.tensor(I32, (3,), 0.1, 0)), OUT_Q, "bias scale", "input 2")


def test_bias_size_mismatch():
    b = np.zeros(4, np.int32)
    _expect_bad_data(_valid(b_t=OperandType.tensor(I32, b.shape, 0.125, 0), b=b), OUT_Q, "bias", "input 2")


def test_input_not_divisible_by_input_size():
    x = np.full((2, 5), 128, np.uint8)
    _expect_bad_data(_valid(x_t=OperandType.tensor(U8, x.shape, 0.5, 128), x=x), OUT_Q, "input_size", "input 0")


def test_rank_limits():
    x = np.full((1, 1, 1, 2, 4), 128, np.uint8)
    _expect_bad_data(_valid(x_t=OperandType.tensor(U8, x.shape, 0.5, 128), x=x), OUT_Q, "rank", "input 0")
    x = np.full((8,), 128, np.uint8)
    _expect_bad_data(_valid(x_t=OperandType.tensor(U8, x.shape, 0.5, 128), x=x), OUT_Q, "rank", "input 0")
    w = np.full((3, 2, 2), 130, np.uint8)
    _expect_bad_data(_valid(w_t=OperandType.tensor(U8, w.shape, 0.25, 128), w=w), OUT_Q, "rank", "input 1")


def test_per_channel_weights_not_supported():
    w = np.zeros((3, 4), np.int8)
    w_t = OperandType.tensor(PC, w.shape, 0.0, 0, SymmPerChannelQuantParams((0.25, 0.25, 0.25), 0))
    _expect_bad_data(_valid(w_t=w_t, w=w), OUT_Q, "input 1")


def test_bad_fuse_code():
    ins = _valid()
    ins[3] = (INT, 4)
    _expect_bad_data(ins, OUT_Q, "activation", "input 3")


def test_wrong_input_count():
    _expect_bad_data(_valid() + [(INT, 0)], OUT_Q, "inputs")
    _expect_bad_data(_valid()[:3], OUT_Q, "inputs")


def test_float_weights_type_must_match():
    x = np.zeros((2, 4), np.float32)
    w = np.zeros((3, 4), np.float16)
    b = np.zeros(3, np.float32)
    ins = fc_inputs(OperandType.tensor(F32, x.shape), x, OperandType.tensor(F16, w.shape), w,
                    OperandType.tensor(F32, b.shape), b)
    _expect_bad_data(ins, OperandType.tensor(F32, (2, 3)), "input 1")
