"""LayerNormalization, InstanceNormalization, LRN.

LayerNormalization (opset 17) has no NNAPI operation: it is decomposed over the normalized axes
(mapped through the input's layout, so ConvNeXt's Transpose -> LayerNorm(axis=-1) -> Transpose on
an NHWC-held tensor is a channel normalization of the NHWC operand, with no TRANSPOSE) into
MEAN, SUB, MUL, MEAN, ADD epsilon, RSQRT, MUL, then MUL scale and ADD bias. Its optional Mean and
InvStdDev outputs are the intermediate MEAN and RSQRT results. float16 inputs are computed in
float32 (stash_type 1) between two CASTs, as the operator's function body does.

InstanceNormalization of a 4-D tensor -> INSTANCE_NORMALIZATION in the layout the input already has
(NHWC or NCHW flag). NNAPI's gamma and beta are scalars: uniform per-channel values go there, others
become gamma 1, beta 0 followed by MUL and ADD with per-channel constants. 3-D inputs use the
LayerNormalization decomposition over the spatial axis.

LRN -> LOCAL_RESPONSE_NORMALIZATION along the channel axis of the operand's layout. ONNX sums
floor((size-1)/2) channels below and ceil((size-1)/2) above and divides alpha by size; NNAPI sums a
symmetric radius with alpha per element, so odd sizes map exactly (radius (size-1)/2, alpha/size).
Even sizes (and bias 0, which NNAPI rejects) of 4-D inputs are decomposed in the NHWC or NCHW layout
the input has (CONV_2D's layout flag): the windowed sum of squares is a 1x1 CONV_2D with banded
alpha/size weights and bias `bias`, then POW(-beta) and MUL.
None of the three has a quantized NNAPI form: quantized graphs run them in float.
"""
from __future__ import annotations

import numpy as np

from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode

from .. import layout
from ..ir import Node
from .base import OpConverter, register

NHWC = layout.NHWC
FLOAT_TENSORS = (OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16)


def float_param(ctx, tensor_code: OperandCode, value: float) -> int:
    """A float scalar parameter: FLOAT16 for a TENSOR_FLOAT16 operation, FLOAT32 otherwise (NNAPI's rule)."""
    if tensor_code != OperandCode.TENSOR_FLOAT16:
        return ctx.float_scalar(value)
    index = ctx.add_operand(OperandType.scalar(OperandCode.FLOAT16))
    ctx.model.set_operand_value(index, np.asarray(value, np.float16))
    return index


def _binary(ctx, code: OperationCode, a: int, b: int, t: OperandType, into: int | None = None) -> int:
    inputs = [a, b, ctx.int_scalar(FuseCode.NONE)]
    if into is None:
        return ctx.op(code, inputs, t)
    ctx.add_op(code, inputs, [into])
    return into


def _check_float(ctx, op: int, what: str) -> OperandType:
    t = ctx.operand_type(op)
    if t.code not in FLOAT_TENSORS:
        raise ctx.fail(f"{what} needs a float tensor (NNAPI has no quantized form), got {t.code.name}")
    return t


def normalize(ctx, op: int, nn_axes: list[int], epsilon: float, *, into: int | None = None,
              mean_into: int | None = None, inv_std_into: int | None = None) -> int:
    """(x - mean) * rsqrt(mean((x - mean)^2) + epsilon) over `nn_axes` of operand `op` (float, rank <= 4),
    written into `into` when given. The mean and the inverse standard deviation (reduced dimensions
    kept as 1) are written into `mean_into` / `inv_std_into` when given."""
    t = ctx.operand_type(op)
    reduced = t.with_dimensions([1 if i in nn_axes else d for i, d in enumerate(t.dimensions)])
    axes, keep = ctx.int_tensor(nn_axes), ctx.int_scalar(1)

    def unary(code: OperationCode, inputs: list[int], target: int | None) -> int:
        if target is None:
            return ctx.op(code, inputs, reduced)
        ctx.add_op(code, inputs, [target])
        return target

    mean = unary(OperationCode.MEAN, [op, axes, keep], mean_into)
    centered = _binary(ctx, OperationCode.SUB, op, mean, t)
    squares = _binary(ctx, OperationCode.MUL, centered, centered, t)
    variance = ctx.op(OperationCode.MEAN, [squares, axes, keep], reduced)
    eps = ctx.constant(np.asarray([epsilon], np.float32), t.with_dimensions([1]))
    inv_std = unary(OperationCode.RSQRT, [_binary(ctx, OperationCode.ADD, variance, eps, reduced)], inv_std_into)
    return _binary(ctx, OperationCode.MUL, centered, inv_std, t, into)


