"""mlts-fast (the optimized CPU driver) against nnapi-reference.

Per operation: float results within the CTS float32 tolerance of the reference kernels, quantized
results bit-exact (SPEC section 3 allows 1), for uint8 and int8 with per-channel filters, on the
parameter combinations the driver takes (and with tiny blocks, so that the multi-block paths run).
Then what it refuses (reported unsupported, so the runtime partitions it to the reference), the
HAL boundary (malformed models and requests), concurrency, and whole networks: tiny MobileNets
through the real zoo pipeline (quick), and every zoo model (slow), each compiled for mlts-fast
alone with the plan checked to be mlts-fast's own steps.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading

import numpy as np
import pytest

from mlts.runtime import (Compilation, Execution, FuseCode, Memory, MltsError, Model, OperandCode, OperandType,
                          OperationCode, Preference, Priority, ResultCode, SymmPerChannelQuantParams, devices,
                          get_device)
from mlts.runtime.drivers.fast import FAST_DEVICE_NAME, FastDriver, FastPreparedModel
from mlts.runtime.drivers.fast import steps_conv
from mlts.runtime.enums import DeviceType, OperandLifetime
from mlts.runtime.hal import DataLocation, Request, RequestArgument
from support.op_runner import Const, run_op
from support.tolerance import assert_cts_close

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))

F32 = OperandCode.TENSOR_FLOAT32
U8, S8 = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
PC = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
I32 = OperandCode.TENSOR_INT32
INT, BOOL, FLOAT = (OperandType.scalar(OperandCode.INT32), OperandType.scalar(OperandCode.BOOL),
                    OperandType.scalar(OperandCode.FLOAT32))
SAME, VALID = 1, 2
REF = "nnapi-reference"


def both(code, inputs, outputs):
    """The operation run on mlts-fast alone and on the reference alone."""
    return run_op(code, inputs, outputs, device=FAST_DEVICE_NAME), run_op(code, inputs, outputs, device=REF)


def check(code, inputs, outputs, max_quant_diff: int = 0):
    fast, ref = both(code, inputs, outputs)
    for f, r, t in zip(fast, ref, outputs):
        assert_cts_close(f, r, t.code, max_quant_diff=max_quant_diff)
    return fast


@pytest.fixture(params=["whole", "tiny-blocks"])
def blocks(request, monkeypatch):
    """Run each convolution case twice: as one block, and split into many tiny blocks/chunks."""
    if request.param == "tiny-blocks":
        monkeypatch.setattr(steps_conv, "BLOCK_BYTES", 64)
        monkeypatch.setattr(steps_conv, "IM2COL_CHUNK_BYTES", 64)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# -- tensor types ------------------------------------------------------------------------------------
def act_type(kind: str, shape, scale=0.05, zp=None) -> OperandType:
    if kind == "float":
        return OperandType(F32, tuple(shape))
    if kind == "uint8":
        return OperandType(U8, tuple(shape), scale, 120 if zp is None else zp)
    return OperandType(S8, tuple(shape), scale, -7 if zp is None else zp)


def act_data(kind: str, shape, seed: int) -> np.ndarray:
    r = rng(seed)
    if kind == "float":
        return r.uniform(-1, 1, shape).astype(np.float32)
    if kind == "uint8":
        return r.integers(0, 256, shape).astype(np.uint8)
    return r.integers(-128, 128, shape).astype(np.int8)


def filter_and_bias(kind: str, shape, channel_dim: int, in_scale: float, seed: int):
    """(filter type, filter, bias type, bias): float, uint8 per-tensor, or int8 per-channel."""
    r = rng(seed)
    channels = shape[channel_dim]
    if kind == "float":
        return (OperandType(F32, tuple(shape)), r.uniform(-1, 1, shape).astype(np.float32),
                OperandType(F32, (channels,)), r.uniform(-1, 1, channels).astype(np.float32))
    if kind == "uint8":
        f_scale = 0.02
        f_t = OperandType(U8, tuple(shape), f_scale, 131)
        f = r.integers(0, 256, shape).astype(np.uint8)
        b_t = OperandType(I32, (channels,), float(np.float32(in_scale) * np.float32(f_scale)), 0)
    else:
        scales = tuple(float(s) for s in r.uniform(0.005, 0.03, channels))
        f_t = OperandType(PC, tuple(shape), 0.0, 0, SymmPerChannelQuantParams(scales, channel_dim))
        f = r.integers(-127, 128, shape).astype(np.int8)
        b_t = OperandType(I32, (channels,), 0.0, 0)
    return f_t, f, b_t, r.integers(-3000, 3000, channels).astype(np.int32)


def out_type(kind: str, shape) -> OperandType:
    return act_type(kind, shape, scale=0.11, zp=100 if kind == "uint8" else 3)


def conv_inputs(x_t, x, f_t, f, b_t, b, *, pads=None, code=None, strides=(1, 1), fuse=0, multiplier=None,
                dilation=None):
    ins = [(x_t, x), (f_t, Const(f)), (b_t, Const(b))]
    ins += [(INT, p) for p in pads] if pads is not None else [(INT, code)]
    ins += [(INT, strides[0]), (INT, strides[1])]
    if multiplier is not None:
        ins.append((INT, multiplier))
    ins.append((INT, int(fuse)))
    if dilation is not None:
        ins += [(BOOL, False), (INT, dilation[0]), (INT, dilation[1])]
    return ins


def out_size(size, k, stride, pads, dilation=1):
    eff = (k - 1) * dilation + 1
    if isinstance(pads, int):
        return (size + stride - 1) // stride if pads == SAME else (size - eff) // stride + 1
    return (size + pads[0] + pads[1] - eff) // stride + 1


KINDS = ["float", "uint8", "int8"]

# id, input NHWC, (out channels, kh, kw), padding (code or (l, r, t, b)), strides (w, h), dilation, fuse
CONV_CASES = [
    ("1x1", (1, 5, 6, 8), (4, 1, 1), SAME, (1, 1), None, FuseCode.NONE),
    ("1x1-stride2", (1, 8, 7, 4), (3, 1, 1), VALID, (2, 2), None, FuseCode.RELU),
    ("3x3-same", (2, 7, 6, 3), (5, 3, 3), SAME, (1, 1), None, FuseCode.RELU6),
    ("3x3-same-stride2", (1, 9, 8, 4), (6, 3, 3), SAME, (2, 2), None, FuseCode.RELU),
    ("explicit-asym", (1, 6, 7, 3), (4, 3, 3), (1, 2, 0, 1), (1, 1), None, FuseCode.NONE),
    ("dilation", (1, 9, 8, 2), (3, 3, 3), SAME, (1, 2), (2, 2), FuseCode.RELU1),
    ("wide", (1, 4, 4, 40), (24, 3, 3), VALID, (1, 1), None, FuseCode.RELU6),
    # more output values than one tile of per-channel parameters, with a channel count not dividing it
    ("1x1-many-pixels", (1, 9, 10, 8), (5, 1, 1), SAME, (1, 1), None, FuseCode.RELU),
]


def output_size_and_padding(h, w, kh, kw, pads, strides, dilation):
    """Output height/width and the padding keyword for conv_inputs (an implicit code or explicit pads)."""
    d = dilation or (1, 1)
    if isinstance(pads, int):
        return (out_size(h, kh, strides[1], pads, d[1]), out_size(w, kw, strides[0], pads, d[0]),
                dict(code=pads))
    return (out_size(h, kh, strides[1], pads[2:], d[1]), out_size(w, kw, strides[0], pads[:2], d[0]),
            dict(pads=pads))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv_2d(case, kind, blocks):
    _, shape, (oc, kh, kw), pads, strides, dilation, fuse = case
    n, h, w, c = shape
    x_t = act_type(kind, shape)
    f_t, f, b_t, b = filter_and_bias(kind, (oc, kh, kw, c), 0, x_t.scale, seed=sum(shape))
    oh, ow, kw_args = output_size_and_padding(h, w, kh, kw, pads, strides, dilation)
    ins = conv_inputs(x_t, act_data(kind, shape, 1), f_t, f, b_t, b, strides=strides, fuse=fuse,
                      dilation=dilation, **kw_args)
    check(OperationCode.CONV_2D, ins, [out_type(kind, (n, oh, ow, oc))])


DEPTHWISE_CASES = [
    # id, input NHWC, multiplier, (kh, kw), padding, strides, dilation, fuse
    ("3x3-same", (1, 7, 8, 16), 1, (3, 3), SAME, (1, 1), None, FuseCode.RELU6),
    ("3x3-same-stride2", (2, 9, 8, 8), 1, (3, 3), SAME, (2, 2), None, FuseCode.RELU),
    ("3x3-explicit", (1, 6, 6, 4), 1, (3, 3), (0, 2, 1, 0), (1, 1), None, FuseCode.NONE),
    ("multiplier-2", (1, 6, 5, 3), 2, (3, 3), SAME, (1, 1), None, FuseCode.NONE),
    ("5x5-valid", (1, 9, 9, 5), 1, (5, 5), VALID, (1, 2), None, FuseCode.RELU1),
    ("3x3-dilation", (1, 10, 9, 4), 1, (3, 3), SAME, (1, 1), (2, 2), FuseCode.RELU6),
    ("tiny-input", (1, 2, 2, 8), 1, (3, 3), SAME, (1, 1), None, FuseCode.NONE),
    # rows longer than one tile of per-channel parameters, channel counts not dividing it
    ("3x3-long-rows", (1, 5, 61, 3), 1, (3, 3), SAME, (1, 1), None, FuseCode.RELU6),
    ("3x3-long-rows-dilation", (1, 7, 23, 24), 1, (3, 3), SAME, (1, 1), (1, 2), FuseCode.NONE),
    # stride 2 along rows split into even and odd columns: long rows, rows dilated by 3 (the split
    # rows' slots), a column stride unlike the row stride with explicit asymmetric padding
    ("3x3-stride2-long-rows", (1, 7, 199, 3), 1, (3, 3), SAME, (2, 2), None, FuseCode.RELU6),
    ("3x3-stride2-row-dilation", (1, 13, 11, 24), 1, (3, 3), VALID, (2, 2), (1, 3), FuseCode.NONE),
    ("3x3-stride-w2-h1", (2, 6, 10, 16), 1, (3, 3), (1, 0, 1, 1), (2, 1), None, FuseCode.RELU),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", DEPTHWISE_CASES, ids=[c[0] for c in DEPTHWISE_CASES])
def test_depthwise_conv_2d(case, kind):
    _, shape, mult, (kh, kw), pads, strides, dilation, fuse = case
    n, h, w, c = shape
    x_t = act_type(kind, shape)
    f_t, f, b_t, b = filter_and_bias(kind, (1, kh, kw, c * mult), 3, x_t.scale, seed=sum(shape) + mult)
    oh, ow, kw_args = output_size_and_padding(h, w, kh, kw, pads, strides, dilation)
    ins = conv_inputs(x_t, act_data(kind, shape, 2), f_t, f, b_t, b, strides=strides, fuse=fuse,
                      multiplier=mult, dilation=dilation, **kw_args)
    check(OperationCode.DEPTHWISE_CONV_2D, ins, [out_type(kind, (n, oh, ow, c * mult))])


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize("code", [OperationCode.CONV_2D, OperationCode.FULLY_CONNECTED])
def test_requantization_beyond_the_vectorized_rescale(code, kind):
    """An output scale so small that the real multiplier is >> 1: large sums shifted left saturate
    int32, which only the reference's general rescale handles; mlts-fast runs it, and agrees."""
    x_t = act_type(kind, (1, 4, 4, 8) if code == OperationCode.CONV_2D else (2, 8))
    f_shape = (3, 3, 3, 8) if code == OperationCode.CONV_2D else (3, 8)
    f_t, f, b_t, b = filter_and_bias(kind, f_shape, 0, x_t.scale, seed=30)
    if code == OperationCode.FULLY_CONNECTED and kind == "int8":
        f_t = OperandType(S8, f_shape, 0.02, 0)
        b_t = OperandType(I32, (3,), float(np.float32(x_t.scale) * np.float32(0.02)), 0)
    tiny = act_type(kind, (1, 4, 4, 3) if code == OperationCode.CONV_2D else (2, 3), scale=1e-7)
    if code == OperationCode.CONV_2D:
        ins = conv_inputs(x_t, act_data(kind, x_t.dimensions, 31), f_t, f, b_t, b, code=SAME)
    else:
        ins = [(x_t, act_data(kind, x_t.dimensions, 31)), (f_t, Const(f)), (b_t, Const(b)), (INT, 0)]
    (out,) = check(code, ins, [tiny])
    assert len(np.unique(out)) > 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("in_shape,units,fuse", [((3, 20), 7, FuseCode.NONE), ((2, 1, 1, 64), 10, FuseCode.RELU)])
