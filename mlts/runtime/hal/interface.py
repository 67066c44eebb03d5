"""The interfaces a driver implements (NNAPI's IDevice, IPreparedModel, IBurst, IExecutionCallback), and
the optional extensions: IReusablePreparedModel and IReusableBurst (NNAPI's createReusableExecution,
returning an IExecution) and IOperationProfiling.

Only the contract lives here: every method is abstract. The default behaviour most drivers want
(asynchronous runs on a thread, bursts and fenced runs over synchronous ones, "not supported" answers)
is in `mlts.runtime.drivers.base`, which the public `Driver` and `PreparedModel` classes come from.
The runtime checks drivers and prepared models against these interfaces, never against the base classes.
"""
from __future__ import annotations

import abc
from typing import Sequence

from ..enums import DeviceType, FeatureLevel, Preference, Priority
from .types import (AllocatedBuffer, BufferDesc, BufferRole, CacheHandles, Capabilities, ExecutionResult,
                    HalModel, OperationTime, Request)


class IExecutionCallback(abc.ABC):
    """The driver's completion notification of an asynchronous execution."""

    @abc.abstractmethod
    def notify(self, result: ExecutionResult) -> None:
        ...

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> ExecutionResult | None:
        """The result, or None if it has not come within `timeout` seconds."""


class IBurst(abc.ABC):
    """Server side of a burst: serves a sequence of requests for one prepared model."""

    @abc.abstractmethod
    def execute(self, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int) -> ExecutionResult:
        ...

    @abc.abstractmethod
    def close(self) -> None:
        ...


class IPreparedModel(abc.ABC):
    """A model prepared by one driver; used by many executions, possibly concurrently. No method raises:
    failures are reported through the result's `status`."""

    @abc.abstractmethod
    def execute_synchronously(self, request: Request, measure: bool, deadline: float | None,
                              loop_timeout_ns: int) -> ExecutionResult:
        """Run one request."""

    @abc.abstractmethod
    def execute(self, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int) -> IExecutionCallback:
        """Asynchronous execution: returns at once; the callback is notified on completion."""

    @abc.abstractmethod
    def configure_execution_burst(self) -> IBurst:
        ...

    @abc.abstractmethod
    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure: bool, deadline: float | None,
                       loop_timeout_ns: int, timeout_after_fence_ns: int | None) -> ExecutionResult:
        """Fenced execution (NNAPI's IPreparedModel::executeFenced).

        `wait_for` are sync fence descriptors (readable = signalled): the request's inputs must not be
        read before all of them are signalled, since whoever signals them may still be writing the inputs.
        `deadline` (absolute, time.monotonic()) bounds the whole call, the wait included;
        `timeout_after_fence_ns` (None: none) bounds the run after the fences signalled; a deadline missed
        while waiting, or the timeout after the fences exceeded, is MISSED_DEADLINE_TRANSIENT. With
        `measure`, `timing` is timingLaunched (call to end) and `fenced_timing` timingFenced (fences
        signalled to end), NO_TIMING otherwise.
        """


class IExecution(abc.ABC):
    """One request bound to a prepared model once (NNAPI AIDL's IExecution): validated and laid out when
    it is created, so that each run does only what depends on that run. The request's pools stay the
    caller's; what they hold is read afresh on every run."""

    @abc.abstractmethod
    def execute_synchronously(self, deadline: float | None) -> ExecutionResult:
        """Run the bound request once (the measure and loop timeout given at creation). Never raises:
        failures are reported through the result's `status`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the execution holds; it is not run again."""


class IReusablePreparedModel(abc.ABC):
    """Optional extension of a prepared model: NNAPI AIDL's IPreparedModel::createReusableExecution. The
    runtime checks isinstance; a reusable Execution then creates one IExecution per step after its first
    successful compute and runs it on later synchronous computes while its bindings are unchanged."""

    @abc.abstractmethod
    def create_reusable_execution(self, request: Request, measure: bool, loop_timeout_ns: int) -> IExecution:
        """Validate `request` (as execute_synchronously would) and bind it. Raises MltsError (BAD_DATA for an
        invalid request, OP_FAILED otherwise); the runtime then keeps sending the request per call."""


class IReusableBurst(abc.ABC):
    """Optional extension of a burst: NNAPI's IBurst::createReusableExecution. A reusable Execution whose
    burst_compute goes through an open burst then runs later burst computes through one IExecution made by
    the burst (so that the burst's own resources still serve them)."""

    @abc.abstractmethod
    def create_reusable_execution(self, request: Request, measure: bool, loop_timeout_ns: int) -> IExecution:
        """As IReusablePreparedModel.create_reusable_execution, for runs through this burst."""


class IOperationProfiling(abc.ABC):
    """Optional extension of a prepared model: per-operation profiles (as TFLite's op profiling and
    onnxruntime's profiler give). A prepared model offers it by also subclassing this interface; the
    runtime checks isinstance and never calls it on the normal execution paths, so timing every
    operation costs nothing there."""

    @abc.abstractmethod
    def execute_profiled(self, request: Request, deadline: float | None,
                         loop_timeout_ns: int) -> tuple[ExecutionResult, list[OperationTime]]:
        """Run one request as execute_synchronously does (timing measured), timing each operation of the
        main subgraph: one OperationTime per operation, in run order, when the run succeeded; an empty
        list otherwise. Never raises: failures are reported through the result's `status`."""


class IDevice(abc.ABC):
    """A device driver: its identity attributes and the calls the runtime makes."""

    name: str = "unnamed-driver"
    version: str = "0.0"
    feature_level: int = FeatureLevel.LEVEL_8
    device_type: DeviceType = DeviceType.OTHER
    #: "in-process" or "service" (out-of-process hosting, see the drivers issue)
    hosting: str = "in-process"

    @abc.abstractmethod
    def get_capabilities(self) -> Capabilities:
        ...

    @abc.abstractmethod
    def get_supported_operations(self, model: HalModel) -> list[bool]:
        """One flag per operation of `model.main`, in order. Must validate the model first."""

    @abc.abstractmethod
    def prepare_model(self, model: HalModel, preference: Preference, priority: Priority,
                      deadline: float | None, cache: CacheHandles | None) -> IPreparedModel:
        """Compile `model`; raise MltsError on failure (the runtime turns it into a ResultCode)."""

    @abc.abstractmethod
    def get_supported_extensions(self) -> list[str]:
        ...

    @abc.abstractmethod
    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        """(model cache files, data cache files); (0, 0) = caching not supported."""

    @abc.abstractmethod
    def prepare_model_from_cache(self, deadline: float | None, cache: CacheHandles) -> IPreparedModel:
        ...

    @abc.abstractmethod
    def allocate(self, desc: BufferDesc, prepared_models: Sequence[IPreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]) -> AllocatedBuffer:
        """Memory domains: allocate an opaque buffer for these roles on models this driver prepared."""

    @abc.abstractmethod
    def wait_for_ready(self) -> None:
        """Block until the driver answers (services); in-process drivers are always ready."""
