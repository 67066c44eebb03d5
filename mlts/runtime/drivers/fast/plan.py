"""Compiling a HAL model into an execution plan, and the per-run workspaces that execute it.

Preparation turns every operation into a Step (parameters resolved, weights repacked, kernels
chosen), then decides how each tensor is stored: RESHAPE outputs, and TRANSPOSE outputs read only
by im2col, are views (no copy); quantized tensors that only feed GEMMs are stored centred in the
float type of those GEMMs; tensors that only feed 3x3 depthwise convolutions are stored inside a
zero-bordered buffer. Every tensor and scratch buffer then gets a byte slot, shared by liveness,
so that the working set stays small. A Workspace is one allocation of those slots with every step
bound to its arrays; a run copies the inputs in, calls the bound steps and copies the outputs out,
without allocating. Workspaces are pooled, so concurrent executions each get their own.
"""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from ...hal.types import constant_array
from ...enums import OperandLifetime, ResultCode
from ...errors import MltsError
from ...hal import HalModel
from .operation_table import fast_operation
from .step import ArrayOf, PlanNode, Step, Value
from .steps_other import Copy
from .support import static_context, unsupported_reason

_ALIGN = 64
_CONSTANT = (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE)


class Plan:
    """A prepared model: steps in run order, values, and the slot layout of a workspace."""

    def __init__(self, model: HalModel, name: str = "mlts-fast") -> None:
        self.model = model
        self.name = name
        sg = model.main
        self.values: dict[int, Value] = {}
        self.steps: list[Step] = []
        for j in range(len(sg.operations)):
            reason = unsupported_reason(model, j)
            if reason is not None:
                raise MltsError(ResultCode.BAD_DATA,
                                f"{name}: operation {j} ({sg.operations[j].type.name}) is not supported: {reason}")
            self._add_operation(j)
        self.inputs = list(sg.input_indexes)
        self.outputs = list(sg.output_indexes)
        for index in self.inputs + self.outputs:  # a model input no operation reads still gets its buffer
            self._value(index)
        self._elide_transposes()
        self._decide_storage()
        self._decide_padding()
        for step in self.steps:
            step.configure(self.values)
        self._layout()
        self._pool: list[Workspace] = []
        self._lock = threading.Lock()

    # -- building ---------------------------------------------------------------------------------
    def _value(self, index: int) -> Value:
        if index in self.values:
            return self.values[index]
        sg = self.model.main
        operand = sg.operands[index]
        t = operand.type
        if operand.lifetime in _CONSTANT:
            const = np.ascontiguousarray(constant_array(self.model, t, operand.location))
            v = Value(index, t, tuple(t.dimensions), "const", const=const)
        elif index in sg.input_indexes:
            v = Value(index, t, tuple(t.dimensions), "input")
        elif index in sg.output_indexes:
            v = Value(index, t, tuple(t.dimensions), "output")
        else:
            v = Value(index, t, tuple(t.dimensions), "temp")
        self.values[index] = v
        return v

    def _add_operation(self, j: int) -> None:
        """The operation's step, from its record in the operation table (support was checked)."""
        op = self.model.main.operations[j]
        record = fast_operation(op.type)
        for k in record.data_inputs:
            if k < len(op.inputs):
                self._value(op.inputs[k])
        out = op.outputs[0]
        self._value(out)
        step = record.build(PlanNode(j, op.type, static_context(self.model, j), self.values, tuple(op.inputs), out))
        if step is None:
            return
        index = len(self.steps)
        for i in step.reads:
            self.values[i].consumers.append(index)
        self.values[out].producer = index
        value_range = getattr(step, "value_range", None)
        if value_range is not None:
            self.values[out].value_range = value_range
        self.steps.append(step)

    def _root(self, index: int) -> int:
        while self.values[index].alias_of is not None:
            index = self.values[index].alias_of
        return index

    def _elide_transposes(self) -> None:
        """A TRANSPOSE whose every consumer reads strided views becomes a view itself (no copy):
        e.g. the NCHW -> NHWC transpose in front of a network's first convolution."""
        aliased = {v.alias_of for v in self.values.values() if v.alias_of is not None}
        for step in self.steps:
            if not isinstance(step, Copy) or step.perm is None or not step.reads:
                continue
            out = self.values[step.out]
            if out.kind != "temp" or not out.consumers or step.out in aliased:
                continue
            if all(self.steps[c].accepts_strided(step.out) for c in out.consumers):
                out.alias_of, out.perm = step.x, step.perm
                step.elided = True

    def _decide_storage(self) -> None:
        """Quantized temporaries whose every consumer wants a centred GEMM matrix (of one float type)
        and whose producer can write one are stored centred; everything else as the operand type."""
        aliased = {v.alias_of for v in self.values.values() if v.alias_of is not None}
        for v in self.values.values():
            if v.kind != "temp" or not v.quantized or v.index in aliased or v.alias_of is not None \
                    or v.producer is None:
                continue
            if not self.steps[v.producer].writes_centred or not v.consumers:
                continue
            wanted = {self.steps[c].centred_input(v.index) for c in set(v.consumers)}
            if len(wanted) == 1 and None not in wanted:
                v.dtype = np.dtype(wanted.pop())
                v.centred_sub = int(v.type.zero_point)

    def _decide_padding(self) -> None:
        """Temporaries whose every consumer asks for the same border, and whose producer can write
        one, are stored inside a bordered buffer."""
        aliased = {v.alias_of for v in self.values.values() if v.alias_of is not None}
        for v in self.values.values():
            if v.kind != "temp" or v.index in aliased or v.alias_of is not None or v.producer is None \
                    or not v.consumers or not self.steps[v.producer].writes_padded:
                continue
            wanted = {self.steps[c].input_padding(v.index) for c in set(v.consumers)}
            if len(wanted) == 1 and None not in wanted:
                v.padding = wanted.pop()

    # -- memory layout ------------------------------------------------------------------------------
    def _layout(self) -> None:
        """Assign every stored value and every scratch buffer a byte slot, sharing slots between
        buffers whose lifetimes (in step indices) do not overlap."""
        n = len(self.steps)
        spans: dict[int, list[int]] = {}  # root value -> [first step, last step]
        for v in self.values.values():
            if v.kind == "const":
                continue
            root = self._root(v.index)
            first = -1 if v.kind == "input" else (v.producer if v.producer is not None else -1)
            last = n if v.kind == "output" else max(v.consumers, default=first)
            span = spans.setdefault(root, [first, last])
            if v.alias_of is None:
                span[0] = first
            span[1] = max(span[1], last)
        requests: list[tuple[int, int, int, object]] = []  # (first, last, bytes, key)
        for root, (first, last) in spans.items():
            requests.append((first, last, self.values[root].nbytes, ("value", root)))
        self.scratch_specs: list[list[tuple]] = []
        for j, step in enumerate(self.steps):
            specs = step.scratch()
            self.scratch_specs.append(specs)
            for k, (shape, dtype, *persistent) in enumerate(specs):
                first, last = (-1, n) if persistent and persistent[0] else (j, j)
                nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                requests.append((first, last, nbytes, ("scratch", j, k)))
        requests.sort(key=lambda r: (r[0], -r[2]))
        slot_sizes: list[int] = []
        slot_free_after: list[int] = []  # last step of the slot's current occupant
        self.placement: dict[object, int] = {}
        for first, last, size, key in requests:
            free = [s for s in range(len(slot_sizes)) if slot_free_after[s] < first]
            fits = [s for s in free if slot_sizes[s] >= size]
            if fits:
                slot = min(fits, key=lambda s: slot_sizes[s])
            elif free:
                slot = max(free, key=lambda s: slot_sizes[s])
                slot_sizes[slot] = size
            else:
                slot = len(slot_sizes)
                slot_sizes.append(size)
                slot_free_after.append(last)
            slot_free_after[slot] = last
            self.placement[key] = slot
        self.slot_sizes = slot_sizes

    # -- workspaces -----------------------------------------------------------------------------------
    def acquire(self) -> "Workspace":
        with self._lock:
            if self._pool:
                return self._pool.pop()
        return Workspace(self)

    def release(self, ws: "Workspace") -> None:
        with self._lock:
            self._pool.append(ws)

    def describe(self) -> list[str]:
        """One line per step (operation, kernel choice), for logs and tests."""
        return [s.describe() + (" (a view)" if s.elided else "") for s in self.steps]

    @property
    def workspace_bytes(self) -> int:
        return sum(self.slot_sizes)


