"""LSH_PROJECTION: project an input onto a bit vector by locality-sensitive hashing (NNAPI 1.0;
float16 hashes and the SPARSE type with offsets since 1.2).

Inputs: 0 the hash functions, [num_hash, num_bits] seeds (TENSOR_FLOAT32 or TENSOR_FLOAT16,
num_bits <= 32); 1 the input, rank >= 1, of any of TENSOR_FLOAT32, TENSOR_FLOAT16, TENSOR_INT32,
TENSOR_QUANT8_ASYMM (its bytes are what is hashed); 2 optional weights, [input.dim0], the hash's
type (omitted: every weight 1.0); 3 the projection type (INT32: 1 SPARSE_DEPRECATED, 2 DENSE,
3 SPARSE). Output: TENSOR_INT32, [num_hash] for the sparse types, [num_hash * num_bits] for DENSE.

Each seed s gives one bit: the sign (> 0 is 1) of sum_i weight[i] * h(s, row i), where row i is the
input's i-th slice along dimension 0 and h is farmhash's Fingerprint64 (see _farmhash.py) of the
seed's float32 bytes followed by the row's bytes, read as a signed 64-bit integer and summed in
double in row order (NNAPI's kernel). DENSE outputs the bits; the sparse types pack each hash
function's bits into one int32 (first bit most significant), SPARSE adding k * 2**num_bits for hash
function k (so num_bits + ceil(log2(num_hash)) <= 32, as NNAPI documents).

NNAPI documents the weights as optional for every type, which is what this kernel does; AOSP's CPU
kernel additionally refuses them with the sparse types and requires them with DENSE.
"""
from __future__ import annotations

import math

import numpy as np

from ..enums import OperandCode, OperationCode
from ._farmhash import fingerprint64
from .base import Operation, OperationContext, Shape
from .common import FLOAT_TYPES
from .registry import register

SPARSE_DEPRECATED, DENSE, SPARSE = 1, 2, 3
PROJECTION_TYPES = {SPARSE_DEPRECATED: "SPARSE_DEPRECATED", DENSE: "DENSE", SPARSE: "SPARSE"}
INPUT_TYPES = frozenset({OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16, OperandCode.TENSOR_INT32,
                         OperandCode.TENSOR_QUANT8_ASYMM})
MAX_BITS = 32


def _check_projection_type(ctx: OperationContext, kind: int) -> None:
    ctx.check(kind in PROJECTION_TYPES,
              f"projection type {kind} is not 1 (SPARSE_DEPRECATED), 2 (DENSE) or 3 (SPARSE)", input=3)


def _check_hash_dims(ctx: OperationContext, num_hash: int | None, num_bits: int | None, kind: int | None) -> None:
    """num_bits <= 32; with SPARSE's offsets also num_bits + ceil(log2(num_hash)) <= 32 (when known)."""
    if num_bits is None:
        return
    ctx.check(num_bits <= MAX_BITS, f"{num_bits} bits per hash function exceed the maximum of {MAX_BITS}",
              input=0)
    if kind == SPARSE and num_hash is not None:
        offset_bits = math.ceil(math.log2(num_hash)) if num_hash > 1 else 0
        ctx.check(num_bits + offset_bits <= MAX_BITS,
                  f"{num_hash} hash functions of {num_bits} bits do not fit a SPARSE int32 signature "
                  f"(num_bits + ceil(log2(num_hash)) = {num_bits + offset_bits} > {MAX_BITS})", input=0)


def _check_ranks(ctx: OperationContext) -> None:
    ctx.check_input_rank(0, 2)
    ctx.check_input_rank(1, min_rank=1)
    if not ctx.is_omitted(2):
        ctx.check_input_rank(2, 1)


def _known(d: int) -> int | None:
    return d if d > 0 else None


