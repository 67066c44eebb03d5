"""Driver-side checks of everything that crosses the HAL (NNAPI's ValidateHal): models and requests.

A driver must not trust the runtime: a model or request that reached it malformed is refused with
BAD_DATA instead of crashing the driver.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ..enums import (CACHE_TOKEN_BYTES, MAX_NUMBER_OF_CACHE_FILES, OperandCode, OperandLifetime, OperationCode,
                     Preference, Priority, ResultCode)
from ..errors import MltsError, bad_data
from .types import BufferToken, CacheHandles, HalModel, Request, Subgraph, constant_array
from .memory import Memory
from ..operand_type import OperandType, validate_operand_type
from ..ops import OperationContext, SubgraphSignature, ValueUnknown, get_operation


def validate_hal_model(model: HalModel) -> None:
    if not isinstance(model, HalModel):
        raise bad_data(f"expected a HalModel, got {type(model).__name__}")
    for p, pool in enumerate(model.pools):
        if not isinstance(pool, Memory) or pool.closed:
            raise bad_data(f"model pool {p} is not a usable memory")
    subgraphs = (model.main, *model.referenced)
    _check_no_reference_cycle(model)
    for s, subgraph in enumerate(subgraphs):
        _validate_subgraph(model, subgraph, s, len(subgraphs))


def _validate_subgraph(model: HalModel, sg: Subgraph, s: int, n_subgraphs: int) -> None:
    where = "main subgraph" if s == 0 else f"subgraph {s}"
    n = len(sg.operands)
    if not sg.operations:
        raise bad_data(f"{where}: no operations")
    written = set()
    for i, operand in enumerate(sg.operands):
        validate_operand_type(operand.type, f"{where}: operand {i}")
        loc = operand.location
        lt = operand.lifetime
        if lt in (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE):
            if loc is None:
                raise bad_data(f"{where}: constant operand {i} has no location")
            if operand.type.byte_size() != loc.length:
                raise bad_data(f"{where}: operand {i} location length {loc.length} != size {operand.type.byte_size()}")
            if lt == OperandLifetime.CONSTANT_COPY:
                if loc.pool_index != -1 or loc.offset < 0 or loc.offset + loc.length > len(model.operand_values):
                    raise bad_data(f"{where}: operand {i} CONSTANT_COPY location out of range")
            else:
                if not 0 <= loc.pool_index < len(model.pools):
                    raise bad_data(f"{where}: operand {i} refers to pool {loc.pool_index} of {len(model.pools)}")
                model.pools[loc.pool_index].check_region(loc.offset, loc.length, f"{where}: operand {i}")
        elif lt == OperandLifetime.SUBGRAPH:
            if operand.type.code != OperandCode.MODEL or loc is None or not 1 <= loc.offset < n_subgraphs:
                raise bad_data(f"{where}: operand {i} refers to a subgraph that does not exist")
        elif lt in (OperandLifetime.SUBGRAPH_INPUT, OperandLifetime.SUBGRAPH_OUTPUT,
                    OperandLifetime.TEMPORARY_VARIABLE, OperandLifetime.NO_VALUE):
            if loc is not None and lt != OperandLifetime.NO_VALUE:
                raise bad_data(f"{where}: operand {i} ({lt.name}) must not have a location")
        else:
            raise bad_data(f"{where}: operand {i} has invalid lifetime {lt!r}")
    for idx_list, lifetime, what in ((sg.input_indexes, OperandLifetime.SUBGRAPH_INPUT, "input"),
                                     (sg.output_indexes, OperandLifetime.SUBGRAPH_OUTPUT, "output")):
        for i in idx_list:
            if not 0 <= i < n or sg.operands[i].lifetime != lifetime:
                raise bad_data(f"{where}: {what} index {i} is not a {lifetime.name} operand")
    written.update(sg.input_indexes)
    for j, op in enumerate(sg.operations):
        if not isinstance(op.type, OperationCode):
            raise bad_data(f"{where}: operation {j} has an unknown type {op.type!r}")
        for i in (*op.inputs, *op.outputs):
            if not 0 <= i < n:
                raise bad_data(f"{where}: operation {j} ({op.type.name}) refers to operand {i} of {n}")
        for i in op.inputs:
            lt = sg.operands[i].lifetime
            if lt in (OperandLifetime.TEMPORARY_VARIABLE, OperandLifetime.SUBGRAPH_OUTPUT) and i not in written:
                raise bad_data(f"{where}: operation {j} ({op.type.name}) reads operand {i} before it is written")
        for o in op.outputs:
            if sg.operands[o].lifetime not in (OperandLifetime.TEMPORARY_VARIABLE, OperandLifetime.SUBGRAPH_OUTPUT):
                raise bad_data(f"{where}: operation {j} ({op.type.name}) writes operand {o} which is "
                               f"{sg.operands[o].lifetime.name}")
            if o in written:
                raise bad_data(f"{where}: operand {o} is written twice")
            written.add(o)
        _validate_operation(model, sg, j)
    for i in sg.output_indexes:
        if i not in written:
            raise bad_data(f"{where}: output operand {i} is never written")
    consumers = [0] * n
    for op in sg.operations:
        for i in op.inputs:
            consumers[i] += 1
    for i, operand in enumerate(sg.operands):
        if operand.lifetime == OperandLifetime.TEMPORARY_VARIABLE and i not in written:
            raise bad_data(f"{where}: operand {i} is never written")
        if operand.number_of_consumers != consumers[i]:
            raise bad_data(f"{where}: operand {i} has an incorrect number of consumers "
                           f"({operand.number_of_consumers}, counted {consumers[i]})")
        if operand.lifetime == OperandLifetime.SUBGRAPH_INPUT and i not in sg.input_indexes:
            raise bad_data(f"{where}: operand {i} is SUBGRAPH_INPUT but not a subgraph input")
        if operand.lifetime == OperandLifetime.SUBGRAPH_OUTPUT and i not in sg.output_indexes:
            raise bad_data(f"{where}: operand {i} is SUBGRAPH_OUTPUT but not a subgraph output")


def _validate_operation(model: HalModel, sg: Subgraph, j: int) -> None:
    op = sg.operations[j]
    impl = get_operation(op.type)
    if impl is None:  # every NNAPI 1.3 operation has a kernel; an unknown code is refused before this
        return
    in_types: list[OperandType | None] = []
    values: list[Any] = []
    for i in op.inputs:
        operand = sg.operands[i]
        if operand.lifetime == OperandLifetime.NO_VALUE:
            in_types.append(None)
            values.append(None)
            continue
        in_types.append(operand.type)
        if operand.lifetime in (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE):
            values.append(constant_array(model, operand.type, operand.location))
        elif operand.lifetime == OperandLifetime.SUBGRAPH:
            values.append(_subgraph_signature(model, operand.location.offset))
        else:
            values.append(None)
    ctx = OperationContext(op_index=j, code=op.type, input_types=in_types,
                           output_types=[sg.operands[o].type for o in op.outputs], input_values=values,
                           input_operands=op.inputs, output_operands=op.outputs, phase="validate",
                           relaxed=model.relax_computation_float32_to_float16)
    try:
        impl.validate(ctx)
    except (MltsError, ValueUnknown) as e:
        if isinstance(e, MltsError):
            raise
    except Exception as e:
        raise bad_data(f"operation {j} ({op.type.name}): validation failed: {e}") from None


def _subgraph_signature(model: HalModel, index: int) -> SubgraphSignature:
    """What IF/WHILE validation checks a referenced subgraph against (its input and output types)."""
    try:  # the referenced subgraph itself may not have been validated yet
        sg = model.referenced[index - 1]
        return SubgraphSignature(tuple(sg.operands[i].type for i in sg.input_indexes),
                                 tuple(sg.operands[i].type for i in sg.output_indexes), index=index)
    except (IndexError, TypeError, AttributeError):
        raise bad_data(f"subgraph {index}: malformed input or output indexes") from None


def _check_no_reference_cycle(model: HalModel) -> None:
    """Subgraphs may not reference themselves, directly or not (a run would never end)."""
    subgraphs = (model.main, *model.referenced)
    edges = [{o.location.offset for o in sg.operands if o.lifetime == OperandLifetime.SUBGRAPH
              and getattr(o.location, "offset", None) in range(len(subgraphs))} for sg in subgraphs]
    state = [0] * len(subgraphs)  # 0 unvisited, 1 on the current path, 2 done

    def visit(s: int) -> None:
        state[s] = 1
        for t in edges[s]:
            if state[t] == 1:
                raise bad_data(f"subgraph {t} references itself through subgraph {s}")
            if state[t] == 0:
                visit(t)
        state[s] = 2

    for s in range(len(subgraphs)):
        if state[s] == 0:
            visit(s)


def validate_request(request: Request, model: HalModel, *, accept_tokens: bool = False) -> list[OperandType]:
    """Check a request against the model; returns the effective type (with dims) of each input.

    Pools naming driver-allocated buffers (BufferToken) are accepted only by drivers with memory
    domains (`accept_tokens`); their arguments must use offset 0 and length 0, and the dimensions of
    such an input are the buffer's, checked by the driver's buffer tracker (so may be unknown here).
    """
    if not isinstance(request, Request):
        raise bad_data(f"expected a Request, got {type(request).__name__}")
    sg = model.main
    if len(request.inputs) != len(sg.input_indexes):
        raise bad_data(f"request has {len(request.inputs)} inputs, model has {len(sg.input_indexes)}")
    if len(request.outputs) != len(sg.output_indexes):
        raise bad_data(f"request has {len(request.outputs)} outputs, model has {len(sg.output_indexes)}")
    for p, pool in enumerate(request.pools):
        if isinstance(pool, BufferToken) and accept_tokens:
            if isinstance(pool.token, bool) or not isinstance(pool.token, int) or pool.token <= 0:
                raise bad_data(f"request pool {p}: invalid buffer token {pool.token!r}")
            continue
        if not isinstance(pool, Memory) or pool.closed:
            raise bad_data(f"request pool {p} is not a usable memory")
    types = []
    for what, args, indexes in (("input", request.inputs, sg.input_indexes),
                                ("output", request.outputs, sg.output_indexes)):
        for k, (arg, operand_index) in enumerate(zip(args, indexes)):
            declared = sg.operands[operand_index].type
            if arg.has_no_value:
                if what == "output":
                    raise bad_data(f"output {k} has no value")
                types.append(None)
                continue
            t = effective_type(declared, arg.dimensions, f"{what} {k}")
            loc = arg.location
            if loc is None or not 0 <= loc.pool_index < len(request.pools):
                raise bad_data(f"{what} {k}: location refers to a pool that does not exist")
            if isinstance(request.pools[loc.pool_index], BufferToken):
                if loc.offset != 0 or loc.length != 0:
                    raise bad_data(f"{what} {k}: a driver-allocated buffer is used whole (offset 0, length 0), "
                                   f"got offset {loc.offset}, length {loc.length}")
                if what == "input":
                    types.append(t)
                continue
            request.pools[loc.pool_index].check_region(loc.offset, loc.length, f"{what} {k}",
                                                       for_write=(what == "output"))
            if what == "input":
                if not t.is_fully_specified and t.is_tensor:
                    raise bad_data(f"input {k}: dimensions {t.dimensions} are not fully specified")
                if loc.length != t.byte_size():
                    raise bad_data(f"input {k}: length {loc.length} does not match {t.byte_size()} bytes of "
                                   f"{t.describe()}")
                types.append(t)
    return types


class RequestValidator:
    """validate_request for one prepared model, done once per distinct Request object.

    A reusable execution sends the same (immutable) Request for every compute. Everything
    validate_request checks is fixed by the request and the pools' sizes and protections, except whether
    a pool has been freed since: a request seen last time is checked for that alone, so the checks stay
    NNAPI's while costing a comparison. One entry, replaced as a whole (safe under concurrent use)."""

    def __init__(self, model: HalModel, *, accept_tokens: bool = False) -> None:
        self.model = model
        self.accept_tokens = accept_tokens
        self._last: tuple[Request, list[OperandType | None], dict] | None = None

    def validate(self, request: Request) -> list[OperandType | None]:
        last = self._last
        if last is not None and last[0] is request:
            for p, pool in enumerate(request.pools):
                if getattr(pool, "closed", False):
                    raise bad_data(f"request pool {p} is not a usable memory")
            return last[1]
        types = validate_request(request, self.model, accept_tokens=self.accept_tokens)
        if type(request.inputs) is tuple and type(request.outputs) is tuple and type(request.pools) is tuple:
            self._last = (request, types, {})  # only an immutable request can be recognised again
        return types

    def memo(self, request: Request) -> dict:
        """Where a driver keeps what it derives from the validated `request` (views of its regions, output
        shapes), kept while the same request comes again; an empty dict for any other request."""
        last = self._last
        return last[2] if last is not None and last[0] is request else {}


