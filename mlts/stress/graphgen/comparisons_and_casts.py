"""Appliers of the operations that make or take bool and int32 side branches or change a tensor's type:
the comparisons, the logical operations, CAST, QUANTIZE and DEQUANTIZE."""
from __future__ import annotations

from ...runtime import OperandType, OperationCode
from .growing import (B8, F32, I32, INT_BOUND, QUANT, S8, U8, Applier, GrowingGraph, Tensor, broadcast_dims,
                      broadcast_partner)


def _comparison(code: OperationCode) -> Applier:
    def apply(g: GrowingGraph, t: Tensor) -> Tensor | None:
        if t.code not in (F32, I32) or not t.exact or t.rank == 0:
            return None
        pdims = broadcast_partner(g, t)
        other = g.operand(OperandType.tensor(t.code, pdims))
        o_t = OperandType.tensor(B8, broadcast_dims(t, pdims))
        return g.emit(code, [t.index, other], [g.out(t, o_t, exact=True, bound=1.0)], [t])
    return apply


def _logical_not(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code != B8:
        return None
    return g.emit(OperationCode.LOGICAL_NOT, [t.index], [g.out(t, t.type, exact=True, bound=1.0)], [t])


def _logical(code: OperationCode) -> Applier:
    def apply(g: GrowingGraph, t: Tensor) -> Tensor | None:
        if t.code != B8:
            return None
        pdims = broadcast_partner(g, t)
        other = g.operand(OperandType.tensor(B8, pdims))
        o_t = OperandType.tensor(B8, broadcast_dims(t, pdims))
        return g.emit(code, [t.index, other], [g.out(t, o_t, exact=True, bound=1.0)], [t])
    return apply


def _cast(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code == F32 and t.exact and t.bound <= INT_BOUND:
        to = I32
    elif t.code == I32 and t.exact and t.bound <= 1 << 24:
        to = F32
    else:
        return None
    o_t = OperandType.tensor(to, t.dims)
    return g.emit(OperationCode.CAST, [t.index], [g.out(t, o_t, exact=True, bound=t.bound)], [t])


def _quantize(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code != F32 or t.rank == 0:
        return None
    code = U8 if g.chance(0.5) else S8
    o_t = OperandType.tensor(code, t.dims, *g.quant_params(code))
    return g.emit(OperationCode.QUANTIZE, [t.index], [g.out(t, o_t, exact=False, bound=0.0)], [t])


def _dequantize(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code not in QUANT or t.rank == 0:
        return None
    o_t = OperandType.tensor(F32, t.dims)
    return g.emit(OperationCode.DEQUANTIZE, [t.index], [g.out(t, o_t, exact=t.exact, bound=g.real_bound(t))], [t])


APPLIERS: dict[str, Applier] = {
    **{code.name: _comparison(code) for code in (OperationCode.EQUAL, OperationCode.NOT_EQUAL, OperationCode.LESS,
                                                 OperationCode.LESS_EQUAL, OperationCode.GREATER,
                                                 OperationCode.GREATER_EQUAL)},
    "LOGICAL_NOT": _logical_not,
    "LOGICAL_AND": _logical(OperationCode.LOGICAL_AND),
    "LOGICAL_OR": _logical(OperationCode.LOGICAL_OR),
    "CAST": _cast,
    "QUANTIZE": _quantize,
    "DEQUANTIZE": _dequantize,
}
