"""Element-wise operators of one tensor: the NNAPI unary operations, and decompositions where NNAPI has none.

Direct: Sqrt, Exp, Log, Sin, Abs, Neg, Floor (same-named NNAPI operations; Abs/Neg also on int32),
HardSwish -> HARD_SWISH, LeakyRelu / PRelu -> PRELU, Elu -> ELU (a negative alpha: a SELECTed NEG of
ELU(x, |alpha|)), Reciprocal -> DIV(1, x).
Decomposed: HardSigmoid = MINIMUM(ADD(MUL(x, alpha), beta, fused RELU), 1); Selu = MUL(ELU(x, alpha), gamma);
Softplus = max(x, 0) + log1p(exp(-|x|)), log1p by Goldberg's exact-rounding trick; Erf (see `_erf_parts`);
Gelu = x/2 * (1 + erf(x / sqrt 2)) or, approximate="tanh", x/2 * (1 + TANH(sqrt(2/pi) (x + 0.044715 x^3))).
Every operation works in its input's layout. Quantized (8-bit) forms exist in NNAPI for HARD_SWISH (any output
parameters, within the kernel's scale limit) and PRELU (the slope becomes an 8-bit constant of the input's
type); the others run in float (a QDQ graph keeps them between DEQUANTIZE and QUANTIZE). float16 tensors use
the operations' float16 forms; Erf, Gelu (erf) and Softplus compute in float32 between two CASTs.
"""
from __future__ import annotations

import math

import numpy as np

from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode
from mlts.runtime.ops.hard_swish import hard_swish_params

from ..emitter import FLOAT_CODES
from ..errors import NotQuantizable
from ..ir import Graph, Node, Quant
from .base import OpConverter, all_quantized_same_dtype, register
from .elementwise import broadcast_inputs

F32, F16 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16
BOOL8 = OperandCode.TENSOR_BOOL8

# Erf from float32 NNAPI operations (every step rounded to float32). Error bound: |Erf(x) - erf(x)| <= 2e-7 for
# every float32 x; measured maximum 8.4e-8 (4.5 million points: a 4e-6 grid over [-8, 8] and every float32 in
# +-[0.99, 1.01] around the split), checked by tests/models/test_onnx_import_unary.py.
#   |x| < 1:  erf(x) = x + x * A(x^2)                          (A: degree 6, fit error 5.7e-10 on [0, 1])
#   |x| >= 1: erf(|x|) = 1 - exp(-x^2) * B(1 / (1 + 0.7 |x|))   (B: degree 6 in t, fit weighted by exp(-x^2);
#             bounded as |x| -> inf, where exp(-x^2) -> 0: no clamp is needed, +-inf gives +-1)
# The coefficients (lowest order first) are float32 values of a Lawson-iterated least-squares (minimax) fit to
# erf(x)/x - 1 and erfc(x) exp(x^2) in float64; the float32 evaluation error dominates the fit error.
ERF_SPLIT = 1.0
ERF_P = 0.7
ERF_A = (0.12837915122509003, -0.3761260509490967, 0.11283430457115173, -0.02684859186410904,
         0.005179749336093664, -0.0007942354422993958, 7.647111488040537e-05)
ERF_B = (-0.000646845088340342, 0.4029899537563324, 0.35670000314712524, 0.37174737453460693,
         0.12331856787204742, -0.42066866159439087, 0.1677173674106598)
GELU_TANH_K = math.sqrt(2.0 / math.pi)


