"""Float graphs, one pattern each, imported and run on nnapi-reference against onnxruntime (CTS tolerance)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import check_against_ort, const, make_model, op_types, ort_run, tensor  # noqa: E402

from mlts.models import import_onnx  # noqa: E402
from mlts.runtime import MltsError, ResultCode  # noqa: E402

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(1234)


def rnd(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_model(x_shape, w_shape, *, bias=True, act=None, opset=13, **attrs):
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"], **attrs)]
    inits = [const("w", rnd(*w_shape, scale=0.3))] + ([const("b", rnd(w_shape[0], scale=0.1))] if bias else [])
    out = "c"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        out = "y"
    elif act == "relu6":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
        inits += [const("lo", np.float32(0)), const("hi", np.float32(6))]
        out = "y"
    elif act == "relu1_attr":  # Clip with attributes (opset < 11)
        nodes.append(helper.make_node("Clip", ["c"], ["y"], min=-1.0, max=1.0))
        out = "y"
    model = make_model(nodes, [tensor("x", x_shape)], [tensor(out, None)], inits, opset=opset)
    return model, {"x": rnd(*x_shape)}


CONV_CASES = {
    "plain": (dict(x_shape=[1, 3, 9, 9], w_shape=[4, 3, 3, 3], pads=[1, 1, 1, 1]), ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]),
    "stride_asym_pads": (dict(x_shape=[1, 2, 10, 11], w_shape=[5, 2, 3, 2], pads=[0, 1, 2, 0], strides=[2, 3]), None),
    "dilation": (dict(x_shape=[1, 3, 12, 12], w_shape=[4, 3, 3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]), None),
    "same_upper": (dict(x_shape=[1, 3, 10, 10], w_shape=[4, 3, 4, 4], auto_pad="SAME_UPPER", strides=[2, 2]), None),
    "same_lower": (dict(x_shape=[1, 3, 10, 10], w_shape=[4, 3, 4, 4], auto_pad="SAME_LOWER"), None),
    "valid_no_bias": (dict(x_shape=[1, 3, 8, 8], w_shape=[4, 3, 3, 3], bias=False, auto_pad="VALID"), None),
    "depthwise": (dict(x_shape=[1, 6, 8, 8], w_shape=[6, 1, 3, 3], group=6, pads=[1, 1, 1, 1]),
                  ["TRANSPOSE", "DEPTHWISE_CONV_2D", "TRANSPOSE"]),
    "depth_multiplier": (dict(x_shape=[1, 3, 8, 8], w_shape=[6, 1, 3, 3], group=3, strides=[2, 2]),
                         ["TRANSPOSE", "DEPTHWISE_CONV_2D", "TRANSPOSE"]),
    "grouped": (dict(x_shape=[1, 4, 7, 7], w_shape=[6, 2, 3, 3], group=2, pads=[1, 1, 1, 1]),
                ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]),
    "fused_relu": (dict(x_shape=[1, 3, 6, 6], w_shape=[4, 3, 3, 3], act="relu"), ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]),
    "fused_relu6": (dict(x_shape=[1, 3, 6, 6], w_shape=[4, 3, 1, 1], act="relu6"),
                    ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]),
    "fused_relu1_clip_attributes": (dict(x_shape=[1, 3, 6, 6], w_shape=[4, 3, 3, 3], act="relu1_attr", opset=10),
                                    ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv(case):
    kwargs, expected_ops = CONV_CASES[case]
    model, feeds = conv_model(**kwargs)
    imported, _, _ = check_against_ort(model, feeds)
    if expected_ops is not None:
        assert op_types(imported) == expected_ops


def test_conv_fused_activation_codes():
    """Relu / Clip(0, 6) / Clip(-1, 1) become CONV_2D's fused activation input (RELU=1, RELU6=3, RELU1=2)."""
    from mlts.models import import_onnx

    for act, code in (("relu", 1), ("relu6", 3), ("relu1_attr", 2)):
        model, _ = conv_model([1, 3, 5, 5], [2, 3, 3, 3], act=act, opset=10 if act == "relu1_attr" else 13)
        ops = import_onnx(model.SerializeToString()).describe_dict()["operations"]
        (conv,) = [op for op in ops if op["type"] == "CONV_2D"]
        assert conv["inputs"][9].endswith(f"INT32 ={code}")  # explicit padding form: input 9 is the activation


