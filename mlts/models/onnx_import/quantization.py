"""Quantized ONNX: QOperator and QDQ graphs become NNAPI 8-bit operations.

1. `normalize_qoperators`: every QLinear*/QGemm node (as `onnxruntime.quantization` writes them in
   QOperator format) is rewritten into its QDQ equivalent (DequantizeLinear -> float op ->
   QuantizeLinear), so both formats go through one path; channels_last convolutions and pools get
   their NHWC <-> NCHW Transposes on the 8-bit tensors, outside the unit; onnxruntime's contrib
   QuantizeLinear/DequantizeLinear become the standard ones.
2. `assign_quant` (in `quant_propagation`): integer tensors get their quantization parameters from
   the QuantizeLinear that produces them, the DequantizeLinear that reads them (graph inputs,
   weights), or, through operators that keep 8-bit values (Transpose, Reshape, Slice, Concat...),
   from a tensor holding the same integers, in either direction.
3. `fuse_qdq`: a float node whose data inputs all come from DequantizeLinear (bias may stay a float
   or int32 constant) and whose outputs all go to QuantizeLinear with one set of parameters is
   rewired to read and write the integer tensors: it becomes an NNAPI quantized operation. A node
   the converter cannot quantize (NotQuantizable) stays float.
4. `lower_leftovers`: DequantizeLinear of constants becomes a float constant, QuantizeLinear of a
   constant an integer one; the remaining ones become NNAPI DEQUANTIZE/QUANTIZE operations (for
   example QUANTIZE of a float graph input, DEQUANTIZE of the final result).
"""
from __future__ import annotations

import numpy as np

from .converters import get_converter
from .errors import NotQuantizable, import_error
from .ir import Graph, Node, Quant, Value
from .quant_propagation import ACTIVATION_DTYPES, assign_quant, qdq_params

QOPERATORS = {"QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool",
              "QLinearAveragePool", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearConcat",
              "QLinearReduceMean", "QGemm"}
# onnxruntime's contrib QuantizeLinear/DequantizeLinear (written by its quantizer for some options): the same
# operators as the standard ones for 8-bit types.
CONTRIB_QDQ = {"QuantizeLinear", "DequantizeLinear"}


# -- 1. QOperator -> QDQ ---------------------------------------------------------------------------
class _Builder:
    def __init__(self, graph: Graph, node: Node) -> None:
        self.graph, self.node, self.nodes = graph, node, []
        self.opset = graph.opsets[""]

    def const(self, i: int, what: str) -> np.ndarray | None:
        name = self.node.input(i)
        if name is None:
            return None
        value = self.graph.const(name)
        if value is None:
            raise import_error(f"{self.node.describe()}: {what} (input {i}) must be a constant")
        return value

    def dq(self, x: str, scale: str | None, zp: str | None, axis: int | None = None) -> str:
        if scale is None:
            raise import_error(f"{self.node.describe()}: a quantized input has no scale")
        out = self.graph.fresh_name(f"{x}_dq")
        xv = self.graph.value(x)
        self.graph.values[out] = Value(out, np.dtype(np.float32), xv.shape if xv.const is not None else None)
        attrs = {"axis": axis} if axis is not None else {}
        self.nodes.append(Node("DequantizeLinear", [x, scale, zp or ""], [out], attrs,
                               f"{self.node.name}/dq_{len(self.nodes)}", "", self.opset))
        return out

    def q(self, xf: str, scale: str | None, zp: str | None, out: str) -> None:
        self.nodes.append(Node("QuantizeLinear", [xf, scale, zp or ""], [out], {},
                               f"{self.node.name}/q", "", self.opset))

    def op(self, op_type: str, inputs: list[str], attrs: dict, *, quantized_out: bool = True,
           opset: int | None = None) -> str:
        out = self.graph.fresh_name(f"{self.node.outputs[0]}_float") if quantized_out else self.node.outputs[0]
        if quantized_out:
            self.graph.values[out] = Value(out, np.dtype(np.float32))
        attrs = dict(attrs)
        attrs["_origin"] = f"{self.node.domain + '.' if self.node.domain else ''}{self.node.op_type}"
        self.nodes.append(Node(op_type, inputs, [out], attrs, self.node.name, "", opset or self.opset))
        return out

    def scale_product(self, *arrays: np.ndarray) -> str:
        product = np.float32(1.0)
        for a in arrays:
            product = (product * np.asarray(a, dtype=np.float32)).astype(np.float32)
        return self.graph.add_const(f"{self.node.name}_bias_scale", np.asarray(product, np.float32).reshape(-1)
                                    if np.ndim(product) else np.asarray(product, np.float32))


