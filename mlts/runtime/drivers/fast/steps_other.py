"""The plan's other steps: ADD, pooling, float RELU*, data movement, and the operations it delegates.

Delegated operations (MEAN, QUANTIZE, DEQUANTIZE, quantized RELU*, SOFTMAX along an axis other
than the last) run the reference kernel on the workspace's arrays and copy its result into the
output buffer: they sit at the edges of a network, on small tensors, where agreeing exactly with
the reference matters more than their few microseconds (they allocate per run; nothing else does).
"""
from __future__ import annotations

import numpy as np

from ...enums import OperationCode, ResultCode
from ...ops import OperationContext, get_operation
from ...ops._pool_common import pool_params
from ...ops.arithmetic import ADD_LEFT_SHIFT
from ...ops.quant import (QUANT_RANGE, multiply_by_quantized_multiplier, quantize_multiplier,
                          quantized_activation_range)
from .step import ArrayOf, Bound, Shape, Step, Value, bound_call
from .steps_conv import float_bounds


def _f32(x: float) -> float:
    return float(np.float32(x))


class Add(Step):
    """Element-wise ADD of two same-shape tensors, activation fused; quantized through lookup tables."""

    writes_centred = True

    def __init__(self, j: int, ctx: OperationContext, values: dict[int, Value], a: int, b: int, out: int) -> None:
        reads = tuple(i for i in (a, b) if values[i].kind != "const")
        super().__init__(j, OperationCode.ADD, reads, (out,))
        self.a, self.b, self.out = a, b, out
        fuse = int(ctx.scalar(2))
        self.quantized = values[out].quantized
        if not self.quantized:
            self.lo, self.hi = float_bounds(fuse)
            self.label = "float32"
            return
        ta, tb, to = ctx.input_type(0), ctx.input_type(1), ctx.output_type(0)
        sa, sb, so = _f32(ta.scale), _f32(tb.scale), _f32(to.scale)
        twice_max_scale = 2.0 * max(sa, sb)
        m1, s1 = quantize_multiplier(sa / twice_max_scale)
        m2, s2 = quantize_multiplier(sb / twice_max_scale)
        mo, shift = quantize_multiplier(twice_max_scale / ((1 << ADD_LEFT_SHIFT) * so))
        qmin, qmax = QUANT_RANGE[to.code]
        stored = np.arange(qmin, qmax + 1, dtype=np.int64)
        # Each input's rescaled, shifted value depends on its 256 possible stored values only.
        self.lut_a = multiply_by_quantized_multiplier((stored - ta.zero_point) << ADD_LEFT_SHIFT, m1, s1)
        self.lut_b = multiply_by_quantized_multiplier((stored - tb.zero_point) << ADD_LEFT_SHIFT, m2, s2)
        self.offset = -qmin
        self.mult, self.left, self.right = int(mo), max(int(shift), 0), max(-int(shift), 0)
        self.zero_point = int(to.zero_point)
        self.lo, self.hi = quantized_activation_range(fuse, to)
        self.value_range = (self.lo, self.hi)
        self.label = "int lookup"

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        a, b, out = array(self.a).reshape(-1), array(self.b).reshape(-1), array(self.out).reshape(-1)
        if not self.quantized:
            from .kernels_float import add

            return bound_call(add, a, b, out, self.lo, self.hi)
        from .kernels_quant import add as qadd

        return bound_call(qadd, a, b, self.lut_a, self.lut_b, self.offset, self.mult, self.left, self.right,
                          self.zero_point, self.lo, self.hi, out, self.out_sub)


