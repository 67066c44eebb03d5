"""Resize (opsets 10 to 19) and Upsample (7, 9) -> RESIZE_NEAREST_NEIGHBOR / RESIZE_BILINEAR.

NNAPI resizes the two middle dimensions of a 4-D operand (NHWC, or the last two with the NCHW flag)
and places output pixel i at source coordinate i * s, (i + 0.5) * s (- 0.5 for bilinear) with
half_pixel_centers, or i * (in - 1) / (out - 1) with align_corners, where s = in / out; nearest
takes floor, or rounds half away from zero with align_corners. ONNX places it with its
coordinate_transformation_mode and the given scale (out / in for sizes) and rounds with
nearest_mode. Rather than trusting a table, every (align_corners, half_pixel_centers) choice is
checked at import against the ONNX formula for each output row and column: nearest must pick the
same source index (NNAPI's float32 arithmetic, ONNX's exact one), linear the same clamped source
coordinate (exactly, as fractions). The first choice that agrees everywhere is emitted. Linear
resizes no single choice fits become one RESIZE_BILINEAR per axis when each axis has its own
(pytorch_half_pixel to a size of 1 on one axis); nearest ones that none fits (other rounding modes,
other ranks or axes) become one GATHER per resized axis with the source indices ONNX picks, exact.
Anything else is a clear error naming the mode: cubic, antialiased downsampling, exclude_outside,
tf_crop_and_resize, and linear placements NNAPI cannot make (half_pixel_symmetric, a scale other
than out / in). align_corners and pytorch_half_pixel take the output size as the resized length, as
onnxruntime and torch do (onnx.reference takes in x scale: they differ when it is fractional).
keep_aspect_ratio_policy not_larger / not_smaller use one scale for the resized axes and sizes
rounded from it. Opset 10 Resize and Upsample use asymmetric coordinates with floor (upsampling) or
ceil (downsampling), as onnxruntime.
A float32 scale that is the float32 value of out / in stands for out / in exactly (0.333... for 9 -> 3);
the output size is ONNX's floor(in x scale) (the shape inference's; onnxruntime's float32 product can
round up, e.g. 5 x 1.4f gives 7 there, 6 here).

The two resized ONNX axes are found in the layout the input already has (NHWC-held NCHW tensors
resize in place); a TRANSPOSE is emitted only when they are not adjacent in the middle or at the end.
Spatial sizes must be static. 8-bit tensors resize in their own quantization (NNAPI keeps the
input's scale and zero point; other output parameters are reached by requantizing).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from mlts.runtime import OperationCode

from .. import layout
from ..ir import Graph, Node
from ._common import alias
from .base import OpConverter, all_quantized_same_dtype, const_input, register
from .concat_pad import gather_axes

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
#: NNAPI (align_corners, half_pixel_centers) choices, the plain one first
NNAPI_FLAGS = ((False, False), (False, True), (True, False))
HALF = Fraction(1, 2)


class _Spec:
    """What an ONNX Resize/Upsample node asks for, opset differences resolved."""

    def __init__(self, node: Node, ctx) -> None:
        old = node.op_type == "Upsample" or node.opset < 11
        mode = str(node.attr("mode", "nearest")).lower()
        self.mode = "linear" if mode == "bilinear" and node.op_type == "Upsample" else mode
        self.coord = "asymmetric" if old else str(node.attr("coordinate_transformation_mode", "half_pixel"))
        self.nearest = "simple" if old else str(node.attr("nearest_mode", "round_prefer_floor"))
        self.what = (f"mode {self.mode!r}" + (f", coordinate_transformation_mode {self.coord!r}" if not old else "")
                     + (f", nearest_mode {self.nearest!r}" if self.mode == "nearest" and not old else ""))
        if self.mode not in ("nearest", "linear"):
            raise ctx.fail(f"mode {self.mode!r} has no NNAPI equivalent (only nearest and linear)")
        if self.coord not in COORDINATE_MODES:
            raise ctx.fail(f"unknown coordinate_transformation_mode {self.coord!r}")
        if self.coord == "tf_crop_and_resize":
            raise ctx.fail("coordinate_transformation_mode 'tf_crop_and_resize' has no NNAPI equivalent")
        if self.mode == "nearest" and self.nearest not in NEAREST_MODES + ("simple",):
            raise ctx.fail(f"unknown nearest_mode {self.nearest!r}")
        if int(node.attr("exclude_outside", 0)):
            raise ctx.fail("exclude_outside=1 has no NNAPI equivalent")
        self.antialias = bool(int(node.attr("antialias", 0)))
        self.policy = str(node.attr("keep_aspect_ratio_policy", "stretch"))
        self.policy_scales: list[Fraction] | None = None  # keep_aspect_ratio_policy's scale per dimension
        self.scales, self.sizes = self._read(node, ctx)

    def _read(self, node: Node, ctx) -> tuple[list[Fraction] | None, list[int] | None]:
        rank = ctx.rank(node.input(0))
        if node.op_type == "Upsample" and node.opset < 9:
            scales, sizes = node.attr("scales"), None
            if scales is None:
                raise ctx.fail("the scales attribute is required")
        elif node.op_type == "Upsample" or node.opset < 11:
            scales, sizes = const_input(node, ctx.graph, 1, "scales", ctx), None
            if scales is None:
                raise ctx.fail("the scales input is required")
        else:
            scales = const_input(node, ctx.graph, 2, "scales", ctx)
            sizes = const_input(node, ctx.graph, 3, "sizes", ctx)
        scales = None if scales is None or np.size(scales) == 0 else np.asarray(scales, np.float32).reshape(-1)
        sizes = None if sizes is None or np.size(sizes) == 0 else [int(v) for v in np.ravel(sizes)]
        if (scales is None) == (sizes is None):
            raise ctx.fail("exactly one of scales and sizes must be given")
        axes = node.attr("axes") if node.opset >= 18 else None
        axes = list(range(rank)) if axes is None else [int(a) + rank if int(a) < 0 else int(a) for a in axes]
        given = scales if scales is not None else sizes
        if len(given) != len(axes) or sorted(set(axes)) != sorted(axes) or any(not 0 <= a < rank for a in axes):
            raise ctx.fail(f"{'scales' if sizes is None else 'sizes'} {list(given)} do not match "
                           f"{'axes ' + str(axes) if node.opset >= 18 else f'rank {rank}'}")
        if sizes is not None and self.policy != "stretch":
            sizes = self._keep_aspect_ratio(ctx, ctx.shape(node.input(0)), axes, sizes)
        if scales is not None:
            if any(not (s > 0) or not math.isfinite(s) for s in scales):
                raise ctx.fail(f"scales {scales.tolist()} must be positive")
            full = [Fraction(1)] * rank
            for a, s in zip(axes, scales):
                full[a] = Fraction(float(s))
            return full, None
        if any(s <= 0 for s in sizes):
            raise ctx.fail(f"sizes {sizes} must be positive")
        full_sizes: list[int | None] = [None] * rank  # None: unchanged
        for a, s in zip(axes, sizes):
            full_sizes[a] = s
        return None, full_sizes

    def _keep_aspect_ratio(self, ctx, in_shape, axes: list[int], sizes: list[int]) -> list[int]:
        """not_larger / not_smaller: one scale (the smallest / largest sizes / in) for every axis, the
        output sizes rounded half up from it; the pixels are placed with that scale."""
        if self.policy not in ("not_larger", "not_smaller"):
            raise ctx.fail(f"unknown keep_aspect_ratio_policy {self.policy!r}")
        if any(in_shape[a] is None for a in axes):
            raise ctx.fail(f"keep_aspect_ratio_policy {self.policy!r} needs the static sizes of the resized axes")
        ratios = [Fraction(s, in_shape[a]) for a, s in zip(axes, sizes)]
        scale = min(ratios) if self.policy == "not_larger" else max(ratios)
        self.policy_scales = [scale if a in axes else Fraction(1) for a in range(len(in_shape))]
        return [math.floor(scale * in_shape[a] + HALF) for a in axes]


def onnx_coordinate(spec: _Spec, i: int, in_size: int, out_size: int, scale: Fraction) -> Fraction:
    """The exact source coordinate ONNX gives output index i along one axis. align_corners and
    pytorch_half_pixel use the output size as the resized length, as onnxruntime and torch do
    (onnx.reference uses in x scale, which differs when a scale makes it fractional)."""
    coord = spec.coord
    if coord == "asymmetric":
        return i / scale
    if coord == "align_corners":
        return Fraction(0) if out_size == 1 else Fraction(i * (in_size - 1), out_size - 1)
    if coord == "tf_half_pixel_for_nn":
        return (i + HALF) / scale
    if coord == "pytorch_half_pixel" and out_size == 1:
        return Fraction(0)
    if coord == "half_pixel_symmetric":
        adjustment = out_size / (in_size * scale)
        offset = Fraction(in_size, 2) * (1 - adjustment)
        return offset + (i + HALF) / scale - HALF
    return (i + HALF) / scale - HALF  # half_pixel, pytorch_half_pixel


def onnx_nearest(spec: _Spec, x: Fraction, scale: Fraction, in_size: int) -> int:
    mode = spec.nearest
    if mode == "simple":  # opset 10 Resize and Upsample (onnxruntime): floor, or ceil when downsampling
        mode = "ceil" if scale < 1 else "floor"
    if mode == "floor":
        index = math.floor(x)
    elif mode == "ceil":
        index = math.ceil(x)
    elif mode == "round_prefer_ceil":
        index = math.floor(x + HALF)
    else:  # round_prefer_floor
        index = math.ceil(x - HALF)
    return min(max(index, 0), in_size - 1)


def nnapi_nearest(in_size: int, out_size: int, align: bool, half: bool) -> list[int]:
    """NNAPI's nearest-neighbour source indices, in its float32 arithmetic."""
    f32 = np.float32
    s = f32(in_size - 1) / f32(out_size - 1) if align and out_size > 1 else f32(in_size) / f32(out_size)
    position = np.arange(out_size, dtype=np.float32)
    source = ((position + f32(0.5)) * s if half else position * s).astype(np.float64)
    index = np.floor(source + 0.5) if align else np.floor(source)  # round half away (source >= 0)
    return [int(v) for v in np.clip(index, 0, in_size - 1)]