def validate_preparation_arguments(preference: Any, priority: Any, deadline: Any, cache: Any, call: str) -> None:
    """prepare_model's scalar arguments, as VTS checks a driver refuses them: a Preference, a Priority,
    a deadline that is None or a time.monotonic() value, cache handles or None (BAD_DATA otherwise)."""
    if isinstance(preference, bool) or not isinstance(preference, (int, np.integer)) \
            or int(preference) not in {int(p) for p in Preference}:
        raise bad_data(f"{call}: invalid preference {preference!r} (LOW_POWER=0, FAST_SINGLE_ANSWER=1, "
                       f"SUSTAINED_SPEED=2)")
    check_priority(priority, call)
    validate_deadline(deadline, call)
    if cache is not None:
        validate_cache_handles(cache, call)


def validate_execution_arguments(measure: Any, deadline: Any, loop_timeout_ns: Any, call: str) -> None:
    """An execution's scalar arguments: `measure` a bool, the deadline None or a time, the loop timeout a
    non-negative int of nanoseconds (BAD_DATA otherwise)."""
    if not isinstance(measure, (bool, np.bool_)):
        raise bad_data(f"{call}: measure must be a bool, got {measure!r}")
    validate_deadline(deadline, call)
    if isinstance(loop_timeout_ns, bool) or not isinstance(loop_timeout_ns, (int, np.integer)) or loop_timeout_ns < 0:
        raise bad_data(f"{call}: loop timeout must be a non-negative int of nanoseconds, got {loop_timeout_ns!r}")


