"""Broadcasting operators of several tensors: Sum, Mean, Max, Min (variadic), Pow, Where.

Inputs are laid out together by `elementwise.broadcast_inputs` (the layout of the first full-rank computed
input; constants expanded and permuted at import). Sum is a chain of ADDs, Mean the same followed by a MUL
by 1/n, Max/Min chains of MAXIMUM/MINIMUM; a single input is the identity. Pow is POW (float), with exact
shortcuts for a constant exponent: 2 -> MUL(x, x) (the same single rounding), 1 -> identity, 0.5 -> SQRT
(equal for every finite input and +inf, up to the sign of a zero; only pow(-inf, 0.5) = +inf differs: SQRT
gives NaN). Where is SELECT, whose three inputs must have one shape: a value input that broadcasts is
TILEd and a broadcasting condition is widened by LOGICAL_AND with a constant true tensor; boolean values
(no SELECT form) become (c AND a) OR (NOT c AND b). Quantized (8-bit): Max/Min (NNAPI requantizes every
input to the output's parameters), Sum of two inputs (one ADD), Where (SELECT requantizes both values to the
output's parameters).
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode

from ..emitter import FLOAT_CODES, nn_dims
from ..errors import NotQuantizable
from ..ir import Graph, Node
from ._common import alias
from .base import OpConverter, all_quantized_same_dtype, register
from .elementwise import broadcast_inputs

_INT = (np.dtype(np.int32), np.dtype(np.int64))


def broadcast_dims(a, b) -> tuple[int, ...]:
    """NNAPI dimensions (0 = unknown) of the broadcast of two operands (right-aligned, as NNAPI does)."""
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            out.append(max(x, y))  # one of them unknown (0): the other one, if known, is the size
    return tuple(out)


def _check_types(node: Node, ctx, names: list[str], *, ints: bool, quantized: bool) -> None:
    for n in names:
        v = ctx.value(n)
        if ctx.is_quantized(n):
            if not quantized:
                raise ctx.fail(f"8-bit quantized input {n!r}: NNAPI has no quantized form of this operation")
        elif v.dtype not in FLOAT_CODES and not (ints and v.dtype in _INT):
            kinds = "float or int32" if ints else "float"
            raise ctx.fail(f"input {n!r} of type {v.dtype.name if v.dtype is not None else 'unknown'}: NNAPI "
                           f"takes {kinds} tensors here")


class _Variadic(OpConverter):
    code: OperationCode
    quantizable = True
    data_inputs = None
    ints = True  # int32/int64 tensors allowed (Max, Min)
    fused = True  # the NNAPI operation takes a fused-activation scalar
    needs_finish = False  # `finish` writes the output (Mean's MUL)

    def check_quantized(self, node: Node, graph: Graph) -> None:
        names = [n for n in node.inputs if n]
        all_quantized_same_dtype(node, graph, list(range(len(node.inputs))))
        if any(graph.value(n).quant is None or not graph.value(n).quant.per_tensor for n in names):
            raise NotQuantizable("every input must be quantized per tensor")

    def convert(self, node: Node, ctx) -> None:
        names = [n for n in node.inputs if n]
        y = node.outputs[0]
        if not names:
            raise ctx.fail("no inputs")
        _check_types(node, ctx, names, ints=self.ints, quantized=self.quantizable)
        if len(names) == 1:
            return alias(ctx, y, names[0])
        ops, perm = broadcast_inputs(node, ctx, names)
        out = self.chain(node, ctx, ops, perm)
        self.finish(node, ctx, out, perm)

    def chain(self, node: Node, ctx, ops: list[int], perm) -> int | None:
        """Combine the operands pairwise; the last operation writes the output (returns None) unless
        `finish` does more."""
        y = node.outputs[0]
        acc = ops[0]
        for k, op in enumerate(ops[1:], start=2):
            inputs = [acc, op] + ([ctx.int_scalar(FuseCode.NONE)] if self.fused else [])
            if k == len(ops) and not self.needs_finish:
                ctx.add_op(self.code, inputs, [ctx.output(y, perm)])
                return None
            dims = broadcast_dims(ctx.operand_type(acc).dimensions, ctx.operand_type(op).dimensions)
            acc = ctx.op(self.code, inputs, ctx.value_type(y, perm, dims=dims))
        return acc

    def finish(self, node: Node, ctx, acc: int | None, perm) -> None:
        pass


@register
class SumConverter(_Variadic):
    op_types = ("Sum",)
    code = OperationCode.ADD
    ints = False  # ONNX Sum and Mean are float-only

    def check_quantized(self, node: Node, graph: Graph) -> None:
        super().check_quantized(node, graph)
        if len([n for n in node.inputs if n]) > 2:
            raise NotQuantizable("a chain of 8-bit ADDs would round and saturate at every step")


@register
class MeanConverter(_Variadic):
    op_types = ("Mean",)
    code = OperationCode.ADD
    quantizable = False
    ints = False
    needs_finish = True

    def finish(self, node: Node, ctx, acc: int | None, perm) -> None:
        n = len([i for i in node.inputs if i])
        t = ctx.operand_type(acc)
        scale = ctx.constant(np.asarray([1.0 / n]), OperandType.tensor(t.code, [1]))
        ctx.add_op(OperationCode.MUL, [acc, scale, ctx.int_scalar(FuseCode.NONE)], [ctx.output(node.outputs[0], perm)])


@register
class MaxConverter(_Variadic):
    op_types = ("Max",)
    code = OperationCode.MAXIMUM
    fused = False


@register
class MinConverter(_Variadic):
    op_types = ("Min",)
    code = OperationCode.MINIMUM
    fused = False


# -- Pow -------------------------------------------------------------------------------------------------
@register
class PowConverter(OpConverter):
    op_types = ("Pow",)
    data_inputs = (0, 1)

    def convert(self, node: Node, ctx) -> None:
        x, e, y = node.input(0), node.input(1), node.outputs[0]
        base = ctx.value(x)
        if ctx.is_quantized(x) or base.dtype not in FLOAT_CODES:
            raise ctx.fail(f"base of type {base.dtype.name if base.dtype is not None else 'unknown'}: NNAPI POW "
                           "takes float32/float16 tensors only")
        ev = ctx.value(e)
        exponent = ctx.graph.const(e)
        usable = ev.dtype is not None and ev.dtype.kind in "iuf" if exponent is not None else (
            ev.dtype in FLOAT_CODES or ev.dtype in _INT)  # a constant of any numeric type is converted
        if ctx.is_quantized(e) or not usable:
            raise ctx.fail(f"exponent of type {ev.dtype.name if ev.dtype is not None else 'unknown'} is not supported")
        if exponent is not None and ctx.shape(y) == ctx.shape(x) and not ctx.is_const(x) and exponent.size:
            values = np.unique(np.asarray(exponent, np.float64))
            if values.size == 1 and values[0] == 1.0:
                return alias(ctx, y, x)
            if values.size == 1 and values[0] in (2.0, 0.5):
                op, perm = ctx.native(x)
                out = ctx.output(y, perm)
                if values[0] == 0.5:
                    ctx.add_op(OperationCode.SQRT, [op], [out])
                elif ctx.rank(x) <= 4:
                    ctx.add_op(OperationCode.MUL, [op, op, ctx.int_scalar(FuseCode.NONE)], [out])
                else:
                    raise ctx.fail(f"rank {ctx.rank(x)}: NNAPI MUL takes at most 4 dimensions")
                return
        code = FLOAT_CODES[base.dtype]
        if exponent is not None and ev.dtype != base.dtype:  # a constant exponent of another type: converted
            ops, perm = broadcast_inputs(node, ctx, [x])
            rank = ctx.rank(y)
            arr = np.asarray(exponent, np.float64).reshape((1,) * (rank - exponent.ndim) + exponent.shape)
            arr = np.transpose(arr, perm) if rank else arr.reshape(1)
            ops.append(ctx.constant(arr, OperandType.tensor(code, arr.shape)))
        else:
            ops, perm = broadcast_inputs(node, ctx, [x, e])
            if ev.dtype != base.dtype:  # a computed exponent of another type: CAST to the base's
                ops[1] = ctx.op(OperationCode.CAST, [ops[1]],
                                OperandType.tensor(code, ctx.operand_type(ops[1]).dimensions))
        ctx.add_op(OperationCode.POW, ops, [ctx.output(y, perm)])


# -- Where -----------------------------------------------------------------------------------------------
@register
class WhereConverter(OpConverter):
    op_types = ("Where",)
    quantizable = True
    data_inputs = (1, 2)

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [1, 2])
        for name in node.inputs[1:3]:
            q = graph.value(name).quant
            if q is None or not q.per_tensor:
                raise NotQuantizable("both values must be quantized per tensor")

    def convert(self, node: Node, ctx) -> None:
        c, a, b, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
        if ctx.value(c).dtype != np.dtype(np.bool_):
            raise ctx.fail("the condition must be a bool tensor")
        if ctx.is_quantized(a) != ctx.is_quantized(b):
            raise ctx.fail("one value is 8-bit quantized and the other is not")
        # The layout follows the values first (they are usually the large tensors), then the condition.
        ops, perm = broadcast_inputs(node, ctx, [a, b, c])
        if ctx.value(a).dtype == np.dtype(np.bool_):
            return self.logical(node, ctx, ops, perm)
        _check_types(node, ctx, [a, b], ints=True, quantized=True)
        rank = ctx.rank(y)
        out_dims = nn_dims(ctx.shape(y), perm)
        full = [self.expand(ctx, op, name, rank, perm, out_dims) for op, name in zip(ops, (a, b, c))]
        ctx.add_op(OperationCode.SELECT, [full[2], full[0], full[1]], [ctx.output(y, perm)])

    def expand(self, ctx, op: int, name: str, rank: int, perm, out_dims) -> int:
        """`op` widened to the output's dimensions (TILE, or LOGICAL_AND for the bool condition)."""
        shape = (1,) * (rank - ctx.rank(name)) + tuple(ctx.shape(name))
        in_dims = nn_dims(shape, perm)
        multiples = []
        for i, (d, o) in enumerate(zip(in_dims, out_dims)):
            if d == 1 and o != 1:
                if o == 0:
                    raise ctx.fail(f"{name!r} broadcasts along dimension {perm[i]}, whose output size is unknown; "
                                   "SELECT needs it known at import")
                multiples.append(o)
            else:
                multiples.append(1)
        t = ctx.operand_type(op)
        lower_rank = len(t.dimensions) < rank  # left so by broadcast_operand (identity layout)
        dims = tuple(d * m for d, m in zip(in_dims, multiples))
        if t.code == OperandCode.TENSOR_BOOL8:  # LOGICAL_AND broadcasts (RESHAPE and TILE have no bool form)
            if not lower_rank and all(m == 1 for m in multiples):
                return op
            ones = np.ones(multiples, np.bool_)
            true = ctx.constant(ones, OperandType.tensor(OperandCode.TENSOR_BOOL8, ones.shape))
            return ctx.op(OperationCode.LOGICAL_AND, [op, true], t.with_dimensions(dims))
        if lower_rank:
            op = ctx.reshape_to(op, shape)
        if all(m == 1 for m in multiples):
            return op
        return ctx.op(OperationCode.TILE, [op, ctx.int_tensor(multiples)], t.with_dimensions(dims))

    def logical(self, node: Node, ctx, ops: list[int], perm) -> None:
        a, b, c = ops

        def both(code: OperationCode, p: int, q: int) -> int:
            dims = broadcast_dims(ctx.operand_type(p).dimensions, ctx.operand_type(q).dimensions)
            return ctx.op(code, [p, q], OperandType.tensor(OperandCode.TENSOR_BOOL8, dims))
        take_a = both(OperationCode.LOGICAL_AND, c, a)
        take_b = both(OperationCode.LOGICAL_AND, ctx.op(OperationCode.LOGICAL_NOT, [c], ctx.operand_type(c)), b)
        ctx.add_op(OperationCode.LOGICAL_OR, [take_a, take_b], [ctx.output(node.outputs[0], perm)])