def test_batchnorm_folded_into_conv_and_standalone():
    x = rnd(1, 3, 6, 6)
    bn = lambda src, dst, p: helper.make_node("BatchNormalization", [src, f"{p}s", f"{p}b", f"{p}m", f"{p}v"], [dst],
                                              epsilon=1e-3)
    params = lambda p, c: [const(f"{p}s", rnd(c, scale=0.5) + 1), const(f"{p}b", rnd(c, scale=0.1)),
                           const(f"{p}m", rnd(c, scale=0.1)), const(f"{p}v", np.abs(rnd(c)) + 0.5)]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), bn("c", "n", "a"),
             helper.make_node("Relu", ["n"], ["r"]), bn("r", "y", "z")]
    model = make_model(nodes, [tensor("x", [1, 3, 6, 6])], [tensor("y", None)],
                       [const("w", rnd(4, 3, 3, 3, scale=0.3))] + params("a", 4) + params("z", 4))
    imported, _, _ = check_against_ort(model, {"x": x})
    # BN 1 is folded into the convolution (+ fused RELU); BN 2 follows the Relu: a MUL and an ADD.
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "MUL", "ADD", "TRANSPOSE"]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_broadcasting_with_fused_relu(op):
    other = np.abs(rnd(4, 1, 1)) + 0.5
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node(op, ["c", "k"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"]), helper.make_node(op, ["y", "x2"], ["z"])]
    model = make_model(nodes, [tensor("x", [1, 3, 5, 5]), tensor("x2", [5])], [tensor("z", None)],
                       [const("w", rnd(4, 3, 1, 1)), const("k", other)])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 5, 5), "x2": np.abs(rnd(5)) + 0.5})
    ops = op_types(imported)
    assert "RELU" not in ops  # fused into the first binary operation
    code = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV"}[op]
    assert ops.count(code) == 2


def test_two_computed_inputs_same_layout():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Conv", ["x", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model = make_model(nodes, [tensor("x", [1, 3, 5, 5])], [tensor("y", None)],
                       [const("w1", rnd(4, 3, 1, 1)), const("w2", rnd(4, 3, 3, 3, scale=0.3))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 5, 5)})
    assert op_types(imported).count("TRANSPOSE") == 2  # input and output only


POOL_CASES = {
    "max": ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max_ceil": ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "max_same": ("MaxPool", dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER")),
    "avg_exclude_pad": ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "avg_include_pad": ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 0, 1, 2], count_include_pad=1)),
    "avg_ceil": ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    "global_avg": ("GlobalAveragePool", {}),
    "global_max": ("GlobalMaxPool", {}),
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pooling(case):
    op, attrs = POOL_CASES[case]
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [tensor("x", [1, 3, 7, 7])], [tensor("y", None)])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 7, 7)})
    if case == "avg_include_pad":
        assert "PAD" in op_types(imported)


def test_global_average_pool_dynamic_spatial_uses_mean():
    model = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [tensor("x", [1, 3, "h", "w"])],
                       [tensor("y", None)])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 5, 6)})
    assert "MEAN" in op_types(imported)


def test_flatten_reshape_squeeze_unsqueeze_transpose():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),  # [2,4,1,5], NHWC inside
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),  # [2,1,5,4]
             helper.make_node("Squeeze", ["t", "ax1"], ["s"]),  # [2,5,4]
             helper.make_node("Unsqueeze", ["s", "ax0"], ["u"]),  # [1,2,5,4]
             helper.make_node("Flatten", ["u"], ["f"], axis=2),  # [2,20]
             helper.make_node("Reshape", ["f", "shape"], ["y"])]  # [2,5,4]
    inits = [const("w", rnd(4, 3, 1, 1)), const("ax0", np.array([0], np.int64)), const("ax1", np.array([1], np.int64)),
             const("shape", np.array([0, -1, 4], np.int64))]
    model = make_model(nodes, [tensor("x", [2, 3, 1, 5])], [tensor("y", None)], inits)
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 3, 1, 5)})
    assert op_types(imported).count("TRANSPOSE") <= 2


