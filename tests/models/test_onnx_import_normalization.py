"""LayerNormalization, InstanceNormalization and LRN imported into NNAPI operations (decomposed where NNAPI
has no single one), against onnxruntime (CTS float tolerance; 8-bit: within quantization steps), and against
the LRN definition computed in float64 where onnxruntime has no kernel (even sizes, 3-D inputs)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import (assert_float_close, assert_quant_close, check_against_ort, const,  # noqa: E402
                                 make_model, op_types, ort_run, tensor)

from mlts.models import import_onnx  # noqa: E402
from mlts.runtime import MltsError, ResultCode  # noqa: E402

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(2468)
DECOMPOSED = ["MEAN", "SUB", "MUL", "MEAN", "ADD", "RSQRT", "MUL"]


def rnd(*shape, scale=1.0, offset=0.0):
    return (RNG.standard_normal(shape) * scale + offset).astype(np.float32)


def assert_import_error(model, *fragments):
    with pytest.raises(MltsError) as info:
        import_onnx(model.SerializeToString())
    assert info.value.code == ResultCode.BAD_DATA
    assert "node 'n'" in info.value.message, info.value.message
    for fragment in fragments:
        assert fragment in info.value.message, info.value.message


def conv_fed(nodes, x_shape, inits, opset, outputs=("y",)):
    """x -> 1x1 Conv (result held NHWC) -> `nodes` (reading "c")."""
    c = x_shape[1]
    return make_model([helper.make_node("Conv", ["x", "cw", "cb"], ["c"])] + nodes, [tensor("x", x_shape)],
                      [tensor(o, None) for o in outputs],
                      [const("cw", rnd(c, c, 1, 1, scale=0.5)), const("cb", rnd(c, scale=0.1))] + inits, opset=opset)


# -- LayerNormalization --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis", [((2, 5, 16), -1), ((2, 5, 16), 1), ((2, 5, 16), -3), ((3, 8), -1),
                                        ((2, 3, 4, 5), -2), ((2, 3, 4, 5), 1), ((7,), 0)])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_layer_norm(shape, axis, bias):
    norm = shape[axis:]
    inputs = ["x", "s", "b"] if bias else ["x", "s"]
    inits = [const("s", rnd(*norm)), const("b", rnd(*norm))][:len(inputs) - 1]
    model = make_model([helper.make_node("LayerNormalization", inputs, ["y"], name="n", axis=axis, epsilon=1e-3)],
                       [tensor("x", list(shape))], [tensor("y", None)], inits, opset=17)
    imported, _, _ = check_against_ort(model, {"x": rnd(*shape, scale=2.0, offset=0.5)})
    assert op_types(imported) == DECOMPOSED + ["MUL"] + (["ADD"] if bias else [])


def test_layer_norm_identity_scale_and_zero_bias_need_no_operations():
    model = make_model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="n")],
                       [tensor("x", [2, 4, 6])], [tensor("y", None)],
                       [const("s", np.ones(6, np.float32)), const("b", np.zeros(6, np.float32))], opset=17)
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 4, 6)})
    assert op_types(imported) == DECOMPOSED


def test_layer_norm_broadcast_and_computed_scale():
    """Scale of shape [1, 6] broadcast over the normalized [4, 6]; bias a graph input."""
    model = make_model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="n", axis=1)],
                       [tensor("x", [2, 4, 6]), tensor("b", [4, 6])], [tensor("y", None)],
                       [const("s", rnd(1, 6))], opset=17)
    check_against_ort(model, {"x": rnd(2, 4, 6), "b": rnd(4, 6)})


def test_layer_norm_mean_and_inv_std_dev_outputs():
    model = make_model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], name="n",
                                         axis=-2)],
                       [tensor("x", [2, 3, 4, 5])], [tensor("y", None), tensor("mean", None), tensor("inv", None)],
                       [const("s", rnd(4, 5)), const("b", rnd(4, 5))], opset=17)
    _, got, ref = check_against_ort(model, {"x": rnd(2, 3, 4, 5, scale=3.0)})
    assert got["mean"].shape == ref["mean"].shape == (2, 3, 1, 1)


def test_layer_norm_on_nhwc_operand_normalizes_in_place():
    """Fed by a Conv (held NHWC): axis 1 of the NCHW tensor covers every non-batch NNAPI axis, no TRANSPOSE."""
    nodes = [helper.make_node("LayerNormalization", ["c", "s", "b"], ["y"], name="n", axis=1)]
    model = conv_fed(nodes, [2, 3, 4, 5], [const("s", rnd(3, 4, 5)), const("b", rnd(3, 4, 5))], 17)
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 3, 4, 5)})
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D"] + DECOMPOSED + ["MUL", "ADD", "TRANSPOSE"]


def test_layer_norm_convnext_pattern_needs_no_transpose():
    """ConvNeXt: Conv -> Transpose to NHWC -> LayerNorm(axis=-1) -> Transpose back -> Conv. In the layout
    bookkeeping that is a channel normalization of the Conv's NHWC operand: no TRANSPOSE between the convs."""
    nodes = [helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "s", "b"], ["ln"], name="n", axis=-1, epsilon=1e-6),
             helper.make_node("Transpose", ["ln"], ["tb"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["tb", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [const("s", rnd(8)), const("b", rnd(8)), const("w2", rnd(4, 8, 3, 3, scale=0.2))]
    model = conv_fed(nodes, [1, 8, 6, 6], inits, 17)
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 8, 6, 6)})
    ops = op_types(imported)
    assert ops == ["TRANSPOSE", "CONV_2D"] + DECOMPOSED + ["MUL", "ADD", "CONV_2D", "TRANSPOSE"]
    means = [op for op in imported.describe_dict()["operations"] if op["type"] == "MEAN"]
    assert [op["inputs"][1].split(" =")[1] for op in means] == ["[3]", "[3]"]  # the channel axis of NHWC


