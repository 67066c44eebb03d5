"""Shared pieces of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED (a private helper module, not an op).

- Input-list parsing: NNAPI tells the explicit-padding form from the implicit one by the input count
  and by the type of the first optional input (INT32 there means explicit padding; BOOL means the
  NCHW layout flag of the implicit form).
- Padding and output size: NNAPI's calculateExplicitPadding (SAME/VALID with dilation) and
  computeOutSize.
- Quantization: the bias-scale rule (bias scale == input scale x filter scale, compared in float the way
  NNAPI's GetQuantizedConvolutionMultipler does) and the fixed-point output rescale.
- Kernels on NHWC float arrays: im2col + matmul for convolutions (chunked to bound memory), a
  tap loop for depthwise convolution. Float operands are accumulated in float64 and rounded once to
  float32 (then to float16 for FLOAT16). Quantized kernels feed them zero-point-centred integers held
  in float32 when every partial sum provably stays below 2**24, else in float64 (exact below 2**53),
  so the BLAS-backed sums are the exact int32 accumulators; then an integer fixed-point rescale.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..enums import FuseCode, OperandCode, PaddingCode
from ..operand_type import OperandType
from ._float32 import as_float32
from ._padding import WindowParams, explicit_padding, out_size
from .base import OperationContext, Shape
from .common import FLOAT_TYPES, QUANT8_TYPES
from .quant import (INT32_MAX, INT32_MIN, apply_float_activation, quantize_multiplier_array,
                    quantized_activation_range)

PER_CHANNEL = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
CONV_SUPPORTED_TYPES = FLOAT_TYPES | QUANT8_TYPES

# Bytes of im2col scratch per matmul chunk; bounds memory on large convolutions.
_IM2COL_CHUNK_BYTES = 32 * 1024 * 1024


# -- input list layout --------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvLayout:
    """Where each parameter of a (depthwise) convolution sits in its input list."""

    explicit: bool
    padding: tuple[int, ...]          # (left, right, top, bottom) indices, or (code,) for implicit
    stride_w: int
    stride_h: int
    multiplier: int | None            # depthwise only
    fuse: int
    layout: int | None                # NCHW flag index, None when absent
    dilation: tuple[int, int] | None  # (w, h) indices, None when absent

    @property
    def scalar_indices(self) -> list[int]:
        idx = list(self.padding) + [self.stride_w, self.stride_h]
        if self.multiplier is not None:
            idx.append(self.multiplier)
        idx.append(self.fuse)
        if self.dilation is not None:
            idx.extend(self.dilation)
        return idx


def conv_layout(ctx: OperationContext, depthwise: bool) -> ConvLayout:
    """Decide explicit vs implicit padding the way NNAPI does and check the input count.

    CONV_2D: implicit 7 [+ layout] [+ dilation w, h] = 7, 8, 10; explicit 10, 11, 13.
    DEPTHWISE_CONV_2D: one more (the depth multiplier): implicit 8, 9, 11; explicit 11, 12, 14.
    """
    extra = 1 if depthwise else 0
    base_implicit = 7 + extra
    base_explicit = 10 + extra
    n = ctx.num_inputs
    valid_counts = (base_implicit, base_implicit + 1, base_implicit + 3,
                    base_explicit, base_explicit + 1, base_explicit + 3)
    if ctx.num_outputs != 1:
        raise ctx.fail(f"expected 1 output, got {ctx.num_outputs}")
    if n not in valid_counts:
        if n in (base_implicit + 2, base_explicit + 2):
            raise ctx.fail(f"{n} inputs: only one dilation factor given, two values (width, height) are required")
        raise ctx.fail(f"expected {', '.join(map(str, sorted(set(valid_counts))))} inputs, got {n}")
    probe = base_implicit  # first input after the fused activation of the implicit form
    probe_code = ctx.input_code(probe) if n > probe else None
    if n == base_implicit or probe_code == OperandCode.BOOL:
        explicit = False
    elif n >= base_explicit and probe_code == OperandCode.INT32:
        explicit = True
    else:
        got = "omitted" if probe_code is None else probe_code.name
        expected = "INT32 (explicit padding) or BOOL (NCHW flag of the implicit-padding form)" \
            if n >= base_explicit else "BOOL (NCHW flag of the implicit-padding form)"
        raise ctx.fail(f"with {n} inputs this input must be {expected}, got {got}", input=probe)
    first = 3
    if explicit:
        padding = (first, first + 1, first + 2, first + 3)
        nxt = first + 4
        base = base_explicit
    else:
        padding = (first,)
        nxt = first + 1
        base = base_implicit
    if n not in (base, base + 1, base + 3):
        form = "explicit" if explicit else "implicit"
        raise ctx.fail(f"{n} inputs do not match the {form}-padding form ({base}, {base + 1} or {base + 3} inputs)")
    stride_w, stride_h = nxt, nxt + 1
    nxt += 2
    multiplier = None
    if depthwise:
        multiplier = nxt
        nxt += 1
    fuse = nxt
    layout = nxt + 1 if n >= base + 1 else None
    dilation = (nxt + 2, nxt + 3) if n == base + 3 else None
    return ConvLayout(explicit, padding, stride_w, stride_h, multiplier, fuse, layout, dilation)


@dataclass(frozen=True)
class ConvParams(WindowParams):
    dilation_w: int
    dilation_h: int
    fuse: int
    nchw: bool
    multiplier: int = 1


# -- padding and output size --------------------------------------------------------------------
def check_static_scalars(ctx: OperationContext, lay: ConvLayout) -> None:
    """Validate-phase checks of the scalar parameters (types always; values when constant)."""
    for i in lay.scalar_indices:
        ctx.check_input_type(i, OperandCode.INT32)
    if lay.layout is not None:
        ctx.check_input_type(lay.layout, OperandCode.BOOL)
    ctx.check_fuse_code(lay.fuse)
    if lay.explicit:
        for i, side in zip(lay.padding, ("left", "right", "top", "bottom")):
            v = ctx.scalar_if_known(i)
            if v is not None and v < 0:
                raise ctx.fail(f"padding {side} must be >= 0, got {v}", input=i)
    else:
        v = ctx.scalar_if_known(lay.padding[0])
        if v is not None and v not in (PaddingCode.SAME, PaddingCode.VALID):
            raise ctx.fail(f"invalid implicit padding code {v} (expected 1 = SAME or 2 = VALID)", input=lay.padding[0])
    named = [(lay.stride_w, "stride width"), (lay.stride_h, "stride height")]
    if lay.dilation is not None:
        named += [(lay.dilation[0], "dilation width factor"), (lay.dilation[1], "dilation height factor")]
    if lay.multiplier is not None:
        named.append((lay.multiplier, "depth multiplier"))
    for i, what in named:
        v = ctx.scalar_if_known(i)
        if v is not None and v <= 0:
            raise ctx.fail(f"{what} must be > 0, got {v}", input=i)


def read_params(ctx: OperationContext, lay: ConvLayout, in_hw: tuple[int, int], filter_hw: tuple[int, int]) -> ConvParams:
    """All parameters as Python ints (raises ValueUnknown at build time when a scalar is not constant)."""
    nchw = bool(ctx.scalar(lay.layout)) if lay.layout is not None else False
    stride_w, stride_h = int(ctx.scalar(lay.stride_w)), int(ctx.scalar(lay.stride_h))
    dil_w, dil_h = (int(ctx.scalar(lay.dilation[0])), int(ctx.scalar(lay.dilation[1]))) if lay.dilation else (1, 1)
    multiplier = int(ctx.scalar(lay.multiplier)) if lay.multiplier is not None else 1
    fuse = int(ctx.scalar(lay.fuse))
    for i, v, what in ((lay.stride_w, stride_w, "stride width"), (lay.stride_h, stride_h, "stride height")):
        ctx.check(v > 0, f"{what} must be > 0, got {v}", input=i)
    if lay.dilation:
        ctx.check(dil_w > 0, f"dilation width factor must be > 0, got {dil_w}", input=lay.dilation[0])
        ctx.check(dil_h > 0, f"dilation height factor must be > 0, got {dil_h}", input=lay.dilation[1])
    if lay.multiplier is not None:
        ctx.check(multiplier > 0, f"depth multiplier must be > 0, got {multiplier}", input=lay.multiplier)
    ctx.check(fuse in tuple(FuseCode), f"invalid fused activation code {fuse}", input=lay.fuse)
    if lay.explicit:
        pads = [int(ctx.scalar(i)) for i in lay.padding]
        for i, v in zip(lay.padding, pads):
            ctx.check(v >= 0, f"padding must be >= 0, got {v}", input=i)
        left, right, top, bottom = pads
    else:
        code = int(ctx.scalar(lay.padding[0]))
        ctx.check(code in (PaddingCode.SAME, PaddingCode.VALID),
                  f"invalid implicit padding code {code} (expected 1 = SAME or 2 = VALID)", input=lay.padding[0])
        (in_h, in_w), (f_h, f_w) = in_hw, filter_hw
        left, right = explicit_padding(in_w, stride_w, f_w, code, dil_w)
        top, bottom = explicit_padding(in_h, stride_h, f_h, code, dil_h)
    return ConvParams(left, right, top, bottom, stride_w, stride_h, dil_w, dil_h, fuse, nchw, multiplier)


def spatial_output(ctx: OperationContext, p: ConvParams, in_hw: tuple[int, int], filter_hw: tuple[int, int]) -> tuple[int, int]:
    """Check padding against the (dilated) filter size as NNAPI does, and give (out_h, out_w)."""
    (in_h, in_w), (f_h, f_w) = in_hw, filter_hw
    eff_w = (f_w - 1) * p.dilation_w + 1
    eff_h = (f_h - 1) * p.dilation_h + 1
    for pad, eff, what in ((p.pad_left, eff_w, "left"), (p.pad_right, eff_w, "right"),
                           (p.pad_top, eff_h, "top"), (p.pad_bottom, eff_h, "bottom")):
        ctx.check(pad < eff, f"padding {what} ({pad}) must be smaller than the effective filter size ({eff})")
    out_h = out_size(in_h, f_h, p.stride_h, p.pad_top, p.pad_bottom, p.dilation_h)
    out_w = out_size(in_w, f_w, p.stride_w, p.pad_left, p.pad_right, p.dilation_w)
    ctx.check(out_h > 0 and out_w > 0,
              f"output spatial size {out_h}x{out_w} is empty (input {in_h}x{in_w}, effective filter {eff_h}x{eff_w})")
    return out_h, out_w


# -- types and quantization ---------------------------------------------------------------------
def check_conv_types(ctx: OperationContext, *, filter_channel_dim: int | None, allow_per_channel: bool = True) -> None:
    """Input/filter/bias/output type rules shared by the three operations (validate phase)."""
    ctx.check_input_type(0, CONV_SUPPORTED_TYPES)
    in_code = ctx.input_code(0)
    if in_code in QUANT8_TYPES:
        allowed = {in_code, PER_CHANNEL} if allow_per_channel else {in_code}
        ctx.check_input_type(1, allowed)
        ctx.check_input_type(2, OperandCode.TENSOR_INT32)
    else:
        ctx.check_input_type(1, in_code)
        ctx.check_input_type(2, in_code)
    ctx.check_output_type(0, in_code)
    if ctx.input_code(1) == PER_CHANNEL:
        cq = ctx.input_type(1).channel_quant
        ctx.check(cq is not None, "per-channel filter needs per-channel quantization parameters", input=1)
        ctx.check(cq.channel_dim == filter_channel_dim,
                  f"per-channel filter must have channelDim {filter_channel_dim}, got {cq.channel_dim}", input=1)
    if in_code in QUANT8_TYPES:
        check_bias_quantization(ctx)


def input_product_scales(ctx: OperationContext) -> np.ndarray:
    """input scale x filter scale (per output channel for per-channel filters), as float32 products."""
    t_in, t_f = ctx.input_type(0), ctx.input_type(1)
    if t_f.code == PER_CHANNEL:
        scales = np.asarray(t_f.channel_quant.scales, dtype=np.float32)
        return (np.float32(t_in.scale) * scales).astype(np.float32)
    return np.asarray([np.float32(t_in.scale) * np.float32(t_f.scale)], dtype=np.float32)


def check_bias_quantization(ctx: OperationContext) -> None:
    """Quantized bias: TENSOR_INT32, zero point 0, scale == input scale x filter scale (NNAPI's tolerance:
    |product - bias| <= 1e-6 * min(product, bias), in float). Per-channel filters: NNAPI ignores the
    bias operand's scale (documented as 0) and uses input scale x filter scale of each channel."""
    t_b = ctx.input_type(2)
    if t_b is None:
        return
    ctx.check(t_b.zero_point == 0, f"quantized bias must have zeroPoint 0, got {t_b.zero_point}", input=2)
    if ctx.input_code(1) == PER_CHANNEL:
        return
    product = float(input_product_scales(ctx)[0])
    bias_scale = as_float32(t_b.scale)
    if not abs(product - bias_scale) <= 1e-6 * min(product, bias_scale):
        raise ctx.fail(f"bias scale {t_b.scale:g} must equal input scale x filter scale = {product:g}", input=2)


