"""The QDQ rewrite: a float graph plus chosen parameters -> the graph with QuantizeLinear/DequantizeLinear.

Graph inputs become quantized tensors of the same name, dequantized for their consumers; every
quantized activation is followed by QuantizeLinear -> DequantizeLinear (graph outputs end at the
QuantizeLinear, under their own names); weights and biases become quantized initializers read
through DequantizeLinear, and so do a Concat's constant inputs (with the output's parameters).
Float nodes (custom operators and what follows them) read their quantized inputs through
DequantizeLinear and keep their outputs. LSTM nodes follow recurrent.py: per-gate weights, and
an int16 QuantizeLinear records the cell state's scale on Y_c (read by nothing unless the graph
reads Y_c).
"""
from __future__ import annotations

import numpy as np

from .graph import attributes, compute_nodes, graph_input_names
from .parameters import WEIGHTED_OPS, WeightPolicy, bias_params
from .qparams import QParams, quantize_array
from .recurrent import cell_output_name, lstm_inputs, lstm_outputs


class _QdqGraphBuilder:
    """Collects the rewritten graph's nodes and initializers, naming each tensor's parameters once."""

    def __init__(self, graph) -> None:
        self.initializers = {t.name: t for t in graph.initializer}
        self.inits: list = list(graph.initializer)
        self.nodes: list = []
        self._added: set[str] = set()
        self._quantized_weights: dict[str, str] = {}
        self._used_initializers: set[str] = set()

    def _params(self, prefix: str, qp: QParams) -> tuple[str, str]:
        from onnx import numpy_helper
        s_name, z_name = f"{prefix}_scale", f"{prefix}_zero_point"
        if s_name not in self._added:
            self._added.add(s_name)
            self.inits.append(numpy_helper.from_array(np.asarray(qp.scale, np.float32), s_name))
            self.inits.append(numpy_helper.from_array(np.asarray(qp.zero_point), z_name))
        return s_name, z_name

    def quantize(self, src: str, dst: str, prefix: str, qp: QParams) -> None:
        from onnx import helper
        s, z = self._params(prefix, qp)
        self.nodes.append(helper.make_node("QuantizeLinear", [src, s, z], [dst], name=f"{prefix}/quantize"))

    def dequantize(self, src: str, dst: str, prefix: str, qp: QParams) -> None:
        from onnx import helper
        s, z = self._params(prefix, qp)
        kw = {"axis": qp.axis} if qp.axis is not None else {}
        self.nodes.append(helper.make_node("DequantizeLinear", [src, s, z], [dst], name=f"{prefix}/dequantize", **kw))

    def constant(self, array: np.ndarray, name: str, qp: QParams) -> str:
        """A quantized initializer `name`_quantized and its DequantizeLinear; returns the float tensor."""
        from onnx import numpy_helper
        self.inits.append(numpy_helper.from_array(array, f"{name}_quantized"))
        self.dequantize(f"{name}_quantized", f"{name}_dequantized", name, qp)
        return f"{name}_dequantized"

    def weights(self, w_name: str, w: np.ndarray, wq: QParams) -> str:
        """The dequantized weights (shared by nodes that quantize the same weights alike)."""
        key = f"{w_name}|{wq.scale.tobytes()}|{wq.zero_point.tobytes()}"
        if key not in self._quantized_weights:
            base = w_name if w_name not in self._used_initializers else f"{w_name}_{len(self._quantized_weights)}"
            self._used_initializers.add(w_name)
            q = quantize_array(w, wq.scale, wq.zero_point, wq.dtype, wq.axis)
            self._quantized_weights[key] = self.constant(q, base, wq)
        return self._quantized_weights[key]

    def bias(self, b_name: str, b: np.ndarray, bq: QParams) -> str:
        """The dequantized int32 bias."""
        base = f"{b_name}_{len(self._quantized_weights)}" if b_name in self._used_initializers else b_name
        self._used_initializers.add(b_name)
        return self.constant(quantize_array(b, bq.scale, 0, np.int32, bq.axis), base, bq)

    def referenced_initializers(self) -> list:
        """The initializers still read by a node (the float weights and biases were replaced)."""
        referenced = {t for n in self.nodes for t in n.input}
        return [t for t in self.inits if t.name in referenced]


