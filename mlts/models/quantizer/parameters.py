"""Choosing quantization parameters: which activations are quantized and how, and the weights' and biases'.

Activations follow what NNAPI's quantized operations require (see the package docstring): a
convolution fused with its activation is quantized after the activation, pooling and reshaping
keep their input's parameters, Softmax / Sigmoid / Tanh outputs have fixed ones, a Concat's
inputs share its output's parameters where they can, LSTM states follow recurrent.py, the rest
are calibrated. Non-standard nodes (custom domains) and everything after them stay float.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .graph import compute_nodes, constant_names, float_tensors, graph_input_names
from .qparams import (ACTIVATION_DTYPES, INT32, SOFTMAX_SCALE, SOFTMAX_ZERO_POINT, TANH_SCALE, TANH_ZERO_POINT,
                      QParams, choose_qparams, symmetric_scales)
from .recurrent import LstmStateStatistic, cell_qparams, plan_lstm

FUSABLE_ACTIVATIONS = ("Relu", "Clip")
SAME_PARAMS_OPS = ("GlobalAveragePool", "AveragePool", "MaxPool", "Flatten", "Reshape", "Identity", "Transpose",
                   "Squeeze", "Unsqueeze")
CALIBRATED_OPS = ("Conv", "Gemm", "MatMul", "Relu", "Clip", "Add", "Sub", "Mul", "Concat")
WEIGHTED_OPS = ("Conv", "Gemm", "MatMul")
#: NNAPI's fixed output parameters (scale, {scheme: zero point}): SOFTMAX, LOGISTIC, TANH
FIXED_OUTPUT_OPS = {"Softmax": (SOFTMAX_SCALE, SOFTMAX_ZERO_POINT), "Sigmoid": (SOFTMAX_SCALE, SOFTMAX_ZERO_POINT),
                    "Tanh": (TANH_SCALE, TANH_ZERO_POINT)}
SUPPORTED_OPS = CALIBRATED_OPS + SAME_PARAMS_OPS + tuple(FIXED_OUTPUT_OPS) + ("LSTM",)


@dataclass
class ActivationPlan:
    """How each activation tensor is quantized.

    specs: ("calibrated",) (its own range), ("calibrated", key) (the range `key`, e.g. an LSTM's
    hidden state over every step), ("same", other), ("fixed", scale, zero point) or ("cell", key)
    (an LSTM cell state: int16, power-of-two scale). `order` lists the quantized tensors in graph
    order; `fused` the convolution outputs left float because their activation is quantized
    instead; `shared` maps calibrated tensors to the group whose joint range they all take (a
    Concat's output and its inputs' sources); `derived` the calibration statistics computed from
    tensors rather than read (recurrent.LstmStateStatistic).
    """

    specs: dict[str, tuple]
    fused: set[str]
    order: list[str]
    shared: dict[str, tuple[str, ...]] = field(default_factory=dict)
    derived: list = field(default_factory=list)

    def calibrated(self) -> list[str]:
        """The tensors whose own range is calibrated (read from the graph)."""
        return [t for t, spec in self.specs.items() if spec == ("calibrated",)]


def _share_concat_params(concats: list, specs: Mapping[str, tuple]) -> dict[str, tuple[str, ...]]:
    """Groups each Concat's output with the calibrated sources of its inputs (through "same" chains).

    NNAPI's quantized CONCATENATION requantizes inputs whose parameters differ from the output's;
    with one joint range for all of them the concatenation is exact (one rounding, at the sources).
    Inputs whose source has fixed or derived parameters keep their own (the importer accepts them).
    """
    parent: dict[str, str] = {}

    def find(t: str) -> str:
        while parent.get(t, t) != t:
            t = parent[t]
        return t

    for node in concats:
        members = [node.output[0]]
        for t in node.input:
            while t in specs and specs[t][0] == "same":
                t = specs[t][1]
            if specs.get(t) == ("calibrated",):
                members.append(t)
        for t in members:
            parent.setdefault(t, t)
            parent[find(t)] = find(members[0])
    groups: dict[str, list[str]] = {}
    for t in parent:
        groups.setdefault(find(t), []).append(t)
    return {t: tuple(g) for g in groups.values() if len(g) > 1 for t in g}


def plan_activations(model, scheme: str, input_params: tuple[float, int] | None) -> ActivationPlan:
    """The plan for every activation of `model`; input_params None calibrates the graph input."""
    graph = model.graph
    constants = constant_names(graph)
    inputs = graph_input_names(graph)
    nodes = compute_nodes(graph)
    outputs = {o.name for o in graph.output}
    left_float = float_tensors(graph)
    initializers = {t.name for t in graph.initializer}
    consumers: dict[str, list] = {}
    for node in nodes:
        for t in node.input:
            if t:
                consumers.setdefault(t, []).append(node)
    specs: dict[str, tuple] = {}
    order: list[str] = []
    for name in inputs:
        specs[name] = ("fixed",) + input_params if input_params is not None else ("calibrated",)
        order.append(name)
    fused: set[str] = set()
    concats: list = []
    derived: list = []
    for node in nodes:
        op = node.op_type
        if any(t in left_float for t in node.output):
            continue  # a custom operator or after one: stays float
        if op not in SUPPORTED_OPS:
            raise NotImplementedError(f"cannot quantize {op} ({node.name!r}); supported: {', '.join(SUPPORTED_OPS)}")
        if op == "Concat" and any(t in constants and t not in initializers for t in node.input):
            raise NotImplementedError(f"Concat {node.name!r}: constant inputs must be initializers")
        if op == "LSTM":
            lstm = plan_lstm(node, graph, scheme, set(consumers) | outputs)
            for t in lstm.hidden_outputs:
                specs[t] = ("calibrated", lstm.hidden_key)
                order.append(t)
            specs[lstm.cell_output] = ("cell", lstm.cell_key)
            order.append(lstm.cell_output)
            derived.append(LstmStateStatistic(lstm, graph))
            continue
        out = node.output[0]
        if op in WEIGHTED_OPS:
            users = consumers.get(out, [])
            if (len(users) == 1 and users[0].op_type in FUSABLE_ACTIVATIONS and out not in outputs
                    and all(not t or t in constants for t in users[0].input[1:])):
                fused.add(out)
                continue
        if op in FIXED_OUTPUT_OPS:
            scale, zero_points = FIXED_OUTPUT_OPS[op]
            specs[out] = ("fixed", scale, zero_points[scheme])
        elif op in SAME_PARAMS_OPS:
            specs[out] = ("same", node.input[0])
        else:
            specs[out] = ("calibrated",)
            if op == "Concat":
                concats.append(node)
        order.append(out)
    return ActivationPlan(specs, fused, order, _share_concat_params(concats, specs), derived)


def _calibrated_range(plan: ActivationPlan, name: str, key: str,
                      ranges: Mapping[str, tuple[float, float]]) -> tuple[float, float]:
    """A tensor's range: its own (or `key`'s), or the joint range of its Concat group."""
    members = plan.shared.get(name, (key,))
    return min(ranges[m][0] for m in members), max(ranges[m][1] for m in members)


def activation_params(plan: ActivationPlan, ranges: Mapping[str, tuple[float, float]],
                      scheme: str) -> dict[str, QParams]:
    """Every planned activation's parameters (in graph order, so "same" finds its source)."""
    act_dtype = np.dtype(ACTIVATION_DTYPES[scheme])
    params: dict[str, QParams] = {}
    for name in plan.order:
        spec = plan.specs[name]
        if spec[0] == "fixed":
            params[name] = QParams.per_tensor(spec[1], spec[2], act_dtype)
        elif spec[0] == "same":
            src = spec[1]
            if src not in params:
                raise ValueError(f"{name!r} must share the parameters of {src!r}, which is not quantized")
            params[name] = params[src]
        elif spec[0] == "cell":
            params[name] = cell_qparams(*ranges[spec[1]])
        else:
            lo, hi = _calibrated_range(plan, name, spec[1] if len(spec) > 1 else name, ranges)
            scale, zp = choose_qparams(lo, hi, act_dtype)
            params[name] = QParams.per_tensor(scale, zp, act_dtype)
    return params


