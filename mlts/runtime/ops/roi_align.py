"""ROI_ALIGN: average of bilinear samples of a feature map inside each region of interest (Mask R-CNN).

Inputs: 0 the 4-D feature map (NHWC, or NCHW with the layout flag); 1 the regions, [num_rois, 4] boxes
(x1, y1, x2, y2) in image coordinates (TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0 for the
8-bit types); 2 the batch index of each region (TENSOR_INT32 [num_rois]); 3, 4 the output height and
width (> 0); 5, 6 the height and width strides, the ratio of image to feature map (FLOAT32, FLOAT16 for
a TENSOR_FLOAT16 map; > 0); 7, 8 the height and width sampling ratios (>= 0; 0: adaptive,
ceil(bin size)); 9 the layout flag (BOOL, true: NCHW). Output: [num_rois, out_h, out_w, depth] (NCHW:
[num_rois, depth, out_h, out_w]), of the map's type; 8-bit outputs have their own scale and zero point.
num_rois may be 0 (a zero-sized input produced at run time): the output is then zero-sized.

The kernel follows NNAPI's CPU reference step by step in float32 where its decisions depend on it: a
region is scaled by 1 / stride, widened to at least 1 x 1, split into out_h x out_w bins of
ratio_h x ratio_w samples at the centres of equal sub-bins; a sample at or beyond the last row/column
takes that row/column alone. Float maps average the interpolated values (float32 maps in float64,
float16 ones in float32, rounded once). 8-bit maps use NNAPI's integer kernel: each bilinear weight is
quantized to round(w * 255), the weighted differences to the zero point are summed in integers and
rescaled by input_scale / (255 * output_scale * samples) with a fixed-point multiplier.

Regions are checked at run time as NNAPI does (execution fails, OP_FAILED): batch index in range,
coordinates >= 0 and inside the feature map once scaled, x1 <= x2 and y1 <= y2.

The input checks and shape rules here are shared with ROI_POOLING (roi_pooling.py), which takes the same
inputs less the sampling ratios.
"""
from __future__ import annotations

import numpy as np

from ..enums import OperandCode, OperationCode
from ._boxes import BOX_SCALE, check_box_quantization
from ._fp_errors import ignoring_fp_errors
from .base import Operation, OperationContext, Shape
from .common import FLOAT_AND_QUANT8, FLOAT_SCALAR_OF, QUANT8_TYPES
from .quant import QUANT_RANGE, multiply_by_quantized_multiplier, quantize_multiplier, round_half_away_array
from .registry import register

FEATURES, ROIS, BATCH_INDICES, OUT_HEIGHT, OUT_WIDTH, HEIGHT_STRIDE, WIDTH_STRIDE = range(7)
HEIGHT_SAMPLING_RATIO, WIDTH_SAMPLING_RATIO = 7, 8  # ROI_ALIGN only
_F32 = np.float32
#: NNAPI quantizes the bilinear weights in steps of 1/255
_WEIGHT_SCALE = _F32(1.0) / _F32(255.0)


