"""Per-operation profiles of mlts-fast (the HAL's IOperationProfiling).

A profiled run is a normal run of a plan whose workspaces time each bound step: ProfilingPlan stands
in for the plan for one run, the same in everything but `acquire`, which hands out a TimedWorkspace.
Each step's time goes to the operation it implements (Step.op_index); an operation without a step
to run (a RESHAPE or TRANSPOSE that became a view) counts 0. The normal run path is untouched.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from ...hal import HalModel, OperationTime
from .plan import Plan, Workspace
from .step import Step


class TimedWorkspace:
    """A plan's workspace whose run times each step into `times` (operation index -> microseconds)."""

    def __init__(self, workspace: Workspace, times: dict[int, float]) -> None:
        self.workspace = workspace
        self.times = times
        self.inputs = workspace.inputs
        self.outputs = workspace.outputs

    def run(self, deadline_check: Callable[[Step], None] | None = None) -> None:
        clock = time.perf_counter_ns
        for step, call in zip(self.workspace.bound_steps, self.workspace.calls):
            if deadline_check is not None:
                deadline_check(step)
            started = clock()
            call()
            self.times[step.op_index] = self.times.get(step.op_index, 0.0) + (clock() - started) / 1000.0


class ProfilingPlan:
    """`plan` as one profiled run sees it: every attribute is the plan's, and its workspaces are timed."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.times: dict[int, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plan, name)

    def acquire(self) -> TimedWorkspace:
        return TimedWorkspace(self.plan.acquire(), self.times)

    def release(self, ws: TimedWorkspace) -> None:
        self.plan.release(ws.workspace)

    def operation_times(self, model: HalModel) -> list[OperationTime]:
        """One entry per operation of the model's main subgraph, in run order."""
        return [OperationTime(j, op.type, self.times.get(j, 0.0)) for j, op in enumerate(model.main.operations)]
