"""The default behaviour of a driver, over the HAL interfaces (as AOSP's sample driver base does).

A driver subclasses `Driver` and `PreparedModel` and implements what its device does; everything else
has a default here: asynchronous runs on a thread, bursts forwarded to synchronous runs, fenced runs
that wait on the fences and then run synchronously, and "not supported" answers for extensions,
compilation caching and memory domains. These are the classes `mlts.runtime` exports.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable, Sequence

from ..enums import ResultCode
from ..errors import MltsError
from ..hal.interface import (IBurst, IDevice, IExecution, IExecutionCallback, IPreparedModel, IReusableBurst,
                             IReusablePreparedModel)
from ..hal.sync_fence import wait_all
from ..hal.types import (NO_TIMING_INFO, AllocatedBuffer, BufferDesc, BufferRole, CacheHandles, ExecutionResult,
                         Request, deadline_from_timeout, failed_result, fenced_timings)
from ..hal.validation import validate_fence_fds, validate_timeout_after_fence


class ExecutionCallback(IExecutionCallback):
    """A threading.Event carrying the result."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: ExecutionResult | None = None

    def notify(self, result: ExecutionResult) -> None:
        self._result = result
        self._done.set()

    def wait(self, timeout: float | None = None) -> ExecutionResult | None:
        self._done.wait(timeout)
        return self._result


class BurstContext(IBurst, IReusableBurst):
    """A burst that simply forwards each request to synchronous runs of its prepared model."""

    def __init__(self, prepared: IPreparedModel) -> None:
        self.prepared = prepared

    def execute(self, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int) -> ExecutionResult:
        return self.prepared.execute_synchronously(request, measure, deadline, loop_timeout_ns)

    def create_reusable_execution(self, request: Request, measure: bool, loop_timeout_ns: int) -> IExecution:
        """The prepared model's own reusable execution while this burst only forwards to it; a burst that
        changes execute gets runs through that execute."""
        if type(self).execute is BurstContext.execute and isinstance(self.prepared, IReusablePreparedModel):
            return self.prepared.create_reusable_execution(request, measure, loop_timeout_ns)
        return DefaultExecution(self, request, measure, loop_timeout_ns, run=self.execute)

    def close(self) -> None:
        pass


class DefaultExecution(IExecution):
    """A reusable execution that sends its request to `execute_synchronously` on every run (what a
    prepared model without its own createReusableExecution offers, as AOSP's adapters do)."""

    def __init__(self, prepared: IPreparedModel | IBurst, request: Request, measure: bool, loop_timeout_ns: int,
                 run: Callable[..., ExecutionResult] | None = None) -> None:
        self.prepared = prepared
        self.request = request
        self.measure = measure
        self.loop_timeout_ns = loop_timeout_ns
        #: what runs the request: the prepared model's execute_synchronously, or a burst's execute
        self.run = run if run is not None else prepared.execute_synchronously

    def execute_synchronously(self, deadline: float | None) -> ExecutionResult:
        try:
            return self.run(self.request, self.measure, deadline, self.loop_timeout_ns)
        except Exception as e:  # executions report failures in their result, as the HAL says
            return failed_result(e, "execute_synchronously: the execution raised")

    def close(self) -> None:
        self.prepared = self.request = self.run = None


def reusable_execution(source: IPreparedModel | IBurst, request: Request, measure: bool,
                       loop_timeout_ns: int) -> IExecution:
    """A prepared model's or a burst's own createReusableExecution, or a DefaultExecution over its per-run
    call (execute_synchronously, or the burst's execute) when it has none: what a client binds."""
    if isinstance(source, (IReusablePreparedModel, IReusableBurst)):
        return source.create_reusable_execution(request, measure, loop_timeout_ns)
    run = source.execute if isinstance(source, IBurst) else source.execute_synchronously
    return DefaultExecution(source, request, measure, loop_timeout_ns, run=run)