def _plain_attrs(node: Node, drop: tuple[str, ...] = ()) -> dict:
    return {k: v for k, v in node.attrs.items() if k not in drop and not k.startswith("_")}


def _channels_perms(b: _Builder, x: str) -> tuple[list[int], list[int]] | None:
    """(to channels-first, back) permutations for operators with channels_last=1 (None without it)."""
    if not b.node.attr("channels_last", 0):
        return None
    kernel = b.node.attr("kernel_shape")
    rank = b.graph.value(x).rank or (len(kernel) + 2 if kernel else 4)
    return [0, rank - 1] + list(range(1, rank - 1)), [0] + list(range(2, rank)) + [1]


def _int_transpose(b: _Builder, x: str, perm: list[int], out: str | None = None) -> str:
    """Transpose of an 8-bit tensor: it keeps the integers, so the QDQ unit between stays intact and the
    parameters travel through it (see quant_propagation)."""
    if out is None:
        out = b.graph.fresh_name(f"{x}_t")
        b.graph.values[out] = Value(out, b.graph.value(x).dtype)
    b.nodes.append(Node("Transpose", [x], [out], {"perm": perm}, f"{b.node.name}/{out}", "", b.opset))
    return out


def _nchw_unit(b: _Builder, x: str, x_scale: str | None, x_zp: str | None, y_scale: str | None,
               y_zp: str | None, body) -> None:
    """DQ -> body -> Q for QLinear convolutions and pools; with channels_last=1 (NHWC in and out) the
    Transposes to and from NCHW go on the 8-bit tensors outside the unit."""
    perms = _channels_perms(b, x)
    xf = b.dq(_int_transpose(b, x, perms[0]) if perms else x, x_scale, x_zp)
    y = body(xf)
    out = b.node.outputs[0]
    if perms is None:
        b.q(y, y_scale, y_zp, out)
        return
    y_int = b.graph.fresh_name(f"{out}_nchw")
    b.graph.values[y_int] = Value(y_int, b.graph.value(b.node.input(0)).dtype)
    b.q(y, y_scale, y_zp, y_int)
    _int_transpose(b, y_int, perms[1], out)


