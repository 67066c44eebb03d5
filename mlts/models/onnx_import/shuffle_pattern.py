"""The channel shuffle written as Reshape -> Transpose -> Reshape becomes one ChannelShuffle node.

torch's ShuffleNet (`x.view(N, g, C // g, H, W).transpose(1, 2).contiguous().view(N, C, H, W)`) and the
ONNX model zoo's ShuffleNet write it this way; NNAPI has it as one operation, CHANNEL_SHUFFLE, which
the converter of the importer-internal op type `ChannelShuffle` (converters/slicing.py; attributes
`group` and `axis`) emits. The rank-5 intermediate tensor would otherwise need a RESHAPE of rank 5,
which NNAPI lacks.

The match is exact: the first Reshape splits one axis of size C into (g, C / g) and keeps the others,
the Transpose swaps exactly those two dimensions, the second Reshape restores the input's shape; the
shapes come from shape inference, which has already folded computed shapes (Shape -> Gather ->
Concat) into constants. QDQ graphs put a QuantizeLinear -> DequantizeLinear pair (per-tensor) after
each node: being element-wise, those pairs commute with the shuffle and are moved after it.
Anything else is left alone.
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, Node, Value

_SHUFFLABLE = {np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.uint8), np.dtype(np.int8)}


def _single_consumer(graph: Graph, name: str, consumers: dict) -> Node | None:
    """The only node reading `name`, as its first (data) input."""
    users = consumers.get(name, [])
    if name in graph.outputs or len(users) != 1 or users[0].inputs.count(name) != 1 or users[0].inputs[0] != name:
        return None
    return users[0]


def _next_node(graph: Graph, name: str, consumers: dict, pairs: list) -> Node | None:
    """The one node reading `name`, past QuantizeLinear -> DequantizeLinear pairs (appended to `pairs`)."""
    node = _single_consumer(graph, name, consumers)
    while node is not None and node.op_type == "QuantizeLinear" and node.domain == "":
        dq = _single_consumer(graph, node.outputs[0], consumers)
        scale = graph.const(node.input(1))
        if dq is None or dq.op_type != "DequantizeLinear" or dq.domain != "" \
                or scale is None or np.size(scale) != 1 or node.attr("block_size", 0):
            return None
        pairs.append((node, dq))
        node = _single_consumer(graph, dq.outputs[0], consumers)
    return node


def _same_dims(a: list, b: list) -> bool:
    """Whether two shapes of equal element count are equal: the known dimensions agree and at most one
    position is unknown (the element count then fixes it)."""
    unknown = 0
    for x, y in zip(a, b):
        if x is None or y is None:
            unknown += 1
        elif x != y:
            return False
    return len(a) == len(b) and unknown <= 1


def _match(graph: Graph, r1: Node, consumers: dict) -> tuple[int, int, Node, Node, list] | None:
    """(group, axis, transpose, second reshape, Q/DQ pairs) when r1 starts a channel shuffle."""
    if r1.op_type != "Reshape" or r1.domain != "" or not r1.input(0):
        return None
    src, mid = graph.value(r1.inputs[0]), graph.value(r1.outputs[0])
    if src.shape is None or mid.shape is None or src.dtype not in _SHUFFLABLE or src.const is not None:
        return None
    shape, split = list(src.shape), list(mid.shape)
    rank = len(shape)
    if not 1 <= rank <= 4 or len(split) != rank + 1 or 0 in shape or 0 in split:
        return None
    pairs: list = []
    tr = _next_node(graph, r1.outputs[0], consumers, pairs)
    if tr is None or tr.op_type != "Transpose" or tr.domain != "":
        return None
    perm = [int(p) for p in tr.attr("perm", list(range(rank + 1))[::-1])]
    swapped = [a for a in range(rank + 1) if perm[a] != a]
    if len(swapped) != 2 or swapped[1] != swapped[0] + 1 or perm[swapped[0]] != swapped[1]:
        return None
    axis = swapped[0]
    g, per_group, c = split[axis], split[axis + 1], shape[axis]
    if g is None or per_group is None or c is None or g * per_group != c:
        return None
    if not _same_dims(shape[:axis] + shape[axis + 1:], split[:axis] + split[axis + 2:]):
        return None
    r2 = _next_node(graph, tr.outputs[0], consumers, pairs)
    if r2 is None or r2.op_type != "Reshape" or r2.domain != "":
        return None
    out = graph.value(r2.outputs[0]).shape
    if out is None or 0 in out or not _same_dims(list(out), shape):
        return None
    return g, axis, tr, r2, pairs


def _apply(graph: Graph, r1: Node, group: int, axis: int, tr: Node, r2: Node, pairs: list) -> None:
    x, y = r1.inputs[0], r2.outputs[0]
    shape = tuple(a if a is not None else b for a, b in zip(graph.value(x).shape, graph.value(y).shape))
    out = graph.fresh_name(f"{y}_shuffled") if pairs else y
    if pairs:
        graph.values[out] = Value(out, graph.value(x).dtype, shape)
    shuffle = Node("ChannelShuffle", [x], [out], {"group": int(group), "axis": int(axis),
                                                    "_origin": "Reshape+Transpose+Reshape"},
                   tr.name or r1.name, "", graph.opsets.get("", r1.opset))
    new = [shuffle]
    prev = out
    for k, (q, dq) in enumerate(pairs):
        q.inputs = [prev] + q.inputs[1:]
        graph.value(q.outputs[0]).shape = shape
        if k == len(pairs) - 1:
            dq.outputs = [y]
        else:
            graph.value(dq.outputs[0]).shape = shape
        prev = dq.outputs[0]
        new += [q, dq]
    dead = {id(n) for n in new} | {id(r1), id(tr), id(r2)}
    at = graph.nodes.index(r2)
    before = [n for n in graph.nodes[:at] if id(n) not in dead]
    after = [n for n in graph.nodes[at:] if id(n) not in dead]
    graph.nodes = before + new + after


def rewrite(graph: Graph) -> None:
    """Replace every exact Reshape -> Transpose -> Reshape channel shuffle by one ChannelShuffle node."""
    consumers = graph.consumers()
    matches = []
    for node in graph.nodes:
        found = _match(graph, node, consumers)
        if found is not None:
            matches.append((node,) + found)
    for r1, group, axis, tr, r2, pairs in matches:
        _apply(graph, r1, group, axis, tr, r2, pairs)
    if matches:
        graph.eliminate_dead_nodes()  # the shape arithmetic that fed the Reshapes
