"""MatMul -> BATCH_MATMUL (two computed operands, ONNX broadcasting, constant batched B) and Einsum
matrix products, imported and run on nnapi-reference against onnxruntime: float (CTS tolerance),
quantized (hand-built QDQ and onnxruntime.quantization, within one step), and the clear errors."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import (assert_quant_close, check_against_ort, const, make_model, op_types,  # noqa: E402
                                 ort_run, quantize, tensor)

from mlts.models import import_onnx  # noqa: E402
from mlts.runtime import MltsError, OperandCode, ResultCode  # noqa: E402

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(2024)


def rnd(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def import_error(model) -> MltsError:
    with pytest.raises(MltsError) as info:
        import_onnx(model.SerializeToString())
    assert info.value.code == ResultCode.BAD_DATA
    return info.value


def hal_types(imported, op_name: str) -> list:
    hal = imported.model.hal_model().main
    return [[hal.operands[i].type for i in op.inputs] for op in hal.operations if op.type.name == op_name]


# -- MatMul of two computed tensors ------------------------------------------------------------------------
MATMUL_CASES = {
    "rank2": ([3, 4], [4, 5], ["BATCH_MATMUL"]),
    "rank3": ([2, 3, 4], [2, 4, 5], ["BATCH_MATMUL"]),
    "rank4": ([2, 3, 5, 4], [2, 3, 4, 6], ["BATCH_MATMUL"]),
    "b_rank2_rows_merged": ([2, 3, 4], [4, 5], ["RESHAPE", "BATCH_MATMUL", "RESHAPE"]),
    "a_rank2_tiled": ([3, 4], [2, 4, 5], ["RESHAPE", "TILE", "BATCH_MATMUL"]),
    "a_batch1_tiled": ([1, 3, 4], [2, 4, 5], ["TILE", "BATCH_MATMUL"]),
    "both_broadcast": ([2, 1, 3, 4], [1, 5, 4, 2], ["TILE", "TILE", "BATCH_MATMUL"]),
    "b_batch1_rows_merged": ([2, 3, 4], [1, 4, 5], None),
    "rank4_by_rank3": ([2, 3, 5, 4], [3, 4, 6], None),
    "vector_a": ([4], [2, 4, 5], None),
    "vector_b": ([2, 3, 4], [4], None),
    "vector_vector": ([4], [4], None),
}


@pytest.mark.parametrize("case", sorted(MATMUL_CASES))
def test_matmul_computed_operands(case):
    sa, sb, expected = MATMUL_CASES[case]
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [tensor("a", sa), tensor("b", sb)],
                       [tensor("y", None)])
    imported, _, _ = check_against_ort(model, {"a": rnd(*sa), "b": rnd(*sb)})
    ops = op_types(imported)
    assert "BATCH_MATMUL" in ops
    if expected is not None:
        assert ops == expected


def test_matmul_dynamic_batch():
    """Unknown batch dimensions: no RESHAPE needed, BATCH_MATMUL takes them as they come."""
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [tensor("a", [None, 3, 4]),
                                                                          tensor("b", [None, 4, 2])],
                       [tensor("y", None)])
    imported = import_onnx(model.SerializeToString())
    for n in (1, 3):
        feeds = {"a": rnd(n, 3, 4), "b": rnd(n, 4, 2)}
        np.testing.assert_allclose(imported.run(feeds)["y"], ort_run(model, feeds)["y"], rtol=1e-5, atol=1e-5)
    assert op_types(imported) == ["BATCH_MATMUL"]


def test_matmul_transposed_operands_use_adj_flags():
    """q @ k^T with k^T an ONNX Transpose (free: a layout change) runs as BATCH_MATMUL adj_y, no TRANSPOSE;
    likewise a^T @ b through adj_x."""
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["qt", "v"], ["z"])]
    model = make_model(nodes, [tensor("q", [2, 3, 5, 4]), tensor("k", [2, 3, 6, 4]), tensor("v", [2, 3, 5, 7])],
                       [tensor("s", None), tensor("z", None)])
    imported, _, _ = check_against_ort(model, {"q": rnd(2, 3, 5, 4), "k": rnd(2, 3, 6, 4), "v": rnd(2, 3, 5, 7)})
    assert op_types(imported) == ["BATCH_MATMUL", "BATCH_MATMUL"]
    flags = [op["inputs"][2:] for op in imported.describe_dict()["operations"]]
    assert [[f.split("=")[-1] for f in fl] for fl in flags] == [["False", "True"], ["True", "False"]]


def test_matmul_of_nhwc_conv_output():
    """A Conv output (held NHWC) times a computed tensor: transposed back to NCHW order for the product."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("MatMul", ["c", "b"], ["y"])]
    model = make_model(nodes, [tensor("x", [1, 3, 5, 6]), tensor("b", [1, 4, 6, 2])], [tensor("y", None)],
                       [const("w", rnd(4, 3, 1, 1))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 5, 6), "b": rnd(1, 4, 6, 2)})
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "TRANSPOSE", "BATCH_MATMUL"]


