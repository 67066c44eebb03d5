"""Slice, Split, Gather, Tile, Expand, DepthToSpace, SpaceToDepth and the importer's ChannelShuffle.

All of them only move elements, so they work in whatever layout their input is held (axes and
per-dimension parameters are mapped through the layout permutation) and run on 8-bit tensors
unchanged: the output keeps the input's quantization (requantized when the ONNX graph gives it
other parameters). Mappings: Slice -> SLICE (unit steps) or STRIDED_SLICE (rank <= 4; INT32 data,
which STRIDED_SLICE lacks, takes SLICE + one GATHER per strided axis); Split -> SPLIT (equal parts)
or one SLICE per part; Gather -> GATHER (+ RESHAPE dropping the axis of a scalar index); Tile ->
TILE; Expand -> RESHAPE adding leading dimensions + TILE of the broadcast ones; DepthToSpace DCR ->
DEPTH_TO_SPACE, CRD -> CHANNEL_SHUFFLE + DEPTH_TO_SPACE; SpaceToDepth -> SPACE_TO_DEPTH;
ChannelShuffle (written by shuffle_pattern from Reshape -> Transpose -> Reshape) -> CHANNEL_SHUFFLE.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import OperandCode, OperandType, OperationCode

from .. import layout
from ..ir import Node
from ._common import alias
from .base import const_input, ints, register
from .shape_ops import _Movement

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def _axis(node: Node, ctx, value: int, rank: int) -> int:
    if not -rank <= value < rank:
        raise ctx.fail(f"axis {value} out of range for rank {rank}")
    return value + rank if value < 0 else value


def _no_empty_output(node: Node, ctx) -> None:
    for o in node.outputs:
        shape = ctx.value(o).shape if o else None
        if shape is not None and 0 in shape:
            raise ctx.fail(f"output {o!r} has shape {list(shape)}: NNAPI has no zero-sized tensors")


def _is_int32(ctx, operand: int) -> bool:
    return ctx.operand_type(operand).code == OperandCode.TENSOR_INT32


def _int_constant(ctx, values) -> int:
    arr = np.asarray(values, np.int64)
    if arr.size and (arr.min() < INT32_MIN or arr.max() > INT32_MAX):
        raise ctx.fail(f"value {arr.tolist()} does not fit in INT32")
    arr = arr.astype(np.int32)
    return ctx.constant(arr, OperandType.tensor(OperandCode.TENSOR_INT32, arr.shape or (1,)))


def _nn_shape(ctx, operand: int) -> list[int]:
    return list(ctx.operand_type(operand).dimensions)


def _onnx_range(start: int, end: int, step: int, dim: int) -> range:
    """The indices ONNX Slice takes (negative indices count from the end; for a negative step the start
    is clamped into [0, dim - 1], where Python would give an empty slice)."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    if step > 0:
        return range(min(max(start, 0), dim), min(max(end, 0), dim), step)
    return range(min(max(start, 0), dim - 1), min(max(end, -1), dim - 1), step)


