"""Reduce* and ArgMax/ArgMin imported and run on nnapi-reference against onnxruntime: axes as attribute
(before opset 18, ReduceSum before 13) and as input, negative and empty axes, keepdims,
noop_with_empty_axes, inputs held NHWC (fed by a Conv) and direct, quantized ReduceMax/Min (QDQ), and
the clear errors."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import (assert_quant_close, check_against_ort, const, make_model, op_types,  # noqa: E402
                                 ort_run, tensor)

from mlts.models import import_onnx  # noqa: E402
from mlts.runtime import MltsError, OperandCode, ResultCode  # noqa: E402

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(4321)
REDUCE_OPS = ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2",
              "ReduceLogSumExp"]
NNAPI_CODE = {"ReduceMax": "REDUCE_MAX", "ReduceMin": "REDUCE_MIN", "ReduceSum": "REDUCE_SUM",
              "ReduceProd": "REDUCE_PROD", "ReduceSumSquare": "REDUCE_SUM", "ReduceL1": "REDUCE_SUM",
              "ReduceL2": "REDUCE_SUM", "ReduceLogSumExp": "REDUCE_SUM"}


def rnd(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def data_for(op: str, *shape) -> np.ndarray:
    if op == "ReduceProd":  # products of values near 1 stay well inside float range
        return (1 + rnd(*shape, scale=0.3)).astype(np.float32)
    if op == "ReduceLogSumExp":  # large values: exp would overflow without the max shift
        return rnd(*shape, scale=40)
    return rnd(*shape)


def axes_as_input(op: str, opset: int) -> bool:
    return opset >= (13 if op == "ReduceSum" else 18)


def reduce_node(op: str, src: str, dst: str, axes, opset: int, inits: list, **attrs):
    """A Reduce node with its axes in the form `opset` requires (None: the axes left out)."""
    if axes is None:
        return helper.make_node(op, [src], [dst], **attrs)
    if axes_as_input(op, opset):
        inits.append(const(f"{dst}_axes", np.asarray(axes, np.int64)))
        return helper.make_node(op, [src, f"{dst}_axes"], [dst], **attrs)
    return helper.make_node(op, [src], [dst], axes=list(axes), **attrs)


def import_error(model) -> MltsError:
    with pytest.raises(MltsError) as info:
        import_onnx(model.SerializeToString())
    assert info.value.code == ResultCode.BAD_DATA
    return info.value


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_direct_input(op, keepdims, opset):
    """Input straight from the graph (identity layout): one, several, negative and all (no axes) axes."""
    x = data_for(op, 2, 3, 4, 5)
    for axes in ([1], [-1, 0], [0, 2, -1], None):
        inits: list = []
        model = make_model([reduce_node(op, "x", "y", axes, opset, inits, keepdims=keepdims)],
                           [tensor("x", [2, 3, 4, 5])], [tensor("y", None)], inits, opset=opset)
        imported, _, _ = check_against_ort(model, {"x": x})
        ops = op_types(imported)
        assert NNAPI_CODE[op] in ops and "TRANSPOSE" not in ops


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_nhwc_input_has_no_transpose_before(op, keepdims):
    """Fed by a Conv (held NHWC): channel and spatial axes are reduced in NHWC, no TRANSPOSE before."""
    x = rnd(1, 3, 5, 6)
    for axes in ([1], [2, -1], [-3, 3]):
        inits = [const("w", rnd(4, 3, 1, 1, scale=0.5) if op != "ReduceProd" else
                       np.full((4, 3, 1, 1), 0.1, np.float32)),
                 const("b", np.full(4, 1.0 if op == "ReduceProd" else 0.0, np.float32))]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
                 reduce_node(op, "c", "y", axes, 18, inits, keepdims=keepdims)]
        model = make_model(nodes, [tensor("x", [1, 3, 5, 6])], [tensor("y", None)], inits, opset=18)
        imported, _, _ = check_against_ort(model, {"x": x})
        ops = op_types(imported)
        assert ops[:2] == ["TRANSPOSE", "CONV_2D"] and "TRANSPOSE" not in ops[2:-1]
        assert ops.count(NNAPI_CODE[op]) == 1


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_empty_axes_reduce_everything_or_nothing(op):
    """Opset 18: no axes input, or an empty one, reduces everything; with noop_with_empty_axes=1 nothing
    is reduced (the element-wise part still runs: squares, absolute values)."""
    x = data_for(op, 3, 4)
    for keepdims in (0, 1):
        for empty in ([], None):
            for noop in (0, 1):
                inits: list = []
                model = make_model([reduce_node(op, "x", "y", empty, 18, inits, keepdims=keepdims,
                                                noop_with_empty_axes=noop)],
                                   [tensor("x", [3, 4])], [tensor("y", None)], inits, opset=18)
                imported, got, _ = check_against_ort(model, {"x": x})
                assert got["y"].shape == ((3, 4) if noop else (1, 1) if keepdims else ())


def test_reduce_sum_axes_attribute_before_opset13():
    inits: list = []
    model = make_model([reduce_node("ReduceSum", "x", "y", [-2], 11, inits, keepdims=0)], [tensor("x", [2, 3, 4])],
                       [tensor("y", None)], inits, opset=11)
    check_against_ort(model, {"x": rnd(2, 3, 4)})


def test_reduce_max_of_bool_is_reduce_any():
    model = make_model([helper.make_node("ReduceMax", ["x", "axes"], ["a"], keepdims=0),
                        helper.make_node("ReduceMin", ["x", "axes"], ["b"], keepdims=1)],
                       [tensor("x", [3, 4], TensorProto.BOOL)],
                       [tensor("a", None, TensorProto.BOOL), tensor("b", None, TensorProto.BOOL)],
                       [const("axes", np.array([1], np.int64))], opset=20)
    x = np.array([[0, 0, 0, 0], [0, 1, 0, 1], [1, 1, 1, 1]], bool)
    imported = import_onnx(model.SerializeToString())
    got = imported.run({"x": x})
    np.testing.assert_array_equal(got["a"], x.any(axis=1))
    np.testing.assert_array_equal(got["b"], x.all(axis=1, keepdims=True))
    assert op_types(imported) == ["REDUCE_ANY", "REDUCE_ALL"]


# -- quantized ---------------------------------------------------------------------------------------------
def qdq_reduce(op: str, dtype, in_q, out_q, axes, keepdims):
    (s_in, z_in), (s_out, z_out) = in_q, out_q
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xf"]),
             helper.make_node(op, ["xf", "axes"], ["r"], keepdims=keepdims),
             helper.make_node("QuantizeLinear", ["r", "s_out", "z_out"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s_out", "z_out"], ["y"])]
    inits = [const("s_in", np.float32(s_in)), const("z_in", np.asarray(z_in, dtype)),
             const("s_out", np.float32(s_out)), const("z_out", np.asarray(z_out, dtype)),
             const("axes", np.asarray(axes, np.int64))]
    return make_model(nodes, [tensor("x", [2, 3, 4, 5])], [tensor("y", None)], inits, opset=18)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_quantized_reduce_max_min(op, dtype):
    """DQ -> ReduceMax/Min -> Q runs as an 8-bit REDUCE_* (the input's parameters on its output); other
    output parameters are requantized after it."""
    zp = 128 if dtype == np.uint8 else 0
    x = rnd(2, 3, 4, 5)
    for out_q, requantized in (((0.03, zp), False), ((0.05, zp - 10), True)):
        model = qdq_reduce(op, dtype, (0.03, zp), out_q, [1, -1], 0)
        data = model.SerializeToString()
        imported = import_onnx(data)
        got = imported.run({"x": x})["y"]
        ref = ort_run(data, {"x": x})["y"]
        assert_quant_close(got, ref, out_q[0], max_steps=1, argmax=False)
        hal = imported.model.hal_model().main
        (red,) = [o for o in hal.operations if o.type.name == NNAPI_CODE[op]]
        code = hal.operands[red.inputs[0]].type.code
        assert code == (OperandCode.TENSOR_QUANT8_ASYMM if dtype == np.uint8 else OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)
        assert op_types(imported).count("DEQUANTIZE") == (2 if requantized else 1)


def test_quantized_reduce_sum_runs_in_float():
    """ReduceSum has no 8-bit NNAPI form: it stays float between DEQUANTIZE and QUANTIZE."""
    model = qdq_reduce("ReduceSum", np.uint8, (0.03, 128), (0.2, 128), [1], 1)
    data = model.SerializeToString()
    x = rnd(2, 3, 4, 5)
    imported = import_onnx(data)
    assert_quant_close(imported.run({"x": x})["y"], ort_run(data, {"x": x})["y"], 0.2, max_steps=1, argmax=False)
    hal = imported.model.hal_model().main
    (red,) = [o for o in hal.operations if o.type.name == "REDUCE_SUM"]
    assert hal.operands[red.inputs[0]].type.code == OperandCode.TENSOR_FLOAT32


# -- ArgMax / ArgMin ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax_argmin(op, keepdims, last):
    """Direct input with many ties (small integers), every axis, negative ones too, rank 1 included."""
    x = RNG.integers(-2, 3, (3, 4, 5)).astype(np.float32)
    for axis in (0, 1, -1):
        model = make_model([helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)],
                           [tensor("x", [3, 4, 5])], [tensor("y", None, TensorProto.INT64)], opset=13)
        imported, got, ref = check_against_ort(model, {"x": x})
        assert got["y"].shape == ref["y"].shape
        assert ("REVERSE" in op_types(imported)) == bool(last)
    v = RNG.integers(0, 3, (7,)).astype(np.float32)
    model = make_model([helper.make_node(op, ["v"], ["y"], keepdims=keepdims, select_last_index=last)],
                       [tensor("v", [7])], [tensor("y", None, TensorProto.INT64)], opset=13)
    check_against_ort(model, {"v": v})


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_argmax_of_nhwc_tensor(keepdims, last):
    """Over the channels of a Conv output held NHWC: ARGMAX on NHWC axis 3, no TRANSPOSE before it."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("ArgMax", ["c"], ["y"], axis=1, keepdims=keepdims, select_last_index=last)]
    model = make_model(nodes, [tensor("x", [1, 3, 4, 5])], [tensor("y", None, TensorProto.INT64)],
                       [const("w", np.round(rnd(6, 3, 1, 1)))], opset=13)
    imported, _, _ = check_against_ort(model, {"x": RNG.integers(-1, 2, (1, 3, 4, 5)).astype(np.float32)})
    ops = op_types(imported)
    assert ops[:2] == ["TRANSPOSE", "CONV_2D"] and "TRANSPOSE" not in ops[2:-1]


def test_argmax_of_int_and_quantized_inputs():
    """int64 data (held as INT32) and a QDQ input (DEQUANTIZE then ARGMAX: the index is not quantized)."""
    model = make_model([helper.make_node("ArgMin", ["x"], ["y"], axis=0, keepdims=0)],
                       [tensor("x", [4, 3], TensorProto.INT64)], [tensor("y", None, TensorProto.INT64)])
    check_against_ort(model, {"x": RNG.integers(-5, 5, (4, 3)).astype(np.int64)})
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("ArgMax", ["xf"], ["y"], axis=-1)]
    model = make_model(nodes, [tensor("x", [2, 9])], [tensor("y", None, TensorProto.INT64)],
                       [const("s", np.float32(0.1)), const("z", np.uint8(128))])
    check_against_ort(model, {"x": rnd(2, 9)})


