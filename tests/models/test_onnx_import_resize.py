"""Resize / Upsample and ConvTranspose imported into RESIZE_* / TRANSPOSE_CONV_2D, against onnxruntime
(float: CTS tolerance; 8-bit: within quantization steps) and onnx.reference where onnxruntime departs
from the ONNX specification."""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import (assert_float_close, assert_quant_close, check_against_ort, const,  # noqa: E402
                                 make_model, op_types, ort_run, quantize, tensor)

from mlts.models import import_onnx  # noqa: E402
from mlts.runtime import MltsError, OperandCode, ResultCode  # noqa: E402

pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(4321)


def rnd(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def assert_import_error(model, *fragments):
    with pytest.raises(MltsError) as info:
        import_onnx(model.SerializeToString())
    err = info.value
    assert err.code == ResultCode.BAD_DATA
    assert "node 'n'" in err.message, err.message
    for fragment in fragments:
        assert fragment in err.message, err.message
    return err.message


def resize_model(x_shape, out_hw=None, scales=None, *, opset=19, conv=False, **attrs):
    """x -> [Conv 1x1 ->] Resize(sizes or scales over H, W) -> y."""
    inits, nodes, src = [], [], "x"
    if conv:
        nodes.append(helper.make_node("Conv", ["x", "cw"], ["c"]))
        inits.append(const("cw", rnd(x_shape[1], x_shape[1], 1, 1, scale=0.5)))
        src = "c"
    if out_hw is not None:
        inits += [const("sz", np.asarray(list(x_shape[:2]) + list(out_hw), np.int64))]
        ins = [src, "", "", "sz"]
    else:
        inits += [const("sc", np.asarray(scales, np.float32))]
        ins = [src, "", "sc"]
    nodes.append(helper.make_node("Resize", ins, ["y"], name="n", **attrs))
    return make_model(nodes, [tensor("x", x_shape)], [tensor("y", None)], inits, opset=opset)


def resize_op(imported):
    ops = [op for op in imported.describe_dict()["operations"] if op["type"].startswith("RESIZE")]
    assert len(ops) == 1
    return ops[0]


def flags(imported) -> tuple[bool, bool, bool]:
    """(nchw, align_corners, half_pixel_centers) of the one RESIZE operation."""
    return tuple(s.endswith("=True") for s in resize_op(imported)["inputs"][3:6])


# (mode, coordinate_transformation_mode, nearest_mode, in H x W, out H x W, expected NNAPI (align, half))
SUPPORTED = [
    ("nearest", "asymmetric", "floor", (4, 5), (8, 10), (False, False)),         # torch nearest
    ("nearest", "half_pixel", "round_prefer_floor", (4, 5), (8, 10), (False, False)),  # ONNX default, x2
    ("nearest", "half_pixel", "round_prefer_ceil", (4, 5), (6, 10), (False, True)),
    ("nearest", "half_pixel", "round_prefer_ceil", (9, 6), (3, 2), (False, True)),
    ("nearest", "half_pixel", "round_prefer_floor", (8, 6), (4, 3), (False, False)),
    ("nearest", "pytorch_half_pixel", "round_prefer_ceil", (5, 4), (7, 9), (False, True)),
    ("nearest", "tf_half_pixel_for_nn", "floor", (4, 5), (7, 9), (False, True)),  # TFLite half_pixel_centers
    ("nearest", "align_corners", "round_prefer_ceil", (4, 5), (7, 9), (True, False)),
    ("nearest", "asymmetric", "floor", (6, 8), (3, 4), (False, False)),
    ("nearest", "half_pixel_symmetric", "round_prefer_ceil", (4, 5), (6, 10), (False, True)),
    ("linear", "asymmetric", None, (4, 5), (8, 10), (False, False)),
    ("linear", "asymmetric", None, (5, 6), (7, 4), (False, False)),
    ("linear", "half_pixel", None, (4, 5), (8, 10), (False, True)),
    ("linear", "half_pixel", None, (6, 9), (4, 3), (False, True)),
    ("linear", "pytorch_half_pixel", None, (4, 5), (7, 11), (False, True)),
    ("linear", "align_corners", None, (4, 5), (7, 11), (True, False)),
    ("linear", "align_corners", None, (4, 5), (1, 3), (True, False)),
    ("linear", "half_pixel_symmetric", None, (4, 5), (9, 11), (False, True)),
]


@pytest.mark.parametrize("conv", [False, True], ids=["direct", "nhwc"])
@pytest.mark.parametrize("case", range(len(SUPPORTED)))
def test_resize_modes(case, conv):
    mode, coord, nearest, in_hw, out_hw, expected = SUPPORTED[case]
    attrs = dict(mode=mode, coordinate_transformation_mode=coord)
    if nearest:
        attrs["nearest_mode"] = nearest
    x_shape = [2, 3, *in_hw]
    imported, _, _ = check_against_ort(resize_model(x_shape, out_hw, conv=conv, **attrs), {"x": rnd(*x_shape)})
    nchw, align, half = flags(imported)
    assert (align, half) == expected
    code = "RESIZE_BILINEAR" if mode == "linear" else "RESIZE_NEAREST_NEIGHBOR"
    if conv:  # the Conv's NHWC result is resized in place; the only TRANSPOSEs are at the graph boundary
        assert op_types(imported) == ["TRANSPOSE", "CONV_2D", code, "TRANSPOSE"] and not nchw
    else:  # an NCHW graph input is resized in NCHW: no TRANSPOSE at all
        assert op_types(imported) == [code] and nchw


@pytest.mark.parametrize("mode,scales", [("nearest", [1, 1, 2, 3]), ("linear", [1, 1, 2, 2]),
                                         ("linear", [1, 1, 0.5, 0.25]), ("nearest", [1, 1, 1, 2])])
def test_resize_with_scales(mode, scales):
    model = resize_model([1, 2, 4, 8], scales=scales, mode=mode, coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor", opset=13)
    check_against_ort(model, {"x": rnd(1, 2, 4, 8)})


def test_resize_non_integer_scale_uses_the_given_scale():
    """scale 1.7 on 5 rows: output floor(8.5) = 8, source rows i / 1.7 (not i x 5 / 8): nearest asymmetric
    floor has no RESIZE_NEAREST_NEIGHBOR equivalent there (row 5 reads 2, NNAPI's floor(5 x 5 / 8) = 3), so
    it gathers those rows; linear asymmetric has no equivalent and says so."""
    model = resize_model([1, 1, 5, 4], scales=[1, 1, 1.7, 1], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    x = rnd(1, 1, 5, 4)
    imported, _, _ = check_against_ort(model, {"x": x})
    assert op_types(imported) == ["GATHER"]
    np.testing.assert_array_equal(imported.run({"x": x})["y"], x[:, :, [0, 0, 1, 1, 2, 2, 3, 4]])
    model = resize_model([1, 1, 5, 4], scales=[1, 1, 1.7, 1], mode="linear",
                         coordinate_transformation_mode="asymmetric")
    assert_import_error(model, "mode 'linear'", "'asymmetric'", "5 -> 8 (scale 1.7)", "no exact NNAPI")


@pytest.mark.parametrize("conv", [False, True], ids=["direct", "nhwc"])
@pytest.mark.parametrize("coord,nearest,in_hw,out_hw", [
    ("asymmetric", "round_prefer_ceil", (4, 5), (8, 10)),
    ("half_pixel", "floor", (4, 5), (8, 10)),
    ("half_pixel", "ceil", (4, 4), (8, 8)),
    ("half_pixel", "round_prefer_floor", (2, 4), (1, 3)),
    ("tf_half_pixel_for_nn", "round_prefer_ceil", (4, 4), (12, 12)),
    ("align_corners", "floor", (4, 5), (8, 10)),
])
def test_resize_nearest_without_nnapi_placement_gathers(coord, nearest, in_hw, out_hw, conv):
    """Nearest placements RESIZE_NEAREST_NEIGHBOR cannot make copy the rows and columns ONNX picks: one GATHER
    per resized axis, in the layout the input is held in."""
    x_shape = [2, 3, *in_hw]
    model = resize_model(x_shape, out_hw, conv=conv, mode="nearest", coordinate_transformation_mode=coord,
                         nearest_mode=nearest)
    imported, _, _ = check_against_ort(model, {"x": rnd(*x_shape)})
    gathers = ["GATHER"] * sum(i != o for i, o in zip(in_hw, out_hw))
    assert op_types(imported) == (["TRANSPOSE", "CONV_2D", *gathers, "TRANSPOSE"] if conv else gathers)


def test_resize_nearest_other_ranks_gather():
    """Nearest resizes of other ranks or of more than two axes: GATHERs too (NNAPI resizes 4-D tensors)."""
    model = make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], name="n", mode="nearest")],
                       [tensor("x", [1, 4, 5])], [tensor("y", None)], [const("sc", np.asarray([1, 1, 2], np.float32))])
    check_against_ort(model, {"x": rnd(1, 4, 5)})
    model = resize_model([1, 2, 4, 4], scales=[1, 2, 2, 2], mode="nearest", coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor")
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 2, 4, 4)})
    assert op_types(imported) == ["GATHER"] * 3