def _weighted_inputs(builder: _QdqGraphBuilder, node, inputs: list[str], params: dict[str, QParams],
                     policy: WeightPolicy) -> list[str]:
    """A Conv/Gemm/MatMul's inputs with its weights and bias replaced by dequantized ones."""
    from onnx import numpy_helper
    attrs = attributes(node)
    if node.op_type == "Gemm" and (attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0
                                   or attrs.get("beta", 1.0) != 1.0):
        raise NotImplementedError(f"Gemm {node.name!r}: only alpha = beta = 1, transA = 0 is supported")
    x_name = node.input[0]
    if x_name not in params:
        raise ValueError(f"{node.op_type} {node.name!r}: input {x_name!r} is not quantized")
    in_scale = np.float32(params[x_name].scale)
    w_name = node.input[1]
    w = numpy_helper.to_array(builder.initializers[w_name]).astype(np.float32)
    b_name = node.input[2] if len(node.input) > 2 and node.input[2] in builder.initializers else None
    b = numpy_helper.to_array(builder.initializers[b_name]).astype(np.float32) if b_name else None
    if b is not None and b.ndim != 1:
        raise NotImplementedError(f"{node.op_type} {node.name!r}: bias must be 1-D")
    wq = policy.weights(node.op_type, attrs, w, b, in_scale)
    inputs = list(inputs)
    inputs[1] = builder.weights(w_name, w, wq)
    if b_name is not None:
        inputs[2] = builder.bias(b_name, b, bias_params(in_scale, wq))
    return inputs


def _concat_inputs(builder: _QdqGraphBuilder, node, inputs: list[str], params: dict[str, QParams]) -> list[str]:
    """A quantized Concat's constant inputs as quantized initializers with the output's parameters."""
    from onnx import numpy_helper
    qp = params[node.output[0]]
    inputs = list(inputs)
    for i, name in enumerate(node.input):
        if name in builder.initializers:
            value = numpy_helper.to_array(builder.initializers[name]).astype(np.float32)
            inputs[i] = builder.constant(quantize_array(value, qp.scale, qp.zero_point, qp.dtype),
                                         f"{name}_{node.output[0]}", qp)
    return inputs


def _value_info(vi, qp: QParams | None):
    """A graph input/output's value info, retyped to `qp`'s type when it is quantized."""
    from onnx import helper
    if qp is None:
        return vi
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in vi.type.tensor_type.shape.dim]
    return helper.make_tensor_value_info(vi.name, helper.np_dtype_to_tensor_dtype(qp.dtype), dims)


def rewrite_graph(graph, params: dict[str, QParams], policy: WeightPolicy):
    """The QDQ graph of float `graph` with activation `params` (quantized inputs/outputs take their types)."""
    from onnx import helper
    builder = _QdqGraphBuilder(graph)
    graph_outputs = {o.name for o in graph.output}
    rename: dict[str, str] = {}
    for name in graph_input_names(graph):
        if name in params:
            builder.dequantize(name, f"{name}_dequantized", name, params[name])
            rename[name] = f"{name}_dequantized"

    nodes = compute_nodes(graph)
    builder.nodes.extend(n for n in graph.node if n.op_type == "Constant")
    consumed = {t for n in nodes for t in n.input}
    for node in nodes:
        inputs = [rename.get(t, t) for t in node.input]
        outputs = list(node.output)
        if node.op_type in WEIGHTED_OPS and len(node.input) > 1 and node.input[1] in builder.initializers:
            inputs = _weighted_inputs(builder, node, inputs, params, policy)
        elif node.op_type == "LSTM" and cell_output_name(node) in params:
            inputs = lstm_inputs(builder, node, inputs, params)
            outputs = lstm_outputs(node)
        elif node.op_type == "Concat" and node.output[0] in params:
            inputs = _concat_inputs(builder, node, inputs, params)
        quantized = [t for t in outputs if t and t in params]
        for i, t in enumerate(outputs):
            if t in quantized and t in graph_outputs:  # the output itself becomes the quantized tensor
                outputs[i] = f"{t}_float"
        new_node = helper.make_node(node.op_type, inputs, outputs, name=node.name, domain=node.domain or None)
        new_node.attribute.extend(node.attribute)
        builder.nodes.append(new_node)
        for t in quantized:
            qp = params[t]
            if t in graph_outputs:
                builder.quantize(f"{t}_float", t, t, qp)
                if t in consumed:
                    builder.dequantize(t, f"{t}_dequantized", t, qp)
            elif node.op_type == "LSTM" and t not in consumed:  # Y_c: it records the cell state's scale
                builder.quantize(t, f"{t}_quantized", t, qp)
                continue
            else:
                builder.quantize(t, f"{t}_quantized", t, qp)
                builder.dequantize(f"{t}_quantized", f"{t}_dequantized", t, qp)
            rename[t] = f"{t}_dequantized"

    inputs_vi = [_value_info(i, params.get(i.name)) for i in graph.input if i.name not in builder.initializers]
    outputs_vi = [_value_info(o, params.get(o.name)) for o in graph.output]
    return helper.make_graph(builder.nodes, f"{graph.name}_{policy.scheme}", inputs_vi, outputs_vi,
                             builder.referenced_initializers())