def _is_used(ctx, name: str | None) -> bool:
    return bool(name) and (name in ctx.graph.outputs or any(name in n.inputs for n in ctx.graph.nodes))


def _constant_equal(ctx, name: str | None, value: float) -> bool:
    v = ctx.value(name) if name else None
    return v is not None and v.const is not None and bool(np.all(np.asarray(v.const) == value))


def _channel_constant(ctx, values: np.ndarray, rank: int, perm, code: OperandCode) -> int:
    """A per-channel (ONNX axis 1) constant shaped to broadcast against an operand held in layout `perm`."""
    shape = [1] * rank
    shape[1] = values.size
    arr = np.transpose(np.asarray(values, np.float32).reshape(shape), perm)
    return ctx.constant(arr, OperandType.tensor(code, arr.shape))


@register
class LayerNormalizationConverter(OpConverter):
    op_types = ("LayerNormalization",)
    data_inputs = (0, 1, 2)

    def convert(self, node: Node, ctx) -> None:
        x, scale, bias = node.input(0), node.input(1), node.input(2)
        y = node.outputs[0]
        rank = ctx.rank(x)
        if not 1 <= rank <= 4:
            raise ctx.fail(f"rank {rank}: the NNAPI decomposition (MEAN) takes 1 to 4 dimensions")
        axis = int(node.attr("axis", -1))
        if not -rank <= axis < rank:
            raise ctx.fail(f"axis {axis} out of range for rank {rank}")
        axis %= rank
        if int(node.attr("stash_type", 1)) != 1:
            raise ctx.fail(f"stash_type {node.attr('stash_type')} is not supported (only 1: float32 statistics)")
        op, perm = ctx.native(x)
        t = _check_float(ctx, op, "LayerNormalization")
        nn_axes = sorted(layout.nn_axis(perm, a) for a in range(axis, rank))
        stats = [node.outputs[i] if i < len(node.outputs) and _is_used(ctx, node.outputs[i]) else None
                 for i in (1, 2)]
        for name in stats:
            if name is not None and ctx.value(name).dtype != np.dtype(np.float32):
                raise ctx.fail(f"output {name!r} must be float32 (stash_type 1)")
        steps = []  # what follows the normalization, in the input's type
        if not _constant_equal(ctx, scale, 1.0):
            steps.append((OperationCode.MUL, scale))
        if bias is not None and not _constant_equal(ctx, bias, 0.0):
            steps.append((OperationCode.ADD, bias))
        half = t.code == OperandCode.TENSOR_FLOAT16
        if half:  # statistics in float32 (stash_type 1), the result cast back before scale and bias
            op = ctx.op(OperationCode.CAST, [op], OperandType.tensor(OperandCode.TENSOR_FLOAT32, t.dimensions))
        into = [ctx.output(name, perm) if name is not None else None for name in stats]
        last = ctx.output(y, perm) if not steps and not half else None
        result = normalize(ctx, op, nn_axes, float(node.attr("epsilon", 1e-5)), into=last, mean_into=into[0],
                           inv_std_into=into[1])
        if half:
            target = None if steps else ctx.output(y, perm)
            if target is None:
                result = ctx.op(OperationCode.CAST, [result], t)
            else:
                ctx.add_op(OperationCode.CAST, [result], [target])
        for k, (code, name) in enumerate(steps):
            target = ctx.output(y, perm) if k == len(steps) - 1 else None
            result = _binary(ctx, code, result, ctx.broadcast_operand(name, rank, perm), t, target)


@register
class InstanceNormalizationConverter(OpConverter):
    op_types = ("InstanceNormalization",)
    data_inputs = (0, 1, 2)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        rank = ctx.rank(x)
        if rank not in (3, 4):
            raise ctx.fail(f"rank {rank}: only 3-D and 4-D inputs (N, C, spatial...) map to NNAPI")
        epsilon = float(node.attr("epsilon", 1e-5))
        params = []
        for i, what in ((1, "scale"), (2, "B")):
            value = ctx.graph.const(node.input(i))
            if value is None:
                raise ctx.fail(f"input {i} ({what}) must be a constant known at import time")
            params.append(np.asarray(value, np.float32).reshape(-1))
        scale, bias = params
        channels = ctx.shape(x)[1]
        if scale.size != bias.size or (channels is not None and scale.size != channels):
            raise ctx.fail(f"scale ({scale.size}) and B ({bias.size}) must have one value per channel ({channels})")
        uniform = bool(np.all(scale == scale[0]) and np.all(bias == bias[0]))
        op, perm = ctx.native(x)
        if rank == 4:
            if perm not in (NHWC, layout.identity(4)):
                perm = NHWC
                op = ctx.operand(x, perm)
            t = _check_float(ctx, op, "InstanceNormalization")
            gamma, beta = (float(scale[0]), float(bias[0])) if uniform else (1.0, 0.0)
            inputs = [op, float_param(ctx, t.code, gamma), float_param(ctx, t.code, beta),
                      float_param(ctx, t.code, epsilon), ctx.bool_scalar(perm == layout.identity(4))]
            if uniform:
                ctx.add_op(OperationCode.INSTANCE_NORMALIZATION, inputs, [ctx.output(y, perm)])
                return
            result = ctx.op(OperationCode.INSTANCE_NORMALIZATION, inputs, t)
        else:
            t = _check_float(ctx, op, "InstanceNormalization")
            result = normalize(ctx, op, [layout.nn_axis(perm, 2)], epsilon)
        result = _binary(ctx, OperationCode.MUL, result, _channel_constant(ctx, scale, rank, perm, t.code), t)
        _binary(ctx, OperationCode.ADD, result, _channel_constant(ctx, bias, rank, perm, t.code), t,
                ctx.output(y, perm))


