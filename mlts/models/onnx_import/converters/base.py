"""The converter interface and registry: one `OpConverter` per ONNX operator type.

A converter declares how the quantization passes may treat its node (which inputs carry tensor
data, which are weights or bias, whether a fused activation can be attached) and turns one node of
the intermediate graph into NNAPI operations through the `Emitter`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import NotQuantizable
from ..ir import Graph, Node

_REGISTRY: dict[tuple[str, str], "OpConverter"] = {}  # (domain, op_type) -> converter


class OpConverter:
    #: ONNX operator types this converter handles, in `domain` ("": the default domain, ai.onnx).
    op_types: tuple[str, ...] = ()
    domain: str = ""
    #: May run as an NNAPI quantized operation when its data inputs come from DequantizeLinear and
    #: its outputs go to QuantizeLinear (QDQ), or when it is a QLinear* operator.
    quantizable: bool = False
    #: Inputs carrying tensor data (the others are parameters such as shapes or axes); None: all.
    data_inputs: tuple[int, ...] | None = (0,)
    #: Input that may be a per-channel quantized constant (weights), and the ONNX axis of its output
    #: channels is given by `weight_channel_axis`.
    weight_input: int | None = None
    #: Input that may stay a float (or int32) constant inside a quantized operation: a bias, or a parameter
    #: constant the converter re-quantizes itself (PRelu's slope).
    bias_input: int | None = None
    #: Accepts a fused RELU/RELU1/RELU6 (node.attrs["_fuse"]).
    fusable: bool = False
    #: Outputs that may be unread when the node runs quantized (they keep their name and stay float; the
    #: converter does not write them).
    optional_outputs: tuple[int, ...] = ()
    #: Converts an importer-internal node (made by a pattern rewrite), not an ONNX operator.
    internal: bool = False

    def weight_channel_axis(self, node: Node, graph: Graph) -> int | None:
        return None

    def check_quantized(self, node: Node, graph: Graph) -> None:
        """Raise NotQuantizable to keep the node in float (between DEQUANTIZE and QUANTIZE)."""

    def convert(self, node: Node, ctx) -> None:
        raise NotImplementedError

    # -- helpers ----------------------------------------------------------------------------------
    def data_input_indices(self, node: Node) -> list[int]:
        if self.data_inputs is None:
            return [i for i, name in enumerate(node.inputs) if name]
        return [i for i in self.data_inputs if i < len(node.inputs) and node.inputs[i]]


def register(cls: type[OpConverter]) -> type[OpConverter]:
    inst = cls()
    for op in cls.op_types:
        key = (cls.domain, op)
        if key in _REGISTRY:
            raise RuntimeError(f"converter for {cls.domain + '.' if cls.domain else ''}{op} registered twice")
        _REGISTRY[key] = inst
    return cls


def get_converter(node: Node) -> OpConverter | None:
    domain = "" if node.domain == "ai.onnx" else node.domain
    return _REGISTRY.get((domain, node.op_type))


def registered_op_types() -> list[str]:
    """The default-domain ONNX operator types converted (importer-internal node types left out)."""
    return sorted(op for (domain, op), conv in _REGISTRY.items() if not conv.internal and not domain)


def registered_custom_op_types() -> list[str]:
    """Operators of other domains converted, as "domain.op_type" (mlts's own ai.mlts operators)."""
    return sorted(f"{domain}.{op}" for (domain, op), conv in _REGISTRY.items() if not conv.internal and domain)


# -- shared attribute helpers ----------------------------------------------------------------------
def ints(value, default: Sequence[int]) -> list[int]:
    if value is None:
        return list(default)
    return [int(v) for v in np.ravel(np.asarray(value))]


def const_input(node: Node, graph: Graph, i: int, what: str, ctx=None):
    """The constant value of optional input i, None when absent; a non-constant input is an error."""
    name = node.input(i)
    if name is None:
        return None
    value = graph.const(name)
    if value is None:
        message = f"input {i} ({what}) must be a constant known at import time"
        if ctx is not None:
            raise ctx.fail(message)
        raise NotQuantizable(message)
    return value


def all_quantized_same_dtype(node: Node, graph: Graph, indices: Sequence[int]) -> None:
    dtypes = {graph.value(node.inputs[i]).quant.dtype for i in indices
              if graph.value(node.inputs[i]).quant is not None}
    for o in node.outputs:
        q = graph.value(o).quant
        if q is not None:
            dtypes.add(q.dtype)
    if len(dtypes) > 1:
        raise NotQuantizable("inputs and outputs mix uint8 and int8")
