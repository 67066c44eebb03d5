"""A prepared graph bound to one request (a reusable execution's runs, NNAPI AIDL's IExecution).

The executor runs NNAPI's prepare for every operation on every run: shape inference and validation,
which depend on the operands' types and on the values prepare reads. With a request bound, the model's
input types are fixed, so on the first run the prepare of each operation is recorded with the inputs whose
values it read; when every such input is a constant of the model, nothing prepare depends on can change
and later runs reuse its shapes, calling only the kernels (their outputs still checked against the
shapes and dtypes). A graph with any operation whose prepare read a run-time value, or with control
flow, is run by the executor as usual on every run.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from .. import vlog
from ..enums import OperandLifetime, ResultCode
from ..errors import MltsError, error_from_exception
from ..operand_type import OperandType
from ..ops import OperationContext
from .executor import PreparedGraph, between_operations, checked_results

CONSTANT_LIFETIMES = (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE)


class _RecordingContext(OperationContext):
    """An execute-phase context that notes the inputs whose values are read before the output shapes are
    set, i.e. by prepare: every accessor reads `_values`, which records its reads."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reads: set[int] = set()
        self._values = _RecordedValues(self._values, self)


class _RecordedValues(list):
    """A context's input values, noting each index read while its prepare runs."""

    def __init__(self, values: list, ctx: _RecordingContext) -> None:
        super().__init__(values)
        self.ctx = ctx

    def __getitem__(self, i: Any) -> Any:
        if self.ctx.output_shapes is None:
            self.ctx.reads.add(i)
        return super().__getitem__(i)


class _BoundOperation(NamedTuple):
    """One operation as its first run prepared it (its context, reused with new values each run), with
    the temporaries to free after it."""

    context: OperationContext
    impl: Any
    inputs: list[int]
    in_values: list  # the context's input values list, refilled in place for each run
    outputs: list[int]
    out_types: list[OperandType]
    shapes: list
    checks: list[tuple[tuple[int, ...], np.dtype]]
    drop: list[int]
    where: str


class BoundGraph:
    """`graph`'s main subgraph run again and again on the inputs of one request (see the module doc)."""

    def __init__(self, graph: PreparedGraph) -> None:
        self.graph = graph
        #: None until the first run; then the bound operations, or False when the graph cannot be bound
        self.operations: list[_BoundOperation] | None | bool = None if not graph.model.referenced else False

    def run(self, inputs: Sequence[np.ndarray | None], *, deadline: float | None, loop_timeout_ns: int | None,
            checkpoint: Callable[[], None] | None) -> list[np.ndarray]:
        operations = self.operations
        if operations is False:
            return self.graph.run(inputs, deadline=deadline, loop_timeout_ns=loop_timeout_ns, checkpoint=checkpoint)
        if operations is None:
            if vlog.is_on("cpuexe"):  # per-operation logs: the executor's own runs, always
                self.operations = False
                return self.graph.run(inputs, deadline=deadline, loop_timeout_ns=loop_timeout_ns,
                                      checkpoint=checkpoint)
            return self._first_run(inputs, deadline, loop_timeout_ns, checkpoint)
        subgraph = self.graph.model.main
        values: dict[int, Any] = dict(self.graph.constants[0])
        values.update(zip(subgraph.input_indexes, inputs))
        # Python calls cost about a microsecond each on this path: what they would do is inline here
        for ctx, impl, op_inputs, in_values, op_outputs, out_types, shapes, checks, drop, where in operations:
            if deadline is not None:
                between_operations(deadline, checkpoint, ctx.op_index, ctx.code)
            elif checkpoint is not None:  # between_operations without a deadline: the checkpoint alone
                checkpoint()
            in_values[:] = map(values.get, op_inputs)  # the context's own input values, in place
            try:
                results = impl.execute(ctx)
            except MltsError:
                raise
            except Exception as e:
                raise error_from_exception(e, f"{where} failed") from None
            # the common case, by comparison: a list of arrays of exactly the prepared shapes and dtypes
            prepared = type(results) is list and len(results) == len(checks)
            if prepared:
                for r, (shape, dtype) in zip(results, checks):
                    if type(r) is not np.ndarray or r.shape != shape or r.dtype != dtype:
                        prepared = False
                        break
            if not prepared:
                results = checked_results(where, results, shapes, out_types)
            values.update(zip(op_outputs, results))
            for i in drop:
                values.pop(i, None)
        return list(map(values.__getitem__, subgraph.output_indexes))

    def _first_run(self, inputs: Sequence[np.ndarray | None], deadline: float | None, loop_timeout_ns: int | None,
                   checkpoint: Callable[[], None] | None) -> list[np.ndarray]:
        """The executor's own run, recording each operation's prepare; binds the graph when every prepare
        read only constants."""
        graph = self.graph
        recording = _RecordingGraph(graph)
        outputs = recording.run(inputs, deadline=deadline, loop_timeout_ns=loop_timeout_ns, checkpoint=checkpoint)
        subgraph = graph.model.main
        bound = []
        for (j, op, impl, ctx), drop in zip(recording.contexts, graph.freed_after[0]):
            if not _reads_constants_only(ctx, subgraph):
                self.operations = False
                return outputs
            out_types = [ctx.output_type(k) for k in range(ctx.num_outputs)]
            context = OperationContext(
                op_index=j, code=op.type, input_types=[ctx.input_type(k) for k in range(ctx.num_inputs)],
                output_types=out_types, input_values=[], input_operands=op.inputs, output_operands=op.outputs,
                phase="execute", relaxed=graph.model.relax_computation_float32_to_float16,
                error_code=ResultCode.OP_FAILED)
            context.output_shapes = ctx.output_shapes
            in_values: list = []
            context.rebind(in_values)
            bound.append(_BoundOperation(
                context, impl, list(op.inputs), in_values, list(op.outputs), out_types, ctx.output_shapes,
                [(tuple(shape), t.dtype) for shape, t in zip(ctx.output_shapes, out_types)], drop,
                f"operation {j} ({op.type.name})"))
        self.operations = bound
        return outputs


class _RecordingGraph(PreparedGraph):
    """`graph` for one run, keeping each main-subgraph operation's context as its prepare saw it (the
    pattern of cpu/profiling.py's ProfiledGraph)."""

    def __init__(self, graph: PreparedGraph) -> None:
        vars(self).update(vars(graph))  # not PreparedGraph.__init__: the graph's prepared state is shared
        self.contexts: list[tuple[int, Any, Any, _RecordingContext]] = []

    def run_operation(self, j: int, op, impl, subgraph, values: dict[int, Any], runner) -> list[np.ndarray]:
        if subgraph is not self.model.main:
            return super().run_operation(j, op, impl, subgraph, values, runner)
        ctx = self.operation_context(j, op, subgraph, values, runner, _RecordingContext)
        self.contexts.append((j, op, impl, ctx))
        return self.prepare_and_execute(ctx, impl)


def _reads_constants_only(ctx: _RecordingContext, subgraph) -> bool:
    if ctx.control_flow_results is not None:
        return False
    for k in ctx.reads:
        if ctx.input_type(k) is None:
            continue  # omitted: stays omitted for this request
        if subgraph.operands[ctx._in_operands[k]].lifetime not in CONSTANT_LIFETIMES:
            return False
    return True