def test_resize_linear_one_resize_per_axis():
    """pytorch_half_pixel 4 -> 1 rows (the row at 0) and 5 -> 10 columns (half-pixel): no single NNAPI placement,
    one RESIZE_BILINEAR per axis (plain for the rows, half_pixel_centers for the columns)."""
    model = resize_model([1, 2, 4, 5], (1, 10), mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 2, 4, 5)})
    ops = [op for op in imported.describe_dict()["operations"] if op["type"] == "RESIZE_BILINEAR"]
    assert [tuple(s.endswith("=True") for s in op["inputs"][4:6]) for op in ops] == [(False, False), (False, True)]


def test_resize_align_corners_fractional_scale_follows_onnxruntime():
    """align_corners with scale 0.6 on 4 columns: 2 outputs at 0 and 3 (onnxruntime and torch divide by the
    output size - 1; onnx.reference by 4 x 0.6 - 1 = 1.4)."""
    model = resize_model([1, 1, 2, 4], scales=[1, 1, 0.6, 0.6], mode="linear",
                         coordinate_transformation_mode="align_corners")
    x = rnd(1, 1, 2, 4)
    imported, _, _ = check_against_ort(model, {"x": x})
    np.testing.assert_allclose(imported.run({"x": x})["y"], x[:, :, :1, [0, 3]], rtol=1e-6)


