"""The reusable execution's lane: a reusable Execution whose plan is one step bound only to the
application's own buffers runs later synchronous computes through one HAL IExecution (NNAPI AIDL's
createReusableExecution), created after its first successful compute.

Everything known once the bindings are fixed (the request, the output views and shapes, the queue, the
record of the driver call) is computed here once; a compute then admits itself to the device's queue,
runs the IExecution and checks the result against the expected shapes by comparison. Anything unusual
in the result (an error, other shapes, malformed timing) is handed to the StepRunner, which applies the
same checks, errors and CPU fallback as the per-call path. Changing any setting drops the lane.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .. import qos
from ..enums import ResultCode
from ..errors import MltsError, bad_state
from ..hal import (NO_TIMING_INFO, ExecutionResult, IExecution, OutputShape, Timing, deadline_from_timeout,
                   is_valid_timing)
from ..drivers.base import reusable_execution
from . import memory as memory_domains
from .step_runner import StepRunner, checked_result

if TYPE_CHECKING:
    from .burst import Burst
    from .execution import Execution

_NO_ERROR = ResultCode.NO_ERROR


def lane_for(execution: Execution, burst: Burst | None = None) -> ReusableLane | None:
    """The lane for an execution that just completed a synchronous compute (or a burst compute through
    `burst`: the lane's runs then go through that burst), or None where its plan, bindings or last run do
    not allow one (the per-call path then stays)."""
    comp = execution.compilation
    plan = comp.plan
    if not execution._reusable or not plan.is_simple or execution._output_shapes is None:
        return None
    step = plan.steps[0]
    sent = execution._requests.get((step.index, id(step.prepared)))
    if sent is None or sent.prepared is not step.prepared:
        return None
    for binding in list(execution._inputs) + list(execution._outputs):
        if binding is None:
            return None
        if binding.omitted:
            continue
        if binding.memory is None or binding.memory.validator is not None or \
                memory_domains.is_device_memory(binding.memory):
            return None  # memories from a MemoryDesc or driver buffers: checked per compute
    shapes = execution._output_shapes
    if any(not s.is_sufficient for s in shapes):
        return None
    measure, loop_timeout = execution._measure, execution._loop_timeout_ns
    try:
        source = step.prepared if burst is None else burst.context(step)
        hal_execution = reusable_execution(source, sent.request, measure, loop_timeout)
    except Exception:  # a driver that cannot bind the request: the per-call path reports what is wrong
        return None
    if not isinstance(hal_execution, IExecution):
        return None
    return ReusableLane(execution, step, sent.request, hal_execution, burst)


class ReusableLane:
    """One IExecution and what a compute through it needs, computed once. It keeps no reference to its
    Execution (which is passed to compute): no cycle keeps either alive after the application drops it."""

    def __init__(self, execution: Execution, step, request, hal_execution: IExecution,
                 burst: Burst | None = None) -> None:
        self.burst = burst  # the burst its runs go through (Execution.burst_compute), or None (compute)
        self.call = "compute" if burst is None else "burst_compute"
        self.step = step
        self.request = request
        self.hal_execution = hal_execution
        comp = execution.compilation
        self.queue = qos.queue_for(step.device)
        self.priority = comp.priority
        self.timeout_ns = execution._timeout_ns
        self.measure = execution._measure
        self.what = f"execution {id(execution):#x} step {step.index}"
        self.device_name = step.device.name
        self.hosting = step.device.hosting
        self.shapes = list(execution._output_shapes)
        self.dimensions = [tuple(s.dimensions) for s in self.shapes]
        self.results = list(execution._results)
        self.pools = list(request.pools)

    def close(self) -> None:
        try:
            self.hal_execution.close()
        except Exception:  # a driver's close failing must not fail the application's setter
            pass

    def compute(self, ex: Execution) -> bool:
        """Execution.compute() (or burst_compute() through the lane's burst) via the IExecution; False
        (nothing done) once a memory of the request has been freed: the per-call path then says what is
        wrong."""
        for pool in self.pools:
            if pool.closed:
                return False
        lock = ex._lock
        lock.acquire()  # not `with`: on this path its __enter__/__exit__ cost as much as the check
        try:
            if ex._state == "computing":
                raise bad_state(f"{self.call}: the execution is running")
            ex._state = "computing"
        finally:
            lock.release()
        started = time.perf_counter_ns()
        try:
            deadline = None if self.timeout_ns is None else deadline_from_timeout(self.timeout_ns)
            try:
                result = qos.run_admitted(self.queue, self.priority, deadline, self.what,
                                          self.hal_execution.execute_synchronously, deadline)
            except MltsError as e:  # refused by the queue (busy, or the deadline passed while waiting)
                result = ExecutionResult(e.code, [], message=e.message)
            except Exception as e:  # the client survives any driver failure
                result = ExecutionResult(ResultCode.OP_FAILED, [], message=f"driver raised {type(e).__name__}: {e}")
            elapsed = time.perf_counter_ns() - started
            if not self._accept(ex, result, elapsed):
                result = checked_result(result)
                ex._calls = [(self.step.index, self.device_name, self.hosting, result, elapsed)]
                ex._output_shapes = None
                ex._timing = Timing()
                ex._fenced_timing = ex._driver_fenced_timing = None
                StepRunner(ex, None, deadline).finish_with(result, self.request)
        except MltsError:
            raise
        except Exception as e:  # nothing but MltsError escapes, as on the per-call path
            raise MltsError(ResultCode.OP_FAILED, f"execution failed: {type(e).__name__}: {e}") from e
        finally:
            ex._wall_ns = time.perf_counter_ns() - started
            ex._state = "completed"  # one attribute store: atomic; the lock guards only the check-and-set above
        return True

    def _accept(self, ex: Execution, result: ExecutionResult, elapsed_ns: int) -> bool:
        """The common case, checked by comparison: success, the shapes of the first run, valid timing."""
        if type(result) is not ExecutionResult or result.status is not _NO_ERROR:
            return False
        shapes = result.output_shapes
        if type(shapes) is not list or len(shapes) != len(self.dimensions):
            return False
        for shape, dims in zip(shapes, self.dimensions):
            if type(shape) is not OutputShape or shape.dimensions != dims or shape.is_sufficient is not True:
                return False
        timing = result.timing
        if timing is not NO_TIMING_INFO and not is_valid_timing(timing):
            return False
        if result.fenced_timing is not None:
            return False
        ex._output_shapes = list(self.shapes)
        ex._results = list(self.results)
        ex._timing = timing
        ex._fenced_timing = None
        ex._driver_fenced_timing = None
        ex._calls = [(self.step.index, self.device_name, self.hosting, result, elapsed_ns)]
        return True
