"""The CPU executor: runs a HAL model's operations with the registry's kernels.

Shared by every kernel-based driver (nnapi-reference, the sample drivers), like AOSP's CpuExecutor.
Preparation resolves constants to array views and kernels once; a run walks the operations in
order, checks each computed shape against the declared one, and frees temporaries after their
last use. Deadlines are checked between operations.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from .. import vlog
from ..enums import OperandLifetime, ResultCode
from ..errors import ExecutionAborted, MltsError, error_from_exception
from ..hal import HalModel, Subgraph
from ..hal.types import constant_array
from ..operand_type import OperandType
from ..ops import OperationContext, get_operation
from ..ops.base import SubgraphRunner


class _GraphRunner(SubgraphRunner):
    """The subgraphs of one prepared graph, run under one run's deadline, loop timeout and checkpoint."""

    def __init__(self, graph: "PreparedGraph", deadline: float | None, loop_timeout_ns: int | None,
                 checkpoint: Callable[[], None] | None) -> None:
        self.graph = graph
        self.deadline = deadline
        self.loop_timeout_ns = loop_timeout_ns
        self.checkpoint = checkpoint

    def subgraph(self, index: int) -> Subgraph:
        return self.graph.subgraph(index)

    def run(self, index: int, inputs: Sequence[Any]) -> list[np.ndarray]:
        return self.graph.run(list(inputs), deadline=self.deadline, loop_timeout_ns=self.loop_timeout_ns,
                              checkpoint=self.checkpoint, subgraph_index=index)


class PreparedGraph:
    """A HAL model made ready to run on the CPU."""

    def __init__(self, model: HalModel) -> None:
        self.model = model
        self.constants: list[dict[int, Any]] = []
        for subgraph in (model.main, *model.referenced):
            values: dict[int, Any] = {}
            for i, operand in enumerate(subgraph.operands):
                if operand.lifetime in (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE):
                    values[i] = constant_array(model, operand.type, operand.location)
                elif operand.lifetime == OperandLifetime.SUBGRAPH:
                    values[i] = operand.location.offset
            self.constants.append(values)
        #: per subgraph and operation, the temporaries whose last use it is (freed after it runs)
        self.freed_after = [freed_after_each_operation(sg) for sg in (model.main, *model.referenced)]
        self.kernels = []
        for j, op in enumerate(model.main.operations):
            impl = get_operation(op.type)
            if impl is None:
                raise MltsError(ResultCode.OP_FAILED, f"operation {j} ({op.type.name}) has no CPU kernel")
            self.kernels.append(impl)

    def subgraph(self, index: int) -> Subgraph:
        return self.model.main if index == 0 else self.model.referenced[index - 1]

    def run(self, inputs: Sequence[np.ndarray | None], *, deadline: float | None = None,
            loop_timeout_ns: int | None = None, checkpoint: Callable[[], None] | None = None,
            subgraph_index: int = 0) -> list[np.ndarray]:
        """Run a subgraph on input arrays; returns the output arrays (shapes as computed)."""
        subgraph = self.subgraph(subgraph_index)
        values: dict[int, Any] = dict(self.constants[subgraph_index])
        for index, arr in zip(subgraph.input_indexes, inputs):
            values[index] = arr
        runner = _GraphRunner(self, deadline, loop_timeout_ns, checkpoint)
        freed_after = self.freed_after[subgraph_index]
        for j, op in enumerate(subgraph.operations):
            between_operations(deadline, checkpoint, j, op.type)
            impl = get_operation(op.type)
            if impl is None:
                raise MltsError(ResultCode.OP_FAILED, f"operation {j} ({op.type.name}) has no CPU kernel")
            results = self.run_operation(j, op, impl, subgraph, values, runner)
            for o, r in zip(op.outputs, results):
                values[o] = r
            for i in freed_after[j]:
                values.pop(i, None)
        missing = [i for i in subgraph.output_indexes if i not in values]
        if missing:
            raise MltsError(ResultCode.OP_FAILED, f"outputs {missing} were not computed")
        return [values[i] for i in subgraph.output_indexes]

    def run_operation(self, j: int, op, impl, subgraph: Subgraph, values: dict[int, Any],
                      runner: SubgraphRunner) -> list[np.ndarray]:
        ctx = self.operation_context(j, op, subgraph, values, runner)
        return self.prepare_and_execute(ctx, impl)

    def operation_context(self, j: int, op, subgraph: Subgraph, values: dict[int, Any], runner: SubgraphRunner,
                          context: type[OperationContext] = OperationContext) -> OperationContext:
        """The execute-phase context of operation `j` on the current values."""
        in_types: list[OperandType | None] = []
        in_values: list[Any] = []
        for i in op.inputs:
            operand = subgraph.operands[i]
            if i not in values and operand.lifetime != OperandLifetime.NO_VALUE:
                raise MltsError(ResultCode.OP_FAILED, f"operation {j} ({op.type.name}): operand {i} has no value")
            v = values.get(i)
            if v is None:  # omitted optional operand (NO_VALUE, or an omitted request input)
                in_types.append(None)
                in_values.append(None)
                continue
            t = operand.type
            if t.is_tensor and isinstance(v, np.ndarray) and t.dimensions != v.shape:
                t = t.with_dimensions(v.shape)  # the declared type is reused when the shape is already its own
            in_types.append(t)
            in_values.append(v)
        out_types = [subgraph.operands[o].type for o in op.outputs]
        return context(op_index=j, code=op.type, input_types=in_types, output_types=out_types,
                       input_values=in_values, input_operands=op.inputs, output_operands=op.outputs,
                       phase="execute", relaxed=self.model.relax_computation_float32_to_float16,
                       error_code=ResultCode.OP_FAILED, runner=runner)

    def prepare_and_execute(self, ctx: OperationContext, impl) -> list[np.ndarray]:
        """NNAPI's per-run prepare (shape inference and validation, shapes checked against the declared
        ones), then the kernel; its outputs checked against the shapes and dtypes."""
        out_types = [ctx.output_type(k) for k in range(ctx.num_outputs)]
        where = f"operation {ctx.op_index} ({ctx.code.name})"
        try:
            shapes = impl.prepare(ctx)
            for k, (shape, t) in enumerate(zip(shapes, out_types)):
                if t.dimensions is not None and (len(t.dimensions) != len(shape) or any(
                        d != 0 and d != s for d, s in zip(t.dimensions, shape))):
                    raise ctx.fail(f"computed shape {list(shape)} is incompatible with the declared "
                                   f"{list(t.dimensions)}", output=k)
            ctx.output_shapes = shapes
            if vlog.is_on("cpuexe"):
                in_types = [ctx.input_type(k) for k in range(ctx.num_inputs)]
                vlog.log("cpuexe", f"{where}: inputs {[None if t is None else t.describe() for t in in_types]}")
            results = impl.execute(ctx)
        except MltsError:
            raise
        except Exception as e:
            raise error_from_exception(e, f"{where} failed") from None
        return checked_results(where, results, shapes, out_types)


