"""Which operations mlts-fast takes, and why it refuses the others.

The plan is compiled ahead of time, so the driver takes an operation only when everything the plan
needs is known at preparation: every tensor shape fully specified, every parameter (scalars,
filters, biases, shapes, axes) a constant, NHWC layout, and operand types it has kernels for
(TENSOR_FLOAT32 and 8-bit asymmetric quantized, with per-channel filters). Everything else is
reported unsupported, so the runtime gives it to another device (the reference) instead of the
driver failing. That includes control flow (IF, WHILE): the plan has no way to run a subgraph, so
they fall to the reference or a sample driver.

The conditions common to every operation are checked here; what is particular to one (its data
inputs, operand types, layout or range conditions) comes from its record in the operation table.
"""
from __future__ import annotations

from typing import Any

from ...hal.types import constant_array
from ...enums import OperandLifetime
from ...errors import MltsError
from ...hal import HalModel
from ...ops import OperationContext, ValueUnknown, get_operation
from . import steps_conv, steps_depthwise, steps_other, steps_softmax
from .operation_table import fast_operation

#: the modules that register mlts-fast's operations (importing them here completes the table)
STEP_MODULES = (steps_conv, steps_depthwise, steps_other, steps_softmax)
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
    record = fast_operation(op.type)
    if record is None:
        return "no kernel"
    data = record.data_inputs
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
    if not record.takes_types(sg.operands[op.inputs[0]].type.code, sg.operands[op.outputs[0]].type.code):
        return "types"
    ctx = static_context(model, j)
    try:
        shapes = get_operation(op.type).prepare(ctx)
        reason = record.supports(ctx) if record.supports is not None else None
    except (MltsError, ValueUnknown):
        return "parameters the reference refuses at preparation"
    if reason is not None:
        return reason
    for shape, o in zip(shapes, op.outputs):
        if tuple(shape) != tuple(sg.operands[o].type.dimensions):
            return "output shape differs from the declared one"
    return None