def validate_deadline(deadline: Any, call: str) -> None:
    """None (no deadline) or a finite time.monotonic() value."""
    if deadline is None:
        return
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float, np.integer, np.floating)) \
            or not np.isfinite(deadline):
        raise bad_data(f"{call}: deadline must be None or a time.monotonic() value, got {deadline!r}")


def validate_fence_fds(wait_for: Any, call: str) -> list[int]:
    """The sync fences of a fenced execution (NNAPI's waitFor): a sequence of open file descriptors.

    One check for every side of the boundary (the runtime, a driver service's host, drivers), so that
    they agree on what a malformed fence is: BAD_DATA naming `call` and the bad entry.
    """
    if isinstance(wait_for, (str, bytes, bytearray)) or not isinstance(wait_for, Sequence):
        raise bad_data(f"{call}: wait_for must be a sequence of sync fence file descriptors, got {wait_for!r}")
    return [validate_fence_fd(fd, call, f"wait_for[{k}]") for k, fd in enumerate(wait_for)]


def validate_fence_fd(fd: Any, call: str, what: str = "fd") -> int:
    """One sync fence descriptor: a non-negative int that is an open descriptor (BAD_DATA otherwise)."""
    if isinstance(fd, bool) or not isinstance(fd, (int, np.integer)) or fd < 0:
        raise bad_data(f"{call}: {what} = {fd!r} is not a file descriptor")
    try:
        os.fstat(int(fd))
    except OSError as e:
        raise bad_data(f"{call}: {what} = {fd} is not an open file descriptor ({e.strerror})") from None
    return int(fd)


