"""ONNX graph helpers shared by the quantizer's planning, rewriting and evaluation steps."""
from __future__ import annotations

from typing import Sequence


def attributes(node) -> dict:
    """A node's attributes as Python values."""
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def constant_names(graph) -> set[str]:
    """Initializers and Constant-node outputs: the tensors that are not activations."""
    return {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}


def graph_input_names(graph) -> list[str]:
    """The graph's real inputs (older models list their initializers as inputs too)."""
    constants = constant_names(graph)
    return [i.name for i in graph.input if i.name not in constants]


def toposort(nodes: Sequence, available: set[str]) -> list:
    """Nodes in data-dependency order (stable for graphs that are already sorted)."""
    ready = set(available)
    pending, ordered = list(nodes), []
    while pending:
        progressed, rest = False, []
        for node in pending:
            if all(not t or t in ready for t in node.input):
                ordered.append(node)
                ready.update(node.output)
                progressed = True
            else:
                rest.append(node)
        if not progressed:
            missing = sorted({t for n in rest for t in n.input if t and t not in ready})
            raise ValueError(f"graph has a cycle or undefined tensors: {missing[:5]}")
        pending = rest
    return ordered


def compute_nodes(graph) -> list:
    """The graph's nodes other than Constant, in data-dependency order."""
    return toposort([n for n in graph.node if n.op_type != "Constant"],
                    constant_names(graph) | set(graph_input_names(graph)))