def test_squeeze_unsqueeze_attribute_forms():
    nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]), helper.make_node("Squeeze", ["u"], ["y"], axes=[0])]
    model = make_model(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)], opset=11)
    check_against_ort(model, {"x": rnd(2, 3, 4)})


def test_global_pool_flatten_has_no_transpose_back():
    """[N,C,1,1] in NHWC is [N,C] in memory: Flatten is a RESHAPE, not a TRANSPOSE."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    model = make_model(nodes, [tensor("x", [1, 3, 6, 6])], [tensor("y", None)], [const("w", rnd(8, 3, 1, 1))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 6, 6)})
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "AVERAGE_POOL_2D", "RESHAPE"]


GEMM_CASES = {
    "vector_bias": dict(transB=1),
    "alpha_beta": dict(alpha=0.5, beta=2.0),
    "transA": dict(transA=1),
    "matrix_bias": dict(transB=1, c_shape=[3, 5]),
    "scalar_bias": dict(c_shape=[]),
    "no_bias": dict(c_shape=None),
}


@pytest.mark.parametrize("case", sorted(GEMM_CASES))
def test_gemm(case):
    attrs = dict(GEMM_CASES[case])
    c_shape = attrs.pop("c_shape", [5])
    a_shape = [4, 3] if attrs.get("transA") else [3, 4]
    b_shape = [5, 4] if attrs.get("transB") else [4, 5]
    inputs = ["a", "b"] + (["c"] if c_shape is not None else [])
    inits = [const("b", rnd(*b_shape))] + ([const("c", rnd(*c_shape))] if c_shape is not None else [])
    model = make_model([helper.make_node("Gemm", inputs, ["y"], **attrs)], [tensor("a", a_shape)],
                       [tensor("y", None)], inits)
    imported, _, _ = check_against_ort(model, {"a": rnd(*a_shape)})
    assert "FULLY_CONNECTED" in op_types(imported)


def test_gemm_constant_a():
    model = make_model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=2.0)],
                       [tensor("b", [5, 4])], [tensor("y", None)], [const("a", rnd(3, 4)), const("c", rnd(5))])
    check_against_ort(model, {"b": rnd(5, 4)})


@pytest.mark.parametrize("a_shape", [[3, 4], [2, 3, 4], [4]])
def test_matmul_add_becomes_fully_connected(a_shape):
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "bias"], ["y"])]
    model = make_model(nodes, [tensor("a", a_shape)], [tensor("y", None)],
                       [const("w", rnd(4, 6)), const("bias", rnd(6))])
    imported, _, _ = check_against_ort(model, {"a": rnd(*a_shape)})
    ops = op_types(imported)
    assert "FULLY_CONNECTED" in ops and "ADD" not in ops


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 3), (11, None), (13, 1), (13, None), (13, -2)])
def test_softmax_axis_semantics(opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Softmax", ["c"], ["y"], **attrs)]
    model = make_model(nodes, [tensor("x", [1, 3, 2, 3])], [tensor("y", None)], [const("w", rnd(4, 3, 1, 1))],
                       opset=opset)
    check_against_ort(model, {"x": rnd(1, 3, 2, 3)}, softmax_outputs=["y"])


def test_concat_channels_in_nhwc_layout():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]), helper.make_node("Conv", ["x", "w2"], ["b"]),
             helper.make_node("Concat", ["a", "k", "b"], ["c"], axis=1),
             helper.make_node("Conv", ["c", "w3"], ["y"])]
    inits = [const("w1", rnd(2, 3, 1, 1)), const("w2", rnd(3, 3, 1, 1)), const("k", rnd(1, 2, 4, 4)),
             const("w3", rnd(2, 7, 1, 1))]
    model = make_model(nodes, [tensor("x", [1, 3, 4, 4])], [tensor("y", None)], inits)
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 4, 4)})
    assert op_types(imported).count("TRANSPOSE") == 2


@pytest.mark.parametrize("value,opset", [(0.0, 13), (1.5, 13), (-2.0, 10)])
def test_pad_constant(value, opset):
    if opset >= 11:
        node = helper.make_node("Pad", ["x", "pads", "v"], ["p"])
        inits = [const("pads", np.array([0, 0, 1, 2, 0, 0, 2, 0], np.int64)), const("v", np.float32(value))]
    else:
        node = helper.make_node("Pad", ["x"], ["p"], pads=[0, 0, 1, 2, 0, 0, 2, 0], value=value)
        inits = []
    nodes = [helper.make_node("Conv", ["x0", "w"], ["x"]), node, helper.make_node("Conv", ["p", "w2"], ["y"])]
    model = make_model(nodes, [tensor("x0", [1, 3, 4, 4])], [tensor("y", None)],
                       inits + [const("w", rnd(3, 3, 1, 1)), const("w2", rnd(2, 3, 1, 1))], opset=opset)
    imported, _, _ = check_against_ort(model, {"x0": rnd(1, 3, 4, 4)})
    assert ("PAD_V2" if value else "PAD") in op_types(imported)


@pytest.mark.parametrize("fed", ["direct", "nhwc"])
@pytest.mark.parametrize("mode,pads,expected", [
    ("reflect", [0, 0, 1, 2, 0, 0, 2, 0], ["MIRROR_PAD"]),
    ("edge", [0, 1, 1, 2, 0, 0, 2, 3], ["GATHER"] * 3),
    ("wrap", [0, 0, 3, 0, 0, 0, 1, 4], ["GATHER"] * 2),
])
def test_pad_mirror_modes(mode, pads, expected, fed):
    """reflect -> MIRROR_PAD REFLECT; edge and wrap (no NNAPI mode) -> one GATHER per padded axis, in the layout
    the input is held in (a Conv's NHWC result, or the NCHW graph input as it is)."""
    nodes = [helper.make_node("Pad", ["a", "pads"], ["y"], mode=mode)]
    inits = [const("pads", np.array(pads, np.int64))]
    if fed == "nhwc":
        nodes.insert(0, helper.make_node("Conv", ["x", "w"], ["a"]))
        inits.append(const("w", rnd(3, 3, 1, 1)))
    else:
        nodes[0].input[0] = "x"
    model = make_model(nodes, [tensor("x", [1, 3, 4, 5])], [tensor("y", None)], inits, opset=19)
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 4, 5)})
    ops = op_types(imported)
    assert ops == (["TRANSPOSE", "CONV_2D", *expected, "TRANSPOSE"] if fed == "nhwc" else expected)


