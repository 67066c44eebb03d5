"""Quantized graphs in tf2onnx's patterns (TFLite models converted to ONNX), against onnxruntime on the same graph.

tf2onnx writes every quantized TFLite tensor as QuantizeLinear -> 8-bit tensor -> DequantizeLinear
around each operator, its weights as DequantizeLinear of int8 constants (per channel along axis 0)
and its biases as DequantizeLinear of int32 constants, and moves its NHWC <-> NCHW Transposes onto the
8-bit tensors (uint8 input -> Transpose -> DequantizeLinear; QuantizeLinear -> Transpose -> Reshape ->
DequantizeLinear before the softmax). `--dequantize` keeps only the input DequantizeLinear and the output
QuantizeLinear, with float weights. The 8-bit graphs must import as pure 8-bit NNAPI graphs with 8-bit
model inputs and outputs and no TRANSPOSE (the Transposes only relabel layouts) and match onnxruntime
within NNAPI's tolerance: 1 quantization step per operation, about 3 for a whole model.
Also: quantization parameters travelling backward and forward through every value-preserving
operator, per-axis DequantizeLinear on other axes, and the clear errors for conflicting parameters.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(__file__))
from onnx_import_helpers import assert_quant_close, const, make_model, op_types, ort_run, tensor  # noqa: E402

from mlts.models import import_onnx  # noqa: E402
from mlts.models.onnx_import.converters import get_converter  # noqa: E402
from mlts.models.onnx_import.importer import prepare_graph  # noqa: E402
from mlts.models.onnx_import.ir import Node  # noqa: E402
from mlts.models.onnx_import.loader import load  # noqa: E402
from mlts.runtime import MltsError, OperandCode, ResultCode  # noqa: E402

pytest.importorskip("onnxruntime")

ELEM = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
CODE = {np.dtype(np.uint8): OperandCode.TENSOR_QUANT8_ASYMM, np.dtype(np.int8): OperandCode.TENSOR_QUANT8_ASYMM_SIGNED}


class Tf2onnxGraph:
    """A quantized TFLite graph as tf2onnx writes it: Q -> 8-bit tensor -> DQ around every operator."""

    def __init__(self, dtype, seed: int = 0, *, weights: str = "per-channel",
                 ranges: dict[str, float] | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.ranges = ranges or {}  # calibrated max |value| of the tensors QuantizeLinear writes
        self.rng = np.random.default_rng(seed)
        self.weights = weights  # "per-channel" int8 (TFLite int8) or "per-tensor" uint8 (TFLite uint8)
        self.nodes: list = []
        self.inits: list = []
        self.params: dict[str, tuple[float, int]] = {}
        self.dequantized: dict[str, str] = {}
        self.shapes: dict[str, list[int]] = {}  # NCHW shapes of the 8-bit activations
        self.n = 0

    def name(self, hint: str) -> str:
        self.n += 1
        return f"{hint}_{self.n}"

    def zp(self, unsigned_zp: int) -> int:
        """A zero point given for uint8, shifted for int8 (TFLite int8 = uint8 - 128)."""
        return unsigned_zp if self.dtype == np.uint8 else unsigned_zp - 128

    def scalar_params(self, scale, zp, dtype) -> tuple[str, str]:
        s, z = self.name("scale"), self.name("zero_point")
        self.inits += [const(s, np.asarray(scale, np.float32)), const(z, np.asarray(zp, dtype))]
        return s, z

    def q(self, xf: str, out: str, scale: float, zp: int) -> str:
        s, z = self.scalar_params(scale, zp, self.dtype)
        self.nodes.append(helper.make_node("QuantizeLinear", [xf, s, z], [out], name=out + "_quantize"))
        self.params[out] = (scale, zp)
        return out

    def dq(self, x: str) -> str:
        """tf2onnx makes one DequantizeLinear per 8-bit tensor, shared by its consumers."""
        if x not in self.dequantized:
            scale, zp = self.params[x]
            s, z = self.scalar_params(scale, zp, self.dtype)
            self.nodes.append(helper.make_node("DequantizeLinear", [x, s, z], [x + "_dequant"], name=x + "_dequant"))
            self.dequantized[x] = x + "_dequant"
        return self.dequantized[x]

    def node(self, op: str, inputs: list[str], hint: str, **attrs) -> str:
        out = self.name(hint)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def const_weights(self, w: np.ndarray, in_scale: float) -> tuple[str, str, np.ndarray]:
        """DequantizeLinear of the 8-bit weights (7-bit values keep onnxruntime's u8s8 kernels exact) and of
        the int32 bias at scale input_scale x weight_scale; returns (weights, bias, per-channel scales)."""
        out_c = w.shape[0]
        wq, wf = self.name("weights"), self.name("weights_dequant")
        if self.weights == "per-channel":
            scales = (np.abs(w).reshape(out_c, -1).max(axis=1) / 63).astype(np.float32)
            values = np.clip(np.rint(w / scales.reshape(-1, 1, 1, 1)), -63, 63).astype(np.int8)
            self.inits += [const(wq, values), const(wq + "_scale", scales), const(wq + "_zp", np.zeros(out_c, np.int8))]
            self.nodes.append(helper.make_node("DequantizeLinear", [wq, wq + "_scale", wq + "_zp"], [wf], axis=0))
        else:
            scales = np.full(out_c, np.abs(w).max() / 63, np.float32)
            values = np.clip(np.rint(w / scales[0]) + 128, 65, 191).astype(np.uint8)
            self.inits += [const(wq, values), const(wq + "_scale", scales[0]), const(wq + "_zp", np.uint8(128))]
            self.nodes.append(helper.make_node("DequantizeLinear", [wq, wq + "_scale", wq + "_zp"], [wf]))
        b_scale = (np.float32(in_scale) * scales).astype(np.float32)
        bias = np.rint(self.rng.standard_normal(out_c) * 0.1 / b_scale).astype(np.int32)
        bq, bf = self.name("bias"), self.name("bias_dequant")
        per_channel = self.weights == "per-channel"
        self.inits += [const(bq, bias), const(bq + "_scale", b_scale if per_channel else b_scale[0]),
                       const(bq + "_zp", np.zeros(out_c, np.int32) if per_channel else np.int32(0))]
        self.nodes.append(helper.make_node("DequantizeLinear", [bq, bq + "_scale", bq + "_zp"], [bf],
                                           **({"axis": 0} if per_channel else {})))
        return wf, bf, scales

    def conv(self, x: str, cout: int, k: int = 1, stride: int = 1, *, depthwise: bool = False,
             act: str | None = "fused", gain: float = 1.0) -> str:
        """Conv with ReLU6 inside the unit (DQ -> Conv -> Clip -> Q, TFLite's fused activation) or as its own
        unit (Q -> DQ -> Clip -> Q, a separate RELU6 operator), or none (the classifier)."""
        cin = self.shapes[x][1]
        per_group = 1 if depthwise else cin
        w = (self.rng.standard_normal((cout, per_group, k, k)) * gain * np.sqrt(2.0 / (per_group * k * k))).astype(
            np.float32)
        wf, bf, _ = self.const_weights(w, self.params[x][0])
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4,
                     group=cin if depthwise else 1)
        y = self.node("Conv", [self.dq(x), wf, bf], "conv", **attrs)
        h = (self.shapes[x][2] + 2 * (k // 2) - k) // stride + 1
        out_shape = [1, cout, h, h]
        if act == "fused":
            y = self.node("Clip", [y, *self.clip_bounds()], "relu6")
            out = self.q(y, *self.relu6_params("conv_out"))
        elif act == "separate":
            pre = self.q(y, *self.symmetric_params("conv_out", 6.0))
            self.shapes[pre] = out_shape
            r = self.node("Clip", [self.dq(pre), *self.clip_bounds()], "relu6")
            out = self.q(r, *self.relu6_params("relu6_out"))
        else:
            out = self.q(y, *self.symmetric_params("logits", 6.0))
        self.shapes[out] = out_shape
        return out

    def relu6_params(self, hint: str) -> tuple[str, float, int]:
        """[0, calibrated max] (at most 6) over the whole 8-bit range, as TFLite's converter picks them."""
        name = self.name(hint)
        return name, min(6.0, self.ranges.get(name, 6.0)) / 255, self.zp(0)

    def symmetric_params(self, hint: str, default: float) -> tuple[str, float, int]:
        name = self.name(hint)
        return name, 2 * self.ranges.get(name, default) / 255, self.zp(128)

    def clip_bounds(self) -> tuple[str, str]:
        """Clip's min and max inputs (tf2onnx writes Relu6 as Clip(0, 6))."""
        if not any(t.name == "relu6_lo" for t in self.inits):
            self.inits += [const("relu6_lo", np.float32(0)), const("relu6_hi", np.float32(6))]
        return "relu6_lo", "relu6_hi"


def tf2onnx_mobilenet(dtype, *, weights: str = "per-channel", pool: str = "AveragePool", tail: str = "Reshape",
                      seed: int = 0, ranges: dict[str, float] | None = None) -> onnx.ModelProto:
    """A small MobileNet as tf2onnx writes a quantized TFLite one: NHWC 8-bit input -> Transpose -> DQ -> Q -> DQ ->
    Conv 3x3/2 + ReLU6 -> depthwise 3x3 -> separate ReLU6 -> pointwise + ReLU6 -> depthwise 3x3/2 + ReLU6 ->
    pointwise + ReLU6 -> average pool -> 1x1 classifier Conv -> Q -> Transpose (NCHW -> NHWC, on the 8-bit
    logits) -> Reshape (8-bit) or DQ -> Squeeze -> Q -> DQ -> Softmax -> Q (1/256) -> 8-bit output."""
    if ranges is None:  # calibrate, as TFLite's converter does: the float range each QuantizeLinear sees
        uncalibrated = tf2onnx_mobilenet(dtype, weights=weights, pool=pool, tail=tail, seed=seed, ranges={})
        quantized = {n.input[0]: n.output[0] for n in uncalibrated.graph.node if n.op_type == "QuantizeLinear"}
        probe = onnx.ModelProto()
        probe.CopyFrom(uncalibrated)
        probe.graph.output.extend(helper.make_tensor_value_info(f, TensorProto.FLOAT, None) for f in quantized)
        ranges = {}
        for x in images(dtype, 4, seed=100 + seed):
            for f, value in ort_run(probe, {"input": x}).items():
                if f in quantized:
                    ranges[quantized[f]] = max(ranges.get(quantized[f], 1e-3), float(np.abs(value).max()))
    g = Tf2onnxGraph(dtype, seed, weights=weights, ranges=ranges)
    elem = ELEM[g.dtype]
    g.params["input"] = (1 / 128, g.zp(128))
    nchw = g.node("Transpose", ["input"], "input_nchw", perm=[0, 3, 1, 2])
    g.params[nchw] = g.params["input"]
    requant = g.q(g.dq(nchw), g.name("input_quant"), *g.params["input"])  # tf2onnx's Q/DQ around the input
    g.shapes[requant] = [1, 3, 16, 16]
    x = g.conv(requant, 8, 3, 2)                        # 8x8x8
    x = g.conv(x, 8, 3, 1, depthwise=True, act="separate")
    x = g.conv(x, 16, 1)
    x = g.conv(x, 16, 3, 2, depthwise=True)            # 4x4x16
    x = g.conv(x, 16, 1)
    if pool == "AveragePool":
        p = g.node("AveragePool", [g.dq(x)], "avgpool", kernel_shape=[4, 4], strides=[4, 4])
    else:
        p = g.node("GlobalAveragePool", [g.dq(x)], "avgpool")
    x_pool = g.q(p, g.name("pool_out"), *g.params[x])    # TFLite's average pool keeps the parameters
    g.shapes[x_pool] = [1, 16, 1, 1]
    logits = g.conv(x_pool, 10, 1, act=None, gain=3.0)  # logits spread over about +-1.5
    nhwc = g.node("Transpose", [logits], "logits_nhwc", perm=[0, 2, 3, 1])
    if tail == "Reshape":  # tf2onnx's QDQ optimizer moved the DequantizeLinear past the Reshape
        g.inits.append(const("flat_shape", np.asarray([1, 10], np.int64)))
        flat = g.node("Reshape", [nhwc, "flat_shape"], "flat")
        g.params[flat] = g.params[logits]
    else:
        g.params[nhwc] = g.params[logits]
        g.inits.append(const("squeeze_axes", np.asarray([1, 2], np.int64)))
        sq = g.node("Squeeze", [g.dq(nhwc), "squeeze_axes"], "flat")
        flat = g.q(sq, g.name("flat_out"), *g.params[logits])
    sm = g.node("Softmax", [g.dq(flat)], "softmax", axis=-1)
    g.q(sm, "output", 1 / 256, g.zp(0))
    return make_model(g.nodes, [tensor("input", [1, 16, 16, 3], elem)], [tensor("output", [1, 10], elem)], g.inits)


def images(dtype, n: int = 3, seed: int = 7) -> list[np.ndarray]:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    return [rng.integers(info.min, info.max + 1, (1, 16, 16, 3)).astype(dtype) for _ in range(n)]


def run_both(model: onnx.ModelProto, feeds_list, output: str = "output"):
    data = model.SerializeToString()
    imported = import_onnx(data)
    pairs = [(imported.run(f, devices=["nnapi-reference"])[output], ort_run(data, f)[output]) for f in feeds_list]
    return imported, pairs


def io_codes(imported) -> tuple[list, list]:
    m = imported.model
    return [m.operand_type(i).code for i in m.inputs], [m.operand_type(o).code for o in m.outputs]


@pytest.mark.parametrize("dtype,weights", [(np.uint8, "per-tensor"), (np.uint8, "per-channel"),
                                           (np.int8, "per-channel")],
                         ids=["uint8", "uint8-act-int8-weights", "int8"])
@pytest.mark.parametrize("pool,tail", [("AveragePool", "Reshape"), ("GlobalAveragePool", "Squeeze")])
def test_tf2onnx_quantized_mobilenet(dtype, weights, pool, tail):
    model = tf2onnx_mobilenet(dtype, weights=weights, pool=pool, tail=tail)
    imported, pairs = run_both(model, [{"input": x} for x in images(dtype)])
    for got, ref in pairs:
        assert got.dtype == dtype
        assert_quant_close(got.astype(np.float64), ref.astype(np.float64), 1.0, max_steps=3)
    ops = op_types(imported)
    # 8-bit throughout: no TRANSPOSE (the Transposes relabel layouts), no DEQUANTIZE/QUANTIZE pairs
    assert not {"TRANSPOSE", "QUANTIZE", "DEQUANTIZE"} & set(ops), ops
    assert ops.count("CONV_2D") == 4 and ops.count("DEPTHWISE_CONV_2D") == 2 and ops[-1] == "SOFTMAX"
    assert io_codes(imported) == ([CODE[np.dtype(dtype)]], [CODE[np.dtype(dtype)]])
    hal = imported.model.hal_model().main
    assert all(hal.operands[op.outputs[0]].type.code == CODE[np.dtype(dtype)] for op in hal.operations)
    if weights == "per-channel":
        conv = [op for op in hal.operations if op.type.name == "CONV_2D"][0]
        assert hal.operands[conv.inputs[1]].type.code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL


def dequantized_form(model: onnx.ModelProto) -> onnx.ModelProto:
    """tf2onnx --dequantize: weights and biases stored float, the Q -> DQ pairs between operators removed; only
    the graph input's DequantizeLinear and the output's QuantizeLinear remain."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    from_input = {i.name for i in model.graph.input}  # 8-bit tensors holding the graph input
    rename: dict[str, str] = {}
    nodes = []
    for n in model.graph.node:
        n = onnx.NodeProto.FromString(n.SerializeToString())
        n.input[:] = [rename.get(i, i) for i in n.input]
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:  # weights, bias: float constants
            x, s, z = (inits[i].astype(np.float64) for i in n.input[:3])
            if s.size > 1:
                s, z = s.reshape([-1] + [1] * (x.ndim - 1)), z.reshape([-1] + [1] * (x.ndim - 1))
            inits[n.output[0]] = ((x - z) * s).astype(np.float32)
        elif n.op_type == "QuantizeLinear" and n.output[0] not in {o.name for o in model.graph.output}:
            rename[n.output[0]] = n.input[0]
        elif n.op_type == "DequantizeLinear" and n.input[0] not in from_input:
            rename[n.output[0]] = n.input[0]
        else:
            if n.op_type == "Transpose" and n.input[0] in from_input:
                from_input.add(n.output[0])
            nodes.append(n)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    del m.graph.initializer[:]
    m.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in inits.items())
    return m


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_tf2onnx_dequantize_form(dtype):
    """--dequantize: 8-bit model input and output, float inside: DEQUANTIZE first, QUANTIZE last, no TRANSPOSE."""
    model = dequantized_form(tf2onnx_mobilenet(dtype, weights="per-channel"))
    assert [n.op_type for n in model.graph.node].count("DequantizeLinear") == 1
    imported, pairs = run_both(model, [{"input": x} for x in images(dtype)])
    for got, ref in pairs:
        assert_quant_close(got.astype(np.float64), ref.astype(np.float64), 1.0, max_steps=1)
    ops = op_types(imported)
    assert ops[0] == "DEQUANTIZE" and ops[-1] == "QUANTIZE" and "TRANSPOSE" not in ops, ops
    assert ops.count("DEQUANTIZE") == 1 and ops.count("QUANTIZE") == 1
    assert io_codes(imported) == ([CODE[np.dtype(dtype)]], [CODE[np.dtype(dtype)]])


# -- quantization parameters through value-preserving operators, both directions ------------------------------
def i64(name: str, values) -> onnx.TensorProto:
    return const(name, np.asarray(values, np.int64))


# op -> (input shape, node inputs after the data input, initializers, attributes, extra data inputs)
MOVERS = {
    "Transpose": ([2, 3, 4], [], [], dict(perm=[2, 0, 1])),
    "Reshape": ([2, 3, 4], ["shape"], [i64("shape", [4, 6])], {}),
    "Flatten": ([2, 3, 4], [], [], dict(axis=2)),
    "Squeeze": ([2, 1, 4], ["axes"], [i64("axes", [-2])], {}),
    "Unsqueeze": ([2, 3], ["axes"], [i64("axes", [0, 3])], {}),
    "Identity": ([2, 3], [], [], {}),
    "Slice": ([3, 5], ["starts", "ends", "axes"], [i64("starts", [1]), i64("ends", [-1]), i64("axes", [1])], {}),
    "Split": ([2, 6], ["split"], [i64("split", [2, 4])], dict(axis=-1)),
    "Gather": ([3, 4], ["indices"], [i64("indices", [[2, 0], [1, 1]])], dict(axis=1)),
    "Concat": ([2, 3], ["x2"], [], dict(axis=0)),
    "Pad": ([2, 3], ["pads", "pad_value"], [i64("pads", [0, 1, 1, 0])], {}),
    "MaxPool": ([1, 2, 5, 5], [], [], dict(kernel_shape=[2, 2], strides=[2, 2])),
    "DepthToSpace": ([1, 8, 2, 3], [], [], dict(blocksize=2, mode="CRD")),
    "SpaceToDepth": ([1, 2, 4, 6], [], [], dict(blocksize=2)),
    "Tile": ([2, 3], ["repeats"], [i64("repeats", [2, 1])], {}),
    "Expand": ([2, 1, 4], ["shape"], [i64("shape", [2, 3, 4])], {}),
    "Resize": ([1, 2, 3, 3], ["", "scales"], [const("scales", np.asarray([1, 1, 2, 2], np.float32))],
               dict(mode="nearest")),
}


def mover_model(op: str, dtype, direction: str, *, scale: float = 0.05, zp: int = 3) -> tuple[onnx.ModelProto, dict]:
    """backward: 8-bit input x -> op -> y -> DequantizeLinear -> float output (x's parameters come from the DQ
    after the op); forward: float input -> QuantizeLinear -> op -> 8-bit output y (y's come from the Q)."""
    shape, extra, inits, attrs = MOVERS[op]
    dtype = np.dtype(dtype)
    elem = ELEM[dtype]
    inits = list(inits) + [const("s", np.float32(scale)), const("z", np.asarray(zp, dtype))]
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    data = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    outputs = ["y", "y_rest"] if op == "Split" else ["y"]
    if op == "Pad":
        inits.append(const("pad_value", np.asarray(zp + 7, dtype)))
    if direction == "backward":
        nodes = [helper.make_node(op, ["x"] + extra, outputs, **attrs),
                 helper.make_node("DequantizeLinear", ["y", "s", "z"], ["yf"])]
        inputs, feeds = [tensor("x", shape, elem)], {"x": data}
        outs = [tensor("yf", None)] + ([tensor("y_rest", None, elem)] if op == "Split" else [])
    else:
        nodes = [helper.make_node("QuantizeLinear", ["xf", "s", "z"], ["x"]),
                 helper.make_node(op, ["x"] + extra, outputs, **attrs)]
        inputs, feeds = [tensor("xf", shape)], {"xf": ((data.astype(np.float32) - zp) * scale).astype(np.float32)}
        outs = [tensor(o, None, elem) for o in outputs]
    if op == "Concat":  # the second part: another 8-bit input with the same parameters (read by a DQ)
        inputs.append(tensor("x2", shape, elem))
        feeds["x2"] = data[::-1].copy()
        nodes.append(helper.make_node("DequantizeLinear", ["x2", "s", "z"], ["x2f"]))
        outs.append(tensor("x2f", None))
    return make_model(nodes, inputs, outs, inits), feeds


def prepared(model: onnx.ModelProto):
    _, graph = load(model.SerializeToString())
    prepare_graph(graph)
    return graph


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("op", sorted(MOVERS))
def test_parameters_travel_through_value_preserving_ops(op, direction, dtype):
    """The importer's graph: every 8-bit tensor the op links gets the DQ's / Q's parameters."""
    model, _ = mover_model(op, dtype, direction)
    graph = prepared(model)
    linked = ["x", "y"] + (["y_rest"] if op == "Split" else []) + (["x2"] if op == "Concat" else [])
    used = {t for n in graph.nodes for t in list(n.inputs) + list(n.outputs)} | set(graph.inputs) | set(graph.outputs)
    assert "x" in used
    for name in [t for t in linked if t in used]:  # (a bypassed Identity's output is gone)
        q = graph.value(name).quant
        assert q is not None and (q.s, q.zp, q.dtype) == (np.float32(0.05), 3, np.dtype(dtype)), (name, q)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("op", sorted(MOVERS))
def test_value_preserving_ops_on_8bit_tensors_match_onnxruntime(op, direction, dtype):
    """Same graphs end to end: 8-bit model inputs/outputs, the integers moved exactly as onnxruntime moves them."""
    if get_converter(Node(op, [], [])) is None:
        pytest.skip(f"no {op} converter yet")
    model, feeds = mover_model(op, dtype, direction)
    data = model.SerializeToString()
    imported = import_onnx(data)
    got = imported.run(feeds, devices=["nnapi-reference"])
    ref = ort_run(data, feeds)
    for name in imported.output_names:
        assert got[name].dtype == ref[name].dtype
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
    inputs, outputs = io_codes(imported)
    code = CODE[np.dtype(dtype)]
    assert (inputs[0] == code) == (direction == "backward") and (outputs[0] == code) == (direction == "forward")
    for k, (nn_op, _, nn_outputs) in enumerate(imported.model.operations()):  # the op runs on 8-bit tensors
        if f"({op}, " in imported.origin(k):
            assert imported.model.operand_type(nn_outputs[0]).code == code, nn_op.name


def test_resize_linear_does_not_share_parameters():
    """Linear Resize computes new values: the parameters of its output do not travel back to its input."""
    model, _ = mover_model("Resize", np.uint8, "backward")
    for n in model.graph.node:
        if n.op_type == "Resize":
            n.attribute[0].s = b"linear"
    graph = prepared(model)
    assert graph.value("y").quant is not None and graph.value("x").quant is None


# -- 8-bit graph inputs and outputs -------------------------------------------------------------------------------
def seven_bit_weights(shape, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(-63, 64, shape).astype(np.int8)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_nhwc_8bit_input_and_output_around_a_conv(dtype):
    """input (NHWC) -> Transpose -> DQ -> Conv -> Q -> Transpose -> output (NHWC): the parameters reach the input
    backward and the output forward; NNAPI runs one CONV_2D on the NHWC operands, nothing else."""
    dtype = np.dtype(dtype)
    zp = 128 if dtype == np.uint8 else 0
    nodes = [helper.make_node("Transpose", ["input"], ["x_nchw"], perm=[0, 3, 1, 2]),
             helper.make_node("DequantizeLinear", ["x_nchw", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("Conv", ["xf", "wf"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y_nchw"]),
             helper.make_node("Transpose", ["y_nchw"], ["output"], perm=[0, 2, 3, 1])]
    inits = [const("xs", np.float32(0.02)), const("xz", np.asarray(zp, dtype)),
             const("w", seven_bit_weights((4, 3, 3, 3))),
             const("ws", np.asarray([0.01, 0.02, 0.015, 0.03], np.float32)), const("wz", np.zeros(4, np.int8)),
             const("ys", np.float32(0.05)), const("yz", np.asarray(zp - 10, dtype))]
    model = make_model(nodes, [tensor("input", [1, 6, 6, 3], ELEM[dtype])],
                       [tensor("output", [1, 6, 6, 4], ELEM[dtype])], inits)
    feeds = [{"input": x[:, :6, :6, :]} for x in images(dtype)]
    imported, pairs = run_both(model, feeds)
    for got, ref in pairs:
        assert got.dtype == dtype and got.shape == (1, 6, 6, 4)
        assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1
    assert op_types(imported) == ["CONV_2D"]
    assert io_codes(imported) == ([CODE[dtype]], [CODE[dtype]])
    t_in = imported.model.operand_type(imported.model.inputs[0])
    assert (t_in.scale, t_in.zero_point) == (np.float32(0.02), zp)


def test_int8_input_reshaped_before_its_dequantize():
    """int8 input -> Reshape -> DQ -> MatMul (int8 per-tensor weights) -> Q -> int8 output."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["xr"]),
             helper.make_node("DequantizeLinear", ["xr", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
             helper.make_node("MatMul", ["xf", "wf"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"])]
    inits = [i64("shape", [4, 8]), const("xs", np.float32(0.03)), const("xz", np.int8(-5)),
             const("w", seven_bit_weights((8, 5))), const("ws", np.float32(0.02)), const("wz", np.int8(0)),
             const("ys", np.float32(0.1)), const("yz", np.int8(3))]
    model = make_model(nodes, [tensor("x", [2, 2, 8], TensorProto.INT8)], [tensor("y", [4, 5], TensorProto.INT8)],
                       inits)
    feeds = [{"x": np.random.default_rng(k).integers(-128, 128, (2, 2, 8)).astype(np.int8)} for k in range(3)]
    imported, pairs = run_both(model, feeds, "y")
    for got, ref in pairs:
        assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1
    assert op_types(imported) == ["RESHAPE", "FULLY_CONNECTED"]
    assert io_codes(imported) == ([OperandCode.TENSOR_QUANT8_ASYMM_SIGNED], [OperandCode.TENSOR_QUANT8_ASYMM_SIGNED])


# -- per-axis DequantizeLinear -----------------------------------------------------------------------------------
def test_per_axis_weights_on_the_input_channel_axis_run_in_float():
    """Conv weights quantized along axis 1 (input channels): NNAPI's per-channel filters are along the output
    channels, so the Conv runs in float (DEQUANTIZE -> CONV_2D -> QUANTIZE), matching onnx.reference."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=1),
             helper.make_node("Conv", ["xf", "wf"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["y"])]
    inits = [const("xs", np.float32(0.02)), const("xz", np.uint8(128)), const("w", seven_bit_weights((4, 3, 3, 3))),
             const("ws", np.asarray([0.01, 0.02, 0.03], np.float32)), const("wz", np.zeros(3, np.int8)),
             const("ys", np.float32(0.05)), const("yz", np.uint8(120))]
    model = make_model(nodes, [tensor("x", [1, 3, 6, 6], TensorProto.UINT8)],
                       [tensor("y", [1, 4, 6, 6], TensorProto.UINT8)], inits, opset=19)
    from onnx.reference import ReferenceEvaluator  # onnxruntime's QLinearConv rejects axis-1 filter scales

    imported = import_onnx(model.SerializeToString())
    for k in range(2):
        x = np.random.default_rng(k).integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)
        got = imported.run({"x": x}, devices=["nnapi-reference"])["y"]
        (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
        assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1
    ops = op_types(imported)
    assert "DEQUANTIZE" in ops and "QUANTIZE" in ops
    conv = [k for k, (code, _, _) in enumerate(imported.model.operations()) if code.name == "CONV_2D"][0]
    _, conv_inputs, _ = imported.model.operations()[conv]
    assert imported.model.operand_type(conv_inputs[1]).code == OperandCode.TENSOR_FLOAT32


@pytest.mark.parametrize("axis,quantized", [(1, True), (-1, True), (0, False), (-2, False)])
def test_per_axis_matmul_weights(axis, quantized):
    """MatMul weights [K, N] per axis: along N (output columns, negative axis too) an 8-bit per-channel operation;
    along K the MatMul runs in float between DEQUANTIZE and QUANTIZE; both match onnx.reference."""
    from onnx.reference import ReferenceEvaluator

    count = 5 if quantized else 6
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=axis),
             helper.make_node("MatMul", ["xf", "wf"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"])]
    inits = [const("xs", np.float32(0.03)), const("xz", np.uint8(128)), const("w", seven_bit_weights((6, 5))),
             const("ws", np.linspace(0.01, 0.03, count).astype(np.float32)), const("wz", np.zeros(count, np.int8)),
             const("ys", np.float32(0.1)), const("yz", np.uint8(120))]
    model = make_model(nodes, [tensor("x", [3, 6], TensorProto.UINT8)], [tensor("y", [3, 5], TensorProto.UINT8)],
                       inits, opset=19)
    imported = import_onnx(model.SerializeToString())
    for k in range(2):
        x = np.random.default_rng(k).integers(0, 256, (3, 6)).astype(np.uint8)
        got = imported.run({"x": x}, devices=["nnapi-reference"])["y"]
        (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
        assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1
    assert ("DEQUANTIZE" in op_types(imported)) != quantized


def assert_import_error(model: onnx.ModelProto, *fragments: str) -> str:
    with pytest.raises(MltsError) as info:
        import_onnx(model.SerializeToString())
    assert info.value.code == ResultCode.BAD_DATA
    for fragment in fragments:
        assert fragment in info.value.message, info.value.message
    return info.value.message


def test_per_axis_dequantize_of_a_graph_input_is_a_clear_error():
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)]
    model = make_model(nodes, [tensor("x", [2, 3], TensorProto.INT8)], [tensor("y", [2, 3])],
                       [const("s", np.asarray([0.1, 0.2, 0.3], np.float32)), const("z", np.zeros(3, np.int8))])
    assert_import_error(model, "node 'DequantizeLinear_0'", "'x'", "per-axis")


def test_per_axis_parameters_do_not_travel_through_a_transpose():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("DequantizeLinear", ["t", "s", "z"], ["y"], axis=0)]
    model = make_model(nodes, [tensor("x", [2, 3], TensorProto.INT8)], [tensor("y", [3, 2])],
                       [const("s", np.asarray([0.1, 0.2, 0.3], np.float32)), const("z", np.zeros(3, np.int8))])
    assert_import_error(model, "tensor 't' is quantized per axis", "Transpose")


# -- conflicting parameters ----------------------------------------------------------------------------------------
def test_conflict_between_a_quantize_and_a_dequantize_through_a_transpose():
    """Q(0.1) -> Transpose -> DQ(0.05): the Transpose keeps the integers, so one tensor would need two scales."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["xq"]),
             helper.make_node("Transpose", ["xq"], ["t"], perm=[1, 0], name="layout"),
             helper.make_node("DequantizeLinear", ["t", "s2", "z"], ["y"])]
    model = make_model(nodes, [tensor("x", [2, 3])], [tensor("y", [3, 2])],
                       [const("s1", np.float32(0.1)), const("s2", np.float32(0.05)), const("z", np.uint8(128))])
    assert_import_error(model, "'xq'", "'t'", "node 'layout' (Transpose", "scale=0.1", "scale=0.05", "conflicting")


def test_conflict_between_concat_parts():
    """Concat of two 8-bit tensors quantized differently: its output cannot share both parameters."""
    nodes = [helper.make_node("QuantizeLinear", ["a", "sa", "z"], ["aq"]),
             helper.make_node("QuantizeLinear", ["b", "sb", "z"], ["bq"]),
             helper.make_node("Concat", ["aq", "bq"], ["c"], axis=0, name="join"),
             helper.make_node("DequantizeLinear", ["c", "sa", "z"], ["y"])]
    model = make_model(nodes, [tensor("a", [2, 3]), tensor("b", [2, 3])], [tensor("y", [4, 3])],
                       [const("sa", np.float32(0.1)), const("sb", np.float32(0.2)), const("z", np.uint8(128))])
    assert_import_error(model, "'bq'", "node 'join' (Concat", "conflicting")


def test_conflict_between_two_readers_of_an_input():
    nodes = [helper.make_node("DequantizeLinear", ["x", "s1", "z"], ["y1"]),
             helper.make_node("DequantizeLinear", ["x", "s2", "z"], ["y2"])]
    model = make_model(nodes, [tensor("x", [2, 3], TensorProto.UINT8)], [tensor("y1", [2, 3]), tensor("y2", [2, 3])],
                       [const("s1", np.float32(0.1)), const("s2", np.float32(0.2)), const("z", np.uint8(128))])
    assert_import_error(model, "tensor 'x' has conflicting quantization parameters")


def test_conflict_backward_from_two_branches():
    """input -> Reshape -> DQ(a) and input -> Squeeze -> DQ(b): the input gets parameters from both sides."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Squeeze", ["x", "axes"], ["sq"]),
             helper.make_node("DequantizeLinear", ["r", "s1", "z"], ["y1"]),
             helper.make_node("DequantizeLinear", ["sq", "s1", "z2"], ["y2"])]
    model = make_model(nodes, [tensor("x", [1, 6], TensorProto.INT8)], [tensor("y1", [2, 3]), tensor("y2", [6])],
                       [i64("shape", [2, 3]), i64("axes", [0]), const("s1", np.float32(0.1)), const("z", np.int8(0)),
                        const("z2", np.int8(4))])
    assert_import_error(model, "'r'", "'sq'", "zp=0", "zp=4", "conflicting")
