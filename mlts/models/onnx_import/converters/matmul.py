"""MatMul -> FULLY_CONNECTED (constant B of rank 1 or 2, with the bias vector the graph passes fuse)
or BATCH_MATMUL (two computed operands, or a constant B of rank 3 or more); the product planner
`contract` is shared with Einsum.

FULLY_CONNECTED: A [..., K] x constant B [K, N] uses weights B^T, results of rank != 2 are RESHAPEd
back; a 1-D B gives a [1, K] weight and drops the last dimension. A constant 2-D A with a computed
2-D B is computed transposed: (B^T A^T)^T.

BATCH_MATMUL (NNAPI: ranks 2 to 4, equal batch dimensions, adj flags transpose the slices): every
product is described by index letters, as in an einsum: batch indices (in both operands and the
result), row indices (A and result), contracted indices (A and B) and column indices (B and result).
Each operand is laid out [batch..., rows, contracted] (or transposed, through adj_x / adj_y, when
that is the layout it is already held in), several row, contracted or column indices merged by a
RESHAPE, and the result is bound in the planner's index order (the layout bookkeeping makes that
free). ONNX broadcasting: batch dimensions only A has merge into its rows (a RESHAPE); where B has
some of its own, the operand lacking a batch dimension is TILEd (a constant B instead takes them as
columns: constant weights, no TILE). With no batch index and a constant float B, FULLY_CONNECTED
does the product. Ranks above 4 fail (RESHAPE and BATCH_MATMUL stop at 4).
Quantized BATCH_MATMUL exists for signed 8-bit only: uint8 operands are moved to int8 exactly
(zero point - 128) and the int8 result back to the uint8 output parameters.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mlts.runtime import FuseCode, OperandCode, OperationCode

from .. import layout
from ..emitter import QUANT_CODES
from ..errors import NotQuantizable
from ..ir import Graph, Node, Quant
from .base import OpConverter, all_quantized_same_dtype, register
from .fully_connected import fc_input, fully_connected

_ACTIVATIONS = {FuseCode.RELU: OperationCode.RELU, FuseCode.RELU1: OperationCode.RELU1,
                FuseCode.RELU6: OperationCode.RELU6}
MAX_RANK = 4  # BATCH_MATMUL (and RESHAPE) take at most 4 dimensions: 2 batch indices


@dataclass(frozen=True)
class Side:
    """One operand of a product: an ONNX tensor and one index letter per dimension."""
    name: str
    letters: str


def check_batch_matmul_quantized(node: Node, graph: Graph, indices: Sequence[int]) -> None:
    """8-bit BATCH_MATMUL: every operand (and the result) quantized per tensor; no bias."""
    if len([i for i in node.inputs if i]) != len(indices):
        raise NotQuantizable("a quantized product takes exactly two operands and no bias")
    for i in indices:
        v = graph.value(node.inputs[i])
        if v.quant is None or v.dtype not in QUANT_CODES or not v.quant.per_tensor:
            raise NotQuantizable("BATCH_MATMUL needs both operands quantized per tensor")


def broadcast_letters(shape_a: Sequence, shape_b: Sequence, fresh) -> tuple[list[str], list[str], list[str]]:
    """Letters for dimensions broadcast against each other (right-aligned, ONNX rules): a shared letter
    where the sizes agree, an own letter where only one operand has the dimension, and where one side
    has size 1 against the other's size, a letter of its own (dropped) and the other's own letter.
    Returns the letters of A, of B and of the result."""
    ra, rb = len(shape_a), len(shape_b)
    rank = max(ra, rb)
    la, lb, lo = [], [], []
    for j in range(rank):
        da = shape_a[j - (rank - ra)] if j >= rank - ra else "absent"
        db = shape_b[j - (rank - rb)] if j >= rank - rb else "absent"
        if da == "absent" or db == "absent":
            letter = fresh()
            (lb if da == "absent" else la).append(letter)
            lo.append(letter)
        elif da == db or (da is None and db != 1) or (db is None and da != 1):
            letter = fresh()
            la.append(letter)
            lb.append(letter)
            lo.append(letter)
        elif da == 1 or db == 1:
            ones, other = (la, lb) if da == 1 else (lb, la)
            ones.append(fresh())
            letter = fresh()
            other.append(letter)
            lo.append(letter)
        else:
            raise ValueError(f"dimensions {da} and {db} do not broadcast")
    return la, lb, lo


def broadcast_tiles(la: Sequence[str], lb: Sequence[str], lo: Sequence[str]) -> set[str]:
    """Broadcast batch letters to TILE rather than merge: letters only A has merge into A's rows for free
    (a RESHAPE), but one only B has would move B's batch behind its rows (a TRANSPOSE): then every
    broadcast letter becomes a batch index, the operands lacking it TILEd."""
    own_a = {x for x in lo if x in la and x not in lb}
    own_b = {x for x in lo if x in lb and x not in la}
    return own_a | own_b if own_b else set()


def fresh_letters():
    counter = iter(range(0x100, 0x10000))
    return lambda: chr(next(counter))  # outside ASCII: never clashes with an equation's letters


def _int8(q: Quant) -> Quant:
    """The signed 8-bit parameters holding the same values as `q` (uint8: zero point - 128)."""
    if q.dtype == np.dtype(np.int8):
        return q
    return Quant.make(q.scale, q.zero_point - 128, np.int8)


def contract(ctx, a: Side, b: Side, out: str, out_letters: str, *, fuse: int = 0, what: str = "",
             tile: set[str] = frozenset()) -> None:
    """out[out_letters] = sum over the indices missing from out of a[...] * b[...] (see the module doc).
    `tile`: indices of one operand only that become batch indices, the other operand TILEd along them."""
    where = f"{what}: " if what else ""
    sizes: dict[str, int | None] = {}
    for side in (a, b):
        if ctx.rank(side.name) > MAX_RANK:
            raise ctx.fail(f"{where}{side.name!r} has rank {ctx.rank(side.name)}: NNAPI BATCH_MATMUL takes at most "
                           f"{MAX_RANK} dimensions")
        for letter, d in zip(side.letters, ctx.shape(side.name)):
            known = sizes.get(letter)
            if letter in sizes and known is not None and d is not None and known != d:
                raise ctx.fail(f"{where}{_describe(letter, a, b)} has sizes {known} and {d}")
            sizes[letter] = d if d is not None else known
    in_a, in_b, in_out = set(a.letters), set(b.letters), set(out_letters)
    for letter in out_letters:
        if letter not in in_a | in_b:
            raise ctx.fail(f"{where}output index {letter!r} is in no operand")
    for letter in (in_a ^ in_b) - in_out:
        if sizes[letter] != 1:
            raise ctx.fail(f"{where}{_describe(letter, a, b)} is summed over within one operand (only products of two "
                           "operands, contracted over shared indices, map to BATCH_MATMUL)")
    for letter in tile:
        if sizes[letter] is None:
            raise ctx.fail(f"{where}broadcasting needs the static size of {_describe(letter, a, b)}")
    batch = [x for x in out_letters if (x in in_a and x in in_b) or x in tile]
    rows = [x for x in a.letters if x in in_out and x not in in_b and x not in tile]
    inner = [x for x in a.letters if x in in_b and x not in in_out]
    cols = [x for x in b.letters if x in in_out and x not in in_a and x not in tile]
    if len(batch) > MAX_RANK - 2:
        raise ctx.fail(f"{where}{len(batch)} batch dimensions: NNAPI BATCH_MATMUL takes at most {MAX_RANK - 2}")

    quantized = ctx.is_quantized(a.name) or ctx.is_quantized(b.name)
    if quantized and not (ctx.is_quantized(a.name) and ctx.is_quantized(b.name)):
        raise ctx.fail(f"{where}one operand is quantized and the other is not")
    use_fc = not batch and ctx.is_const(b.name) and not ctx.is_const(a.name) and not quantized
    int8: dict[int, int] = {}  # operand -> its int8 copy (x @ x^T reads one tensor twice)
    a_op, adj_a = _operand(ctx, a, batch, rows, inner, sizes, int8 if quantized else None, where, plain=use_fc)
    b_op, adj_b = _operand(ctx, b, batch, inner, cols, sizes, int8 if quantized else None, where,
                           fc_weights=use_fc)

    # The result: [batch..., M, N]; bound as [batch..., rows..., cols...] in the output's index order.
    out_value = ctx.value(out)
    if out_value.shape is None:  # ONNX shape inference gives up on some einsum forms (implicit, ellipsis)
        out_value.shape = tuple(sizes[x] for x in out_letters)
    order = batch + rows + cols
    out_perm = tuple(out_letters.index(x) for x in order)
    final_dims = [sizes[x] for x in order]
    result_dims = [sizes[x] for x in batch] + [_size(rows, sizes), _size(cols, sizes)]
    code = ctx.operand_type(a_op).code
    out_q = _int8(ctx.quant_of(out)) if quantized else None
    reshape = _nn(result_dims) != _nn(final_dims)
    activation = _ACTIVATIONS.get(FuseCode(fuse)) if not use_fc else None
    if fuse and not use_fc and activation is None:
        raise ctx.fail(f"{where}fused activation {fuse} is not supported")

    def target(dims, last: bool) -> int:
        if last:
            return ctx.output(out, out_perm, forced=out_q)
        return ctx.temp(ctx.make_type(code, _nn(dims), out_q))

    result = target(result_dims, not (reshape or activation))
    if use_fc:
        units = ctx.operand_type(b_op).dimensions[0]
        bias = ctx.constant(np.zeros(units, np.float32), ctx.make_type(code, [units]))
        ctx.add_op(OperationCode.FULLY_CONNECTED, [a_op, b_op, bias, ctx.int_scalar(fuse)], [result])
    else:
        ctx.add_op(OperationCode.BATCH_MATMUL, [a_op, b_op, ctx.bool_scalar(adj_a), ctx.bool_scalar(adj_b)], [result])
    if reshape:
        shaped = target(final_dims, not activation)
        ctx.reshape_to(result, final_dims, out=shaped)
        result = shaped
    if activation is not None:
        ctx.add_op(activation, [result], [target(final_dims, True)])


def _describe(letter: str, a: Side, b: Side) -> str:
    """An equation's index by its letter; the planner's own letters (MatMul, ellipses) by position."""
    if letter.isascii():
        return f"index {letter!r}"
    side = a if letter in a.letters else b
    return f"dimension {side.letters.index(letter)} of {side.name!r}"


def _size(group: Sequence[str], sizes: dict) -> int | None:
    values = [sizes[x] for x in group]
    return None if any(v is None for v in values) else math.prod(values)


def _nn(dims: Sequence) -> list[int]:
    return [0 if d is None else int(d) for d in dims] or [1]


def _operand(ctx, side: Side, batch: list[str], first: list[str], second: list[str], sizes: dict,
             int8: dict[int, int] | None, where: str, *, plain: bool = False,
             fc_weights: bool = False) -> tuple[int, bool]:
    """The operand [batch..., first, second] of one side, or [..., second, first] with the adj flag when
    that is the layout the tensor is already held in (never when `plain`); FULLY_CONNECTED's constant
    weights (`fc_weights`) are [second, first] ([N, K]). Batch indices the side lacks are TILEd.
    `int8`: quantized operands are moved to int8, each once (a cache of the copies)."""
    letters = side.letters
    present = [x for x in batch if x in letters]
    dropped = [x for x in letters if x not in set(present) | set(first) | set(second)]  # size 1
    options = [(False, present + first + second)] + ([] if plain else [(True, present + second + first)])
    lead = [sizes[x] if x in letters else 1 for x in batch]
    multiples = [1 if x in letters else sizes[x] for x in batch] + [1, 1]
    dims_of = {False: lead + [_size(first, sizes), _size(second, sizes)],
               True: lead + [_size(second, sizes), _size(first, sizes)]}
    v = ctx.value(side.name)
    if v.const is not None:
        adj = fc_weights
        arr = np.transpose(np.asarray(v.const), [letters.index(x) for x in dropped + options[adj][1]])
        arr = np.tile(arr.reshape(dims_of[adj]), multiples)
        if int8 is not None:
            q = v.quant
            if q.dtype == np.dtype(np.uint8):
                arr = (arr.astype(np.int16) - 128).astype(np.int8)
            t = ctx.make_type(OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, arr.shape, _int8(q))
            return ctx.constant(arr, t), False
        return ctx.constant(ctx.const_storage(v, arr), ctx.const_type(v, arr.shape)), False
    shape = ctx.shape(side.name)
    native, native_perm = ctx.native(side.name)
    adj, perm = False, None
    for option, flat in options:
        candidate = tuple(letters.index(x) for x in dropped + flat)
        if layout.same_bytes(shape, native_perm, candidate):
            adj, perm = option, candidate
            break
    if perm is None:  # no layout without a TRANSPOSE: the plain one
        src = ctx.operand(side.name, tuple(letters.index(x) for x in dropped + options[0][1]))
    else:
        src = native
    dims = dims_of[adj]
    if tuple(ctx.operand_type(src).dimensions) != tuple(_nn(dims)):
        if sum(d is None for d in dims) > 1:
            raise ctx.fail(f"{where}merging dimensions of {side.name!r} for BATCH_MATMUL needs static sizes, got "
                           f"{list(shape)}")
        src = ctx.reshape_to(src, dims)
    if int8 is not None and ctx.operand_type(src).code != OperandCode.TENSOR_QUANT8_ASYMM_SIGNED:
        if src not in int8:
            int8[src] = ctx.requantized(src, _int8(ctx.quant_of(side.name)))
        src = int8[src]
    if any(m != 1 for m in multiples):
        t = ctx.operand_type(src)
        tiled = [d * m for d, m in zip(t.dimensions, multiples)]
        src = ctx.op(OperationCode.TILE, [src, ctx.int_tensor(multiples)], t.with_dimensions(tiled))
    return src, adj


def matmul_letters(shape_a: Sequence, shape_b: Sequence) -> tuple[str, str, str, set[str]]:
    """Index letters of ONNX MatMul operands and result (numpy.matmul broadcasting, 1-D operands), and
    the broadcast ones to TILE (`broadcast_tiles`)."""
    fresh = fresh_letters()
    m, k, n = fresh(), fresh(), fresh()
    batch_a = shape_a[:-2] if len(shape_a) > 1 else ()
    batch_b = shape_b[:-2] if len(shape_b) > 1 else ()
    la, lb, lo = broadcast_letters(batch_a, batch_b, fresh)
    a = "".join(la) + (m + k if len(shape_a) > 1 else k)
    b = "".join(lb) + (k + n if len(shape_b) > 1 else k)
    out = "".join(lo) + (m if len(shape_a) > 1 else "") + (n if len(shape_b) > 1 else "")
    return a, b, out, broadcast_tiles(la, lb, lo)


@register
class MatMulConverter(OpConverter):
    op_types = ("MatMul",)
    quantizable = True
    data_inputs = (0, 1)
    weight_input = 1
    fusable = True

    def check_quantized(self, node: Node, graph: Graph) -> None:
        a, b = graph.value(node.inputs[0]), graph.value(node.inputs[1])
        if b.const is None or b.const.ndim >= 3:  # BATCH_MATMUL
            if b.const is None and a.const is not None and a.const.ndim == 2 and b.rank == 2:
                raise NotQuantizable("a constant 2-D A is computed transposed in float")
            return check_batch_matmul_quantized(node, graph, [0, 1])
        all_quantized_same_dtype(node, graph, [0])
        if b.quant is None or b.dtype not in QUANT_CODES or b.const.ndim != 2:
            raise NotQuantizable("B must be a 2-D 8-bit constant")
        if not b.quant.per_tensor:
            if b.quant.axis != 1:
                raise NotQuantizable("per-axis weights must be quantized per column")
            if np.any(b.quant.zero_point != 0):
                raise NotQuantizable("per-column weights must be symmetric")
        if len(node.inputs) > 2 and node.inputs[2]:
            raise NotQuantizable("bias fusion is float only")

    def convert(self, node: Node, ctx) -> None:
        a, b = node.input(0), node.input(1)
        bias_name = node.input(2)  # set by the MatMul + Add fusion (a float bias vector)
        bv = ctx.value(b)
        fuse = ctx.fuse_code(node)
        if bv.const is None or bv.const.ndim >= 3:
            if bv.const is None and ctx.is_const(a) and ctx.rank(a) == 2 and ctx.rank(b) == 2 and bias_name is None \
                    and not ctx.is_quantized(b):
                return self._transposed(node, ctx, fuse)
            if bias_name is not None:  # the pass fuses a bias only with a constant 2-D B
                raise ctx.fail("a fused bias needs a constant 2-D B")
            try:
                la, lb, lo, tile = matmul_letters(ctx.shape(a), ctx.shape(b))
            except ValueError as e:
                raise ctx.fail(f"shapes {list(ctx.shape(a))} and {list(ctx.shape(b))}: {e}") from None
            if bv.const is not None and not ctx.is_quantized(b):
                tile = set()  # B's own batch indices become FULLY_CONNECTED units: constant weights, no TILE
            return contract(ctx, Side(a, la), Side(b, lb), node.outputs[0], lo, fuse=fuse, tile=tile,
                            what=f"{list(ctx.shape(a))} x {list(ctx.shape(b))}")
        raw = np.asarray(bv.const)
        weights = raw.reshape(1, -1) if raw.ndim == 1 else raw.T
        units, k = weights.shape
        a_op = fc_input(ctx, a)
        w_quant = None
        if ctx.is_quantized(a):
            q = bv.quant
            w_quant = Quant(q.scale, q.zero_point, q.dtype, None if q.per_tensor else 0)
            weights = np.ascontiguousarray(weights)
        else:
            weights = weights.astype(np.float32)
        bias = None
        if bias_name is not None:
            bias = np.asarray(ctx.value(bias_name).const, np.float64).reshape(-1)
        fully_connected(ctx, a_op, k, weights, w_quant, bias, node.outputs[0], fuse)

    def _transposed(self, node: Node, ctx, fuse: int) -> None:
        a, b = node.input(0), node.input(1)
        a_const = np.asarray(ctx.value(a).const, np.float32)  # [M, K]
        b_t = ctx.operand(b, (1, 0))  # [N, K]
        m = a_const.shape[0]
        out_shape = ctx.static_shape(node.outputs[0])
        t = ctx.operand_type(b_t)
        yt = ctx.temp(t.with_dimensions([out_shape[1], m]))
        ctx.add_op(OperationCode.FULLY_CONNECTED, [b_t, ctx.float_tensor(a_const),
                                                   ctx.float_tensor(np.zeros(m, np.float32)), ctx.int_scalar(fuse)],
                   [yt])
        out = ctx.output(node.outputs[0])
        ctx.add_op(OperationCode.TRANSPOSE, [yt, ctx.int_tensor([1, 0])], [out])
