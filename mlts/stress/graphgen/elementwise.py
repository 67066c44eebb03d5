"""Appliers of the element-wise arithmetic operations: ADD, SUB, MUL, DIV (broadcasting a second
operand), the activations and SOFTMAX."""
from __future__ import annotations

import numpy as np

from ...runtime import FuseCode, OperandType, OperationCode
from .growing import (F32, FLOAT_BOUND, I32, INT_BOUND, QUANT, S8, U8, Applier, GrowingGraph, Tensor,
                      broadcast_dims, broadcast_partner, fused_bound, random_fuse)


def _binary(code: OperationCode, types: tuple) -> Applier:
    def apply(g: GrowingGraph, t: Tensor) -> Tensor | None:
        if t.code not in types or t.rank == 0:
            return None
        if t.code in QUANT and not t.exact:
            return None
        if t.code == F32 and t.bound > FLOAT_BOUND:
            return None
        if t.code == I32 and (not t.exact or t.bound > INT_BOUND / 16):
            return None
        pdims = broadcast_partner(g, t)
        divide = code == OperationCode.DIV
        if t.code in QUANT:
            p_t = OperandType.tensor(t.code, pdims, *g.quant_params(t.code))
        else:
            p_t = OperandType.tensor(t.code, pdims)
        other = g.operand(p_t, nonzero=divide)
        fuse = FuseCode.NONE if t.code == I32 else random_fuse(g)
        out_dims = broadcast_dims(t, pdims)
        if t.code in QUANT:
            s1, s2 = t.type.scale, p_t.scale
            if code == OperationCode.MUL:
                scale = float(np.float32(s1 * s2 * g.rng.uniform(40, 400)))
            else:
                scale = float(np.float32(max(s1, s2) * g.rng.uniform(1.0, 3.0)))
            zp = g.quant_params(t.code)[1]
            o_t = OperandType.tensor(t.code, out_dims, scale, zp)
            bound = 0.0
        else:
            o_t = OperandType.tensor(t.code, out_dims)
            pb = 2.0 if t.code == F32 else 8.0
            bound = {OperationCode.ADD: t.bound + pb, OperationCode.SUB: t.bound + pb,
                     OperationCode.MUL: t.bound * pb, OperationCode.DIV: t.bound * 2.0}[code]
            bound = fused_bound(fuse, bound)
        o = g.out(t, o_t, exact=t.code != F32, bound=bound)
        return g.emit(code, [t.index, other, g.b.i32(fuse)], [o], [t])
    return apply


def _activation(code: OperationCode) -> Applier:
    def apply(g: GrowingGraph, t: Tensor) -> Tensor | None:
        if t.code not in (F32, U8, S8) or t.rank == 0 or t.rank > 4:
            return None
        transcendental = code in (OperationCode.LOGISTIC, OperationCode.TANH)
        if t.code in QUANT:
            if transcendental and not t.exact:
                return None
            signed = t.code == S8
            if code == OperationCode.LOGISTIC:
                o_t = OperandType.tensor(t.code, t.dims, 1.0 / 256, -128 if signed else 0)
            elif code == OperationCode.TANH:
                o_t = OperandType.tensor(t.code, t.dims, 1.0 / 128, 0 if signed else 128)
            else:
                o_t = t.type
            exact = t.exact
        else:
            o_t = t.type
            exact = t.exact and not transcendental
        bound = {OperationCode.RELU1: 1.0, OperationCode.RELU6: 6.0, OperationCode.LOGISTIC: 1.0,
                 OperationCode.TANH: 1.0}.get(code, t.bound)
        return g.emit(code, [t.index], [g.out(t, o_t, exact=exact, bound=bound)], [t])
    return apply


def _softmax(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4 or (t.code in QUANT and not t.exact):
        return None
    if t.code == F32 and t.bound > 2 * FLOAT_BOUND:
        return None
    ins = [t.index, g.b.f32(float(g.choice([0.5, 1.0, 1.5])))]
    if g.chance(0.5):
        ins.append(g.b.i32(int(g.rng.integers(-t.rank, t.rank))))  # else the optional axis is left out
    o_t = t.type if t.code == F32 else OperandType.tensor(t.code, t.dims, 1.0 / 256, -128 if t.code == S8 else 0)
    return g.emit(OperationCode.SOFTMAX, ins, [g.out(t, o_t, exact=t.code != F32, bound=1.0)], [t])


_ALL = (F32, U8, S8, I32)
APPLIERS: dict[str, Applier] = {
    **{code.name: _binary(code, types) for code, types in ((OperationCode.ADD, _ALL), (OperationCode.SUB, _ALL),
                                                           (OperationCode.MUL, _ALL), (OperationCode.DIV, (F32, I32)))},
    **{code.name: _activation(code) for code in (OperationCode.RELU, OperationCode.RELU1, OperationCode.RELU6,
                                                 OperationCode.LOGISTIC, OperationCode.TANH)},
    "SOFTMAX": _softmax,
}
