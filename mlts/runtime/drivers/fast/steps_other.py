"""The plan's other steps: ADD, pooling, float RELU*, LOGISTIC, data movement (CONCATENATION
included), and the operations it delegates.

CONCATENATION copies each input into its slice of the output; a quantized input whose scale or zero
point differs from the output's goes through a 256-entry table of the reference's requantization.
LOGISTIC repeats the reference's float64 formula with numpy's own ufuncs (so the same float32
results), and quantized, looks up a 256-entry table of the reference kernel's outputs. Neither
allocates per run: table lookups go through an index scratch buffer.

Delegated operations (MEAN, QUANTIZE, DEQUANTIZE, quantized RELU*, SOFTMAX along an axis other
than the last) run the reference kernel on the workspace's arrays and copy its result into the
output buffer: they sit at the edges of a network, on small tensors, where agreeing exactly with
the reference matters more than their few microseconds (they allocate per run; nothing else does).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ...enums import OperandCode, OperationCode, ResultCode
from ...errors import MltsError
from ...ops import OperationContext, get_operation
from ...ops._fp_errors import ignore_fp_errors, restore_fp_errors
from ...ops._pool_common import pool_layout, pool_params
from ...ops.arithmetic import add_rescale, rescaled_add_input
from ...ops.concatenation import requantize_like_nnapi
from ...ops.quant import QUANT_RANGE, quantized_activation_range
from .operation_table import FLOAT, QUANT, nhwc_only, register_fast
from .step import F64, ArrayOf, Bound, PlanNode, Shape, Step, bound_call
from .steps_conv import float_bounds

DEQUANTIZE_INPUTS = QUANT | {OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL}
#: the most tensors a CONCATENATION mlts-fast takes (its data inputs are listed one by one in the table)
CONCATENATION_MAX_INPUTS = 1024


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


def _stored_values(code: OperandCode) -> np.ndarray:
    """Every stored value of an 8-bit type, in the order of their bytes read as uint8 (0..255): a
    table indexed by `x.view(np.uint8)` needs no offset for either signedness."""
    dtype = np.uint8 if code == OperandCode.TENSOR_QUANT8_ASYMM else np.int8
    return np.arange(256, dtype=np.uint8).view(dtype)


def _lookup(table: np.ndarray, x: np.ndarray, index: np.ndarray, out: np.ndarray,
            staged: np.ndarray | None = None) -> Bound:
    """out = table[x] for an 8-bit x, through the intp scratch `index`: np.take with mode 'clip' (the
    indices are in range anyway) writes straight into a contiguous `out` without allocating; a
    strided `out` (a slice of a concatenation) is written through the contiguous scratch `staged`."""
    index = index[:x.size].reshape(x.shape)
    codes = x.view(np.uint8)
    copyto, take = np.copyto, np.take
    if out.flags.c_contiguous:
        def run() -> None:
            copyto(index, codes)
            take(table, index, out=out, mode="clip")
        return run
    assert staged is not None, "a strided output needs a staging buffer"
    staged = staged[:x.size].reshape(x.shape)

    def run_strided() -> None:
        copyto(index, codes)
        take(table, index, out=staged, mode="clip")
        copyto(out, staged)
    return run_strided


class Concatenation(Step):
    """CONCATENATION: each input copied into its slice of the output along the axis; a quantized input
    with other parameters than the output's goes through a table of the reference's requantization
    (`requantize_like_nnapi` of all 256 stored values: the same integers)."""

    def __init__(self, node: PlanNode) -> None:
        ctx, values = node.ctx, node.values
        n = ctx.num_inputs - 1
        self.parts = node.inputs[:n]
        super().__init__(node.index, OperationCode.CONCATENATION,
                         tuple(dict.fromkeys(i for i in self.parts if values[i].kind != "const")), (node.out,))
        self.out = node.out
        self.axis = int(ctx.scalar(n))
        out_t = ctx.output_type(0)
        self.tables: list[np.ndarray | None] = []
        for k in range(n):
            in_t = ctx.input_type(k)
            table = None
            if out_t.code in QUANT:
                stored = _stored_values(in_t.code)
                requantized = requantize_like_nnapi(stored, in_t, out_t)
                if not np.array_equal(requantized.view(np.uint8), stored.view(np.uint8)):
                    table = requantized
            self.tables.append(table)
        self.largest_table_part = max((int(np.prod(values[i].shape)) for i, t in zip(self.parts, self.tables)
                                       if t is not None), default=0)
        #: the slices of the output are strided (not contiguous) when a dimension before the axis exceeds 1
        self.strided = int(np.prod(values[node.out].shape[:self.axis])) > 1
        self.out_dtype = values[node.out].dtype
        rescaled = sum(t is not None for t in self.tables)
        self.label = f"{n} inputs, axis {self.axis}" + (f", {rescaled} requantized" if rescaled else "")

    def scratch(self) -> list[tuple[Shape, np.dtype]]:
        if not self.largest_table_part:
            return []
        specs = [((self.largest_table_part,), np.dtype(np.intp))]
        if self.strided:
            specs.append(((self.largest_table_part,), self.out_dtype))
        return specs

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        out = array(self.out)
        calls: list[Bound] = []
        start = 0
        for i, table in zip(self.parts, self.tables):
            x = array(i)
            size = x.shape[self.axis]
            where = out[(slice(None),) * self.axis + (slice(start, start + size),)]
            start += size
            if table is None:
                calls.append(partial(np.copyto, where, x))
            else:
                calls.append(_lookup(table, x, scratch[0], where, scratch[1] if self.strided else None))
        if len(calls) == 1:
            return calls[0]

        def run() -> None:
            for call in calls:
                call()
        return run


class FloatLogistic(Step):
    """Float32 LOGISTIC: the reference's 1 / (1 + exp(-x)) in float64 with the same numpy ufuncs on
    contiguous buffers (exp out of place, as the reference's), rounded once to float32."""

    def __init__(self, node: PlanNode) -> None:
        super().__init__(node.index, OperationCode.LOGISTIC, (node.x,), (node.out,))
        self.x, self.out = node.x, node.out
        self.size = int(np.prod(node.values[node.x].shape))
        self.label = "float64 inside"

    def scratch(self) -> list[tuple[Shape, np.dtype]]:
        return [((self.size,), F64), ((self.size,), F64)]

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        x, out = array(self.x).reshape(-1), array(self.out).reshape(-1)
        negated, exps = scratch
        copyto, negative, exp, add, divide = np.copyto, np.negative, np.exp, np.add, np.divide

        def run() -> None:
            token = ignore_fp_errors()  # exp overflows to inf for x < -709, as in the reference
            try:
                copyto(negated, x)
                negative(negated, out=negated)
                exp(negated, out=exps)
                add(exps, 1.0, out=exps)
                divide(1.0, exps, out=exps)
                copyto(out, exps, casting="same_kind")
            finally:
                restore_fp_errors(token)
        return run


def logistic_table(ctx: OperationContext) -> np.ndarray:
    """Quantized LOGISTIC's output for every stored input value (indexed by the value's byte), computed
    by the reference kernel itself; raises its MltsError where it refuses the input scale."""
    in_t, out_t = ctx.input_type(0), ctx.output_type(0)
    stored = _stored_values(in_t.code)
    run = OperationContext(op_index=ctx.op_index, code=OperationCode.LOGISTIC,
                           input_types=[in_t.with_dimensions(stored.shape)],
                           output_types=[out_t.with_dimensions(stored.shape)], input_values=[stored],
                           input_operands=(), output_operands=(), phase="execute", relaxed=ctx.relaxed,
                           error_code=ResultCode.OP_FAILED)
    run.output_shapes = [stored.shape]
    return np.ascontiguousarray(get_operation(OperationCode.LOGISTIC).execute(run)[0], dtype=out_t.dtype)


class QuantLogistic(Step):
    """Quantized LOGISTIC: a lookup in the reference kernel's outputs for all 256 stored values."""

    def __init__(self, node: PlanNode) -> None:
        super().__init__(node.index, OperationCode.LOGISTIC, (node.x,), (node.out,))
        self.x, self.out = node.x, node.out
        self.table = logistic_table(node.ctx)
        self.size = int(np.prod(node.values[node.x].shape))
        self.label = "int lookup"

    def scratch(self) -> list[tuple[Shape, np.dtype]]:
        return [((self.size,), np.dtype(np.intp))]

    def bind(self, array: ArrayOf, scratch: list[np.ndarray]) -> Bound:
        return _lookup(self.table, array(self.x), scratch[0], array(self.out))


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


def _concatenation_inputs(ctx: OperationContext) -> str | None:
    n = ctx.num_inputs - 1
    return None if n <= CONCATENATION_MAX_INPUTS else f"more than {CONCATENATION_MAX_INPUTS} inputs"


def _logistic(node: PlanNode) -> Step:
    return QuantLogistic(node) if node.values[node.x].quantized else FloatLogistic(node)


def _logistic_kernel_takes(ctx: OperationContext) -> str | None:
    """Quantized: the reference's integer kernel must accept the input scale (else it fails the
    execution, and so should the model, on the reference)."""
    if ctx.input_code(0) not in QUANT:
        return None
    try:
        logistic_table(ctx)
    except MltsError as e:
        return f"the reference's integer kernel refuses the input: {e.message}"
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
register_fast(OperationCode.CONCATENATION, data_inputs=tuple(range(CONCATENATION_MAX_INPUTS + 1)),
              build=Concatenation, supports=_concatenation_inputs)
register_fast(OperationCode.LOGISTIC, data_inputs=(0,), build=_logistic, supports=_logistic_kernel_takes)
register_fast(OperationCode.MEAN, data_inputs=(0,), build=Delegate)
register_fast(OperationCode.QUANTIZE, data_inputs=(0,), build=Delegate, input_types=FLOAT, output_types=QUANT)
register_fast(OperationCode.DEQUANTIZE, data_inputs=(0,), build=Delegate, input_types=DEQUANTIZE_INPUTS,
              output_types=FLOAT)
