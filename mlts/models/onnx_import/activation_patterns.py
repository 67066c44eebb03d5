"""x * HardSigmoid(x, alpha=1/6, beta=0.5) -> HardSwish(x) (one NNAPI HARD_SWISH instead of four operations).

torch.onnx writes hardswish this way below opset 14, and MobileNetV3 implementations write it by hand; the
Mul may take its inputs in either order. In a QDQ graph the pattern reads
Mul(DQ(x_q), DQ(Q(HardSigmoid(DQ'(x_q))))): both DequantizeLinear read the same 8-bit tensor with the same
parameters; the HardSwish then reads the Mul's DequantizeLinear and becomes one quantized HARD_SWISH (the
hard-sigmoid's own 8-bit rounding disappears: the result is closer to the float function). The HardSigmoid
node is left in place (dead-node elimination drops it when nothing else reads it), so other uses keep their
value. x * Sigmoid(x) (SiLU) stays LOGISTIC + MUL: NNAPI has no single operation for it.
"""
from __future__ import annotations

import numpy as np

from .ir import Graph, Node

_ALPHA, _BETA = 1.0 / 6.0, 0.5
_TOLERANCE = 1e-6  # attributes are float32: 1/6 is stored as 0.16666667


def _dq_source(node: Node | None, graph: Graph) -> tuple | None:
    """(tensor, scale, zero point) a DequantizeLinear reads, the parameters as comparable tuples."""
    if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
        return None
    params = []
    for i in (1, 2):
        name = node.input(i)
        value = graph.const(name) if name else None
        if name and value is None:
            return None
        params.append(None if value is None else (str(value.dtype), np.asarray(value).ravel().tolist()))
    return node.inputs[0], params[0], params[1], node.attr("axis", 1)


def _same_tensor(a: str, b: str, producers: dict, graph: Graph) -> bool:
    if a == b:
        return True
    sa, sb = _dq_source(producers.get(a), graph), _dq_source(producers.get(b), graph)
    return sa is not None and sa == sb


def _hard_sigmoid_behind(name: str, producers: dict) -> Node | None:
    """The HardSigmoid(alpha=1/6, beta=0.5) producing `name`, directly or through one Q -> DQ pair."""
    p = producers.get(name)
    if p is not None and p.op_type == "DequantizeLinear":
        q = producers.get(p.inputs[0])
        p = producers.get(q.inputs[0]) if q is not None and q.op_type == "QuantizeLinear" else None
    if p is None or p.op_type != "HardSigmoid" or p.domain not in ("", "ai.onnx"):
        return None
    if abs(float(p.attr("alpha", 0.2)) - _ALPHA) > _TOLERANCE or abs(float(p.attr("beta", 0.5)) - _BETA) > _TOLERANCE:
        return None
    return p


def rewrite(graph: Graph) -> None:
    """Replace every Mul(x, HardSigmoid(x)) (alpha 1/6, beta 1/2) by HardSwish(x), in place."""
    producers = graph.producers()
    changed = False
    for mul in graph.nodes:
        if mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.inputs) != 2:
            continue
        for k in (0, 1):
            x, h = mul.inputs[k], mul.inputs[1 - k]
            hs = _hard_sigmoid_behind(h, producers)
            if hs is None or not _same_tensor(x, hs.inputs[0], producers, graph):
                continue
            mul.op_type, mul.inputs = "HardSwish", [x]
            mul.attrs, mul.attr_protos = {"_origin": "HardSigmoid+Mul"}, {}
            changed = True
            break
    if changed:
        graph.eliminate_dead_nodes()
