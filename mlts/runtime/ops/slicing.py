"""SLICE, STRIDED_SLICE and SPLIT: take parts of a tensor (pure data movement, every type bit-exact).

- SLICE (NNAPI 1.2): `size[i]` elements of dimension i starting at `begin[i]`; a size of -1 takes
  everything from `begin[i]` to the end. begin/size are 1-D TENSOR_INT32 of length rank; begin must
  lie in [0, dim] and begin + size in [begin, dim] (a size of 0 gives a zero-sized output).
- STRIDED_SLICE (NNAPI 1.1, rank <= 4): Python's `start:stop:step` per dimension. Negative begin/end
  count from the end and are clamped the way Python clamps them; bit i of begin_mask (end_mask) means
  "from the very start" ("to the very end") in the stride's direction; bit i of shrink_axis_mask drops
  dimension i, which must then select exactly one element with a positive stride. Removing every
  dimension gives shape [1].
- SPLIT (NNAPI 1.2): `num_outputs` equal parts along `axis` (negative allowed); the dimension must be
  divisible by num_outputs, which must equal the operation's output count.

Types: TENSOR_FLOAT32 and TENSOR_QUANT8_ASYMM (STRIDED_SLICE since 1.1, the others since 1.2),
TENSOR_FLOAT16 (1.2), TENSOR_INT32 (SLICE and SPLIT only, 1.2), TENSOR_QUANT8_ASYMM_SIGNED (1.3).
Quantized outputs keep the input's scale and zero point (NNAPI requires it).
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor, known_ints, require_ints, resolve_axes
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, FLOAT_QUANT8_AND_INT32
from .registry import register

#: SLICE and SPLIT take TENSOR_INT32 data as well; STRIDED_SLICE does not (NNAPI 1.3).


def _check_vector_length(ctx: OperationContext, i: int, rank: int | None, what: str) -> None:
    """A 1-D parameter tensor whose declared length (when known) must equal the input's rank."""
    t = ctx.input_type(i)
    if rank is None or t is None or not t.dimensions or t.rank != 1 or t.dimensions[0] == 0:
        return
    ctx.check(t.dimensions[0] == rank,
              f"{what} must have {rank} entries (the input's rank), got {t.dimensions[0]}", input=i)


def _required_vector(ctx: OperationContext, i: int, rank: int, what: str) -> list[int]:
    """The value of 1-D parameter tensor `i`, of one entry per input dimension."""
    v = require_ints(ctx, i)
    ctx.check(v.ndim == 1, f"{what} must be a 1-D tensor, got rank {v.ndim}", input=i)
    ctx.check(v.size == rank, f"{what} must have {rank} entries (the input's rank), got {v.size}", input=i)
    return v.tolist()


# -- SLICE ------------------------------------------------------------------------------------------
def _check_slice_values(ctx: OperationContext, begin: list[int], size: list[int], shape: Shape | None) -> None:
    for d, (b, s) in enumerate(zip(begin, size)):
        ctx.check(b >= 0, f"begin[{d}] = {b} is negative", input=1)
        ctx.check(s >= -1, f"size[{d}] = {s} is invalid (must be >= 0, or -1 for the rest)", input=2)
        if shape is None:
            continue
        ctx.check(b <= shape[d], f"begin[{d}] = {b} exceeds dimension {d} of size {shape[d]}", input=1)
        if s != -1:
            ctx.check(b + s <= shape[d],
                      f"begin[{d}] + size[{d}] = {b} + {s} exceeds dimension {d} of size {shape[d]}", input=2)


@register
class Slice(Operation):
    code = OperationCode.SLICE
    supported_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 1)
        ctx.check_input_type(0, self.supported_types)
        check_int_tensor(ctx, 1, 1)
        check_int_tensor(ctx, 2, 1)
        ctx.check_input_rank(0, min_rank=1)
        ctx.check_same_quantization(0, output=0)
        rank = ctx.input_rank(0)
        _check_vector_length(ctx, 1, rank, "begin")
        _check_vector_length(ctx, 2, rank, "size")
        begin, size = known_ints(ctx, 1), known_ints(ctx, 2)
        if begin is not None and size is not None and begin.shape == size.shape:
            _check_slice_values(ctx, begin.ravel().tolist(), size.ravel().tolist(), None)

    def _bounds(self, ctx: OperationContext, shape: Shape) -> list[tuple[int, int]]:
        begin = _required_vector(ctx, 1, len(shape), "begin")
        size = _required_vector(ctx, 2, len(shape), "size")
        _check_slice_values(ctx, begin, size, shape)
        return [(b, dim if s == -1 else b + s) for b, s, dim in zip(begin, size, shape)]

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        return [tuple(end - begin for begin, end in self._bounds(ctx, shape))]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        window = tuple(slice(begin, end) for begin, end in self._bounds(ctx, x.shape))
        return [np.ascontiguousarray(x[window])]


# -- STRIDED_SLICE ----------------------------------------------------------------------------------
def clamped_index(index: int, dim: int, positive_stride: bool) -> int:
    """A begin/end index made absolute and clamped as Python clamps slice bounds: into [0, dim] for a
    positive stride, into [-1, dim - 1] for a negative one (-1: before the first element)."""
    if positive_stride:
        if index >= dim:
            return dim
        return max(index, -dim) % dim if dim else 0
    if index < -dim:
        return -1
    return min(index, dim - 1) % dim if dim else -1