class PreparedModel(IPreparedModel, IReusablePreparedModel):
    """A prepared model with every execution path built over `execute_synchronously`."""

    def create_reusable_execution(self, request: Request, measure: bool, loop_timeout_ns: int) -> IExecution:
        """Validation stays per run (a driver that can validate once overrides this)."""
        return DefaultExecution(self, request, measure, loop_timeout_ns)

    def execute(self, request: Request, measure: bool, deadline: float | None,
                loop_timeout_ns: int) -> ExecutionCallback:
        callback = ExecutionCallback()

        def run() -> None:
            callback.notify(self.execute_synchronously(request, measure, deadline, loop_timeout_ns))

        threading.Thread(target=run, name="mlts-async-execution", daemon=True).start()
        return callback

    def configure_execution_burst(self) -> IBurst:
        return BurstContext(self)

    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure: bool, deadline: float | None,
                       loop_timeout_ns: int, timeout_after_fence_ns: int | None) -> ExecutionResult:
        """Waits here, then runs execute_synchronously; a driver whose device can wait on the fences
        itself overrides it."""
        launched = time.perf_counter_ns()
        try:
            fds = validate_fence_fds(wait_for, "execute_fenced")
            after_fence = validate_timeout_after_fence(timeout_after_fence_ns, "execute_fenced")
        except MltsError as e:
            return ExecutionResult(e.code, [], message=e.message)
        try:
            signalled = wait_all(fds, None if deadline is None else max(0.0, deadline - time.monotonic()))
        except (OSError, ValueError) as e:
            return ExecutionResult(ResultCode.BAD_DATA, [], message=f"execute_fenced: waiting on wait_for: {e}")
        if not signalled:
            return ExecutionResult(ResultCode.MISSED_DEADLINE_TRANSIENT, [],
                                   message="execute_fenced: the deadline passed while waiting for the sync fences")
        fenced = time.perf_counter_ns()
        after_deadline = deadline_from_timeout(after_fence)
        by_fence_timeout = after_deadline is not None and (deadline is None or after_deadline < deadline)
        run_deadline = after_deadline if by_fence_timeout else deadline
        try:
            result = self.execute_synchronously(request, measure, run_deadline, loop_timeout_ns)
        except Exception as e:  # executions report failures in their result, as the HAL says
            return failed_result(e, "execute_fenced: the execution raised")
        if not isinstance(result, ExecutionResult):
            return ExecutionResult(ResultCode.OP_FAILED, [], message="execute_fenced: the execution returned no result")
        if by_fence_timeout and result.status == ResultCode.MISSED_DEADLINE_PERSISTENT:
            # what was missed is the time allowed after the fences: executeFenced reports it as transient
            result = dataclasses.replace(result, status=ResultCode.MISSED_DEADLINE_TRANSIENT)
        if not measure or result.status != ResultCode.NO_ERROR:
            return dataclasses.replace(result, timing=NO_TIMING_INFO, fenced_timing=NO_TIMING_INFO)
        launched_timing, fenced_timing = fenced_timings(result.timing, launched, fenced, time.perf_counter_ns())
        return dataclasses.replace(result, timing=launched_timing, fenced_timing=fenced_timing)


class Driver(IDevice):
    """A driver without extensions, compilation caching or memory domains until it overrides them."""

    def get_supported_extensions(self) -> list[str]:
        return []

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return (0, 0)

    def prepare_model_from_cache(self, deadline: float | None, cache: CacheHandles) -> IPreparedModel:
        raise MltsError(ResultCode.OP_FAILED, f"{self.name} does not support compilation caching")

    def allocate(self, desc: BufferDesc, prepared_models: Sequence[IPreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]) -> AllocatedBuffer:
        """Drivers without memory domains refuse (OP_FAILED), and the runtime falls back to shared memory."""
        raise MltsError(ResultCode.OP_FAILED, f"{self.name} does not support memory domains")

    def wait_for_ready(self) -> None:
        pass
