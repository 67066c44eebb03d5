"""Constant subgraphs as exporters write them fold at import: Shape arithmetic, ConstantOfShape and Range
end as constants, so the converted NNAPI graph holds none of them (checked against onnxruntime)."""
from __future__ import annotations

import os
import sys

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import check_against_ort, const, make_model, op_types, tensor  # noqa: E402


def test_shape_range_and_constant_of_shape_fold():
    """y = x * ConstantOfShape(Shape(x)) (a tensor of 2s) gathered along the last axis by Range(0, W, 2),
    W taken from Shape(x) through Gather and Squeeze: everything but the Mul and the Gather is constant."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["twos"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
        helper.make_node("Mul", ["x", "twos"], ["doubled"]),
        helper.make_node("Gather", ["shape", "last"], ["width"], axis=0),
        helper.make_node("Range", ["zero", "width", "two"], ["columns"]),
        helper.make_node("Gather", ["doubled", "columns"], ["y"], axis=3),
    ]
    inits = [const("last", np.array(3, np.int64)), const("zero", np.array(0, np.int64)),
             const("two", np.array(2, np.int64))]
    model = make_model(nodes, [tensor("x", [1, 3, 4, 6])], [tensor("y", [1, 3, 4, 3])], inits, opset=13)
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 6)).astype(np.float32)
    imported, got, _ = check_against_ort(model, {"x": x})
    np.testing.assert_array_equal(got["y"], 2 * x[..., ::2])
    assert sorted(op_types(imported)) == ["GATHER", "MUL"]