class Workspace:
    """One set of buffers for a plan, with every step bound to them."""

    def __init__(self, plan: Plan) -> None:
        self.slots = [_aligned(size) for size in plan.slot_sizes]
        self.arrays: dict[int, np.ndarray] = {}
        self.bordered: dict[int, np.ndarray] = {}
        array = _Arrays(self, plan)
        self.calls: list[Callable[[], None]] = []
        self.bound_steps: list[Step] = []
        for j, step in enumerate(plan.steps):
            scratch = []
            for k, (shape, dtype, *_) in enumerate(plan.scratch_specs[j]):
                buf = self.slots[plan.placement[("scratch", j, k)]]
                count = int(np.prod(shape, dtype=np.int64))
                scratch.append(np.frombuffer(buf, dtype=dtype, count=count).reshape(shape))
            if not step.elided:
                self.calls.append(step.bind(array, scratch))
                self.bound_steps.append(step)
        self.inputs = [array(i) for i in plan.inputs]
        self.outputs = [array(i) for i in plan.outputs]

    def run(self, deadline_check: Callable[[Step], None] | None = None) -> None:
        if deadline_check is None:
            for call in self.calls:
                call()
            return
        for step, call in zip(self.bound_steps, self.calls):
            deadline_check(step)
            call()


class _Arrays(ArrayOf):
    """Operand arrays of one workspace, created on first request: constants, views, or slot memory."""

    def __init__(self, ws: "Workspace", plan: Plan) -> None:
        self.ws = ws
        self.plan = plan

    def __call__(self, index: int) -> np.ndarray:
        arrays = self.ws.arrays
        if index in arrays:
            return arrays[index]
        v = self.plan.values[index]
        if v.kind == "const":
            arr = v.const
        elif v.alias_of is not None:
            base = self(v.alias_of)
            arr = base.reshape(v.shape) if v.perm is None else base.transpose(v.perm)
        else:
            buf = self.ws.slots[self.plan.placement[("value", index)]]
            shape = v.stored_shape
            arr = np.frombuffer(buf, dtype=v.dtype, count=int(np.prod(shape, dtype=np.int64))).reshape(shape)
            if v.padding is not None:
                self.ws.bordered[index] = arr
                top, _, left, _ = v.padding
                _, h, w, _ = v.shape
                arr = arr[:, top:top + h, left:left + w, :]
        arrays[index] = arr
        return arr

    def padded(self, index: int) -> np.ndarray:
        self(index)
        return self.ws.bordered[index]


def _aligned(size: int) -> np.ndarray:
    """A zeroed byte buffer of `size` bytes starting on a 64-byte boundary."""
    raw = np.zeros(max(size, 1) + _ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    return raw[offset:offset + max(size, 1)]
