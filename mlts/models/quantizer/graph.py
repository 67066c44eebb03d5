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


def input_ranks(graph) -> dict[str, int | None]:
    """Each real graph input's declared rank (None where the model does not declare its shape)."""
    names = set(graph_input_names(graph))
    return {i.name: (len(i.type.tensor_type.shape.dim) if i.type.tensor_type.HasField("shape") else None)
            for i in graph.input if i.name in names}


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


STANDARD_DOMAINS = ("", "ai.onnx")


def is_standard(node) -> bool:
    """Whether a node is a standard ONNX operator (others, like ai.mlts's DetectionPostProcess, stay float)."""
    return node.domain in STANDARD_DOMAINS


def float_tensors(graph) -> set[str]:
    """The tensors the quantizer leaves float: outputs of non-standard nodes and of every node after them.

    Nothing can calibrate them (onnx.reference cannot run custom operators), so they and their
    consumers keep their float form; their float inputs are read through DequantizeLinear.
    """
    left_float: set[str] = set()
    for node in compute_nodes(graph):
        if not is_standard(node) or any(t in left_float for t in node.input):
            left_float.update(t for t in node.output if t)
    return left_float


def standard_part(model):
    """`model` cut before its non-standard nodes: what onnx.reference (and calibration) can run.

    The cut model's outputs are the tensors the removed nodes read from the kept ones (in the
    order the removed nodes read them), then the original outputs the kept nodes still produce.
    The model itself is returned if every node is standard.
    """
    from onnx import TensorProto, helper, shape_inference

    graph = model.graph
    if all(is_standard(n) for n in graph.node):
        return model
    left_float = float_tensors(graph)

    def keeps(node) -> bool:
        return is_standard(node) and not any(t in left_float for t in node.output)

    kept = [n for n in graph.node if keeps(n)]
    produced = {t for n in kept for t in n.output} | set(graph_input_names(graph))
    cut: list[str] = []
    for node in graph.node:
        if not keeps(node):
            cut.extend(t for t in node.input if t in produced and t not in cut)
    cut.extend(o.name for o in graph.output if o.name in produced and o.name not in cut)
    typed = {vi.name: vi for vi in list(graph.input) + list(graph.value_info) + list(graph.output)}
    try:
        inferred = shape_inference.infer_shapes(model).graph
        typed.update({vi.name: vi for vi in inferred.value_info})
    except Exception:  # noqa: BLE001 (the types are a convenience: untyped outputs are fine for onnx.reference)
        pass
    outputs = [typed[t] if t in typed else helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in cut]
    part = type(model)()
    part.CopyFrom(model)
    part.graph.ClearField("node")
    part.graph.node.extend(kept)
    part.graph.ClearField("output")
    part.graph.output.extend(outputs)
    part.graph.ClearField("value_info")
    read = {t for n in kept for t in n.input}
    initializers = [t for t in graph.initializer if t.name in read]
    part.graph.ClearField("initializer")
    part.graph.initializer.extend(initializers)
    dropped = {t.name for t in graph.initializer} - read
    inputs = [i for i in graph.input if i.name not in dropped]
    part.graph.ClearField("input")
    part.graph.input.extend(inputs)
    del part.opset_import[:]
    part.opset_import.extend(o for o in model.opset_import if o.domain in STANDARD_DOMAINS)
    return part
