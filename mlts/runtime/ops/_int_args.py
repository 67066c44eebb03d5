"""Reading TENSOR_INT32 parameter tensors (shapes, axes, permutations, paddings); a private helper module.

Shared by RESHAPE, SQUEEZE, TRANSPOSE, PAD, PAD_V2 and MEAN: each takes one such tensor whose value
decides the output shape, so it is checked (rank, values) at build time when it is a constant and
again at run time when it was only known then.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode
from .base import OperationContext, Shape


def check_int_tensor(ctx: OperationContext, i: int, rank: int, *, optional: bool = False) -> None:
    """Input `i` is a TENSOR_INT32 of the given rank (when its rank is known)."""
    ctx.check_input_type(i, OperandCode.TENSOR_INT32, optional=optional)
    if not ctx.is_omitted(i):
        r = ctx.input_rank(i)
        if r is not None:
            ctx.check(r == rank, f"must be a {rank}-D tensor, got rank {r}", input=i)


def known_ints(ctx: OperationContext, i: int) -> np.ndarray | None:
    """The value of int tensor input `i` as int64 (its declared shape kept); None if not known yet."""
    v = ctx.value(i)
    return None if v is None else np.asarray(v).astype(np.int64)


def require_ints(ctx: OperationContext, i: int) -> np.ndarray:
    """Like `known_ints` but raises ValueUnknown at build time when the value is not known."""
    return np.asarray(ctx.require_value(i)).astype(np.int64)


def resolve_axes(ctx: OperationContext, i: int, axes, rank: int) -> list[int]:
    """Axes in [-rank, rank) made non-negative (duplicates kept); out-of-range ones fail."""
    out = []
    for a in np.ravel(axes).tolist():
        ctx.check(-rank <= a < rank, f"axis {a} out of range [{-rank}, {rank}) for a rank-{rank} input", input=i)
        out.append(a + rank if a < 0 else a)
    return out


def validate_data_movement(ctx: OperationContext, supported) -> np.ndarray | None:
    """SQUEEZE/TRANSPOSE: a tensor plus an optional 1-D INT32 parameter, output quantized like the input.
    Returns the parameter's values when they are already known."""
    ctx.check_counts(2, 1)
    ctx.check_input_type(0, supported)
    check_int_tensor(ctx, 1, 1, optional=True)
    ctx.check_input_rank(0, max_rank=4)
    ctx.check_same_quantization(0, output=0)
    return known_ints(ctx, 1)


def reduction_axes(ctx: OperationContext, i: int, rank: int, *, empty_means_all: bool = False) -> tuple[int, ...]:
    """The sorted, distinct, non-negative axes held by 1-D TENSOR_INT32 input `i` (run time or
    constant); ValueUnknown at build time when they are not known yet. An empty list reduces nothing
    (REDUCE_*), or every axis with `empty_means_all` (MEAN)."""
    axes = require_ints(ctx, i)
    ctx.check(axes.ndim == 1, f"axes must be a 1-D tensor, got rank {axes.ndim}", input=i)
    if axes.size == 0 and empty_means_all:
        return tuple(range(rank))
    return tuple(sorted(set(resolve_axes(ctx, i, axes, rank))))


def reduced_shape(shape: Shape, axes: tuple[int, ...], keep_dims: bool) -> Shape:
    """Reduced dimensions become 1 (keep_dims) or disappear; nothing left gives [1], as NNAPI does."""
    if keep_dims:
        return tuple(1 if d in axes else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in axes) or (1,)
