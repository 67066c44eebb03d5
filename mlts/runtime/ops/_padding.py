"""NNAPI's padding arithmetic, and the resolved window parameters, shared by convolutions and pooling."""
from __future__ import annotations

from dataclasses import dataclass

from ..enums import PaddingCode


@dataclass(frozen=True)
class WindowParams:
    """Paddings and strides of a sliding window, resolved to ints (the common head of ConvParams and
    PoolParams, which add their own fields after these)."""

    pad_left: int
    pad_right: int
    pad_top: int
    pad_bottom: int
    stride_w: int
    stride_h: int


def explicit_padding(in_size: int, stride: int, filter_size: int, code: int, dilation: int = 1) -> tuple[int, int]:
    """calculateExplicitPadding: (head, tail) for SAME, (0, 0) for VALID.

    SAME keeps ceil(in / stride) outputs; of the missing rows/columns the smaller half goes to the
    head (top/left) and the extra one to the tail.
    """
    if code != PaddingCode.SAME:
        return 0, 0
    effective = (filter_size - 1) * dilation + 1
    out = (in_size + stride - 1) // stride
    needed = (out - 1) * stride + effective - in_size
    if needed <= 0:
        return 0, 0
    head = needed // 2
    return head, needed - head


def out_size(in_size: int, filter_size: int, stride: int, head: int, tail: int, dilation: int = 1) -> int:
    """computeOutSize: floor((in - effective_filter + stride + head + tail) / stride); 0 when nothing fits."""
    effective = (filter_size - 1) * dilation + 1
    numerator = in_size - effective + stride + head + tail
    return numerator // stride if numerator >= 0 else 0
