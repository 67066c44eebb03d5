"""onnxruntime's QOperator format (QLinear* and com.microsoft operators) against onnxruntime on the same file.

Graphs quantized by onnxruntime.quantization.quantize_static (QuantFormat.QOperator) where its quantizer
writes the operator (QLinearConcat, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool, QLinearMul,
QLinearSoftmax, QGemm, and the plain operators it runs on uint8: MaxPool, Pad, Resize, Transpose,
Split, Reshape, Flatten...), hand-built nodes where it does not (QLinearReduceMean, int8 variants,
channels_last pools, com.microsoft QuantizeLinear/DequantizeLinear). Tolerance: 1 quantization step
per operation (NNAPI requantizes with a fixed-point multiplier, onnxruntime in float), 3 for chains.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import assert_quant_close, const, make_model, op_types, ort_run, quantize, tensor  # noqa: E402

from mlts.models import import_onnx  # noqa: E402
from mlts.runtime import OperandCode  # noqa: E402

pytest.importorskip("onnxruntime")

MS = [("com.microsoft", 1)]
RNG = np.random.default_rng(2024)


def rnd(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def initializer(data: bytes, name: str) -> np.ndarray:
    return onnx.numpy_helper.to_array([t for t in onnx.load_from_string(data).graph.initializer if t.name == name][0])


def compare(data: bytes, feeds_list, output: str, step: float, max_steps: float):
    imported = import_onnx(data)
    for feeds in feeds_list:
        got = imported.run(feeds, devices=["nnapi-reference"])[output]
        ref = ort_run(data, feeds)[output]
        assert got.dtype == ref.dtype
        assert_quant_close(got, ref, step, max_steps=max_steps, argmax=False)
    return imported


def float_ops(imported) -> set[str]:
    m = imported.model
    return {code.name for code, _, outs in m.operations() if m.operand_type(outs[0]).code == OperandCode.TENSOR_FLOAT32}


# -- quantize_static, QOperator format -------------------------------------------------------------------------
def concat_sigmoid_leakyrelu() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Sigmoid", ["m1"], ["s"]),
             helper.make_node("LeakyRelu", ["m1"], ["l"], alpha=0.2),
             helper.make_node("Concat", ["s", "l"], ["c"], axis=1), helper.make_node("MatMul", ["c", "w2"], ["y"])]
    return make_model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 5])],
                      [const("w1", rnd(8, 6)), const("w2", rnd(12, 5))])


def avgpool_mul_gemm_softmax() -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c"], ["p"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Mul", ["p", "p"], ["m"]), helper.make_node("Flatten", ["m"], ["f"]),
             helper.make_node("Gemm", ["f", "wg", "bg"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"], axis=-1)]
    inits = [const("w", rnd(4, 3, 3, 3)), const("b", rnd(4, scale=0.1)), const("wg", rnd(10, 16, scale=0.5)),
             const("bg", rnd(10, scale=0.1))]
    return make_model(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 10])], inits)


def uint8_data_movement() -> onnx.ModelProto:
    """Operators onnxruntime's QOperator format runs directly on uint8 tensors, between QLinearConv and
    QLinearMatMul: their parameters come from the neighbouring QLinear operators."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Pad", ["mp", "pads"], ["pd"]),
             helper.make_node("Resize", ["pd", "", "scales"], ["rs"], mode="nearest"),
             helper.make_node("Transpose", ["rs"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Split", ["t", "split"], ["s1", "s2"], axis=3),
             helper.make_node("Concat", ["s2", "s1"], ["cc"], axis=3),
             helper.make_node("Reshape", ["cc", "shape"], ["rh"]),
             helper.make_node("Flatten", ["rh"], ["fl"]),
             helper.make_node("MatMul", ["fl", "wm"], ["y"])]
    inits = [const("w", rnd(4, 3, 3, 3)), const("b", rnd(4, scale=0.1)),
             const("pads", np.asarray([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
             const("scales", np.asarray([1, 1, 2, 2], np.float32)), const("split", np.asarray([1, 3], np.int64)),
             const("shape", np.asarray([1, -1, 4], np.int64)), const("wm", rnd(576, 5, scale=0.1))]
    return make_model(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 5])], inits)


# case -> (float graph, input shape, operators onnxruntime writes, NNAPI operations, float NNAPI operations)
QUANTIZED = {
    # onnxruntime's QLinearSigmoid output scale is 1/255, not LOGISTIC's 1/256: that LOGISTIC runs in float
    "concat_sigmoid_leakyrelu": (concat_sigmoid_leakyrelu, [4, 8],
                                 {"QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QLinearMatMul"},
                                 {"LOGISTIC", "CONCATENATION", "FULLY_CONNECTED"}, {"DEQUANTIZE", "LOGISTIC"}),
    # the average pool keeps its input's parameters and is requantized (one DEQUANTIZE -> QUANTIZE)
    "avgpool_mul_gemm_softmax": (avgpool_mul_gemm_softmax, [1, 3, 8, 8],
                                 {"QLinearConv", "QLinearAveragePool", "QLinearMul", "QGemm", "QLinearSoftmax"},
                                 {"CONV_2D", "AVERAGE_POOL_2D", "MUL", "SOFTMAX"}, {"DEQUANTIZE"}),
    "uint8_data_movement": (uint8_data_movement, [1, 3, 8, 8],
                            {"QLinearConv", "MaxPool", "Pad", "Resize", "Transpose", "Split", "Reshape", "Flatten",
                             "QLinearMatMul"},
                            {"CONV_2D", "MAX_POOL_2D", "PAD", "RESIZE_NEAREST_NEIGHBOR", "CONCATENATION"},
                            {"DEQUANTIZE"}),
}


@pytest.mark.parametrize("case", sorted(QUANTIZED))
def test_quantize_static_qoperator(case):
    build, shape, written, nnapi_ops, float_allowed = QUANTIZED[case]
    data = quantize(build(), "x", shape, fmt="QOperator", per_channel=False)
    assert written <= {n.op_type for n in onnx.load_from_string(data).graph.node}
    feeds = [{"x": np.random.default_rng(k).uniform(-1, 1, shape).astype(np.float32)} for k in range(3)]
    imported = compare(data, feeds, "y", float(initializer(data, "y_scale")), max_steps=3)
    ops = op_types(imported)
    assert nnapi_ops <= set(ops), ops
    # 8-bit inside: the graph input's QUANTIZE and the output's DEQUANTIZE (and what the notes above say)
    assert float_ops(imported) == float_allowed, ops


# -- hand-built QOperator nodes ------------------------------------------------------------------------------
def qparams(prefix: str, scale: float, zp: int, dtype) -> list[onnx.TensorProto]:
    return [const(f"{prefix}_s", np.float32(scale)), const(f"{prefix}_z", np.asarray(zp, dtype))]


def single_qop(op: str, shape, out_shape, dtype, *, x=(0.05, 10), y=(0.04, -3), extra_inputs=(), inits=(),
               model_opset: int = 13, **attrs) -> onnx.ModelProto:
    """One com.microsoft QLinear operator X, X_scale, X_zp, [extra...], Y_scale, Y_zp on 8-bit graph I/O."""
    dtype = np.dtype(dtype)
    shift = 128 if dtype == np.uint8 else 0
    elem = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    node = helper.make_node(op, ["x", "x_s", "x_z", *extra_inputs, "y_s", "y_z"], ["y"], domain="com.microsoft",
                            **attrs)
    params = qparams("x", x[0], x[1] + shift, dtype) + qparams("y", y[0], y[1] + shift, dtype) + list(inits)
    return make_model([node], [tensor("x", shape, elem)], [tensor("y", out_shape, elem)], params, opset=model_opset,
                      extra_opsets=MS)


def int_feeds(shape, dtype, n: int = 2):
    info = np.iinfo(dtype)
    return [{"x": np.random.default_rng(k).integers(info.min, info.max + 1, shape).astype(dtype)} for k in range(n)]


def quantize_like_onnx(real: np.ndarray, scale: float, zp: int, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.rint(real / np.float32(scale)) + zp, info.min, info.max).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("axes,keepdims", [([2, 3], 1), ([1], 0), ([-1], 1)])
@pytest.mark.parametrize("opset", [13, 18])
def test_qlinear_reduce_mean(axes, keepdims, dtype, opset):
    """QLinearReduceMean (onnxruntime's quantizer never writes it, and has no CPU kernel for it): MEAN on the 8-bit
    tensor, against the mean computed by hand; at opset 18 the float ReduceMean takes its axes as an input."""
    shift = 128 if np.dtype(dtype) == np.uint8 else 0
    x_zp, y_zp = 10 + shift, -3 + shift
    expected_shape = np.mean(np.zeros((1, 3, 4, 5)), axis=tuple(axes), keepdims=bool(keepdims)).shape
    model = single_qop("QLinearReduceMean", [1, 3, 4, 5], list(expected_shape), dtype, axes=axes, keepdims=keepdims,
                       model_opset=opset)
    imported = import_onnx(model.SerializeToString())
    for feeds in int_feeds([1, 3, 4, 5], dtype):
        real = (feeds["x"].astype(np.float64) - x_zp) * np.float32(0.05)
        expected = quantize_like_onnx(real.mean(axis=tuple(axes), keepdims=bool(keepdims)), 0.04, y_zp, dtype)
        got = imported.run(feeds, devices=["nnapi-reference"])["y"]
        assert got.shape == expected.shape and np.abs(got.astype(int) - expected.astype(int)).max() <= 1
    # MEAN keeps the input's parameters (NNAPI's kernel ignores others): the result is requantized
    assert "MEAN" in op_types(imported) and float_ops(imported) == {"DEQUANTIZE"}


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("alpha", [0.1, 0.5])
def test_qlinear_leaky_relu(dtype, alpha):
    """QLinearLeakyRelu -> DQ -> LeakyRelu -> Q, one 8-bit operation (the LeakyRelu converter's PRELU)."""
    model = single_qop("QLinearLeakyRelu", [2, 3, 4], [2, 3, 4], dtype, alpha=alpha)
    imported = compare(model.SerializeToString(), int_feeds([2, 3, 4], dtype), "y", 1.0, max_steps=1)
    assert op_types(imported) == ["PRELU"] and not float_ops(imported)  # one 8-bit PRELU, slope alpha


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_sigmoid_nnapi_output_parameters(dtype):
    """With NNAPI's own LOGISTIC output parameters (1/256) QLinearSigmoid is one 8-bit LOGISTIC."""
    zp = 0 if np.dtype(dtype) == np.uint8 else -128
    model = single_qop("QLinearSigmoid", [2, 7], [2, 7], dtype, x=(0.06, 0), y=(1 / 256, zp - (128 if zp == 0 else 0)))
    imported = compare(model.SerializeToString(), int_feeds([2, 7], dtype), "y", 1.0, max_steps=1)
    assert op_types(imported) == ["LOGISTIC"]


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("same_params", [True, False])
def test_qlinear_average_pool(channels_last, count_include_pad, same_params):
    """8-bit AVERAGE_POOL_2D; NHWC (channels_last) in and out needs no TRANSPOSE; other output parameters than
    the input's are reached by requantizing the pool's result (NNAPI pools keep the input's)."""
    shape = [1, 6, 6, 3] if channels_last else [1, 3, 6, 6]
    y = (0.05, 10) if same_params else (0.04, -3)
    model = single_qop("QLinearAveragePool", shape, [1, 3, 3, 3], np.uint8, y=y, kernel_shape=[3, 3],
                       strides=[2, 2], pads=[1, 1, 1, 1], channels_last=channels_last,
                       count_include_pad=count_include_pad)
    imported = compare(model.SerializeToString(), int_feeds(shape, np.uint8), "y", 1.0, max_steps=1)
    ops = op_types(imported)
    assert "AVERAGE_POOL_2D" in ops and float_ops(imported) <= {"DEQUANTIZE"}, ops
    assert ops.count("DEQUANTIZE") == (0 if same_params else 1)
    if channels_last:
        assert "TRANSPOSE" not in ops  # NHWC in and out: the Transposes around the pool only relabel layouts


@pytest.mark.parametrize("opset_attr,axis", [(13, -1), (13, 1), (12, 1)])
def test_qlinear_softmax(opset_attr, axis):
    """QLinearSoftmax's `opset` attribute picks the semantics: 13 softmax along one axis, 12 the 2-D coercion."""
    model = single_qop("QLinearSoftmax", [2, 3, 4], [2, 3, 4], np.uint8, x=(0.1, 0), y=(1 / 256, -128), axis=axis,
                       opset=opset_attr, model_opset=opset_attr)
    imported = compare(model.SerializeToString(), int_feeds([2, 3, 4], np.uint8), "y", 1.0, max_steps=1)
    assert "SOFTMAX" in op_types(imported) and not float_ops(imported)


def test_qlinear_concat_requantizes_each_input():
    """QLinearConcat with its own parameters per input (a real-valued concatenation): CONCATENATION rescales."""
    node = helper.make_node("QLinearConcat", ["y_s", "y_z", "a", "a_s", "a_z", "b", "b_s", "b_z", "c", "c_s", "c_z"],
                            ["y"], axis=1, domain="com.microsoft")
    inits = (qparams("y", 0.05, 100, np.uint8) + qparams("a", 0.03, 128, np.uint8) + qparams("b", 0.08, 90, np.uint8)
             + [const("c", np.arange(6, dtype=np.uint8).reshape(2, 3) * 20)] + qparams("c", 0.05, 100, np.uint8))
    model = make_model([node], [tensor("a", [2, 2], TensorProto.UINT8), tensor("b", [2, 4], TensorProto.UINT8)],
                       [tensor("y", [2, 9], TensorProto.UINT8)], inits, extra_opsets=MS)
    rng = np.random.default_rng(1)
    feeds = [{"a": rng.integers(0, 256, (2, 2)).astype(np.uint8), "b": rng.integers(0, 256, (2, 4)).astype(np.uint8)}]
    imported = compare(model.SerializeToString(), feeds, "y", 1.0, max_steps=1)
    assert "CONCATENATION" in op_types(imported) and not float_ops(imported)


def test_qlinear_mul_broadcast_constant():
    node = helper.make_node("QLinearMul", ["x", "x_s", "x_z", "k", "k_s", "k_z", "y_s", "y_z"], ["y"],
                            domain="com.microsoft")
    inits = (qparams("x", 0.05, 128, np.uint8) + [const("k", np.asarray([10, 200, 128], np.uint8))]
             + qparams("k", 0.02, 128, np.uint8) + qparams("y", 0.03, 120, np.uint8))
    model = make_model([node], [tensor("x", [2, 4, 3], TensorProto.UINT8)], [tensor("y", [2, 4, 3], TensorProto.UINT8)],
                       inits, extra_opsets=MS)
    imported = compare(model.SerializeToString(), int_feeds([2, 4, 3], np.uint8), "y", 1.0, max_steps=1)
    assert "MUL" in op_types(imported) and not float_ops(imported)


@pytest.mark.parametrize("trans_b,with_output_scale", [(0, True), (1, True), (1, False)])
def test_qgemm(trans_b, with_output_scale):
    """QGemm with int8 per-tensor weights and an int32 bias; without y_scale its output is float."""
    w = np.random.default_rng(4).integers(-63, 64, (6, 5) if not trans_b else (5, 6)).astype(np.int8)
    inputs = ["x", "x_s", "x_z", "w", "w_s", "w_z", "bias"] + (["y_s", "y_z"] if with_output_scale else [])
    node = helper.make_node("QGemm", inputs, ["y"], transB=trans_b, alpha=1.0, domain="com.microsoft")
    inits = (qparams("x", 0.05, 128, np.uint8) + [const("w", w), const("w_s", np.float32(0.01)),
                                                  const("w_z", np.int8(0)),
                                                  const("bias", np.asarray([100, -50, 0, 20, 7], np.int32))]
             + (qparams("y", 0.1, 130, np.uint8) if with_output_scale else []))
    out = tensor("y", [3, 5], TensorProto.UINT8 if with_output_scale else TensorProto.FLOAT)
    model = make_model([node], [tensor("x", [3, 6], TensorProto.UINT8)], [out], inits, extra_opsets=MS)
    feeds = int_feeds([3, 6], np.uint8)
    if with_output_scale:
        imported = compare(model.SerializeToString(), feeds, "y", 1.0, max_steps=1)
    else:  # float output: exact integer accumulation times the scales
        imported = compare(model.SerializeToString(), feeds, "y", 0.05 * 0.01, max_steps=0.01)
    assert "FULLY_CONNECTED" in op_types(imported)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_com_microsoft_quantize_dequantize(dtype):
    """onnxruntime's contrib QuantizeLinear/DequantizeLinear (its quantizer writes them for some options) are the
    standard operators for 8-bit types: QUANTIZE -> RELU (8-bit) -> DEQUANTIZE."""
    zp = np.asarray(5, dtype)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"], domain="com.microsoft"),
             helper.make_node("Relu", ["xf"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"], domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["y"], domain="com.microsoft")]
    model = make_model(nodes, [tensor("x", [2, 6])], [tensor("y", [2, 6])],
                       [const("s", np.float32(0.05)), const("z", zp)], extra_opsets=MS)
    feeds = [{"x": np.random.default_rng(k).uniform(-3, 3, (2, 6)).astype(np.float32)} for k in range(2)]
    imported = compare(model.SerializeToString(), feeds, "y", 0.05, max_steps=1)
    assert op_types(imported) == ["QUANTIZE", "RELU", "DEQUANTIZE"]


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_conv_channels_last(channels_last):
    """com.microsoft QLinearConv (what onnxruntime's NHWC transformer saves): with channels_last=1 the NHWC
    input and output are NNAPI's own layout, so the model is one CONV_2D."""
    w = np.random.default_rng(6).integers(-63, 64, (4, 3, 3, 3)).astype(np.int8)
    inputs = ["x", "x_s", "x_z", "w", "w_s", "w_z", "y_s", "y_z", "bias"]
    node = helper.make_node("QLinearConv", inputs, ["y"], pads=[1, 1, 1, 1], strides=[2, 2], kernel_shape=[3, 3],
                            channels_last=channels_last, domain="com.microsoft")
    inits = (qparams("x", 0.03, 128, np.uint8)
             + [const("w", w), const("w_s", np.float32(0.01)), const("w_z", np.int8(0))]
             + qparams("y", 0.08, 120, np.uint8) + [const("bias", np.asarray([100, -50, 0, 20], np.int32))])
    shape, out_shape = ([1, 7, 7, 3], [1, 4, 4, 4]) if channels_last else ([1, 3, 7, 7], [1, 4, 4, 4])
    model = make_model([node], [tensor("x", shape, TensorProto.UINT8)], [tensor("y", out_shape, TensorProto.UINT8)],
                       inits, extra_opsets=MS)
    imported = compare(model.SerializeToString(), int_feeds(shape, np.uint8), "y", 1.0, max_steps=1)
    assert op_types(imported) == (["CONV_2D"] if channels_last else ["TRANSPOSE", "CONV_2D", "TRANSPOSE"])
