"""Run one NNAPI operation the way a client would, for kernel tests.

`run_op(code, inputs, outputs)` builds a one-operation model through the public API, compiles it
for nnapi-reference only and executes it. Tensor inputs are model inputs unless wrapped in
`Const`; scalars are always constants; `None` values are omitted optional operands.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pytest

from mlts.runtime import MltsError, OperandType, OperationCode, ResultCode


@dataclass
class Const:
    value: Any


def run_op(code: OperationCode, inputs: Sequence[tuple[OperandType, Any]], outputs: Sequence[OperandType],
           *, relaxed: bool = False, device: str = "nnapi-reference") -> list[np.ndarray]:
    from mlts.runtime import Compilation, Execution, Model, devices

    model = Model()
    model_inputs, feeds = [], []
    op_inputs = []
    for t, v in inputs:
        idx = model.add_operand(t)
        op_inputs.append(idx)
        if v is None:
            model.set_operand_value(idx, None)
        elif isinstance(v, Const) or t.is_scalar:
            raw = v.value if isinstance(v, Const) else v
            model.set_operand_value(idx, np.asarray(raw, dtype=t.dtype))
        else:
            model_inputs.append(idx)
            feeds.append(np.asarray(v, dtype=t.dtype))
    out_idx = [model.add_operand(t) for t in outputs]
    model.add_operation(code, op_inputs, out_idx)
    model.identify_inputs_and_outputs(model_inputs, out_idx)
    model.relax_computation_float32_to_float16(relaxed)
    model.finish()
    dev = [d for d in devices() if d.name == device]
    compilation = Compilation.for_devices(model, dev)
    compilation.finish()
    execution = Execution(compilation)
    for i, arr in enumerate(feeds):
        execution.set_input(i, arr)
    execution.compute()
    return [execution.get_output(i) for i in range(len(outputs))]


def expect_error(code: OperationCode, inputs: Sequence[tuple[OperandType, Any]], outputs: Sequence[OperandType],
                 *words: str, result: ResultCode = ResultCode.BAD_DATA) -> str:
    """run_op must fail with `result`, its message naming the operation and every one of `words`."""
    with pytest.raises(MltsError) as info:
        run_op(code, inputs, outputs)
    assert info.value.code == result, str(info.value)
    assert code.name in str(info.value)
    for w in words:
        assert w in str(info.value), str(info.value)
    return str(info.value)