def test_pad_mirror_modes_variants():
    """Opset 7 attributes; opset 18 axes (negative); int32 data; reflect wider than the tensor (numpy's repeated
    reflection, as onnx.reference; onnxruntime refuses it) gathers; zero pads are the input itself."""
    model = make_model([helper.make_node("Pad", ["x"], ["y"], mode="edge", pads=[0, 2, 0, 1])],
                       [tensor("x", [2, 3])], [tensor("y", None)], opset=7)
    check_against_ort(model, {"x": rnd(2, 3)})
    model = make_model([helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], mode="reflect")],
                       [tensor("x", [2, 3, 4], TensorProto.INT32)], [tensor("y", None, TensorProto.INT32)],
                       [const("pads", np.array([1, 2, 2, 0], np.int64)), const("axes", np.array([-1, 1], np.int64))],
                       opset=18)
    check_against_ort(model, {"x": RNG.integers(-9, 9, (2, 3, 4)).astype(np.int32)})
    model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")], [tensor("x", [2, 3])],
                       [tensor("y", None)], [const("pads", np.array([0, 5, 0, 4], np.int64))])
    x = rnd(2, 3)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["GATHER"]
    np.testing.assert_array_equal(imported.run({"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0])
    model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")], [tensor("x", [2, 3])],
                       [tensor("y", None)], [const("pads", np.zeros(4, np.int64))], opset=19)
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 3)})
    assert op_types(imported) == ["CAST"]  # the output copy of an input (NNAPI: outputs are never inputs)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_pad_mirror_modes_quantized(dtype):
    """8-bit edge / reflect padding moves stored values; other output parameters are requantized after."""
    zp = 128 if dtype == np.uint8 else 0
    elem = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("Pad", ["xf", "pads"], ["p1"], mode="edge"),
             helper.make_node("QuantizeLinear", ["p1", "s", "z"], ["p1q"]),
             helper.make_node("DequantizeLinear", ["p1q", "s", "z"], ["p1f"]),
             helper.make_node("Pad", ["p1f", "pads"], ["p2"], mode="reflect"),
             helper.make_node("QuantizeLinear", ["p2", "s2", "z"], ["y"])]
    inits = [const("s", np.float32(0.03)), const("s2", np.float32(0.05)), const("z", np.asarray(zp, dtype)),
             const("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))]
    model = make_model(nodes, [tensor("x", [1, 2, 4, 5])], [tensor("y", None, elem)], inits)
    x = rnd(1, 2, 4, 5, scale=1.5)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["QUANTIZE", "GATHER", "GATHER", "MIRROR_PAD", "DEQUANTIZE", "QUANTIZE"]
    got = imported.run({"x": x})["y"].astype(np.int32)
    assert np.abs(got - ort_run(model, {"x": x})["y"].astype(np.int32)).max() <= 1


def test_pad_mirror_mode_errors():
    model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], name="bad_pad", mode="edge")],
                       [tensor("x", [2, "n"])], [tensor("y", None)], [const("pads", np.array([0, 1, 0, 1], np.int64))])
    with pytest.raises(MltsError) as info:
        import_onnx(model.SerializeToString())
    assert info.value.code == ResultCode.BAD_DATA
    assert "bad_pad" in info.value.message and "static" in info.value.message


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean(keepdims):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("ReduceMean", ["c"], ["y"], axes=[2, 3], keepdims=keepdims)]
    model = make_model(nodes, [tensor("x", [1, 3, 4, 5])], [tensor("y", None)], [const("w", rnd(6, 3, 1, 1))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 4, 5)})
    # keepdims: [1,6,1,1] held as NHWC [1,1,1,6] is the same bytes: a RESHAPE, not a TRANSPOSE.
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "MEAN"] + (["RESHAPE"] if keepdims else [])


