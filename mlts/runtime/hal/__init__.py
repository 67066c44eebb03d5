"""The driver interface (HAL): the only way the runtime talks to any driver, the reference one included.

Shaped after NNAPI's HAL 1.3 / AIDL: a driver reports capabilities and supported operations,
prepares a model into a prepared model, and the prepared model executes Requests whose data lives
in memory pools. `types` is the plain data that crosses a process boundary, `interface` the abstract
calls, `validation` NNAPI's checks of what crosses it, `memory` the pools and `sync_fence` the fences.
This package imports only the runtime's vocabulary (enums, errors, operand types) and the operation
registry (to validate operations); never the application runtime or a driver.
"""
from .interface import (IBurst, IDevice, IExecution, IExecutionCallback, IOperationProfiling, IPreparedModel,
                        IReusableBurst, IReusablePreparedModel)
from .types import (NO_TIMING_INFO, AllocatedBuffer, BufferDesc, BufferRole, BufferToken, CacheHandles, CallTiming,
                    Capabilities, DataLocation, DeviceBuffer, ExecutionResult, HalModel, HalOperand, HalOperation,
                    OperationTime, OutputShape, PerformanceInfo, Request, RequestArgument, Subgraph, Timing,
                    constant_array, deadline_from_timeout, failed_result, fenced_timings, is_valid_timing)

__all__ = [
    "AllocatedBuffer", "BufferDesc", "BufferRole", "BufferToken", "CacheHandles", "CallTiming", "Capabilities",
    "DataLocation", "DeviceBuffer", "ExecutionResult", "HalModel", "HalOperand", "HalOperation", "IBurst", "IDevice",
    "IExecution", "IExecutionCallback", "IOperationProfiling", "IPreparedModel", "IReusableBurst", "IReusablePreparedModel",
    "NO_TIMING_INFO", "OperationTime", "OutputShape",
    "PerformanceInfo", "Request", "RequestArgument", "Subgraph", "Timing", "constant_array", "deadline_from_timeout",
    "failed_result", "fenced_timings", "is_valid_timing",
]