def _expand_qoperator(node: Node, graph: Graph) -> list[Node]:
    b = _Builder(graph, node)
    i = node.input
    t = node.op_type
    if t == "QLinearConv":
        w_scale = b.const(4, "w_scale")
        per_channel = w_scale is not None and np.size(w_scale) > 1
        w = b.dq(i(3), i(4), i(5), 0 if per_channel else None)
        inputs = [w]
        if i(8):
            bias_scale = b.scale_product(b.const(1, "x_scale"), w_scale)
            inputs.append(b.dq(i(8), bias_scale, None, 0 if per_channel else None))
        attrs = _plain_attrs(node, ("channels_last",))
        _nchw_unit(b, i(0), i(1), i(2), i(6), i(7), lambda xf: b.op("Conv", [xf] + inputs, attrs))
    elif t == "QLinearMatMul":
        b_scale = b.const(4, "b_scale")
        a_scale = b.const(1, "a_scale")
        if a_scale is not None and np.size(a_scale) > 1:
            raise import_error(f"{node.describe()}: per-row quantization of input A is not supported")
        a = b.dq(i(0), i(1), i(2))
        bb = b.dq(i(3), i(4), i(5), -1 if b_scale is not None and np.size(b_scale) > 1 else None)
        y = b.op("MatMul", [a, bb], {})
        b.q(y, i(6), i(7), node.outputs[0])
    elif t in ("QLinearAdd", "QLinearMul"):
        a = b.dq(i(0), i(1), i(2))
        bb = b.dq(i(3), i(4), i(5))
        y = b.op(t[len("QLinear"):], [a, bb], {})
        b.q(y, i(6), i(7), node.outputs[0])
    elif t in ("QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearSigmoid", "QLinearLeakyRelu",
               "QLinearSoftmax", "QLinearReduceMean"):
        float_op = t[len("QLinear"):]
        attrs = _plain_attrs(node, ("channels_last", "opset"))
        if t in ("QLinearGlobalAveragePool", "QLinearAveragePool"):
            _nchw_unit(b, i(0), i(1), i(2), i(3), i(4), lambda xf: b.op(float_op, [xf], attrs))
            return b.nodes
        opset = node.attr("opset") if t == "QLinearSoftmax" else None
        inputs = [b.dq(i(0), i(1), i(2))]
        if t == "QLinearReduceMean" and b.opset >= 18 and "axes" in attrs:
            # The contrib operator has axes as an attribute; ReduceMean-18 takes them as an input.
            inputs.append(graph.add_const(f"{node.name}_axes", np.asarray(attrs.pop("axes"), np.int64)))
        y = b.op(float_op, inputs, attrs, opset=opset)
        b.q(y, i(3), i(4), node.outputs[0])
    elif t == "QLinearConcat":
        parts = []
        rest = node.inputs[2:]
        if len(rest) % 3:
            raise import_error(f"{node.describe()}: inputs after Y_scale, Y_zero_point must come in triples")
        for k in range(0, len(rest), 3):
            parts.append(b.dq(rest[k], rest[k + 1], rest[k + 2] or None))
        y = b.op("Concat", parts, _plain_attrs(node))
        b.q(y, i(0), i(1), node.outputs[0])
    elif t == "QGemm":
        b_scale = b.const(4, "b_scale")
        per_column = b_scale is not None and np.size(b_scale) > 1
        a = b.dq(i(0), i(1), i(2))
        bb = b.dq(i(3), i(4), i(5), (0 if node.attr("transB", 0) else 1) if per_column else None)
        inputs = [a, bb]
        alpha = float(node.attr("alpha", 1.0))
        if i(6):
            c_scale = b.scale_product(np.float32(alpha), b.const(1, "a_scale"), b_scale)
            inputs.append(b.dq(i(6), c_scale, None, 0 if per_column else None))
        attrs = {"alpha": alpha, "beta": 1.0, "transA": int(node.attr("transA", 0)),
                 "transB": int(node.attr("transB", 0))}
        if i(7):
            y = b.op("Gemm", inputs, attrs)
            b.q(y, i(7), i(8), node.outputs[0])
        else:
            b.op("Gemm", inputs, attrs, quantized_out=False)
    else:  # pragma: no cover - QOPERATORS and this function are kept in step
        raise import_error(f"{node.describe()}: no QDQ expansion")
    return b.nodes


def normalize_qoperators(graph: Graph) -> None:
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.op_type in QOPERATORS and n.domain in ("", "com.microsoft"):
            nodes.extend(_expand_qoperator(n, graph))
            continue
        if n.op_type in CONTRIB_QDQ and n.domain == "com.microsoft":
            n.domain, n.opset = "", graph.opsets[""]
        nodes.append(n)
    graph.nodes = nodes


def record_unread_quantize(graph: Graph) -> None:
    """graph.unread_quant: the parameters of QuantizeLinear nodes nothing reads (before dead-node elimination
    drops them), e.g. the int16 QuantizeLinear a quantizer puts on an LSTM's Y_c to record the cell state's scale."""
    consumers = graph.consumers()
    for n in graph.nodes:
        if n.op_type != "QuantizeLinear" or n.domain not in ("", "ai.onnx") or n.outputs[0] in graph.outputs \
                or consumers.get(n.outputs[0]) or n.attr("block_size", 0) \
                or any(graph.const(n.input(i)) is None for i in (1, 2) if n.input(i)):
            continue
        graph.unread_quant[n.inputs[0]] = qdq_params(n, graph)


