"""Slice, Split, Gather, Tile, Expand, DepthToSpace, SpaceToDepth and the channel-shuffle pattern, imported
and run on nnapi-reference against onnxruntime: float (fed by a graph input, or by a Conv so that the input
is held NHWC), quantized QDQ, and the clear errors of what NNAPI cannot express."""
from __future__ import annotations

import io
import os
import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import (assert_quant_close, check_against_ort, const, make_model, op_types,  # noqa: E402
                                 ort_run, quantize, tensor)

from mlts.models import import_onnx  # noqa: E402
from mlts.runtime import MltsError, OperandCode, ResultCode  # noqa: E402

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(2024)
I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min
LAYOUTS = ["direct", "nhwc"]


def rnd(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def i64(*values):
    return np.asarray(values, np.int64)


def run_op(node, x_shape, inits=(), *, fed="direct", opset=13, outputs=("y",), extra_inputs=(), feeds=None,
           layout_free=True):
    """`node` reads "a": the graph input itself, or (fed="nhwc") a 1x1 Conv of it, held NHWC; `layout_free`:
    the operation works in that layout (no TRANSPOSE but those into the Conv and back to the outputs)."""
    nodes, inits = [node], list(inits)
    if fed == "nhwc":
        c = x_shape[1]
        nodes.insert(0, helper.make_node("Conv", ["x", "w_in"], ["a"]))
        inits.append(const("w_in", rnd(c, c, 1, 1)))
    else:
        nodes[0].input[0] = "x"
    model = make_model(nodes, [tensor("x", x_shape)] + list(extra_inputs), [tensor(o, None) for o in outputs],
                       inits, opset=opset)
    feeds = dict(feeds or {})
    feeds.setdefault("x", rnd(*x_shape))
    imported, _, _ = check_against_ort(model, feeds)
    ops = op_types(imported)
    if layout_free and fed == "nhwc":  # reads the Conv's NHWC result as it is; TRANSPOSE only back to the outputs
        assert ops[:2] == ["TRANSPOSE", "CONV_2D"] and "TRANSPOSE" not in ops[2:-len(outputs)], ops
    elif layout_free:
        assert "TRANSPOSE" not in ops, ops
    return ops


def import_error(model) -> MltsError:
    with pytest.raises(MltsError) as info:
        import_onnx(model.SerializeToString())
    assert info.value.code == ResultCode.BAD_DATA
    return info.value


# -- Slice ----------------------------------------------------------------------------------------------
SLICE_CASES = {  # starts, ends, axes, steps -> the NNAPI operation
    "spatial": ((1, 0), (4, 3), (2, 3), None, "SLICE"),
    "channels": ((1,), (3,), (1,), None, "SLICE"),
    "negative_indices_and_axes": ((-3, -4), (-1, I64_MAX), (-1, -2), None, "SLICE"),
    "clamped": ((-100, 2), (100, I64_MAX), (3, 1), (1, 1), "SLICE"),
    "default_axes": ((0, 1, 1, 2), (1, 3, 5, 4), None, None, "SLICE"),
    "steps": ((0, 1), (I64_MAX, 5), (2, 3), (2, 3), "STRIDED_SLICE"),
    "reverse": ((-1,), (I64_MIN,), (3,), (-1,), "STRIDED_SLICE"),
    "negative_step_range": ((4, 3), (0, -6), (2, 1), (-2, -1), "STRIDED_SLICE"),
}


@pytest.mark.parametrize("fed", LAYOUTS)
@pytest.mark.parametrize("case", sorted(SLICE_CASES))
def test_slice_inputs(case, fed):
    starts, ends, axes, steps, code = SLICE_CASES[case]
    inputs, inits = ["a", "starts", "ends"], [const("starts", i64(*starts)), const("ends", i64(*ends))]
    if axes is not None or steps is not None:
        inputs.append("axes" if axes is not None else "")
        inits += [const("axes", i64(*axes))] if axes is not None else []
    if steps is not None:
        inputs.append("steps")
        inits.append(const("steps", i64(*steps)))
    ops = run_op(helper.make_node("Slice", inputs, ["y"]), [1, 4, 5, 6], inits, fed=fed)
    assert code in ops


@pytest.mark.parametrize("axes", [None, [3, 1]])
def test_slice_opset9_attributes(axes):
    attrs = dict(starts=[1, 0], ends=[-1, 2]) | ({"axes": axes} if axes else {})
    ops = run_op(helper.make_node("Slice", ["a"], ["y"], **attrs), [3, 3, 5, 6], fed="nhwc", opset=9)
    assert "SLICE" in ops


def test_slice_int64_with_steps_uses_gather():
    """STRIDED_SLICE has no INT32 form: SLICE of the unit-step axis, one GATHER per strided axis."""
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    inits = [const("starts", i64(5, 0, 1)), const("ends", i64(I64_MIN, 3, 5)), const("axes", i64(0, 1, 2)),
             const("steps", i64(-2, 1, 3))]
    model = make_model([node], [tensor("x", [6, 4, 5], TensorProto.INT64)], [tensor("y", None, TensorProto.INT64)],
                       inits)
    imported, _, _ = check_against_ort(model, {"x": RNG.integers(-50, 50, (6, 4, 5))})
    assert op_types(imported) == ["SLICE", "GATHER", "GATHER"]


def test_slice_rank5_unit_steps_and_unknown_dimension():
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["y"])
    inits = [const("starts", i64(1, -2)), const("ends", i64(3, I64_MAX)), const("axes", i64(1, 4))]
    model = make_model([node], [tensor("x", [2, 4, 1, 2, 5])], [tensor("y", None)], inits)
    check_against_ort(model, {"x": rnd(2, 4, 1, 2, 5)})
    # The sliced dimension is unknown at import: STRIDED_SLICE clamps at run time the way ONNX does.
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    inits = [const("starts", i64(-1)), const("ends", i64(I64_MIN)), const("axes", i64(0)), const("steps", i64(-1))]
    model = make_model([node], [tensor("x", ["n", 3])], [tensor("y", None)], inits)
    for n in (1, 4):
        check_against_ort(model, {"x": rnd(n, 3)})


