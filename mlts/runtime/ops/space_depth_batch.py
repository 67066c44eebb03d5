"""DEPTH_TO_SPACE, SPACE_TO_DEPTH, BATCH_TO_SPACE_ND and SPACE_TO_BATCH_ND: move the elements of a
4-D tensor between its batch, spatial and depth dimensions; no value changes.

All four take a rank-4 tensor in NHWC layout, or NCHW when their optional last input (BOOL, NNAPI 1.2)
is true; the kernels work on NHWC and transpose NCHW data around them. Types: TENSOR_FLOAT32 and
TENSOR_QUANT8_ASYMM (1.0 for the depth ops, 1.1 for the batch ops), TENSOR_FLOAT16 (1.2),
TENSOR_QUANT8_ASYMM_SIGNED (1.3); the output keeps the input's type, scale and zero point.

- DEPTH_TO_SPACE (block size b: INT32 >= 1 whose square divides the depth): each pixel's depth becomes
  a b x b block of pixels; input channel (block row * b + block column) * output depth + c feeds
  channel c of that block's pixel (TensorFlow's order; ONNX DepthToSpace mode DCR).
- SPACE_TO_DEPTH (b divides height and width): the inverse.
- SPACE_TO_BATCH_ND (block shape [bh, bw]: TENSOR_INT32 [2], >= 1; paddings [[top, bottom], [left,
  right]]: TENSOR_INT32 [2, 2], >= 0; padded sizes divisible by the block): pads with real zero (the
  zero point when quantized), then output batch (i * bw + j) * batches + n holds the padded
  pixels [n, y * bh + i, x * bw + j].
- BATCH_TO_SPACE_ND (block shape only: NNAPI has no crops; the block product divides the batch): the
  inverse of SPACE_TO_BATCH_ND without padding.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._int_args import check_int_tensor, known_ints, require_ints
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, QUANT8_TYPES
from .registry import register

NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)


def _as_nhwc(shape: Shape, nchw: bool) -> Shape:
    return tuple(shape[i] for i in NCHW_TO_NHWC) if nchw else tuple(shape)


def _from_nhwc(shape: Shape, nchw: bool) -> Shape:
    return tuple(shape[i] for i in NHWC_TO_NCHW) if nchw else tuple(shape)


class _SpaceDepthBatch(Operation):
    """The shared frame: input 0 the tensor, inputs 1..num_params the parameters, then the optional
    NCHW flag. Subclasses check their parameters and map NHWC shapes and arrays."""

    supported_types = FLOAT_AND_QUANT8
    num_params = 1

    @property
    def layout_input(self) -> int:
        return 1 + self.num_params

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts((self.layout_input, self.layout_input + 1), 1)
        ctx.check_input_type(0, self.supported_types)
        ctx.check_input_rank(0, 4)
        ctx.check_same_quantization(0, output=0)
        if ctx.num_inputs > self.layout_input:
            ctx.check_input_type(self.layout_input, OperandCode.BOOL, optional=True)
        self.validate_params(ctx)

    def is_nchw(self, ctx: OperationContext) -> bool:
        """The layout flag; omitted (by count or as NO_VALUE) it means NHWC."""
        if ctx.num_inputs <= self.layout_input:
            return False
        return bool(ctx.scalar(self.layout_input, default=False))

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        shape = ctx.input_shape(0)
        ctx.check(len(shape) == 4, f"rank {len(shape)} not supported (expected 4)", input=0)
        nchw = self.is_nchw(ctx)
        return [_from_nhwc(self.output_nhwc(ctx, _as_nhwc(shape, nchw)), nchw)]

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        x = ctx.input(0)
        nchw = self.is_nchw(ctx)
        nhwc = x.transpose(NCHW_TO_NHWC) if nchw else x
        out = self.kernel(ctx, nhwc, self.output_nhwc(ctx, nhwc.shape))
        return [np.ascontiguousarray(out.transpose(NHWC_TO_NCHW) if nchw else out)]

    # -- per operation ------------------------------------------------------------------------
    def validate_params(self, ctx: OperationContext) -> None:
        raise NotImplementedError

    def output_nhwc(self, ctx: OperationContext, shape: Shape) -> Shape:
        """The NHWC output shape of an NHWC input shape; checks the parameters against it."""
        raise NotImplementedError

    def kernel(self, ctx: OperationContext, x: np.ndarray, out_shape: Shape) -> np.ndarray:
        """The NHWC output array of an NHWC input array."""
        raise NotImplementedError


# -- DEPTH_TO_SPACE / SPACE_TO_DEPTH: an INT32 block size ---------------------------------------------
class _BlockSizeOp(_SpaceDepthBatch):
    def validate_params(self, ctx: OperationContext) -> None:
        ctx.check_input_type(1, OperandCode.INT32)
        size = ctx.scalar_if_known(1)
        if size is not None:
            _check_block_size(ctx, size)

    def block_size(self, ctx: OperationContext) -> int:
        size = ctx.scalar(1)
        _check_block_size(ctx, size)
        return size


def _check_block_size(ctx: OperationContext, size: int) -> None:
    ctx.check(size >= 1, f"block size must be >= 1, got {size}", input=1)


@register
class DepthToSpace(_BlockSizeOp):
    code = OperationCode.DEPTH_TO_SPACE

    def output_nhwc(self, ctx: OperationContext, shape: Shape) -> Shape:
        n, h, w, c = shape
        b = self.block_size(ctx)
        ctx.check(c % (b * b) == 0,
                  f"the square of the block size {b} ({b * b}) must divide the input depth {c}", input=1)
        return n, h * b, w * b, c // (b * b)

    def kernel(self, ctx: OperationContext, x: np.ndarray, out_shape: Shape) -> np.ndarray:
        n, h, w, c = x.shape
        b = self.block_size(ctx)
        blocks = x.reshape(n, h, w, b, b, c // (b * b))           # [n, y, x, block row, block col, c]
        return blocks.transpose(0, 1, 3, 2, 4, 5).reshape(out_shape)


@register
class SpaceToDepth(_BlockSizeOp):
    code = OperationCode.SPACE_TO_DEPTH

    def output_nhwc(self, ctx: OperationContext, shape: Shape) -> Shape:
        n, h, w, c = shape
        b = self.block_size(ctx)
        ctx.check(h % b == 0 and w % b == 0,
                  f"the block size {b} must divide the input height {h} and width {w}", input=1)
        return n, h // b, w // b, c * b * b

    def kernel(self, ctx: OperationContext, x: np.ndarray, out_shape: Shape) -> np.ndarray:
        n, h, w, c = x.shape
        b = self.block_size(ctx)
        blocks = x.reshape(n, h // b, b, w // b, b, c)            # [n, y, block row, x, block col, c]
        return blocks.transpose(0, 1, 3, 2, 4, 5).reshape(out_shape)


# -- BATCH_TO_SPACE_ND / SPACE_TO_BATCH_ND: a block shape tensor (and paddings) -------------------------
def _check_block_shape(ctx: OperationContext, block: np.ndarray) -> tuple[int, int]:
    ctx.check(block.shape == (2,), f"block shape must have shape [2], got {list(block.shape)}", input=1)
    ctx.check(bool((block >= 1).all()), f"block shape values must be >= 1, got {block.tolist()}", input=1)
    return int(block[0]), int(block[1])


def _validate_block_shape(ctx: OperationContext) -> None:
    check_int_tensor(ctx, 1, 1)
    dims = ctx.input_type(1).dimensions
    if dims and dims[0]:
        ctx.check(dims[0] == 2, f"block shape must have shape [2], got {list(dims)}", input=1)
    block = known_ints(ctx, 1)
    if block is not None:
        _check_block_shape(ctx, block)


class _BlockShapeOp(_SpaceDepthBatch):
    def block_shape(self, ctx: OperationContext) -> tuple[int, int]:
        return _check_block_shape(ctx, require_ints(ctx, 1))


@register
class BatchToSpaceNd(_BlockShapeOp):
    code = OperationCode.BATCH_TO_SPACE_ND

    def validate_params(self, ctx: OperationContext) -> None:
        _validate_block_shape(ctx)

    def output_nhwc(self, ctx: OperationContext, shape: Shape) -> Shape:
        n, h, w, c = shape
        bh, bw = self.block_shape(ctx)
        ctx.check(n % (bh * bw) == 0,
                  f"the block shape product {bh} x {bw} = {bh * bw} must divide the input batch {n}", input=1)
        return n // (bh * bw), h * bh, w * bw, c

    def kernel(self, ctx: OperationContext, x: np.ndarray, out_shape: Shape) -> np.ndarray:
        n, h, w, c = x.shape
        bh, bw = self.block_shape(ctx)
        blocks = x.reshape(bh, bw, n // (bh * bw), h, w, c)       # [row offset, col offset, n, y, x, c]
        return blocks.transpose(2, 3, 0, 4, 1, 5).reshape(out_shape)


def _check_paddings(ctx: OperationContext, paddings: np.ndarray) -> tuple[tuple[int, int], tuple[int, int]]:
    ctx.check(paddings.shape == (2, 2), f"paddings must have shape [2, 2], got {list(paddings.shape)}", input=2)
    ctx.check(bool((paddings >= 0).all()), f"paddings must be >= 0, got {paddings.tolist()}", input=2)
    (top, bottom), (left, right) = paddings.tolist()
    return (top, bottom), (left, right)


@register
class SpaceToBatchNd(_BlockShapeOp):
    code = OperationCode.SPACE_TO_BATCH_ND
    num_params = 2

    def validate_params(self, ctx: OperationContext) -> None:
        _validate_block_shape(ctx)
        check_int_tensor(ctx, 2, 2)
        dims = ctx.input_type(2).dimensions
        if dims and len(dims) == 2:
            ctx.check(all(d in (0, 2) for d in dims), f"paddings must have shape [2, 2], got {list(dims)}", input=2)
        paddings = known_ints(ctx, 2)
        if paddings is not None:
            _check_paddings(ctx, paddings)

    def paddings(self, ctx: OperationContext) -> tuple[tuple[int, int], tuple[int, int]]:
        return _check_paddings(ctx, require_ints(ctx, 2))

    def output_nhwc(self, ctx: OperationContext, shape: Shape) -> Shape:
        n, h, w, c = shape
        bh, bw = self.block_shape(ctx)
        (top, bottom), (left, right) = self.paddings(ctx)
        padded_h, padded_w = top + h + bottom, left + w + right
        ctx.check(padded_h % bh == 0 and padded_w % bw == 0,
                  f"the block shape [{bh}, {bw}] must divide the padded height {padded_h} and width {padded_w}",
                  input=1)
        return n * bh * bw, padded_h // bh, padded_w // bw, c

    def kernel(self, ctx: OperationContext, x: np.ndarray, out_shape: Shape) -> np.ndarray:
        t = ctx.input_type(0)
        fill = t.zero_point if t.code in QUANT8_TYPES else 0
        rows, cols = self.paddings(ctx)
        padded = np.pad(x, ((0, 0), rows, cols, (0, 0)), mode="constant",
                        constant_values=np.asarray(fill).astype(x.dtype))
        n, padded_h, padded_w, c = padded.shape
        bh, bw = self.block_shape(ctx)
        blocks = padded.reshape(n, padded_h // bh, bh, padded_w // bw, bw, c)   # [n, y, row off., x, col off., c]
        return blocks.transpose(2, 4, 0, 1, 3, 5).reshape(out_shape)
