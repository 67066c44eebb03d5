"""The importer's intermediate graph: ONNX values and nodes, rewritten by passes before conversion.

A `Value` is one ONNX tensor name: dtype, shape (None for an unknown dimension or rank), a constant
value when known at import time, and quantization parameters (`Quant`) once the quantization pass
has decided that the tensor is carried as 8-bit integers. A `Node` is one ONNX node with its
attributes parsed into Python values. Passes rewrite the graph in place; conversion walks the nodes
in topological order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import import_error

Shape = tuple  # of int | None


@dataclass(frozen=True)
class Quant:
    """Affine quantization of an integer tensor: real = (q - zero_point) * scale.

    `scale` and `zero_point` are 1-element arrays for per-tensor quantization, or 1-D arrays along
    `axis` for per-axis (per-channel) quantization. `dtype` is the integer storage type.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    dtype: np.dtype
    axis: int | None = None

    @staticmethod
    def make(scale, zero_point, dtype, axis: int | None = None) -> "Quant":
        s = np.asarray(scale, dtype=np.float32).reshape(-1)
        zp = np.zeros(s.shape, np.int64) if zero_point is None else np.asarray(zero_point).astype(np.int64).reshape(-1)
        if zp.size == 1 and s.size > 1:
            zp = np.full(s.shape, int(zp[0]), np.int64)
        if s.size == 1 and zp.size == 1:
            axis = None
        return Quant(s, zp, np.dtype(dtype), axis)

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and self.zero_point.size == 1

    @property
    def s(self) -> float:
        return float(self.scale[0])

    @property
    def zp(self) -> int:
        return int(self.zero_point[0])

    def same(self, other: "Quant | None") -> bool:
        return (other is not None and self.dtype == other.dtype and self.scale.shape == other.scale.shape
                and np.array_equal(self.scale, other.scale) and np.array_equal(self.zero_point, other.zero_point)
                and (self.per_tensor or self.axis == other.axis))

    def describe(self) -> str:
        if self.per_tensor:
            return f"{self.dtype.name} scale={self.s:g} zp={self.zp}"
        return f"{self.dtype.name} per-axis({self.axis}) x{self.scale.size}"

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """Real values (float64) of `q`."""
        q = np.asarray(q).astype(np.float64)
        s = self.scale.astype(np.float64)
        zp = self.zero_point.astype(np.float64)
        if not self.per_tensor and self.axis is not None and q.ndim:
            shape = [1] * q.ndim
            shape[self.axis] = -1
            s, zp = s.reshape(shape), zp.reshape(shape)
        else:
            s, zp = s[0], zp[0]
        return (q - zp) * s


@dataclass
class Value:
    name: str
    dtype: np.dtype | None = None
    shape: Shape | None = None
    const: np.ndarray | None = None
    quant: Quant | None = None

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def static_shape(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) and d >= 0 for d in self.shape)

    def describe(self) -> str:
        dims = "?" if self.shape is None else "[" + ",".join("?" if d is None else str(d) for d in self.shape) + "]"
        q = f" ({self.quant.describe()})" if self.quant is not None else ""
        return f"{self.name}: {self.dtype.name if self.dtype is not None else '?'}{dims}{q}"


@dataclass
class Node:
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    domain: str = ""
    opset: int = 0
    # Original attribute protos (exported unchanged when the parsed value was not modified).
    attr_protos: dict[str, onnx.AttributeProto] = field(default_factory=dict, repr=False)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def set_attr(self, name: str, value: Any) -> None:
        self.attrs[name] = value
        self.attr_protos.pop(name, None)

    def input(self, i: int) -> str | None:
        """Input name, or None when the optional input is absent."""
        return self.inputs[i] if i < len(self.inputs) and self.inputs[i] else None

    def describe(self) -> str:
        domain = f"{self.domain}." if self.domain not in ("", "ai.onnx") else ""
        name = self.name or (self.outputs[0] if self.outputs else "?")
        origin = self.attrs.get("_origin")  # a QOperator node rewritten into this one
        op = f"{origin} as {self.op_type}" if origin else f"{domain}{self.op_type}"
        return f"node '{name}' ({op}, opset {self.opset})"

    def to_proto(self) -> onnx.NodeProto:
        proto = helper.make_node(self.op_type, list(self.inputs), list(self.outputs), name=self.name or None,
                                 domain=self.domain or None)
        for key, value in self.attrs.items():
            if key.startswith("_"):
                continue  # importer-internal annotations
            if key in self.attr_protos:
                proto.attribute.append(self.attr_protos[key])
            else:
                proto.attribute.append(_make_attribute(key, value))
        return proto


def _make_attribute(key: str, value: Any) -> onnx.AttributeProto:
    if isinstance(value, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(value))
    if isinstance(value, (list, tuple)) and not value:
        return helper.make_attribute(key, [], attr_type=onnx.AttributeProto.INTS)
    return helper.make_attribute(key, value)


def parse_attributes(proto: onnx.NodeProto, where: str) -> tuple[dict[str, Any], dict[str, onnx.AttributeProto]]:
    attrs, protos = {}, {}
    for a in proto.attribute:
        if a.ref_attr_name:
            raise import_error(f"{where}: attribute {a.name} refers to a function attribute, which is not supported")
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            raise import_error(f"{where}: subgraph attribute {a.name} (control flow) is not supported")
        try:
            v = helper.get_attribute_value(a)
        except Exception as e:  # malformed attribute payload
            raise import_error(f"{where}: attribute {a.name} cannot be read ({e})") from None
        if isinstance(v, onnx.TensorProto):
            v = tensor_to_array(v, f"{where}: attribute {a.name}")
        elif isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode("utf-8", "replace") for x in v]
        attrs[a.name] = v
        protos[a.name] = a
    return attrs, protos