@pytest.mark.parametrize("policy,sizes", [("not_larger", (7, 8)), ("not_smaller", (7, 8)),
                                          ("not_larger", (1, 3)), ("not_smaller", (3, 5))])
def test_resize_keep_aspect_ratio_policy(policy, sizes):
    """One scale for both axes (the smallest / largest sizes / in), output sizes rounded half up from it."""
    model = make_model([helper.make_node("Resize", ["x", "", "", "sz"], ["y"], name="n", mode="nearest", axes=[2, 3],
                                         keep_aspect_ratio_policy=policy, coordinate_transformation_mode="asymmetric",
                                         nearest_mode="floor")],
                       [tensor("x", [1, 2, 2, 4])], [tensor("y", None)], [const("sz", np.asarray(sizes, np.int64))],
                       opset=18)
    x = rnd(1, 2, 2, 4)
    check_against_ort(model, {"x": x})
    np.testing.assert_array_equal(import_onnx(model.SerializeToString()).run({"x": x})["y"],
                                  ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("coord,scales", [("tf_half_pixel_for_nn", [1, 1, 2, 2]),
                                          ("half_pixel_symmetric", [1, 1, 2.3, 2.94])])
def test_resize_linear_without_nnapi_equivalent(coord, scales):
    assert_import_error(resize_model([1, 2, 2, 2], scales=scales, mode="linear", coordinate_transformation_mode=coord),
                        "mode 'linear'", f"'{coord}'", "no exact NNAPI equivalent")


@pytest.mark.parametrize("attrs,inits_extra,fragment", [
    (dict(mode="cubic"), {}, "mode 'cubic'"),
    (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"), {}, "'tf_crop_and_resize'"),
    (dict(mode="nearest", exclude_outside=1), {}, "exclude_outside"),
    (dict(mode="linear", antialias=1), {"down": True}, "antialias"),
    (dict(mode="nearest", keep_aspect_ratio_policy="fit"), {}, "keep_aspect_ratio_policy 'fit'"),
])
def test_resize_unsupported_attributes(attrs, inits_extra, fragment):
    out_hw = (2, 2) if inits_extra.get("down") else (8, 8)
    assert_import_error(resize_model([1, 2, 4, 4], out_hw, **attrs), fragment)


def test_resize_unsupported_shapes():
    # a 3-D linear resize
    model = make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], name="n", mode="linear")],
                       [tensor("x", [1, 4, 5])], [tensor("y", None)], [const("sc", np.asarray([1, 1, 2], np.float32))])
    assert_import_error(model, "3-D tensor", "two dimensions of a 4-D tensor")
    # three linearly resized dimensions of a 4-D tensor
    model = resize_model([1, 2, 4, 4], scales=[1, 2, 2, 2], mode="linear")
    assert_import_error(model, "resizing dimensions [1, 2, 3]")
    # dynamic spatial size
    model = make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], name="n", mode="nearest")],
                       [tensor("x", [1, 2, "h", 4])], [tensor("y", None)],
                       [const("sc", np.asarray([1, 1, 2, 2], np.float32))])
    assert_import_error(model, "static input size")