class RoiOperation(Operation):
    """What ROI_ALIGN and ROI_POOLING share: the input list up to the strides, the layout flag, checks,
    shape inference, layout handling and the per-region checks. Subclasses give `num_inputs`, the extra
    INT32 inputs and `kernel` (NHWC map, one region at a time)."""

    supported_types = FLOAT_AND_QUANT8
    num_inputs: int
    extra_int_inputs: tuple[int, ...] = ()

    @property
    def layout_input(self) -> int:
        return self.num_inputs - 1

    # -- validation -----------------------------------------------------------------------------
    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(self.num_inputs, 1)
        ctx.check_input_type(FEATURES, self.supported_types)
        code = ctx.input_code(FEATURES)
        ctx.check_input_type(ROIS, OperandCode.TENSOR_QUANT16_ASYMM if code in QUANT8_TYPES else code)
        ctx.check_input_type(BATCH_INDICES, OperandCode.TENSOR_INT32)
        for i in (OUT_HEIGHT, OUT_WIDTH) + self.extra_int_inputs:
            ctx.check_input_type(i, OperandCode.INT32)
        for i in (HEIGHT_STRIDE, WIDTH_STRIDE):
            ctx.check_input_type(i, FLOAT_SCALAR_OF.get(code, OperandCode.FLOAT32))
        ctx.check_input_type(self.layout_input, OperandCode.BOOL)
        ctx.check_output_type(0, code)
        ctx.check_input_rank(FEATURES, 4)
        ctx.check_input_rank(ROIS, 2)
        ctx.check_input_rank(BATCH_INDICES, 1)
        if code in QUANT8_TYPES:
            check_box_quantization(ctx, input=ROIS)
        self.check_output_quantization(ctx)
        self._check_scalars(ctx, {i: ctx.scalar_if_known(i) for i in self._scalar_inputs()})
        rois, batches = ctx.input_type(ROIS).dimensions, ctx.input_type(BATCH_INDICES).dimensions
        if rois and len(rois) == 2 and rois[1]:
            ctx.check(rois[1] == 4, f"boxes must have shape [num_rois, 4], got {list(rois)}", input=ROIS)
        if rois and batches and len(rois) == 2 and len(batches) == 1 and rois[0] and batches[0]:
            ctx.check(rois[0] == batches[0], f"{batches[0]} batch indices for {rois[0]} boxes", input=BATCH_INDICES)

    def check_output_quantization(self, ctx: OperationContext) -> None:
        """ROI_ALIGN's 8-bit output has its own scale and zero point; ROI_POOLING overrides this."""

    def _scalar_inputs(self) -> tuple[int, ...]:
        return (OUT_HEIGHT, OUT_WIDTH, HEIGHT_STRIDE, WIDTH_STRIDE) + self.extra_int_inputs

    def _check_scalars(self, ctx: OperationContext, values: dict[int, object]) -> None:
        """NNAPI's rules on the scalar parameters that are known (None: not known yet)."""
        for i, what in ((OUT_HEIGHT, "output height"), (OUT_WIDTH, "output width")):
            if values.get(i) is not None:
                ctx.check(values[i] > 0, f"{what} must be > 0, got {values[i]}", input=i)
        for i, what in ((HEIGHT_STRIDE, "height stride"), (WIDTH_STRIDE, "width stride")):
            if values.get(i) is not None:
                ctx.check(values[i] > 0, f"{what} must be > 0, got {values[i]}", input=i)  # NaN fails too
        for i in self.extra_int_inputs:
            if values.get(i) is not None:
                ctx.check(values[i] >= 0, f"sampling ratio must be >= 0, got {values[i]}", input=i)

    # -- shapes ---------------------------------------------------------------------------------
    def _dims(self, ctx: OperationContext, shape: Shape, roi_shape: Shape, batch_shape: Shape, nchw: bool
              ) -> tuple[int, int, int, int, int]:
        """(batches, height, width, depth, num_rois), checked as NNAPI's prepare does."""
        ctx.check(len(shape) == 4, f"rank {len(shape)} not supported (expected 4)", input=FEATURES)
        ctx.check(len(roi_shape) == 2 and roi_shape[1] == 4,
                  f"boxes must have shape [num_rois, 4], got {list(roi_shape)}", input=ROIS)
        ctx.check(len(batch_shape) == 1, f"batch indices must be a 1-D tensor, got rank {len(batch_shape)}",
                  input=BATCH_INDICES)
        n, h, w, c = (shape[0], shape[2], shape[3], shape[1]) if nchw else shape
        # Only the number of regions may be zero.
        ctx.check(min(n, h, w, c) > 0, f"batches, height, width and depth must be > 0, got shape {list(shape)}",
                  input=FEATURES)
        ctx.check(batch_shape[0] == roi_shape[0], f"{batch_shape[0]} batch indices for {roi_shape[0]} boxes",
                  input=BATCH_INDICES)
        return n, h, w, c, roi_shape[0]

    def _params(self, ctx: OperationContext) -> dict[int, object]:
        values = {i: ctx.scalar(i) for i in self._scalar_inputs()}
        self._check_scalars(ctx, values)
        return values

    def _output_shape(self, ctx: OperationContext, shape: Shape, roi_shape: Shape, batch_shape: Shape) -> Shape:
        nchw = bool(ctx.scalar(self.layout_input))
        _, _, _, depth, num_rois = self._dims(ctx, shape, roi_shape, batch_shape, nchw)
        values = self._params(ctx)
        out_h, out_w = int(values[OUT_HEIGHT]), int(values[OUT_WIDTH])
        return (num_rois, depth, out_h, out_w) if nchw else (num_rois, out_h, out_w, depth)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        return [self._output_shape(ctx, ctx.input_shape(FEATURES), ctx.input_shape(ROIS),
                                   ctx.input_shape(BATCH_INDICES))]

    # -- execution ------------------------------------------------------------------------------
    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        features, rois, batch_indices = ctx.input(FEATURES), ctx.input(ROIS), ctx.input(BATCH_INDICES)
        out_shape = self._output_shape(ctx, features.shape, rois.shape, batch_indices.shape)
        out_type = ctx.output_type(0)
        if rois.shape[0] == 0:
            return [np.zeros(out_shape, dtype=out_type.dtype)]
        nchw = bool(ctx.scalar(self.layout_input))
        nhwc = features.transpose(0, 2, 3, 1) if nchw else features
        values = self._params(ctx)
        strides = (_F32(values[HEIGHT_STRIDE]), _F32(values[WIDTH_STRIDE]))
        out_size = (int(values[OUT_HEIGHT]), int(values[OUT_WIDTH]))
        results = []
        for r in range(rois.shape[0]):
            batch = int(batch_indices[r])
            ctx.check(0 <= batch < nhwc.shape[0],
                      f"batch index {batch} of box {r} is out of range [0, {nhwc.shape[0]})", input=BATCH_INDICES)
            results.append(ignoring_fp_errors(self.kernel, ctx, nhwc[batch], r, rois[r], strides, out_size, values))
        out = np.stack(results)
        if nchw:
            out = out.transpose(0, 3, 1, 2)
        return [np.ascontiguousarray(out.astype(out_type.dtype, copy=False))]

    def kernel(self, ctx: OperationContext, feature_map: np.ndarray, r: int, roi: np.ndarray,
               strides: tuple[np.float32, np.float32], out_size: tuple[int, int], values: dict[int, object]
               ) -> np.ndarray:
        """The [out_h, out_w, depth] output of region `r` (`roi`, raw values) on one HWC feature map."""
        raise NotImplementedError