def test_reduce_mean_axes_input_opset18():
    model = make_model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)], [tensor("x", [2, 3, 4])],
                       [tensor("y", None)], [const("axes", np.array([-1], np.int64))], opset=18)
    check_against_ort(model, {"x": rnd(2, 3, 4)})


def test_unary_activations_and_identity_dropout():
    nodes = [helper.make_node("Sigmoid", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["b"]),
             helper.make_node("Dropout", ["b"], ["c"]), helper.make_node("Tanh", ["c"], ["d"]),
             helper.make_node("Relu", ["d"], ["e"]), helper.make_node("Clip", ["e", "", "m"], ["y"])]
    model = make_model(nodes, [tensor("x", [2, 5])], [tensor("y", None)], [const("m", np.float32(0.5))])
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 5)})
    ops = op_types(imported)
    assert ops[:3] == ["LOGISTIC", "TANH", "RELU"]


@pytest.mark.parametrize("lo,hi", [(-1.0, 1.0), (0.0, 6.0), (-2.0, 3.0), (0.5, None), (None, -0.5)])
def test_standalone_clip(lo, hi):
    inputs = ["x", "lo" if lo is not None else "", "hi" if hi is not None else ""]
    inits = ([const("lo", np.float32(lo))] if lo is not None else []) + (
        [const("hi", np.float32(hi))] if hi is not None else [])
    model = make_model([helper.make_node("Clip", inputs, ["y"])], [tensor("x", [3, 4])], [tensor("y", None)], inits)
    imported, _, _ = check_against_ort(model, {"x": rnd(3, 4, scale=3)})
    if (lo, hi) == (-1.0, 1.0):
        assert op_types(imported) == ["RELU1"]
    if (lo, hi) == (0.0, 6.0):
        assert op_types(imported) == ["RELU6"]