class Pool(Step):
    """AVERAGE_POOL_2D / MAX_POOL_2D, NHWC, in one compiled pass."""

    def __init__(self, j: int, code: OperationCode, ctx: OperationContext, values: dict[int, Value],
                 x: int, out: int) -> None:
        super().__init__(j, code, (x,), (out,))
        self.x, self.out = x, out
        p = pool_params(ctx)
        self.is_max = code == OperationCode.MAX_POOL_2D
        self.params = (p.filter_h, p.filter_w, p.stride_h, p.stride_w, p.pad_top, p.pad_left)
        self.channels = values[x].shape[3]
        self.quantized = values[x].quantized
        if self.quantized:
            out_t = ctx.output_type(0)
            self.lo, self.hi = quantized_activation_range(p.fuse, out_t)
            self.signed = out_t.dtype == np.int8
        else:
            self.lo, self.hi = float_bounds(p.fuse)
        self.label = f"{p.filter_h}x{p.filter_w}/{p.stride_h}"

    def scratch(self) -> list[tuple[Shape, np.dtype]]:
        return [((self.channels,), np.dtype(np.int64) if self.quantized else np.dtype(np.float32))]

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        x, out, (acc,) = array(self.x), array(self.out), scratch
        fh, fw, sh, sw, pt, pl = self.params
        if self.quantized:
            from .kernels_quant import pool as qpool

            return bound_call(qpool, x, out, acc, fh, fw, sh, sw, pt, pl, self.is_max, self.signed, self.lo, self.hi)
        from .kernels_float import pool

        return bound_call(pool, x, out, acc, fh, fw, sh, sw, pt, pl, self.is_max, self.lo, self.hi)


class FloatRelu(Step):
    """Float RELU/RELU1/RELU6 with the reference's NaN/inf semantics (np.maximum then np.minimum)."""

    BOUNDS = {OperationCode.RELU: (0.0, None), OperationCode.RELU1: (-1.0, 1.0), OperationCode.RELU6: (0.0, 6.0)}

    def __init__(self, j: int, code: OperationCode, x: int, out: int) -> None:
        super().__init__(j, code, (x,), (out,))
        self.x, self.out = x, out
        self.lo, self.hi = self.BOUNDS[code]

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        x, out = array(self.x), array(self.out)
        lo = np.float32(self.lo)
        hi = None if self.hi is None else np.float32(self.hi)
        maximum, minimum = np.maximum, np.minimum

        def run() -> None:
            maximum(x, lo, out=out)
            if hi is not None:
                minimum(out, hi, out=out)
        return run


class Copy(Step):
    """RESHAPE that cannot be a view (a constant input), and TRANSPOSE: one strided copy."""

    def __init__(self, j: int, code: OperationCode, values: dict[int, Value], x: int, out: int,
                 perm: tuple[int, ...] | None) -> None:
        super().__init__(j, code, (x,) if values[x].kind != "const" else (), (out,))
        self.x, self.out, self.perm = x, out, perm
        self.label = "copy" if perm is None else f"perm {list(perm)}"

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        x, out = array(self.x), array(self.out)
        src = x.reshape(out.shape) if self.perm is None else x.transpose(self.perm)
        copyto = np.copyto

        def run() -> None:
            copyto(out, src)
        return run


class Delegate(Step):
    """A small operation run by the reference kernel on the workspace arrays, result copied out."""

    def __init__(self, j: int, ctx: OperationContext, values: dict[int, Value], operands: tuple[int, ...],
                 out: int) -> None:
        reads = tuple(i for i in operands if i in values and values[i].kind != "const")
        super().__init__(j, ctx.code, reads, (out,))
        self.static = ctx
        self.operands = operands
        self.out = out
        self.label = "reference kernel"

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        s = self.static
        types = [s.input_type(k) for k in range(s.num_inputs)]
        data = set(self.reads)
        inputs = [array(i) if i in data else s.value(k) for k, i in enumerate(self.operands)]
        out = array(self.out)
        ctx = OperationContext(op_index=s.op_index, code=s.code, input_types=types,
                               output_types=[s.output_type(0)], input_values=inputs,
                               input_operands=self.operands, output_operands=(self.out,), phase="execute",
                               relaxed=s.relaxed, error_code=ResultCode.OP_FAILED)
        ctx.output_shapes = [out.shape]
        impl = get_operation(s.code)
        copyto = np.copyto

        def run() -> None:
            copyto(out, impl.execute(ctx)[0].reshape(out.shape), casting="no")
        return run
