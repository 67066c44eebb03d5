"""Memory domains, driver side: opaque buffers a driver allocates for roles on models it prepared, and
requests that name them by token (AOSP's sample driver: BufferTracker, ManagedBuffer, SampleBuffer).

A token is not a capability: a buffer serves only the prepared models and roles it was allocated
for, so a client that learns (or guesses) another client's token can neither read nor write it.
Tokens are random 62-bit numbers, unique per tracker. Every access takes the buffer's lock with a
timeout (nothing blocks forever); reads copy the contents under the lock and writes replace them
whole, so concurrent use gives some complete value, never a torn one or a crash.
"""
from __future__ import annotations

import secrets
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..enums import ResultCode
from ..errors import MltsError, bad_data
from ..hal import AllocatedBuffer, BufferDesc, BufferRole, BufferToken, DeviceBuffer, HalModel, IPreparedModel, Request
from ..hal.memory import Memory
from ..operand_type import OperandType, check_dimensions, combine_dimensions, same_operand_kind

LOCK_TIMEOUT_S = 5.0  # a buffer busy for longer than this fails the access instead of waiting on


class ManagedBuffer:
    """The contents and metadata of one allocated buffer (AOSP's ManagedBuffer)."""

    def __init__(self, operand_type: OperandType, roles: dict[tuple[int, str, int], IPreparedModel]) -> None:
        self.type = operand_type  # code, quantization and the initial dimensions (0 / None = unknown)
        self.roles = roles  # (id(prepared model), "input" | "output", io index) -> the model (kept alive)
        self.dimensions = operand_type.dimensions  # updated by every write
        self.data: np.ndarray | None = None
        self.initialized = False
        self._lock = threading.Lock()

    @contextmanager
    def locked(self, what: str) -> Iterator[None]:
        if not self._lock.acquire(timeout=LOCK_TIMEOUT_S):
            raise MltsError(ResultCode.RESOURCE_EXHAUSTED_TRANSIENT, f"{what}: the buffer stayed busy for "
                                                                     f"{LOCK_TIMEOUT_S:g} s")
        try:
            yield
        finally:
            self._lock.release()

    def has_role(self, prepared: Any, io: str, index: int) -> bool:
        return self.roles.get((id(prepared), io, index)) is prepared

    def byte_size(self, dims: tuple[int, ...] | None) -> int:
        return self.type.with_dimensions(dims).byte_size() if dims is not None else 0

    def read(self, requested: OperandType, what: str) -> np.ndarray:
        """A copy of the contents as an input of type `requested` (its dims must agree with the buffer's)."""
        with self.locked(what):
            if not self.initialized or self.data is None:
                raise bad_data(f"{what}: the device buffer is not initialized")
            data, dims = self.data, tuple(self.data.shape)
            if requested.is_tensor and combine_dimensions(requested.dimensions, dims) is None:
                raise bad_data(f"{what}: dimensions {list(requested.dimensions or ())} do not match the buffer's "
                               f"{list(dims)}")
            return data.copy()

    def fits(self, shape: tuple[int, ...]) -> bool:
        """Whether a computed output of `shape` agrees with the dimensions the buffer was allocated with."""
        if not self.type.is_tensor:
            return shape == ()
        return combine_dimensions(self.type.dimensions, tuple(shape)) is not None

    def write(self, value: np.ndarray, what: str) -> None:
        if value.dtype != self.type.dtype or not self.fits(tuple(value.shape)):
            raise MltsError(ResultCode.OP_FAILED, f"{what}: a {value.dtype}{list(value.shape)} value does not fit "
                                                  f"the device buffer of {self.type.describe()}")
        copy = np.array(value, copy=True, order="C")
        with self.locked(what):
            self.data, self.dimensions, self.initialized = copy, tuple(copy.shape), True

    def copy_to(self, dst: Memory) -> None:
        if not isinstance(dst, Memory):
            raise bad_data(f"copy_to: expected a Memory, got {type(dst).__name__}")
        with self.locked("copy_to"):
            if not self.initialized or self.data is None:
                raise bad_data("copy_to: the device buffer is not initialized")
            data = self.data
        dst.check_region(0, dst.size, "copy_to", for_write=True)
        if dst.size != data.nbytes:
            raise bad_data(f"copy_to: destination has {dst.size} bytes, the buffer holds {data.nbytes}")
        dst.view(0, data.nbytes)[:] = data.reshape(-1).view(np.uint8)

    def copy_from(self, src: Memory, dimensions: Sequence[int]) -> None:
        try:
            if not isinstance(src, Memory):
                raise bad_data(f"copy_from: expected a Memory, got {type(src).__name__}")
            dims = check_dimensions(dimensions, "copy_from")
            if not self.type.is_tensor and dims:
                raise bad_data("copy_from: a scalar buffer takes no dimensions")
            # () = no dimensions given (copying from plain memory): the buffer's own must be known
            combined = (combine_dimensions(self.type.dimensions, dims or None) if self.type.is_tensor else ())
            if combined is None:
                raise bad_data(f"copy_from: dimensions {list(dims)} conflict with the buffer's "
                               f"{list(self.type.dimensions or ())}")
            size = self.byte_size(combined)
            if size == 0:
                raise bad_data(f"copy_from: dimensions {list(combined)} are not fully specified")
            src.check_region(0, src.size, "copy_from")
            if src.size != size:
                raise bad_data(f"copy_from: source has {src.size} bytes, {list(combined)} needs {size}")
            value = np.frombuffer(bytes(src.view(0, size)), dtype=self.type.dtype).reshape(combined).copy()
        except MltsError:
            with self.locked("copy_from"):
                self.initialized = False
            raise
        with self.locked("copy_from"):
            self.data, self.dimensions, self.initialized = value, tuple(combined), True


