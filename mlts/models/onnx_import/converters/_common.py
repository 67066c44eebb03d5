"""Helpers shared by several converters: padding arithmetic, value-preserving aliases."""
from __future__ import annotations

import math
from typing import Sequence

from ..ir import Node
from .base import ints


def conv_pads(node: Node, ctx, in_hw: Sequence, kernel: Sequence[int], strides: Sequence[int],
              dilations: Sequence[int]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) paddings of a 2-D Conv/pool node (auto_pad resolved)."""
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad == "NOTSET":
        pads = ints(node.attr("pads"), [0, 0, 0, 0])
        if len(pads) != 4:
            raise ctx.fail(f"pads {pads} must have 4 values for a 2-D operation")
        if min(pads) < 0:
            raise ctx.fail(f"negative pads {pads} are not supported")
        return pads[0], pads[1], pads[2], pads[3]
    if auto_pad == "VALID":
        return 0, 0, 0, 0
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.fail(f"auto_pad {auto_pad!r} is not supported")
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        if size is None:
            raise ctx.fail(f"auto_pad {auto_pad} needs static spatial dimensions")
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        if auto_pad == "SAME_UPPER":
            begin.append(small)
            end.append(large)
        else:
            begin.append(large)
            end.append(small)
    return begin[0], begin[1], end[0], end[1]


def ceil_extra(size: int, k: int, s: int, pb: int, pe: int, dilation: int = 1) -> int:
    """Extra end padding that reproduces ONNX ceil_mode output sizes with floor arithmetic.

    ONNX: out = ceil((size + pb + pe - eff) / s) + 1, dropping a last window that would start in the
    end padding."""
    eff = (k - 1) * dilation + 1
    out = math.ceil((size + pb + pe - eff) / s) + 1
    if (out - 1) * s >= size + pb:
        out -= 1
    return max(0, (out - 1) * s + eff - (size + pb + pe))


def alias(ctx, out: str, src: str) -> None:
    """`out` holds the same values as `src` (Identity, Transpose...): same operand, requantized if the
    ONNX graph gives `out` other quantization parameters."""
    operand, perm = ctx.native(src)
    q_src, q_out = ctx.quant_of(src), ctx.quant_of(out)
    if q_out is not None and q_src is not None and not q_out.same(q_src):
        operand = ctx.requantized(operand, q_out)
    elif (q_out is None) != (q_src is None) and ctx.value(out).dtype == ctx.value(src).dtype:
        raise ctx.fail(f"{out!r} and {src!r} disagree on being quantized")
    ctx.bind(out, operand, perm)
