"""Relu, Clip, Sigmoid, Tanh.

Relu and Clip are usually folded into the producing operation's fused activation by the graph
passes (RELU, RELU1 = [-1, 1], RELU6 = [0, 6]); what is left maps to a standalone RELU/RELU1/RELU6,
a Clip that clips nothing is an identity, and other Clip ranges are not expressible in NNAPI.
Quantized NNAPI activations fix their output quantization (RELU*: the input's; LOGISTIC: 1/256
with zero point 0 or -128; TANH: 1/128 with zero point 128 or 0). RELU* with other ONNX output
parameters is requantized; Sigmoid/Tanh whose QuantizeLinear has other parameters (onnxruntime
writes 1/255 for Sigmoid) run in float between DEQUANTIZE and QUANTIZE (one rounding, not two).
"""
from __future__ import annotations

import math

import numpy as np

from mlts.runtime import FuseCode, OperationCode

from ..errors import NotQuantizable
from ..ir import Graph, Node, Quant
from ._common import alias
from .base import OpConverter, all_quantized_same_dtype, register

FLOAT_MAX = 3.0e38


def clip_range(node: Node, graph: Graph) -> tuple[float, float] | None:
    """(low, high) of a Relu/Clip node (infinite bounds as +-inf); None if the bounds are not constant."""
    if node.op_type == "Relu":
        return 0.0, math.inf
    if node.opset < 11:
        lo, hi = node.attr("min", -math.inf), node.attr("max", math.inf)
    else:
        lo, hi = -math.inf, math.inf
        for i in (1, 2):
            name = node.input(i)
            if name is None:
                continue
            value = graph.const(name)
            if value is None:
                return None
            if i == 1:
                lo = float(np.asarray(value).reshape(-1)[0])
            else:
                hi = float(np.asarray(value).reshape(-1)[0])
    lo = -math.inf if lo <= -FLOAT_MAX else float(lo)
    hi = math.inf if hi >= FLOAT_MAX else float(hi)
    return lo, hi


def fuse_code_for(bounds: tuple[float, float] | None) -> FuseCode | None:
    if bounds == (0.0, math.inf):
        return FuseCode.RELU
    if bounds == (-1.0, 1.0):
        return FuseCode.RELU1
    if bounds == (0.0, 6.0):
        return FuseCode.RELU6
    return None


_RELU_OPS = {FuseCode.RELU: OperationCode.RELU, FuseCode.RELU1: OperationCode.RELU1,
             FuseCode.RELU6: OperationCode.RELU6}


class _Unary(OpConverter):
    quantizable = True
    data_inputs = (0,)

    def check_quantized(self, node: Node, graph: Graph) -> None:
        all_quantized_same_dtype(node, graph, [0])

    def emit(self, node: Node, ctx, code: OperationCode, forced: Quant | None) -> None:
        x = node.input(0)
        op, perm = ctx.native(x)
        if ctx.rank(x) > 4:
            raise ctx.fail(f"rank {ctx.rank(x)}: NNAPI activations take at most 4 dimensions")
        out = ctx.output(node.outputs[0], perm, forced=forced)
        ctx.add_op(code, [op], [out])


@register
class ReluConverter(_Unary):
    op_types = ("Relu", "Clip")

    def convert(self, node: Node, ctx) -> None:
        x = node.input(0)
        bounds = clip_range(node, ctx.graph)
        if bounds is None:
            raise ctx.fail("Clip bounds must be constants")
        if bounds == (-math.inf, math.inf):
            return alias(ctx, node.outputs[0], x)
        dtype = ctx.value(x).dtype
        if dtype is not None and dtype.kind in "iu" and not ctx.is_quantized(x):
            raise ctx.fail(f"{dtype.name} {node.op_type} is not supported (NNAPI activations are float or 8-bit "
                           "quantized)")
        fuse = fuse_code_for(bounds)
        if fuse is not None:
            return self.emit(node, ctx, _RELU_OPS[fuse], ctx.quant_of(x))
        if dtype == np.dtype(np.float32) and bounds[0] < bounds[1]:
            return self.emulate(node, ctx, *bounds)
        raise ctx.fail(f"clip range [{bounds[0]:g}, {bounds[1]:g}] has no NNAPI equivalent (only [0, inf) RELU, "
                       "[-1, 1] RELU1 and [0, 6] RELU6; other float32 ranges are emulated)")

    def emulate(self, node: Node, ctx, lo: float, hi: float) -> None:
        """Other float ranges through the RELU family and exact-enough affine steps:
        [lo, inf): RELU(x - lo) + lo; (-inf, hi]: hi - RELU(hi - x);
        [lo, hi]: c + h * RELU1((x - c) / h) with c = (lo + hi) / 2, h = (hi - lo) / 2."""
        x = node.input(0)
        op, perm = ctx.native(x)
        t = ctx.operand_type(op)

        def const(v: float) -> int:
            return ctx.constant(np.asarray([v], np.float32), t.with_dimensions([1]))

        def binary(code: OperationCode, a: int, b: int, fuse: int = 0, into: int | None = None) -> int:
            if into is None:
                return ctx.op(code, [a, b, ctx.int_scalar(fuse)], t)
            ctx.add_op(code, [a, b, ctx.int_scalar(fuse)], [into])
            return into

        out = ctx.output(node.outputs[0], perm)
        if hi == math.inf:
            binary(OperationCode.ADD, binary(OperationCode.SUB, op, const(lo), FuseCode.RELU), const(lo), into=out)
        elif lo == -math.inf:
            binary(OperationCode.SUB, const(hi), binary(OperationCode.SUB, const(hi), op, FuseCode.RELU), into=out)
        else:
            c, h = (lo + hi) / 2, (hi - lo) / 2
            unit = binary(OperationCode.MUL, binary(OperationCode.SUB, op, const(c)), const(1.0 / h), FuseCode.RELU1)
            binary(OperationCode.ADD, binary(OperationCode.MUL, unit, const(h)), const(c), into=out)


class _FixedOutput(_Unary):
    code: OperationCode

    def nnapi_quant(self, dtype) -> Quant:
        raise NotImplementedError

    def check_quantized(self, node: Node, graph: Graph) -> None:
        super().check_quantized(node, graph)
        q = graph.value(node.outputs[0]).quant
        if not q.same(self.nnapi_quant(q.dtype)):
            raise NotQuantizable(f"output quantization differs from NNAPI's for {self.code.name}")

    def convert(self, node: Node, ctx) -> None:
        forced = None
        if ctx.is_quantized(node.input(0)):
            forced = self.nnapi_quant(ctx.quant_of(node.input(0)).dtype)
        self.emit(node, ctx, self.code, forced)


@register
class SigmoidConverter(_FixedOutput):
    op_types = ("Sigmoid",)
    code = OperationCode.LOGISTIC

    def nnapi_quant(self, dtype) -> Quant:
        return Quant.make(1.0 / 256, -128 if np.dtype(dtype) == np.dtype(np.int8) else 0, dtype)


@register
class TanhConverter(_FixedOutput):
    op_types = ("Tanh",)
    code = OperationCode.TANH

    def nnapi_quant(self, dtype) -> Quant:
        return Quant.make(1.0 / 128, 0 if np.dtype(dtype) == np.dtype(np.int8) else 128, dtype)