class BufferTracker:
    """One driver's buffers by token (AOSP's BufferTracker)."""

    def __init__(self) -> None:
        self._buffers: dict[int, ManagedBuffer] = {}
        self._lock = threading.Lock()

    def add(self, buffer: ManagedBuffer) -> int:
        with self._lock:
            while True:
                token = secrets.randbits(62) + 1
                if token not in self._buffers:
                    self._buffers[token] = buffer
                    return token

    def get(self, token: Any) -> ManagedBuffer | None:
        with self._lock:
            return self._buffers.get(token)

    def remove(self, token: int) -> None:
        with self._lock:
            self._buffers.pop(token, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._buffers)


class TrackedBuffer(DeviceBuffer):
    """The buffer object handed to the client (AOSP's SampleBuffer); freeing it frees its token."""

    def __init__(self, managed: ManagedBuffer, tracker: BufferTracker, token: int) -> None:
        self.managed, self.tracker, self.token = managed, tracker, token

    def copy_to(self, dst: Memory) -> None:
        self._live("copy_to").copy_to(dst)

    def copy_from(self, src: Memory, dimensions: tuple[int, ...]) -> None:
        self._live("copy_from").copy_from(src, dimensions)

    def free(self) -> None:
        self.tracker.remove(self.token)

    def _live(self, what: str) -> ManagedBuffer:
        if self.tracker.get(self.token) is not self.managed:
            raise bad_data(f"{what}: the device buffer has been freed")
        return self.managed

    def __del__(self) -> None:  # the client dropped it: the token goes with it (as AOSP's Token)
        try:
            self.free()
        except Exception:
            pass


