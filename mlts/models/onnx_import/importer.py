"""The import pipeline: load -> normalize -> shape inference + constant folding -> rewrites ->
quantization -> conversion (layouts) -> a finished NNAPI Model.
"""
from __future__ import annotations

import re
from typing import Any

from mlts.runtime import MltsError

from . import folding, passes, patterns, quantization
from .converters import get_converter, registered_op_types
from .emitter import Emitter
from .errors import import_error
from .imported import ImportedModel
from .ir import Graph
from .loader import MAX_OPSET, MIN_OPSET, load


def supported_op_types() -> list[str]:
    """ONNX operator types the importer converts (QOperator ones are rewritten to QDQ first)."""
    return sorted(set(registered_op_types()) | quantization.QOPERATORS)


def _unsupported(node, graph: Graph) -> MltsError:
    pending = [i for i in node.inputs if i and graph.const(i) is None]
    why = f"inputs {pending} are computed at run time, so it cannot be folded at import; " if pending else ""
    if node.attr("_unfolded_elements"):
        why = (f"its constant result ({node.attr('_unfolded_elements')} elements) is larger than import-time folding "
               "allows; ")
    return import_error(f"{node.describe()}: unsupported operation {node.domain + '.' if node.domain else ''}"
                        f"{node.op_type}; {why}supported: {', '.join(supported_op_types())} (any other standard "
                        "operator only when all its inputs are constants, folded at import)")


def prepare_graph(graph: Graph) -> None:
    quantization.record_unread_quantize(graph)
    graph.eliminate_dead_nodes()
    # Constant nodes first: QOperator scales may be written as Constant nodes.
    folding.fold_constants_of_type(graph, "Constant")
    quantization.normalize_qoperators(graph)
    folding.simplify(graph)
    passes.remove_identities(graph)
    patterns.rewrite_patterns(graph)
    passes.fold_batchnorm(graph)
    passes.fuse_matmul_bias(graph)
    passes.flatten_in_nhwc_order(graph)
    # Activations are fused twice: before the QDQ pass for DQ -> Conv -> Relu -> Q (the activation inside
    # the quantized unit, as the project's quantizer writes it), after it for Conv -> Q -> DQ -> Relu -> Q.
    passes.fuse_activations(graph)
    quantization.quantize_graph(graph)
    passes.fuse_activations(graph)
    graph.eliminate_dead_nodes()
    graph.sort()


def convert(graph: Graph) -> Emitter:
    em = Emitter(graph)
    for name in graph.inputs:
        v = graph.value(name)
        if v.shape is None:
            raise import_error(f"graph input {name!r} has an unknown rank")
        if 0 in v.shape:
            raise import_error(f"graph input {name!r} has a zero-sized dimension {list(v.shape)} (NNAPI has no empty "
                               "tensors: a dimension 0 means unknown)")
        index = em.add_operand(em.value_type(name))
        em.bind(name, index, tuple(range(len(v.shape))))
    used = {i for n in graph.nodes for i in n.inputs if i} | set(graph.outputs)
    for node in graph.nodes:
        conv = get_converter(node)
        if conv is None:
            raise _unsupported(node, graph)
        em.node = node
        try:
            conv.convert(node, em)
        except MltsError as e:
            if e.message.startswith("import_onnx:"):
                raise
            raise em.fail(f"cannot be mapped to NNAPI: {e.message}") from None
        except Exception as e:  # a converter bug must still surface as one clean error
            raise em.fail(f"internal importer error: {type(e).__name__}: {e}") from None
        for o in node.outputs:
            if o and o in used and not em.is_bound(o) and not em.is_const(o):
                raise em.fail(f"output {o!r} was not produced (internal importer error)")
    return em


def import_onnx(source: Any) -> ImportedModel:
    """Import an ONNX model (a path, bytes or an onnx.ModelProto) into a finished mlts Model."""
    model_proto, graph = load(source)
    try:
        prepare_graph(graph)
        em = convert(graph)
        inputs, outputs = em.finish(graph.inputs, graph.outputs)
        em.model.identify_inputs_and_outputs(inputs, outputs)
        try:
            em.model.finish()
        except MltsError as e:
            # Name the ONNX node behind the NNAPI operation the runtime rejected.
            match = re.search(r"operation (\d+) \(", e.message)
            if match and int(match.group(1)) < len(em.operation_origins):
                raise import_error(f"{em.operation_origins[int(match.group(1))]}: cannot be mapped to NNAPI: "
                                   f"{e.message}") from None
            raise
    except MltsError as e:
        if e.message.startswith("import_onnx:"):
            raise
        raise import_error(f"the converted model is invalid: {e.message}") from None
    except RecursionError:
        raise import_error("the graph is too deep") from None
    except Exception as e:  # an importer bug must still surface as one clean error
        raise import_error(f"internal importer error: {type(e).__name__}: {e}") from None
    input_types = {n: (graph.value(n).dtype, graph.value(n).shape) for n in graph.inputs}
    output_types = {n: (graph.value(n).dtype, graph.value(n).shape) for n in graph.outputs}
    return ImportedModel(em.model, list(graph.inputs), list(graph.outputs), model_proto,
                         input_types=input_types, output_types=output_types,
                         operation_origins=list(em.operation_origins), name=graph.name,
                         operand_tensors=em.operand_tensors())


__all__ = ["MAX_OPSET", "MIN_OPSET", "import_onnx", "supported_op_types"]