def between_operations(deadline: float | None, checkpoint: Callable[[], None] | None, j: int, code: Any) -> None:
    """Before operation `j`: a run past its deadline stops here, and the queue's checkpoint may pre-empt it."""
    if deadline is not None and time.monotonic() > deadline:
        raise ExecutionAborted(ResultCode.MISSED_DEADLINE_TRANSIENT,
                               f"deadline passed before operation {j} ({code.name})")
    if checkpoint is not None:
        checkpoint()


def freed_after_each_operation(subgraph: Subgraph) -> list[list[int]]:
    """For each operation, the temporaries it uses last (not subgraph outputs): what a run frees after it."""
    remaining = [o.number_of_consumers for o in subgraph.operands]
    keep = set(subgraph.output_indexes)
    freed = []
    for op in subgraph.operations:
        last = []
        for i in op.inputs:
            remaining[i] -= 1
            if remaining[i] == 0 and i not in keep and \
                    subgraph.operands[i].lifetime == OperandLifetime.TEMPORARY_VARIABLE:
                last.append(i)
        freed.append(last)
    return freed


def checked_results(where: str, results: Sequence[Any], shapes: Sequence[tuple[int, ...]],
                    out_types: Sequence[OperandType]) -> list[np.ndarray]:
    """A kernel's outputs as arrays of the prepared shapes and the operands' dtypes (OP_FAILED otherwise)."""
    if len(results) != len(out_types):
        raise MltsError(ResultCode.OP_FAILED, f"{where}: kernel returned {len(results)} outputs")
    checked = []
    for k, (r, shape, t) in enumerate(zip(results, shapes, out_types)):
        r = np.asarray(r)
        if tuple(r.shape) != tuple(shape) or r.dtype != t.dtype:
            raise MltsError(ResultCode.OP_FAILED, f"{where}: output {k} is {r.dtype}{list(r.shape)}, "
                                                  f"expected {t.dtype}{list(shape)}")
        checked.append(r)
    return checked
