"""The plan's other steps: ADD, pooling, float RELU*, data movement, and the operations it delegates.

Delegated operations (MEAN, QUANTIZE, DEQUANTIZE, quantized RELU*, SOFTMAX along an axis other
than the last) run the reference kernel on the workspace's arrays and copy its result into the
output buffer: they sit at the edges of a network, on small tensors, where agreeing exactly with
the reference matters more than their few microseconds (they allocate per run; nothing else does).
"""
from __future__ import annotations

import numpy as np

from ...enums import OperandCode, OperationCode, ResultCode
from ...ops import OperationContext, get_operation
from ...ops._pool_common import pool_layout, pool_params
from ...ops.arithmetic import add_rescale, rescaled_add_input
from ...ops.quant import QUANT_RANGE, quantized_activation_range
from .operation_table import FLOAT, QUANT, nhwc_only, register_fast
from .step import ArrayOf, Bound, PlanNode, Shape, Step, bound_call
from .steps_conv import float_bounds

DEQUANTIZE_INPUTS = QUANT | {OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL}


class Add(Step):
    """Element-wise ADD of two same-shape tensors, activation fused; quantized through lookup tables."""

    writes_centred = True

    def __init__(self, node: PlanNode) -> None:
        ctx, values, (a, b), out = node.ctx, node.values, node.inputs[:2], node.out
        reads = tuple(i for i in (a, b) if values[i].kind != "const")
        super().__init__(node.index, OperationCode.ADD, reads, (out,))
        self.a, self.b, self.out = a, b, out
        fuse = int(ctx.scalar(2))
        self.quantized = values[out].quantized
        if not self.quantized:
            self.lo, self.hi = float_bounds(fuse)
            self.label = "float32"
            return
        ta, tb, to = ctx.input_type(0), ctx.input_type(1), ctx.output_type(0)
        rescale = add_rescale(ta, tb, to)
        mo, shift = rescale.output
        qmin, qmax = QUANT_RANGE[to.code]
        stored = np.arange(qmin, qmax + 1, dtype=np.int64)
        # Each input's rescaled, shifted value depends on its 256 possible stored values only.
        self.lut_a = rescaled_add_input(stored, ta.zero_point, *rescale.input_a)
        self.lut_b = rescaled_add_input(stored, tb.zero_point, *rescale.input_b)
        self.offset = -qmin
        self.mult, self.left, self.right = int(mo), max(int(shift), 0), max(-int(shift), 0)
        self.zero_point = int(to.zero_point)
        self.lo, self.hi = quantized_activation_range(fuse, to)
        self.value_range = (self.lo, self.hi)
        self.label = "int lookup"
        self._tables: dict[tuple, np.ndarray] = {}

    def _pair_table(self, a_dtype: np.dtype, b_dtype: np.dtype, out_dtype: np.dtype) -> np.ndarray:
        """The output (as stored: `out_sub` taken off) for every pair of stored input values, row
        (a - min a) * 256 + (b - min b), computed once by the element-wise kernel itself."""
        key = (a_dtype, b_dtype, out_dtype, self.out_sub)
        if key not in self._tables:
            from .kernels_quant import add as qadd

            a_all = np.repeat(np.arange(256) + np.iinfo(a_dtype).min, 256).astype(a_dtype)
            b_all = np.tile(np.arange(256) + np.iinfo(b_dtype).min, 256).astype(b_dtype)
            table = np.empty(256 * 256, dtype=out_dtype)
            qadd(a_all, b_all, self.lut_a, self.lut_b, self.offset, self.mult, self.left, self.right,
                 self.zero_point, self.lo, self.hi, table, self.out_sub)
            self._tables[key] = table
        return self._tables[key]

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        a, b, out = array(self.a).reshape(-1), array(self.b).reshape(-1), array(self.out).reshape(-1)
        if not self.quantized:
            from .kernels_float import add

            return bound_call(add, a, b, out, self.lo, self.hi)
        from .kernels_quant import add as qadd
        from .kernels_quant import add_table

        if a.dtype.itemsize == 1 and b.dtype.itemsize == 1 and a.dtype.kind in "iu" and b.dtype.kind in "iu":
            table = self._pair_table(a.dtype, b.dtype, out.dtype)
            return bound_call(add_table, a, b, table, -int(np.iinfo(a.dtype).min), -int(np.iinfo(b.dtype).min), out)
        return bound_call(qadd, a, b, self.lut_a, self.lut_b, self.offset, self.mult, self.left, self.right,
                          self.zero_point, self.lo, self.hi, out, self.out_sub)