def contiguous(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous array of the same shape (np.ascontiguousarray turns 0-d arrays into 1-d ones)."""
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def tensor_to_array(t: onnx.TensorProto, what: str) -> np.ndarray:
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise import_error(f"{what}: tensor data is stored in an external file, which import_onnx does not read "
                           "(load the model with its external data and pass the ModelProto or bytes)")
    try:
        arr = numpy_helper.to_array(t)
    except Exception as e:
        raise import_error(f"{what}: tensor cannot be decoded ({type(e).__name__}: {e})") from None
    expected = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
    if arr.size != expected:
        raise import_error(f"{what}: tensor holds {arr.size} values for dimensions {list(t.dims)}")
    return contiguous(arr)


class Graph:
    """Nodes, values, graph inputs/outputs, and the helpers passes use to rewrite them."""

    def __init__(self, name: str, opsets: dict[str, int]) -> None:
        self.name = name
        self.opsets = opsets
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        #: Parameters of QuantizeLinear nodes whose result nothing reads, by the tensor they quantize: a
        #: quantizer's record of parameters no tensor carries (an LSTM's cell-state scale on Y_c), kept when
        #: dead-node elimination drops those nodes.
        self.unread_quant: dict[str, Quant] = {}
        self._counter = 0

    # -- values ---------------------------------------------------------------------------------
    def value(self, name: str) -> Value:
        v = self.values.get(name)
        if v is None:
            v = self.values[name] = Value(name)
        return v

    def const(self, name: str | None) -> np.ndarray | None:
        if not name:
            return None
        v = self.values.get(name)
        return None if v is None else v.const

    def fresh_name(self, hint: str) -> str:
        while True:
            self._counter += 1
            name = f"{hint}__mlts{self._counter}"
            if name not in self.values:
                return name

    def add_const(self, hint: str, array: np.ndarray) -> str:
        name = self.fresh_name(hint)
        arr = np.asarray(array)
        self.values[name] = Value(name, arr.dtype, tuple(arr.shape), arr)
        return name

    # -- structure ------------------------------------------------------------------------------
    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def replace_uses(self, old: str, new: str) -> None:
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def remove_nodes(self, dead: Iterable[Node]) -> None:
        ids = {id(n) for n in dead}
        self.nodes = [n for n in self.nodes if id(n) not in ids]

    def eliminate_dead_nodes(self) -> None:
        """Drop nodes none of whose outputs reach a graph output."""
        live = set(self.outputs)
        keep: list[Node] = []
        for n in reversed(self.nodes):
            if any(o in live for o in n.outputs if o):
                keep.append(n)
                live.update(i for i in n.inputs if i)
        self.nodes = keep[::-1]

    def sort(self) -> None:
        """Topological order (stable); a cycle is an error."""
        produced = {o: n for n in self.nodes for o in n.outputs if o}
        order: list[Node] = []
        state: dict[int, int] = {}
        for root in self.nodes:
            if id(root) in state:
                continue
            stack = [(root, iter([i for i in root.inputs if i]))]
            state[id(root)] = 1
            while stack:
                node, it = stack[-1]
                advanced = False
                for name in it:
                    p = produced.get(name)
                    if p is None or state.get(id(p)) == 2:
                        continue
                    if state.get(id(p)) == 1:
                        raise import_error(f"the graph has a cycle through {p.describe()}")
                    state[id(p)] = 1
                    stack.append((p, iter([i for i in p.inputs if i])))
                    advanced = True
                    break
                if not advanced:
                    state[id(node)] = 2
                    order.append(node)
                    stack.pop()
        self.nodes = order

    # -- export (shape inference, folding, debugging) --------------------------------------------
    def to_model(self, *, large_constants_as_inputs: bool = False) -> onnx.ModelProto:
        inits, inputs = [], []
        used = {i for n in self.nodes for i in n.inputs if i} | set(self.outputs)
        for name in self.inputs:
            inputs.append(_value_info(self.values[name]))
        for name, v in self.values.items():
            if v.const is None or name not in used:
                continue
            if large_constants_as_inputs and v.const.size > 256:
                inputs.append(helper.make_tensor_value_info(name, _elem_type(v.const.dtype), list(v.const.shape)))
            else:
                inits.append(numpy_helper.from_array(np.asarray(v.const), name))
        outputs = [_value_info(self.values[o]) if o in self.values else helper.make_value_info(o, onnx.TypeProto())
                   for o in self.outputs]
        boundary = set(self.inputs) | set(self.outputs)
        infos = [_value_info(v) for name, v in self.values.items()
                 if v.const is None and name not in boundary and v.dtype is not None and v.shape is not None
                 and name in used]
        graph = helper.make_graph([n.to_proto() for n in self.nodes], self.name or "graph", inputs, outputs, inits,
                                  value_info=infos)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in self.opsets.items()])
        model.ir_version = 10
        return model


def _elem_type(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _value_info(v: Value) -> onnx.ValueInfoProto:
    if v.dtype is None:
        return helper.make_value_info(v.name, onnx.TypeProto())
    shape = None if v.shape is None else [d if d is not None else None for d in v.shape]
    return helper.make_tensor_value_info(v.name, _elem_type(v.dtype), shape)
