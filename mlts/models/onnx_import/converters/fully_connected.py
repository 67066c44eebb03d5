"""Emitting NNAPI FULLY_CONNECTED for Gemm and MatMul (shared by both converters).

FULLY_CONNECTED computes input[batch, K] x weights[N, K]^T + bias, flattening inputs of rank 3 and 4
to [batch, K]; results of other ONNX shapes are RESHAPEd afterwards. Quantized weights with one
scale per output unit (per-channel) have no FULLY_CONNECTED form in NNAPI: they run as an exact
1x1 CONV_2D with a TENSOR_QUANT8_SYMM_PER_CHANNEL filter on the input reshaped to [batch, 1, 1, K].
"""
from __future__ import annotations

import math

import numpy as np

from mlts.runtime import FuseCode, OperandCode, OperandType, OperationCode

from ..ir import Quant
from .conv import quantized_bias, quantized_filter


def fully_connected(ctx, a_op: int, k: int, weights: np.ndarray, w_quant: Quant | None, bias,
                    out_name: str, fuse: int, *, extra_add: int | None = None) -> None:
    """a_op: the input operand [..., K] in ONNX element order; weights [N, K] (float values, or integer
    values with `w_quant`, per-axis along axis 0); bias: None, real values [N], or a float operand."""
    units = weights.shape[0]
    a_type = ctx.operand_type(a_op)
    dims = a_type.dimensions
    count = math.prod(dims) if dims and all(dims) else 0
    rows = count // k if count else 0
    out_value = ctx.value(out_name)
    out_shape = ctx.shape(out_name)
    direct = extra_add is None and len(out_shape) == 2 and tuple(out_shape) == (rows or out_shape[0], units)
    final = ctx.output(out_name) if direct else None
    quantized = w_quant is not None
    out_q = out_value.quant
    if quantized:
        in_code = a_type.code
        per_channel = not w_quant.per_tensor
        data, f_type, w_scales = quantized_filter(weights, w_quant, in_code, 0, 0, (0, 1), ctx)
        b_name = None
        if isinstance(bias, np.ndarray):
            b_name = ctx.graph.add_const(f"{out_name}_bias", np.asarray(bias, np.float64))
        b_op = quantized_bias(ctx, b_name, units, ctx.operand_type(a_op).scale, w_scales, per_channel)
        res_type = ctx.make_type(in_code, [rows, units], out_q)
    else:
        per_channel = False
        f_type = OperandType.tensor(a_type.code, weights.shape)
        data = np.asarray(weights, dtype=np.float32)
        if bias is None:
            b_op = ctx.constant(np.zeros(units, np.float32), OperandType.tensor(a_type.code, [units]))
        elif isinstance(bias, np.ndarray):
            b_op = ctx.constant(np.asarray(bias, np.float32).reshape(units), OperandType.tensor(a_type.code, [units]))
        else:
            b_op = bias
        res_type = OperandType.tensor(a_type.code, [rows, units])
    op_fuse = FuseCode.NONE if extra_add is not None else fuse
    result = final if final is not None else ctx.temp(res_type)
    if per_channel:
        # Exact per-channel form: [rows, K] -> [rows, 1, 1, K] -> 1x1 CONV_2D -> [rows, 1, 1, N].
        f_data = data.reshape(units, 1, 1, k)
        f_op = ctx.constant(f_data, ctx.per_channel_type(f_data.shape, w_quant.scale, 0))
        x4 = ctx.op(OperationCode.RESHAPE, [a_op, ctx.int_tensor([-1, 1, 1, k])],
                    a_type.with_dimensions([rows, 1, 1, k]))
        conv_out = ctx.temp(ctx.make_type(in_code, [rows, 1, 1, units], out_q))
        ctx.add_op(OperationCode.CONV_2D, [x4, f_op, b_op] + [ctx.int_scalar(v) for v in (0, 0, 0, 0, 1, 1)]
                   + [ctx.int_scalar(op_fuse)], [conv_out])
        ctx.add_op(OperationCode.RESHAPE, [conv_out, ctx.int_tensor([-1, units])], [result])
    else:
        f_op = ctx.constant(data, f_type)
        ctx.add_op(OperationCode.FULLY_CONNECTED, [a_op, f_op, b_op, ctx.int_scalar(op_fuse)], [result])
    if final is not None:
        return
    target = ctx.output(out_name)
    if extra_add is not None:  # Gemm with a C that is not a bias vector: broadcasting ADD (rank 2)
        ctx.add_op(OperationCode.ADD, [result, extra_add, ctx.int_scalar(fuse)], [target])
        return
    shape = [(-1 if d is None else d) for d in out_shape] or [1]
    if shape.count(-1) > 1:
        raise ctx.fail(f"output shape {list(out_shape)} has more than one unknown dimension")
    ctx.add_op(OperationCode.RESHAPE, [result, ctx.int_tensor(shape)], [target])


def fc_input(ctx, name: str) -> int:
    """The operand of a FULLY_CONNECTED input in ONNX element order (rank 2 to 4; rank 1 -> [1, K])."""
    rank = ctx.rank(name)
    op = ctx.operand(name)
    if rank == 1:
        t = ctx.operand_type(op)
        return ctx.op(OperationCode.RESHAPE, [op, ctx.int_tensor([1, -1])], t.with_dimensions([1, t.dimensions[0]]))
    if rank > 4:
        raise ctx.fail(f"input of rank {rank}: FULLY_CONNECTED takes ranks 2 to 4")
    return op


def is_vector_bias(c: np.ndarray, units: int) -> bool:
    """Whether C broadcasts along the rows only (shape [N], [1, N] or a single value)."""
    c = np.asarray(c)
    return c.size == 1 or (c.shape[-1] == units and c.size == units)


def as_vector(c: np.ndarray, units: int) -> np.ndarray:
    c = np.asarray(c, dtype=np.float64).reshape(-1)
    return np.full(units, c[0]) if c.size == 1 else c


QUANT_OK = (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)