def test_slice_errors():
    computed = make_model([helper.make_node("Slice", ["x", "s", "e"], ["y"], name="dyn_slice")],
                          [tensor("x", [4, 4]), tensor("s", [1], TensorProto.INT64)], [tensor("y", None)],
                          [const("e", i64(3))])
    err = import_error(computed)
    assert "dyn_slice" in err.message and "starts" in err.message
    rank5 = make_model([helper.make_node("Slice", ["x", "s", "e", "ax", "st"], ["y"], name="slice5")],
                       [tensor("x", [1, 2, 2, 2, 6])], [tensor("y", None)],
                       [const("s", i64(0)), const("e", i64(6)), const("ax", i64(4)), const("st", i64(2))])
    err = import_error(rank5)
    assert "slice5" in err.message and "STRIDED_SLICE" in err.message
    # ONNX clamps a negative-step start before the first element to the first element; at run time
    # STRIDED_SLICE would not, so an unknown dimension there is refused.
    reverse = make_model([helper.make_node("Slice", ["x", "s", "e", "ax", "st"], ["y"], name="rev_slice")],
                         [tensor("x", ["n", 3])], [tensor("y", None)],
                         [const("s", i64(-2)), const("e", i64(I64_MIN)), const("ax", i64(0)), const("st", i64(-1))])
    err = import_error(reverse)
    assert "rev_slice" in err.message and "static" in err.message
    empty = make_model([helper.make_node("Slice", ["x", "s", "e"], ["y"], name="empty_slice")],
                       [tensor("x", [4, 4])], [tensor("y", None)], [const("s", i64(3)), const("e", i64(1))])
    err = import_error(empty)
    assert "empty_slice" in err.message and "zero-sized" in err.message


# -- Split ----------------------------------------------------------------------------------------------
SPLIT_CASES = {  # opset, attributes, split input, output count -> operation
    "equal_attr": (11, dict(axis=1), None, 2, "SPLIT"),
    "unequal_attr": (11, dict(axis=1, split=[1, 3]), None, 2, "SLICE"),
    "equal_input_negative_axis": (13, dict(axis=-1), [3, 3], 2, "SPLIT"),
    "unequal_input": (13, dict(axis=2), [1, 2, 1], 3, "SLICE"),
    "num_outputs_uneven": (18, dict(axis=3, num_outputs=4), None, 4, "SLICE"),  # 7 -> 2, 2, 2, 1
    "num_outputs_even": (18, dict(axis=-3, num_outputs=2), None, 2, "SPLIT"),
}


