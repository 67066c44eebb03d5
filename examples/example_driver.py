"""A minimal, complete third-party mlts driver: four float32 operations in plain numpy.

It implements the driver interface of `mlts.runtime.hal` directly: identity, capabilities, which
operations of a model it supports, preparation, and execution of requests whose data lives in memory
pools. It takes ADD, FULLY_CONNECTED, RESHAPE and SOFTMAX on float32 tensors; the runtime's
partitioner gives it those operations and runs the rest of a model on nnapi-reference (the CPU),
carrying the tensors between the two. On MobileNet v1 it runs the classifier head.

Use it without installing anything:

    mlts devices --driver examples/example_driver.py
    mlts devices --driver examples/example_driver.py:create_driver --json

or from Python: `mlts.runtime.app.manager.register_drivers(["examples/example_driver.py"])`.
"""
from __future__ import annotations

import time

import numpy as np

from mlts.runtime import DeviceType, FeatureLevel, FuseCode, MltsError, OperandCode, OperandLifetime, OperationCode
from mlts.runtime import Driver, PreparedModel, ResultCode
from mlts.runtime.hal import Capabilities, ExecutionResult, OutputShape, Timing
from mlts.runtime.hal.validation import validate_hal_model, validate_request

F32 = OperandCode.TENSOR_FLOAT32
SUPPORTED = {OperationCode.ADD, OperationCode.FULLY_CONNECTED, OperationCode.RESHAPE, OperationCode.SOFTMAX}
CONSTANT = (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE)


class ExampleDriver(Driver):
    name = "example-driver"
    version = "1.0"
    feature_level = FeatureLevel.LEVEL_8
    device_type = DeviceType.ACCELERATOR

    def get_capabilities(self) -> Capabilities:
        # Half the CPU reference's time and power for the types it handles; other types are not
        # listed, which declares them infinitely slow, so the partitioner never offers them.
        return Capabilities.uniform(0.5, 0.5, types=[F32, OperandCode.FLOAT32, OperandCode.INT32,
                                                     OperandCode.TENSOR_INT32])

    def get_supported_operations(self, model) -> list[bool]:
        validate_hal_model(model)  # never trust what crosses the HAL
        main = model.main
        return [self._supports(op, main) for op in main.operations]

    @staticmethod
    def _supports(op, subgraph) -> bool:
        if op.type not in SUPPORTED or subgraph.operands[op.inputs[0]].type.code != F32:
            return False
        if op.type == OperationCode.RESHAPE:  # the target shape must be known at preparation
            return subgraph.operands[op.inputs[1]].lifetime in CONSTANT
        return True

    def prepare_model(self, model, preference, priority, deadline, cache) -> PreparedModel:
        if not all(self.get_supported_operations(model)):
            raise MltsError(ResultCode.BAD_DATA, f"{self.name}: the model has operations it does not support")
        return ExamplePreparedModel(model)


class ExamplePreparedModel(PreparedModel):
    def __init__(self, model) -> None:
        self.model = model
        main = model.main
        # Heavy work belongs here, not in the first execution: read every constant once.
        self.constants = {i: _constant(model, operand) for i, operand in enumerate(main.operands)
                          if operand.lifetime in CONSTANT}

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns) -> ExecutionResult:
        """Never raises: every failure is a status, as the interface requires."""
        started = time.perf_counter_ns()
        try:
            in_types = validate_request(request, self.model)
            main = self.model.main
            values = dict(self.constants)
            for index, arg, t in zip(main.input_indexes, request.inputs, in_types):
                values[index] = None if t is None else request.pools[arg.location.pool_index].array(
                    arg.location.offset, t.dtype, t.dimensions if t.is_tensor else ())
            for op in main.operations:
                if deadline is not None and time.monotonic() > deadline:
                    return ExecutionResult(ResultCode.MISSED_DEADLINE_TRANSIENT, [], message="deadline passed")
                args = [values.get(i) for i in op.inputs]
                values[op.outputs[0]] = _run(op.type, args)
            outputs = [np.ascontiguousarray(values[i], np.float32) for i in main.output_indexes]
            shapes = [OutputShape(o.shape, o.nbytes <= arg.location.length) for o, arg in zip(outputs, request.outputs)]
            if not all(s.is_sufficient for s in shapes):
                return ExecutionResult(ResultCode.OUTPUT_INSUFFICIENT_SIZE, shapes, message="output buffer too small")
            for o, arg in zip(outputs, request.outputs):
                request.pools[arg.location.pool_index].array(arg.location.offset, o.dtype, o.shape)[...] = o
            elapsed_us = (time.perf_counter_ns() - started) // 1000
            timing = Timing(elapsed_us, elapsed_us) if measure else Timing()
            return ExecutionResult(ResultCode.NO_ERROR, shapes, timing)
        except MltsError as e:
            return ExecutionResult(e.code, [], message=e.message)
        except Exception as e:
            return ExecutionResult(ResultCode.OP_FAILED, [], message=f"{type(e).__name__}: {e}")


def _constant(model, operand) -> np.ndarray:
    t, loc = operand.type, operand.location
    if operand.lifetime == OperandLifetime.CONSTANT_COPY:
        data = model.operand_values
    else:
        data = model.pools[loc.pool_index].view()
    count = t.element_count() if t.is_tensor else 1
    return np.frombuffer(data, t.dtype, count, loc.offset).reshape(t.dimensions if t.is_tensor else ())


def _activation(x: np.ndarray, code) -> np.ndarray:
    low, high = {FuseCode.NONE: (None, None), FuseCode.RELU: (0.0, None), FuseCode.RELU1: (-1.0, 1.0),
                 FuseCode.RELU6: (0.0, 6.0)}[FuseCode(int(code))]
    return x if low is None else np.clip(x, low, high)


def _run(code: OperationCode, args: list) -> np.ndarray:
    if code == OperationCode.ADD:  # (a, b, fused activation); numpy broadcasting is NNAPI's
        return _activation(np.add(args[0], args[1], dtype=np.float32), args[2])
    if code == OperationCode.FULLY_CONNECTED:  # (input, weights [units, n], bias [units], activation)
        x, w, b, act = args
        y = x.reshape(-1, w.shape[1]).astype(np.float32) @ w.T.astype(np.float32) + b
        return _activation(y.astype(np.float32), act)
    if code == OperationCode.RESHAPE:  # (input, shape with at most one -1)
        return args[0].reshape(tuple(int(d) for d in args[1]))
    if code == OperationCode.SOFTMAX:  # (input, beta, optional axis)
        x, beta = args[0], float(args[1])
        axis = int(args[2]) if len(args) > 2 and args[2] is not None else -1
        z = (x - x.max(axis=axis, keepdims=True)) * beta
        e = np.exp(z, dtype=np.float32)
        return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)
    raise MltsError(ResultCode.OP_FAILED, f"example-driver: no kernel for {code.name}")


def create_driver() -> Driver:
    """The factory mlts calls: `--driver example_driver.py` looks for create_drivers, then create_driver."""
    return ExampleDriver()