# -- errors ------------------------------------------------------------------------------------------------
def test_errors_name_the_node():
    computed_axes = make_model([helper.make_node("ReduceMax", ["x", "axes"], ["y"], name="dyn_axes")],
                               [tensor("x", [2, 3]), tensor("axes", [1], TensorProto.INT64)], [tensor("y", None)],
                               opset=18)
    err = import_error(computed_axes)
    assert "dyn_axes" in err.message and "axes" in err.message and "constant" in err.message
    rank5 = make_model([helper.make_node("ReduceSum", ["x"], ["y"], name="big")], [tensor("x", [1, 2, 2, 2, 2])],
                       [tensor("y", None)])
    err = import_error(rank5)
    assert "big" in err.message and "at most 4" in err.message
    ints = make_model([helper.make_node("ReduceSum", ["x"], ["y"], name="isum")], [tensor("x", [3, 2], TensorProto.INT32)],
                      [tensor("y", None, TensorProto.INT32)])
    err = import_error(ints)
    assert "isum" in err.message and "float" in err.message
    bad_axis = make_model([helper.make_node("ReduceL2", ["x"], ["y"], name="far", axes=[3])], [tensor("x", [3, 2])],
                          [tensor("y", None)])
    assert "far" in import_error(bad_axis).message
    dynamic = make_model([helper.make_node("ArgMax", ["x"], ["y"], name="lastdyn", axis=1, select_last_index=1)],
                         [tensor("x", [2, None])], [tensor("y", None, TensorProto.INT64)])
    err = import_error(dynamic)
    assert "lastdyn" in err.message and "select_last_index" in err.message
