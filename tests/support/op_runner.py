"""Run one NNAPI operation the way a client would, for kernel tests.

`run_op(code, inputs, outputs)` builds a one-operation model through the public API, compiles it
for nnapi-reference only and executes it. Tensor inputs are model inputs unless wrapped in
`Const`; scalars are constants unless wrapped in `Input`; `None` values are omitted optional operands.
`inferred_output_types` builds the same model without running it, for build-time shape inference.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pytest

from mlts.runtime import MltsError, Model, OperandType, OperationCode, ResultCode


@dataclass
class Const:
    value: Any


@dataclass
class Input:
    """A model input even where its type is a scalar; `value` is what run_op feeds (inference ignores it)."""
    value: Any = None


def build_op_model(code: OperationCode, inputs: Sequence[tuple[OperandType, Any]], outputs: Sequence[OperandType],
                   *, relaxed: bool = False) -> tuple[Model, list[int], list[Any]]:
    """The finished one-operation model, its output operand indices and the values to feed its inputs.

    Model building runs NNAPI's build-time checks and shape inference, so tests of either need no execution.
    """
    model = Model()
    model_inputs, feeds = [], []
    op_inputs = []
    for t, v in inputs:
        idx = model.add_operand(t)
        op_inputs.append(idx)
        if v is None:
            model.set_operand_value(idx, None)
        elif isinstance(v, Input):
            model_inputs.append(idx)
            feeds.append(None if v.value is None else np.asarray(v.value, dtype=t.dtype))
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
    return model, out_idx, feeds


def inferred_output_types(code: OperationCode, inputs: Sequence[tuple[OperandType, Any]],
                          outputs: Sequence[OperandType]) -> list[OperandType]:
    """The output types build-time shape inference gives the one-operation model (built, not run)."""
    model, out_idx, _ = build_op_model(code, inputs, outputs)
    return [model.inferred_operand_type(i) for i in out_idx]


def run_op(code: OperationCode, inputs: Sequence[tuple[OperandType, Any]], outputs: Sequence[OperandType],
           *, relaxed: bool = False, device: str = "nnapi-reference") -> list[np.ndarray]:
    from mlts.runtime import Compilation, Execution, devices

    model, _, feeds = build_op_model(code, inputs, outputs, relaxed=relaxed)
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
