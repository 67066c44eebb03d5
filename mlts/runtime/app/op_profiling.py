"""Per-operation profiles through the runtime: Execution.compute_profiled.

A profiled computation runs the compilation's plan as compute() does, but each step whose prepared
model implements the HAL's optional IOperationProfiling is sent through execute_profiled instead of
execute_synchronously. The times it reports are per operation of the step's sub-model; they are
mapped back to the application model's operations (the partitioner may have split the model over
several devices). Steps on devices without the extension give no entries.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..enums import OperationCode, ResultCode
from ..hal import ExecutionResult, IOperationProfiling, IPreparedModel, OperationTime, Request
from .execution_plan import Step
from .step_runner import StepRunner


@dataclass(frozen=True)
class OperationProfile:
    """One operation's time in a profiled computation."""

    index: int  # the operation's index in the application's Model (what add_operation returned)
    position: int  # its position in the model's run order (the HAL model's main subgraph)
    type: OperationCode
    device: str  # the device that ran it (the CPU device where a step fell back)
    time_us: float


class _ProfiledCall:
    """A prepared model's execute_profiled where the step runner calls execute_synchronously; keeps the
    operation times the driver reported."""

    def __init__(self, prepared: IOperationProfiling) -> None:
        self.prepared = prepared
        self.times: list[OperationTime] = []

    def execute_synchronously(self, request: Request, measure: bool, deadline: float | None,
                              loop_timeout_ns: int) -> ExecutionResult:
        answer = self.prepared.execute_profiled(request, deadline, loop_timeout_ns)
        if not isinstance(answer, tuple) or len(answer) != 2:
            return ExecutionResult(ResultCode.OP_FAILED, [], message="execute_profiled returned no (result, times)")
        result, times = answer
        self.times = list(times) if isinstance(times, (list, tuple)) else []
        return result


class ProfiledStepRunner(StepRunner):
    """A step runner that collects the operation times of every step it runs into `profile`."""

    def __init__(self, profile: list[OperationProfile], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.profile = profile

    def _call_driver(self, step: Step, prepared: IPreparedModel, request: Request,
                     use_burst: bool) -> ExecutionResult:
        if not isinstance(prepared, IOperationProfiling):
            return super()._call_driver(step, prepared, request, use_burst)
        call = _ProfiledCall(prepared)
        result = super()._call_driver(step, call, request, False)  # type: ignore[arg-type]
        if result.status == ResultCode.NO_ERROR:
            self._record(step, prepared, call.times)
        return result

    def _record(self, step: Step, prepared: IPreparedModel, times: list) -> None:
        """The driver's times as the model's operations; entries that name no operation of the step are
        dropped (a driver's report is not trusted further than that)."""
        whole_model = all(step is not s for s in self.plan.steps)  # the whole-model CPU fallback
        if whole_model:
            self.profile.clear()  # what steps before the failure reported is run again
        ops = step.model.main.operations
        positions = range(len(ops)) if whole_model else step.operations
        device = step.device.name if prepared is step.prepared else self.comp.cpu_device.name
        run_order = self.comp.model._run_order
        for t in times:
            j = getattr(t, "op_index", None)
            us = getattr(t, "time_us", None)
            if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < len(ops) \
                    or isinstance(us, bool) or not isinstance(us, (int, float)) or not math.isfinite(us) or us < 0:
                continue
            position = positions[j]
            self.profile.append(OperationProfile(run_order[position], position, ops[j].type, device, float(us)))
