"""MEAN through the public API (run_op on nnapi-reference).

Float results against onnx.reference ReduceMean; quantized results against plain Python integers:
with the output keeping the input's scale/zero point, NNAPI's truncating integer division of the sum;
with different output parameters, the exact rational requantization (within one step of mlts'
fixed-point multiplier), and always within one step of dequantize-mean-requantize.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from support.op_runner import Const, run_op
from support.tolerance import assert_cts_close

from mlts.runtime import MltsError, OperandCode, OperandType, OperationCode, ResultCode

F32 = OperandCode.TENSOR_FLOAT32
F16 = OperandCode.TENSOR_FLOAT16
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
I32 = OperandCode.TENSOR_INT32
MEAN = OperationCode.MEAN

rng = np.random.default_rng(31)


def onnx_mean(x, axes, keep):
    init = numpy_helper.from_array(np.asarray(axes, dtype=np.int64), "axes")
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=int(keep))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    y = ReferenceEvaluator(model).run(None, {"x": x.astype(np.float32)})[0]
    return y.reshape(1) if y.ndim == 0 else y   # NNAPI: reducing everything without keep_dims gives [1]


def mean_inputs(t, x, axes, keep):
    a = np.asarray(axes, dtype=np.int32)
    return [(t, x), (OperandType.tensor(I32, a.shape), Const(a)), (OperandType.scalar(OperandCode.INT32), keep)]


CASES = [((4, 3, 2), [0, 2], 1), ((4, 3, 2), [0, 2], 0), ((2, 3, 4, 5), [1, 2], 1), ((2, 3, 4, 5), [-1], 0),
         ((2, 3, 4, 5), [0, 1, 2, 3], 0), ((2, 3, 4, 5), [3, -1, 1], 0), ((6,), [0], 1), ((3, 5), [1], 5)]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("code", [F32, F16], ids=["f32", "f16"])
def test_float_against_onnx(case, code):
    shape, axes, keep = CASES[case]
    t = OperandType.tensor(code, shape)
    x = (rng.standard_normal(shape) * 2 + 1).astype(t.dtype)
    expected = onnx_mean(x, sorted({a % len(shape) for a in axes}), keep > 0)
    (y,) = run_op(MEAN, mean_inputs(t, x, axes, keep), [OperandType.tensor(code, expected.shape)])
    assert y.dtype == t.dtype and y.shape == expected.shape
    assert_cts_close(y, expected, code)


def test_cts_example_quant8_truncates():
    # NNAPI's mean_quant8_2 example: means 10.5, 12.5, 14.5 of the stored values give 10, 12, 14.
    t = OperandType.tensor(U8, (4, 3, 2), 0.8, 5)
    x = np.arange(1, 25, dtype=np.uint8).reshape(4, 3, 2)
    (y,) = run_op(MEAN, mean_inputs(t, x, [0, 2], 1), [OperandType.tensor(U8, (1, 3, 1), 0.8, 5)])
    assert y.ravel().tolist() == [10, 12, 14]


def plain_sums(q, axes, keep):
    """Python-int sums and counts over `axes` (non-negative, sorted) of a small array."""
    axes = sorted(set(axes))
    kept = [d for d in range(q.ndim) if d not in axes]
    groups = {}
    for idx in np.ndindex(*q.shape):
        key = tuple(idx[d] for d in kept)
        s, c = groups.get(key, (0, 0))
        groups[key] = (s + int(q[idx]), c + 1)
    out_shape = tuple(1 if d in axes else q.shape[d] for d in range(q.ndim)) if keep else \
        (tuple(q.shape[d] for d in kept) or (1,))
    keys = sorted(groups)
    return [groups[k] for k in keys], out_shape


def trunc_div(a, b):
    return abs(a) // b * (1 if a >= 0 else -1)


def round_half_away(fr: Fraction) -> int:
    n = abs(fr)
    r = int(n) + (1 if n - int(n) >= Fraction(1, 2) else 0)
    return r if fr >= 0 else -r


def float_requant(q, s_in, zp_in, s_out, zp_out, axes, keep, qmin, qmax):
    real = (q.astype(np.float64) - zp_in) * s_in
    y = real.mean(axis=tuple(axes), keepdims=keep)
    return np.clip(np.round(y / s_out) + zp_out, qmin, qmax)


QCASES = [((4, 3, 2), [0, 2], 1), ((2, 3, 4, 3), [1, 2], 1), ((2, 3, 4, 3), [-1, 0], 0), ((3, 5), [0, 1], 0)]


@pytest.mark.parametrize("case", range(len(QCASES)))
@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
def test_quant8_same_parameters_truncates_like_nnapi(case, code):
    shape, axes, keep = QCASES[case]
    qmin, qmax = (0, 255) if code == U8 else (-128, 127)
    scale, zp = 0.5, (100 if code == U8 else -20)
    t = OperandType.tensor(code, shape, scale, zp)
    q = rng.integers(qmin, qmax + 1, size=shape)
    naxes = sorted({a % len(shape) for a in axes})
    groups, out_shape = plain_sums(q, naxes, keep)
    expected = np.array([trunc_div(s, c) for s, c in groups], dtype=np.int64).reshape(out_shape)
    (y,) = run_op(MEAN, mean_inputs(t, q.astype(t.dtype), axes, keep), [OperandType.tensor(code, out_shape, scale, zp)])
    assert y.dtype == t.dtype
    np.testing.assert_array_equal(y.astype(np.int64), expected)
    assert_cts_close(y, float_requant(q, scale, zp, scale, zp, naxes, bool(keep), qmin, qmax).reshape(out_shape), code)


@pytest.mark.parametrize("case", range(len(QCASES)))
@pytest.mark.parametrize("code", [U8, S8], ids=["u8", "s8"])
@pytest.mark.parametrize("out_params", [(0.25, 30), (1.3, 128), (0.02, 0)])
def test_quant8_requantizes_to_output_parameters(case, code, out_params):
    shape, axes, keep = QCASES[case]
    shift = 128 if code == S8 else 0
    qmin, qmax = -shift, 255 - shift
    s_in, zp_in = 0.5, 90 - shift
    s_out, zp_out = out_params[0], out_params[1] - shift
    t = OperandType.tensor(code, shape, s_in, zp_in)
    q = rng.integers(qmin, qmax + 1, size=shape)
    naxes = sorted({a % len(shape) for a in axes})
    groups, out_shape = plain_sums(q, naxes, keep)
    ratio = Fraction(s_in) / Fraction(s_out)
    expected = np.array([min(max(round_half_away((s - c * zp_in) * ratio / c) + zp_out, qmin), qmax)
                         for s, c in groups], dtype=np.int64).reshape(out_shape)
    (y,) = run_op(MEAN, mean_inputs(t, q.astype(t.dtype), axes, keep),
                  [OperandType.tensor(code, out_shape, s_out, zp_out)])
    assert_cts_close(y, expected, code)
    assert_cts_close(y, float_requant(q, s_in, zp_in, s_out, zp_out, naxes, bool(keep), qmin, qmax)
                     .reshape(out_shape), code)


@pytest.mark.parametrize("out_params", [None, (0.3, 60)])
def test_signed_and_unsigned_agree_up_to_offset(out_params):
    shape, axes, keep = (2, 3, 4, 3), [1, 2], 1
    qu = rng.integers(0, 256, size=shape)
    s_out, zp_out = out_params or (0.5, 140)
    outs = []
    for code, shift in ((U8, 0), (S8, 128)):
        t = OperandType.tensor(code, shape, 0.5, 140 - shift)
        (y,) = run_op(MEAN, mean_inputs(t, (qu - shift).astype(t.dtype), axes, keep),
                      [OperandType.tensor(code, (2, 1, 1, 3), s_out, zp_out - shift)])
        outs.append(y.astype(np.int64) + shift)
    assert np.abs(outs[0] - outs[1]).max() <= 1


# -- validation -------------------------------------------------------------------------------------
def expect_bad_data(inputs, outputs, *words):
    with pytest.raises(MltsError) as info:
        run_op(MEAN, inputs, outputs)
    assert info.value.code == ResultCode.BAD_DATA
    assert "MEAN" in str(info.value)
    for w in words:
        assert w in str(info.value)


def f32(shape):
    return OperandType.tensor(F32, shape), np.zeros(shape, np.float32)


def test_rejects_axis_out_of_range():
    t, x = f32((2, 3))
    expect_bad_data(mean_inputs(t, x, [2], 0), [OperandType.tensor(F32, (2,))], "axis 2")
    expect_bad_data(mean_inputs(t, x, [0, -3], 0), [OperandType.tensor(F32, (3,))], "axis -3")


def test_rejects_bad_types_and_counts():
    t, x = f32((2, 3))
    expect_bad_data(mean_inputs(t, x, [1], 0), [OperandType.tensor(F16, (2,))], "output")
    expect_bad_data(mean_inputs(t, x, [1], 0)[:2], [OperandType.tensor(F32, (2,))], "inputs")
    bad_keep = mean_inputs(t, x, [1], 0)[:2] + [(OperandType.scalar(OperandCode.FLOAT32), 0.0)]
    expect_bad_data(bad_keep, [OperandType.tensor(F32, (2,))], "FLOAT32")
    axes2d = np.array([[0, 1]], dtype=np.int32)
    expect_bad_data([(t, x), (OperandType.tensor(I32, axes2d.shape), Const(axes2d)),
                     (OperandType.scalar(OperandCode.INT32), 0)], [OperandType.tensor(F32, (1,))], "1-D")
    t5, x5 = f32((1, 1, 1, 1, 2))
    expect_bad_data(mean_inputs(t5, x5, [4], 0), [OperandType.tensor(F32, (1, 1, 1, 1))], "rank")
