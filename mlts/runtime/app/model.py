"""Model building (ANeuralNetworksModel): operands, constants, operations, inputs/outputs, finish.

Building is synchronous and checked at every call; `finish()` checks the whole graph (one producer
per operand, no cycles, every operation valid with the values now known, static shape inference
where shapes are known) and freezes the model into the HalModel that drivers receive.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .. import vlog
from ..enums import MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES, OperandCode, OperandLifetime, OperationCode
from ..errors import MltsError, bad_data, bad_state
from ..hal import HalModel
from ..hal.memory import Memory
from ..operand_type import OperandType, SymmPerChannelQuantParams, as_operand_array, validate_operand_type
from ..ops import OperationContext, SubgraphSignature, ValueUnknown, get_operation
from .hal_builder import HalBuilder
from .manager import supported_operations_for_devices

MAX_OPERANDS = 2**32 - 1


@dataclass
class _Operand:
    type: OperandType
    lifetime: OperandLifetime = OperandLifetime.TEMPORARY_VARIABLE
    value: Any = None  # bytes (copied) | memoryview (large, referenced) | (Memory, offset, length) | Model


@dataclass(frozen=True)
class _Operation:
    code: OperationCode
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


class Model:
    """An NNAPI model under construction; immutable and shareable once `finish()` succeeded."""

    def __init__(self) -> None:
        self._operands: list[_Operand] = []
        self._operations: list[_Operation] = []
        self._inputs: tuple[int, ...] = ()
        self._outputs: tuple[int, ...] = ()
        self._relaxed = False
        self._finished = False
        self._invalid: str | None = None
        self._lock = threading.Lock()
        self._hal: HalModel | None = None
        self._run_order: list[int] = []
        self._inferred: dict[int, OperandType] = {}
        self._producer: dict[int, int] = {}  # operand index -> index of the operation writing it

    # -- state checks -------------------------------------------------------------------------
    def _check_modifiable(self, call: str) -> None:
        if self._finished:
            raise bad_state(f"{call}: the model is finished and can no longer be modified")
        if self._invalid:
            raise bad_state(f"{call}: the model is invalid after an earlier error ({self._invalid})")

    def _operand_index(self, index: Any, call: str) -> int:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise bad_data(f"{call}: operand index must be an int, got {index!r}")
        if not 0 <= index < len(self._operands):
            raise bad_data(f"{call}: operand {index} does not exist (model has {len(self._operands)} operands)")
        return int(index)

    # -- operands -----------------------------------------------------------------------------
    def add_operand(self, operand_type: OperandType) -> int:
        """Add an operand; returns its index (operands are numbered in the order they are added)."""
        with self._lock:
            self._check_modifiable("add_operand")
            if not isinstance(operand_type, OperandType):
                raise bad_data(f"add_operand: expected an OperandType, got {type(operand_type).__name__}")
            index = len(self._operands)
            if index >= MAX_OPERANDS:
                raise bad_data("add_operand: too many operands")
            validate_operand_type(operand_type, f"add_operand: operand {index}", allow_missing_channel_quant=True)
            self._operands.append(_Operand(operand_type))
            return index

    def set_operand_symm_per_channel_quant_params(self, index: int, params: SymmPerChannelQuantParams) -> None:
        with self._lock:
            self._check_modifiable("set_operand_symm_per_channel_quant_params")
            index = self._operand_index(index, "set_operand_symm_per_channel_quant_params")
            op = self._operands[index]
            if op.type.code != OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL:
                raise bad_data(f"set_operand_symm_per_channel_quant_params: operand {index} is "
                               f"{op.type.code.name}, not TENSOR_QUANT8_SYMM_PER_CHANNEL")
            if not isinstance(params, SymmPerChannelQuantParams):
                raise bad_data("set_operand_symm_per_channel_quant_params: expected SymmPerChannelQuantParams")
            new_type = OperandType(op.type.code, op.type.dimensions, op.type.scale, op.type.zero_point,
                                   SymmPerChannelQuantParams(tuple(float(s) for s in params.scales),
                                                             int(params.channel_dim)))
            validate_operand_type(new_type, f"operand {index}")
            op.type = new_type

    def _check_settable(self, index: int, call: str) -> _Operand:
        op = self._operands[index]
        if index in self._producer:
            j = self._producer[index]
            raise bad_data(f"{call}: operand {index} is an output of operation {j} "
                           f"({self._operations[j].code.name}) and cannot have a value")
        if index in self._inputs or index in self._outputs:
            raise bad_data(f"{call}: operand {index} is a model input or output and cannot have a value")
        return op

    def set_operand_value(self, index: int, value: Any) -> None:
        """Set a constant. None omits an optional operand (NO_VALUE). Values up to 128 bytes are
        copied; larger ones are referenced (the buffer must stay unchanged until finish()). Numpy
        values must have the operand's dtype, as for Execution.set_input (as_operand_array)."""
        with self._lock:
            self._check_modifiable("set_operand_value")
            index = self._operand_index(index, "set_operand_value")
            op = self._check_settable(index, "set_operand_value")
            if value is None:
                op.lifetime, op.value = OperandLifetime.NO_VALUE, None
                return
            if op.type.code == OperandCode.MODEL:
                raise bad_data(f"set_operand_value: operand {index} is a MODEL operand; "
                               "use set_operand_value_from_model")
            if not op.type.is_scalar and not op.type.is_fully_specified:
                raise bad_data(f"set_operand_value: operand {index} needs fully specified dimensions to hold a "
                               f"constant, has {op.type.dimensions}")
            buffer = _as_bytes_view(value, op.type, f"set_operand_value: operand {index}")
            expected = op.type.byte_size()
            if buffer.nbytes != expected:
                raise bad_data(f"set_operand_value: operand {index} of type {op.type.describe()} needs "
                               f"{expected} bytes, got {buffer.nbytes}")
            if buffer.nbytes <= MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES:
                op.lifetime, op.value = OperandLifetime.CONSTANT_COPY, bytes(buffer)
            else:
                op.lifetime, op.value = OperandLifetime.CONSTANT_REFERENCE, buffer

    def set_operand_value_from_memory(self, index: int, memory: Memory, offset: int, length: int) -> None:
        """A constant that stays in a memory pool; only the pool handle reaches the driver."""
        with self._lock:
            self._check_modifiable("set_operand_value_from_memory")
            index = self._operand_index(index, "set_operand_value_from_memory")
            op = self._check_settable(index, "set_operand_value_from_memory")
            if not isinstance(memory, Memory):
                raise bad_data(f"set_operand_value_from_memory: operand {index}: expected a Memory, "
                               f"got {type(memory).__name__}")
            memory.check_region(offset, length, f"set_operand_value_from_memory: operand {index}")
            if not op.type.is_scalar and not op.type.is_fully_specified:
                raise bad_data(f"set_operand_value_from_memory: operand {index} needs fully specified dimensions")
            if length != op.type.byte_size():
                raise bad_data(f"set_operand_value_from_memory: operand {index} of type {op.type.describe()} "
                               f"needs {op.type.byte_size()} bytes, got length {length}")
            op.lifetime, op.value = OperandLifetime.CONSTANT_REFERENCE, (memory, int(offset), int(length))

    def set_operand_value_from_model(self, index: int, model: "Model") -> None:
        """A MODEL operand referring to a finished model (a control-flow branch or loop body)."""
        with self._lock:
            self._check_modifiable("set_operand_value_from_model")
            index = self._operand_index(index, "set_operand_value_from_model")
            op = self._check_settable(index, "set_operand_value_from_model")
            if op.type.code != OperandCode.MODEL:
                raise bad_data(f"set_operand_value_from_model: operand {index} is {op.type.code.name}, not MODEL")
            if not isinstance(model, Model):
                raise bad_data(f"set_operand_value_from_model: operand {index}: expected a Model")
            if model is self:
                raise bad_data(f"set_operand_value_from_model: operand {index}: a model cannot reference itself")
            if not model.finished:  # NNAPI: BAD_STATE (the referenced model is in the wrong state)
                raise bad_state(f"set_operand_value_from_model: operand {index}: the referenced model is not finished")
            op.lifetime, op.value = OperandLifetime.SUBGRAPH, model

    # -- operations ---------------------------------------------------------------------------
    def add_operation(self, code: OperationCode, inputs: Sequence[int], outputs: Sequence[int]) -> int:
        """Add an operation; its operands' types are checked against the operation's rules now."""
        with self._lock:
            self._check_modifiable("add_operation")
            op_index = len(self._operations)
            try:
                code = OperationCode(code)
            except (ValueError, TypeError):
                raise bad_data(f"add_operation: operation {op_index}: unknown operation code {code!r}") from None
            where = f"add_operation: operation {op_index} ({code.name})"
            ins = self._index_list(inputs, f"{where}: inputs")
            outs = self._index_list(outputs, f"{where}: outputs")
            if not outs:
                raise bad_data(f"{where}: an operation needs at least one output")
            if len(set(outs)) != len(outs):
                raise bad_data(f"{where}: an operand appears twice among the outputs")
            for o in outs:
                if o in ins:
                    raise bad_data(f"{where}: operand {o} is both an input and an output of the operation")
                rec = self._operands[o]
                if rec.lifetime != OperandLifetime.TEMPORARY_VARIABLE:
                    raise bad_data(f"{where}: output operand {o} already has a value ({rec.lifetime.name})")
                if o in self._inputs:
                    raise bad_data(f"{where}: output operand {o} is a model input")
                if o in self._producer:
                    j = self._producer[o]
                    raise bad_data(f"{where}: operand {o} is already the output of operation {j} "
                                   f"({self._operations[j].code.name})")
                if self._operands[o].type.code == OperandCode.MODEL:
                    raise bad_data(f"{where}: output operand {o} is a MODEL operand")
            operation = _Operation(code, ins, outs)
            self._validate_operation(op_index, operation, phase="validate")
            self._operations.append(operation)
            for o in outs:
                self._producer[o] = op_index
            return op_index

    def _index_list(self, indexes: Sequence[int], what: str) -> tuple[int, ...]:
        if isinstance(indexes, (str, bytes)) or not hasattr(indexes, "__iter__"):
            raise bad_data(f"{what} must be a sequence of operand indexes, got {indexes!r}")
        result = []
        for i in indexes:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise bad_data(f"{what}: operand index {i!r} is not an int")
            if not 0 <= i < len(self._operands):
                raise bad_data(f"{what}: operand {i} does not exist (model has {len(self._operands)} operands)")
            result.append(int(i))
        return tuple(result)

    def identify_inputs_and_outputs(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        with self._lock:
            self._check_modifiable("identify_inputs_and_outputs")
            ins = self._index_list(inputs, "identify_inputs_and_outputs: inputs")
            outs = self._index_list(outputs, "identify_inputs_and_outputs: outputs")
            for what, lst in (("input", ins), ("output", outs)):
                if len(set(lst)) != len(lst):
                    raise bad_data(f"identify_inputs_and_outputs: an operand is listed twice as a model {what}")
            for i in ins:
                if i in outs:
                    raise bad_data(f"identify_inputs_and_outputs: operand {i} cannot be both a model input and output")
                rec = self._operands[i]
                if rec.lifetime != OperandLifetime.TEMPORARY_VARIABLE:
                    raise bad_data(f"identify_inputs_and_outputs: model input operand {i} already has a value "
                                   f"({rec.lifetime.name})")
                if i in self._producer:
                    j = self._producer[i]
                    raise bad_data(f"identify_inputs_and_outputs: model input operand {i} is the output of "
                                   f"operation {j} ({self._operations[j].code.name})")
            for o in outs:
                rec = self._operands[o]
                if rec.lifetime != OperandLifetime.TEMPORARY_VARIABLE:
                    raise bad_data(f"identify_inputs_and_outputs: model output operand {o} is a constant "
                                   f"({rec.lifetime.name})")
                if rec.type.code == OperandCode.MODEL:
                    raise bad_data(f"identify_inputs_and_outputs: model output operand {o} is a MODEL operand")
            self._inputs, self._outputs = ins, outs

    def relax_computation_float32_to_float16(self, allow: bool) -> None:
        with self._lock:
            self._check_modifiable("relax_computation_float32_to_float16")
            if not isinstance(allow, (bool, np.bool_)):
                raise bad_data(f"relax_computation_float32_to_float16: expected a bool, got {allow!r}")
            self._relaxed = bool(allow)

    # -- finish ---------------------------------------------------------------------------------
    def finish(self) -> None:
        """Check the whole model and freeze it."""
        with self._lock:
            self._check_modifiable("finish")
            try:
                self._finish_checks()
                self._hal = self._build_hal()
            except MltsError as e:
                self._invalid = e.message
                raise
            self._finished = True
            vlog.log("model", f"finished model: {len(self._operands)} operands, "
                              f"{len(self._operations)} operations")

    def _finish_checks(self) -> None:
        if not self._operations:
            raise bad_data("finish: the model has no operations")
        if not self._outputs:
            raise bad_data("finish: the model has no outputs (call identify_inputs_and_outputs)")
        producer = self._producer
        inputs = set(self._inputs)
        freed = self._freed_memory_use()
        if freed:  # caught here rather than as "no device supports ..." when a driver cannot map it
            raise bad_data(f"finish: {freed}")
        for i, rec in enumerate(self._operands):
            if rec.type.code == OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL:
                validate_operand_type(rec.type, f"finish: operand {i}")
            if rec.lifetime == OperandLifetime.TEMPORARY_VARIABLE and i not in inputs and i not in producer \
                    and rec.type.code != OperandCode.MODEL:
                raise bad_data(f"finish: operand {i} is never written: it is neither a model input, "
                               "a constant, nor the output of an operation")
            if rec.type.code == OperandCode.MODEL and rec.lifetime not in (OperandLifetime.SUBGRAPH,
                                                                          OperandLifetime.TEMPORARY_VARIABLE):
                raise bad_data(f"finish: MODEL operand {i} must refer to a model")
        self._run_order = self._sort_into_run_order(producer)
        self._inferred = {}
        for j in self._run_order:
            self._validate_operation(j, self._operations[j], phase="finish")

    def _sort_into_run_order(self, producer: dict[int, int]) -> list[int]:
        """Kahn's algorithm over data dependencies; operation order in the model does not matter."""
        n = len(self._operations)
        waiting = [0] * n
        consumers: dict[int, list[int]] = {}
        for j, op in enumerate(self._operations):
            deps = {producer[i] for i in op.inputs if i in producer}
            waiting[j] = len(deps)
            for d in deps:
                consumers.setdefault(d, []).append(j)
        ready = [j for j in range(n) if waiting[j] == 0]
        order: list[int] = []
        while ready:
            j = ready.pop(0)
            order.append(j)
            for c in consumers.get(j, ()):
                waiting[c] -= 1
                if waiting[c] == 0:
                    ready.append(c)
        if len(order) != n:
            stuck = [f"{j} ({self._operations[j].code.name})" for j in range(n) if j not in order]
            raise bad_data(f"finish: the graph has a cycle through operations {', '.join(stuck)}")
        return order

    def _constant_value(self, index: int) -> Any:
        rec = self._operands[index]
        t = rec.type
        if rec.lifetime == OperandLifetime.SUBGRAPH:
            return rec.value.signature()  # what control flow checks its branches and bodies against
        if rec.lifetime == OperandLifetime.CONSTANT_COPY or (
                rec.lifetime == OperandLifetime.CONSTANT_REFERENCE and isinstance(rec.value, memoryview)):
            shape = t.dimensions if t.is_tensor else ()
            return np.frombuffer(rec.value, dtype=t.dtype).reshape(shape)
        if rec.lifetime == OperandLifetime.CONSTANT_REFERENCE:
            memory, offset, _ = rec.value
            if memory.closed or not memory.readable:
                return None
            return memory.array(offset, t.dtype, t.dimensions if t.is_tensor else ())
        return None

    def _validate_operation(self, op_index: int, operation: _Operation, *, phase: str) -> None:
        validator = get_operation(operation.code)
        if validator is None:  # every NNAPI 1.3 operation has a kernel; an unknown code is refused before this
            return
        in_types: list[OperandType | None] = []
        values: list[Any] = []
        for i in operation.inputs:
            rec = self._operands[i]
            if rec.lifetime == OperandLifetime.NO_VALUE:
                in_types.append(None)
                values.append(None)
            else:
                in_types.append(self._inferred.get(i, rec.type))
                values.append(self._constant_value(i))
        out_types = [self._operands[o].type for o in operation.outputs]
        ctx = OperationContext(op_index=op_index, code=operation.code, input_types=in_types, output_types=out_types,
                               input_values=values, input_operands=operation.inputs,
                               output_operands=operation.outputs, phase="validate", relaxed=self._relaxed)
        try:
            validator.validate(ctx)
        except MltsError:
            raise
        except ValueUnknown:
            pass
        except Exception as e:  # a validator bug must still surface as a clean error
            raise bad_data(f"operation {op_index} ({operation.code.name}): validation failed: {e}") from None
        if phase != "finish":
            return
        ctx.phase = "prepare"
        try:
            shapes = validator.prepare(ctx)
        except ValueUnknown:
            return
        except MltsError:
            raise
        except Exception as e:
            raise bad_data(f"operation {op_index} ({operation.code.name}): shape inference failed: {e}") from None
        for k, (o, shape) in enumerate(zip(operation.outputs, shapes)):
            declared = self._operands[o].type
            if declared.dimensions is not None:
                if len(declared.dimensions) != len(shape) or any(
                        d != 0 and d != s for d, s in zip(declared.dimensions, shape)):
                    raise ctx.fail(f"declared dimensions {list(declared.dimensions)} do not match the computed "
                                   f"output shape {list(shape)}", output=k)
            self._inferred[o] = declared.with_dimensions(shape)

    # -- the frozen model -----------------------------------------------------------------------
    def _build_hal(self) -> HalModel:
        builder = HalBuilder()
        main = builder.add_subgraph(self)
        return HalModel(main=builder.subgraphs[main], referenced=tuple(builder.subgraphs[1:]),
                        operand_values=bytes(builder.values), pools=tuple(builder.pools),
                        relax_computation_float32_to_float16=self._relaxed)

    @property
    def finished(self) -> bool:
        return self._finished

    def signature(self) -> SubgraphSignature:
        """This finished model as an IF/WHILE operation of another model sees it."""
        return SubgraphSignature(tuple(self._operands[i].type for i in self._inputs),
                                 tuple(self._operands[o].type for o in self._outputs),
                                 tuple(self._inferred.get(o, self._operands[o].type) for o in self._outputs))

    def hal_model(self) -> HalModel:
        """The model as drivers receive it (operations in run order, constants in pools)."""
        if not self._finished:
            raise bad_state("the model is not finished")
        if any(pool.closed for pool in self._hal.pools):
            raise bad_state(f"the model cannot be used: {self._freed_memory_use()}")
        return self._hal

    def _freed_memory_use(self, seen: set[int] | None = None) -> str | None:
        """Which constant (here or in a referenced model) lives in a freed Memory, in words; None if none.
        NNAPI requires a memory to stay valid while a model, compilation or execution uses it."""
        seen = set() if seen is None else seen
        seen.add(id(self))
        for i, rec in enumerate(self._operands):
            if rec.lifetime == OperandLifetime.CONSTANT_REFERENCE and isinstance(rec.value, tuple) \
                    and rec.value[0].closed:
                return (f"operand {i} is set from memory {rec.value[0].name}, which has been freed; a memory "
                        "must stay valid while a model uses it (free it after the model and its compilations)")
            if rec.lifetime == OperandLifetime.SUBGRAPH and id(rec.value) not in seen:
                inner = rec.value._freed_memory_use(seen)
                if inner:
                    return f"the model referenced by operand {i}: {inner}"
        return None

    # -- read-only views for tools --------------------------------------------------------------
    @property
    def operand_count(self) -> int:
        return len(self._operands)

    @property
    def operation_count(self) -> int:
        return len(self._operations)

    def operand_type(self, index: int) -> OperandType:
        return self._operands[self._operand_index(index, "operand_type")].type

    def inferred_operand_type(self, index: int) -> OperandType:
        """The operand type with dimensions filled in by static shape inference where possible."""
        index = self._operand_index(index, "inferred_operand_type")
        return self._inferred.get(index, self._operands[index].type)

    @property
    def inputs(self) -> tuple[int, ...]:
        return self._inputs

    @property
    def outputs(self) -> tuple[int, ...]:
        return self._outputs

    @property
    def relaxed(self) -> bool:
        return self._relaxed

    def operations(self) -> list[tuple[OperationCode, tuple[int, ...], tuple[int, ...]]]:
        return [(o.code, o.inputs, o.outputs) for o in self._operations]

    def get_supported_operations_for_devices(self, devices: Sequence[Any]) -> list[bool]:
        """ANeuralNetworksModel_getSupportedOperationsForDevices: per operation (in add order)."""
        return supported_operations_for_devices(self, devices)


def _as_bytes_view(value: Any, t: OperandType, what: str) -> memoryview:
    """The raw bytes of a constant, referenced without copying when the dtype already matches."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        view = memoryview(value)
        return view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
    arr = np.ascontiguousarray(as_operand_array(value, t, what))
    if t.is_tensor and arr.ndim and tuple(arr.shape) != tuple(t.dimensions) and arr.size == t.element_count():
        arr = arr.reshape(t.dimensions)
    return memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else memoryview(b"")