def validate_timeout_after_fence(timeout_ns: Any, call: str) -> int | None:
    """NNAPI's timeoutDurationAfterFence: None (no limit) or a non-negative int of nanoseconds."""
    if timeout_ns is None:
        return None
    if isinstance(timeout_ns, bool) or not isinstance(timeout_ns, (int, np.integer)) or timeout_ns < 0:
        raise bad_data(f"{call}: timeout_after_fence_ns must be None or a non-negative int of nanoseconds, "
                       f"got {timeout_ns!r}")
    return int(timeout_ns)


def effective_type(declared: OperandType, dims: tuple[int, ...], what: str) -> OperandType:
    """The model's operand type refined by the dimensions given at execution time."""
    if not dims or dims == declared.dimensions:  # none given, or exactly the model's (a tuple of ints)
        return declared
    dims = tuple(int(d) for d in dims)
    if declared.dimensions is not None:
        if len(dims) != len(declared.dimensions):
            raise bad_data(f"{what}: rank {len(dims)} differs from the model's {len(declared.dimensions)}")
        for a, b in zip(dims, declared.dimensions):
            if b != 0 and a != b:
                raise bad_data(f"{what}: dimensions {list(dims)} conflict with the model's {list(declared.dimensions)}")
    if any(d < 0 for d in dims):
        raise bad_data(f"{what}: negative dimension in {list(dims)}")
    return declared.with_dimensions(dims)