def nnapi_coordinate(i: int, in_size: int, out_size: int, align: bool, half: bool) -> Fraction:
    """NNAPI's bilinear source coordinate (exact); its kernel clamps it to [0, in - 1] in effect."""
    s = Fraction(in_size - 1, out_size - 1) if align and out_size > 1 else Fraction(in_size, out_size)
    return (i + HALF) * s - HALF if half else i * s


def _clamp(x: Fraction, in_size: int) -> Fraction:
    return min(max(x, Fraction(0)), Fraction(in_size - 1))


def onnx_sources(spec: _Spec, in_size: int, out_size: int, scale: Fraction) -> list:
    """Per output index: the source index ONNX takes (nearest) or its clamped source coordinate (linear)."""
    xs = [onnx_coordinate(spec, i, in_size, out_size, scale) for i in range(out_size)]
    if spec.mode == "nearest":
        return [onnx_nearest(spec, x, scale, in_size) for x in xs]
    return [_clamp(x, in_size) for x in xs]


def nnapi_flags(spec: _Spec, axes: list[tuple[int, int, Fraction]]) -> tuple[bool, bool] | None:
    """The (align_corners, half_pixel_centers) reproducing ONNX on every (in, out, scale) axis, or None."""
    for align, half in NNAPI_FLAGS:
        ok = True
        for in_size, out_size, scale in axes:
            sources = onnx_sources(spec, in_size, out_size, scale)
            if spec.mode == "nearest":
                ok = sources == nnapi_nearest(in_size, out_size, align, half)
            else:
                ok = all(x == _clamp(nnapi_coordinate(i, in_size, out_size, align, half), in_size)
                         for i, x in enumerate(sources))
            if not ok:
                break
        if ok:
            return align, half
    return None


