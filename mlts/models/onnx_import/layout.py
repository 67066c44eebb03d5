"""Layout bookkeeping: every converted tensor carries a permutation relating NNAPI to ONNX.

A binding (operand, perm) means: the NNAPI operand holds the ONNX tensor `x` as `x.transpose(perm)`
(NNAPI dimension i is ONNX dimension perm[i]). NCHW activations become NHWC operands under
NHWC = (0, 2, 3, 1); ONNX Transpose nodes cost nothing (they only change the permutation); a
TRANSPOSE is emitted only where an operation needs another layout than the one its input has, and
a RESHAPE instead when the change moves only size-1 dimensions (the bytes are the same).
"""
from __future__ import annotations

from typing import Sequence

NHWC = (0, 2, 3, 1)  # NNAPI's NHWC operand for an ONNX NCHW tensor


def identity(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def inverse(perm: Sequence[int]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def after_transpose(perm: Sequence[int], onnx_perm: Sequence[int]) -> tuple[int, ...]:
    """The binding permutation of y = Transpose(x, onnx_perm) sharing x's operand (x bound with perm)."""
    inv = inverse(onnx_perm)
    return tuple(inv[p] for p in perm)


def nnapi_transpose(src: Sequence[int], dst: Sequence[int]) -> tuple[int, ...]:
    """NNAPI TRANSPOSE permutation turning an operand bound with `src` into one bound with `dst`."""
    inv = inverse(src)
    return tuple(inv[d] for d in dst)


def permute(shape: Sequence, perm: Sequence[int]) -> tuple:
    return tuple(shape[p] for p in perm)


def same_bytes(shape: Sequence, src: Sequence[int], dst: Sequence[int]) -> bool:
    """Whether the two layouts store the elements in the same order (only size-1 dimensions move)."""
    def order(perm):
        return [p for p in perm if shape[p] != 1]
    return order(src) == order(dst)


def nn_axis(perm: Sequence[int], onnx_axis: int) -> int:
    return list(perm).index(onnx_axis)


def after_removing(perm: Sequence[int], removed: Sequence[int]) -> tuple[int, ...]:
    """Binding permutation once ONNX dimensions `removed` are dropped from both sides (squeeze/reduce)."""
    removed = set(removed)
    kept = [d for d in range(len(perm)) if d not in removed]
    renum = {d: k for k, d in enumerate(kept)}
    return tuple(renum[p] for p in perm if p not in removed)