def test_resize_identity_emits_nothing():
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"]),
                        helper.make_node("Resize", ["c", "", "sc"], ["y"], name="n", mode="linear")],
                       [tensor("x", [1, 2, 4, 4])], [tensor("y", None)],
                       [const("w", rnd(2, 2, 1, 1)), const("sc", np.ones(4, np.float32))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 2, 4, 4)})
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "TRANSPOSE"]


def test_resize_nhwc_onnx_tensor_in_place():
    """A channels-last ONNX tensor (tf2onnx without the NCHW rewrite) is resized over its axes 1 and 2 as is."""
    model = make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], name="n", mode="linear",
                                         coordinate_transformation_mode="half_pixel")],
                       [tensor("x", [1, 4, 5, 3])], [tensor("y", None)], [const("sc", np.asarray([1, 2, 2, 1],
                                                                                              np.float32))])
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 4, 5, 3)})
    assert op_types(imported) == ["RESIZE_BILINEAR"] and flags(imported) == (False, False, True)


def test_resize_opset18_axes():
    model = make_model([helper.make_node("Resize", ["x", "", "", "sz"], ["y"], name="n", mode="nearest",
                                         axes=[-1, 2], coordinate_transformation_mode="asymmetric",
                                         nearest_mode="floor")],
                       [tensor("x", [1, 2, 3, 4])], [tensor("y", None)], [const("sz", np.asarray([8, 6], np.int64))],
                       opset=18)
    check_against_ort(model, {"x": rnd(1, 2, 3, 4)})


def test_resize_half_pixel_symmetric_follows_the_specification():
    """Downsampling 9 -> 3 with half_pixel_symmetric + floor lands exactly on source pixels 1, 4, 7: onnxruntime's
    float32 arithmetic falls just below (0, 3, 7); the ONNX reference implementation and NNAPI agree."""
    model = resize_model([1, 1, 9, 6], (3, 2), mode="nearest", coordinate_transformation_mode="half_pixel_symmetric",
                         nearest_mode="floor")
    x = rnd(1, 1, 9, 6)
    got = import_onnx(model.SerializeToString()).run({"x": x})["y"]
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
    np.testing.assert_array_equal(got, x[:, :, [1, 4, 7]][:, :, :, [1, 4]])