def _layout(ctx, x: str, resized: list[int]) -> tuple[int, tuple[int, ...], bool]:
    """(operand, perm, nchw flag): a layout with the resized ONNX axes in NNAPI's two spatial places,
    the one x is held in when possible."""
    op, perm = ctx.native(x)
    places = {layout.nn_axis(perm, a) for a in resized}
    if places <= {1, 2}:
        return op, perm, False
    if places <= {2, 3}:
        return op, perm, True
    if set(resized) <= {2, 3}:
        target = layout.NHWC
    else:
        spatial = sorted(resized + [a for a in range(4) if a not in resized][:2 - len(resized)])
        rest = [a for a in range(4) if a not in spatial]
        target = (rest[0], spatial[0], spatial[1], rest[1])
    return ctx.operand(x, target), target, False


@register
class ResizeConverter(OpConverter):
    op_types = ("Resize", "Upsample")
    quantizable = True

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        spec = _Spec(node, ctx)
        in_shape = ctx.shape(x)
        rank = len(in_shape)
        out_shape = ctx.value(y).shape
        scales, sizes = [], []
        for d in range(rank):
            if spec.sizes is not None:
                target = spec.sizes[d]
                fixed = spec.policy_scales[d] if spec.policy_scales is not None else None
                if target is None or (target == in_shape[d] and fixed in (None, 1)):
                    scales.append(Fraction(1))
                    sizes.append(in_shape[d])
                    continue
                if in_shape[d] is None:
                    raise ctx.fail(f"resizing dimension {d} needs its static input size")
                scales.append(fixed if fixed is not None else Fraction(target, in_shape[d]))
                sizes.append(target)
            else:
                scale = spec.scales[d]
                scales.append(scale)
                if scale == 1:
                    sizes.append(in_shape[d])
                    continue
                if in_shape[d] is None:
                    raise ctx.fail(f"resizing dimension {d} needs its static input size")
                known = out_shape[d] if out_shape is not None and len(out_shape) == rank else None
                size = known if known is not None else math.floor(in_shape[d] * scale)  # ONNX: floor(in x scale)
                sizes.append(size)
                if size > 0 and np.float32(size / in_shape[d]) == np.float32(scale):
                    scales[-1] = Fraction(size, in_shape[d])  # the float32 scale stands for out / in
        resized = [d for d in range(rank) if scales[d] != 1]
        if not resized:
            return alias(ctx, y, x)
        if any(s < 1 for s in sizes):
            raise ctx.fail(f"output sizes {sizes} must be positive")
        if any(in_shape[d] is None for d in resized):
            raise ctx.fail(f"the resized dimensions need static sizes, the input has shape {list(in_shape)}")
        if spec.antialias and spec.mode == "linear" and any(scales[d] < 1 for d in resized):
            raise ctx.fail("antialias=1 when downsampling has no NNAPI equivalent")
        axes = {d: (in_shape[d], sizes[d], scales[d]) for d in resized}
        fits = rank == 4 and len(resized) <= 2
        flags = nnapi_flags(spec, list(axes.values())) if fits else None
        if flags is None and spec.mode == "nearest":  # copies from the source indices ONNX picks
            return gather_axes(ctx, x, y, {d: np.asarray(onnx_sources(spec, *axes[d])) for d in resized})
        if not fits:
            raise ctx.fail(f"resizing dimensions {resized} of a {rank}-D tensor: NNAPI resizes two dimensions of "
                           "a 4-D tensor")
        per_axis = {d: nnapi_flags(spec, [axes[d]]) for d in resized} if flags is None and len(resized) == 2 else {}
        if flags is None and (not per_axis or None in per_axis.values()):
            detail = ", ".join(f"{i} -> {o} (scale {float(s):g})" for i, o, s in axes.values())
            raise ctx.fail(f"{spec.what} for {detail} has no exact NNAPI equivalent (RESIZE_BILINEAR places "
                           "source pixels with align_corners or half_pixel_centers only)")
        op, perm, nchw = _layout(ctx, x, resized)
        h_axis, w_axis = (perm[2], perm[3]) if nchw else (perm[1], perm[2])
        passes = [(flags, sizes[h_axis], sizes[w_axis])] if flags is not None else [  # one RESIZE per axis
            (per_axis[h_axis], sizes[h_axis], in_shape[w_axis]), (per_axis[w_axis], sizes[h_axis], sizes[w_axis])]
        code = OperationCode.RESIZE_BILINEAR if spec.mode == "linear" else OperationCode.RESIZE_NEAREST_NEIGHBOR
        for k, ((align, half), height, width) in enumerate(passes):
            if k < len(passes) - 1:
                dims = list(ctx.operand_type(op).dimensions)
                dims[2 if nchw else 1] = height
                target = ctx.temp(ctx.operand_type(op).with_dimensions(dims))
            else:  # created last: a requantization follows the operation writing it
                target = ctx.output(y, perm, forced=ctx.quant_of(x))
            ctx.add_op(code, [op, ctx.int_scalar(width), ctx.int_scalar(height), ctx.bool_scalar(nchw),
                              ctx.bool_scalar(align), ctx.bool_scalar(half)], [target])
            op = target