@register
class LRNConverter(OpConverter):
    op_types = ("LRN",)

    def convert(self, node: Node, ctx) -> None:
        x, y = node.input(0), node.outputs[0]
        size = node.attr("size")
        if size is None or int(size) < 1:
            raise ctx.fail(f"size must be a positive integer, got {size}")
        size = int(size)
        alpha = np.float32(node.attr("alpha", 1e-4))
        beta = float(node.attr("beta", 0.75))
        bias = float(node.attr("bias", 1.0))
        alpha_over_size = float(alpha / np.float32(size))  # float32, as onnxruntime computes it
        rank = ctx.rank(x)
        if not 2 <= rank <= 4:
            raise ctx.fail(f"rank {rank}: NNAPI LOCAL_RESPONSE_NORMALIZATION takes 2 to 4 dimensions (N, C, ...)")
        op, perm = ctx.native(x)
        t = _check_float(ctx, op, "LRN")
        if size % 2 == 1 and bias != 0.0:
            out = ctx.output(y, perm)
            ctx.add_op(OperationCode.LOCAL_RESPONSE_NORMALIZATION, [
                op, ctx.int_scalar((size - 1) // 2), float_param(ctx, t.code, bias),
                float_param(ctx, t.code, alpha_over_size), float_param(ctx, t.code, beta),
                ctx.int_scalar(layout.nn_axis(perm, 1))], [out])
            return
        self.decompose(node, ctx, size, alpha_over_size, beta, bias)

    def decompose(self, node: Node, ctx, size: int, alpha_over_size: float, beta: float, bias: float) -> None:
        """The asymmetric window as a banded 1x1 CONV_2D over the squares, then x * POW(sum, -beta)."""
        x, y = node.input(0), node.outputs[0]
        why = "an even size" if size % 2 == 0 else "bias 0"
        if ctx.rank(x) != 4:
            raise ctx.fail(f"LRN with {why} (size {size}) is only decomposed for 4-D inputs; NNAPI "
                           "LOCAL_RESPONSE_NORMALIZATION needs an odd size and a nonzero bias")
        channels = ctx.shape(x)[1]
        if channels is None:
            raise ctx.fail(f"LRN with {why} needs a known number of channels")
        op, perm = ctx.native(x)
        if perm != layout.identity(4):
            perm = NHWC
            op = ctx.operand(x, perm)
        t = ctx.operand_type(op)
        below, above = (size - 1) // 2, size // 2
        c = np.arange(channels)
        band = (c[None, :] >= c[:, None] - below) & (c[None, :] <= c[:, None] + above)  # [out, in]
        weights = (band * np.float32(alpha_over_size)).astype(np.float32).reshape(channels, 1, 1, channels)
        f_op = ctx.constant(weights, OperandType.tensor(t.code, weights.shape))
        b_op = ctx.constant(np.full(channels, bias, np.float32), OperandType.tensor(t.code, [channels]))
        squares = _binary(ctx, OperationCode.MUL, op, op, t)
        sums = ctx.op(OperationCode.CONV_2D, [squares, f_op, b_op] + [ctx.int_scalar(v) for v in (0, 0, 0, 0, 1, 1)]
                      + [ctx.int_scalar(FuseCode.NONE), ctx.bool_scalar(perm != NHWC)], t)
        exponent = ctx.constant(np.asarray([-beta], np.float32), t.with_dimensions([1]))
        factor = ctx.op(OperationCode.POW, [sums, exponent], t)
        _binary(ctx, OperationCode.MUL, op, factor, t, ctx.output(y, perm))
