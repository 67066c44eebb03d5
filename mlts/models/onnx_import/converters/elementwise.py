"""Broadcasting element-wise operators: Add, Sub, Mul, Div (with fused activation), the comparisons
Equal, Greater, GreaterOrEqual, Less, LessOrEqual, and the logical And, Or, Not.

The result keeps the layout of the highest-rank computed input; constants are laid out to match at
import (expanded to the full rank and permuted), other inputs are transposed if they disagree.
Quantized Add/Sub/Mul map to NNAPI's 8-bit kernels (MUL needs output scale > product of the input
scales, else it runs in float); Div has no quantized NNAPI form and runs in float.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperationCode

from .. import layout
from ..errors import NotQuantizable
from ..ir import Graph, Node
from .base import OpConverter, all_quantized_same_dtype, register


def broadcast_inputs(node: Node, ctx, names: list[str]) -> tuple[list[int], tuple[int, ...]]:
    """Operands of `names` in a common layout for a broadcasting operation, and that layout."""
    out_rank = ctx.rank(node.outputs[0])
    computed = [n for n in names if not ctx.is_const(n)]
    perm = layout.identity(out_rank)
    full = [n for n in computed if ctx.rank(n) == out_rank]
    if full:
        perm = ctx.perm_of(full[0])
    if out_rank > 4:
        raise ctx.fail(f"rank {out_rank}: NNAPI element-wise operations take at most 4 dimensions")
    if out_rank == 0:
        return [ctx.operand(n) for n in names], perm
    return [ctx.broadcast_operand(n, out_rank, perm) for n in names], perm


class _Arithmetic(OpConverter):
    code: OperationCode
    quantizable = True
    data_inputs = (0, 1)
    fusable = True

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0, 1])
        for name in node.inputs[:2]:
            v = graph.value(name)
            if v.quant is None or not v.quant.per_tensor:
                raise NotQuantizable("both inputs must be quantized per tensor")

    def convert(self, node: Node, ctx) -> None:
        a, b = node.input(0), node.input(1)
        for name in (a, b):
            dtype = ctx.value(name).dtype
            if dtype is not None and dtype.kind in "iu" and not ctx.is_quantized(name):
                self.check_int(node, ctx, dtype)
        ops, perm = broadcast_inputs(node, ctx, [a, b])
        out = ctx.output(node.outputs[0], perm)
        ctx.add_op(self.code, ops + [ctx.int_scalar(ctx.fuse_code(node))], [out])

    def check_int(self, node: Node, ctx, dtype) -> None:
        if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ctx.fail(f"{dtype.name} arithmetic is not supported (NNAPI integer arithmetic is INT32)")


@register
class AddConverter(_Arithmetic):
    op_types = ("Add",)
    code = OperationCode.ADD


@register
class SubConverter(_Arithmetic):
    op_types = ("Sub",)
    code = OperationCode.SUB


@register
class MulConverter(_Arithmetic):
    op_types = ("Mul",)
    code = OperationCode.MUL

    def check_quantized(self, node: Node, graph: Graph) -> None:
        super().check_quantized(node, graph)
        qa, qb = graph.value(node.inputs[0]).quant, graph.value(node.inputs[1]).quant
        qo = graph.value(node.outputs[0]).quant
        if not np.float32(qo.s) > np.float32(qa.s) * np.float32(qb.s):
            raise NotQuantizable("NNAPI MUL needs output scale > input scale product")


@register
class DivConverter(_Arithmetic):
    op_types = ("Div",)
    code = OperationCode.DIV
    quantizable = False

    def check_int(self, node: Node, ctx, dtype) -> None:
        raise ctx.fail("integer Div is not supported (NNAPI DIV floors, ONNX truncates)")


class _Comparison(OpConverter):
    code: OperationCode
    data_inputs = (0, 1)

    def convert(self, node: Node, ctx) -> None:
        a, b = node.input(0), node.input(1)
        for name in (a, b):
            dtype = ctx.value(name).dtype
            if dtype is not None and dtype.kind in "iu" and dtype not in (np.dtype(np.int32), np.dtype(np.int64)) \
                    and not ctx.is_quantized(name):
                raise ctx.fail(f"{dtype.name} comparisons are not supported")
        ops, perm = broadcast_inputs(node, ctx, [a, b])
        out = ctx.output(node.outputs[0], perm)
        ctx.add_op(self.code, ops, [out])


def _comparison(name: str, code: OperationCode) -> type:
    cls = type(f"{name}Converter", (_Comparison,), {"op_types": (name,), "code": code})
    return register(cls)


_comparison("Equal", OperationCode.EQUAL)
_comparison("Greater", OperationCode.GREATER)
_comparison("GreaterOrEqual", OperationCode.GREATER_EQUAL)
_comparison("Less", OperationCode.LESS)
_comparison("LessOrEqual", OperationCode.LESS_EQUAL)
_comparison("And", OperationCode.LOGICAL_AND)
_comparison("Or", OperationCode.LOGICAL_OR)


@register
class NotConverter(OpConverter):
    op_types = ("Not",)

    def convert(self, node: Node, ctx) -> None:
        x = node.input(0)
        op, perm = ctx.native(x)
        out = ctx.output(node.outputs[0], perm)
        ctx.add_op(OperationCode.LOGICAL_NOT, [op], [out])