@pytest.mark.parametrize("act", ["Relu", "Clip6"])
def test_matmul_fused_activation(act):
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"])]
    inits = []
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["m"], ["y"]))
    else:
        nodes.append(helper.make_node("Clip", ["m", "lo", "hi"], ["y"]))
        inits = [const("lo", np.float32(0)), const("hi", np.float32(6))]
    model = make_model(nodes, [tensor("a", [2, 3, 4]), tensor("b", [2, 4, 5])], [tensor("y", None)], inits)
    imported, _, _ = check_against_ort(model, {"a": rnd(2, 3, 4, scale=3), "b": rnd(2, 4, 5, scale=3)})
    assert op_types(imported) == ["BATCH_MATMUL", "RELU" if act == "Relu" else "RELU6"]


def test_matmul_int32():
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       [tensor("a", [2, 3, 4], TensorProto.INT32), tensor("b", [2, 4, 2], TensorProto.INT32)],
                       [tensor("y", None, TensorProto.INT32)])
    imported, _, _ = check_against_ort(model, {"a": RNG.integers(-9, 9, (2, 3, 4)).astype(np.int32),
                                              "b": RNG.integers(-9, 9, (2, 4, 2)).astype(np.int32)})
    assert hal_types(imported, "BATCH_MATMUL")[0][0].code == OperandCode.TENSOR_INT32


# -- constant operands -------------------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb,expected", [
    ([2, 3, 4], [2, 4, 5], "BATCH_MATMUL"),
    ([2, 2, 3, 4], [2, 2, 4, 5], "BATCH_MATMUL"),
    ([1, 3, 4], [2, 4, 5], "FULLY_CONNECTED"),
    ([3, 4], [2, 4, 5], "FULLY_CONNECTED"),
    ([2, 3, 3, 4], [3, 4, 5], "BATCH_MATMUL"),
])
def test_matmul_constant_batched_b(sa, sb, expected):
    """A constant B of rank 3+: BATCH_MATMUL with a constant operand; B's own batch dimensions (A lacks
    them) become FULLY_CONNECTED units instead, with constant weights."""
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [tensor("a", sa)], [tensor("y", None)],
                       [const("b", rnd(*sb))])
    imported, _, _ = check_against_ort(model, {"a": rnd(*sa)})
    ops = op_types(imported)
    assert expected in ops and "TILE" not in ops


def test_matmul_constant_a_and_existing_fc_paths():
    """Constant batched A with a computed B: BATCH_MATMUL; constant 2-D B and constant 2-D A keep their
    FULLY_CONNECTED forms."""
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [tensor("b", [2, 4, 5])], [tensor("y", None)],
                       [const("a", rnd(2, 3, 4))])
    imported, _, _ = check_against_ort(model, {"b": rnd(2, 4, 5)})
    assert op_types(imported) == ["BATCH_MATMUL"]
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [tensor("a", [2, 3, 4])], [tensor("y", None)],
                       [const("b", rnd(4, 5))])
    imported, _, _ = check_against_ort(model, {"a": rnd(2, 3, 4)})
    assert op_types(imported) == ["FULLY_CONNECTED", "RESHAPE"]
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [tensor("b", [4, 5])], [tensor("y", None)],
                       [const("a", rnd(3, 4))])
    imported, _, _ = check_against_ort(model, {"b": rnd(4, 5)})
    assert op_types(imported) == ["TRANSPOSE", "FULLY_CONNECTED", "TRANSPOSE"]


# -- quantized -----------------------------------------------------------------------------------------------
def qdq(x: str, scale: float, zp, dtype, prefix: str):
    nodes = [helper.make_node("QuantizeLinear", [x, f"{prefix}_s", f"{prefix}_z"], [f"{prefix}_q"]),
             helper.make_node("DequantizeLinear", [f"{prefix}_q", f"{prefix}_s", f"{prefix}_z"], [f"{prefix}_dq"])]
    return nodes, [const(f"{prefix}_s", np.float32(scale)), const(f"{prefix}_z", np.asarray(zp, dtype))], f"{prefix}_dq"


def qdq_product(op_nodes, shapes: dict, dtype, out_scale: float):
    zp = 0 if dtype == np.int8 else 128
    nodes, inits, renamed = [], [], {}
    for i, name in enumerate(shapes):
        n, c, dq = qdq(name, 0.02 + 0.01 * i, zp + 3 * i, dtype, f"in{i}")
        nodes += n
        inits += c
        renamed[name] = dq
    for node in op_nodes:
        node.input[:] = [renamed.get(i, i) for i in node.input]
    nodes += op_nodes
    n, c, _ = qdq("r", out_scale, zp - 5, dtype, "out")
    nodes += n
    inits += c
    nodes.append(helper.make_node("Identity", ["out_dq"], ["y"]))
    return make_model(nodes, [tensor(k, v) for k, v in shapes.items()], [tensor("y", None)], inits)


