"""mlts-fast's operation table: one record per operation it compiles, keyed by OperationCode.

The reference kernels (`mlts.runtime.ops`) remain the definition of every operation; a record says
how mlts-fast replaces one behind the same HAL interface: which inputs carry tensor data (every
other input must be a constant), which operand types it takes, any further condition of its own,
and how to build its plan step. Each steps_*.py module registers the operations it implements next
to their step code (`register_fast`); support.py, which imports every steps module, and plan.py
walk this table and name no operation themselves. Adding an operation to mlts-fast is one step
class and one registration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...enums import OperandCode, OperationCode
from ...ops import OperationContext
from .step import PlanNode, Step

FLOAT = frozenset({OperandCode.TENSOR_FLOAT32})
QUANT = frozenset({OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED})
#: the operand types of mlts-fast's kernels (the default of `input_types`)
DATA_TYPES = QUANT | FLOAT

#: a condition of the operation's own, checked once the reference accepts its parameters: None when
#: mlts-fast takes it, else why not
SupportCheck = Callable[[OperationContext], str | None]
#: the operation's step (None: no step at all, e.g. a RESHAPE that is a view of its input)
StepBuilder = Callable[[PlanNode], Step | None]


@dataclass(frozen=True)
class FastOperation:
    """What mlts-fast knows of one operation (see the module docstring)."""

    code: OperationCode
    data_inputs: tuple[int, ...]
    build: StepBuilder
    supports: SupportCheck | None = None
    #: operand types of input 0 it takes
    input_types: frozenset[OperandCode] = DATA_TYPES
    #: operand types of output 0 it takes; None: the type of input 0
    output_types: frozenset[OperandCode] | None = None

    def takes_types(self, in_code: OperandCode, out_code: OperandCode) -> bool:
        outputs = self.output_types if self.output_types is not None else {in_code}
        return in_code in self.input_types and out_code in outputs


_TABLE: dict[OperationCode, FastOperation] = {}


def register_fast(code: OperationCode, *, data_inputs: tuple[int, ...], build: StepBuilder,
                  supports: SupportCheck | None = None, input_types: frozenset[OperandCode] = DATA_TYPES,
                  output_types: frozenset[OperandCode] | None = None) -> None:
    """Add one operation to mlts-fast (called by the steps module that implements it)."""
    if code in _TABLE:
        raise RuntimeError(f"mlts-fast operation {code.name} registered twice")
    _TABLE[code] = FastOperation(code, tuple(data_inputs), build, supports, frozenset(input_types),
                                 None if output_types is None else frozenset(output_types))


def fast_operation(code: OperationCode) -> FastOperation | None:
    """The record of `code`, or None when mlts-fast has no kernel for it."""
    return _TABLE.get(code)


def nhwc_only(ctx: OperationContext, layout_input: int | None) -> str | None:
    """A support check for convolutions and pooling: their NCHW flag (absent = NHWC) must be false."""
    if layout_input is not None and bool(np.asarray(ctx.scalar(layout_input)).item()):
        return "NCHW layout"
    return None
