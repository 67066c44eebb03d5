"""Quantization parameters of 8-bit tensors, shared through operators that move 8-bit values unchanged.

QuantizeLinear gives its output its parameters; DequantizeLinear gives them to the tensor it reads
(graph inputs, weights, biases). Exporters also run layout and data-movement operators directly on
8-bit tensors: tf2onnx pushes its NHWC -> NCHW Transpose up to the uint8 graph input (input ->
Transpose -> DequantizeLinear) and down to the output (QuantizeLinear -> Transpose -> output), its
QDQ optimizer moves DequantizeLinear past Reshape/Squeeze/Concat/Slice..., and onnxruntime's
QOperator format runs Reshape, Transpose, Gather, Split, MaxPool... on uint8. Those operators keep
the integers, so all their 8-bit inputs and outputs must share one set of parameters: the tensors
they link form a group, the group's parameters come from any QuantizeLinear/DequantizeLinear
touching one of its tensors (forward, backward, or both), and two different sets in one group are
an error naming the tensors (NNAPI has no operation that reinterprets 8-bit values under other
parameters; requantizing would change the integers the ONNX graph keeps).
"""
from __future__ import annotations

import numpy as np

from .errors import import_error
from .ir import Graph, Node, Quant

ACTIVATION_DTYPES = (np.dtype(np.uint8), np.dtype(np.int8))
# Operators that move 8-bit values without changing them: input 0 and output 0 (every output for Split;
# every input for Concat) hold the same integers. Resize/Upsample only in nearest mode (linear interpolates).
VALUE_PRESERVING = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Slice",
                    "Split", "Gather", "Concat", "Pad", "MaxPool", "GlobalMaxPool", "DepthToSpace", "SpaceToDepth",
                    "Tile", "Expand", "Resize", "Upsample"}


def qdq_params(node: Node, graph: Graph) -> Quant:
    """The quantization a QuantizeLinear writes / a DequantizeLinear reads."""
    scale = graph.const(node.input(1))
    if scale is None:
        raise import_error(f"{node.describe()}: the scale must be a constant")
    zp_name = node.input(2)
    zp = graph.const(zp_name) if zp_name else None
    if zp_name and zp is None:
        raise import_error(f"{node.describe()}: the zero point must be a constant")
    if node.attr("block_size", 0):
        raise import_error(f"{node.describe()}: blocked quantization is not supported")
    if node.op_type == "QuantizeLinear":
        if zp is not None:
            dtype = zp.dtype
        elif node.attr("output_dtype", 0):
            from onnx import helper
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(node.attr("output_dtype")))
        else:
            dtype = np.dtype(np.uint8)
    else:
        x = graph.value(node.inputs[0])
        dtype = x.dtype if x.dtype is not None else (zp.dtype if zp is not None else np.dtype(np.uint8))
    axis = None
    if np.size(scale) > 1:
        x = graph.value(node.inputs[0])
        axis = int(node.attr("axis", 1))
        if x.rank is not None and axis < 0:
            axis += x.rank
    return Quant.make(scale, zp, dtype, axis)


def same_params(a: Quant, b: Quant) -> bool:
    """Equal parameters (per-tensor ones compare by scale and zero point)."""
    return a.same(b) or (a.per_tensor and b.per_tensor and a.s == b.s and a.zp == b.zp)


def linked_tensors(node: Node, graph: Graph) -> list[str]:
    """The tensors of a value-preserving node that hold the same 8-bit values ([] when none do)."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in VALUE_PRESERVING:
        return []
    if node.op_type in ("Resize", "Upsample") and node.attr("mode", "nearest") != "nearest":
        return []
    ins = [i for i in node.inputs if i] if node.op_type == "Concat" else [node.inputs[0]] if node.input(0) else []
    outs = [o for o in node.outputs if o] if node.op_type == "Split" else [node.outputs[0]] if node.outputs else []
    if not ins or not outs or not outs[0]:
        return []
    dtypes = [graph.value(n).dtype for n in ins + outs]
    if not any(d in ACTIVATION_DTYPES for d in dtypes) or any(d is not None and d not in ACTIVATION_DTYPES
                                                              for d in dtypes):
        return []
    return list(dict.fromkeys(ins + outs))


class _Groups:
    """Union-find over tensor names; each group keeps its members and the operators that linked it."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.via: dict[str, list[Node]] = {}

    def find(self, name: str) -> str:
        while self.parent.get(name, name) != name:
            name = self.parent[name]
        return name

    def group(self, name: str) -> list[str]:
        return self.members.get(self.find(name), [name])

    def link(self, names: list[str], node: Node) -> None:
        roots = list(dict.fromkeys(self.find(n) for n in names))
        root = roots[0]
        members = self.members.setdefault(root, [root])
        vias = self.via.setdefault(root, [])
        for other in roots[1:]:  # small groups: no balancing needed
            self.parent[other] = root
            members.extend(self.members.pop(other, [other]))
            vias.extend(self.via.pop(other, []))
        vias.append(node)