@pytest.mark.parametrize("fed", LAYOUTS)
@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_split(case, fed):
    opset, attrs, split, count, code = SPLIT_CASES[case]
    x_shape = [1, 4, 4, 7 if case == "num_outputs_uneven" else 6]
    outputs = [f"y{k}" for k in range(count)]
    inputs, inits = ["a"], []
    if split is not None:
        inputs.append("split")
        inits.append(const("split", i64(*split)))
    ops = run_op(helper.make_node("Split", inputs, outputs, **attrs), x_shape, inits, fed=fed, opset=opset,
                 outputs=outputs)
    assert code in ops
    if code == "SLICE":
        assert ops.count("SLICE") == count


def test_split_errors():
    dynamic = make_model([helper.make_node("Split", ["x"], ["a", "b"], name="split18", axis=0, num_outputs=2)],
                         [tensor("x", ["n", 4])], [tensor("a", None), tensor("b", None)], opset=18)
    err = import_error(dynamic)
    assert "split18" in err.message and "static" in err.message


# -- Gather ---------------------------------------------------------------------------------------------
GATHER_CASES = {  # axis, constant indices
    "channels": (1, [3, 0, 2]),
    "negative_indices": (1, [-1, 1, -4]),
    "negative_axis_2d_indices": (-1, [[0, 5], [-2, 2]]),
    "scalar_channel": (1, -2),
    "scalar_height": (2, 4),
    "batch": (0, [1, 0, 1]),
}


@pytest.mark.parametrize("fed", LAYOUTS)
@pytest.mark.parametrize("case", sorted(GATHER_CASES))
def test_gather_constant_indices(case, fed):
    axis, indices = GATHER_CASES[case]
    rank5 = np.ndim(indices) == 2  # a rank-5 result could not be transposed back: GATHER reads NCHW then
    ops = run_op(helper.make_node("Gather", ["a", "idx"], ["y"], axis=axis), [2, 4, 5, 6],
                 [const("idx", np.asarray(indices, np.int64))], fed=fed, layout_free=not rank5)
    assert "GATHER" in ops
    if rank5 and fed == "nhwc":
        assert ops == ["TRANSPOSE", "CONV_2D", "TRANSPOSE", "GATHER"]


@pytest.mark.parametrize("indices_shape", [[3], [], [2, 2]])
def test_gather_computed_indices(indices_shape):
    """Computed indices may count from the end (negative): SELECT(LESS(i, 0), ADD(i, 4), i) before GATHER."""
    node = helper.make_node("Gather", ["a", "idx"], ["y"], axis=1)
    idx = np.asarray(RNG.integers(-4, 4, indices_shape), np.int64)
    if idx.ndim:
        idx.flat[:2] = [-1, 2]
    ops = run_op(node, [1, 4, 3, 3], fed="nhwc", extra_inputs=[tensor("idx", indices_shape, TensorProto.INT64)],
                 feeds={"idx": idx}, layout_free=len(indices_shape) < 2)
    assert [op for op in ops if op in ("LESS", "ADD", "SELECT", "GATHER")] == ["LESS", "ADD", "SELECT", "GATHER"]
    for value in (-4, -1, 0, 3):  # both ends, from either side
        feeds = {"x": rnd(1, 4, 3, 3), "idx": np.full(indices_shape, value, np.int64)}
        model = make_model([helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)],
                           [tensor("x", [1, 4, 3, 3]), tensor("idx", indices_shape, TensorProto.INT64)],
                           [tensor("y", None)])
        check_against_ort(model, feeds)


