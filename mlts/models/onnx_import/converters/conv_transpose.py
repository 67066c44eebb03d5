"""ConvTranspose (2-D) -> TRANSPOSE_CONV_2D, explicit-padding form, NHWC.

ONNX's output size is stride x (in - 1) + output_padding + (k - 1) x dilation + 1 - pad_head -
pad_tail; NNAPI's is stride x (in - 1) + k - pad_head - pad_tail with a tail that may be negative,
so output_padding (and an output_shape larger than the natural size) becomes a smaller tail. pads,
auto_pad SAME_UPPER / SAME_LOWER / VALID and output_shape are resolved as the ONNX specification
writes them. NNAPI has no dilation or groups: dilated kernels are written with zeros between the taps
and grouped ones as block-diagonal full weights (both exact: the added weights are real zeros).
Weights [C_in, C_out / group, kH, kW] become NNAPI's [C_out, kH, kW, C_in] once at import.
Quantized (QDQ): as Conv (`conv.quantized_filter` / `conv.quantized_bias`), per-channel weights
along ONNX axis 1 (the output channels) becoming channelDim 0.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperandCode, OperationCode

from .. import layout
from ..ir import Graph, Node, Quant
from .base import ints, register
from .conv import WeightedConverter, float_bias, quantized_bias, quantized_filter

NHWC = layout.NHWC
FILTER_LAYOUT = (1, 2, 3, 0)  # ONNX [C_in, C_out, kH, kW] -> NNAPI [C_out, kH, kW, C_in]


def transpose_pads(node: Node, ctx, in_hw, kernel, strides, dilations, output_padding) -> list[tuple[int, int]]:
    """(head, tail) padding per spatial axis in NNAPI's terms (output_padding folded into the tail)."""
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    output_shape = node.attr("output_shape")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise ctx.fail(f"auto_pad {auto_pad!r} is not supported")
    result = []
    for axis in range(2):
        eff = (kernel[axis] - 1) * dilations[axis] + 1
        if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if in_hw[axis] is None:
                raise ctx.fail("output_shape and auto_pad SAME_* need static spatial dimensions")
            if output_shape is not None:
                wanted = ints(output_shape, [])
                if len(wanted) != 2:
                    raise ctx.fail(f"output_shape {wanted} must give the 2 spatial sizes")
                out = wanted[axis]
            else:
                out = in_hw[axis] * strides[axis]
            total = strides[axis] * (in_hw[axis] - 1) + output_padding[axis] + eff - out
            if output_shape is None:  # SAME_* never grows the output (onnxruntime, onnx shape inference)
                total = max(total, 0)
            if total < 0:  # a larger output than the natural size: the extra rows/columns come at the end
                head, tail = 0, total
            elif auto_pad == "SAME_UPPER":
                head, tail = total // 2, total - total // 2
            else:
                head, tail = total - total // 2, total // 2
        elif auto_pad == "VALID":
            head, tail = 0, 0
        else:
            pads = ints(node.attr("pads"), [0, 0, 0, 0])
            if len(pads) != 4 or min(pads) < 0:
                raise ctx.fail(f"pads {pads} must be 4 values >= 0 for a 2-D ConvTranspose")
            head, tail = pads[axis], pads[axis + 2]
        result.append((head, tail - output_padding[axis]))
    return result


def expand_weights(w: np.ndarray, group: int, dilations: list[int], zero) -> np.ndarray:
    """[C_in, C_out / group, kH, kW] -> block-diagonal [C_in, C_out, kH', kW'] with zeros between dilated taps."""
    c_in, per_group, kh, kw = w.shape
    dh, dw = dilations
    full = np.full((c_in, per_group * group, (kh - 1) * dh + 1, (kw - 1) * dw + 1), zero, dtype=w.dtype)
    in_per_group = c_in // group
    for g in range(group):
        rows = slice(g * in_per_group, (g + 1) * in_per_group)
        full[rows, g * per_group:(g + 1) * per_group, ::dh, ::dw] = w[rows]
    return full