def _source(node: Node, tensor: str) -> str:
    verb = "written by" if node.op_type == "QuantizeLinear" else "read by"
    return f"{tensor!r} ({verb} {node.describe()})"


def _conflict(tensor_a: str, a: Quant, node_a: Node, tensor_b: str, b: Quant, node_b: Node,
              via: list[Node]):
    if tensor_a == tensor_b:
        where = f"tensor {tensor_a!r} has conflicting quantization parameters"
    else:
        ops = ", ".join(n.describe() for n in via[:4]) + (" ..." if len(via) > 4 else "")
        where = (f"tensors {tensor_a!r} and {tensor_b!r} hold the same 8-bit values (through {ops}, which "
                 f"keep the integers) but have conflicting quantization parameters")
    return import_error(f"{where}: {a.describe()} for {_source(node_a, tensor_a)} and {b.describe()} for "
                        f"{_source(node_b, tensor_b)} (NNAPI cannot reinterpret 8-bit values under other "
                        f"parameters)")


def _constant(name: str, graph: Graph, producers: dict) -> bool:
    """A constant, or a QuantizeLinear of one (weights quantized in the graph, folded later)."""
    p = producers.get(name)
    return graph.const(name) is not None or (p is not None and p.op_type == "QuantizeLinear"
                                             and graph.const(p.inputs[0]) is not None)


def assign_quant(graph: Graph) -> None:
    """Give every 8-bit tensor reached by QuantizeLinear/DequantizeLinear, directly or through
    value-preserving operators, its quantization parameters (its dtype too where it was unknown)."""
    groups = _Groups()
    for n in graph.nodes:
        names = linked_tensors(n, graph)
        if names:
            groups.link(names, n)
    seeds: dict[str, tuple[str, Quant, Node]] = {}  # group root -> the first parameters found
    for n in graph.nodes:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") or n.domain not in ("", "ai.onnx"):
            continue
        tensor = n.outputs[0] if n.op_type == "QuantizeLinear" else n.inputs[0]
        q = qdq_params(n, graph)
        if n.op_type == "QuantizeLinear":
            graph.value(tensor).dtype = q.dtype
        root = groups.find(tensor)
        if root not in seeds:
            seeds[root] = (tensor, q, n)
            continue
        first_tensor, first_q, first_node = seeds[root]
        if not same_params(first_q, q):
            raise _conflict(first_tensor, first_q, first_node, tensor, q, n, groups.via.get(root, []))
    producers = graph.producers()
    for root, (tensor, q, node) in seeds.items():
        members = groups.group(tensor)
        if len(members) > 1 and not q.per_tensor:
            ops = ", ".join(n.describe() for n in groups.via.get(root, [])[:4])
            raise import_error(f"tensor {tensor!r} is quantized per axis ({q.describe()}, {_source(node, tensor)}); "
                               f"per-axis parameters cannot be shared through {ops} (NNAPI activations are "
                               "quantized per tensor)")
        if not q.per_tensor and not _constant(tensor, graph, producers):
            raise import_error(f"{node.describe()}: per-axis quantization ({q.describe()}) of the computed tensor "
                               f"{tensor!r}: NNAPI activations are quantized per tensor (per-axis parameters "
                               "are for constant weights)")
        for name in members:
            v = graph.value(name)
            v.quant = q
            if v.dtype is None:
                v.dtype = q.dtype
