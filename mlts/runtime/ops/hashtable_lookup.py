"""HASHTABLE_LOOKUP: look rows of a table up by key (NNAPI 1.0).

Inputs: 0 the lookups, a 1-D TENSOR_INT32 [k]; 1 the keys, a 1-D TENSOR_INT32 [n], sorted ascending
(NNAPI requires it and does not check it); 2 the values, [n, ...] (TENSOR_FLOAT32, TENSOR_INT32 or
TENSOR_QUANT8_ASYMM; rank >= 1, as NNAPI's kernel accepts, though its documentation says >= 2).
Outputs: 0 [k, ...] of the values' type (quantized: the values' scale and zero point), row i the
values' row whose key equals lookups[i], zeros for a miss; 1 the hits, [k] TENSOR_QUANT8_ASYMM with
scale 1 and zero point 0 (NNAPI requires them), 1 for a hit and 0 for a miss.

Keys are found by binary search, probing as Android's C library bsearch does (the middle of the
remaining range, moving right past the probe when the lookup is larger), so that unsorted keys or
repeated keys pick the same row as NNAPI's kernel on Android. Keys compare as integers (NNAPI's
comparator subtracts them in int32, which can overflow for keys more than 2**31 apart; this one
does not).

Drivers judge an operation by its input 0, here always TENSOR_INT32, so that is `supported_types`;
the values' types are checked in `validate`.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor
from .base import Operation, OperationContext, Shape
from .registry import register

VALUE_TYPES = frozenset({OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_INT32, OperandCode.TENSOR_QUANT8_ASYMM})


def bsearch_positions(keys: np.ndarray, lookups: np.ndarray) -> np.ndarray:
    """For each lookup, the index of a key equal to it found by bsearch's probe sequence; -1 if none."""
    keys = np.asarray(keys, dtype=np.int64).reshape(-1)
    lookups = np.asarray(lookups, dtype=np.int64).reshape(-1)
    base = np.zeros(lookups.size, dtype=np.int64)
    remaining = np.full(lookups.size, keys.size, dtype=np.int64)
    found = np.full(lookups.size, -1, dtype=np.int64)
    while True:
        active = remaining > 0
        if not active.any():
            return found
        probe = base + (remaining >> 1)
        probed = keys[np.where(active, probe, 0)] if keys.size else np.zeros_like(probe)
        hit = active & (probed == lookups)
        found[hit] = probe[hit]
        right = active & (lookups > probed)
        base = np.where(right, probe + 1, base)
        remaining = np.where(right, remaining - 1, remaining) >> 1
        remaining[hit] = 0


@register
class HashtableLookup(Operation):
    code = OperationCode.HASHTABLE_LOOKUP
    supported_types = frozenset({OperandCode.TENSOR_INT32})

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 2)
        ctx.check_input_type(2, VALUE_TYPES)
        self._check_ranks(ctx)
        ctx.check_output_type(0, ctx.input_code(2))
        ctx.check_same_quantization(2, output=0)
        ctx.check_output_type(1, OperandCode.TENSOR_QUANT8_ASYMM)
        hits = ctx.output_type(1)
        ctx.check(hits.scale == 1.0 and hits.zero_point == 0,
                  f"hits must have scale 1 and zero point 0, got scale {hits.scale:g} and zero point "
                  f"{hits.zero_point}", output=1)
        keys, values = ctx.input_type(1).dimensions, ctx.input_type(2).dimensions
        if keys and values and keys[0] and values[0]:
            self._check_rows(ctx, keys[0], values[0])

    @staticmethod
    def _check_ranks(ctx: OperationContext) -> None:
        check_int_tensor(ctx, 0, 1)
        check_int_tensor(ctx, 1, 1)
        ctx.check_input_rank(2, min_rank=1)

    @staticmethod
    def _check_rows(ctx: OperationContext, keys: int, rows: int) -> None:
        ctx.check(keys == rows, f"{keys} keys for {rows} value rows (input 2's dimension 0)", input=1)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        self._check_ranks(ctx)  # again: a rank unknown at build time is known at run time
        (lookups,) = ctx.input_shape(0)
        (keys,) = ctx.input_shape(1)
        values = ctx.input_shape(2)
        self._check_rows(ctx, keys, values[0])
        return [(lookups,) + tuple(values[1:]), (lookups,)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        values = ctx.input(2)
        positions = bsearch_positions(ctx.input(1), ctx.input(0))
        hits = positions >= 0
        out = np.zeros((positions.size,) + values.shape[1:], dtype=values.dtype)
        out[hits] = values[positions[hits]]
        return [out, hits.astype(np.uint8)]