@pytest.mark.parametrize("opset,op,mode,scales", [
    (10, "Resize", "nearest", [1, 1, 2, 3]), (10, "Resize", "nearest", [1, 1, 0.5, 0.5]),
    (10, "Resize", "linear", [1, 1, 2, 2]), (10, "Resize", "linear", [1, 1, 0.5, 1]),
    (9, "Upsample", "nearest", [1, 1, 2, 2]), (9, "Upsample", "linear", [1, 1, 3, 2]),
    (7, "Upsample", "nearest", [1, 1, 2, 3]), (7, "Upsample", "bilinear", [1, 1, 2, 2]),
])
def test_old_resize_and_upsample(opset, op, mode, scales):
    """Opset 10 Resize and Upsample: asymmetric coordinates, floor (ceil when downsampling)."""
    if opset == 7:
        node = helper.make_node(op, ["x"], ["y"], name="n", mode=mode, scales=[float(s) for s in scales])
        inits = []
    else:
        node = helper.make_node(op, ["x", "sc"], ["y"], name="n", mode=mode)
        inits = [const("sc", np.asarray(scales, np.float32))]
    model = make_model([node], [tensor("x", [1, 2, 4, 6])], [tensor("y", None)], inits, opset=opset)
    if mode == "bilinear":  # not an onnxruntime mode name: its reference is the same graph with "linear"
        x = rnd(1, 2, 4, 6)
        got = import_onnx(model.SerializeToString()).run({"x": x})["y"]
        (mode_attr,) = [a for a in model.graph.node[0].attribute if a.name == "mode"]
        mode_attr.s = b"linear"
        assert_float_close(got, ort_run(model, {"x": x})["y"])
    else:
        check_against_ort(model, {"x": rnd(1, 2, 4, 6)})


def test_resize_opset10_downsampling_ceil():
    """Opset 10 nearest downsampling by 0.6 takes ceil(i / 0.6) = 0, 2, 4, 5, 7, 9: NNAPI's half-pixel
    floor((i + 0.5) x 10 / 6) picks the same rows; by 0.8 (10 -> 8) nothing matches: a GATHER of
    ceil(i / 0.8) = 0, 2, 3, 4, 5, 7, 8, 9."""
    def model(scale):
        return make_model([helper.make_node("Resize", ["x", "sc"], ["y"], name="n", mode="nearest")],
                          [tensor("x", [1, 1, 2, 10])], [tensor("y", None)],
                          [const("sc", np.asarray([1, 1, 1, scale], np.float32))], opset=10)
    imported, _, _ = check_against_ort(model(0.6), {"x": rnd(1, 1, 2, 10)})
    assert flags(imported)[1:] == (False, True)
    x = rnd(1, 1, 2, 10)
    imported, _, _ = check_against_ort(model(0.8), {"x": x})
    assert op_types(imported) == ["GATHER"]
    np.testing.assert_array_equal(imported.run({"x": x})["y"], x[..., [0, 2, 3, 4, 5, 7, 8, 9]])


# -- quantized ---------------------------------------------------------------------------------------------
def qdq_resize_model(mode, coord, out_scale, out_zp, dtype=np.uint8, out_hw=(10, 12)):
    elem = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("Resize", ["xf", "", "", "sz"], ["r"], name="n", mode=mode,
                              coordinate_transformation_mode=coord, nearest_mode="floor"),
             helper.make_node("QuantizeLinear", ["r", "os", "oz"], ["y"])]
    inits = [const("s", np.float32(0.03)), const("z", np.asarray(128 if dtype == np.uint8 else 3, dtype)),
             const("os", np.float32(out_scale)), const("oz", np.asarray(out_zp, dtype)),
             const("sz", np.asarray([1, 3, *out_hw], np.int64))]
    return make_model(nodes, [tensor("x", [1, 3, 5, 6])], [tensor("y", [1, 3, *out_hw], elem)], inits)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("mode,coord", [("nearest", "asymmetric"), ("linear", "half_pixel"),
                                        ("linear", "align_corners")])