def strided_ranges(shape: Shape, begin: list[int], end: list[int], strides: list[int],
                   begin_mask: int, end_mask: int) -> list[range]:
    """The input indices STRIDED_SLICE selects along each dimension (masks applied, bounds clamped)."""
    ranges = []
    for d, dim in enumerate(shape):
        stride = strides[d]
        forward = stride > 0
        first = (0 if forward else dim - 1) if begin_mask >> d & 1 else clamped_index(begin[d], dim, forward)
        stop = (dim if forward else -1) if end_mask >> d & 1 else clamped_index(end[d], dim, forward)
        ranges.append(range(first, stop, stride))
    return ranges


@register
class StridedSlice(Operation):
    code = OperationCode.STRIDED_SLICE
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(7, 1)
        ctx.check_input_type(0, self.supported_types)
        for i in (1, 2, 3):
            check_int_tensor(ctx, i, 1)
        for i in (4, 5, 6):
            ctx.check_input_type(i, OperandCode.INT32)
        ctx.check_input_rank(0, min_rank=1, max_rank=4)
        ctx.check_same_quantization(0, output=0)
        rank = ctx.input_rank(0)
        for i, what in ((1, "begin"), (2, "end"), (3, "strides")):
            _check_vector_length(ctx, i, rank, what)
        strides = known_ints(ctx, 3)
        if strides is not None:
            ctx.check(bool((strides != 0).all()), f"strides must be non-zero, got {strides.tolist()}", input=3)

    def _ranges(self, ctx: OperationContext, shape: Shape) -> tuple[list[range], int]:
        rank = len(shape)
        ctx.check(rank <= 4, f"rank {rank} exceeds the maximum of 4", input=0)
        begin = _required_vector(ctx, 1, rank, "begin")
        end = _required_vector(ctx, 2, rank, "end")
        strides = _required_vector(ctx, 3, rank, "strides")
        ctx.check(all(s != 0 for s in strides), f"strides must be non-zero, got {strides}", input=3)
        begin_mask, end_mask, shrink_mask = ctx.scalar(4), ctx.scalar(5), ctx.scalar(6)
        ranges = strided_ranges(shape, begin, end, strides, begin_mask, end_mask)
        for d, r in enumerate(ranges):
            if shrink_mask >> d & 1:
                ctx.check(r.step > 0, f"dimension {d} is shrunk (shrink_axis_mask) but its stride {r.step} "
                                      "is not positive", input=6)
                ctx.check(len(r) == 1, f"dimension {d} is shrunk (shrink_axis_mask) but its slice selects "
                                       f"{len(r)} elements, not 1", input=6)
        return ranges, shrink_mask

    @staticmethod
    def _output_shape(ranges: list[range], shrink_mask: int) -> Shape:
        return tuple(len(r) for d, r in enumerate(ranges) if not shrink_mask >> d & 1) or (1,)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [self._output_shape(*self._ranges(ctx, ctx.input_shape(0)))]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        ranges, shrink_mask = self._ranges(ctx, x.shape)
        picked = x[np.ix_(*[np.asarray(r, dtype=np.intp) for r in ranges])]
        return [np.ascontiguousarray(picked.reshape(self._output_shape(ranges, shrink_mask)))]


# -- SPLIT ------------------------------------------------------------------------------------------
@register
class Split(Operation):
    code = OperationCode.SPLIT
    supported_types = FLOAT_QUANT8_AND_INT32

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, ctx.num_outputs)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, OperandCode.INT32)
        ctx.check_input_type(2, OperandCode.INT32)
        ctx.check_input_rank(0, min_rank=1)
        ctx.check(ctx.num_outputs >= 1, "expected at least 1 output")
        for k in range(ctx.num_outputs):
            ctx.check_same_quantization(0, output=k)
        axis, count, rank = ctx.scalar_if_known(1), ctx.scalar_if_known(2), ctx.input_rank(0)
        if axis is not None and rank is not None:
            resolve_axes(ctx, 1, [axis], rank)
        if count is not None:
            self._check_count(ctx, count)

    @staticmethod
    def _check_count(ctx: OperationContext, count: int) -> None:
        ctx.check(count == ctx.num_outputs,
                  f"num_outputs is {count} but the operation has {ctx.num_outputs} outputs", input=2)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        (axis,) = resolve_axes(ctx, 1, [ctx.scalar(1)], len(shape))
        count = ctx.scalar(2)
        self._check_count(ctx, count)
        ctx.check(shape[axis] % count == 0,
                  f"dimension {axis} of size {shape[axis]} cannot be split into {count} equal parts", input=2)
        part = list(shape)
        part[axis] = shape[axis] // count
        return [tuple(part)] * count

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        (axis,) = resolve_axes(ctx, 1, [ctx.scalar(1)], x.ndim)
        return [np.ascontiguousarray(part) for part in np.split(x, ctx.scalar(2), axis=axis)]
