"""Appliers of the operations that move, join, pad or reduce elements along dimensions:
CONCATENATION, RESHAPE, SQUEEZE, TRANSPOSE, MEAN, PAD and PAD_V2."""
from __future__ import annotations

import numpy as np

from ...runtime import OperandType, OperationCode
from .growing import F32, I32, MAX_ELEMENTS, QUANT, S8, U8, Applier, GrowingGraph, Tensor, element_count


def _concatenation(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4:
        return None
    axis = int(g.rng.integers(t.rank))
    parts = [t]
    others = []
    for _ in range(int(g.rng.integers(1, 3))):
        dims = list(t.dims)
        dims[axis] = int(g.rng.integers(1, 4))
        if t.code in QUANT:
            same = g.chance(0.5)
            p_t = OperandType.tensor(t.code, dims, *((t.type.scale, t.type.zero_point) if same
                                                     else g.quant_params(t.code)))
        else:
            p_t = OperandType.tensor(t.code, dims)
        others.append((g.operand(p_t), p_t))
    total = t.dims[axis] + sum(p.dimensions[axis] for _, p in others)
    out_dims = list(t.dims)
    out_dims[axis] = total
    if element_count(out_dims) > MAX_ELEMENTS:
        return None
    requantized = t.code in QUANT and any((p.scale, p.zero_point) != (t.type.scale, t.type.zero_point)
                                          for _, p in others)
    if requantized and not t.exact:
        return None
    o_t = t.type.with_dimensions(tuple(out_dims))
    ins = [t.index] + [i for i, _ in others] + [g.b.i32(axis)]
    return g.emit(OperationCode.CONCATENATION, ins, [g.out(t, o_t, exact=t.exact, bound=max(t.bound, 2.0))], parts)


def _prime_factors(n: int) -> list[int]:
    factors = []
    p = 2
    while p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    if n > 1:
        factors.append(n)
    return factors


def _reshape(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8, I32) or t.rank == 0:
        return None
    rank = int(g.rng.integers(1, 5))
    dims = [1] * rank
    for f in _prime_factors(element_count(t.dims)):
        dims[int(g.rng.integers(rank))] *= f
    target = list(dims)
    if g.chance(0.3):
        target[int(g.rng.integers(rank))] = -1
    o_t = t.type.with_dimensions(tuple(dims))
    return g.emit(OperationCode.RESHAPE, [t.index, g.b.i32_tensor(target)],
                  [g.out(t, o_t, exact=t.exact, bound=t.bound)], [t])


def _squeeze(g: GrowingGraph, t: Tensor) -> Tensor | None:
    ones = [d for d, s in enumerate(t.dims) if s == 1]
    if t.code not in (F32, U8, S8) or not ones or t.rank > 4:
        return None
    if g.chance(0.5):
        axes_idx = g.b.omitted(OperandType.tensor(I32, (1,)))  # omitted: every size-1 dimension goes
        drop = set(ones)
    else:
        drop = {d for d in ones if g.chance(0.6)} or {ones[0]}
        axes_idx = g.b.i32_tensor([d - t.rank if g.chance(0.3) else d for d in sorted(drop)])
    out = tuple(s for d, s in enumerate(t.dims) if d not in drop) or (1,)
    return g.emit(OperationCode.SQUEEZE, [t.index, axes_idx],
                  [g.out(t, t.type.with_dimensions(out), exact=t.exact, bound=t.bound)], [t])


def _transpose(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4:
        return None
    if g.chance(0.3):
        perm = list(range(t.rank))[::-1]
        perm_idx = g.b.omitted(OperandType.tensor(I32, (t.rank,)))
    else:
        perm = [int(p) for p in g.rng.permutation(t.rank)]
        perm_idx = g.b.i32_tensor(perm)
    out = tuple(t.dims[p] for p in perm)
    return g.emit(OperationCode.TRANSPOSE, [t.index, perm_idx],
                  [g.out(t, t.type.with_dimensions(out), exact=t.exact, bound=t.bound)], [t])


def _mean(g: GrowingGraph, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4 or (t.code in QUANT and not t.exact):
        return None
    axes = sorted({int(a) for a in g.rng.integers(0, t.rank, int(g.rng.integers(1, t.rank + 1)))})
    keep = int(g.chance(0.5))
    out = tuple(1 if d in axes else s for d, s in enumerate(t.dims)) if keep else \
        (tuple(s for d, s in enumerate(t.dims) if d not in axes) or (1,))
    return g.emit(OperationCode.MEAN, [t.index, g.b.i32_tensor(axes), g.b.i32(keep)],
                  [g.out(t, t.type.with_dimensions(out), exact=False, bound=t.bound)], [t])


def _pad(v2: bool) -> Applier:
    def apply(g: GrowingGraph, t: Tensor) -> Tensor | None:
        if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4:
            return None
        pads = [[int(g.rng.integers(0, 3)), int(g.rng.integers(0, 3))] for _ in range(t.rank)]
        out = tuple(a + s + b for s, (a, b) in zip(t.dims, pads))
        if element_count(out) > MAX_ELEMENTS:
            return None
        ins = [t.index, g.b.const(OperandType.tensor(I32, (t.rank, 2)), np.asarray(pads, np.int32))]
        if v2:
            if t.code == F32:
                ins.append(g.b.f32(float(np.float32(g.rng.uniform(-1, 1)))))
            else:
                info = np.iinfo(t.type.dtype)
                ins.append(g.b.i32(int(g.rng.integers(info.min, int(info.max) + 1))))
        code = OperationCode.PAD_V2 if v2 else OperationCode.PAD
        return g.emit(code, ins, [g.out(t, t.type.with_dimensions(out), exact=t.exact, bound=max(t.bound, 1.0))],
                      [t])
    return apply


APPLIERS: dict[str, Applier] = {
    "CONCATENATION": _concatenation,
    "RESHAPE": _reshape,
    "SQUEEZE": _squeeze,
    "TRANSPOSE": _transpose,
    "MEAN": _mean,
    "PAD": _pad(False),
    "PAD_V2": _pad(True),
}