def allocate_buffer(driver_name: str, tracker: BufferTracker, desc: BufferDesc,
                    prepared_models: Sequence[IPreparedModel], input_roles: Sequence[BufferRole],
                    output_roles: Sequence[BufferRole], model_of: Callable[[Any], HalModel | None]) -> AllocatedBuffer:
    """Validate a buffer request (AOSP's validateMemoryDesc) and allocate it; `model_of` gives the model of
    a prepared model of this driver, None for anything else."""
    where = f"{driver_name}: allocate"
    if not isinstance(desc, BufferDesc):
        raise bad_data(f"{where}: expected a BufferDesc, got {type(desc).__name__}")
    models = list(prepared_models) if isinstance(prepared_models, (list, tuple)) else None
    if not models:
        raise bad_data(f"{where}: at least one prepared model is required")
    hal_models = []
    for m, prepared in enumerate(models):
        model = model_of(prepared)
        if model is None:
            raise bad_data(f"{where}: prepared model {m} was not prepared by {driver_name}")
        hal_models.append(model)
    roles: dict[tuple[int, str, int], IPreparedModel] = {}
    operand_type: OperandType | None = None
    dims = None if desc.dimensions == () else check_dimensions(desc.dimensions, where)
    for io, role_list in (("input", input_roles), ("output", output_roles)):
        if not isinstance(role_list, (list, tuple)):
            raise bad_data(f"{where}: {io} roles must be a sequence of BufferRole")
        for role in role_list:
            if not isinstance(role, BufferRole):
                raise bad_data(f"{where}: expected a BufferRole, got {type(role).__name__}")
            if isinstance(role.model_index, bool) or not isinstance(role.model_index, int) \
                    or not 0 <= role.model_index < len(models):
                raise bad_data(f"{where}: {io} role names prepared model {role.model_index!r} of {len(models)}")
            sg = hal_models[role.model_index].main
            indexes = sg.input_indexes if io == "input" else sg.output_indexes
            if isinstance(role.io_index, bool) or not isinstance(role.io_index, int) \
                    or not 0 <= role.io_index < len(indexes):
                raise bad_data(f"{where}: {io} role index {role.io_index!r} out of range ({len(indexes)} {io}s)")
            if not isinstance(role.frequency, (int, float)) or not 0.0 < role.frequency <= 1.0:
                raise bad_data(f"{where}: role frequency must be in (0, 1], got {role.frequency!r}")
            key = (id(models[role.model_index]), io, role.io_index)
            if key in roles:
                raise bad_data(f"{where}: {io} role {role.io_index} of prepared model {role.model_index} given twice")
            roles[key] = models[role.model_index]
            t = sg.operands[indexes[role.io_index]].type
            if operand_type is not None and not same_operand_kind(t, operand_type):
                raise bad_data(f"{where}: roles have different operand types ({t.describe()} and "
                               f"{operand_type.describe()})")
            operand_type = operand_type or t
            if t.is_tensor and t.dimensions is not None:
                combined = combine_dimensions(dims, t.dimensions)
                if combined is None:
                    raise bad_data(f"{where}: role dimensions {list(t.dimensions)} conflict with {list(dims or ())}")
                dims = combined
    if operand_type is None:
        raise bad_data(f"{where}: at least one role is required")
    if not operand_type.is_tensor and dims:
        raise bad_data(f"{where}: a scalar buffer takes no dimensions")
    managed = ManagedBuffer(operand_type.with_dimensions(dims) if dims is not None else
                            OperandType(operand_type.code, None, operand_type.scale, operand_type.zero_point,
                                        operand_type.channel_quant), roles)
    token = tracker.add(managed)
    return AllocatedBuffer(TrackedBuffer(managed, tracker, token), token)


class RequestBuffers:
    """The device buffers of one request to one prepared model, checked against their roles."""

    def __init__(self, tracker: BufferTracker, prepared: IPreparedModel, *, check_roles: bool = True) -> None:
        self.tracker = tracker
        self.prepared = prepared
        self.check_roles = check_roles  # False only in the fault-injecting driver
        self.by_pool: dict[int, ManagedBuffer] = {}

    def resolve(self, request: Request) -> "RequestBuffers":
        """Find every token's buffer and check each argument in it (AOSP's ManagedBuffer::validateRequest)."""
        for p, pool in enumerate(request.pools):
            if not isinstance(pool, BufferToken):
                continue
            buffer = self.tracker.get(pool.token)
            if buffer is None:
                raise bad_data(f"request pool {p}: unknown buffer token")
            self.by_pool[p] = buffer
        used: dict[int, set[str]] = {}
        for io, args in (("input", request.inputs), ("output", request.outputs)):
            for k, arg in enumerate(args):
                if arg.has_no_value or arg.location is None or arg.location.pool_index not in self.by_pool:
                    continue
                p = arg.location.pool_index
                if self.check_roles and not self.by_pool[p].has_role(self.prepared, io, k):
                    raise bad_data(f"{io} {k}: the device buffer of request pool {p} was not allocated for "
                                   f"this prepared model's {io} {k}")
                used.setdefault(p, set()).add(f"{io} {k}")
        for p, uses in used.items():
            if len(uses) > 1:
                raise bad_data(f"request pool {p}: one device buffer is used by {', '.join(sorted(uses))}")
        return self

    def buffer(self, pool_index: int) -> ManagedBuffer | None:
        return self.by_pool.get(pool_index)



__all__ = ["BufferTracker", "ManagedBuffer", "RequestBuffers", "TrackedBuffer", "allocate_buffer", "LOCK_TIMEOUT_S"]