def test_layer_norm_quantized_graph_runs_in_float():
    """No quantized NNAPI form: DQ -> LayerNorm -> Q is computed in float between DEQUANTIZE and QUANTIZE."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("LayerNormalization", ["xf", "s", "b"], ["ln"], name="n"),
             helper.make_node("QuantizeLinear", ["ln", "ys", "yz"], ["lq"]),
             helper.make_node("DequantizeLinear", ["lq", "ys", "yz"], ["y"])]
    inits = [const("xs", np.float32(0.05)), const("xz", np.uint8(128)), const("s", rnd(16)), const("b", rnd(16)),
             const("ys", np.float32(0.04)), const("yz", np.uint8(128))]
    model = make_model(nodes, [tensor("x", [2, 3, 16])], [tensor("y", None)], inits, opset=17)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["QUANTIZE", "DEQUANTIZE"] + DECOMPOSED + ["MUL", "ADD", "QUANTIZE", "DEQUANTIZE"]
    x = rnd(2, 3, 16, scale=2.0)
    assert_quant_close(imported.run({"x": x})["y"], ort_run(model, {"x": x})["y"], 0.04, max_steps=1, argmax=False)


def test_layer_norm_errors():
    def model(shape, **attrs):
        return make_model([helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="n", **attrs)],
                          [tensor("x", shape)], [tensor("y", None)], [const("s", rnd(shape[-1]))], opset=17)
    assert_import_error(model([1, 2, 2, 2, 3]), "rank 5")
    assert_import_error(model([2, 3], stash_type=0), "stash_type")


# -- InstanceNormalization -----------------------------------------------------------------------------
@pytest.mark.parametrize("conv", [False, True], ids=["direct", "nhwc"])
@pytest.mark.parametrize("uniform", [False, True], ids=["per_channel", "uniform"])
def test_instance_norm_4d(conv, uniform):
    c = 4
    scale = np.full(c, 1.5, np.float32) if uniform else rnd(c)
    bias = np.full(c, -0.25, np.float32) if uniform else rnd(c)
    inits = [const("s", scale), const("b", bias)]
    src = "c" if conv else "x"
    nodes = [helper.make_node("InstanceNormalization", [src, "s", "b"], ["y"], name="n", epsilon=1e-3)]
    model = conv_fed(nodes, [2, c, 5, 6], inits, 13) if conv else \
        make_model(nodes, [tensor("x", [2, c, 5, 6])], [tensor("y", None)], inits)
    imported, _, _ = check_against_ort(model, {"x": rnd(2, c, 5, 6, scale=2.0, offset=1.0)})
    core = ["INSTANCE_NORMALIZATION"] + ([] if uniform else ["MUL", "ADD"])
    assert op_types(imported) == (["TRANSPOSE", "CONV_2D"] + core + ["TRANSPOSE"] if conv else core)
    (op,) = [o for o in imported.describe_dict()["operations"] if o["type"] == "INSTANCE_NORMALIZATION"]
    assert op["inputs"][4].endswith("=True" if not conv else "=False")  # NCHW flag: the layout x is held in
    if uniform:
        assert op["inputs"][1].endswith("=1.5") and op["inputs"][2].endswith("=-0.25")


def test_instance_norm_3d_decomposed():
    model = make_model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="n")],
                       [tensor("x", [2, 3, 10])], [tensor("y", None)], [const("s", rnd(3)), const("b", rnd(3))])
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 3, 10, offset=2.0)})
    assert op_types(imported) == DECOMPOSED + ["MUL", "ADD"]


def test_instance_norm_errors():
    model = make_model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="n")],
                       [tensor("x", [1, 3, 4, 4]), tensor("s", [3])], [tensor("y", None)], [const("b", rnd(3))])
    assert_import_error(model, "input 1 (scale) must be a constant")
    model = make_model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="n")],
                       [tensor("x", [1, 3, 2, 2, 2])], [tensor("y", None)], [const("s", rnd(3)), const("b", rnd(3))])
    assert_import_error(model, "rank 5")


# -- LRN -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("conv", [False, True], ids=["direct", "nhwc"])
@pytest.mark.parametrize("attrs", [dict(size=3), dict(size=5, alpha=0.02, beta=0.5, bias=2.0), dict(size=1, alpha=0.5),
                                   dict(size=7, alpha=1e-3, beta=0.9)])
def test_lrn_odd_size_maps_directly(attrs, conv):
    src = "c" if conv else "x"
    nodes = [helper.make_node("LRN", [src], ["y"], name="n", **attrs)]
    model = conv_fed(nodes, [2, 6, 4, 5], [], 13) if conv else \
        make_model(nodes, [tensor("x", [2, 6, 4, 5])], [tensor("y", None)])
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 6, 4, 5, scale=3.0)})
    core = ["LOCAL_RESPONSE_NORMALIZATION"]
    assert op_types(imported) == (["TRANSPOSE", "CONV_2D"] + core + ["TRANSPOSE"] if conv else core)
    (op,) = imported.describe_dict()["operations"][2 if conv else 0:][:1]
    assert op["inputs"][1].endswith(f"={(attrs['size'] - 1) // 2}")     # radius
    assert op["inputs"][5].endswith("=3" if conv else "=1")              # the channel axis of the operand


def lrn_reference(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> np.ndarray:
    """The ONNX definition in float64: channel c sums squares over [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    x = x.astype(np.float64)
    channels = x.shape[1]
    out = np.empty_like(x)
    for c in range(channels):
        window = x[:, max(0, c - (size - 1) // 2):min(channels - 1, c + size // 2) + 1]
        out[:, c] = x[:, c] / (bias + alpha / size * np.sum(window * window, axis=1)) ** beta
    return out


@pytest.mark.parametrize("conv", [False, True], ids=["direct", "nhwc"])
@pytest.mark.parametrize("attrs", [dict(size=2), dict(size=4, alpha=0.01, beta=0.6, bias=1.5), dict(size=3, bias=0.0),
                                   dict(size=8, alpha=0.1)])
def test_lrn_even_size_or_zero_bias_decomposed(attrs, conv):
    """ONNX's window is asymmetric for even sizes: a banded 1x1 CONV_2D sums the squares, POW(-beta).
    onnxruntime only runs odd sizes (and its running window sum loses precision with bias 0), and
    onnx.reference's LRN windows differ from the specification: the expectation is the definition in float64."""
    src = "c" if conv else "x"
    nodes = [helper.make_node("LRN", [src], ["y"], name="n", **attrs)]
    if conv:  # the Conv's result is the LRN input: the expectation starts from it
        nodes.append(helper.make_node("Identity", ["c"], ["conv_out"]))
        model = conv_fed(nodes, [2, 6, 4, 5], [], 13, outputs=("y", "conv_out"))
    else:
        model = make_model(nodes, [tensor("x", [2, 6, 4, 5])], [tensor("y", None)])
    x = rnd(2, 6, 4, 5, scale=2.0)
    imported = import_onnx(model.SerializeToString())
    got = imported.run({"x": x})
    lrn_in = got["conv_out"] if conv else x
    assert_float_close(got["y"], lrn_reference(lrn_in, **attrs).astype(np.float32))
    core = ["MUL", "CONV_2D", "POW", "MUL"]
    ops = op_types(imported)
    assert ops[ops.index("POW") - 2:ops.index("POW") + 2] == core
    # in the layout the input has (CONV_2D's NCHW flag for the graph input): TRANSPOSEs only around the Conv
    assert ops == (["TRANSPOSE", "CONV_2D"] + core + ["TRANSPOSE", "TRANSPOSE"] if conv else core)


def test_lrn_3d():
    """onnxruntime's and onnx.reference's LRN take 4-D inputs only: a 3-D one against the definition."""
    model = make_model([helper.make_node("LRN", ["x"], ["y"], name="n", size=3, alpha=0.05)],
                       [tensor("x", [2, 5, 7])], [tensor("y", None)])
    x = rnd(2, 5, 7, scale=2.0)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["LOCAL_RESPONSE_NORMALIZATION"]
    assert_float_close(imported.run({"x": x})["y"], lrn_reference(x, 3, alpha=0.05).astype(np.float32))


def test_lrn_errors():
    def model(shape, **attrs):
        return make_model([helper.make_node("LRN", ["x"], ["y"], name="n", **attrs)], [tensor("x", shape)],
                          [tensor("y", None)])
    assert_import_error(model([2, 5, 7], size=4), "even size", "4-D")
    assert_import_error(model([1, 2, 2, 2, 2], size=3), "rank 5")
    quantized = make_model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
                            helper.make_node("LRN", ["xf"], ["y"], name="n", size=3)],
                           [tensor("x", [1, 3, 2, 2], TensorProto.UINT8)], [tensor("y", None)],
                           [const("s", np.float32(0.1)), const("z", np.uint8(128))])
    imported = import_onnx(quantized.SerializeToString())  # no quantized LRN: DEQUANTIZE first
    assert op_types(imported) == ["DEQUANTIZE", "LOCAL_RESPONSE_NORMALIZATION"]
