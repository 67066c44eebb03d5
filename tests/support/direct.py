"""Run one operation's registry entry directly (validate, prepare, execute), bypassing the runtime.

Only for developing kernels before the whole runtime path is wired; real tests use op_runner.run_op.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mlts.runtime.enums import OperationCode
from mlts.runtime.operand_type import OperandType
from mlts.runtime.ops import OperationContext, get_operation

from .op_runner import Const


def run_op_direct(code: OperationCode, inputs: Sequence[tuple[OperandType, Any]],
                  outputs: Sequence[OperandType]) -> list[np.ndarray]:
    op = get_operation(code)
    in_types, values = [], []
    for t, v in inputs:
        if v is None:
            in_types.append(None)
            values.append(None)
            continue
        raw = v.value if isinstance(v, Const) else v
        arr = np.asarray(raw, dtype=t.dtype)
        in_types.append(t.with_dimensions(arr.shape) if t.is_tensor else t)
        values.append(arr)
    common = dict(op_index=0, code=code, output_types=list(outputs),
                  input_operands=list(range(len(inputs))),
                  output_operands=list(range(len(inputs), len(inputs) + len(outputs))))
    op.validate(OperationContext(input_types=[t for t, _ in inputs], input_values=[None] * len(inputs),
                                 phase="validate", **common))
    ctx = OperationContext(input_types=in_types, input_values=values, phase="execute", **common)
    shapes = op.prepare(ctx)
    ctx.output_shapes = shapes
    results = op.execute(ctx)
    for r, s, t in zip(results, shapes, outputs):
        assert tuple(r.shape) == tuple(s), (r.shape, s)
        assert r.dtype == t.dtype, (r.dtype, t.dtype)
    return results
