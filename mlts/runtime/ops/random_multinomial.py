"""RANDOM_MULTINOMIAL (NNAPI 1.2): draw class indices from softmax(logits), row by row.

Inputs: 0 the logits, [batches, classes] (TENSOR_FLOAT32 or TENSOR_FLOAT16); 1 the number of samples
per row (INT32 scalar, >= 1); 2 the seeds (TENSOR_INT32 of shape [2]). Output: [batches, samples]
TENSOR_INT32 class indices.

NNAPI's kernel is TensorFlow's CPU multinomial sampler, and this one draws the same numbers: one
Philox4x32-10 stream seeded (seeds[0], seeds[1]) (see _philox.py) serves every row in order; each
sample takes the next uniform double u in [0, 1) and picks the first class whose running sum of
exp(logit - row max) (in double, over finite logits only) exceeds u times the row's total. So a seed
pair gives the same samples on every run. As in TensorFlow, seeds (0, 0) ask for a nondeterministic
seed. Non-finite logits (inf, NaN) are never drawn; a row without any finite logit yields the class
count, which is what NNAPI's kernel returns there. float16 logits are widened to float32 first.
"""
from __future__ import annotations

import secrets

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor
from ._philox import uniform_doubles
from .base import Operation, OperationContext, Shape, ValueUnknown
from .common import FLOAT_TYPES
from .registry import register


def _check_sample_count(ctx: OperationContext, count: int) -> None:
    ctx.check(count >= 1, f"the sample count must be at least 1, got {count}", input=1)


def _check_seed_count(ctx: OperationContext, size: int) -> None:
    ctx.check(size == 2, f"seeds must hold 2 values, got {size}", input=2)


def sample_rows(logits: np.ndarray, sample_count: int, seed: int, seed2: int) -> np.ndarray:
    """[batches, sample_count] int32 draws from each row of `logits` (float32, [batches, classes])."""
    batches, classes = logits.shape
    uniforms = uniform_doubles(seed, seed2, batches * sample_count).reshape(batches, sample_count)
    out = np.empty((batches, sample_count), dtype=np.int32)
    for b in range(batches):
        row = logits[b]
        finite = np.isfinite(row)
        row_max = float(row[finite].max()) if finite.any() else float(np.finfo(np.float32).min)
        terms = np.zeros(classes, dtype=np.float64)
        terms[finite] = np.exp(row[finite].astype(np.float64) - row_max)
        cumulative = np.cumsum(terms)  # sequential sums, as the kernel accumulates them
        total = cumulative[-1] if classes else 0.0
        out[b] = np.searchsorted(cumulative, uniforms[b] * total, side="right")
    return out


@register
class RandomMultinomial(Operation):
    code = OperationCode.RANDOM_MULTINOMIAL
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(3, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_rank(0, 2)
        ctx.check_input_type(1, OperandCode.INT32)
        check_int_tensor(ctx, 2, 1)
        ctx.check_output_type(0, OperandCode.TENSOR_INT32)
        count = ctx.scalar_if_known(1)
        if count is not None:
            _check_sample_count(ctx, count)
        seeds = ctx.input_type(2)
        if seeds.rank == 1 and seeds.dimensions[0] != 0:
            _check_seed_count(ctx, seeds.dimensions[0])

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        ctx.check_input_rank(0, 2)  # again: a rank unknown at build time is known now
        dims = ctx.input_type(0).dimensions
        if ctx.is_static and (not dims or dims[0] == 0):
            raise ValueUnknown(0)  # only the batch count matters: the class count may stay unknown
        batches = dims[0]
        count = ctx.scalar(1)
        _check_sample_count(ctx, count)
        return [(batches, count)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        logits = ctx.input(0).astype(np.float32)
        seeds = np.asarray(ctx.input(2)).reshape(-1)
        _check_seed_count(ctx, seeds.size)
        seed, seed2 = int(seeds[0]), int(seeds[1])
        if seed == 0 and seed2 == 0:
            seed, seed2 = secrets.randbits(64), secrets.randbits(64)
        return [sample_rows(logits, ctx.scalar(1), seed, seed2)]
