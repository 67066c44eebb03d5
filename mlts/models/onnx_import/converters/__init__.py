"""One converter per ONNX operator type, looked up through a registry (see `base`).

Each module registers its converters when imported; importing this package loads them all.
"""
from __future__ import annotations

import importlib

from .base import OpConverter, get_converter, register, registered_op_types

_MODULES = ("activations", "concat_pad", "conv", "conv_transpose", "detection", "einsum", "elementwise", "gemm", "matmul",
            "misc", "normalization", "pooling", "recurrent", "reductions", "resize", "shape_ops", "slicing", "softmax",
            "unary", "variadic")
for _name in _MODULES:
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["OpConverter", "get_converter", "register", "registered_op_types"]