# -- 3. QDQ fusion -----------------------------------------------------------------------------------
def _fuse_one(node: Node, graph: Graph, producers: dict, consumers: dict) -> list[Node] | None:
    conv = get_converter(node)
    if conv is None or not conv.quantizable:
        return None
    outputs = set(graph.outputs)
    new_inputs = list(node.inputs)
    any_dq = False
    for i in conv.data_input_indices(node):
        name = node.inputs[i]
        v = graph.value(name)
        p = producers.get(name)
        if p is not None and p.op_type == "DequantizeLinear":
            src = graph.value(p.inputs[0])
            q = src.quant
            if q is None:
                return None
            if q.dtype not in ACTIVATION_DTYPES and not (i == conv.bias_input and q.dtype == np.dtype(np.int32)):
                return None
            if not q.per_tensor and i not in (conv.weight_input, conv.bias_input):
                return None
            if not q.per_tensor and src.const is None:
                return None
            new_inputs[i] = src.name
            any_dq = True
        elif i == conv.bias_input and v.const is not None:
            continue
        elif v.quant is not None and v.dtype in ACTIVATION_DTYPES:
            continue  # already an integer tensor
        else:
            return None
    if not any_dq:
        return None
    new_outputs = []
    removed: list[Node] = []
    aliases: list[tuple[str, str]] = []
    for k, o in enumerate(node.outputs):
        if not o:
            new_outputs.append(o)
            continue
        cons = consumers.get(o, [])
        if not cons and o not in outputs and k in conv.optional_outputs:
            new_outputs.append(o)  # unread: it stays a float tensor the converter does not write
            continue
        if o in outputs or not cons or any(c.op_type != "QuantizeLinear" for c in cons):
            return None
        qs = [graph.value(c.outputs[0]).quant for c in cons]
        if any(q is None or not q.per_tensor or q.dtype not in ACTIVATION_DTYPES or not q.same(qs[0]) for q in qs):
            return None
        new_outputs.append(cons[0].outputs[0])
        removed.extend(cons)
        aliases.extend((c.outputs[0], cons[0].outputs[0]) for c in cons[1:])
    saved = node.inputs, node.outputs
    node.inputs, node.outputs = new_inputs, new_outputs
    try:
        conv.check_quantized(node, graph)
    except NotQuantizable:
        node.inputs, node.outputs = saved
        return None
    for old, new in aliases:
        graph.replace_uses(old, new)
    return removed


def fuse_qdq(graph: Graph) -> None:
    if not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in graph.nodes):
        return
    for node in list(graph.nodes):
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            continue
        removed = _fuse_one(node, graph, graph.producers(), graph.consumers())
        if removed:
            graph.remove_nodes(removed)
    graph.eliminate_dead_nodes()


# -- 4. what is left of QuantizeLinear / DequantizeLinear ----------------------------------------------
def _quantize_array(x: np.ndarray, q: Quant) -> np.ndarray:
    """ONNX QuantizeLinear on constants: round half to even, saturate."""
    s = q.scale.astype(np.float64)
    zp = q.zero_point.astype(np.float64)
    if not q.per_tensor and q.axis is not None and x.ndim:
        shape = [1] * x.ndim
        shape[q.axis] = -1
        s, zp = s.reshape(shape), zp.reshape(shape)
    else:
        s, zp = s[0], zp[0]
    info = np.iinfo(q.dtype)
    return np.clip(np.rint(x.astype(np.float64) / s) + zp, info.min, info.max).astype(q.dtype)


def fold_constant_quantize(graph: Graph) -> None:
    """QuantizeLinear of a constant (weights quantized in the graph) becomes an integer constant."""
    keep: list[Node] = []
    for n in graph.nodes:
        if n.op_type == "QuantizeLinear" and graph.const(n.inputs[0]) is not None:
            out = graph.value(n.outputs[0])
            out.const = _quantize_array(np.asarray(graph.const(n.inputs[0])), out.quant)
            out.dtype, out.shape = out.const.dtype, tuple(out.const.shape)
            continue
        keep.append(n)
    graph.nodes = keep


def lower_leftovers(graph: Graph) -> None:
    """DequantizeLinear of a constant becomes a float constant; Q(DQ(x)) with equal parameters is x."""
    keep: list[Node] = []
    for n in graph.nodes:
        if n.op_type == "DequantizeLinear":
            x = graph.value(n.inputs[0])
            if x.const is not None:
                out = graph.value(n.outputs[0])
                out.const = x.quant.dequantize(x.const).astype(np.float32)
                out.dtype, out.shape = out.const.dtype, tuple(out.const.shape)
                continue
        keep.append(n)
    graph.nodes = keep
    producers = graph.producers()
    for n in list(graph.nodes):
        if n.op_type != "QuantizeLinear":
            continue
        p = producers.get(n.inputs[0])
        if p is not None and p.op_type == "DequantizeLinear":
            src = graph.value(p.inputs[0])
            if src.quant is not None and src.quant.same(graph.value(n.outputs[0]).quant) \
                    and n.outputs[0] not in graph.outputs:
                graph.replace_uses(n.outputs[0], src.name)
    graph.eliminate_dead_nodes()


def quantize_graph(graph: Graph) -> None:
    """Passes 2 to 4 (pass 1 runs before shape inference)."""
    if not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in graph.nodes) and \
            not any(graph.value(i).dtype in ACTIVATION_DTYPES for i in graph.inputs):
        return
    assign_quant(graph)
    fold_constant_quantize(graph)
    fuse_qdq(graph)
    lower_leftovers(graph)
