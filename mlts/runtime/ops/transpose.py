"""TRANSPOSE: permute the dimensions; output dimension i is input dimension perm[i].

The permutation is optional: omitted, the dimensions are reversed (for a 2-D input, the matrix
transpose NNAPI's CPU path implements; mlts extends it to every rank, as TensorFlow does). Quantized
outputs keep the input's scale and zero point.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperationCode
from ._int_args import require_ints, validate_data_movement
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8
from .registry import register


def _check_perm(ctx: OperationContext, perm: list[int], rank: int) -> None:
    ctx.check(len(perm) == rank, f"permutation {perm} has {len(perm)} entries, the input has rank {rank}", input=1)
    ctx.check(sorted(perm) == list(range(rank)), f"{perm} is not a permutation of 0..{rank - 1}", input=1)


@register
class Transpose(Operation):
    code = OperationCode.TRANSPOSE
    supported_types = FLOAT_AND_QUANT8

    def validate(self, ctx: OperationContext) -> None:
        perm = validate_data_movement(ctx, self.supported_types)
        rank = ctx.input_rank(0)
        if perm is not None and rank is not None:
            _check_perm(ctx, perm.ravel().tolist(), rank)

    def _perm(self, ctx: OperationContext, rank: int) -> list[int]:
        if ctx.is_omitted(1):
            return list(range(rank))[::-1]
        perm = require_ints(ctx, 1)
        ctx.check(perm.ndim == 1, f"permutation must be a 1-D tensor, got rank {perm.ndim}", input=1)
        perm = perm.tolist()
        _check_perm(ctx, perm, rank)
        return perm

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) <= 4, f"rank {len(shape)} exceeds the maximum of 4", input=0)
        return [tuple(shape[p] for p in self._perm(ctx, len(shape)))]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        return [np.ascontiguousarray(x.transpose(self._perm(ctx, x.ndim)))]
