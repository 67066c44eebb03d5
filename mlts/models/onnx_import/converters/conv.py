"""Conv -> CONV_2D (group 1), DEPTHWISE_CONV_2D (group == input channels, any depth multiplier), or
CONV_2D with block-diagonal weights for other group counts (exact: the off-group weights are real
zeros).

Weights are transposed once at import: OIHW -> OHWI for CONV_2D, -> [1, H, W, O] for
DEPTHWISE_CONV_2D. Quantized (QDQ/QLinearConv): the filter keeps the activations' 8-bit type
(int8 <-> uint8 weights are converted exactly by shifting values and zero point by 128), per-channel
int8 weights become TENSOR_QUANT8_SYMM_PER_CHANNEL (channelDim 0 for CONV_2D, 3 for depthwise), and
the bias is requantized to INT32 with scale input_scale x filter_scale.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperandCode, OperandType, OperationCode

from .. import layout
from ..emitter import QUANT_CODES
from ..errors import NotQuantizable
from ..ir import Graph, Node, Quant, Value
from ._common import conv_pads
from .base import OpConverter, all_quantized_same_dtype, ints, register

NHWC = layout.NHWC


def quantized_filter(w: np.ndarray, q: Quant, in_code: OperandCode, out_axis: int, nn_channel_dim: int,
                     transpose: tuple[int, ...], ctx) -> tuple[np.ndarray, OperandType, np.ndarray]:
    """NNAPI filter values, type and per-output-channel scales for an integer weight constant.

    `w` is in ONNX layout with output channels on `out_axis`; `transpose` gives the NNAPI layout.
    """
    w = np.asarray(w)
    if q.per_tensor:
        in_dtype = np.dtype(np.uint8) if in_code == OperandCode.TENSOR_QUANT8_ASYMM else np.dtype(np.int8)
        values, zp = w.astype(np.int32), q.zp
        if w.dtype != in_dtype:  # exact: both the values and the zero point move by 128
            shift = 128 if in_dtype == np.dtype(np.uint8) else -128
            values, zp = values + shift, zp + shift
        data = np.transpose(values, transpose).astype(in_dtype)
        t = OperandType.tensor(in_code, data.shape, q.s, zp)
        return data, t, np.full(w.shape[out_axis], q.s, np.float32)
    if q.axis != out_axis:
        raise ctx.fail(f"per-axis weight quantization along axis {q.axis} (expected the output channel axis "
                       f"{out_axis})")
    values = w.astype(np.int32)
    zps = q.zero_point
    if w.dtype == np.dtype(np.uint8) and np.all(zps == 128):
        values, zps = values - 128, zps - 128
    if np.any(zps != 0):
        raise ctx.fail("per-channel weights need zero points 0 (symmetric)")
    data = np.transpose(values, transpose).astype(np.int8)
    t = ctx.per_channel_type(data.shape, q.scale, nn_channel_dim)
    return data, t, q.scale.astype(np.float32)


def quantized_bias(ctx, bias_name: str | None, units: int, in_scale: float, w_scales: np.ndarray,
                   per_channel: bool) -> int:
    """INT32 bias operand with scale input_scale x filter_scale (per channel: scale 0, implied)."""
    products = (np.float32(in_scale) * w_scales.astype(np.float32)).astype(np.float32)
    if bias_name is None:
        ints32 = np.zeros(units, np.int32)
    else:
        v = ctx.value(bias_name)
        if v.const is None:
            raise ctx.fail("a quantized bias must be a constant")
        raw = np.asarray(v.const).reshape(-1)
        if raw.size == 1 and units > 1:
            raw = np.full(units, raw[0], raw.dtype)
        if raw.size != units:
            raise ctx.fail(f"bias has {raw.size} values for {units} output channels")
        if v.quant is not None and raw.dtype == np.int32 and np.all(v.quant.zero_point == 0) and \
                np.array_equal(np.broadcast_to(v.quant.scale.astype(np.float32), (units,)), products):
            ints32 = raw.astype(np.int32)  # already in the right scale
        else:
            real = v.quant.dequantize(raw) if v.quant is not None else raw.astype(np.float64)
            ints32 = np.clip(np.rint(real / products.astype(np.float64)), -2**31, 2**31 - 1).astype(np.int32)
    scale = 0.0 if per_channel else float(products[0])
    return ctx.constant(ints32, OperandType.tensor(OperandCode.TENSOR_INT32, [units], scale, 0))


def float_bias(ctx, bias_name: str | None, units: int, x_op: int) -> int:
    """The bias operand of a float convolution: the ONNX bias, or zeros of the input's type when it has none."""
    if bias_name is not None:
        return ctx.operand(bias_name)
    return ctx.constant(np.zeros(units, np.float32), OperandType.tensor(ctx.operand_type(x_op).code, [units]))