def run_quantized(model, feeds, step):
    data = model.SerializeToString()
    imported = import_onnx(data)
    assert_quant_close(imported.run(feeds)["y"], ort_run(data, feeds)["y"], step, max_steps=1, argmax=False)
    return imported


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_qdq_batch_matmul(dtype):
    """DQ -> MatMul -> Q of two computed tensors: 8-bit BATCH_MATMUL (signed only in NNAPI: uint8 operands
    are moved to int8 exactly, the result back to uint8)."""
    shapes = {"a": [2, 3, 4], "b": [2, 4, 5]}
    model = qdq_product([helper.make_node("MatMul", ["a", "b"], ["r"])], shapes, dtype, 0.05)
    imported = run_quantized(model, {"a": rnd(2, 3, 4), "b": rnd(2, 4, 5)}, 0.05)
    (types,) = hal_types(imported, "BATCH_MATMUL")
    assert types[0].code == types[1].code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
    ops = op_types(imported)
    # uint8: each operand and the result go through DEQUANTIZE + QUANTIZE to change type (exact)
    assert ops.count("DEQUANTIZE") == (1 if dtype == np.int8 else 4)


def test_qdq_batch_matmul_constant_b_and_relu():
    """int8 weights [2, 4, 5] (per tensor) with uint8 activations, and a fused Relu as a quantized RELU."""
    w = RNG.integers(-60, 60, (2, 4, 5)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
             helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"])]
    model = qdq_product(nodes, {"a": [2, 3, 4]}, np.uint8, 0.05)
    model.graph.initializer.extend([const("wq", w), const("ws", np.float32(0.01)), const("wz", np.int8(0))])
    imported = run_quantized(model, {"a": rnd(2, 3, 4)}, 0.05)
    assert "RELU" in op_types(imported)
    (types,) = hal_types(imported, "BATCH_MATMUL")
    assert types[1].code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED


def test_quantize_static_attention_scores():
    """onnxruntime.quantization (QDQ, uint8 activations) of q @ k^T: both operands are activations."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["x", "xt"], ["y"])]
    model = make_model(nodes, [tensor("x", [2, 5, 4])], [tensor("y", [2, 5, 5])])
    data = quantize(model, "x", [2, 5, 4], fmt="QDQ", per_channel=False)
    imported = import_onnx(data)
    for k in range(3):
        x = np.random.default_rng(k).uniform(-1, 1, (2, 5, 4)).astype(np.float32)
        got, ref = imported.run({"x": x})["y"], ort_run(data, {"x": x})["y"]
        step = float(np.abs(np.diff(np.unique(ref))).min())  # the output quantization step
        assert_quant_close(got, ref, step, max_steps=1, argmax=False)
    (types,) = hal_types(imported, "BATCH_MATMUL")
    assert types[0].code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
    assert "TRANSPOSE" not in op_types(imported)  # k^T is BATCH_MATMUL's adj_y


def test_qdq_per_channel_batched_weights_stay_float():
    """Per-channel weights have no BATCH_MATMUL form: the MatMul runs in float (DEQUANTIZE before)."""
    w = RNG.integers(-60, 60, (2, 4, 5)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=2),
             helper.make_node("MatMul", ["a", "w"], ["r"])]
    model = qdq_product(nodes, {"a": [2, 3, 4]}, np.uint8, 0.05)
    model.graph.initializer.extend([const("wq", w), const("ws", np.linspace(0.01, 0.02, 5).astype(np.float32)),
                                    const("wz", np.zeros(5, np.int8))])
    imported = run_quantized(model, {"a": rnd(2, 3, 4)}, 0.05)
    (types,) = hal_types(imported, "BATCH_MATMUL")
    assert types[0].code == OperandCode.TENSOR_FLOAT32


# -- Einsum --------------------------------------------------------------------------------------------------
EINSUM_CASES = {
    "bij,bjk->bik": ([2, 3, 4], [2, 4, 5], ["BATCH_MATMUL"]),
    "bhid,bhjd->bhij": ([2, 3, 5, 4], [2, 3, 6, 4], ["BATCH_MATMUL"]),
    "ij,jk->ik": ([3, 4], [4, 5], ["BATCH_MATMUL"]),
    "ij,kj->ik": ([3, 4], [5, 4], ["BATCH_MATMUL"]),
    "ji,jk->ik": ([4, 3], [4, 5], ["BATCH_MATMUL"]),
    "ij,jk->ki": ([3, 4], [4, 5], None),
    "...ij,...jk->...ik": ([2, 3, 3, 4], [2, 3, 4, 5], ["BATCH_MATMUL"]),
    "...ij,...jk": ([1, 3, 4], [2, 4, 5], ["TILE", "BATCH_MATMUL"]),
    "bhqd,bkhd->bhqk": ([2, 3, 4, 5], [2, 6, 3, 5], None),
    "bi,bi->b": ([3, 4], [3, 4], None),
    "i,j->ij": ([3], [4], None),
    "ij,jk": ([3, 4], [4, 5], ["BATCH_MATMUL"]),
    "bij,jk->bik": ([2, 3, 4], [4, 5], None),
}


@pytest.mark.parametrize("equation", sorted(EINSUM_CASES))
def test_einsum_products(equation):
    sa, sb, expected = EINSUM_CASES[equation]
    model = make_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)],
                       [tensor("a", sa), tensor("b", sb)], [tensor("y", None)])
    imported, _, _ = check_against_ort(model, {"a": rnd(*sa), "b": rnd(*sb)})
    if expected is not None:
        assert op_types(imported) == expected


def test_einsum_ellipses_of_different_ranks_broadcast_like_numpy():
    """onnxruntime refuses ellipses of different lengths; numpy.einsum broadcasts them (the reference here)."""
    model = make_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,...jk->...ik")],
                       [tensor("a", [3, 4]), tensor("b", [2, 2, 4, 5])], [tensor("y", None)])
    a, b = rnd(3, 4), rnd(2, 2, 4, 5)
    imported = import_onnx(model.SerializeToString())
    np.testing.assert_allclose(imported.run({"a": a, "b": b})["y"], np.einsum("...ij,...jk->...ik", a, b),
                               rtol=1e-5, atol=1e-5)
    assert op_types(imported) == ["RESHAPE", "TILE", "BATCH_MATMUL"]


def test_einsum_constant_weights_use_fully_connected():
    model = make_model([helper.make_node("Einsum", ["a", "w"], ["y"], equation="bsi,oi->bso")],
                       [tensor("a", [2, 3, 4])], [tensor("y", None)], [const("w", rnd(5, 4))])
    imported, _, _ = check_against_ort(model, {"a": rnd(2, 3, 4)})
    assert op_types(imported) == ["RESHAPE", "FULLY_CONNECTED", "RESHAPE"]


def test_einsum_qdq_int8():
    model = qdq_product([helper.make_node("Einsum", ["a", "b"], ["r"], equation="bhid,bhjd->bhij")],
                        {"a": [1, 2, 3, 4], "b": [1, 2, 5, 4]}, np.int8, 0.04)
    imported = run_quantized(model, {"a": rnd(1, 2, 3, 4), "b": rnd(1, 2, 5, 4)}, 0.04)
    (types,) = hal_types(imported, "BATCH_MATMUL")
    assert types[0].code == OperandCode.TENSOR_QUANT8_ASYMM_SIGNED


# -- errors --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("equation,shapes,fragment", [
    ("ii,ij->j", [[3, 3], [3, 4]], "trace or diagonal"),
    ("ij,jk->k", [[3, 4], [4, 5]], "summed over within one operand"),
    ("ij,jk,kl->il", [[3, 4], [4, 5], [5, 2]], "3 operand"),
    ("ij->ji", [[3, 4]], "1 operand"),
    ("...ij,...jk->ik", [[2, 3, 4], [2, 4, 5]], "ellipsis"),
])
def test_einsum_unsupported_equations_name_the_node_and_equation(equation, shapes, fragment):
    names = ["a", "b", "c"][:len(shapes)]
    model = make_model([helper.make_node("Einsum", names, ["y"], name="ein", equation=equation)],
                       [tensor(n, s) for n, s in zip(names, shapes)], [tensor("y", None)])
    err = import_error(model)
    assert "ein" in err.message and equation in err.message and fragment in err.message


def test_matmul_rank5_is_a_clear_error():
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm5")],
                       [tensor("a", [2, 2, 2, 3, 4]), tensor("b", [2, 2, 2, 4, 5])], [tensor("y", None)])
    err = import_error(model)
    assert "mm5" in err.message and "at most 4" in err.message


@pytest.mark.parametrize("sa,sb,fragment", [
    ([3, 4], [5, 6], "dimension 1 of 'a' has sizes 4 and 5"),
    ([2, 3, 4], [3, 4, 5], "do not broadcast"),
])
def test_matmul_mismatched_shapes_are_clear_errors(sa, sb, fragment):
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="bad_mm")],
                       [tensor("a", sa), tensor("b", sb)], [tensor("y", None)])
    err = import_error(model)
    assert "bad_mm" in err.message and fragment in err.message
