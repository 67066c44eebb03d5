"""Measuring the runtime's own overhead: the probe model (one ADD of two 1x4 float32 tensors, which costs
a driver almost nothing) and the count of Python function calls one compute makes, the measure of the hot
path that does not depend on the machine's speed (tests/runtime/test_hot_path.py guards it;
benchmarks/runtime_overhead.py reports it with timings against onnxruntime)."""
from __future__ import annotations

import gc
import sys
from typing import Callable

import numpy as np

from mlts.runtime import FuseCode, Model, OperandCode, OperandType, OperationCode

PROBE_SHAPE = (1, 4)


def add_model(shape: tuple[int, ...] = PROBE_SHAPE) -> Model:
    """A finished model: inputs a, b; output a + b (float32, no activation)."""
    t = OperandType(OperandCode.TENSOR_FLOAT32, shape)
    m = Model()
    a, b = m.add_operand(t), m.add_operand(t)
    act = m.add_operand(OperandType(OperandCode.INT32))
    out = m.add_operand(t)
    m.set_operand_value(act, np.int32(FuseCode.NONE))
    m.add_operation(OperationCode.ADD, [a, b, act], [out])
    m.identify_inputs_and_outputs([a, b], [out])
    m.finish()
    return m


def python_calls(call: Callable[[], object], *, within: str | None = None) -> int:
    """Python-level function calls (generators and lambdas included; C functions not) made by `call()`,
    not counting `call` itself; with `within`, only calls of functions whose file path contains it (e.g.
    the mlts package, so that a count does not move with the Python version's own library)."""
    count = 0
    outermost = True

    def profile(frame, event, arg) -> None:
        nonlocal count, outermost
        if event != "call":
            return
        if outermost:  # call() itself
            outermost = False
            return
        if within is None or within in frame.f_code.co_filename:
            count += 1

    previous = sys.getprofile()
    collecting = gc.isenabled()
    gc.disable()  # a collection would run finalizers (weakref.finalize callbacks) inside the count
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
        if collecting:
            gc.enable()
    return count