def output_multipliers(ctx: OperationContext) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-point (multiplier, shift) per output channel (or a single pair) for the output rescale."""
    out_scale = as_float32(ctx.output_type(0).scale)
    real = input_product_scales(ctx).astype(np.float64) / out_scale
    return quantize_multiplier_array(real)


def rescale_in_place(acc: np.ndarray, mult, shift) -> np.ndarray:
    """multiply_by_quantized_multiplier for int32-range int64 values and non-negative multipliers,
    in a few in-place passes (the generic helper takes ~5x longer on MobileNet-sized tensors).

    With m >= 0 the saturating doubling high multiply never saturates and equals
    floor((x * m + 2**30) / 2**31) (ties toward +infinity), which an arithmetic shift gives; the
    rounding right shift (ties away from zero) is (y + half - (y < 0)) >> right. `mult` and `shift`
    are scalars or arrays over the last axis (per output channel). Bit-identical to `quant`'s helper.
    """
    mult = np.asarray(mult, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    if np.any(left > 0):
        acc <<= left
        np.clip(acc, INT32_MIN, INT32_MAX, out=acc)
    acc *= mult
    acc += np.int64(1 << 30)
    acc >>= np.int64(31)
    if np.any(right > 0):
        negative = acc < 0
        acc += (np.int64(1) << right) >> 1
        if right.ndim == 0:
            acc -= negative
        else:
            acc -= negative & (right > 0)
        acc >>= right
    return acc


def requantize(ctx: OperationContext, acc: np.ndarray, bias: np.ndarray, fuse: int) -> np.ndarray:
    """int accumulator (+ bias) -> output type: fixed-point rescale, zero point, activation clamp."""
    out_t = ctx.output_type(0)
    mult, shift = output_multipliers(ctx)
    if mult.size == 1:
        mult, shift = mult[0], shift[0]
    acc = np.asarray(acc, dtype=np.int64)  # callers pass a fresh array: updated in place
    acc += np.asarray(bias, dtype=np.int64)
    if acc.size and (acc.min() < INT32_MIN or acc.max() > INT32_MAX):
        np.clip(acc, INT32_MIN, INT32_MAX, out=acc)  # NNAPI accumulates in int32
    out = rescale_in_place(acc, mult, shift)
    out += out_t.zero_point
    lo, hi = quantized_activation_range(fuse, out_t)
    np.clip(out, lo, hi, out=out)
    return out.astype(out_t.dtype)


def finish_float(ctx: OperationContext, acc64: np.ndarray, fuse: int) -> np.ndarray:
    """float64 result -> float32 (NNAPI's compute type) -> activation -> output dtype."""
    out = apply_float_activation(acc64.astype(np.float32), fuse)
    return out.astype(ctx.output_type(0).dtype)


def centred(ctx: OperationContext, i: int) -> np.ndarray:
    """Input `i` as float64: the real-valued float data, or q - zeroPoint for quantized operands."""
    x = ctx.input(i)
    t = ctx.input_type(i)
    if t.code in FLOAT_TYPES:
        return x.astype(np.float32).astype(np.float64)
    zp = 0 if t.code == PER_CHANNEL else t.zero_point
    return x.astype(np.float64) - zp


def exact_sum_dtype(x: np.ndarray, w: np.ndarray, out_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Centred quantized operands in float32 when every partial sum of the kernel is provably exact
    there (max|x| x the largest per-output-channel sum of |w| stays below 2**24), else float64.

    Integer products and sums below 2**24 are exact in float32 whatever the BLAS summation order, so
    the cheaper type gives the same integers; float64 is exact up to 2**53.
    """
    if x.size == 0 or w.size == 0:
        return x, w
    axes = tuple(a for a in range(w.ndim) if a != out_axis % w.ndim)
    bound = float(np.abs(x).max()) * float(np.abs(w).sum(axis=axes).max())
    if bound < 2.0**24:
        return x.astype(np.float32), w.astype(np.float32)
    return x, w


def is_quantized(ctx: OperationContext) -> bool:
    return ctx.input_code(0) in QUANT8_TYPES


# -- kernels (NHWC) --------------------------------------------------------------------------------
def _pad_nhwc(x: np.ndarray, p: ConvParams) -> np.ndarray:
    if p.pad_top == p.pad_bottom == p.pad_left == p.pad_right == 0:
        return x
    return np.pad(x, ((0, 0), (p.pad_top, p.pad_bottom), (p.pad_left, p.pad_right), (0, 0)))


def conv_nhwc(x: np.ndarray, w: np.ndarray, p: ConvParams, out_hw: tuple[int, int]) -> np.ndarray:
    """Convolution by im2col + matmul. x [N,H,W,C], w [O,KH,KW,C] -> [N,OH,OW,O] (in x's float type)."""
    n, _, _, c = x.shape
    o, kh, kw, _ = w.shape
    oh, ow = out_hw
    out = np.empty((n, oh, ow, o), dtype=x.dtype)
    if n == 0:
        return out
    wmat = np.ascontiguousarray(w.reshape(o, kh * kw * c).T)  # [K, O]
    if kh == kw == 1 and p.stride_h == p.stride_w == 1 and not (p.pad_top or p.pad_bottom or p.pad_left or p.pad_right):
        # 1x1 stride-1 unpadded: the input already is the im2col matrix (output crops any extra rows/cols).
        cols = np.ascontiguousarray(x[:, :oh, :ow, :]).reshape(-1, c)
        return (cols @ wmat).reshape(n, oh, ow, o)
    xp = _pad_nhwc(x, p)
    _, sh, sw, sc = xp.strides
    k = kh * kw * c
    rows = max(1, min(oh, _IM2COL_CHUNK_BYTES // max(1, ow * k * x.dtype.itemsize)))
    for b in range(n):
        for r0 in range(0, oh, rows):
            r = min(rows, oh - r0)
            view = np.lib.stride_tricks.as_strided(
                xp[b, r0 * p.stride_h:],
                shape=(r, ow, kh, kw, c),
                strides=(sh * p.stride_h, sw * p.stride_w, sh * p.dilation_h, sw * p.dilation_w, sc),
                writeable=False)
            cols = view.reshape(r * ow, k)
            out[b, r0:r0 + r] = (cols @ wmat).reshape(r, ow, o)
    return out


def depthwise_nhwc(x: np.ndarray, w: np.ndarray, p: ConvParams, out_hw: tuple[int, int]) -> np.ndarray:
    """Depthwise convolution by a loop over filter taps. x [N,H,W,C], w [1,KH,KW,C*M] -> [N,OH,OW,C*M].

    Output channel ic*M + m reads input channel ic with filter channel ic*M + m (NNAPI's order).
    """
    n, _, _, c = x.shape
    _, kh, kw, cm = w.shape
    m = cm // c
    oh, ow = out_hw
    xp = _pad_nhwc(x, p)
    wk = w.reshape(kh, kw, c, m)
    acc = np.zeros((n, oh, ow, c, m), dtype=x.dtype)
    if n == 0:
        return acc.reshape(n, oh, ow, cm)
    tmp = np.empty_like(acc)
    h_span = (oh - 1) * p.stride_h + 1
    w_span = (ow - 1) * p.stride_w + 1
    for i in range(kh):
        h0 = i * p.dilation_h
        for j in range(kw):
            w0 = j * p.dilation_w
            tap = xp[:, h0:h0 + h_span:p.stride_h, w0:w0 + w_span:p.stride_w, :, None]
            np.multiply(tap, wk[i, j], out=tmp)
            acc += tmp
    return acc.reshape(n, oh, ow, cm)


def to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.transpose(x, (0, 2, 3, 1)) if nchw else x


def from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x, (0, 3, 1, 2))) if nchw else x


def dims_known(t: OperandType | None) -> tuple[int, ...] | None:
    """Dimensions of a type when its rank is known (entries may be 0 = unknown)."""
    if t is None or t.dimensions is None:
        return None
    return t.dimensions


def known(*values: int) -> bool:
    return all(v > 0 for v in values)


def nchw_if_known(ctx: OperationContext, lay: ConvLayout) -> bool | None:
    if lay.layout is None:
        return False
    v = ctx.scalar_if_known(lay.layout)
    return None if v is None else bool(v)


def input_hwc(dims: Shape, nchw: bool) -> tuple[int, int, int]:
    """(height, width, channels) of a rank-4 input in the given layout."""
    if nchw:
        return dims[2], dims[3], dims[1]
    return dims[1], dims[2], dims[3]


def checked_conv_shapes(ctx: OperationContext, layout: int) -> tuple[Shape, Shape, bool, tuple[int, int, int]]:
    """A convolution-like operation's input and filter shapes (rank 4, the filter's first dimension the
    output channels, a rank-1 bias with one value per output channel), its layout (the BOOL input
    `layout`) and the input's (height, width, channels), checked at prepare: only the batch may be 0."""
    in_shape, f_shape, b_shape = ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2)
    ctx.check(len(in_shape) == 4, f"input must have rank 4, got {len(in_shape)}", input=0)
    ctx.check(len(f_shape) == 4, f"filter must have rank 4, got {len(f_shape)}", input=1)
    ctx.check(len(b_shape) == 1, f"bias must have rank 1, got {len(b_shape)}", input=2)
    nchw = bool(ctx.scalar(layout))
    in_hwc = input_hwc(in_shape, nchw)
    ctx.check(min(in_hwc) > 0, f"input dimensions {list(in_shape)}: only the batch may be 0", input=0)
    ctx.check(min(f_shape) > 0, f"filter dimensions {list(f_shape)} must be > 0", input=1)
    ctx.check(b_shape[0] == f_shape[0],
              f"bias has {b_shape[0]} elements but the filter has {f_shape[0]} output channels", input=2)
    return in_shape, f_shape, nchw, in_hwc