def scaled_region(ctx: OperationContext, r: int, roi: np.ndarray, strides: tuple[np.float32, np.float32],
                  height: int, width: int, *, box_scale_first: bool = False
                  ) -> tuple[np.float32, np.float32, np.float32, np.float32]:
    """Region `r` on the feature map in float32, (x1, y1, x2, y2) = box * (1 / stride), checked as NNAPI
    does at run time: coordinates >= 0 and x1 <= x2, y1 <= y2 (on the boxes for float boxes, scaled for
    TENSOR_QUANT16_ASYMM ones), and every scaled coordinate inside the feature map.

    TENSOR_QUANT16_ASYMM boxes are dequantized (x 0.125) after the stride scaling (ROI_ALIGN), or before
    it with `box_scale_first` (ROI_POOLING), as NNAPI orders the two float32 products."""
    height_scale, width_scale = _F32(1.0) / strides[0], _F32(1.0) / strides[1]
    scale = (width_scale, height_scale, width_scale, height_scale)
    where = f"box {r} ({roi.tolist()})"
    if roi.dtype == np.uint16:
        box_scale = _F32(BOX_SCALE)
        if box_scale_first:
            scaled = tuple((_F32(v) * box_scale) * s for v, s in zip(roi.tolist(), scale))
        else:
            scaled = tuple((_F32(v) * s) * box_scale for v, s in zip(roi.tolist(), scale))
        ordered = scaled
    else:
        ordered = tuple(_F32(v) for v in roi.astype(np.float32))
        scaled = tuple(v * s for v, s in zip(ordered, scale))
    x1, y1, x2, y2 = ordered
    ctx.check(bool(x1 >= 0 and y1 >= 0 and x2 >= 0 and y2 >= 0), f"{where} has a negative coordinate", input=ROIS)
    ctx.check(bool(x1 <= x2 and y1 <= y2), f"{where} has x2 < x1 or y2 < y1", input=ROIS)
    x1, y1, x2, y2 = scaled
    ctx.check(bool(x1 <= width and x2 <= width and y1 <= height and y2 <= height),
              f"{where} reaches beyond the {height} x {width} feature map once scaled by 1 / stride "
              f"({[float(v) for v in scaled]})", input=ROIS)
    return scaled