class _Ops:
    """Element-wise NNAPI operations on operands of one type `t` (code and dimensions), for decompositions."""

    def __init__(self, ctx, t: OperandType) -> None:
        self.ctx, self.t = ctx, t
        self._consts: dict[float, int] = {}

    def c(self, v: float) -> int:
        if v not in self._consts:
            self._consts[v] = self.ctx.constant(np.asarray([v]), OperandType.tensor(self.t.code, [1]))
        return self._consts[v]

    def _to(self, code: OperationCode, inputs: list[int], into: int | None) -> int:
        if into is None:
            return self.ctx.op(code, inputs, self.t)
        self.ctx.add_op(code, inputs, [into])
        return into

    def binary(self, code: OperationCode, a: int, b: int, fuse: int = FuseCode.NONE, into: int | None = None) -> int:
        return self._to(code, [a, b, self.ctx.int_scalar(fuse)], into)

    def add(self, a, b, **kw) -> int:
        return self.binary(OperationCode.ADD, a, b, **kw)

    def sub(self, a, b, **kw) -> int:
        return self.binary(OperationCode.SUB, a, b, **kw)

    def mul(self, a, b, **kw) -> int:
        return self.binary(OperationCode.MUL, a, b, **kw)

    def div(self, a, b, **kw) -> int:
        return self.binary(OperationCode.DIV, a, b, **kw)

    def unary(self, code: OperationCode, a: int, into: int | None = None) -> int:
        return self._to(code, [a], into)

    def unary_with(self, code: OperationCode, inputs: list[int], into: int | None = None) -> int:
        """A one-tensor operation with scalar parameters (ELU)."""
        return self._to(code, inputs, into)

    def pair(self, code: OperationCode, a: int, b: int, into: int | None = None) -> int:
        """MAXIMUM, MINIMUM (no fused activation)."""
        return self._to(code, [a, b], into)

    def compare(self, code: OperationCode, a: int, b: int) -> int:
        return self.ctx.op(code, [a, b], OperandType.tensor(BOOL8, self.t.dimensions))

    def select(self, mask: int, a: int, b: int, into: int | None = None) -> int:
        return self._to(OperationCode.SELECT, [mask, a, b], into)

    def poly(self, coefs, v: int) -> int:
        """Horner evaluation of sum(coefs[i] * v**i)."""
        r = self.mul(v, self.c(coefs[-1]))
        for k in range(len(coefs) - 2, 0, -1):
            r = self.mul(self.add(r, self.c(coefs[k])), v)
        return self.add(r, self.c(coefs[0]))


def _float_input(node: Node, ctx, max_rank: int | None = 4) -> tuple[int, tuple[int, ...]]:
    """(operand, layout) of a float32/float16 input 0, with a clear error otherwise."""
    x = node.input(0)
    v = ctx.value(x)
    if ctx.is_quantized(x) or v.dtype not in FLOAT_CODES:
        raise ctx.fail(f"{v.dtype.name if v.dtype is not None else 'unknown'} input: NNAPI has this operation for "
                       "float32/float16 only")
    if max_rank is not None and ctx.rank(x) > max_rank:
        raise ctx.fail(f"rank {ctx.rank(x)}: the NNAPI operations used here take at most {max_rank} dimensions")
    return ctx.native(x)


def _work_ops(ctx, op: int) -> tuple[_Ops, int]:
    """Float32 arithmetic on `op` (a float16 operand is CAST to float32 first, for accuracy)."""
    t = ctx.operand_type(op)
    if t.code == F16:
        t = OperandType.tensor(F32, t.dimensions)
        op = ctx.op(OperationCode.CAST, [op], t)
    return _Ops(ctx, t), op


def _finish_work(ctx, f: _Ops, result_fn, out: int) -> None:
    """Write result_fn(into) to `out`, through a float32 temporary and a CAST when `out` is float16."""
    if ctx.operand_type(out).code == f.t.code:
        result_fn(out)
        return
    ctx.add_op(OperationCode.CAST, [result_fn(None)], [out])


def _scalar_like(ctx, code: OperandCode, v: float) -> int:
    """A FLOAT32 or FLOAT16 scalar matching a float tensor type (ELU's alpha)."""
    if code == F32:
        return ctx.float_scalar(v)
    index = ctx.add_operand(OperandType.scalar(OperandCode.FLOAT16))
    ctx.model.set_operand_value(index, np.asarray(v, dtype=np.float16))
    return index


# -- direct NNAPI unary operations -------------------------------------------------------------------
_DIRECT = {"Sqrt": OperationCode.SQRT, "Exp": OperationCode.EXP, "Log": OperationCode.LOG,
           "Sin": OperationCode.SIN, "Abs": OperationCode.ABS, "Neg": OperationCode.NEG,
           "Floor": OperationCode.FLOOR}


@register
class DirectUnaryConverter(OpConverter):
    op_types = tuple(_DIRECT)

    def convert(self, node: Node, ctx) -> None:
        x = node.input(0)
        dtype = ctx.value(x).dtype
        if node.op_type in ("Abs", "Neg") and dtype in (np.dtype(np.int32), np.dtype(np.int64)):
            op, perm = ctx.native(x)  # NNAPI ABS/NEG on TENSOR_INT32
        else:
            op, perm = _float_input(node, ctx, 4 if node.op_type == "Floor" else None)
        ctx.add_op(_DIRECT[node.op_type], [op], [ctx.output(node.outputs[0], perm)])