def test_gather_embedding_and_scalar_of_vector():
    """A constant table read with computed ids (embedding lookup); a scalar index of a vector (rank 0)."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0),
             helper.make_node("Gather", ["v", "k"], ["z"], axis=0)]
    model = make_model(nodes, [tensor("ids", [2, 3], TensorProto.INT64), tensor("v", [5])],
                       [tensor("y", None), tensor("z", None)], [const("table", rnd(7, 4)), const("k", np.int64(-2))])
    check_against_ort(model, {"ids": RNG.integers(0, 7, (2, 3)).astype(np.int64), "v": rnd(5)})


def test_gather_errors():
    model = make_model([helper.make_node("Gather", ["x", "idx"], ["y"], name="bad_gather", axis=1)],
                       [tensor("x", [2, 3])], [tensor("y", None)], [const("idx", i64(0, 3))])
    err = import_error(model)
    assert "bad_gather" in err.message and "out of range" in err.message
    # computed indices along a dimension of unknown size: a negative one could not be resolved
    model = make_model([helper.make_node("Gather", ["x", "idx"], ["y"], name="bad_gather", axis=1)],
                       [tensor("x", [2, "n"]), tensor("idx", [2], TensorProto.INT64)], [tensor("y", None)])
    err = import_error(model)
    assert "bad_gather" in err.message and "static dimension" in err.message


# -- Tile, Expand ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fed", LAYOUTS)
@pytest.mark.parametrize("repeats", [(1, 2, 1, 3), (2, 1, 1, 1), (1, 1, 1, 1)])
def test_tile(repeats, fed):
    ops = run_op(helper.make_node("Tile", ["a", "r"], ["y"]), [1, 3, 2, 4], [const("r", i64(*repeats))], fed=fed)
    assert ("TILE" in ops) == (repeats != (1, 1, 1, 1))


def test_expand_channel_vector_held_nhwc():
    """[1, C, 1, 1] from a global pool of a Conv (held NHWC) broadcast over H and W: one TILE."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("GlobalAveragePool", ["c"], ["p"]),
             helper.make_node("Expand", ["p", "shape"], ["y"])]
    model = make_model(nodes, [tensor("x", [1, 3, 4, 5])], [tensor("y", None)],
                       [const("w", rnd(6, 3, 1, 1)), const("shape", i64(1, 6, 4, 5))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 4, 5)})
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "AVERAGE_POOL_2D", "TILE", "TRANSPOSE"]


@pytest.mark.parametrize("x_shape,shape", [([3, 1], [2, 3, 4]), ([3, 1], [1, 1]), ([2, 1, 4], [3, 1, 1, 1]),
                                           ([4], [2, 1, 4])])
def test_expand_shapes(x_shape, shape):
    model = make_model([helper.make_node("Expand", ["x", "s"], ["y"])], [tensor("x", x_shape)], [tensor("y", None)],
                       [const("s", i64(*shape))])
    check_against_ort(model, {"x": rnd(*x_shape)})


def test_tile_expand_errors():
    tile = make_model([helper.make_node("Tile", ["x", "r"], ["y"], name="dyn_tile")],
                      [tensor("x", [2, 3]), tensor("r", [2], TensorProto.INT64)], [tensor("y", None)])
    err = import_error(tile)
    assert "dyn_tile" in err.message and "repeats" in err.message
    expand = make_model([helper.make_node("Expand", ["x", "s"], ["y"], name="dyn_expand")],
                        [tensor("x", [2, 1]), tensor("s", [2], TensorProto.INT64)], [tensor("y", None)])
    err = import_error(expand)
    assert "dyn_expand" in err.message and "shape" in err.message
    unknown = make_model([helper.make_node("Expand", ["x", "s"], ["y"], name="maybe_broadcast")],
                         [tensor("x", ["n", 3])], [tensor("y", None)], [const("s", i64(4, 3))])
    err = import_error(unknown)
    assert "maybe_broadcast" in err.message and "unknown" in err.message


# -- DepthToSpace, SpaceToDepth -------------------------------------------------------------------------------
@pytest.mark.parametrize("fed", LAYOUTS)
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode, fed):
    ops = run_op(helper.make_node("DepthToSpace", ["a"], ["y"], blocksize=2, mode=mode), [1, 12, 3, 2], fed=fed)
    assert "DEPTH_TO_SPACE" in ops and ("CHANNEL_SHUFFLE" in ops) == (mode == "CRD")


@pytest.mark.parametrize("fed", LAYOUTS)
def test_space_to_depth(fed):
    ops = run_op(helper.make_node("SpaceToDepth", ["a"], ["y"], blocksize=2), [1, 3, 4, 6], fed=fed)
    assert "SPACE_TO_DEPTH" in ops