@register
class ConvTransposeConverter(WeightedConverter):
    op_types = ("ConvTranspose",)
    outputs_name = "channels (axis 1)"

    def check_quantized(self, node: Node, graph: Graph) -> None:
        self.check_convolution_quantized(node, graph, axis=1)

    def convert(self, node: Node, ctx) -> None:
        x, w, b = node.input(0), node.input(1), node.input(2)
        if ctx.rank(x) != 4:
            raise ctx.fail(f"only 2-D transposed convolutions (4-D input) map to NNAPI, the input has rank "
                           f"{ctx.rank(x)}")
        w_shape = ctx.static_shape(w)
        in_shape = ctx.shape(x)
        channels = in_shape[1]
        group = int(node.attr("group", 1))
        c_in, per_group, kh, kw = w_shape
        if channels is None or channels != c_in or group < 1 or c_in % group:
            raise ctx.fail(f"weights {list(w_shape)} with group {group} do not fit {channels} input channels")
        kernel = ints(node.attr("kernel_shape"), [kh, kw])
        if kernel != [kh, kw]:
            raise ctx.fail(f"kernel_shape {kernel} differs from the weights' {[kh, kw]}")
        strides = ints(node.attr("strides"), [1, 1])
        dilations = ints(node.attr("dilations"), [1, 1])
        output_padding = ints(node.attr("output_padding"), [0, 0])
        for name, values in (("strides", strides), ("dilations", dilations), ("output_padding", output_padding)):
            if len(values) != 2 or min(values) < (0 if name == "output_padding" else 1):
                raise ctx.fail(f"{name} {values} must be 2 values {'>= 0' if name == 'output_padding' else '>= 1'}")
        (top, bottom), (left, right) = transpose_pads(node, ctx, in_shape[2:], (kh, kw), strides, dilations,
                                                      output_padding)
        out_c = per_group * group
        x_op = ctx.operand(x, NHWC)
        wv = ctx.value(w)
        expand = group > 1 or dilations != [1, 1]
        if ctx.is_quantized(x):
            q = wv.quant
            weights = np.asarray(wv.const)
            if expand:
                weights = expand_weights(weights, group, dilations, q.zp if q.per_tensor else 0)
                if not q.per_tensor:
                    q = Quant.make(np.tile(q.scale, group), np.tile(q.zero_point, group), q.dtype, 1)
            data, f_type, w_scales = quantized_filter(weights, q, ctx.operand_type(x_op).code, 1, 0, FILTER_LAYOUT,
                                                      ctx)
            f_op = ctx.constant(data, f_type)
            b_op = quantized_bias(ctx, b, out_c, ctx.quant_of(x).s, w_scales,
                                  f_type.code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL)
        else:
            if wv.const is not None:
                weights = np.asarray(wv.const)
                if expand:
                    weights = expand_weights(weights, group, dilations, 0)
                data = np.transpose(weights, FILTER_LAYOUT)
                f_op = ctx.constant(data, ctx.const_type(wv, data.shape))
            elif not expand:
                f_op = ctx.operand(w, FILTER_LAYOUT)
            else:
                raise ctx.fail("grouped or dilated transposed convolutions need constant weights")
            b_op = float_bias(ctx, b, out_c, x_op)
        if top < 0 or left < 0:
            raise ctx.fail(f"negative head padding (top {top}, left {left}) has no NNAPI equivalent")
        inputs = [x_op, f_op, b_op] + [ctx.int_scalar(v) for v in (left, right, top, bottom, strides[1], strides[0],
                                                                   ctx.fuse_code(node))]
        inputs.append(ctx.bool_scalar(False))
        out = ctx.output(node.outputs[0], NHWC)
        ctx.add_op(OperationCode.TRANSPOSE_CONV_2D, inputs, [out])