@register
class ReciprocalConverter(OpConverter):
    op_types = ("Reciprocal",)

    def convert(self, node: Node, ctx) -> None:
        op, perm = _float_input(node, ctx)
        f = _Ops(ctx, ctx.operand_type(op))
        f.div(f.c(1.0), op, into=ctx.output(node.outputs[0], perm))


# -- HardSwish, HardSigmoid ------------------------------------------------------------------------------
@register
class HardSwishConverter(OpConverter):
    op_types = ("HardSwish",)
    quantizable = True

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])
        q_in, q_out = graph.value(node.inputs[0]).quant, graph.value(node.outputs[0]).quant
        if not q_in.per_tensor or hard_swish_params(q_in.s, q_out.s).output_exponent > 0:
            raise NotQuantizable("NNAPI's quantized HARD_SWISH needs input scale / (128 x output scale) < 1")

    def convert(self, node: Node, ctx) -> None:
        x = node.input(0)
        if ctx.is_quantized(x):
            op, perm = ctx.native(x)
        else:
            op, perm = _float_input(node, ctx, None)
        ctx.add_op(OperationCode.HARD_SWISH, [op], [ctx.output(node.outputs[0], perm)])


@register
class HardSigmoidConverter(OpConverter):
    op_types = ("HardSigmoid",)

    def convert(self, node: Node, ctx) -> None:
        alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
        op, perm = _float_input(node, ctx)
        f = _Ops(ctx, ctx.operand_type(op))
        z = f.add(f.mul(op, f.c(alpha)), f.c(beta), fuse=FuseCode.RELU)
        f.pair(OperationCode.MINIMUM, z, f.c(1.0), into=ctx.output(node.outputs[0], perm))


# -- LeakyRelu, PRelu ------------------------------------------------------------------------------------
def quantize_slope(values: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, Quant]:
    """8-bit slope for quantized PRELU. One distinct value is represented exactly (as +-qmax steps of
    |value| / qmax); several use the min/max range including 0."""
    values = np.asarray(values, np.float64)
    info = np.iinfo(dtype)
    distinct = np.unique(values)
    if distinct.size == 1:
        v = float(distinct[0])
        if v == 0.0:
            return np.zeros(values.shape, dtype), Quant.make(1.0, 0, dtype)
        top = info.max  # 127 (int8) or 255 (uint8) steps of |v| / top
        zp = 0 if (info.min < 0 or v > 0) else info.max
        q = zp + (top if v > 0 else -top)
        return np.full(values.shape, q, dtype), Quant.make(abs(v) / top, zp, dtype)
    lo, hi = min(0.0, float(values.min())), max(0.0, float(values.max()))
    scale = (hi - lo) / (info.max - info.min)
    zp = int(np.clip(np.rint(info.min - lo / scale), info.min, info.max))
    q = np.clip(np.rint(values / scale) + zp, info.min, info.max).astype(dtype)
    return q, Quant.make(scale, zp, dtype)


def _real_slope(graph: Graph, name: str) -> np.ndarray | None:
    v = graph.value(name)
    if v.const is None:
        return None
    return v.quant.dequantize(v.const) if v.quant is not None else np.asarray(v.const, np.float64)


def check_slope_precision(graph: Graph, x: str, out: str, slope: np.ndarray) -> None:
    """A slope re-quantized to 8 bits may move the result by at most half an output step."""
    q_x, q_out = graph.value(x).quant, graph.value(out).quant
    q, qs = quantize_slope(slope, q_x.dtype)
    err = float(np.max(np.abs(qs.dequantize(q) - slope), initial=0.0))
    most_negative = q_x.s * (q_x.zp - np.iinfo(q_x.dtype).min)
    if err * most_negative > 0.5 * q_out.s:
        raise NotQuantizable("the slope does not fit 8 bits precisely enough")


