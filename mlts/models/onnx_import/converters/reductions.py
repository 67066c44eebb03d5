"""ReduceMax/Min/Sum/Prod -> NNAPI REDUCE_MAX/MIN/SUM/PROD; ReduceSumSquare, ReduceL1, ReduceL2 and
ReduceLogSumExp decomposed (NNAPI has no such reductions); ArgMax/ArgMin -> ARGMAX/ARGMIN.

Reductions work in the layout their input already has: the ONNX axes are mapped onto the operand's
dimensions (an NCHW tensor held NHWC reduces its NHWC axes, no TRANSPOSE), and keepdims=0 drops them
from the binding permutation. The axes are an attribute before opset 18 (ReduceSum: 13) and a
constant input since; empty axes reduce everything unless noop_with_empty_axes, where only the
element-wise part runs (ReduceSumSquare squares, ReduceL1/L2 take |x|), as onnxruntime does.
ReduceMax/Min keep 8-bit quantized tensors quantized (NNAPI requires the input's parameters on the
output; other ONNX output parameters are requantized after).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from mlts.runtime import OperandCode, OperationCode

from .. import layout
from ..ir import Graph, Node
from ._common import alias
from .base import OpConverter, all_quantized_same_dtype, const_input, ints, register

MAX_RANK = 4  # NNAPI REDUCE_* take at most 4 dimensions
_FLOAT_CODES = (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16)
_QUANT_CODES = (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)


def reduce_axes(node: Node, ctx, rank: int, *, since: int = 18) -> list[int] | None:
    """Sorted non-negative ONNX axes to reduce; None when nothing is reduced (noop_with_empty_axes,
    or a rank-0 input). `since`: the opset from which the axes are input 1 instead of an attribute."""
    if node.opset >= since:
        value = const_input(node, ctx.graph, 1, "axes", ctx)
        axes = [] if value is None else ints(value, [])
    else:
        axes = ints(node.attr("axes"), [])
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return None
        axes = list(range(rank))
    for a in axes:
        if not -rank <= a < rank:
            raise ctx.fail(f"axis {a} out of range for rank {rank}")
    return sorted({a + rank if a < 0 else a for a in axes}) or None


def reduced_dims(dims: Sequence[int], nn_axes: Sequence[int], keep: bool) -> list[int]:
    """NNAPI dimensions after reducing `nn_axes` (kept as 1 or dropped; everything dropped gives [1])."""
    if keep:
        return [1 if i in nn_axes else d for i, d in enumerate(dims)]
    return [d for i, d in enumerate(dims) if i not in nn_axes] or [1]


class _Reduce(OpConverter):
    """(x[, axes]) -> y, with the reduction at the heart of `emit`."""

    def axes_since(self, node: Node) -> int:
        """The opset from which the axes are input 1 instead of an attribute."""
        return 18

    def convert(self, node: Node, ctx) -> None:
        x = node.input(0)
        rank = ctx.rank(x)
        if rank > MAX_RANK:
            raise ctx.fail(f"rank {rank}: NNAPI reductions take at most {MAX_RANK} dimensions")
        axes = reduce_axes(node, ctx, rank, since=self.axes_since(node))
        keep = bool(int(node.attr("keepdims", 1)))
        op, perm = ctx.native(x)
        self.check_type(node, ctx, ctx.operand_type(op).code)
        if axes is None:
            return self.noop(node, ctx, op, perm)
        nn_axes = [layout.nn_axis(perm, a) for a in axes]
        out_perm = perm if keep else layout.after_removing(perm, axes)
        self.emit(node, ctx, op, nn_axes, keep, out_perm)

    def check_type(self, node: Node, ctx, code: OperandCode) -> None:
        if code not in _FLOAT_CODES:
            raise ctx.fail(f"{node.op_type} of a {code.name} tensor: NNAPI has it for float tensors only")

    def noop(self, node: Node, ctx, op: int, perm) -> None:
        alias(ctx, node.outputs[0], node.inputs[0])

    def emit(self, node: Node, ctx, op: int, nn_axes: list[int], keep: bool, out_perm) -> None:
        raise NotImplementedError

    @staticmethod
    def reduce(ctx, code: OperationCode, op: int, nn_axes: Sequence[int], keep: bool, out: int | None = None) -> int:
        """One NNAPI REDUCE_* into `out` (a new temporary of the reduced shape when None)."""
        inputs = [op, ctx.int_tensor(nn_axes), ctx.bool_scalar(keep)]
        if out is None:
            t = ctx.operand_type(op)
            return ctx.op(code, inputs, t.with_dimensions(reduced_dims(t.dimensions, nn_axes, keep)))
        ctx.add_op(code, inputs, [out])
        return out


class _Direct(_Reduce):
    """One NNAPI REDUCE_* operation."""

    codes: dict[str, OperationCode] = {}

    def emit(self, node: Node, ctx, op: int, nn_axes: list[int], keep: bool, out_perm) -> None:
        out = ctx.output(node.outputs[0], out_perm, forced=ctx.quant_of(node.inputs[0]))
        self.reduce(ctx, self.code_for(node, ctx, op), op, nn_axes, keep, out)

    def code_for(self, node: Node, ctx, op: int) -> OperationCode:
        return self.codes[node.op_type]


@register
class ReduceMaxMinConverter(_Direct):
    op_types = ("ReduceMax", "ReduceMin")
    quantizable = True
    codes = {"ReduceMax": OperationCode.REDUCE_MAX, "ReduceMin": OperationCode.REDUCE_MIN}
    _BOOL = {"ReduceMax": OperationCode.REDUCE_ANY, "ReduceMin": OperationCode.REDUCE_ALL}

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])

    def check_type(self, node: Node, ctx, code: OperandCode) -> None:
        if code not in _FLOAT_CODES + _QUANT_CODES + (OperandCode.TENSOR_BOOL8,):
            raise ctx.fail(f"{node.op_type} of a {code.name} tensor: NNAPI has it for float, 8-bit quantized "
                           "and bool tensors only")

    def code_for(self, node: Node, ctx, op: int) -> OperationCode:
        if ctx.operand_type(op).code == OperandCode.TENSOR_BOOL8:  # opset 20: max = any, min = all
            return self._BOOL[node.op_type]
        return self.codes[node.op_type]


@register
class ReduceSumProdConverter(_Direct):
    op_types = ("ReduceSum", "ReduceProd")
    codes = {"ReduceSum": OperationCode.REDUCE_SUM, "ReduceProd": OperationCode.REDUCE_PROD}

    def axes_since(self, node: Node) -> int:
        return 13 if node.op_type == "ReduceSum" else 18


@register
class ReduceNormConverter(_Reduce):
    """ReduceSumSquare = REDUCE_SUM(x * x), ReduceL1 = REDUCE_SUM(|x|), ReduceL2 = SQRT(REDUCE_SUM(x * x))."""

    op_types = ("ReduceSumSquare", "ReduceL1", "ReduceL2")

    @staticmethod
    def elementwise(ctx, op: int, absolute: bool, out: int) -> int:
        """|x| or x * x into `out`."""
        if absolute:
            ctx.add_op(OperationCode.ABS, [op], [out])
        else:
            ctx.add_op(OperationCode.MUL, [op, op, ctx.int_scalar(0)], [out])
        return out

    def noop(self, node: Node, ctx, op: int, perm) -> None:
        # Nothing reduced: x * x (SumSquare) or |x| (L1, and L2 = sqrt(x * x) = |x|).
        self.elementwise(ctx, op, node.op_type != "ReduceSumSquare", ctx.output(node.outputs[0], perm))

    def emit(self, node: Node, ctx, op: int, nn_axes: list[int], keep: bool, out_perm) -> None:
        pre = self.elementwise(ctx, op, node.op_type == "ReduceL1", ctx.temp(ctx.operand_type(op)))
        out = ctx.output(node.outputs[0], out_perm)
        if node.op_type != "ReduceL2":
            self.reduce(ctx, OperationCode.REDUCE_SUM, pre, nn_axes, keep, out)
            return
        total = self.reduce(ctx, OperationCode.REDUCE_SUM, pre, nn_axes, keep)
        ctx.add_op(OperationCode.SQRT, [total], [out])


@register
class ReduceLogSumExpConverter(_Reduce):
    """log(sum(exp(x - m))) + m with m = max(x) over the axes: no overflow for large x."""

    op_types = ("ReduceLogSumExp",)

    def emit(self, node: Node, ctx, op: int, nn_axes: list[int], keep: bool, out_perm) -> None:
        t = ctx.operand_type(op)
        peak = self.reduce(ctx, OperationCode.REDUCE_MAX, op, nn_axes, True)
        shifted = ctx.op(OperationCode.SUB, [op, peak, ctx.int_scalar(0)], t)
        exp = ctx.op(OperationCode.EXP, [shifted], t)
        total = self.reduce(ctx, OperationCode.REDUCE_SUM, exp, nn_axes, keep)
        log = ctx.op(OperationCode.LOG, [total], ctx.operand_type(total))
        if not keep:  # the maximum without the reduced dimensions: the same bytes, or reduced again
            dims = ctx.operand_type(total).dimensions
            peak = (ctx.reshape_to(peak, dims) if all(dims) else
                    self.reduce(ctx, OperationCode.REDUCE_MAX, op, nn_axes, False))
        out = ctx.output(node.outputs[0], out_perm)
        ctx.add_op(OperationCode.ADD, [log, peak, ctx.int_scalar(0)], [out])


@register
class ArgMaxMinConverter(OpConverter):
    """ARGMAX/ARGMIN drop the axis: keepdims=1 re-inserts it with EXPAND_DIMS. select_last_index=1 runs
    on the input REVERSEd along the axis: the last extreme index is (n - 1) - the first one there."""

    op_types = ("ArgMax", "ArgMin")

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        rank = ctx.rank(x)
        if rank == 0:
            raise ctx.fail("the input is a scalar (rank 0); ArgMax/ArgMin need rank 1 or more")
        axis = int(node.attr("axis", 0))
        if not -rank <= axis < rank:
            raise ctx.fail(f"axis {axis} out of range for rank {rank}")
        axis = axis + rank if axis < 0 else axis
        keep = bool(int(node.attr("keepdims", 1)))
        op, perm = ctx.native(x)
        nn_axis = layout.nn_axis(perm, axis)
        code = OperationCode.ARGMAX if node.op_type == "ArgMax" else OperationCode.ARGMIN
        dims = list(ctx.operand_type(op).dimensions)
        index_type = ctx.make_type(OperandCode.TENSOR_INT32, [d for i, d in enumerate(dims) if i != nn_axis] or [1])
        expand = keep and rank > 1
        out_perm = perm if keep else layout.after_removing(perm, [axis])
        final = ctx.output(y, out_perm)
        last = bool(int(node.attr("select_last_index", 0)))
        if last:
            size = ctx.shape(x)[axis]
            if size is None:
                raise ctx.fail("select_last_index=1 needs a static size along the axis")
            if rank > MAX_RANK + 1:
                raise ctx.fail(f"select_last_index=1 on rank {rank}: NNAPI SUB takes at most 4 dimensions")
            op = ctx.op(OperationCode.REVERSE, [op, ctx.int_tensor([nn_axis])], ctx.operand_type(op))
        index = final if not (expand or last) else ctx.temp(index_type)
        ctx.add_op(code, [op, ctx.int_scalar(nn_axis)], [index])
        if last:
            flipped = final if not expand else ctx.temp(index_type)
            ctx.add_op(OperationCode.SUB, [ctx.constant(np.asarray([size - 1], np.int32), ctx.make_type(
                OperandCode.TENSOR_INT32, [1])), index, ctx.int_scalar(0)], [flipped])
            index = flipped
        if expand:
            ctx.add_op(OperationCode.EXPAND_DIMS, [index, ctx.int_scalar(nn_axis)], [final])
