"""Quantized ONNX (QDQ and QOperator) imported into NNAPI 8-bit operations, against onnxruntime running
the same file: within 3 quantization steps of the output and the same argmax.

onnxruntime requantizes with exact float rounding, NNAPI with a fixed-point multiplier (double
rounding), so single operations agree to within one step in about 1% of the elements; the test
`test_every_qlinear_operation_within_one_step` checks that, layer by layer, on a whole MobileNet v2.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import (assert_quant_close, const, image_batch, make_model, mobilenet_weights,  # noqa: E402
                                 op_types, ort_run, quantize, tensor)

from mlts.models import import_onnx  # noqa: E402
from mlts.models.mobilenet import build_onnx  # noqa: E402
from mlts.runtime import OperandCode  # noqa: E402

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(99)


def rnd(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def small_convnet() -> onnx.ModelProto:
    """Conv+Relu, depthwise+Clip(0,6), residual Add, MaxPool, GlobalAveragePool, Flatten, Gemm, Softmax."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["r2"]),
        helper.make_node("Add", ["r2", "r1"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["mp"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=1),
    ]
    rng = np.random.default_rng(0)
    r = lambda *s, k=0.3: (rng.standard_normal(s) * k).astype(np.float32)  # noqa: E731
    inits = [const("w1", r(8, 3, 3, 3)), const("b1", r(8, k=0.1)), const("w2", r(8, 1, 3, 3)), const("b2", r(8, k=0.1)),
             const("lo", np.float32(0)), const("hi", np.float32(6)), const("wf", r(10, 8, k=1.0)),
             const("bf", r(10, k=0.1))]
    return make_model(nodes, [tensor("x", [1, 3, 16, 16])], [tensor("prob", [1, 10])], inits)


def inputs_16(n=3):
    return [np.random.default_rng(100 + k).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for k in range(n)]


def compare(data: bytes, feeds_list, output: str, step: float, max_steps: float = 3):
    imported = import_onnx(data)
    worst = 0.0
    for feeds in feeds_list:
        got = imported.run(feeds, devices=["nnapi-reference"])[output]
        ref = ort_run(data, feeds)[output]
        worst = max(worst, assert_quant_close(got, ref, step, max_steps=max_steps))
    return imported, worst


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_small_convnet_quantize_static(fmt, per_channel):
    data = quantize(small_convnet(), "x", [1, 3, 16, 16], fmt=fmt, per_channel=per_channel)
    qmodel = onnx.load_from_string(data)
    if fmt == "QOperator":
        assert {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool", "QGemm", "QLinearSoftmax"} <= \
            {n.op_type for n in qmodel.graph.node}
    imported, _ = compare(data, [{"x": x} for x in inputs_16()], "prob", 1 / 255)
    ops = op_types(imported)
    assert ops[0] == "QUANTIZE" and ops[-1] == "DEQUANTIZE"  # float graph input and output
    assert ops.count("TRANSPOSE") == 1
    hal = imported.model.hal_model().main
    types = {op.type.name: [hal.operands[i].type for i in op.inputs] for op in hal.operations}
    conv_filter, dw_filter = types["CONV_2D"][1], types["DEPTHWISE_CONV_2D"][1]
    assert types["CONV_2D"][0].code == OperandCode.TENSOR_QUANT8_ASYMM
    if per_channel:
        assert conv_filter.code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
        assert conv_filter.channel_quant.channel_dim == 0
        assert dw_filter.code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
        assert dw_filter.channel_quant.channel_dim == 3
    else:
        # int8 symmetric weights with uint8 activations: exactly re-expressed as uint8 with zero point 128
        assert conv_filter.code == OperandCode.TENSOR_QUANT8_ASYMM and conv_filter.zero_point == 128
        bias = types["CONV_2D"][2]
        assert bias.code == OperandCode.TENSOR_INT32
        assert np.isclose(bias.scale, np.float32(types["CONV_2D"][0].scale) * np.float32(conv_filter.scale))
    assert not {"CONV_2D", "ADD"} & {op.type.name for op in hal.operations
                                     if hal.operands[op.inputs[0]].type.code == OperandCode.TENSOR_FLOAT32}


def test_int8_activations_become_signed_operations():
    from onnxruntime.quantization import QuantType  # noqa: F401 - presence check
    import logging
    import tempfile
    import warnings

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    model = small_convnet()
    data_in = [{"x": x} for x in inputs_16(4)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(data_in)

        def get_next(self):
            return next(self.it, None)

    logging.disable(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnx.save(model, os.path.join(tmp, "f.onnx"))
            quantize_static(os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx"), Reader(),
                            quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8, reduce_range=True)
            data = open(os.path.join(tmp, "q.onnx"), "rb").read()
    finally:
        logging.disable(logging.NOTSET)
    imported, _ = compare(data, [{"x": x} for x in inputs_16()], "prob", 1 / 255)
    hal = imported.model.hal_model().main
    conv = [op for op in hal.operations if op.type.name == "CONV_2D"][0]
    assert hal.operands[conv.inputs[0]].type.code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED


def qdq_chain(x_name, scale, zp, dtype, prefix):
    """QuantizeLinear + DequantizeLinear nodes and their parameter initializers."""
    q, dq = f"{prefix}_q", f"{prefix}_dq"
    nodes = [helper.make_node("QuantizeLinear", [x_name, f"{prefix}_s", f"{prefix}_z"], [q]),
             helper.make_node("DequantizeLinear", [q, f"{prefix}_s", f"{prefix}_z"], [dq])]
    inits = [const(f"{prefix}_s", np.float32(scale)), const(f"{prefix}_z", np.asarray(zp, dtype))]
    return nodes, inits, dq


def test_uint8_graph_input_and_output_stay_quantized():
    """A uint8 graph input read by DequantizeLinear is a quantized model input (no QUANTIZE); a quantized
    graph output stays quantized (no DEQUANTIZE)."""
    # 7-bit weights: onnxruntime's x86 u8s8 kernel saturates int16 pair sums with full-range int8 weights.
    w = np.clip(np.round(rnd(4, 3, 3, 3) / 0.03), -63, 63).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"]),
             helper.make_node("Conv", ["xf", "wf"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"])]
    inits = [const("xs", np.float32(0.02)), const("xz", np.uint8(128)), const("wq", w), const("ws", np.float32(0.03)),
             const("wz", np.int8(0)), const("ys", np.float32(0.05)), const("yz", np.uint8(100))]
    model = make_model(nodes, [tensor("x", [1, 3, 6, 6], TensorProto.UINT8)],
                       [tensor("y", [1, 4, 6, 6], TensorProto.UINT8)], inits)
    data = model.SerializeToString()
    x = np.random.default_rng(3).integers(0, 256, (1, 3, 6, 6), dtype=np.uint8)
    imported = import_onnx(data)
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]
    t_in = imported.model.operand_type(imported.model.inputs[0])
    assert (t_in.code, t_in.zero_point) == (OperandCode.TENSOR_QUANT8_ASYMM, 128)
    got = imported.run({"x": x})["y"]
    ref = ort_run(data, {"x": x})["y"]
    assert got.dtype == np.uint8
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1


@pytest.mark.parametrize("out_scale,out_zp,quantized", [(1 / 256, 0, True), (1 / 255, 0, False), (0.01, 10, False)])
def test_qdq_softmax_output_quantization(out_scale, out_zp, quantized):
    """NNAPI's quantized SOFTMAX writes scale 1/256, zero point 0: with those parameters the Softmax is an
    8-bit SOFTMAX; with others (onnxruntime writes 1/255) it runs in float between DEQUANTIZE/QUANTIZE."""
    n_in, i_in, x_dq = qdq_chain("x", 0.05, 128, np.uint8, "in")
    nodes = n_in + [helper.make_node("Softmax", [x_dq], ["s"], axis=-1),
                    helper.make_node("QuantizeLinear", ["s", "os", "oz"], ["sq"]),
                    helper.make_node("DequantizeLinear", ["sq", "os", "oz"], ["y"])]
    inits = i_in + [const("os", np.float32(out_scale)), const("oz", np.uint8(out_zp))]
    model = make_model(nodes, [tensor("x", [2, 7])], [tensor("y", [2, 7])], inits)
    imported, _ = compare(model.SerializeToString(), [{"x": rnd(2, 7, scale=2)}], "y", out_scale, max_steps=1)
    ops = op_types(imported)
    assert ops == (["QUANTIZE", "SOFTMAX", "DEQUANTIZE"] if quantized else
                   ["QUANTIZE", "DEQUANTIZE", "SOFTMAX", "QUANTIZE", "DEQUANTIZE"])
    softmax = [op for op in imported.model.hal_model().main.operations if op.type.name == "SOFTMAX"][0]
    code = imported.model.hal_model().main.operands[softmax.inputs[0]].type.code
    assert code == (OperandCode.TENSOR_QUANT8_ASYMM if quantized else OperandCode.TENSOR_FLOAT32)


def test_qdq_operation_without_quantized_nnapi_form_runs_in_float():
    """Div has no quantized NNAPI form: DQ -> Div -> Q stays float between DEQUANTIZE and QUANTIZE."""
    n_a, i_a, a = qdq_chain("x", 0.05, 128, np.uint8, "a")
    n_b, i_b, b = qdq_chain("d", 0.02, 0, np.uint8, "b")
    nodes = n_a + n_b + [helper.make_node("Div", [a, b], ["q"]),
                         helper.make_node("QuantizeLinear", ["q", "os", "oz"], ["qq"]),
                         helper.make_node("DequantizeLinear", ["qq", "os", "oz"], ["y"])]
    model = make_model(nodes, [tensor("x", [3, 4]), tensor("d", [3, 4])], [tensor("y", [3, 4])],
                       i_a + i_b + [const("os", np.float32(0.1)), const("oz", np.uint8(128))])
    feeds = {"x": rnd(3, 4), "d": np.abs(rnd(3, 4)) + 1.0}
    imported, _ = compare(model.SerializeToString(), [feeds], "y", 0.1, max_steps=1)
    ops = op_types(imported)
    assert sorted(ops) == sorted(["QUANTIZE", "QUANTIZE", "DEQUANTIZE", "DEQUANTIZE", "DIV", "QUANTIZE", "DEQUANTIZE"])
    div = [op for op in imported.model.hal_model().main.operations if op.type.name == "DIV"][0]
    assert imported.model.hal_model().main.operands[div.inputs[0]].type.code == OperandCode.TENSOR_FLOAT32


def test_qoperator_matmul_sigmoid_concat():
    """quantize_static (QOperator) of MatMul+Add, Sigmoid and Concat: QLinearMatMul, QLinearAdd,
    QLinearSigmoid, QLinearConcat."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("MatMul", ["x", "w2"], ["m2"]),
             helper.make_node("Concat", ["s", "m2"], ["c"], axis=1),
             helper.make_node("MatMul", ["c", "w3"], ["y"])]
    model = make_model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 5])],
                       [const("w", rnd(8, 6, scale=0.5)), const("b", rnd(6, scale=0.2)), const("w2", rnd(8, 3, scale=0.5)),
                        const("w3", rnd(9, 5, scale=0.5))])
    data = quantize(model, "x", [4, 8], fmt="QOperator", per_channel=False)
    qops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert {"QLinearMatMul", "QLinearSigmoid", "QLinearConcat"} <= qops
    feeds = [{"x": np.random.default_rng(k).uniform(-1, 1, (4, 8)).astype(np.float32)} for k in range(3)]
    ref_scale = float(onnx.numpy_helper.to_array([t for t in onnx.load_from_string(data).graph.initializer
                                                  if t.name == "y_scale"][0]))
    imported, _ = compare(data, feeds, "y", ref_scale, max_steps=3)
    ops = op_types(imported)
    assert "LOGISTIC" in ops and "CONCATENATION" in ops and ops.count("FULLY_CONNECTED") == 3


# -- whole MobileNets ---------------------------------------------------------------------------------------
MOBILENETS = [("v1", 0.25), ("v2", 0.35)]


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("family,alpha", MOBILENETS)
def test_quantized_mobilenet(family, alpha, fmt, per_channel):
    model = build_onnx(family, alpha, 64, mobilenet_weights(family, alpha, seed=0))
    data = quantize(model, "input", [1, 3, 64, 64], fmt=fmt, per_channel=per_channel)
    imported, worst = compare(data, [{"input": image_batch(20 + k, 64)} for k in range(3)], "probabilities", 1 / 255)
    ops = op_types(imported)
    assert ops.count("TRANSPOSE") == 1
    assert ops.count("QUANTIZE") <= 3 and ops.count("DEQUANTIZE") <= 3  # input, GAP/softmax requantization, output
    float_ops = [op.type.name for op in imported.model.hal_model().main.operations
                 if imported.model.hal_model().main.operands[op.outputs[0]].type.code == OperandCode.TENSOR_FLOAT32]
    # Every computation is 8-bit, except the QDQ Softmax, whose 1/255 output runs it in float.
    assert set(float_ops) <= ({"DEQUANTIZE"} if fmt == "QOperator" else {"DEQUANTIZE", "SOFTMAX"})


@pytest.mark.slow
def test_every_qlinear_operation_within_one_step():
    """Each QLinear operation of a quantized MobileNet v2, imported alone and fed onnxruntime's own input
    tensors, matches onnxruntime's output within one quantization step."""
    model = build_onnx("v2", 0.35, 64, mobilenet_weights("v2", 0.35, seed=1))
    qmodel = onnx.load_from_string(quantize(model, "input", [1, 3, 64, 64], fmt="QOperator", per_channel=True))
    names = [n.output[0] for n in qmodel.graph.node]
    probe = onnx.ModelProto()
    probe.CopyFrom(qmodel)
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_tensor_value_info(nm, TensorProto.UINT8, None) for nm in names[:-1])
    x = image_batch(5, 64)
    values = ort_run(probe, {"input": x})
    checked = 0
    for node in qmodel.graph.node:
        if not node.op_type.startswith("QLinear") and node.op_type != "QGemm":
            continue
        data_inputs = [i for i in node.input if i in values]
        single = make_model([node], [tensor(i, list(values[i].shape), TensorProto.UINT8) for i in data_inputs],
                            [tensor(node.output[0], list(values[node.output[0]].shape), TensorProto.UINT8)],
                            list(qmodel.graph.initializer), extra_opsets=[("com.microsoft", 1)])
        feeds = {i: values[i] for i in data_inputs}
        got = import_onnx(single.SerializeToString()).run(feeds)[node.output[0]]
        diff = np.abs(got.astype(int) - values[node.output[0]].astype(int)).max()
        assert diff <= 1, f"{node.name} ({node.op_type}) differs by {diff} steps"
        checked += 1
    assert checked >= 50


@pytest.mark.parametrize("scheme", ["uint8", "int8"])
@pytest.mark.parametrize("family,alpha", MOBILENETS)
def test_project_quantizer_models_are_fully_quantized(family, alpha, scheme):
    """The zoo's quantized models (mlts.models.quantizer: DQ -> Conv -> Clip -> Q units, 8-bit graph input and
    output) import as pure 8-bit NNAPI graphs: no QUANTIZE/DEQUANTIZE, one input TRANSPOSE."""
    quantizer = pytest.importorskip("mlts.models.quantizer")
    model = build_onnx(family, alpha, 64, mobilenet_weights(family, alpha, seed=0))
    calibration = np.random.default_rng(0).uniform(-1, 1, (8, 3, 64, 64)).astype(np.float32)
    qmodel = quantizer.quantize_model(model, calibration, scheme=scheme, reduce_range=True)
    data = qmodel.SerializeToString()
    imported = import_onnx(data)
    ops = op_types(imported)
    assert not {"QUANTIZE", "DEQUANTIZE"} & set(ops) and ops.count("TRANSPOSE") == 1
    signed = scheme == "int8"
    code = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED if signed else OperandCode.TENSOR_QUANT8_ASYMM
    assert imported.model.operand_type(imported.model.inputs[0]).code == code
    dtype = np.int8 if signed else np.uint8
    for seed in range(2):
        x = np.random.default_rng(seed).integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (1, 3, 64, 64))
        x = x.astype(dtype)
        got = imported.run({"input": x})["probabilities"]
        ref = ort_run(data, {"input": x})["probabilities"]
        assert got.dtype == dtype
        assert_quant_close(got.astype(np.float64), ref.astype(np.float64), 1.0)


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_quantized_flatten_of_feature_map(fmt):
    """Flatten of an NHWC-held feature map into a per-channel quantized Gemm: weight rows permuted at
    import (no TRANSPOSE back to NCHW), the Gemm as an exact per-channel 1x1 CONV_2D."""
    from test_onnx_import_ops import feature_map_classifier

    data = quantize(feature_map_classifier("gemm_transB"), "x", [1, 3, 8, 8], fmt=fmt, per_channel=True)
    scale = float(onnx.numpy_helper.to_array([t for t in onnx.load_from_string(data).graph.initializer
                                              if t.name == "y_scale"][0]))
    imported, _ = compare(data, [{"x": rnd(1, 3, 8, 8)} for _ in range(3)], "y", scale, max_steps=1)
    ops = op_types(imported)
    assert ops.count("TRANSPOSE") == 1 and ops.count("CONV_2D") == 2 and "FULLY_CONNECTED" not in ops
