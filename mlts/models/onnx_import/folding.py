"""Shape inference (onnx's, with data propagation) and constant folding (onnx.reference).

`infer_shapes` exports the current graph, runs onnx shape inference and records dtype and shape of
every value it learns about. `fold_constants` evaluates, with the onnx reference implementation,
every node whose inputs are all known at import time (initializers, Constant nodes, results of
earlier folds), plus Shape/Size of tensors whose shape is static. `simplify` alternates the two
until nothing changes, so shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as
exporters write it) ends as one constant shape.
"""
from __future__ import annotations

import warnings

import numpy as np
import onnx
from onnx import helper

from .errors import import_error
from .ir import Graph, Node, contiguous
from .loader import value_info_type

# Kept as nodes for the quantization passes (they decide what becomes an 8-bit constant).
NO_FOLD = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                    "Bernoulli"}
# Folding these would only duplicate a large constant under a new layout: they stay nodes.
MAX_FOLDED_ELEMENTS = 1 << 26
# Operators that generate a constant from nothing larger (the classic ONNX zoo models store their weights as
# ConstantOfShape): folding is the only way to have the values, so they may be larger (VGG-19's fc6 is 103M).
GENERATORS = {"ConstantOfShape", "Constant"}
MAX_GENERATED_ELEMENTS = 1 << 28


def infer_shapes(graph: Graph) -> None:
    model = graph.to_model(large_constants_as_inputs=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:
        raise import_error(f"shape inference failed: {' '.join(str(e).split())[:300]}") from None
    g = inferred.graph
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        v = graph.values.get(vi.name)
        if v is None or v.const is not None:
            continue
        dtype, shape = value_info_type(vi)
        if dtype is not None:
            v.dtype = dtype
        if shape is not None:
            if v.shape is None or len(v.shape) != len(shape):
                v.shape = shape
            else:  # keep whatever either side knows
                v.shape = tuple(a if a is not None else b for a, b in zip(shape, v.shape))


def _shape_fold(node: Node, graph: Graph) -> list[np.ndarray] | None:
    """Shape and Size of a tensor whose shape is fully known."""
    src = graph.values.get(node.input(0) or "")
    if src is None or not src.static_shape:
        return None
    shape = np.asarray(src.shape, dtype=np.int64)
    if node.op_type == "Size":
        return [np.asarray(int(np.prod(shape)), dtype=np.int64)]
    rank = len(shape)
    start = node.attr("start", 0)
    end = node.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [shape[start:end]]


def _evaluate(node: Node, graph: Graph) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    feeds = {i: graph.values[i].const for i in node.inputs if i}
    proto = node.to_proto()
    inputs = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(feeds[i].dtype), feeds[i].shape)
              for i in dict.fromkeys(i for i in node.inputs if i)]
    outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in node.outputs if o]
    model = helper.make_model(helper.make_graph([proto], "fold", inputs, outputs),
                              opset_imports=[helper.make_opsetid(d, v) for d, v in graph.opsets.items()])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        results = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(r) for r in results]


def fold_constants(graph: Graph, only: str | None = None) -> bool:
    """Replace foldable nodes (of type `only` when given) by constants; True when anything changed."""
    changed = False
    keep: list[Node] = []
    for node in graph.nodes:
        results = None
        if node.domain == "" and node.op_type not in NO_FOLD | NONDETERMINISTIC and only in (None, node.op_type):
            if node.op_type in ("Shape", "Size"):
                results = _shape_fold(node, graph)
            elif all(graph.const(i) is not None for i in node.inputs if i) and all(node.outputs):
                try:
                    results = _evaluate(node, graph)
                except Exception as e:
                    raise import_error(f"{node.describe()}: constant folding failed: "
                                       f"{' '.join(str(e).split())[:300]}") from None
        limit = MAX_GENERATED_ELEMENTS if node.op_type in GENERATORS else MAX_FOLDED_ELEMENTS
        if results is not None and any(r.size > limit for r in results):
            node.attrs["_unfolded_elements"] = max(r.size for r in results)  # named by the unsupported error
            results = None
        if results is None or len(results) != len([o for o in node.outputs if o]):
            keep.append(node)
            continue
        for name, arr in zip([o for o in node.outputs if o], results):
            v = graph.value(name)
            v.const = contiguous(arr)
            v.dtype, v.shape = arr.dtype, tuple(arr.shape)
        changed = True
    graph.nodes = keep
    return changed


def fold_constants_of_type(graph: Graph, op_type: str) -> None:
    fold_constants(graph, only=op_type)


def simplify(graph: Graph, max_rounds: int = 8) -> None:
    for _ in range(max_rounds):
        infer_shapes(graph)
        if not fold_constants(graph):
            return
    infer_shapes(graph)