def _weight_params(w: np.ndarray, scheme: str, axis: int | None, bits: int = 8) -> QParams:
    """uint8: per-tensor asymmetric; int8: symmetric, per channel along `axis` (or per tensor)."""
    if scheme == "uint8":
        scale, zp = choose_qparams(float(w.min()), float(w.max()), np.uint8, bits=bits)
        return QParams.per_tensor(scale, zp, np.uint8)
    if axis is None:
        return QParams(symmetric_scales(np.abs(w).max(), bits=bits), np.array(0, np.int8))
    reduce = tuple(i for i in range(w.ndim) if i != axis)
    scales = symmetric_scales(np.abs(w).max(axis=reduce), bits=bits)
    return QParams(scales, np.zeros(scales.shape, np.int8), axis)


def _fit_bias(w: np.ndarray, b: np.ndarray | None, wq: QParams, in_scale: np.float32, scheme: str,
              bits: int = 8) -> QParams:
    """Widens weight scales where an int32 bias (scale = in x w) would overflow (very rare)."""
    if b is None:
        return wq
    b = np.asarray(b, np.float64).reshape(-1)
    limit = float(INT32.max) - 1.0
    if wq.axis is None:
        need = float(np.abs(b).max(initial=0.0)) / (float(in_scale) * limit)
        if need <= float(wq.scale):
            return wq
        if scheme == "uint8":
            lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
            span = need * (2 ** bits - 1)
            grow = span / max(hi - lo, 1e-30)
            scale, zp = choose_qparams(lo * grow, hi * grow, np.uint8, bits=bits)
            return QParams.per_tensor(scale, zp, np.uint8)
        return QParams(np.array(np.float32(need) * np.float32(1.0001), np.float32), wq.zero_point)
    need = (np.abs(b) / (float(in_scale) * limit)).astype(np.float32) * np.float32(1.0001)
    return QParams(np.maximum(wq.scale, need).astype(np.float32), wq.zero_point, wq.axis)


