"""Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Identity, Dropout.

Transpose emits nothing: the output shares its input's operand under a composed layout permutation
(tf2onnx's Transpose -> Conv -> Transpose chains cancel). Reshape and Flatten read the bytes in
ONNX order, so a tensor held in another layout is transposed first unless only size-1 dimensions
moved (NHWC [N,1,1,C] is already [N,C] in memory). Squeeze and Unsqueeze keep the layout and only
add or drop size-1 dimensions. Quantized tensors keep their quantization (requantized if the ONNX
graph gives the result other parameters).
"""
from __future__ import annotations

import math

import numpy as np

from .. import layout
from ..ir import Graph, Node
from ._common import alias
from .base import OpConverter, all_quantized_same_dtype, const_input, ints, register


class _Movement(OpConverter):
    quantizable = True
    data_inputs = (0,)

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])


def _axes(node: Node, ctx, rank: int, *, input_index: int = 1, since: int = 13) -> list[int] | None:
    if node.opset >= since:
        value = const_input(node, ctx.graph, input_index, "axes", ctx)
        axes = None if value is None else ints(value, [])
    else:
        axes = node.attr("axes")
        axes = None if axes is None else ints(axes, [])
    if axes is None:
        return None
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ctx.fail(f"axis {a} out of range for rank {rank}")
        out.append(a + rank if a < 0 else a)
    return out


@register
class ReshapeConverter(_Movement):
    op_types = ("Reshape", "Flatten")

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        if ctx.rank(x) > 4:
            raise ctx.fail(f"input of rank {ctx.rank(x)}: NNAPI RESHAPE takes at most 4 dimensions")
        shape = self.target(node, ctx)
        src = ctx.flat_operand(x)
        out = ctx.output(y, forced=ctx.quant_of(x))
        ctx.reshape_to(src, shape, out=out)

    def target(self, node: Node, ctx) -> tuple:
        x, y = node.input(0), node.outputs[0]
        inferred = ctx.value(y).shape
        if inferred is not None and sum(d is None for d in inferred) <= 1:
            return inferred
        in_shape = ctx.shape(x)
        if node.op_type == "Flatten":
            axis = int(node.attr("axis", 1))
            axis = axis + len(in_shape) if axis < 0 else axis
            head, tail = in_shape[:axis], in_shape[axis:]
            rows = math.prod(head) if all(d is not None for d in head) else None
            cols = math.prod(tail) if all(d is not None for d in tail) else None
            return (rows, cols)
        spec = ints(const_input(node, ctx.graph, 1, "shape", ctx), [])
        allow_zero = node.attr("allowzero", 0)
        out = []
        for i, d in enumerate(spec):
            if d == 0 and not allow_zero:
                out.append(in_shape[i] if i < len(in_shape) else None)
            elif d == -1:
                out.append(None)
            else:
                out.append(d)
        return tuple(out)


@register
class SqueezeConverter(_Movement):
    op_types = ("Squeeze",)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        shape = ctx.shape(x)
        rank = len(shape)
        axes = _axes(node, ctx, rank)
        if axes is None:
            if any(d is None for d in shape):
                raise ctx.fail("Squeeze without axes needs a static shape")
            axes = [i for i, d in enumerate(shape) if d == 1]
        op, perm = ctx.native(x)
        out_perm = layout.after_removing(perm, axes)
        out_shape = ctx.shape(y)
        out = ctx.output(y, out_perm, forced=ctx.quant_of(x))
        ctx.reshape_to(op, layout.permute(out_shape, out_perm) if out_shape else (), out=out)


@register
class UnsqueezeConverter(_Movement):
    op_types = ("Unsqueeze",)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        out_shape = ctx.shape(y)
        axes = _axes(node, ctx, len(out_shape))
        if axes is None:
            raise ctx.fail("Unsqueeze needs axes")
        op, perm = ctx.native(x)
        in_shape = ctx.shape(x)
        if layout.same_bytes(in_shape, perm, layout.identity(len(perm))):
            out = ctx.output(y, forced=ctx.quant_of(x))
            ctx.reshape_to(op, out_shape, out=out)
            return
        kept = [d for d in range(len(out_shape)) if d not in axes]
        out_perm = tuple(kept[p] for p in perm) + tuple(sorted(axes))
        out = ctx.output(y, out_perm, forced=ctx.quant_of(x))
        ctx.reshape_to(op, layout.permute(out_shape, out_perm), out=out)


@register
class TransposeConverter(_Movement):
    op_types = ("Transpose",)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        rank = ctx.rank(x)
        onnx_perm = ints(node.attr("perm"), list(range(rank))[::-1])
        if sorted(onnx_perm) != list(range(rank)):
            raise ctx.fail(f"perm {onnx_perm} is not a permutation of the {rank} dimensions")
        op, perm = ctx.native(x)
        q_src, q_out = ctx.quant_of(x), ctx.quant_of(y)
        if q_out is not None and q_src is not None and not q_out.same(q_src):
            op = ctx.requantized(op, q_out)
        ctx.bind(y, op, layout.after_transpose(perm, onnx_perm))


@register
class IdentityConverter(_Movement):
    op_types = ("Identity", "Dropout")

    def convert(self, node: Node, ctx) -> None:
        if node.op_type == "Dropout":
            if len(node.outputs) > 1 and node.outputs[1]:
                consumers = [n for n in ctx.graph.nodes if node.outputs[1] in n.inputs]
                if consumers or node.outputs[1] in ctx.graph.outputs:
                    raise ctx.fail("the mask output of Dropout is not supported")
            training = ctx.graph.const(node.input(2)) if node.input(2) else None
            if training is not None and bool(np.asarray(training).reshape(-1)[0]):
                raise ctx.fail("Dropout in training mode (random) is not supported")
            if node.input(2) and training is None:
                raise ctx.fail("Dropout's training_mode must be a constant")
        alias(ctx, node.outputs[0], node.input(0))