def projection_bits(seeds: np.ndarray, data: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """The sign bit (int32 0/1) of each seed's weighted fingerprint sum over the rows of `data`.

    seeds: float32 array (any shape; the result has its shape); data: the input (rows along axis 0);
    weights: float64 per row, or None for 1.0 each."""
    flat_seeds = np.ascontiguousarray(seeds, dtype=np.float32).reshape(-1)
    rows = data.shape[0]
    row_bytes = np.ascontiguousarray(data).view(np.uint8).reshape(rows, -1) if rows else None
    scores = np.zeros(flat_seeds.size, dtype=np.float64)
    if rows:
        # One key per (seed, row): the seed's 4 bytes, then the row's bytes.
        seed_bytes = flat_seeds.view(np.uint8).reshape(-1, 1, 4)
        keys = np.concatenate([np.broadcast_to(seed_bytes, (flat_seeds.size, rows, 4)),
                               np.broadcast_to(row_bytes, (flat_seeds.size,) + row_bytes.shape)], axis=2)
        hashes = fingerprint64(keys.reshape(flat_seeds.size * rows, -1)).view(np.int64)
        values = hashes.astype(np.float64).reshape(flat_seeds.size, rows)
        for i in range(rows):  # row order: the kernel's double sum is sequential
            scores += values[:, i] if weights is None else weights[i] * values[:, i]
    return (scores > 0).astype(np.int32).reshape(seeds.shape)


def sparse_signatures(bits: np.ndarray, kind: int) -> np.ndarray:
    """Each hash function's bits ([num_hash, num_bits], first bit most significant) as one int32,
    plus k * 2**num_bits for hash function k with SPARSE (int32 wrap-around, as the kernel's)."""
    num_hash, num_bits = bits.shape
    weights = np.array([1 << (num_bits - 1 - j) for j in range(num_bits)], dtype=np.int64)
    signatures = bits.astype(np.int64) @ weights if num_bits else np.zeros(num_hash, dtype=np.int64)
    if kind == SPARSE:
        signatures = signatures + np.arange(num_hash, dtype=np.int64) * (1 << num_bits)
    return (signatures & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


@register
class LshProjection(Operation):
    code = OperationCode.LSH_PROJECTION
    supported_types = FLOAT_TYPES

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(4, 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_type(1, INPUT_TYPES)
        ctx.check_input_type(2, ctx.input_code(0), optional=True)
        _check_ranks(ctx)
        ctx.check_input_type(3, OperandCode.INT32)
        ctx.check_output_type(0, OperandCode.TENSOR_INT32)
        kind = ctx.scalar_if_known(3)
        if kind is not None:
            _check_projection_type(ctx, kind)
        hash_dims = ctx.input_type(0).dimensions
        if hash_dims and len(hash_dims) == 2:
            _check_hash_dims(ctx, _known(hash_dims[0]), _known(hash_dims[1]), kind)
        if not ctx.is_omitted(2):
            weight_dims, input_dims = ctx.input_type(2).dimensions, ctx.input_type(1).dimensions
            if weight_dims and input_dims and len(weight_dims) == 1 and weight_dims[0] and input_dims[0]:
                ctx.check(weight_dims[0] == input_dims[0], f"{weight_dims[0]} weights for "
                          f"{input_dims[0]} input rows (input 1's dimension 0)", input=2)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        _check_ranks(ctx)  # again: a rank unknown at build time is known at run time
        kind = ctx.scalar(3)
        _check_projection_type(ctx, kind)
        num_hash, num_bits = ctx.input_shape(0)
        _check_hash_dims(ctx, num_hash, num_bits, kind)
        if not ctx.is_omitted(2) and not ctx.is_static:
            rows = ctx.input_shape(1)[0]
            (weights,) = ctx.input_shape(2)
            ctx.check(weights == rows, f"{weights} weights for {rows} input rows (input 1's dimension 0)",
                      input=2)
        return [(num_hash * num_bits,) if kind == DENSE else (num_hash,)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        kind = ctx.scalar(3)
        seeds = ctx.input(0).astype(np.float32)
        weights = None if ctx.is_omitted(2) else ctx.input(2).astype(np.float64)
        bits = projection_bits(seeds, ctx.input(1), weights)
        if kind == DENSE:
            return [bits.reshape(-1)]
        return [sparse_signatures(bits, kind)]
