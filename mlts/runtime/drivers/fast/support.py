"""Which operations mlts-fast takes, and why it refuses the others.

The plan is compiled ahead of time, so the driver takes an operation only when everything the plan
needs is known at preparation: every tensor shape fully specified, every parameter (scalars,
filters, biases, shapes, axes) a constant, NHWC layout, and operand types it has kernels for
(TENSOR_FLOAT32 and 8-bit asymmetric quantized, with per-channel filters). Everything else is
reported unsupported, so the runtime gives it to another device (the reference) instead of the
driver failing. That includes control flow (IF, WHILE): the plan has no way to run a subgraph, so
they fall to the reference or a sample driver.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...cpu_executor import constant_array
from ...enums import OperandCode, OperandLifetime, OperationCode
from ...errors import MltsError
from ...hal import HalModel
from ...ops import OperationContext, ValueUnknown, get_operation

FLOAT = OperandCode.TENSOR_FLOAT32
QUANT = frozenset({OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED})
DATA_TYPES = QUANT | {FLOAT}
DEQUANTIZE_INPUTS = QUANT | {OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL}

#: operation -> indices of its data inputs (the other inputs must be constants)
DATA_INPUTS: dict[OperationCode, tuple[int, ...]] = {
    OperationCode.CONV_2D: (0,),
    OperationCode.DEPTHWISE_CONV_2D: (0,),
    OperationCode.FULLY_CONNECTED: (0,),
    OperationCode.ADD: (0, 1),
    OperationCode.AVERAGE_POOL_2D: (0,),
    OperationCode.MAX_POOL_2D: (0,),
    OperationCode.MEAN: (0,),
    OperationCode.RESHAPE: (0,),
    OperationCode.TRANSPOSE: (0,),
    OperationCode.SOFTMAX: (0,),
    OperationCode.QUANTIZE: (0,),
    OperationCode.DEQUANTIZE: (0,),
    OperationCode.RELU: (0,),
    OperationCode.RELU1: (0,),
    OperationCode.RELU6: (0,),
}
SUPPORTED_OPERATIONS = frozenset(DATA_INPUTS)
_CONSTANT_LIFETIMES = (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE)


def is_constant(model: HalModel, index: int) -> bool:
    return model.main.operands[index].lifetime in _CONSTANT_LIFETIMES


def static_context(model: HalModel, j: int) -> OperationContext:
    """The operation's context as at preparation: types of every operand, values of the constants."""
    sg = model.main
    op = sg.operations[j]
    types: list[Any] = []
    values: list[Any] = []
    for i in op.inputs:
        operand = sg.operands[i]
        if operand.lifetime == OperandLifetime.NO_VALUE:
            types.append(None)
            values.append(None)
            continue
        types.append(operand.type)
        values.append(constant_array(model, operand.type, operand.location) if operand.lifetime in _CONSTANT_LIFETIMES
                      else None)
    return OperationContext(op_index=j, code=op.type, input_types=types,
                            output_types=[sg.operands[o].type for o in op.outputs], input_values=values,
                            input_operands=op.inputs, output_operands=op.outputs, phase="validate",
                            relaxed=model.relax_computation_float32_to_float16)


def _fully_specified(t) -> bool:
    return t.dimensions is not None and all(d > 0 for d in t.dimensions)


def unsupported_reason(model: HalModel, j: int) -> str | None:
    """None when mlts-fast can compile operation `j` of the main subgraph, else why not."""
    sg = model.main
    op = sg.operations[j]
    if op.type not in SUPPORTED_OPERATIONS:
        return "no kernel"
    data = DATA_INPUTS[op.type]
    if not op.inputs or not op.outputs:
        return "malformed"
    for k, i in enumerate(op.inputs):
        operand = sg.operands[i]
        if operand.lifetime == OperandLifetime.NO_VALUE:
            continue
        if k not in data and not is_constant(model, i):
            return f"input {k} is not a constant"
        if operand.type.is_tensor and k in data and not _fully_specified(operand.type):
            return f"input {k} has unknown dimensions"
    for o in op.outputs:
        if not _fully_specified(sg.operands[o].type):
            return "output has unknown dimensions"
    in_code = sg.operands[op.inputs[0]].type.code
    out_code = sg.operands[op.outputs[0]].type.code
    if op.type == OperationCode.QUANTIZE:
        if in_code != FLOAT or out_code not in QUANT:
            return "types"
    elif op.type == OperationCode.DEQUANTIZE:
        if in_code not in DEQUANTIZE_INPUTS or out_code != FLOAT:
            return "types"
    elif in_code not in DATA_TYPES or out_code != in_code:
        return "types"
    if op.type == OperationCode.ADD:
        shapes = {sg.operands[i].type.dimensions for i in (*op.inputs[:2], op.outputs[0])}
        if len(shapes) != 1:
            return "broadcasting"
    ctx = static_context(model, j)
    try:
        if _nchw(ctx, op.type):
            return "NCHW layout"
        shapes = get_operation(op.type).prepare(ctx)
    except (MltsError, ValueUnknown):
        return "parameters the reference refuses at preparation"
    if op.type == OperationCode.DEPTHWISE_CONV_2D and in_code in QUANT:
        from .steps_conv import Requantizer

        if not Requantizer.applicable(ctx, depthwise=True):
            return "accumulator range beyond the vectorized int32 rescale"
    for shape, o in zip(shapes, op.outputs):
        if tuple(shape) != tuple(sg.operands[o].type.dimensions):
            return "output shape differs from the declared one"
    return None


def _nchw(ctx: OperationContext, code: OperationCode) -> bool:
    """The NCHW flag of convolutions and pooling (absent = NHWC)."""
    if code in (OperationCode.CONV_2D, OperationCode.DEPTHWISE_CONV_2D):
        from ...ops._conv_common import conv_layout

        lay = conv_layout(ctx, depthwise=code == OperationCode.DEPTHWISE_CONV_2D)
        index = lay.layout
    elif code in (OperationCode.AVERAGE_POOL_2D, OperationCode.MAX_POOL_2D):
        from ...ops._pool_common import pool_layout

        index = pool_layout(ctx).layout
    else:
        return False
    return index is not None and bool(np.asarray(ctx.scalar(index)).item())