# -- ROI_ALIGN ------------------------------------------------------------------------------------
def _sample_axis(roi_start: np.float32, step: np.float32, bin_size: np.float32, out_size: int, ratio: int,
                 in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, lower weight, upper weight) of each sample along one axis, each of shape
    [out_size, ratio]: sample k of bin i sits at step * i + start + bin / 2 + bin * k (float32)."""
    bin_starts = step * np.arange(out_size, dtype=_F32) + roi_start
    position = (bin_starts[:, None] + bin_size / _F32(2)) + bin_size * np.arange(ratio, dtype=_F32)[None, :]
    lower = np.floor(position).astype(np.int64)
    upper_weight = position - lower.astype(_F32)
    beyond = lower >= in_size - 1  # at or past the last row/column: that one alone
    lower = np.where(beyond, in_size - 1, lower)
    upper = np.where(beyond, in_size - 1, lower + 1)
    upper_weight = np.where(beyond, _F32(0), upper_weight).astype(_F32)
    return lower, upper, _F32(1) - upper_weight, upper_weight


@register
class RoiAlign(RoiOperation):
    code = OperationCode.ROI_ALIGN
    num_inputs = 10
    extra_int_inputs = (HEIGHT_SAMPLING_RATIO, WIDTH_SAMPLING_RATIO)

    def kernel(self, ctx: OperationContext, feature_map: np.ndarray, r: int, roi: np.ndarray,
               strides: tuple[np.float32, np.float32], out_size: tuple[int, int], values: dict[int, object]
               ) -> np.ndarray:
        in_h, in_w = feature_map.shape[:2]
        x1, y1, x2, y2 = scaled_region(ctx, r, roi, strides, in_h, in_w)
        roi_h, roi_w = max(y2 - y1, _F32(1)), max(x2 - x1, _F32(1))
        step_h, step_w = roi_h / _F32(out_size[0]), roi_w / _F32(out_size[1])
        # A ratio of 0 is adaptive: ceil(bin size).
        ratio_h = int(values[HEIGHT_SAMPLING_RATIO]) or int(np.ceil(step_h))
        ratio_w = int(values[WIDTH_SAMPLING_RATIO]) or int(np.ceil(step_w))
        ys = _sample_axis(y1, step_h, step_h / _F32(ratio_h), out_size[0], ratio_h, in_h)
        xs = _sample_axis(x1, step_w, step_w / _F32(ratio_w), out_size[1], ratio_w, in_w)
        # Corners (y, x) in NNAPI's order: (lower, lower), (lower, upper), (upper, lower), (upper, upper),
        # each of shape [out_h, ratio_h, out_w, ratio_w] (+ depth for the values).
        corners = [(ys[iy][:, :, None, None], xs[ix][None, None, :, :],
                    ys[2 + iy][:, :, None, None] * xs[2 + ix][None, None, :, :]) for iy in (0, 1) for ix in (0, 1)]
        count = ratio_h * ratio_w
        if ctx.input_code(FEATURES) in QUANT8_TYPES:
            return self._quantized(ctx, feature_map, corners, count)
        work = np.float32 if feature_map.dtype == np.float16 else np.float64
        fmap = feature_map.astype(work)
        total = sum(weight.astype(work)[..., None] * fmap[rows, cols] for rows, cols, weight in corners)
        return total.sum(axis=(1, 3)) / work(count)

    @staticmethod
    def _quantized(ctx: OperationContext, feature_map: np.ndarray, corners: list, count: int) -> np.ndarray:
        t_in, t_out = ctx.input_type(FEATURES), ctx.output_type(0)
        real = _F32(t_in.scale) * _WEIGHT_SCALE / _F32(t_out.scale) / _F32(count)
        multiplier, shift = quantize_multiplier(float(real))
        if not (0 <= real < 1) or shift > 0:
            raise ctx.fail(f"input scale / (255 x output scale x {count} samples) = {float(real):g} must be below 1 "
                           "for the quantized kernel", output=0)
        centred = feature_map.astype(np.int64) - t_in.zero_point
        total = sum(round_half_away_array((weight / _WEIGHT_SCALE).astype(np.float64)).astype(np.int64)[..., None]
                    * centred[rows, cols] for rows, cols, weight in corners)
        scaled = multiply_by_quantized_multiplier(total.sum(axis=(1, 3)), multiplier, shift) + t_out.zero_point
        lo, hi = QUANT_RANGE[t_out.code]
        return np.clip(scaled, lo, hi)