class _PreluBase(OpConverter):
    quantizable = True

    def emit(self, node: Node, ctx, slope_name: str | None, slope: np.ndarray | None) -> None:
        """PRELU(x, slope): a computed/already-quantized slope by name, else the real values `slope`."""
        x, y = node.input(0), node.outputs[0]
        quantized = ctx.is_quantized(x)
        if not quantized:
            _float_input(node, ctx, None)
        if slope_name is not None:
            ops, perm = broadcast_inputs(node, ctx, [x, slope_name])
        else:
            op, perm = ctx.native(x)
            t = ctx.operand_type(op)
            rank = ctx.rank(x)
            arr = np.asarray(slope, np.float64)
            arr = np.transpose(arr.reshape((1,) * (rank - arr.ndim) + arr.shape), perm) if rank else arr.reshape(1)
            if quantized:
                q, qs = quantize_slope(arr, ctx.quant_of(x).dtype)
                s_op = ctx.constant(q, ctx.make_type(t.code, q.shape or (1,), qs))
            else:
                s_op = ctx.constant(arr, OperandType.tensor(t.code, arr.shape or (1,)))
            ops = [op, s_op]
        ctx.add_op(OperationCode.PRELU, ops, [ctx.output(y, perm)])


@register
class LeakyReluConverter(_PreluBase):
    op_types = ("LeakyRelu",)

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])

    def convert(self, node: Node, ctx) -> None:
        self.emit(node, ctx, None, np.asarray([float(node.attr("alpha", 0.01))]))


@register
class PReluConverter(_PreluBase):
    op_types = ("PRelu",)
    data_inputs = (0, 1)
    bias_input = 1  # the slope may stay a float constant (or be per-channel): re-quantized per tensor

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])  # a slope of another type is re-quantized
        x, s = graph.value(node.inputs[0]), graph.value(node.inputs[1])
        if x.quant is None or not x.quant.per_tensor:
            raise NotQuantizable("the input must be quantized per tensor")
        if s.quant is not None and s.quant.per_tensor and s.quant.dtype == x.quant.dtype:
            return
        slope = _real_slope(graph, node.inputs[1])
        if slope is None:
            raise NotQuantizable("a computed slope must be quantized like the input")
        check_slope_precision(graph, node.inputs[0], node.outputs[0], slope)

    def convert(self, node: Node, ctx) -> None:
        x, s = node.input(0), node.input(1)
        if ctx.rank(s) > ctx.rank(x):
            raise ctx.fail(f"slope of rank {ctx.rank(s)} does not broadcast to the input of rank {ctx.rank(x)}")
        if not ctx.is_quantized(x):
            if ctx.is_quantized(s):
                raise ctx.fail("a float input with an 8-bit quantized slope")
            return self.emit(node, ctx, s, None)
        q_s = ctx.quant_of(s)
        if ctx.is_quantized(s) and q_s.per_tensor and q_s.dtype == ctx.quant_of(x).dtype:
            return self.emit(node, ctx, s, None)
        slope = _real_slope(ctx.graph, s)
        if slope is None:
            raise ctx.fail("a computed slope must be quantized per tensor like the input")
        self.emit(node, ctx, None, slope)


# -- Elu, Selu ----------------------------------------------------------------------------------------
def _elu(node: Node, ctx, alpha: float, max_rank: int | None, into_output: bool) -> tuple[int, tuple, OperandType]:
    """ELU(x, alpha) (into the node's output when `into_output`), x's layout and type.

    NNAPI ELU is max(0, x) + min(0, alpha (exp(x) - 1)): ONNX's function for alpha >= 0. A negative alpha is
    x < 0 ? -ELU(x, |alpha|) : ELU(x, |alpha|) (exact: a sign change)."""
    if math.isnan(alpha):
        raise ctx.fail("alpha is NaN")
    op, perm = _float_input(node, ctx, max_rank)
    t = ctx.operand_type(op)
    out = ctx.output(node.outputs[0], perm) if into_output else None
    f = _Ops(ctx, t)
    inputs = [op, _scalar_like(ctx, t.code, abs(alpha))]
    if alpha >= 0.0:
        return f.unary_with(OperationCode.ELU, inputs, out), perm, t
    elu = ctx.op(OperationCode.ELU, inputs, t)
    negative = f.compare(OperationCode.LESS, op, f.c(0.0))
    return f.select(negative, f.unary(OperationCode.NEG, elu), elu, into=out), perm, t


@register
class EluConverter(OpConverter):
    op_types = ("Elu",)

    def convert(self, node: Node, ctx) -> None:
        _elu(node, ctx, float(node.attr("alpha", 1.0)), None, True)


@register
class SeluConverter(OpConverter):
    op_types = ("Selu",)

    def convert(self, node: Node, ctx) -> None:
        elu, perm, t = _elu(node, ctx, float(node.attr("alpha", 1.67326319217681884765625)), 4, False)
        f = _Ops(ctx, t)
        gamma = float(node.attr("gamma", 1.05070102214813232421875))
        f.mul(elu, f.c(gamma), into=ctx.output(node.outputs[0], perm))