class WeightedConverter(OpConverter):
    """Conv and Gemm: input 1 holds the weights (when quantized, an 8-bit constant, per-channel only
    along the output axis and symmetric), input 2 an optional bias; an activation can be fused."""

    quantizable = True
    data_inputs = (0, 1, 2)
    weight_input = 1
    bias_input = 2
    fusable = True
    #: how NotQuantizable messages name the weights input and its output axis
    weights_name = "the weights"
    outputs_name = "channels"

    def quantized_weights(self, node: Node, graph: Graph) -> Value:
        """The weights, once the checks every quantized weighted operator shares have passed."""
        all_quantized_same_dtype(node, graph, [0])
        w = graph.value(node.inputs[1])
        if w.const is None or w.quant is None or w.dtype not in QUANT_CODES:
            raise NotQuantizable(f"{self.weights_name} must be an 8-bit constant")
        return w

    def check_convolution_quantized(self, node: Node, graph: Graph, axis: int) -> None:
        """Conv and ConvTranspose: 8-bit weights, per channel only along the output axis `axis`, constant bias."""
        self.check_per_channel(self.quantized_weights(node, graph), axis=axis)
        b = node.input(2)
        if b is not None and graph.const(b) is None:
            raise NotQuantizable("the bias must be a constant")

    def check_per_channel(self, w: Value, axis: int) -> None:
        """Per-channel weights: along the output axis `axis`, symmetric (uint8 zero points of 128 are)."""
        q = w.quant
        if q.per_tensor:
            return
        if q.axis != axis:
            raise NotQuantizable(f"per-axis weights must be quantized along the output {self.outputs_name}")
        if not (np.all(q.zero_point == 0) or (w.dtype == np.dtype(np.uint8) and np.all(q.zero_point == 128))):
            raise NotQuantizable("per-channel weights must be symmetric")


@register
class ConvConverter(WeightedConverter):
    op_types = ("Conv",)

    def check_quantized(self, node: Node, graph: Graph) -> None:
        self.check_convolution_quantized(node, graph, axis=0)

    def convert(self, node: Node, ctx) -> None:
        x, w, b = node.input(0), node.input(1), node.input(2)
        if ctx.rank(x) != 4:
            raise ctx.fail(f"only 2-D convolutions (4-D input) map to NNAPI, the input has rank {ctx.rank(x)}")
        w_shape = ctx.static_shape(w)
        in_shape = ctx.shape(x)
        channels = in_shape[1]
        if channels is None:
            raise ctx.fail("the number of input channels must be known")
        group = int(node.attr("group", 1))
        out_c, per_group, kh, kw = w_shape
        if channels != per_group * group:
            raise ctx.fail(f"weights {list(w_shape)} with group {group} do not fit {channels} input channels")
        strides = ints(node.attr("strides"), [1, 1])
        dilations = ints(node.attr("dilations"), [1, 1])
        top, left, bottom, right = conv_pads(node, ctx, in_shape[2:], (kh, kw), strides, dilations)
        depthwise = group > 1 and group == channels
        if group > 1 and not depthwise and (out_c % group):
            raise ctx.fail(f"{out_c} output channels cannot be split into {group} groups")
        quantized = ctx.is_quantized(x)
        x_op = ctx.operand(x, NHWC)
        if depthwise:
            transpose = (1, 2, 3, 0)
        else:
            transpose = (0, 2, 3, 1)
        wv = ctx.value(w)
        if quantized:
            in_code = ctx.operand_type(x_op).code
            weights = np.asarray(wv.const)
            if group > 1 and not depthwise:
                weights = _block_diagonal(weights, group, zero=wv.quant.zp if wv.quant.per_tensor else 0)
            data, f_type, w_scales = quantized_filter(weights, wv.quant, in_code, 0, 3 if depthwise else 0,
                                                      transpose, ctx)
            f_op = ctx.constant(data, f_type)
            b_op = quantized_bias(ctx, b, out_c, ctx.quant_of(x).s, w_scales,
                                  f_type.code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL)
        else:
            if wv.const is not None:
                weights = np.asarray(wv.const)
                if group > 1 and not depthwise:
                    weights = _block_diagonal(weights, group, zero=0)
                data = np.transpose(weights, transpose)
                f_op = ctx.constant(data, ctx.const_type(wv, data.shape))
            elif group == 1 or depthwise:
                f_op = ctx.operand(w, transpose)
            else:
                raise ctx.fail("grouped convolutions need constant weights")
            b_op = float_bias(ctx, b, out_c, x_op)
        inputs = [x_op, f_op, b_op] + [ctx.int_scalar(v) for v in (left, right, top, bottom, strides[1],
                                                                   strides[0])]
        if depthwise:
            inputs.append(ctx.int_scalar(out_c // channels))
        inputs.append(ctx.int_scalar(ctx.fuse_code(node)))
        if dilations != [1, 1]:
            inputs += [ctx.bool_scalar(False), ctx.int_scalar(dilations[1]), ctx.int_scalar(dilations[0])]
        out = ctx.output(node.outputs[0], NHWC)
        ctx.add_op(OperationCode.DEPTHWISE_CONV_2D if depthwise else OperationCode.CONV_2D, inputs, [out])


def _block_diagonal(w: np.ndarray, group: int, zero: int | float) -> np.ndarray:
    """Grouped weights [O, I/g, kh, kw] as full weights [O, I, kh, kw] (zeros off the diagonal)."""
    out_c, per_group, kh, kw = w.shape
    full = np.full((out_c, per_group * group, kh, kw), zero, dtype=w.dtype)
    out_per_group = out_c // group
    for g in range(group):
        rows = slice(g * out_per_group, (g + 1) * out_per_group)
        full[rows, g * per_group:(g + 1) * per_group] = w[rows]
    return full
