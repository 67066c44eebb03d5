"""CONV_2D and FULLY_CONNECTED as plan steps: BLAS GEMMs with fused epilogues.

1x1 stride-1 convolutions and fully-connected layers multiply the input buffer itself (NHWC rows
are pixels); other convolutions gather a patch matrix first (im2col, in chunks). Weights are
repacked once into [K, O]. Float: sgemm, then bias + activation. Quantized: the centred integers
go through BLAS in float32 when every partial sum is provably below 2**24 (exact whatever the
summation order), else in float64 (exact below 2**53), then NNAPI's integer requantization
(compiled and vectorized; the reference's own numpy rescale where its preconditions do not hold).
Outputs may be written bordered for a depthwise consumer, or centred for a GEMM consumer.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ...enums import OperationCode
from ...ops import OperationContext
from ...ops import _conv_common as cc
from ...ops.quant import INT32_MAX, INT32_MIN, QUANT_RANGE, float_activation_range, quantized_activation_range
from .operation_table import nhwc_only, register_fast
from .step import F32, F64, ArrayOf, Bound, PlanNode, Step, Value, bound_call, channel_tile

PER_CHANNEL = cc.PER_CHANNEL
#: bytes of one im2col patch matrix chunk, and of one block of GEMM results
IM2COL_CHUNK_BYTES = 4 * 1024 * 1024
BLOCK_BYTES = 512 * 1024
EXACT_FLOAT32 = 2.0**24
_blas_warmed = False


def warm_blas() -> None:
    """Run one double-precision GEMM (16x512x512, about half a millisecond), once per process.

    OpenBLAS (0.3.31, scipy-openblas64's Haswell kernels; seen on a Zen 1 EPYC) runs many sgemm
    shapes at a third of their speed until some larger GEMM has run in the process: K=256 with
    N=256 takes 189 us at M=16 and 10.6 ms at M=784 before, 69 us and 2.8 ms after (splitting K
    instead gets only halfway). A large network's own GEMMs do it on its first run; a small one's
    never do. This warm-up is the one call that, measured, lifts every zoo shape to full speed.
    """
    global _blas_warmed
    if not _blas_warmed:
        np.matmul(np.ones((16, 512)), np.ones((512, 512)))
        _blas_warmed = True


def float_bounds(fuse: int) -> tuple[np.float32, np.float32]:
    lo, hi = float_activation_range(fuse)
    return np.float32(lo), np.float32(hi)


def centred_filter(ctx: OperationContext) -> np.ndarray:
    """Quantized filter/weights as int64 q - zero point (per-channel filters have zero point 0)."""
    t = ctx.input_type(1)
    w = np.asarray(ctx.input(1)).astype(np.int64)
    return w if t.code == PER_CHANNEL else w - t.zero_point


class Requantizer:
    """Per-output-channel requantization parameters, from the reference's own multipliers, tiled
    (`step.channel_tile`): `rq` for `kernels_quant.rescale` (int64 lanes), and where proved exact,
    `fq` for `kernels_quant.requantize_exact` (float64 lanes, about twice as fast: AVX2 has no 64-bit
    integer multiply, but multiplies doubles natively).

    Both need `applicable` (v << left fits int32). The float64 form: with D = 2**(31 + right) and
    P = (v << left) * multiplier for the sum plus bias v (|P| < 2**62), the output is
    floor((P + 2**30 + c * 2**31) / D) + zero point, c = half - (P < -2**30 and right > 0) (the
    doubling high multiply's ties up, then RoundingDivideByPOT's ties away from zero, as one
    division), clamped to [lo, hi]. In float64, t = v * (multiplier * 2**left / D) is P / D exactly
    while |P| < 2**52, and adding the offset (zero point - lo folded in) stays exact while that offset
    is below 2**52 / D too. Beyond, t is only rounded, but then |t| >= 2**52 / D, which the proof
    requires to lie beyond the clamp on either side: the rounded value clamps where the exact one does.
    """

    def __init__(self, multipliers: tuple[np.ndarray, np.ndarray], channels: int, zero_point: int, lo: int, hi: int,
                 bias: np.ndarray) -> None:
        """multipliers: the reference's (multiplier, shift), one pair or one per channel
        (`_conv_common.output_multipliers`)."""
        mult, shift = multipliers
        mult = np.broadcast_to(mult, (channels,)).astype(np.int64)
        shift = np.broadcast_to(shift, (channels,)).astype(np.int64)
        left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
        half = (np.int64(1) << right) >> 1
        rq = (mult.astype(np.int32), left, half.astype(np.uint64),
              (right > 0).astype(np.uint64), right.astype(np.uint64), np.int64(1) << (40 - right))
        self.rq = tuple(channel_tile(a) for a in rq)
        denominator = np.ldexp(1.0, 31 + right)
        k_positive = (2.0**30 + half * 2.0**31) / denominator + (zero_point - lo)
        k_negative = k_positive - (right > 0) * 2.0**31 / denominator
        reach = 2.0**52 / denominator  # |t| from where t may be rounded
        self.exact = bool(np.all(reach + k_positive >= hi - lo + 1) and np.all(np.abs(k_positive) < reach)
                          and np.all(np.abs(k_negative) < reach))
        fq = (np.broadcast_to(np.asarray(bias, dtype=np.float64), (channels,)),
              np.ldexp(mult.astype(np.float64), left) / denominator, -(2.0**30) / denominator, k_positive, k_negative)
        self.fq = tuple(channel_tile(a) if self.exact else np.zeros(1) for a in fq)

    @staticmethod
    def applicable(ctx: OperationContext, depthwise: bool) -> bool:
        """Whether the accumulator plus bias, shifted left, provably fits int32 (no saturation) for any
        input value: the precondition of the vectorized rescale. Convolutions that fail it use the
        reference's general rescale; depthwise convolutions that fail it are declined."""
        t_in = ctx.input_type(0)
        qmin, qmax = QUANT_RANGE[t_in.code]
        mag = max(t_in.zero_point - qmin, qmax - t_in.zero_point)
        w = np.abs(centred_filter(ctx))
        per_output = w.reshape(-1, w.shape[-1]).sum(axis=0) if depthwise else w.reshape(w.shape[0], -1).sum(axis=1)
        bias = np.abs(np.asarray(ctx.input(2), dtype=np.int64))
        bound = mag * int(per_output.max(initial=0)) + int(bias.max(initial=0))
        _, shift = cc.output_multipliers(ctx)
        return bound << int(np.maximum(shift, 0).max(initial=0)) < 2**31


def magnitude(value: Value) -> int:
    """Largest |q - zero point| a quantized value can hold (from its producer's clamp if known)."""
    lo, hi = value.value_range
    zp = value.type.zero_point
    return max(abs(lo - zp), abs(hi - zp))


class Conv(Step):
    """CONV_2D or FULLY_CONNECTED, in one of two modes:

    - "matrix": 1x1 stride-1 convolutions and fully-connected layers, whose input already is the
      [M, K] GEMM matrix (one sgemm/dgemm, straight from the input buffer);
    - "im2col": other convolutions. The input is copied into the interior of a zero-bordered
      buffer when the layer pads (borders written once per workspace; this copy also absorbs a
      transposed view, e.g. an NCHW network input), then each block of output rows gets its patch
      matrix in one strided numpy copy (quantized: one subtraction of the zero point) and one GEMM.
    Output pixels go in blocks of whole image rows: each block's GEMM, then its fused epilogue
    (float bias + activation, or NNAPI's integer requantization) while the block is in cache.
    """

    writes_centred = True
    writes_padded = True

    def __init__(self, node: PlanNode) -> None:
        code, ctx, values, x = node.code, node.ctx, node.values, node.x
        super().__init__(node.index, code, (x,), (node.out,))
        self.x, self.out = x, node.out
        self.quantized = values[x].quantized
        w = centred_filter(ctx) if self.quantized else np.asarray(ctx.input(1), dtype=np.float32)
        if code == OperationCode.FULLY_CONNECTED:
            units, k = w.shape
            self.m = int(np.prod(values[x].shape)) // k
            self.mode = "matrix"
            self.geometry = None
            self.fuse = int(ctx.scalar(3))
            wmat = w.T
        else:
            lay = cc.conv_layout(ctx, depthwise=False)
            n, h, wd, c = values[x].shape
            units, kh, kw, _ = w.shape
            p = cc.read_params(ctx, lay, (h, wd), (kh, kw))
            oh, ow = cc.spatial_output(ctx, p, (h, wd), (kh, kw))
            self.m = n * oh * ow
            k = kh * kw * c
            matrix = kh == kw == 1 and p.stride_h == p.stride_w == 1 and (oh, ow) == (h, wd)
            self.mode = "matrix" if matrix else "im2col"
            self.params = p
            self.geometry = (n, h, wd, c, oh, ow, kh, kw)
            self.fuse = p.fuse
            wmat = w.reshape(units, k).T
        self.filter = w
        self.k, self.units = k, units
        if not self.quantized:
            self.dtype = F32
            self.wmat = np.ascontiguousarray(wmat, dtype=np.float32)
            self.bias = np.ascontiguousarray(ctx.input(2), dtype=np.float32)
            self.bias_t = channel_tile(self.bias)
            self.lo, self.hi = float_bounds(self.fuse)
            self.label = f"{self.mode} sgemm {self.m}x{k}x{units}"
            return
        bound = float(magnitude(values[x])) * float(np.abs(w.reshape(units, -1)).sum(axis=1).max())
        self.dtype = F32 if bound < EXACT_FLOAT32 else F64
        self.wmat = np.ascontiguousarray(wmat, dtype=self.dtype)
        self.bias = np.ascontiguousarray(ctx.input(2), dtype=np.int64)
        self.bias_t = channel_tile(self.bias)
        # Outside the vectorized rescale's preconditions (a real multiplier > 1 shifting large sums
        # left, or huge biases), the reference's own numpy rescale runs instead: exact, just slower.
        self.general = None if Requantizer.applicable(ctx, depthwise=False) else cc.output_multipliers(ctx)
        self.writes_padded = self.general is None
        self.x_zp = int(ctx.input_type(0).zero_point)
        out_t = ctx.output_type(0)
        self.zero_point = int(out_t.zero_point)
        self.lo, self.hi = quantized_activation_range(self.fuse, out_t)
        requantizer = Requantizer(cc.output_multipliers(ctx), units, self.zero_point, self.lo, self.hi, self.bias)
        self.rq, self.fq = requantizer.rq, requantizer.fq
        self.exact = requantizer.exact and self.general is None
        self.value_range = (self.lo, self.hi)
        blas = "sgemm" if self.dtype == F32 else "dgemm"
        self.label = f"{self.mode} {blas} {self.m}x{k}x{units} exact"

    def centred_input(self, operand: int) -> np.dtype | None:
        return self.dtype if self.quantized and self.mode == "matrix" else None

    def accepts_strided(self, operand: int) -> bool:
        return self.mode == "im2col"

    def _padded_shape(self) -> tuple[int, ...] | None:
        """The zero-bordered copy of the input an im2col layer reads (NHWC, or NCHW for a channel-major
        input), None when the layer does not pad."""
        n, h, wd, c, oh, ow, kh, kw = self.geometry
        p = self.params
        need_h = (oh - 1) * p.stride_h + (kh - 1) * p.dilation_h + 1
        need_w = (ow - 1) * p.stride_w + (kw - 1) * p.dilation_w + 1
        if p.pad_top == 0 and p.pad_left == 0 and need_h <= h and need_w <= wd:
            return None
        hp, wp = max(need_h, p.pad_top + h), max(need_w, p.pad_left + wd)
        return (n, c, hp, wp) if self.channel_major else (n, hp, wp, c)

    def _block_rows(self) -> int:
        """Output image rows per block. A block's GEMM result is at most BLOCK_BYTES, so that its
        epilogue finds it still in cache; an im2col block's patch matrix at most IM2COL_CHUNK_BYTES."""
        _, _, _, _, oh, ow, _, _ = self.geometry
        rows = BLOCK_BYTES // (ow * self.units * self.dtype.itemsize)
        if self.mode == "im2col":
            rows = min(rows, IM2COL_CHUNK_BYTES // (ow * self.k * self.dtype.itemsize))
        return max(1, min(rows, oh))

    def _blocks(self) -> list[tuple[int, int, int, int]]:
        """(first pixel, pixel count, first image row, end image row) of every block, in order."""
        if self.geometry is None:  # FULLY_CONNECTED: one block
            return [(0, self.m, 0, 1)]
        n, _, _, _, oh, ow, _, _ = self.geometry
        rows = self._block_rows()
        return [((b * oh + r0) * ow, min(rows, oh - r0) * ow, b * oh + r0, b * oh + min(oh, r0 + rows))
                for b in range(n) for r0 in range(0, oh, rows)]

    def scratch(self) -> list[tuple]:
        pixels = max(count for _, count, _, _ in self._blocks())
        need: list[tuple] = []
        if self.mode == "im2col":
            need.append(((self.k, pixels) if self.channel_major else (pixels, self.k), self.dtype))
        elif self.quantized and not self.input_centred:
            need.append(((pixels, self.k), self.dtype))  # the centred input rows
        if self.quantized or self.out_padding is not None:
            need.append(((pixels, self.units), self.dtype))  # the GEMM result (quantized: exact sums)
        if self.mode == "im2col" and self._padded_shape() is not None:
            # borders written once: kept; quantized, it holds the centred input in the GEMM's type
            need.append((self._padded_shape(), self.dtype if self.quantized else np.dtype(self.values_dtype), True))
        return need

    def configure(self, values: dict[int, Value]) -> None:
        super().configure(values)
        self.input_centred = values[self.x].centred
        self.values_dtype = values[self.x].dtype
        self.out_padding = values[self.out].padding
        # An input that is an NCHW buffer seen through a transposed view (an elided TRANSPOSE):
        # patches are gathered in (c, kh, kw) order from NCHW memory, as a transposed patch matrix.
        self.channel_major = self.mode == "im2col" and values[self.x].perm == (0, 2, 3, 1)
        if self.channel_major:
            self.wmat = np.ascontiguousarray(np.transpose(self.filter, (3, 1, 2, 0)).reshape(self.k, self.units),
                                             dtype=self.dtype)
        warm_blas()

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        scratch = list(scratch)
        padded_input = scratch.pop() if self.mode == "im2col" and self._padded_shape() is not None else None
        acc = scratch.pop() if self.quantized or self.out_padding is not None else None
        cols = scratch.pop() if scratch else None
        x = array(self.x)
        out2 = array(self.out).reshape(self.m, self.units)
        prologue, source = self._prologue(x, padded_input)
        steps = []
        for first, count, g0, g1 in self._blocks():
            result = out2[first:first + count] if acc is None else acc[:count]
            steps.append(self._gemm(x, source, cols, result, first, count, g0, g1, padded_input is not None))
            steps.append(self._epilogue(array, result, first, count, g0, g1))
        if prologue is not None:
            steps.insert(0, prologue)
        if len(steps) == 2:
            a, b = steps

            def run() -> None:
                a()
                b()
            return run

        def run() -> None:
            for call in steps:
                call()
        return run

    def _prologue(self, x: np.ndarray, padded: np.ndarray | None) -> tuple[Bound | None, np.ndarray]:
        """The im2col source (NHWC, or NCHW memory for a channel-major input), and the copy of the
        input into the interior of the bordered buffer when the layer pads. A quantized input is
        centred by that copy (contiguous rows, one conversion per input value), so that the patch
        gathers copy floats: a strided subtraction from 8-bit values costs twice as much."""
        source = x.transpose(0, 3, 1, 2) if self.channel_major else x
        if padded is None:
            return None, source
        n, h, wd, c, oh, ow, kh, kw = self.geometry
        p = self.params
        padded[...] = 0  # the borders (centred), once
        if self.channel_major:
            interior = padded[:, :, p.pad_top:p.pad_top + h, p.pad_left:p.pad_left + wd]
        else:
            interior = padded[:, p.pad_top:p.pad_top + h, p.pad_left:p.pad_left + wd, :]
        if self.quantized and not self.input_centred:
            return partial(np.subtract, source, self.dtype.type(self.x_zp), out=interior), padded
        return partial(np.copyto, interior, source), padded

    def _gemm(self, x: np.ndarray, source: np.ndarray, cols: np.ndarray | None, result: np.ndarray,
              first: int, count: int, g0: int, g1: int, centred_source: bool) -> Bound:
        """The GEMM of one block of output pixels into `result` (after its patch matrix or centring);
        `centred_source`: the im2col source is the centred bordered copy."""
        matmul = np.matmul
        if self.mode == "matrix":
            rows = x.reshape(self.m, self.k)[first:first + count]
            if not self.quantized or self.input_centred:
                return partial(matmul, rows, self.wmat, out=result)
            from .kernels_quant import centre

            centred = cols[:count]
            centring = bound_call(centre, rows, centred, self.x_zp)
            wmat = self.wmat

            def run() -> None:
                centring()
                matmul(centred, wmat, out=result)
            return run
        n, h, wd, c, oh, ow, kh, kw = self.geometry
        p = self.params
        b, r0 = divmod(g0, oh)
        r = g1 - g0
        as_strided = np.lib.stride_tricks.as_strided
        if self.channel_major:
            _, s_c, s_h, s_w = source.strides
            src = as_strided(source[b, :, r0 * p.stride_h:], shape=(c, kh, kw, r, ow),
                             strides=(s_c, s_h * p.dilation_h, s_w * p.dilation_w, s_h * p.stride_h, s_w * p.stride_w),
                             writeable=False)
            item, row = cols.itemsize, cols.strides[0]
            patch = as_strided(cols, shape=(c, kh, kw, r, ow), strides=(kh * kw * row, kw * row, row, ow * item, item))
            matrix = cols[:, :count].T
        else:
            _, s_h, s_w, s_c = source.strides
            src = as_strided(source[b, r0 * p.stride_h:], shape=(r, ow, kh, kw, c),
                             strides=(s_h * p.stride_h, s_w * p.stride_w, s_h * p.dilation_h, s_w * p.dilation_w, s_c),
                             writeable=False)
            patch = cols[:count].reshape(r, ow, kh, kw, c)
            matrix = cols[:count]
        if not self.quantized or self.input_centred or centred_source:
            gather = partial(np.copyto, patch, src)
        else:
            gather = partial(np.subtract, src, self.dtype.type(self.x_zp), out=patch)
        multiply = partial(matmul, matrix, self.wmat, out=result)

        def run() -> None:
            gather()
            multiply()
        return run

    def _epilogue(self, array: ArrayOf, result: np.ndarray, first: int, count: int, g0: int, g1: int) -> Bound:
        """Bias + activation (float) or requantization of one block, into the output (or into the
        image rows g0..g1 of its bordered buffer)."""
        from . import kernels_float as kf
        from . import kernels_quant as kq

        bias, lo, hi = self.bias_t, self.lo, self.hi
        if self.out_padding is not None:
            out = array.padded(self.out)
            top, _, left, _ = self.out_padding
            _, h, w, _ = array(self.out).shape
            if not self.quantized:
                return bound_call(kf.bias_activation_padded, result, bias, lo, hi, out, top, left, h, w, g0, g1)
            return bound_call(kq.requantize_rows_padded, result, bias, self.rq, self.fq, self.exact, self.zero_point,
                              lo, hi, out, self.out_sub, top, left, h, w, g0, g1)
        if not self.quantized:
            return bound_call(kf.bias_activation, result, bias, lo, hi)
        out2 = array(self.out).reshape(self.m, self.units)[first:first + count]
        if self.general is not None:
            return partial(_requantize_general, result, self.bias, *self.general, self.zero_point, lo, hi, out2,
                           self.out_sub)
        return bound_call(kq.requantize_rows, result, bias, self.rq, self.fq, self.exact, self.zero_point, lo, hi,
                          out2, self.out_sub)


def _requantize_general(acc: np.ndarray, bias: np.ndarray, mult: np.ndarray, shift: np.ndarray, zero_point: int,
                        lo: int, hi: int, out: np.ndarray, out_sub: int) -> None:
    """The reference's requantization (int32 saturation included) of exact integer sums, into `out`."""
    v = acc.astype(np.int64)
    v += bias
    np.clip(v, INT32_MIN, INT32_MAX, out=v)
    v = cc.rescale_in_place(v, mult if mult.size > 1 else mult[0], shift if shift.size > 1 else shift[0])
    v += zero_point - out_sub
    np.clip(v, lo - out_sub, hi - out_sub, out=v)
    np.copyto(out, v, casting="unsafe")


register_fast(OperationCode.CONV_2D, data_inputs=(0,), build=Conv,
              supports=lambda ctx: nhwc_only(ctx, cc.conv_layout(ctx, depthwise=False).layout))
register_fast(OperationCode.FULLY_CONNECTED, data_inputs=(0,), build=Conv)
