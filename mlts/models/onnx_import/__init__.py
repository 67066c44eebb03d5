"""ONNX -> mlts (NNAPI) importer.

`import_onnx(path_or_bytes)` returns an `ImportedModel` whose `.model` is a finished mlts Model.
Organised like onnx/reference: `loader` (reading and checking), `ir` (the intermediate graph),
`folding` (shape inference, constant folding), `passes` (BatchNormalization folding, fused
activations, MatMul + bias), `quantization` (QOperator and QDQ graphs -> 8-bit operations),
`layout` and `emitter` (NCHW -> NHWC by layout propagation, NNAPI operand building), and
`converters/` (one converter per ONNX operator type behind a registry).
"""
from __future__ import annotations

from .imported import ImportedModel
from .importer import MAX_OPSET, MIN_OPSET, import_onnx, supported_op_types

__all__ = ["ImportedModel", "MAX_OPSET", "MIN_OPSET", "import_onnx", "supported_op_types"]