def test_quantized_resize(mode, coord, dtype):
    model = qdq_resize_model(mode, coord, 0.03, 128 if dtype == np.uint8 else 3, dtype)
    x = rnd(1, 3, 5, 6, scale=1.5)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["QUANTIZE", "RESIZE_BILINEAR" if mode == "linear" else "RESIZE_NEAREST_NEIGHBOR"]
    hal = imported.model.hal_model().main
    (op,) = [o for o in hal.operations if o.type.name.startswith("RESIZE")]
    code = OperandCode.TENSOR_QUANT8_ASYMM if dtype == np.uint8 else OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
    assert hal.operands[op.inputs[0]].type.code == code
    got = imported.run({"x": x})["y"].astype(np.int32)
    ref = ort_run(model, {"x": x})["y"].astype(np.int32)
    assert np.abs(got - ref).max() <= (0 if mode == "nearest" else 1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quantized_nearest_gather(dtype):
    """half_pixel + floor doubling (rows 0, 0, 0, 1, 2, ...): GATHERs of the 8-bit values, then a requantization
    to the output's parameters."""
    model = qdq_resize_model("nearest", "half_pixel", 0.05, 120 if dtype == np.uint8 else -5, dtype)
    x = rnd(1, 3, 5, 6, scale=1.5)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["QUANTIZE", "GATHER", "GATHER", "DEQUANTIZE", "QUANTIZE"]
    got = imported.run({"x": x})["y"].astype(np.int32)
    assert np.abs(got - ort_run(model, {"x": x})["y"].astype(np.int32)).max() <= 1


def test_quantized_resize_per_axis_requantized():
    """pytorch_half_pixel to one row: one RESIZE_BILINEAR per axis on the 8-bit values, the requantization to the
    output's parameters after the second."""
    model = qdq_resize_model("linear", "pytorch_half_pixel", 0.05, 120, out_hw=(1, 12))
    x = rnd(1, 3, 5, 6, scale=1.5)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["QUANTIZE", "RESIZE_BILINEAR", "RESIZE_BILINEAR", "DEQUANTIZE", "QUANTIZE"]
    got = imported.run({"x": x})["y"].astype(np.int32)
    assert np.abs(got - ort_run(model, {"x": x})["y"].astype(np.int32)).max() <= 1


def test_quantized_resize_other_output_parameters_are_requantized():
    model = qdq_resize_model("linear", "half_pixel", 0.05, 120)
    x = rnd(1, 3, 5, 6, scale=1.5)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["QUANTIZE", "RESIZE_BILINEAR", "DEQUANTIZE", "QUANTIZE"]
    got = imported.run({"x": x})["y"].astype(np.int32)
    assert np.abs(got - ort_run(model, {"x": x})["y"].astype(np.int32)).max() <= 1


# -- ConvTranspose -----------------------------------------------------------------------------------------
CONV_TRANSPOSE_CASES = {
    "plain": ((4, 3, 3, 3), {}),
    "stride_pads": ((4, 3, 3, 3), dict(strides=[2, 3], pads=[1, 0, 1, 2])),
    "output_padding": ((4, 3, 3, 3), dict(strides=[2, 3], output_padding=[1, 2], pads=[1, 0, 1, 2])),
    "output_shape": ((4, 3, 3, 3), dict(strides=[2, 2], output_shape=[10, 12])),
    "output_shape_larger": ((4, 3, 3, 3), dict(strides=[2, 2], output_shape=[12, 14])),
    "output_shape_with_padding": ((4, 3, 3, 3), dict(strides=[2, 2], output_padding=[1, 1], output_shape=[11, 13])),
    "output_shape_same_upper": ((4, 3, 3, 3), dict(strides=[2, 2], output_shape=[10, 12], auto_pad="SAME_UPPER")),
    "same_upper": ((4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    "same_lower": ((4, 3, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    "same_lower_1x1": ((4, 3, 1, 1), dict(strides=[3, 2], auto_pad="SAME_LOWER")),
    "valid": ((4, 3, 4, 4), dict(strides=[2, 2], auto_pad="VALID")),
    "dilated": ((4, 3, 3, 2), dict(dilations=[2, 3], pads=[1, 1, 0, 2])),
    "grouped": ((4, 2, 3, 3), dict(group=2, strides=[2, 1])),
    "depthwise": ((4, 1, 3, 3), dict(group=4, strides=[2, 2], pads=[1, 1, 1, 1])),
    "kernel_shape": ((4, 3, 2, 2), dict(kernel_shape=[2, 2], strides=[2, 2])),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("case", sorted(CONV_TRANSPOSE_CASES))
def test_conv_transpose(case, bias):
    w_shape, attrs = CONV_TRANSPOSE_CASES[case]
    out_c = w_shape[1] * attrs.get("group", 1)
    inits = [const("w", rnd(*w_shape, scale=0.5))] + ([const("b", rnd(out_c, scale=0.2))] if bias else [])
    model = make_model([helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], **attrs)],
                       [tensor("x", [2, 4, 5, 6])], [tensor("y", None)], inits)
    imported, _, _ = check_against_ort(model, {"x": rnd(2, 4, 5, 6)})
    assert op_types(imported) == ["TRANSPOSE", "TRANSPOSE_CONV_2D", "TRANSPOSE"]


def test_conv_transpose_between_convs_fused_relu():
    """Conv -> ConvTranspose -> Relu -> Conv: NHWC throughout, Relu fused into TRANSPOSE_CONV_2D."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["c1", "w2", "b2"], ["t"], strides=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("Conv", ["r", "w3"], ["y"])]
    inits = [const("w1", rnd(4, 3, 3, 3, scale=0.3)), const("w2", rnd(4, 5, 3, 3, scale=0.3)),
             const("b2", rnd(5, scale=0.1)), const("w3", rnd(2, 5, 1, 1, scale=0.3))]
    model = make_model(nodes, [tensor("x", [1, 3, 6, 6])], [tensor("y", None)], inits)
    imported, _, _ = check_against_ort(model, {"x": rnd(1, 3, 6, 6)})
    assert op_types(imported) == ["TRANSPOSE", "CONV_2D", "TRANSPOSE_CONV_2D", "CONV_2D", "TRANSPOSE"]
    (op,) = [o for o in imported.describe_dict()["operations"] if o["type"] == "TRANSPOSE_CONV_2D"]
    assert op["inputs"][9].endswith("INT32 =1")  # RELU


def test_conv_transpose_computed_weights():
    model = make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])],
                       [tensor("x", [1, 3, 4, 4]), tensor("w", [3, 2, 3, 3])], [tensor("y", None)])
    check_against_ort(model, {"x": rnd(1, 3, 4, 4), "w": rnd(3, 2, 3, 3)})


def test_conv_transpose_errors():
    def model(x_shape, w_shape, name="n", **attrs):
        return make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name=name, **attrs)],
                          [tensor("x", x_shape)], [tensor("y", None)], [const("w", rnd(*w_shape))])
    assert_import_error(model([1, 3, 8], [3, 2, 3]), "only 2-D", "rank 3")
    computed = make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="n", group=3)],
                          [tensor("x", [1, 3, 4, 4]), tensor("w", [3, 1, 3, 3])], [tensor("y", None)])
    assert_import_error(computed, "need constant weights")


def qdq_conv_transpose_model(per_channel: bool, group: int = 1):
    """Hand-written QDQ: uint8 activations, int8 symmetric weights (per output channel: DequantizeLinear axis 1)."""
    c_in, per_group = 4, 3
    out_c = per_group * group
    w = RNG.integers(-60, 61, (c_in, per_group, 3, 3)).astype(np.int8)
    w_scale = (RNG.uniform(0.005, 0.02, per_group) if per_channel else np.asarray(0.01)).astype(np.float32)
    x_scale = np.float32(0.02)
    bias_scale = np.tile(x_scale * w_scale, group if per_channel else 1)
    bias = RNG.integers(-2000, 2000, out_c).astype(np.int32)
    wz = np.zeros(w_scale.shape, np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], axis=1),
             helper.make_node("DequantizeLinear", ["bq", "bs"], ["bf"], axis=0),
             helper.make_node("ConvTranspose", ["xf", "wf", "bf"], ["t"], name="n", strides=[2, 2], pads=[1, 1, 0, 0],
                              group=group),
             helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["tq"]),
             helper.make_node("DequantizeLinear", ["tq", "ys", "yz"], ["y"])]
    inits = [const("xs", x_scale), const("xz", np.uint8(128)), const("wq", w), const("ws", w_scale), const("wz", wz),
             const("bq", bias), const("bs", bias_scale.astype(np.float32) if per_channel else
                                      np.float32(bias_scale.reshape(-1)[0])),
             const("ys", np.float32(0.05)), const("yz", np.uint8(120))]
    return make_model(nodes, [tensor("x", [1, c_in, 5, 5])], [tensor("y", None)], inits)


@pytest.mark.parametrize("per_channel,group", [(False, 1), (True, 1), (False, 2), (True, 2)])
def test_quantized_conv_transpose(per_channel, group):
    model = qdq_conv_transpose_model(per_channel, group)
    x = RNG.uniform(-2, 2, (1, 4, 5, 5)).astype(np.float32)
    imported = import_onnx(model.SerializeToString())
    assert op_types(imported) == ["QUANTIZE", "TRANSPOSE", "TRANSPOSE_CONV_2D", "DEQUANTIZE", "TRANSPOSE"]
    hal = imported.model.hal_model().main
    (op,) = [o for o in hal.operations if o.type.name == "TRANSPOSE_CONV_2D"]
    f_type = hal.operands[op.inputs[1]].type
    if per_channel:
        assert f_type.code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL and f_type.channel_quant.channel_dim == 0
        assert len(f_type.channel_quant.scales) == 3 * group
    else:  # int8 weights re-expressed exactly as uint8 with zero point 128, like the activations
        assert f_type.code == OperandCode.TENSOR_QUANT8_ASYMM and f_type.zero_point == 128
    got = imported.run({"x": x})["y"]
    assert_quant_close(got, ort_run(model, {"x": x})["y"], 0.05, max_steps=1, argmax=False)


def test_onnxruntime_quantized_decoder():
    """onnxruntime.quantization (QDQ, per-tensor): Conv -> ConvTranspose -> Relu -> Resize -> Conv all run as 8-bit
    NNAPI operations (the per-channel ConvTranspose quantization of this onnxruntime version fails on its own)."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("ConvTranspose", ["c1", "w2", "b2"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1],
                              output_padding=[1, 1]),
             helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("Resize", ["r", "", "sc"], ["u"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Conv", ["u", "w3", "b3"], ["y"])]
    inits = [const("w1", rnd(4, 3, 3, 3, scale=0.3)), const("b1", rnd(4, scale=0.1)),
             const("w2", rnd(4, 5, 3, 3, scale=0.3)), const("b2", rnd(5, scale=0.1)),
             const("sc", np.asarray([1, 1, 2, 2], np.float32)),
             const("w3", rnd(2, 5, 1, 1, scale=0.3)), const("b3", rnd(2, scale=0.1))]
    model = make_model(nodes, [tensor("x", [1, 3, 4, 4])], [tensor("y", None)], inits)
    data = quantize(model, "x", [1, 3, 4, 4], fmt="QDQ", per_channel=False)
    imported = import_onnx(data)
    assert op_types(imported) == ["QUANTIZE", "TRANSPOSE", "CONV_2D", "TRANSPOSE_CONV_2D", "RESIZE_NEAREST_NEIGHBOR",
                                  "CONV_2D", "DEQUANTIZE", "TRANSPOSE"]
    qmodel = onnx.load_from_string(data)
    (last,) = [n for n in qmodel.graph.node if n.output[0] == "y"]  # the DequantizeLinear of the result
    step = float(next(numpy_helper.to_array(t) for t in qmodel.graph.initializer if t.name == last.input[1]))
    for seed in range(2):
        x = np.random.default_rng(seed).uniform(-1, 1, (1, 3, 4, 4)).astype(np.float32)
        assert_quant_close(imported.run({"x": x})["y"], ort_run(data, {"x": x})["y"], step, max_steps=3, argmax=False)
