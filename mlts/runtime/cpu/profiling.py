"""Per-operation profiles of the CPU executor (the HAL's IOperationProfiling for every kernel driver).

A ProfiledGraph is a prepared graph seen by one profiled run: it shares the graph's prepared state
(constants, kernels) and times each operation of the main subgraph; it can also keep every
operation's outputs, which is how a single-operation profile gets the intermediate values to feed.
The normal run path (PreparedGraph.run) is untouched: profiling costs nothing when not asked for.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..hal import OperationTime, Subgraph
from ..ops.base import SubgraphRunner
from .executor import PreparedGraph


class ProfiledGraph(PreparedGraph):
    """`graph` for one run: operation times in `times` (run order; operations of IF/WHILE bodies count in
    the IF/WHILE that ran them) and, with `keep_values`, every main-subgraph operation's outputs in
    `values` (operand index -> array)."""

    def __init__(self, graph: PreparedGraph, keep_values: bool = False) -> None:
        # Not PreparedGraph.__init__: the graph is prepared already, and its state is shared as it is.
        vars(self).update(vars(graph))
        self.times: list[OperationTime] = []
        self.values: dict[int, np.ndarray] | None = {} if keep_values else None

    def run_operation(self, j: int, op, impl, subgraph: Subgraph, values: dict[int, Any],
                      runner: SubgraphRunner) -> list[np.ndarray]:
        if subgraph is not self.model.main:
            return super().run_operation(j, op, impl, subgraph, values, runner)
        started = time.perf_counter_ns()
        results = super().run_operation(j, op, impl, subgraph, values, runner)
        self.times.append(OperationTime(j, op.type, (time.perf_counter_ns() - started) / 1000.0))
        if self.values is not None:
            self.values.update(zip(op.outputs, results))
        return results