def test_fully_connected(kind, in_shape, units, fuse, blocks):
    x_t = act_type(kind, in_shape)
    k = in_shape[-1]
    # NNAPI's FULLY_CONNECTED has per-tensor weights only: int8 weights are per-tensor symmetric.
    if kind == "int8":
        f_t, f = OperandType(S8, (units, k), 0.02, 0), act_data("int8", (units, k), 4)
        b_t = OperandType(I32, (units,), float(np.float32(x_t.scale) * np.float32(0.02)), 0)
        b = rng(5).integers(-3000, 3000, units).astype(np.int32)
    else:
        f_t, f, b_t, b = filter_and_bias(kind, (units, k), 0, x_t.scale, seed=6)
    ins = [(x_t, act_data(kind, in_shape, 3)), (f_t, Const(f)), (b_t, Const(b)), (INT, int(fuse))]
    batch = int(np.prod(in_shape)) // k
    check(OperationCode.FULLY_CONNECTED, ins, [out_type(kind, (batch, units))])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fuse", [FuseCode.NONE, FuseCode.RELU6])
def test_add(kind, fuse):
    shape = (1, 5, 4, 6)
    a_t, b_t = act_type(kind, shape, 0.05), act_type(kind, shape, 0.031, zp=90 if kind == "uint8" else 11)
    ins = [(a_t, act_data(kind, shape, 7)), (b_t, act_data(kind, shape, 8)), (INT, int(fuse))]
    check(OperationCode.ADD, ins, [out_type(kind, shape)])


