"""Reading an ONNX model (path, bytes or ModelProto) into the intermediate graph, with clean errors.

Checks, each ending in one BAD_DATA MltsError: the bytes decode as an ONNX ModelProto with a graph;
the default-domain opset is within MIN_OPSET..MAX_OPSET; every node input is a graph input, an
initializer or another node's output; no output is produced twice; the onnx checker accepts the
model. Model-local functions are inlined first.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import helper

from .errors import import_error
from .ir import Graph, Node, Value, parse_attributes, tensor_to_array

MIN_OPSET = 7
MAX_OPSET = 21
# Domains whose operators the importer may handle (the standard one and ONNX Runtime's contrib ops).
KNOWN_DOMAINS = ("", "ai.onnx", "com.microsoft")


def read_model(source: Any) -> tuple[onnx.ModelProto, str]:
    """The ModelProto and a short description of where it came from."""
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        return model, source.graph.name or "<ModelProto>"
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise import_error(f"cannot read {path!r}: {e.strerror or e}") from None
        where = path
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        where = "<bytes>"
    else:
        raise import_error(f"expected a path, bytes or an onnx.ModelProto, got {type(source).__name__}")
    if not data:
        raise import_error(f"{where}: empty file, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # google.protobuf.message.DecodeError and friends
        raise import_error(f"{where}: not an ONNX model (the protobuf cannot be decoded: "
                           f"{e or type(e).__name__}); the file is truncated or corrupt") from None
    if isinstance(source, (str, os.PathLike)) and model.HasField("graph") and any(
            t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        try:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
        except Exception as e:
            raise import_error(f"{where}: the external tensor data cannot be read: {e}") from None
    return model, where


def check_model(model: onnx.ModelProto, where: str) -> dict[str, int]:
    """Structural checks; returns the opset imports as {domain: version}."""
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise import_error(f"{where}: not a valid ONNX model (no IR version or no graph); "
                           "the file is truncated, corrupt or not ONNX")
    opsets: dict[str, int] = {}
    for o in model.opset_import:
        opsets["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
    if "" not in opsets:
        if model.ir_version < 3:
            opsets[""] = 1  # IR version 1/2 models had no opset imports: opset 1
        else:
            raise import_error(f"{where}: the model imports no default-domain opset")
    version = opsets[""]
    if not MIN_OPSET <= version <= MAX_OPSET:
        raise import_error(f"{where}: opset {version} is not supported (import_onnx supports default-domain "
                           f"opsets {MIN_OPSET} to {MAX_OPSET}; convert the model with "
                           "onnx.version_converter first)")
    g = model.graph
    if len(g.node) == 0:
        raise import_error(f"{where}: the graph has no nodes")
    if len(g.output) == 0:
        raise import_error(f"{where}: the graph has no outputs")
    if len(g.sparse_initializer):
        raise import_error(f"{where}: sparse initializers are not supported")
    known = {i.name for i in g.input} | {t.name for t in g.initializer}
    produced: dict[str, str] = {}
    for n in g.node:
        for o in n.output:
            if not o:
                continue
            if o in produced or o in known:
                raise import_error(f"{where}: tensor {o!r} is produced twice ({_node_label(n, opsets)})")
            produced[o] = n.name
    available = known | set(produced)
    for n in g.node:
        for i in n.input:
            if i and i not in available:
                raise import_error(f"{where}: {_node_label(n, opsets)}: input {i!r} is missing (not a graph "
                                   "input, an initializer, nor the output of any node)")
    for o in g.output:
        if o.name not in available:
            raise import_error(f"{where}: graph output {o.name!r} is not produced by any node")
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        text = " ".join(str(e).split())
        # Graph outputs declared without a type or shape are common and harmless (inference fills them).
        if not ("of 'type' is required but missing" in text or "of 'value_info' is required but missing" in text):
            raise import_error(f"{where}: the ONNX checker rejects the model: {text[:400]}") from None
    return opsets


def _node_label(n: onnx.NodeProto, opsets: dict[str, int]) -> str:
    domain = "" if n.domain == "ai.onnx" else n.domain
    return f"node '{n.name or (n.output[0] if n.output else '?')}' ({domain + '.' if domain else ''}{n.op_type}, " \
           f"opset {opsets.get(domain, '?')})"


def _np_dtype(elem_type: int) -> np.dtype | None:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


def value_info_type(vi: onnx.ValueInfoProto) -> tuple[np.dtype | None, tuple | None]:
    if not vi.type.HasField("tensor_type"):
        return None, None
    tt = vi.type.tensor_type
    dtype = _np_dtype(tt.elem_type) if tt.elem_type else None
    if not tt.HasField("shape"):
        return dtype, None
    dims = []
    for d in tt.shape.dim:
        dims.append(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else None)
    return dtype, tuple(dims)


def build_graph(model: onnx.ModelProto, opsets: dict[str, int]) -> Graph:
    g = model.graph
    graph = Graph(g.name, opsets)
    for t in g.initializer:
        arr = tensor_to_array(t, f"initializer {t.name!r}")
        graph.values[t.name] = Value(t.name, arr.dtype, tuple(arr.shape), arr)
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        v = graph.value(vi.name)
        if v.const is not None:
            continue
        dtype, shape = value_info_type(vi)
        v.dtype = v.dtype or dtype
        v.shape = v.shape if v.shape is not None else shape
    for vi in g.input:
        if vi.name in graph.values and graph.values[vi.name].const is not None:
            continue  # an initializer listed as an input (IR < 4 style): a constant here
        if not vi.type.HasField("tensor_type"):
            raise import_error(f"graph input {vi.name!r} is not a tensor (sequences, maps and optionals "
                               "are not supported)")
        graph.inputs.append(vi.name)
    graph.outputs = [o.name for o in g.output]
    for index, n in enumerate(g.node):
        domain = "" if n.domain == "ai.onnx" else n.domain
        label = _node_label(n, opsets)
        if domain not in opsets:
            raise import_error(f"{label}: uses domain {domain!r}, which the model does not import")
        attrs, protos = parse_attributes(n, label)
        node = Node(n.op_type, list(n.input), list(n.output), attrs, n.name or f"{n.op_type}_{index}",
                    domain, opsets[domain], protos)
        graph.nodes.append(node)
        for o in n.output:
            if o:
                graph.value(o)
    graph.sort()
    return graph


def load(source: Any) -> tuple[onnx.ModelProto, Graph]:
    model, where = read_model(source)
    opsets = check_model(model, where)
    if len(model.functions):
        try:
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        except Exception as e:
            raise import_error(f"{where}: model-local functions cannot be inlined: {e}") from None
    return model, build_graph(model, opsets)