# -- Slice ---------------------------------------------------------------------------------------------
@register
class SliceConverter(_Movement):
    op_types = ("Slice",)

    def params(self, node: Node, ctx, rank: int) -> dict[int, tuple[int, int, int]]:
        """{ONNX axis: (start, end, step)} as written (not yet clamped)."""
        if node.opset < 10:
            starts, ends = node.attr("starts"), node.attr("ends")
            if starts is None or ends is None:
                raise ctx.fail("the starts and ends attributes are required")
            starts, ends = ints(starts, []), ints(ends, [])
            axes = ints(node.attr("axes"), range(len(starts)))
            steps = [1] * len(starts)
        else:
            starts = ints(const_input(node, ctx.graph, 1, "starts", ctx), [])
            ends = ints(const_input(node, ctx.graph, 2, "ends", ctx), [])
            axes = ints(const_input(node, ctx.graph, 3, "axes", ctx), range(len(starts)))
            steps = ints(const_input(node, ctx.graph, 4, "steps", ctx), [1] * len(starts))
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise ctx.fail(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
        spec: dict[int, tuple[int, int, int]] = {}
        for s, e, a, st in zip(starts, ends, axes, steps):
            a = _axis(node, ctx, a, rank)
            if a in spec:
                raise ctx.fail(f"axis {a} is sliced twice")
            if st == 0:
                raise ctx.fail("a step of 0 is invalid")
            spec[a] = (s, e, st)
        return spec

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        shape = ctx.shape(x)
        rank = len(shape)
        if rank == 0:
            raise ctx.fail("cannot slice a scalar")
        spec = self.params(node, ctx, rank)
        _no_empty_output(node, ctx)
        # Per sliced ONNX axis: the range ONNX takes when the dimension is known, else the raw (start, end, step).
        ranges: dict[int, range | tuple[int, int, int]] = {}
        for a, (s, e, st) in spec.items():
            if shape[a] is None:
                if st < 0 and s < -1:  # ONNX clamps it to the first element, STRIDED_SLICE (like Python) does not
                    raise ctx.fail(f"a negative step from start {s} needs a static size of axis {a}")
                ranges[a] = (s, e, st)
                continue
            r = _onnx_range(s, e, st, shape[a])
            if len(r) == 0:
                raise ctx.fail(f"the slice of axis {a} is empty: NNAPI has no zero-sized tensors")
            if not (r.step == 1 and r.start == 0 and r.stop == shape[a]):
                ranges[a] = r
        if not ranges:
            return alias(ctx, y, x)
        if ctx.value(y).shape is None and all(isinstance(r, range) for r in ranges.values()):
            # onnx shape inference gives up on some valid forms (Slice-1 with unsorted axes): the shape is known here
            ctx.value(y).shape = tuple(len(ranges[a]) if a in ranges else d for a, d in enumerate(shape))
        op, perm = ctx.native(x)
        q = ctx.quant_of(x)
        unit = all(isinstance(r, range) and r.step == 1 for r in ranges.values())
        if unit:
            out = ctx.output(y, perm, forced=q)
            return self.slice(ctx, op, perm, ranges, out)
        if _is_int32(ctx, op):
            return self.gather_strided(node, ctx, op, perm, ranges)
        if rank > 4:
            raise ctx.fail(f"a step other than 1 on a rank-{rank} tensor: NNAPI STRIDED_SLICE takes at most 4 "
                           "dimensions")
        begin, end, strides, begin_mask, end_mask = [], [], [], 0, 0
        for i, p in enumerate(perm):
            r = ranges.get(p)
            if r is None:
                begin.append(0), end.append(0), strides.append(1)
                begin_mask |= 1 << i
                end_mask |= 1 << i
            elif isinstance(r, range):
                begin.append(r.start), strides.append(r.step)
                end.append(0 if r.stop < 0 else r.stop)
                if r.stop < 0:  # a negative step down to the first element
                    end_mask |= 1 << i
            else:  # unknown dimension: STRIDED_SLICE clamps at run time as ONNX does (start >= -1 if step < 0)
                s, e, st = r
                begin.append(min(max(s, INT32_MIN), INT32_MAX)), end.append(min(max(e, INT32_MIN), INT32_MAX))
                strides.append(st)
        out = ctx.output(y, perm, forced=q)
        ctx.add_op(OperationCode.STRIDED_SLICE, [op, ctx.int_tensor(begin), ctx.int_tensor(end),
                                                 ctx.int_tensor(strides), ctx.int_scalar(begin_mask),
                                                 ctx.int_scalar(end_mask), ctx.int_scalar(0)], [out])

    @staticmethod
    def slice(ctx, op: int, perm, ranges: dict, out: int | None = None) -> int:
        """SLICE of the unit-step ranges (the other dimensions whole); into `out` when given."""
        begin, size = [], []
        for p in perm:
            r = ranges.get(p)
            begin.append(r.start if r is not None else 0)
            size.append(len(r) if r is not None else -1)
        inputs = [op, ctx.int_tensor(begin), ctx.int_tensor(size)]
        if out is not None:
            ctx.add_op(OperationCode.SLICE, inputs, [out])
            return out
        dims = [len(ranges[p]) if p in ranges else d for p, d in zip(perm, _nn_shape(ctx, op))]
        return ctx.op(OperationCode.SLICE, inputs, ctx.operand_type(op).with_dimensions(dims))

    def gather_strided(self, node: Node, ctx, op: int, perm, ranges: dict) -> None:
        """INT32 data (no STRIDED_SLICE): SLICE of the unit-step axes, then a GATHER of each strided one."""
        if any(not isinstance(r, range) for r in ranges.values()):
            raise ctx.fail("an int tensor (NNAPI has no INT32 STRIDED_SLICE) sliced with a step other than 1 or "
                           "along a dimension of unknown size: the sliced dimensions must be static")
        unit = {a: r for a, r in ranges.items() if r.step == 1}
        strided = [(a, r) for a, r in ranges.items() if r.step != 1]
        if unit:
            op = self.slice(ctx, op, perm, unit)
        y = node.outputs[0]
        for k, (a, r) in enumerate(strided):
            i = layout.nn_axis(perm, a)
            inputs = [op, ctx.int_scalar(i), _int_constant(ctx, list(r))]
            if k == len(strided) - 1:
                ctx.add_op(OperationCode.GATHER, inputs, [ctx.output(y, perm)])
            else:
                dims = _nn_shape(ctx, op)
                dims[i] = len(r)
                op = ctx.op(OperationCode.GATHER, inputs, ctx.operand_type(op).with_dimensions(dims))


# -- Split ---------------------------------------------------------------------------------------------
@register
class SplitConverter(_Movement):
    op_types = ("Split",)

    def sizes(self, node: Node, ctx, dim: int | None, count: int) -> list[int] | None:
        """Part sizes along the axis; None for equal parts of an unknown dimension."""
        if node.opset >= 13:
            split = const_input(node, ctx.graph, 1, "split", ctx)
            split = None if split is None else ints(split, [])
        else:
            split = node.attr("split")
            split = None if split is None else ints(split, [])
        if split is not None:
            if len(split) != count:
                raise ctx.fail(f"split {split} has {len(split)} entries for {count} outputs")
            if min(split) < 0 or (dim is not None and sum(split) != dim):
                raise ctx.fail(f"split {split} does not divide the dimension of size {dim}")
            return split
        num = node.attr("num_outputs") if node.opset >= 18 else None
        if num is not None and int(num) != count:
            raise ctx.fail(f"num_outputs {num} differs from the {count} outputs")
        if dim is None:
            if num is not None and count > 1:
                raise ctx.fail("num_outputs needs a static dimension along the axis (the last part may be smaller)")
            return None
        if num is not None:  # opset 18: the last part may be smaller
            chunk = -(-dim // count)
            sizes = [chunk] * (count - 1) + [dim - chunk * (count - 1)]
            if sizes[-1] < 0:
                raise ctx.fail(f"{dim} elements cannot make {count} parts")
            return sizes
        if dim % count:
            raise ctx.fail(f"the dimension of size {dim} cannot be split into {count} equal parts")
        return [dim // count] * count

    def convert(self, node: Node, ctx) -> None:
        x = node.input(0)
        shape = ctx.shape(x)
        rank = len(shape)
        axis = _axis(node, ctx, int(node.attr("axis", 0)), rank)
        outputs = list(node.outputs)
        sizes = self.sizes(node, ctx, shape[axis], len(outputs))
        if sizes is not None and 0 in sizes:
            raise ctx.fail(f"split {sizes} has an empty part: NNAPI has no zero-sized tensors")
        if len(outputs) == 1:
            return alias(ctx, outputs[0], x)
        op, perm = ctx.native(x)
        q = ctx.quant_of(x)
        i = layout.nn_axis(perm, axis)
        if sizes is None or len(set(sizes)) == 1:
            outs = []
            for o in outputs:
                if o:
                    outs.append(ctx.output(o, perm, forced=q))
                else:  # an unnamed output: NNAPI SPLIT still writes every part
                    dims = _nn_shape(ctx, op)
                    dims[i] = sizes[0] if sizes else 0
                    outs.append(ctx.temp(ctx.operand_type(op).with_dimensions(dims)))
            ctx.add_op(OperationCode.SPLIT, [op, ctx.int_scalar(i), ctx.int_scalar(len(outputs))], outs)
            return
        offset = 0
        for o, size in zip(outputs, sizes):
            if o:
                SliceConverter.slice(ctx, op, perm, {axis: range(offset, offset + size)}, ctx.output(o, perm, forced=q))
            offset += size


# -- Gather --------------------------------------------------------------------------------------------
@register
class GatherConverter(_Movement):
    op_types = ("Gather",)

    def indices(self, node: Node, ctx, dim: int | None) -> tuple[int, tuple]:
        """The NNAPI indices operand (at least 1-D) and the ONNX indices shape."""
        name = node.input(1)
        value = ctx.graph.const(name)
        if value is None:
            shape = ctx.value(name).shape
            if shape is None:
                raise ctx.fail(f"the rank of the indices {name!r} is unknown")
            return self.wrapped(ctx, ctx.operand(name), dim), shape
        arr = np.asarray(value).astype(np.int64)
        if arr.size and (arr < 0).any():
            if dim is None:
                raise ctx.fail("negative indices need a static dimension along the axis")
            arr = np.where(arr < 0, arr + dim, arr)
        if dim is not None and arr.size and (arr.min() < 0 or arr.max() >= dim):
            raise ctx.fail(f"indices {np.asarray(value).ravel().tolist()} are out of range for a dimension of size "
                           f"{dim}")
        if arr.size == 0:
            raise ctx.fail("empty indices: NNAPI has no zero-sized tensors")
        return _int_constant(ctx, arr.reshape(arr.shape or (1,))), arr.shape

    @staticmethod
    def wrapped(ctx, idx: int, dim: int | None) -> int:
        """Computed indices with ONNX's negative ones (counting from the end) made non-negative, as NNAPI
        GATHER needs: SELECT(LESS(i, 0), ADD(i, dim), i)."""
        if dim is None:
            raise ctx.fail("computed indices need a static dimension along the axis (ONNX allows negative ones)")
        t = ctx.operand_type(idx)
        mask = ctx.op(OperationCode.LESS, [idx, _int_constant(ctx, [0])],
                      OperandType.tensor(OperandCode.TENSOR_BOOL8, t.dimensions))
        shifted = ctx.op(OperationCode.ADD, [idx, _int_constant(ctx, [dim]), ctx.int_scalar(0)], t)
        return ctx.op(OperationCode.SELECT, [mask, shifted, idx], t)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        shape = ctx.shape(x)
        rank = len(shape)
        axis = _axis(node, ctx, int(node.attr("axis", 0)), rank)
        idx, idx_shape = self.indices(node, ctx, shape[axis])
        n = len(idx_shape)
        op, perm = ctx.native(x)
        if rank + n - 1 > 4 and perm != layout.identity(rank):
            op, perm = ctx.operand(x), layout.identity(rank)  # NNAPI TRANSPOSE of the result would be of rank > 4
        q = ctx.quant_of(x)
        k = layout.nn_axis(perm, axis)
        inputs = [op, ctx.int_scalar(k), idx]
        if n:
            def shift(p: int) -> int:
                return p if p < axis else p + n - 1
            out_perm = tuple(shift(p) for p in perm[:k]) + tuple(axis + j for j in range(n)) + \
                tuple(shift(p) for p in perm[k + 1:])
            ctx.add_op(OperationCode.GATHER, inputs, [ctx.output(y, out_perm, forced=q)])
            return
        # A scalar index drops the axis: GATHER of a [1] index, then RESHAPE without that size-1 dimension.
        if rank > 4:
            raise ctx.fail(f"a scalar index on a rank-{rank} tensor: NNAPI RESHAPE takes at most 4 dimensions")
        dims = _nn_shape(ctx, op)
        dims[k] = 1
        gathered = ctx.op(OperationCode.GATHER, inputs, ctx.operand_type(op).with_dimensions(dims))
        out_perm = layout.after_removing(perm, [axis])
        out = ctx.output(y, out_perm, forced=q)
        ctx.reshape_to(gathered, layout.permute(ctx.shape(y), out_perm), out=out)


# -- Tile, Expand --------------------------------------------------------------------------------------
@register
class TileConverter(_Movement):
    op_types = ("Tile",)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        rank = ctx.rank(x)
        repeats = ints(const_input(node, ctx.graph, 1, "repeats", ctx), [])
        if len(repeats) != rank:
            raise ctx.fail(f"repeats {repeats} must have {rank} entries (the input's rank)")
        if min(repeats, default=1) < 0:
            raise ctx.fail(f"negative repeats {repeats}")
        _no_empty_output(node, ctx)
        if 0 in repeats:
            raise ctx.fail(f"repeats {repeats} give an empty tensor: NNAPI has no zero-sized tensors")
        if all(r == 1 for r in repeats):
            return alias(ctx, y, x)
        op, perm = ctx.native(x)
        out = ctx.output(y, perm, forced=ctx.quant_of(x))
        ctx.add_op(OperationCode.TILE, [op, ctx.int_tensor([repeats[p] for p in perm])], [out])


@register
class ExpandConverter(_Movement):
    op_types = ("Expand",)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        target = ints(const_input(node, ctx.graph, 1, "shape", ctx), [])
        in_shape = ctx.shape(x)
        r, big = len(in_shape), max(len(in_shape), len(target))
        full = (1,) * (big - r) + tuple(in_shape)
        target = [1] * (big - len(target)) + target
        multiples = []
        for a, (d, t) in enumerate(zip(full, target)):
            if t == 1 or d == t:
                multiples.append(1)
            elif d == 1:
                multiples.append(t)
            elif d is None:
                raise ctx.fail(f"dimension {a} of the input is unknown: whether it broadcasts to {t} cannot be "
                               "decided at import")
            else:
                raise ctx.fail(f"the input shape {list(in_shape)} cannot be expanded to {target}")
        _no_empty_output(node, ctx)
        if 0 in target:
            raise ctx.fail(f"shape {target} gives an empty tensor: NNAPI has no zero-sized tensors")
        q = ctx.quant_of(x)
        if big == r and all(m == 1 for m in multiples):
            return alias(ctx, y, x)
        op, perm = ctx.native(x)
        if big > r:  # leading size-1 dimensions, first in NNAPI order too: same bytes
            if r > 4:
                raise ctx.fail(f"rank {r}: NNAPI RESHAPE takes at most 4 dimensions")
            perm = tuple(range(big - r)) + tuple(p + big - r for p in perm)
            if all(m == 1 for m in multiples):
                ctx.reshape_to(op, layout.permute(full, perm), out=ctx.output(y, perm, forced=q))
                return
            op = ctx.reshape_to(op, layout.permute(full, perm))
        out = ctx.output(y, perm, forced=q)
        ctx.add_op(OperationCode.TILE, [op, ctx.int_tensor([multiples[p] for p in perm])], [out])


# -- DepthToSpace, SpaceToDepth, ChannelShuffle ----------------------------------------------------------
def _channel_shuffle(ctx, op: int, groups: int, axis: int, out: int | None = None) -> int:
    """CHANNEL_SHUFFLE of NNAPI axis `axis` into `out` (a new operand of op's type when None)."""
    inputs = [op, ctx.int_scalar(groups), ctx.int_scalar(axis)]
    if out is None:
        return ctx.op(OperationCode.CHANNEL_SHUFFLE, inputs, ctx.operand_type(op))
    ctx.add_op(OperationCode.CHANNEL_SHUFFLE, inputs, [out])
    return out


class _DepthSpace(_Movement):
    code: OperationCode

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        if ctx.rank(x) != 4:
            raise ctx.fail(f"the input has rank {ctx.rank(x)}; NNAPI {self.code.name} takes a 4-D tensor")
        b = node.attr("blocksize")
        if b is None or int(b) < 1:
            raise ctx.fail(f"blocksize {b} must be given and >= 1")
        b = int(b)
        _, c, h, w = ctx.shape(x)
        op, perm = ctx.native(x)
        if perm not in (layout.NHWC, layout.identity(4)):
            op, perm = ctx.operand(x, layout.NHWC), layout.NHWC
        op = self.prepare(node, ctx, op, perm, b, c, h, w)
        out = ctx.output(y, perm, forced=ctx.quant_of(x))
        nchw = perm == layout.identity(4)  # NNAPI's layout flag: the operation reads NCHW itself
        ctx.add_op(self.code, [op, ctx.int_scalar(b), ctx.bool_scalar(nchw)], [out])

    def prepare(self, node: Node, ctx, op: int, perm, b: int, c, h, w) -> int:
        return op


@register
class DepthToSpaceConverter(_DepthSpace):
    op_types = ("DepthToSpace",)
    code = OperationCode.DEPTH_TO_SPACE

    def prepare(self, node: Node, ctx, op: int, perm, b: int, c, h, w) -> int:
        if c is not None and c % (b * b):
            raise ctx.fail(f"the depth {c} is not divisible by blocksize^2 = {b * b}")
        mode = node.attr("mode", "DCR")
        if mode == "DCR":
            return op
        if mode != "CRD":
            raise ctx.fail(f"mode {mode!r} is not supported (DCR or CRD)")
        if c is None:
            raise ctx.fail("mode CRD needs a static number of channels")
        # CRD reads channel c * b*b + k where DCR reads k * C' + c: the [C', b*b] -> [b*b, C'] channel
        # transposition, which is CHANNEL_SHUFFLE with C' groups.
        groups = c // (b * b)
        if groups == 1 or b == 1:
            return op
        return _channel_shuffle(ctx, op, groups, layout.nn_axis(perm, 1))


@register
class SpaceToDepthConverter(_DepthSpace):
    op_types = ("SpaceToDepth",)
    code = OperationCode.SPACE_TO_DEPTH

    def prepare(self, node: Node, ctx, op: int, perm, b: int, c, h, w) -> int:
        if (h is not None and h % b) or (w is not None and w % b):
            raise ctx.fail(f"the blocksize {b} does not divide the height {h} and width {w}")
        return op


@register
class ChannelShuffleConverter(_Movement):
    """Importer-internal (shuffle_pattern): attributes group (the number of groups) and axis."""

    op_types = ("ChannelShuffle",)
    internal = True

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        group, axis = node.attr("group"), node.attr("axis")
        if group is None or axis is None:
            raise ctx.fail("ChannelShuffle needs the group and axis attributes")
        rank = ctx.rank(x)
        if not 1 <= rank <= 4:
            raise ctx.fail(f"rank {rank}: NNAPI CHANNEL_SHUFFLE takes 1 to 4 dimensions")
        op, perm = ctx.native(x)
        out = ctx.output(y, perm, forced=ctx.quant_of(x))
        _channel_shuffle(ctx, op, int(group), layout.nn_axis(perm, _axis(node, ctx, int(axis), rank)), out)