def element_bytes(t: OperandType) -> int:
    return int(np.dtype(t.dtype).itemsize)

def check_priority(priority: Any, call: str) -> Priority:
    """A valid Priority (LOW=90, MEDIUM=100, HIGH=110) or BAD_DATA naming the call."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise bad_data(f"{call}: priority must be a Priority (LOW=90, MEDIUM=100, HIGH=110), got {priority!r}")
    try:
        return Priority(priority)
    except ValueError:
        raise bad_data(f"{call}: invalid priority {priority!r} (LOW=90, MEDIUM=100, HIGH=110)") from None


def validate_cache_handles(cache: object, who: str) -> None:
    """CacheHandles crossing the driver boundary: tuples of path strings and a 32-byte token."""
    if not isinstance(cache, CacheHandles):
        raise MltsError(ResultCode.BAD_DATA, f"{who}: cache handles must be CacheHandles, got {type(cache).__name__}")
    for kind, paths in (("model", cache.model_cache), ("data", cache.data_cache)):
        if not isinstance(paths, tuple) or len(paths) > MAX_NUMBER_OF_CACHE_FILES:
            raise MltsError(ResultCode.BAD_DATA, f"{who}: {kind} cache files must be a tuple of at most "
                                                 f"{MAX_NUMBER_OF_CACHE_FILES} paths")
        for path in paths:
            if not isinstance(path, str) or not path or "\0" in path:
                raise MltsError(ResultCode.BAD_DATA, f"{who}: invalid {kind} cache file path {path!r}")
    if not isinstance(cache.token, bytes) or len(cache.token) != CACHE_TOKEN_BYTES:
        raise MltsError(ResultCode.BAD_DATA, f"{who}: the cache token must be {CACHE_TOKEN_BYTES} bytes")