class Pool(Step):
    """AVERAGE_POOL_2D / MAX_POOL_2D, NHWC, in one compiled pass."""

    def __init__(self, node: PlanNode) -> None:
        code, ctx, values, x = node.code, node.ctx, node.values, node.x
        super().__init__(node.index, code, (x,), (node.out,))
        self.x, self.out = x, node.out
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

    def __init__(self, node: PlanNode) -> None:
        super().__init__(node.index, node.code, (node.x,), (node.out,))
        self.x, self.out = node.x, node.out
        self.lo, self.hi = self.BOUNDS[node.code]

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

    def __init__(self, node: PlanNode, perm: tuple[int, ...] | None) -> None:
        x = node.x
        super().__init__(node.index, node.code, (x,) if node.values[x].kind != "const" else (), (node.out,))
        self.x, self.out, self.perm = x, node.out, perm
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

    def __init__(self, node: PlanNode) -> None:
        values = node.values
        reads = tuple(i for i in node.inputs if i in values and values[i].kind != "const")
        super().__init__(node.index, node.ctx.code, reads, (node.out,))
        self.static = node.ctx
        self.operands = node.inputs
        self.out = node.out
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


# -- registrations ---------------------------------------------------------------------------------
def _same_shapes(ctx: OperationContext) -> str | None:
    """ADD without broadcasting: both inputs of the output's shape."""
    shapes = {ctx.input_type(0).dimensions, ctx.input_type(1).dimensions, ctx.output_type(0).dimensions}
    return None if len(shapes) == 1 else "broadcasting"


def _nhwc_pool(ctx: OperationContext) -> str | None:
    return nhwc_only(ctx, pool_layout(ctx).layout)


def _relu(node: PlanNode) -> Step:
    """Float RELU* compiled; quantized ones run by the reference kernel."""
    return Delegate(node) if node.values[node.x].quantized else FloatRelu(node)


def _reshape(node: PlanNode) -> Step | None:
    """A view of its input (no step at all), or a copy of a constant input."""
    if node.values[node.x].kind == "const":
        return Copy(node, None)
    node.values[node.out].alias_of = node.x
    return None


def _transpose(node: PlanNode) -> Step:
    ctx = node.ctx
    perm = (tuple(range(len(node.values[node.x].shape)))[::-1] if ctx.is_omitted(1)
            else tuple(int(p) for p in np.asarray(ctx.input(1)).ravel()))
    return Copy(node, perm)


register_fast(OperationCode.ADD, data_inputs=(0, 1), build=Add, supports=_same_shapes)
register_fast(OperationCode.AVERAGE_POOL_2D, data_inputs=(0,), build=Pool, supports=_nhwc_pool)
register_fast(OperationCode.MAX_POOL_2D, data_inputs=(0,), build=Pool, supports=_nhwc_pool)
register_fast(OperationCode.RELU, data_inputs=(0,), build=_relu)
register_fast(OperationCode.RELU1, data_inputs=(0,), build=_relu)
register_fast(OperationCode.RELU6, data_inputs=(0,), build=_relu)
register_fast(OperationCode.RESHAPE, data_inputs=(0,), build=_reshape)
register_fast(OperationCode.TRANSPOSE, data_inputs=(0,), build=_transpose)
register_fast(OperationCode.MEAN, data_inputs=(0,), build=Delegate)
register_fast(OperationCode.QUANTIZE, data_inputs=(0,), build=Delegate, input_types=FLOAT, output_types=QUANT)
register_fast(OperationCode.DEQUANTIZE, data_inputs=(0,), build=Delegate, input_types=DEQUANTIZE_INPUTS,
              output_types=FLOAT)