def test_shape_arithmetic_is_folded():
    """torch-style `x.view(x.size(0), -1)`: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, all folded."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Shape", ["c"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Cast", ["shape"], ["shape64"], to=TensorProto.INT64),
             helper.make_node("Constant", [], ["scale"], value=helper.make_tensor("v", TensorProto.FLOAT, [], [2.0])),
             helper.make_node("Reshape", ["c", "shape64"], ["r"]),
             helper.make_node("Mul", ["r", "scale"], ["y"])]
    inits = [const("w", rnd(4, 3, 1, 1)), const("zero", np.array(0, np.int64)), const("ax0", np.array([0], np.int64)),
             const("minus1", np.array([-1], np.int64))]
    model = make_model(nodes, [tensor("x", [2, 3, 2, 2])], [tensor("y", None)], inits)
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 3, 2, 2)})
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "TRANSPOSE", "RESHAPE", "MUL"]


def test_dynamic_batch():
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    inits = [const("w", rnd(4, 3, 3, 3)), const("b", rnd(4)), const("fw", rnd(5, 4)), const("fb", rnd(5))]
    model = make_model(nodes, [tensor("x", ["N", 3, 6, 6])], [tensor("y", ["N", 5])], inits)
    from mlts.models import import_onnx
    imported = import_onnx(model.SerializeToString())
    assert imported.model.operand_type(imported.model.inputs[0]).dimensions == (0, 3, 6, 6)
    for batch in (1, 3):
        check_against_ort(model, {"x": rnd(batch, 3, 6, 6)})


def test_comparisons_and_logical():
    nodes = [helper.make_node("Greater", ["a", "b"], ["g"]), helper.make_node("LessOrEqual", ["a", "k"], ["l"]),
             helper.make_node("And", ["g", "l"], ["x"]), helper.make_node("Not", ["x"], ["y"])]
    model = make_model(nodes, [tensor("a", [2, 3]), tensor("b", [3])], [tensor("y", None, TensorProto.BOOL)],
                       [const("k", np.float32(0.3))])
    check_against_ort(model, {"a": rnd(2, 3), "b": rnd(3)})


def test_graph_output_that_is_an_input_or_repeated():
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Identity", ["r"], ["r2"])]
    model = make_model(nodes, [tensor("x", [2, 2])], [tensor("y", None), tensor("r", None), tensor("r2", None)])
    check_against_ort(model, {"x": rnd(2, 2)})


def feature_map_classifier(head: str):
    """Conv -> Relu -> MaxPool -> Flatten of a 4x4x4 map -> Gemm (transB 0/1) or MatMul."""
    wf = rnd(10, 64, scale=0.3)
    tail = {"gemm_transB": helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
            "gemm": helper.make_node("Gemm", ["f", "wfT", "bf"], ["y"]),
            "matmul": helper.make_node("MatMul", ["f", "wfT"], ["y"])}[head]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]), tail]
    inits = [const("w", rnd(4, 3, 3, 3, scale=0.3)), const("b", rnd(4, scale=0.1)), const("wf", wf),
             const("wfT", np.ascontiguousarray(wf.T)), const("bf", rnd(10, scale=0.1))]
    return make_model(nodes, [tensor("x", [1, 3, 8, 8])], [tensor("y", [1, 10])], inits)


@pytest.mark.parametrize("head", ["gemm_transB", "gemm", "matmul"])
def test_flatten_of_feature_map_permutes_fc_weights(head):
    """Flattening an NHWC-held [1,4,4,4] map: the classifier's weight rows are permuted at import instead
    of transposing the map back to NCHW."""
    imported, _, _ = check_against_ort(feature_map_classifier(head), {"x": rnd(1, 3, 8, 8)})
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "MAX_POOL_2D", "RESHAPE", "FULLY_CONNECTED"]