@pytest.mark.parametrize("kind", ["uint8", "int8"])
@pytest.mark.parametrize("constant", [False, True])
def test_quantized_add_of_every_pair_of_stored_values(kind, constant):
    """Every (a, b) pair of 8-bit stored values once (the step reads a table of all pairs), inputs of
    unlike scales and zero points, the second one constant or not: bit-exact with the reference."""
    shape = (1, 256, 256, 1)
    lo = 0 if kind == "uint8" else -128
    a = np.repeat(np.arange(256) + lo, 256).reshape(shape).astype(np.uint8 if kind == "uint8" else np.int8)
    b = np.tile(np.arange(256) + lo, 256).reshape(shape).astype(a.dtype)
    a_t = act_type(kind, shape, 0.05, zp=3 if kind == "uint8" else -7)
    b_t = act_type(kind, shape, 0.031, zp=200 if kind == "uint8" else 60)
    out_t = OperandType(a_t.code, shape, scale=0.07, zero_point=120 if kind == "uint8" else -5)
    ins = [(a_t, a), (b_t, Const(b) if constant else b), (INT, int(FuseCode.NONE))]
    check(OperationCode.ADD, ins, [out_t])


def test_add_with_a_constant_operand():
    shape = (2, 3)
    t = OperandType(F32, shape)
    ins = [(t, act_data("float", shape, 9)), (t, Const(act_data("float", shape, 10))), (INT, 0)]
    check(OperationCode.ADD, ins, [t])


