"""IF and WHILE: control flow over referenced models (MODEL operands, SUBGRAPH in the HAL).

IF(cond: TENSOR_BOOL8 [1], then_model, else_model, inputs...) -> outputs: runs one branch.
WHILE(cond_model, body_model, inputs...) -> outputs, with the inputs split as NNAPI does into m
input-output (loop-carried) operands, k state-only operands and n input-only operands, where
m = WHILE outputs, k = body outputs - m, n = body inputs - m - k. The condition model maps all
m + k + n inputs to one TENSOR_BOOL8 [1]; the body maps them to the next m + k loop-carried values.

Validation follows NNAPI's validateIfOperation / validateWhileOperation: every branch, condition
and body signature must match the operation's operands in type, count, rank and dimensions (where
both are specified), scale and zero point. Branches and bodies may change shapes, so outputs get
dynamic dimensions where the possible results differ; at execution the branch runs while the
executor asks for the output shapes (they are the branch's), and `execute` hands its results on.

A WHILE whose condition is still true after the execution's loop timeout (default 2 s, at most
15 s) fails with MISSED_DEADLINE_TRANSIENT, as AOSP's CpuExecutor does; the execution deadline is
checked at every iteration and inside every subgraph run.

Also here, as the one place that knows what a control-flow operation needs: the partitioning rule
(a device takes IF/WHILE only if it supports every operation of every subgraph they reference,
recursively) and the pruning of step models to the subgraphs they reach.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..enums import DEFAULT_LOOP_TIMEOUT_NS, OperandCode, OperandLifetime, OperationCode, ResultCode
from ..hal.types import DataLocation, HalOperand
from ..operand_type import OperandType
from .base import Operation, OperationContext, Shape, SubgraphSignature, ValueUnknown
from .registry import register

CONTROL_FLOW_OPERATIONS = frozenset({OperationCode.IF, OperationCode.WHILE})
CONDITION_SHAPE = (1,)


# -- signatures ------------------------------------------------------------------------------------
def incompatibility(inner: OperandType, outer: OperandType) -> str | None:
    """Why two operands are not interchangeable (NNAPI `compatible`), or None when they are."""
    if inner.code != outer.code:
        return f"type {inner.code.name} differs from {outer.code.name}"
    if inner.dimensions is not None and outer.dimensions is not None and inner.is_tensor:
        if len(inner.dimensions) != len(outer.dimensions):
            return f"rank {len(inner.dimensions)} differs from {len(outer.dimensions)}"
        if any(a != 0 and b != 0 and a != b for a, b in zip(inner.dimensions, outer.dimensions)):
            return f"dimensions {list(inner.dimensions)} conflict with {list(outer.dimensions)}"
    if inner.scale != outer.scale or inner.zero_point != outer.zero_point:
        return (f"quantization (scale {inner.scale:g}, zero point {inner.zero_point}) differs from "
                f"(scale {outer.scale:g}, zero point {outer.zero_point})")
    if inner.channel_quant != outer.channel_quant:
        return "per-channel quantization parameters differ"
    return None


def _signature(ctx: OperationContext, i: int) -> SubgraphSignature | None:
    """The model referenced by input `i`: its signature while validating; at execution the executor's
    subgraph (the value is then the subgraph index); None when not set yet."""
    value = ctx.value(i)
    if value is None or isinstance(value, SubgraphSignature):
        return value
    if ctx.runner is None:
        return None
    index = int(np.asarray(value).item())
    sg = ctx.runner.subgraph(index)
    return SubgraphSignature(tuple(sg.operands[k].type for k in sg.input_indexes),
                             tuple(sg.operands[k].type for k in sg.output_indexes), index=index)


def _check_model_operand(ctx: OperationContext, i: int, what: str) -> SubgraphSignature | None:
    ctx.check(ctx.input_code(i) == OperandCode.MODEL,
              f"the {what} must be a MODEL operand, got {ctx.input_code(i).name}", input=i)
    return _signature(ctx, i)


def _require_model(ctx: OperationContext, i: int, what: str) -> SubgraphSignature:
    sig = _signature(ctx, i)
    if sig is None:
        raise ctx.fail(f"the {what} operand refers to no model (use set_operand_value_from_model)", input=i)
    return sig


def _check_compatible(ctx: OperationContext, inner: OperandType, outer: OperandType, what: str, *,
                      input: int | None = None, output: int | None = None) -> None:
    why = incompatibility(inner, outer)
    if why is not None:
        raise ctx.fail(f"{what}: {why}", input=input, output=output)


def _check_condition_type(ctx: OperationContext, t: OperandType, what: str, **where: int) -> None:
    ctx.check(t.code == OperandCode.TENSOR_BOOL8 and t.dimensions == CONDITION_SHAPE,
              f"{what} must be TENSOR_BOOL8 of shape [1], got {t.describe()}", **where)


def _check_inputs_present(ctx: OperationContext, minimum: int) -> None:
    name = ctx.code.name
    ctx.check(ctx.num_inputs >= minimum, f"{name} needs at least {minimum} inputs, got {ctx.num_inputs}")
    ctx.check(ctx.num_outputs >= 1, f"{name} needs at least 1 output")
    for i in range(ctx.num_inputs):
        ctx.check(not ctx.is_omitted(i), "control-flow inputs cannot be omitted", input=i)


# -- shapes ----------------------------------------------------------------------------------------
def _merged_shape(ctx: OperationContext, k: int, candidates: Sequence[OperandType]) -> Shape:
    """Output `k`'s static shape: the declared dimensions, else those every possible result agrees
    on; 0 (dynamic) where they differ. Unknown rank everywhere: not inferable at build time."""
    declared = ctx.output_type(k).dimensions
    dims = [t.dimensions for t in candidates]
    if any(d is None for d in dims) or len({len(d) for d in dims}) != 1:
        if declared is None:
            raise ValueUnknown(k)
        return tuple(declared)
    rank = len(dims[0])
    if declared is not None and len(declared) != rank:
        return tuple(declared)  # incompatible ranks were refused by validation; keep the declaration
    out = []
    for axis in range(rank):
        if declared is not None and declared[axis] != 0:
            out.append(declared[axis])
            continue
        sizes = {d[axis] for d in dims}
        out.append(sizes.pop() if len(sizes) == 1 else 0)
    return tuple(out)


def _check_runtime_inputs(ctx: OperationContext, sig: SubgraphSignature, values: Sequence[Any], what: str) -> None:
    for k, (v, t) in enumerate(zip(values, sig.input_types)):
        if not t.is_tensor or t.dimensions is None:
            continue
        shape = tuple(np.shape(v))
        if len(shape) != len(t.dimensions) or any(d != 0 and d != s for d, s in zip(t.dimensions, shape)):
            raise ctx.fail(f"{what} input {k} receives shape {list(shape)}, incompatible with its declared "
                           f"{list(t.dimensions)}")


def run_subgraph(ctx: OperationContext, sig: SubgraphSignature, values: Sequence[Any], what: str) -> list[np.ndarray]:
    """Run a referenced subgraph on the executor that runs this operation, with its deadline, loop
    timeout and checkpoint."""
    if ctx.runner is None or sig.index is None:
        raise ctx.fail(f"cannot run the {what}: no executor for referenced subgraphs")
    _check_runtime_inputs(ctx, sig, values, what)
    return ctx.runner.run(sig.index, values)


def _condition_value(ctx: OperationContext, value: Any, what: str) -> bool:
    arr = np.asarray(value)
    if arr.size != 1:
        raise ctx.fail(f"{what} has {arr.size} elements, expected exactly 1")
    return bool(arr.reshape(-1)[0])


class _ControlFlow(Operation):
    """Outputs are computed while the executor asks for their shapes (they are the subgraph's)."""

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        results = ctx.control_flow_results
        if results is None:
            raise ctx.fail("executed before its subgraphs ran")
        return [np.asarray(r, dtype=ctx.output_type(k).dtype) for k, r in enumerate(results)]

    def primary_type(self, ctx: OperationContext) -> OperandCode | None:
        return None  # judged by the operations of the subgraphs it references


# -- IF --------------------------------------------------------------------------------------------
IF_CONDITION, IF_THEN, IF_ELSE, IF_FIRST_INPUT = 0, 1, 2, 3


@register
class If(_ControlFlow):
    code = OperationCode.IF

    def validate(self, ctx: OperationContext) -> None:
        _check_inputs_present(ctx, IF_FIRST_INPUT)
        _check_condition_type(ctx, ctx.input_type(IF_CONDITION), "the condition", input=IF_CONDITION)
        n_inputs = ctx.num_inputs - IF_FIRST_INPUT
        for i, what in ((IF_THEN, "then model"), (IF_ELSE, "else model")):
            sig = _check_model_operand(ctx, i, what)
            if sig is None:
                continue  # set later (before finish)
            ctx.check(len(sig.input_types) == n_inputs,
                      f"the {what} has {len(sig.input_types)} inputs, IF passes it {n_inputs}", input=i)
            ctx.check(len(sig.output_types) == ctx.num_outputs,
                      f"the {what} has {len(sig.output_types)} outputs, IF has {ctx.num_outputs}", input=i)
            for k, inner in enumerate(sig.input_types):
                _check_compatible(ctx, inner, ctx.input_type(IF_FIRST_INPUT + k), f"{what} input {k}",
                                  input=IF_FIRST_INPUT + k)
            for k, inner in enumerate(sig.output_types):
                _check_compatible(ctx, inner, ctx.output_type(k), f"{what} output {k}", output=k)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        then_sig = _require_model(ctx, IF_THEN, "then model")
        else_sig = _require_model(ctx, IF_ELSE, "else model")
        if ctx.is_static:
            return [_merged_shape(ctx, k, (then_sig.best_output_types[k], else_sig.best_output_types[k]))
                    for k in range(ctx.num_outputs)]
        take_then = _condition_value(ctx, ctx.input(IF_CONDITION), "the condition")
        branch, what = (then_sig, "then model") if take_then else (else_sig, "else model")
        inputs = [ctx.value(i) for i in range(IF_FIRST_INPUT, ctx.num_inputs)]
        ctx.control_flow_results = run_subgraph(ctx, branch, inputs, what)
        return [tuple(np.shape(r)) for r in ctx.control_flow_results]


# -- WHILE -----------------------------------------------------------------------------------------
WHILE_COND, WHILE_BODY, WHILE_FIRST_INPUT = 0, 1, 2


@register
class While(_ControlFlow):
    code = OperationCode.WHILE

    def validate(self, ctx: OperationContext) -> None:
        _check_inputs_present(ctx, WHILE_FIRST_INPUT + 1)
        n_inputs = ctx.num_inputs - WHILE_FIRST_INPUT
        cond = _check_model_operand(ctx, WHILE_COND, "condition model")
        if cond is not None:
            ctx.check(len(cond.input_types) == n_inputs,
                      f"the condition model has {len(cond.input_types)} inputs, WHILE passes it {n_inputs}",
                      input=WHILE_COND)
            ctx.check(len(cond.output_types) == 1,
                      f"the condition model must have exactly 1 output, has {len(cond.output_types)}",
                      input=WHILE_COND)
            for k, inner in enumerate(cond.input_types):
                _check_compatible(ctx, inner, ctx.input_type(WHILE_FIRST_INPUT + k), f"condition model input {k}",
                                  input=WHILE_FIRST_INPUT + k)
            _check_condition_type(ctx, cond.output_types[0], "the condition model's output", input=WHILE_COND)
        body = _check_model_operand(ctx, WHILE_BODY, "body model")
        if body is None:
            return
        m, n_body_in, n_body_out = ctx.num_outputs, len(body.input_types), len(body.output_types)
        ctx.check(n_body_in == n_inputs, f"the body model has {n_body_in} inputs, WHILE passes it {n_inputs}",
                  input=WHILE_BODY)
        ctx.check(n_body_out >= m, f"the body model has {n_body_out} outputs, fewer than WHILE's {m} outputs",
                  input=WHILE_BODY)
        ctx.check(n_body_in >= n_body_out,
                  f"the body model has more outputs ({n_body_out}) than inputs ({n_body_in})", input=WHILE_BODY)
        for k, inner in enumerate(body.input_types):
            _check_compatible(ctx, inner, ctx.input_type(WHILE_FIRST_INPUT + k), f"body model input {k}",
                              input=WHILE_FIRST_INPUT + k)
        for k in range(m):
            _check_compatible(ctx, body.output_types[k], ctx.output_type(k), f"body model output {k}", output=k)
        for k in range(n_body_out):  # loop-carried: each body output feeds the same body input next time
            _check_compatible(ctx, body.output_types[k], body.input_types[k],
                              f"body model output {k} (loop-carried) against body input {k}", input=WHILE_BODY)

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        cond = _require_model(ctx, WHILE_COND, "condition model")
        body = _require_model(ctx, WHILE_BODY, "body model")
        if ctx.is_static:
            # Zero iterations give the initial values, later ones the body's outputs.
            return [_merged_shape(ctx, k, (ctx.input_type(WHILE_FIRST_INPUT + k), body.best_output_types[k]))
                    for k in range(ctx.num_outputs)]
        ctx.control_flow_results = self.loop(ctx, cond, body)
        return [tuple(np.shape(r)) for r in ctx.control_flow_results]

    def loop(self, ctx: OperationContext, cond: SubgraphSignature, body: SubgraphSignature) -> list[np.ndarray]:
        carried = len(body.output_types)  # input-output plus state-only operands
        values = [ctx.value(i) for i in range(WHILE_FIRST_INPUT, ctx.num_inputs)]
        timeout_ns = ctx.runner.loop_timeout_ns if ctx.runner is not None else None
        timeout_s = (DEFAULT_LOOP_TIMEOUT_NS if timeout_ns is None else timeout_ns) / 1e9
        deadline = ctx.runner.deadline if ctx.runner is not None else None
        started = time.monotonic()
        iteration = 0
        while True:
            (condition,) = run_subgraph(ctx, cond, values, "condition model")
            if not _condition_value(ctx, condition, "the condition model's output"):
                return values[:ctx.num_outputs]
            now = time.monotonic()
            if now - started > timeout_s:
                raise ctx.fail(f"loop timed out after {iteration} iterations ({now - started:.3f} s > loop timeout "
                               f"{timeout_s:g} s)", code=ResultCode.MISSED_DEADLINE_TRANSIENT)
            if deadline is not None and now > deadline:
                raise ctx.fail(f"execution deadline passed in iteration {iteration}",
                               code=ResultCode.MISSED_DEADLINE_TRANSIENT)
            values = run_subgraph(ctx, body, values, "body model") + values[carried:]
            iteration += 1


# -- what a device must support, and what a step must carry ----------------------------------------
def referenced_subgraphs(subgraph, operation) -> list[int]:
    """Indexes (into main + referenced) of the subgraphs an operation's MODEL inputs refer to."""
    found = []
    for i in operation.inputs:
        operand = subgraph.operands[i]
        if operand.lifetime == OperandLifetime.SUBGRAPH and operand.location is not None:
            found.append(operand.location.offset)
    return found


def primary_operand_code(subgraph, operation) -> OperandCode | None:
    """The operand type a driver judges an operation by: input 0's, none for control flow."""
    if operation.type in CONTROL_FLOW_OPERATIONS or not operation.inputs:
        return None
    return subgraph.operands[operation.inputs[0]].type.code


def supported_operations(model, supports: Callable[[OperationCode, OperandCode | None], bool]) -> list[bool]:
    """Per operation of `model.main`: `supports(code, primary operand code)`, and for IF/WHILE also every
    operation of every subgraph they reference, recursively (NNAPI: a device takes a control-flow
    operation only if it can run all of it). A reference cycle or a bad index counts as unsupported."""
    subgraphs = (model.main, *model.referenced)
    known: dict[int, bool] = {}

    def subgraph_ok(index: int, visiting: frozenset[int]) -> bool:
        if index in known:
            return known[index]
        if index in visiting or not 0 < index < len(subgraphs):
            return False
        sg = subgraphs[index]
        ok = all(operation_ok(sg, op, visiting | {index}) for op in sg.operations)
        known[index] = ok
        return ok

    def operation_ok(sg, op, visiting: frozenset[int]) -> bool:
        if not supports(op.type, primary_operand_code(sg, op)):
            return False
        return op.type not in CONTROL_FLOW_OPERATIONS or all(
            subgraph_ok(k, visiting) for k in referenced_subgraphs(sg, op))

    return [operation_ok(model.main, op, frozenset({0})) for op in model.main.operations]


def reachable_subgraphs(model) -> list[int]:
    """Indexes of the referenced subgraphs reachable from the main one (through any SUBGRAPH operand),
    in ascending order."""
    subgraphs = (model.main, *model.referenced)
    seen: set[int] = set()
    todo = [0]
    while todo:
        for operand in subgraphs[todo.pop()].operands:
            if operand.lifetime != OperandLifetime.SUBGRAPH or operand.location is None:
                continue
            k = operand.location.offset
            if k not in seen and 0 < k < len(subgraphs):
                seen.add(k)
                todo.append(k)
    return sorted(seen)


def with_reachable_subgraphs_only(model):
    """The model carrying only the subgraphs its main subgraph reaches (a partition step needs no
    others), SUBGRAPH operand locations renumbered to match."""
    keep = reachable_subgraphs(model)
    if len(keep) == len(model.referenced):
        return model
    renumber = {old: new for new, old in enumerate(keep, start=1)}

    def renumbered(sg):
        operands = tuple(
            HalOperand(o.type, o.lifetime, DataLocation(o.location.pool_index, renumber[o.location.offset],
                                                        o.location.length), o.number_of_consumers)
            if o.lifetime == OperandLifetime.SUBGRAPH and o.location is not None and o.location.offset in renumber
            else o for o in sg.operands)
        return dataclasses.replace(sg, operands=operands)

    referenced = tuple(renumbered(model.referenced[k - 1]) for k in keep)
    return dataclasses.replace(model, main=renumbered(model.main), referenced=referenced)