@dataclass(frozen=True)
class WeightPolicy:
    """How a quantization scheme quantizes the weights and biases of Conv, Gemm and MatMul."""

    scheme: str
    per_channel_fc: bool = False
    reduce_range: bool = False

    @property
    def bits(self) -> int:
        return 7 if self.reduce_range else 8

    def axis(self, op_type: str, attrs: Mapping) -> int | None:
        """The per-channel axis of the weights (None: per tensor)."""
        if self.scheme != "int8":
            return None
        if op_type == "Conv":
            return 0  # output channels of OIHW
        if not self.per_channel_fc:
            return None  # NNAPI's FULLY_CONNECTED has no per-channel filters
        if op_type == "Gemm":
            return 0 if attrs.get("transB", 0) else 1
        return 1

    def weights(self, op_type: str, attrs: Mapping, w: np.ndarray, b: np.ndarray | None,
                in_scale: np.float32) -> QParams:
        """The weights' parameters, widened where the bias would overflow int32."""
        wq = _weight_params(w, self.scheme, self.axis(op_type, attrs), self.bits)
        return _fit_bias(w, b, wq, in_scale, self.scheme, self.bits)


def bias_params(in_scale: np.float32, wq: QParams) -> QParams:
    """int32 bias parameters: scale = input scale x weight scale (per channel where the weights are)."""
    b_scale = (in_scale * np.asarray(wq.scale, np.float32)).astype(np.float32)
    return QParams(b_scale, np.zeros(b_scale.shape, np.int32), 0 if wq.axis is not None else None)