def test_depth_space_errors():
    bad_mode = make_model([helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=2, mode="XYZ")],
                          [tensor("x", [1, 8, 2, 2])], [tensor("y", [1, 2, 4, 4])])
    err = import_error(bad_mode)
    assert "d2s" in err.message and "XYZ" in err.message
    int_data = make_model([helper.make_node("SpaceToDepth", ["x"], ["y"], name="s2d_int", blocksize=2)],
                          [tensor("x", [1, 1, 2, 2], TensorProto.INT32)], [tensor("y", None, TensorProto.INT32)])
    err = import_error(int_data)
    assert "s2d_int" in err.message and "SPACE_TO_DEPTH" in err.message


# -- quantized (QDQ) ----------------------------------------------------------------------------------------
Q_IN = (0.03, 120)


def qdq_model(node, x_shape, inits=(), *, out_params=Q_IN, outputs=("y",), opset=13):
    """x -> Q -> DQ -> node -> (Q -> DQ per output): every tensor in uint8 with the given parameters."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["a"]), node]
    inits = list(inits) + [const("s_in", np.float32(Q_IN[0])), const("z_in", np.uint8(Q_IN[1])),
                           const("s_out", np.float32(out_params[0])), const("z_out", np.uint8(out_params[1]))]
    for o in outputs:
        nodes += [helper.make_node("QuantizeLinear", [f"{o}_f", "s_out", "z_out"], [f"{o}_q"]),
                  helper.make_node("DequantizeLinear", [f"{o}_q", "s_out", "z_out"], [o])]
    node.output[:] = [f"{o}_f" for o in outputs]
    return make_model(nodes, [tensor("x", x_shape)], [tensor(o, None) for o in outputs], inits, opset=opset)


QDQ_CASES = {
    "slice_steps": (lambda: helper.make_node("Slice", ["a", "s", "e", "ax", "st"], ["_"]), [1, 4, 5, 6],
                    [const("s", i64(1, -1)), const("e", i64(I64_MAX, I64_MIN)), const("ax", i64(1, 3)),
                     const("st", i64(2, -2))], 1, "STRIDED_SLICE"),
    "split_equal": (lambda: helper.make_node("Split", ["a"], ["_"], axis=1), [1, 4, 3, 3], [], 2, "SPLIT"),
    "split_unequal": (lambda: helper.make_node("Split", ["a", "sp"], ["_"], axis=2), [1, 2, 5, 3],
                      [const("sp", i64(2, 3))], 2, "SLICE"),
    "gather": (lambda: helper.make_node("Gather", ["a", "i"], ["_"], axis=1), [1, 4, 3, 3],
               [const("i", i64(3, -4, 1))], 1, "GATHER"),
    "tile": (lambda: helper.make_node("Tile", ["a", "r"], ["_"]), [2, 3], [const("r", i64(2, 2))], 1, "TILE"),
    "expand": (lambda: helper.make_node("Expand", ["a", "sh"], ["_"]), [3, 1], [const("sh", i64(2, 3, 4))], 1,
               "TILE"),
    "depth_to_space_crd": (lambda: helper.make_node("DepthToSpace", ["a"], ["_"], blocksize=2, mode="CRD"),
                           [1, 8, 2, 3], [], 1, "DEPTH_TO_SPACE"),
    "space_to_depth": (lambda: helper.make_node("SpaceToDepth", ["a"], ["_"], blocksize=2), [1, 2, 4, 4], [], 1,
                       "SPACE_TO_DEPTH"),
}


@pytest.mark.parametrize("requantized", [False, True], ids=["same-params", "other-params"])
@pytest.mark.parametrize("case", sorted(QDQ_CASES))
def test_qdq_value_preserving_8bit(case, requantized):
    make_node, x_shape, inits, count, code = QDQ_CASES[case]
    out_params = (0.05, 100) if requantized else Q_IN
    outputs = [f"y{k}" for k in range(count)]
    model = qdq_model(make_node(), x_shape, inits, out_params=out_params, outputs=outputs)
    data = model.SerializeToString()
    imported = import_onnx(data)
    feeds = {"x": rnd(*x_shape, scale=1.5)}
    got, ref = imported.run(feeds), ort_run(data, feeds)
    for o in outputs:
        assert_quant_close(got[o], ref[o], out_params[0], max_steps=0 if not requantized else 1, argmax=False)
    hal = imported.model.hal_model().main
    op = next(op for op in hal.operations if op.type.name == code)
    assert hal.operands[op.inputs[0]].type.code == OperandCode.TENSOR_QUANT8_ASYMM
    ops = op_types(imported)
    # QUANTIZE of the input, DEQUANTIZE of each output; other parameters add one DEQUANTIZE + QUANTIZE each.
    assert ops.count("QUANTIZE") == 1 + (count if requantized else 0)
    assert ops.count("DEQUANTIZE") == count * (2 if requantized else 1)


# -- the channel shuffle pattern -------------------------------------------------------------------------------
def shuffle_nodes(x, y, shape, split_shape, perm, prefix="sh"):
    return ([helper.make_node("Reshape", [x, f"{prefix}_s1"], [f"{prefix}_r"]),
             helper.make_node("Transpose", [f"{prefix}_r"], [f"{prefix}_t"], **({"perm": perm} if perm else {})),
             helper.make_node("Reshape", [f"{prefix}_t", f"{prefix}_s2"], [y])],
            [const(f"{prefix}_s1", i64(*split_shape)), const(f"{prefix}_s2", i64(*shape))])


@pytest.mark.parametrize("shape,split_shape,perm,groups,axis_held", [
    ([1, 6, 3, 4], [1, 2, 3, 3, 4], [0, 2, 1, 3, 4], 2, 3),  # the ONNX classic ShuffleNet after a Conv: NHWC axis 3
    ([2, 12, 5], [2, 3, 4, 5], [0, 2, 1, 3], 3, 1),
    ([12], [4, 3], None, 4, 0),  # the default Transpose (reversing) of a rank-2 split of a vector
    ([2, 3, 8], [2, 3, 2, -1], [0, 1, 3, 2], 2, 2),  # the last axis; -1 in the shape
])
def test_shuffle_pattern_hand_built(shape, split_shape, perm, groups, axis_held):
    if len(shape) == 4:
        nodes, inits = shuffle_nodes("c", "y", shape, split_shape, perm)
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"])] + nodes
        inits.append(const("w", rnd(6, 6, 1, 1)))
    else:
        nodes, inits = shuffle_nodes("x", "y", shape, split_shape, perm)
    model = make_model(nodes, [tensor("x", shape)], [tensor("y", None)], inits, opset=9 if len(shape) == 4 else 13)
    imported, _, _ = check_against_ort(model, {"x": rnd(*shape)})
    ops = op_types(imported)
    assert ops.count("CHANNEL_SHUFFLE") == 1 and "RESHAPE" not in ops
    assert ops.count("TRANSPOSE") == (2 if len(shape) == 4 else 0)
    (entry,) = [op for op in imported.describe_dict()["operations"] if op["type"] == "CHANNEL_SHUFFLE"]
    assert entry["inputs"][1].endswith(f"={groups}") and entry["inputs"][2].endswith(f"={axis_held}"), entry


@pytest.mark.parametrize("variant", ["other_perm", "not_merged_back", "intermediate_used", "not_split_axis"])
def test_shuffle_pattern_left_alone(variant):
    shape, split_shape, perm, back = [2, 6, 5], [2, 2, 3, 5], [0, 2, 1, 3], [2, 6, 5]
    if variant == "other_perm":
        perm = [0, 1, 3, 2]
    elif variant == "not_merged_back":
        back = [2, 3, 10]
    elif variant == "not_split_axis":
        split_shape = [2, 2, 5, 3]
    nodes, inits = shuffle_nodes("x", "y", back, split_shape, perm)
    outputs = [tensor("y", None)] + ([tensor("sh_t", None)] if variant == "intermediate_used" else [])
    model = make_model(nodes, [tensor("x", shape)], outputs, inits)
    imported, _, _ = check_against_ort(model, {"x": rnd(*shape)})
    assert "CHANNEL_SHUFFLE" not in op_types(imported)


def test_shuffle_rewrite_keeps_the_graph_consistent():
    """The rewritten graph: one ChannelShuffle node (group, axis, _origin not exported), QDQ pairs moved
    after it with the 4-D shape, and shape inference still runs over it."""
    from mlts.models.onnx_import import folding, loader, passes, patterns

    shape = [1, 6, 2, 2]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Reshape", ["xd", "s1"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["rd"]),
             helper.make_node("Transpose", ["rd"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s2"], ["y"])]
    inits = [const("s", np.float32(0.02)), const("z", np.uint8(128)), const("s1", i64(1, 3, 2, 2, 2)),
             const("s2", i64(*shape))]
    model = make_model(nodes, [tensor("x", shape)], [tensor("y", None)], inits)
    _, graph = loader.load(model.SerializeToString())
    folding.simplify(graph)
    passes.remove_identities(graph)
    patterns.rewrite_patterns(graph)
    assert [n.op_type for n in graph.nodes] == ["QuantizeLinear", "DequantizeLinear", "ChannelShuffle",
                                                 "QuantizeLinear", "DequantizeLinear"]
    shuffle = graph.nodes[2]
    assert (shuffle.attrs["group"], shuffle.attrs["axis"]) == (3, 1)
    assert "Reshape+Transpose+Reshape as ChannelShuffle" in shuffle.describe()
    assert [a.name for a in shuffle.to_proto().attribute] == ["group", "axis"]
    assert graph.nodes[4].outputs == ["y"]
    for name in (shuffle.outputs[0], graph.nodes[3].outputs[0]):
        assert graph.value(name).shape == tuple(shape)
    folding.infer_shapes(graph)
    assert graph.value("y").shape == tuple(shape)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["QUANTIZE", "CHANNEL_SHUFFLE", "DEQUANTIZE"]
    x = rnd(*shape)
    assert_quant_close(imported.run({"x": x})["y"], ort_run(model, {"x": x})["y"], 0.02, max_steps=0, argmax=False)


# -- the channel shuffle as torch writes it ---------------------------------------------------------------------
def torch_shuffle_model(conv: bool, *, dynamic_arithmetic: bool = False) -> onnx.ModelProto:
    torch = pytest.importorskip("torch")

    class Shuffle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(6, 6, 1) if conv else torch.nn.Identity()

        def forward(self, x):
            x = self.conv(x)
            n, c, h, w = x.size()
            x = x.view(n, 3, c // 3, h, w)  # ShuffleNetV2's channel_shuffle with 3 groups
            x = torch.transpose(x, 1, 2).contiguous()
            return x.view(n, -1, h, w)

    torch.manual_seed(0)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Shuffle().eval(), torch.randn(1, 6, 3, 4), f, dynamo=False, opset_version=13,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "n"}, "y": {0: "n"}} if dynamic_arithmetic else None)
    model = onnx.load_from_string(f.getvalue())
    if dynamic_arithmetic:  # the Reshape shapes stay Shape -> Gather -> Concat arithmetic; the batch is fixed here
        assert "Shape" in {n.op_type for n in model.graph.node}
        for vi in (model.graph.input[0], model.graph.output[0]):
            vi.type.tensor_type.shape.dim[0].Clear()
            vi.type.tensor_type.shape.dim[0].dim_value = 1
    return model


@pytest.mark.parametrize("conv,arithmetic", [(False, False), (True, False), (True, True)],
                         ids=["plain", "after-conv", "shape-arithmetic"])
def test_torch_channel_shuffle(conv, arithmetic):
    model = torch_shuffle_model(conv, dynamic_arithmetic=arithmetic)
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 6, 3, 4)})
    ops = op_types(imported)
    assert ops == (["TRANSPOSE", "CONV_2D", "CHANNEL_SHUFFLE", "TRANSPOSE"] if conv else ["CHANNEL_SHUFFLE"])


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_torch_channel_shuffle_quantized_by_onnxruntime(fmt):
    """quantize_static wraps Reshape and Transpose in Q/DQ pairs (QDQ) or runs them on uint8 (QOperator):
    either way one 8-bit CHANNEL_SHUFFLE."""
    data = quantize(torch_shuffle_model(True), "x", [1, 6, 3, 4], fmt=fmt, per_channel=False)
    imported = import_onnx(data)
    ops = op_types(imported)
    assert ops == ["QUANTIZE", "TRANSPOSE", "CONV_2D", "CHANNEL_SHUFFLE", "DEQUANTIZE", "TRANSPOSE"]
    for k in range(2):
        x = np.random.default_rng(k).uniform(-1, 1, (1, 6, 3, 4)).astype(np.float32)
        step = float(onnx.numpy_helper.to_array([t for t in onnx.load_from_string(data).graph.initializer
                                                 if t.name.endswith("_scale") and "Conv_output" in t.name][0]))
        assert_quant_close(imported.run({"x": x})["y"], ort_run(data, {"x": x})["y"], step, max_steps=1, argmax=False)