# -- Erf, Gelu, Softplus ---------------------------------------------------------------------------------
def _erf_parts(f: _Ops, x: int) -> tuple[int, int, int, int]:
    """(|x| < 1 mask, erf(x) for |x| < 1, erfc(|x|) for |x| >= 1, x < 0 mask), see ERF_A / ERF_B.

    erfc(|x|) = exp(-x^2) B(t) is accurate to ~5e-8 absolute, and relatively accurate where it is small, so
    Gelu takes 1 + erf(x) = erfc(|x|) for x <= -1 from it instead of a cancelling 1 - (1 - erfc)."""
    s = f.mul(x, x)
    small_value = f.add(x, f.mul(x, f.poly(ERF_A, s)))
    ax = f.unary(OperationCode.ABS, x)
    t = f.div(f.c(1.0), f.add(f.mul(ax, f.c(ERF_P)), f.c(1.0)))
    erfc = f.mul(f.unary(OperationCode.EXP, f.unary(OperationCode.NEG, s)), f.poly(ERF_B, t))
    small = f.compare(OperationCode.LESS, ax, f.c(ERF_SPLIT))
    negative = f.compare(OperationCode.LESS, x, f.c(0.0))
    return small, small_value, erfc, negative


@register
class ErfConverter(OpConverter):
    op_types = ("Erf",)

    def convert(self, node: Node, ctx) -> None:
        op, perm = _float_input(node, ctx)
        f, x = _work_ops(ctx, op)
        small, small_value, erfc, negative = _erf_parts(f, x)
        r = f.sub(f.c(1.0), erfc)
        large = f.select(negative, f.unary(OperationCode.NEG, r), r)
        _finish_work(ctx, f, lambda into: f.select(small, small_value, large, into=into),
                     ctx.output(node.outputs[0], perm))


@register
class GeluConverter(OpConverter):
    op_types = ("Gelu",)

    def convert(self, node: Node, ctx) -> None:
        approximate = node.attr("approximate", "none")
        if approximate not in ("none", "tanh"):
            raise ctx.fail(f"approximate={approximate!r} is not supported (only 'none' and 'tanh')")
        op, perm = _float_input(node, ctx)
        out = ctx.output(node.outputs[0], perm)
        if approximate == "tanh":  # in the tensor's own type, as TANH has a float16 form
            f = _Ops(ctx, ctx.operand_type(op))
            inner = f.add(op, f.mul(f.mul(f.mul(op, op), op), f.c(0.044715)))
            th = f.unary(OperationCode.TANH, f.mul(inner, f.c(GELU_TANH_K)))
            f.mul(f.mul(op, f.c(0.5)), f.add(th, f.c(1.0)), into=out)
            return
        f, x = _work_ops(ctx, op)
        u = f.mul(x, f.c(1.0 / math.sqrt(2.0)))
        small, small_value, erfc, negative = _erf_parts(f, u)
        one_plus_erf = f.select(small, f.add(small_value, f.c(1.0)),
                                f.select(negative, erfc, f.sub(f.c(2.0), erfc)))
        half_x = f.mul(x, f.c(0.5))
        _finish_work(ctx, f, lambda into: f.mul(half_x, one_plus_erf, into=into), out)


@register
class SoftplusConverter(OpConverter):
    op_types = ("Softplus",)

    def convert(self, node: Node, ctx) -> None:
        op, perm = _float_input(node, ctx)
        f, x = _work_ops(ctx, op)
        e = f.unary(OperationCode.EXP, f.unary(OperationCode.NEG, f.unary(OperationCode.ABS, x)))
        u = f.add(e, f.c(1.0))
        d = f.sub(u, f.c(1.0))
        # log1p(e) = e where 1 + e rounds to 1, else log(u) * e / (u - 1) (exact to a few ulps: Goldberg)
        log1p = f.select(f.compare(OperationCode.EQUAL, d, f.c(0.0)), e,
                         f.div(f.mul(f.unary(OperationCode.LOG, u), e), d))
        positive = f.pair(OperationCode.MAXIMUM, x, f.c(0.0))
        _finish_work(ctx, f, lambda into: f.add(positive, log1p, into=into), ctx.output(node.outputs[0], perm))