POOL_CASES = [
    ("global", (1, 7, 7, 12), VALID, (1, 1), (7, 7)),
    ("3x3-same-stride2", (2, 9, 8, 5), SAME, (2, 2), (3, 3)),
    ("explicit", (1, 6, 7, 3), (1, 0, 2, 1), (1, 2), (3, 2)),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("code", [OperationCode.AVERAGE_POOL_2D, OperationCode.MAX_POOL_2D])
@pytest.mark.parametrize("case", POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_pooling(case, code, kind):
    _, shape, pads, strides, (fh, fw) = case
    n, h, w, c = shape
    x_t = act_type(kind, shape)
    ins = [(x_t, act_data(kind, shape, 11))]
    if isinstance(pads, int):
        ins.append((INT, pads))
        oh, ow = out_size(h, fh, strides[1], pads), out_size(w, fw, strides[0], pads)
    else:
        ins += [(INT, p) for p in pads]
        oh, ow = out_size(h, fh, strides[1], pads[2:]), out_size(w, fw, strides[0], pads[:2])
    ins += [(INT, strides[0]), (INT, strides[1]), (INT, fw), (INT, fh), (INT, int(FuseCode.RELU6))]
    check(code, ins, [act_type(kind, (n, oh, ow, c))])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape,beta", [((1, 10), 1.0), ((2, 3, 1, 17), 0.5), ((3, 300), 2.0)])
def test_softmax(kind, shape, beta):
    x_t = act_type(kind, shape, scale=0.1)
    out_t = OperandType(F32, shape) if kind == "float" else OperandType(
        x_t.code, shape, 1 / 256, 0 if kind == "uint8" else -128)
    check(OperationCode.SOFTMAX, [(x_t, act_data(kind, shape, 12)), (FLOAT, beta)], [out_t])


def test_softmax_on_another_axis_runs_the_reference_kernel():
    shape = (2, 5, 3)
    t = OperandType(F32, shape)
    check(OperationCode.SOFTMAX, [(t, act_data("float", shape, 13)), (FLOAT, 1.0), (INT, 1)], [t])


@pytest.mark.parametrize("kind", KINDS)
def test_reshape_transpose_and_mean(kind):
    x = act_data(kind, (1, 2, 3, 4), 14)
    x_t = act_type(kind, x.shape)
    check(OperationCode.RESHAPE, [(x_t, x), (OperandType(I32, (2,)), Const(np.array([6, -1], np.int32)))],
          [act_type(kind, (6, 4))])
    check(OperationCode.TRANSPOSE, [(x_t, x), (OperandType(I32, (4,)), Const(np.array([0, 3, 1, 2], np.int32)))],
          [act_type(kind, (1, 4, 2, 3))])
    check(OperationCode.MEAN, [(x_t, x), (OperandType(I32, (2,)), Const(np.array([1, 2], np.int32))), (INT, 0)],
          [act_type(kind, (1, 4))])


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("code", [OperationCode.RELU, OperationCode.RELU1, OperationCode.RELU6])
def test_relu_family(code, kind):
    x = act_data(kind, (2, 9), 15)
    if kind == "float":
        x = np.concatenate([x * 8, np.array([[np.nan, np.inf, -np.inf, 0, -0.0, 6, 1, -1, 7]], np.float32)])
    x_t = act_type(kind, x.shape)
    (out,) = check(code, [(x_t, x)], [x_t])
    if kind == "float":
        assert np.isnan(out[-1, 0])  # NaN stays NaN, as in the reference


def test_quantize_and_dequantize():
    x = act_data("float", (3, 7), 16) * 3
    for kind in ("uint8", "int8"):
        q_t = act_type(kind, x.shape, scale=0.02)
        (q,) = check(OperationCode.QUANTIZE, [(OperandType(F32, x.shape), x)], [q_t])
        check(OperationCode.DEQUANTIZE, [(q_t, q)], [OperandType(F32, x.shape)])
    pc_t = OperandType(PC, (3, 7), 0.0, 0, SymmPerChannelQuantParams((0.1, 0.2, 0.3), 0))
    check(OperationCode.DEQUANTIZE, [(pc_t, act_data("int8", (3, 7), 17).clip(-127))], [OperandType(F32, (3, 7))])


# -- what it refuses -------------------------------------------------------------------------------------
def _one_op_model(code, inputs, outputs) -> Model:
    m = Model()
    ids, model_inputs = [], []
    for t, v in inputs:
        i = m.add_operand(t)
        ids.append(i)
        if isinstance(v, Const) or t.is_scalar:
            m.set_operand_value(i, np.asarray(v.value if isinstance(v, Const) else v, dtype=t.dtype))
        else:
            model_inputs.append(i)
    outs = [m.add_operand(t) for t in outputs]
    m.add_operation(code, ids, outs)
    m.identify_inputs_and_outputs(model_inputs, outs)
    m.finish()
    return m


def _conv_inputs(nchw: bool = False, filter_constant: bool = True):
    """A 3x3 SAME float CONV_2D: 2 input channels, 3 output channels, 4x4 (NHWC or NCHW)."""
    x_t = OperandType(F32, (1, 2, 4, 4) if nchw else (1, 4, 4, 2))
    f_t, f, b_t, b = filter_and_bias("float", (3, 3, 3, 2), 0, 0.0, seed=1)
    ins = conv_inputs(x_t, None, f_t, f, b_t, b, code=SAME)
    if not filter_constant:
        ins[1] = (f_t, None)
    if nchw:
        ins.append((BOOL, True))
    return ins, OperandType(F32, (1, 3, 4, 4) if nchw else (1, 4, 4, 3))


def _depthwise_with_huge_multiplier():
    x_t = act_type("uint8", (1, 4, 4, 8))
    f_t, f, b_t, b = filter_and_bias("uint8", (1, 3, 3, 8), 3, x_t.scale, seed=3)
    ins = conv_inputs(x_t, None, f_t, f, b_t, b, code=SAME, multiplier=1)
    return OperationCode.DEPTHWISE_CONV_2D, ins, act_type("uint8", (1, 4, 4, 8), scale=1e-9)


UNSUPPORTED = {
    "nchw-layout": lambda: (OperationCode.CONV_2D, *_conv_inputs(nchw=True)),
    "filter-not-constant": lambda: (OperationCode.CONV_2D, *_conv_inputs(filter_constant=False)),
    "unknown-dimensions": lambda: (OperationCode.RELU, [(OperandType(F32, (0, 3)), None)], OperandType(F32, (0, 3))),
    "float16": lambda: (OperationCode.RELU, [(OperandType(OperandCode.TENSOR_FLOAT16, (2, 3)), None)],
                        OperandType(OperandCode.TENSOR_FLOAT16, (2, 3))),
    "broadcasting-add": lambda: (OperationCode.ADD, [(OperandType(F32, (2, 3)), None), (OperandType(F32, (3,)), None),
                                                     (INT, 0)], OperandType(F32, (2, 3))),
    "depthwise-beyond-the-vectorized-rescale": lambda: _depthwise_with_huge_multiplier(),
    "no-kernel": lambda: (OperationCode.TANH, [(OperandType(F32, (2, 3)), None)], OperandType(F32, (2, 3))),
}


@pytest.mark.parametrize("make", UNSUPPORTED.values(), ids=UNSUPPORTED.keys())
def test_unsupported_operations_are_reported_not_failed(make):
    code, inputs, out = make()
    model = _one_op_model(code, inputs, [out])
    assert FastDriver().get_supported_operations(model.hal_model()) == [False]
    with pytest.raises(MltsError) as info:
        Compilation.for_devices(model, [get_device(FAST_DEVICE_NAME)]).finish()
    assert info.value.code == ResultCode.BAD_DATA


def test_a_model_input_no_operation_reads_is_accepted():
    """NNAPI allows a model input nothing reads (the stress suite's random graphs make them): mlts-fast gives it a
    buffer like any input instead of failing preparation, and computes what nnapi-reference does."""
    m = Model()
    t = OperandType(F32, (2, 3))
    x, unused, y = m.add_operand(t), m.add_operand(t), m.add_operand(t)
    m.add_operation(OperationCode.RELU, [x], [y])
    m.identify_inputs_and_outputs([x, unused], [y])
    m.finish()
    data = np.array([[-1.0, 0.5, 2.0], [3.0, -0.25, 0.0]], np.float32)
    results = []
    for name in (FAST_DEVICE_NAME, REF):
        c = Compilation.for_devices(m, [get_device(name)])
        c.finish()
        e = Execution(c)
        e.set_input(0, data)
        e.set_input(1, np.full((2, 3), 7.0, np.float32))
        e.compute()
        results.append(e.get_output(0))
    np.testing.assert_array_equal(results[0], np.maximum(data, 0))
    np.testing.assert_array_equal(results[0], results[1])


def test_unsupported_operations_are_partitioned_to_the_reference():
    """CONV_2D -> TANH -> CONV_2D: the convolutions on mlts-fast, TANH on the reference."""
    m = Model()
    t = OperandType(F32, (1, 5, 5, 4))
    x = m.add_operand(t)
    ids = {}
    for name in ("c1", "s", "c2"):
        ids[name] = m.add_operand(t)
    scalars = {}
    for v in (SAME, 1, 0):
        scalars[v] = m.add_operand(INT)
        m.set_operand_value(scalars[v], np.int32(v))
    prev = x
    for k, name in enumerate(("c1", "s", "c2")):
        if name == "s":
            m.add_operation(OperationCode.TANH, [prev], [ids[name]])
        else:
            f = m.add_operand(OperandType(F32, (4, 3, 3, 4)))
            b = m.add_operand(OperandType(F32, (4,)))
            m.set_operand_value(f, rng(k).uniform(-0.5, 0.5, (4, 3, 3, 4)).astype(np.float32))
            m.set_operand_value(b, rng(k + 9).uniform(-0.5, 0.5, 4).astype(np.float32))
            m.add_operation(OperationCode.CONV_2D, [prev, f, b, scalars[SAME], scalars[1], scalars[1], scalars[0]],
                            [ids[name]])
        prev = ids[name]
    m.identify_inputs_and_outputs([x], [prev])
    m.finish()
    comp = Compilation(m)
    comp.finish()
    names = [d.name for d in comp.devices]
    chosen = [names[int(line.rsplit(": ", 1)[1])] for line in comp.plan_log
              if line.startswith("findBestDeviceForEachOperation(")]
    assert chosen == [FAST_DEVICE_NAME, REF, FAST_DEVICE_NAME]
    data = act_data("float", t.dimensions, 20)
    results = []
    for c in (comp, Compilation.for_devices(m, [get_device(REF)])):
        if not c.finished:
            c.finish()
        e = Execution(c)
        e.set_input(0, data)
        e.compute()
        results.append(e.get_output(0))
    assert_cts_close(results[0], results[1], F32)


def test_fast_is_a_default_device_declaring_better_performance_than_the_reference():
    names = [d.name for d in devices()]
    assert REF in names and FAST_DEVICE_NAME in names
    fast, ref = get_device(FAST_DEVICE_NAME), get_device(REF)
    assert fast.type == DeviceType.ACCELERATOR
    for code in (F32, U8, S8):
        assert fast.capabilities.performance(code).exec_time < ref.capabilities.performance(code).exec_time
        assert fast.capabilities.performance(code).power_usage < ref.capabilities.performance(code).power_usage
    assert fast.capabilities.performance(OperandCode.TENSOR_FLOAT16).exec_time == float("inf")


# -- the HAL boundary ------------------------------------------------------------------------------------
def _relu_hal():
    t = OperandType(F32, (2, 2))
    return _one_op_model(OperationCode.RELU, [(t, None)], [t]).hal_model()


def _prepare(hal):
    return FastDriver().prepare_model(hal, Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, None)


def _request(pool, in_loc, out_loc, in_dims=()):
    return Request((RequestArgument(False, in_loc, in_dims),), (RequestArgument(False, out_loc, ()),), (pool,))


def test_prepared_model_runs_requests_and_reports_timing():
    prepared = _prepare(_relu_hal())
    assert isinstance(prepared, FastPreparedModel)
    pool = Memory.create_shared(32)
    pool.array(0, np.float32, (2, 2))[:] = [[-1, 2], [3, -4]]
    result = prepared.execute_synchronously(_request(pool, DataLocation(0, 0, 16), DataLocation(0, 16, 16)),
                                            True, None, 2_000_000_000)
    assert result.status == ResultCode.NO_ERROR
    np.testing.assert_array_equal(pool.array(16, np.float32, (2, 2)), [[0, 2], [3, 0]])
    assert result.output_shapes[0].dimensions == (2, 2)
    assert result.timing.time_on_device <= result.timing.time_in_driver


BAD_REQUESTS = {
    "input-region-beyond-pool": (DataLocation(0, 24, 16), DataLocation(0, 0, 16), ()),
    "input-length-wrong": (DataLocation(0, 0, 8), DataLocation(0, 16, 16), ()),
    "pool-index-missing": (DataLocation(1, 0, 16), DataLocation(0, 16, 16), ()),
    "negative-offset": (DataLocation(0, -4, 16), DataLocation(0, 16, 16), ()),
    "conflicting-dimensions": (DataLocation(0, 0, 16), DataLocation(0, 16, 16), (4, 1)),
}


@pytest.mark.parametrize("locs", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
def test_malformed_requests_are_refused_with_bad_data(locs):
    prepared = _prepare(_relu_hal())
    pool = Memory.create_shared(32)
    result = prepared.execute_synchronously(_request(pool, *locs), False, None, 2_000_000_000)
    assert result.status == ResultCode.BAD_DATA and result.message


def test_wrong_argument_count_small_output_and_passed_deadline():
    prepared = _prepare(_relu_hal())
    pool = Memory.create_shared(32)
    request = Request((), (RequestArgument(False, DataLocation(0, 0, 16)),), (pool,))
    assert prepared.execute_synchronously(request, False, None, 0).status == ResultCode.BAD_DATA
    small = _request(pool, DataLocation(0, 0, 16), DataLocation(0, 16, 8))
    result = prepared.execute_synchronously(small, False, None, 0)
    assert result.status == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert result.output_shapes[0].dimensions == (2, 2) and not result.output_shapes[0].is_sufficient
    ok = _request(pool, DataLocation(0, 0, 16), DataLocation(0, 16, 16))
    assert prepared.execute_synchronously(ok, False, 0.0, 0).status == ResultCode.MISSED_DEADLINE_TRANSIENT
    assert prepared.execute_synchronously("not a request", False, None, 0).status == ResultCode.BAD_DATA


def test_malformed_models_are_refused_with_bad_data():
    hal = _relu_hal()
    operands = list(hal.main.operands)
    operands[0] = dataclasses.replace(operands[0], lifetime=OperandLifetime.TEMPORARY_VARIABLE)
    bad = dataclasses.replace(hal, main=dataclasses.replace(hal.main, operands=tuple(operands)))
    for call in (lambda: _prepare(bad), lambda: FastDriver().get_supported_operations(bad),
                 lambda: FastDriver().get_supported_operations("not a model")):
        with pytest.raises(MltsError) as info:
            call()
        assert info.value.code == ResultCode.BAD_DATA
    with pytest.raises(MltsError) as info:  # a model with an operation it does not take
        _prepare(_one_op_model(OperationCode.TANH, [(OperandType(F32, (2,)), None)],
                                [OperandType(F32, (2,))]).hal_model())
    assert info.value.code == ResultCode.BAD_DATA and "TANH" in info.value.message


# -- whole networks ----------------------------------------------------------------------------------------
def _fast_plan_lines(compilation) -> list[str]:
    """The steps of mlts-fast's prepared plan(s) in a compilation, checking nothing ran elsewhere."""
    assert compilation.plan_log[-1] == f"partitionTheWork: only one best device: {FAST_DEVICE_NAME}"
    lines = []
    for step in compilation.plan.steps:
        assert step.device.name == FAST_DEVICE_NAME and isinstance(step.prepared, FastPreparedModel)
        lines += step.prepared.plan.describe()
    return lines


def _check_network(imported, x, *, quantized: bool, max_float_diff: float = 1e-4):
    comp = imported.compilation([get_device(FAST_DEVICE_NAME)])
    lines = _fast_plan_lines(comp)
    convs = [line for line in lines if "CONV_2D" in line]
    assert convs and len(convs) == sum(code.name.endswith("CONV_2D") for code, _, _ in imported.model.operations())
    name = imported.input_names[0]
    fast = imported.run({name: x}, devices=[get_device(FAST_DEVICE_NAME)])
    ref = imported.run({name: x}, devices=[REF])
    for key in imported.output_names:
        diff = np.abs(fast[key].astype(np.float64) - ref[key].astype(np.float64)).max()
        if quantized:
            assert diff <= 3, f"{key}: quantized outputs differ by {diff} steps"
        else:
            assert diff <= max_float_diff, f"{key}: outputs differ by {diff}"
    return lines, fast, ref


def _images(resolution: int, count: int, split: str = "calibration"):
    from mlts.datasets.shapes import ShapesDataset

    data = ShapesDataset(split, resolution)
    return np.stack([data[i][0] for i in range(count)])


@pytest.fixture(scope="module")
def tiny_networks():
    """MobileNet v1 0.25 and v2 0.35 at 32x32, built, quantized and imported by the zoo's pipeline."""
    from model_weights import stable_weights

    from mlts.datasets.preprocess import to_float_input
    from mlts.models import import_onnx
    from mlts.models.mobilenet import build_onnx
    from mlts.models.quantizer import quantize_model

    calibration = to_float_input(_images(32, 12))
    nets = {}
    for family, alpha in (("v1", 0.25), ("v2", 0.35)):
        float_model = build_onnx(family, alpha, 32, stable_weights(family, alpha, calibration))
        nets[(family, None)] = import_onnx(float_model.SerializeToString())
        for scheme in ("uint8", "int8"):
            q = quantize_model(float_model, calibration, scheme=scheme)
            nets[(family, scheme)] = import_onnx(q.SerializeToString())
    return nets


def _network_input(resolution: int, scheme: str | None, index: int = 0):
    from mlts.datasets.preprocess import INPUT_ZERO_POINT, to_float_input, to_quant_input

    image = _images(resolution, index + 1, "heldout")[index]
    if scheme is None:
        return to_float_input(image)
    return to_quant_input(image, zero_point=INPUT_ZERO_POINT[scheme], dtype=np.uint8 if scheme == "uint8" else np.int8)


@pytest.mark.parametrize("scheme", [None, "uint8", "int8"], ids=["float", "uint8", "int8"])
@pytest.mark.parametrize("family", ["v1", "v2"])
def test_tiny_mobilenets_match_the_reference(tiny_networks, family, scheme):
    imported = tiny_networks[(family, scheme)]
    lines, _, _ = _check_network(imported, _network_input(32, scheme), quantized=scheme is not None)
    # The input TRANSPOSE is read in place by the first convolution; depthwise inputs come bordered.
    assert any(line.startswith("0:TRANSPOSE") and line.endswith("(a view)") for line in lines)
    if scheme is not None:  # quantized GEMM inputs are exact in float32 for these weights
        assert all("exact" in line for line in lines if "sgemm" in line or "dgemm" in line)


@pytest.mark.parametrize("scheme", [None, "uint8", "int8"], ids=["float", "uint8", "int8"])
def test_tiny_mobilenet_in_tiny_blocks(tiny_networks, monkeypatch, scheme):
    """Every GEMM split into one-row blocks and one-row im2col chunks (the channel-major stem, the
    bordered outputs) gives the same results."""
    monkeypatch.setattr(steps_conv, "BLOCK_BYTES", 64)
    monkeypatch.setattr(steps_conv, "IM2COL_CHUNK_BYTES", 64)
    imported = tiny_networks[("v2", scheme)]
    comp = Compilation.for_devices(imported.model, [get_device(FAST_DEVICE_NAME)])
    comp.finish()
    x = _network_input(32, scheme, 1)
    e = Execution(comp)
    e.set_input(0, x)
    e.compute()
    expected = imported.run({"input": x}, devices=[REF])["probabilities"]
    assert np.abs(e.get_output(0).astype(np.float64) - expected).max() <= (3 if scheme else 1e-4)


def test_concurrent_executions_of_one_compilation(tiny_networks):
    imported = tiny_networks[("v2", "uint8")]
    comp = imported.compilation([get_device(FAST_DEVICE_NAME)])
    inputs = [_network_input(32, "uint8", k) for k in range(4)]
    expected = [imported.run({"input": x}, devices=[REF])["probabilities"] for x in inputs]
    errors = []

    def worker(k: int) -> None:
        try:
            for _ in range(5):
                e = Execution(comp)
                e.set_input(0, inputs[k])
                e.compute()
                np.testing.assert_array_equal(e.get_output(0), expected[k])
        except Exception as err:  # reported below, in the test's thread
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.fixture(scope="module")
def zoo_with_stable_weights(tmp_path_factory):
    """The zoo with stable random weights (trained weights are not required), as tests/models/test_zoo.py."""
    from model_weights import stable_weights

    from mlts.datasets.preprocess import to_float_input
    from mlts.models import zoo_registry as zoo_module

    tmp = tmp_path_factory.mktemp("fast-zoo")
    wdir = tmp / "weights"
    wdir.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(zoo_module, "WEIGHTS_DIR", wdir)
        mp.setattr(zoo_module, "CALIBRATION_IMAGES", 24)
        mp.setenv("MLTS_CACHE", str(tmp / "cache"))
        for entry in zoo_module.zoo():
            if entry.family not in ("v1", "v2"):  # the MobileNets' stand-in weights; other workloads have their own tests
                continue
            path = wdir / f"{entry.base_name}.npz"
            if not path.exists():
                x = to_float_input(_images(entry.resolution, 16))
                weights = stable_weights(entry.family, entry.alpha, x)
                np.savez_compressed(path, **{k: v.astype(np.float16) for k, v in weights.items()})
        yield zoo_module
    _return_freed_memory()


def _return_freed_memory() -> None:
    """Hand the heap memory the big models freed back to the system, so that later tests measuring
    resident-memory growth (the leak-injecting driver) see fresh allocations grow it again."""
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        try:
            ctypes.CDLL(name).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass


def _zoo_names():
    from mlts.models.zoo_registry import zoo

    return [e.name for e in zoo() if e.family in ("v1", "v2")]


@pytest.mark.slow
@pytest.mark.parametrize("name", _zoo_names())
def test_every_zoo_model_matches_the_reference(zoo_with_stable_weights, name):
    entry = zoo_with_stable_weights.get_entry(name)
    imported = zoo_with_stable_weights.load(name)
    _check_network(imported, _network_input(entry.resolution, entry.quantization),
                   quantized=entry.quantization is not None)
