"""Concat -> CONCATENATION, Pad -> PAD / PAD_V2 (constant), MIRROR_PAD (reflect) or GATHER (edge, wrap).

Both work in the layout of their (first computed) input: the axis and the paddings are mapped
through the layout permutation, constants are laid out to match. Quantized CONCATENATION inputs may
carry their own parameters (NNAPI requantizes them); PAD keeps the input's quantization and fills
with the quantized pad value (PAD when it is the zero point, PAD_V2 otherwise). NNAPI has no edge
or wrap mode, and MIRROR_PAD REFLECT pads at most dim - 1: those become one GATHER per padded axis
with the source indices numpy.pad (ONNX's reference) takes, computed at import (static dimensions).
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperandCode, OperandType, OperationCode

from .. import layout
from ..ir import Graph, Node
from ._common import alias
from .base import OpConverter, all_quantized_same_dtype, const_input, ints, register

#: ONNX Pad mode -> numpy.pad mode giving the source index of every padded position
PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}
MIRROR_REFLECT = 0  # MIRROR_PAD mode


@register
class ConcatConverter(OpConverter):
    op_types = ("Concat",)
    quantizable = True
    data_inputs = None

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [i for i, n in enumerate(node.inputs) if n])

    def convert(self, node: Node, ctx) -> None:
        names = [n for n in node.inputs if n]
        y = node.outputs[0]
        rank = ctx.rank(y)
        if rank > 4:
            raise ctx.fail(f"rank {rank}: NNAPI CONCATENATION takes at most 4 dimensions")
        axis = node.attr("axis", 1 if node.opset < 4 else None)  # required since opset 4
        if axis is None:
            raise ctx.fail("the axis attribute is required")
        axis = int(axis) + rank if int(axis) < 0 else int(axis)
        names = [n for n in names if not (ctx.value(n).shape is not None and 0 in ctx.value(n).shape)]
        computed = [n for n in names if not ctx.is_const(n)]
        perm = ctx.perm_of(computed[0]) if computed else layout.identity(rank)
        if len(names) == 1:
            return alias(ctx, y, names[0])
        ops = [ctx.operand(n, perm) for n in names]
        out = ctx.output(y, perm)
        ctx.add_op(OperationCode.CONCATENATION, ops + [ctx.int_scalar(layout.nn_axis(perm, axis))], [out])


@register
class PadConverter(OpConverter):
    op_types = ("Pad",)
    quantizable = True

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        mode = node.attr("mode", "constant")
        if mode not in PAD_MODES:
            raise ctx.fail(f"unknown mode {mode!r}")
        rank = ctx.rank(x)
        if rank > 4:
            raise ctx.fail(f"rank {rank}: NNAPI PAD takes at most 4 dimensions")
        if node.opset < 11:
            pads = ints(node.attr("pads"), [])
            value = np.asarray(node.attr("value", 0.0))
        else:
            pads = ints(const_input(node, ctx.graph, 1, "pads", ctx), [])
            value = const_input(node, ctx.graph, 2, "constant_value", ctx)
            value = np.asarray(0.0 if value is None else value)
        axes = ints(const_input(node, ctx.graph, 3, "axes", ctx), []) if node.opset >= 18 and node.input(3) \
            else list(range(rank))
        axes = [a + rank if a < 0 else a for a in axes]
        if len(pads) != 2 * len(axes):
            raise ctx.fail(f"{len(pads)} pads for {len(axes)} axes")
        begin, end = [0] * rank, [0] * rank
        for k, a in enumerate(axes):
            begin[a], end[a] = pads[k], pads[k + len(axes)]
        if min(begin + end) < 0:
            raise ctx.fail(f"negative pads {pads} (cropping) are not supported")
        if mode != "constant":
            return self.mirrored(ctx, x, y, mode, begin, end)
        op, perm = ctx.native(x)
        paddings = np.asarray([[begin[p], end[p]] for p in perm] or [[0, 0]], np.int32)
        pad_op = ctx.constant(paddings, OperandType.tensor(OperandCode.TENSOR_INT32, paddings.shape))
        q = ctx.quant_of(x)
        out = ctx.output(y, perm, forced=q)
        v = np.asarray(value).reshape(-1)[0] if np.size(value) else 0
        if ctx.is_quantized(x):
            stored = int(v) if np.asarray(value).dtype.kind in "iu" else int(np.rint(float(v) / q.s) + q.zp)
            info = np.iinfo(q.dtype)
            if not info.min <= stored <= info.max:
                raise ctx.fail(f"pad value {v} is outside the quantized range")
            if stored == q.zp:
                ctx.add_op(OperationCode.PAD, [op, pad_op], [out])
            else:
                ctx.add_op(OperationCode.PAD_V2, [op, pad_op, ctx.int_scalar(stored)], [out])
        elif float(v) == 0.0:
            ctx.add_op(OperationCode.PAD, [op, pad_op], [out])
        else:
            if ctx.operand_type(op).code != OperandCode.TENSOR_FLOAT32:
                raise ctx.fail("a non-zero pad value needs a float32 tensor")
            ctx.add_op(OperationCode.PAD_V2, [op, pad_op, ctx.float_scalar(float(v))], [out])

    @staticmethod
    def mirrored(ctx, x: str, y: str, mode: str, begin: list[int], end: list[int]) -> None:
        """reflect / edge / wrap padding of x into y, in x's layout."""
        shape = ctx.shape(x)
        padded = [a for a in range(len(shape)) if begin[a] or end[a]]
        if not padded:
            return alias(ctx, y, x)
        if any(not shape[a] for a in padded):
            raise ctx.fail(f"{mode} padding needs static non-zero sizes along the padded axes, the input has "
                           f"shape {list(shape)}")
        op, perm = ctx.native(x)
        if mode == "reflect" and all(begin[a] < shape[a] and end[a] < shape[a] for a in padded):
            paddings = np.asarray([[begin[p], end[p]] for p in perm], np.int32)
            pad_op = ctx.constant(paddings, OperandType.tensor(OperandCode.TENSOR_INT32, paddings.shape))
            out = ctx.output(y, perm, forced=ctx.quant_of(x))
            ctx.add_op(OperationCode.MIRROR_PAD, [op, pad_op, ctx.int_scalar(MIRROR_REFLECT)], [out])
            return
        gather_axes(ctx, x, y, {a: np.pad(np.arange(shape[a]), (begin[a], end[a]), mode=PAD_MODES[mode])
                                for a in padded})


def gather_axes(ctx, x: str, y: str, sources: dict[int, np.ndarray]) -> None:
    """y[..., i, ...] = x[..., sources[axis][i], ...] along each ONNX axis in `sources`, in x's layout: one
    GATHER with constant indices per axis (8-bit values keep x's quantization, requantized if y's differs)."""
    op, perm = ctx.native(x)
    dims = list(ctx.operand_type(op).dimensions)
    for k, (a, source) in enumerate(sources.items()):
        i = layout.nn_axis(perm, a)
        dims[i] = len(source)
        if k == len(sources) - 1:  # created last: a requantization follows the operation writing it
            target = ctx.output(y, perm, forced=ctx.quant_of(x))
        else:
            target = ctx.temp(ctx.operand_type(op).with_dimensions(dims))
        ctx.add_op(OperationCode.GATHER, [op, ctx.int_scalar(i), ctx.int_tensor(source)], [target])
        op = target
