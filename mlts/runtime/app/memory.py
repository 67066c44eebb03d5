"""The application's Memory (ANeuralNetworksMemory): the HAL's pools plus memory domains, runtime side:
memories created from a MemoryDesc, copies between memories (ANeuralNetworksMemory_createFromDesc /
ANeuralNetworksMemory_copy), and how executions use them.

The allocator is the one device every role runs on (through the compilations' partitions), when its
driver can allocate; its buffer is opaque to the runtime and crosses to the driver as a token. Other
uses of such a memory (a CPU fallback, a step whose role the buffer was not allocated for) are staged
through shared memory with explicit copies. Without an allocator, or when it refuses, the memory is
shared memory of the described size, unless a role's compilation names its devices or the size is
unknown (NNAPI's rules), in which case creation fails with OP_FAILED.
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from .. import vlog
from ..enums import ResultCode
from ..errors import MltsError, bad_data, bad_state
from ..hal import AllocatedBuffer, BufferDesc, BufferRole, BufferToken, DataLocation, DeviceBuffer, Request
from ..hal import memory as hal_memory
from ..operand_type import OperandType
from .memory_desc import DescMemoryValidator, MemoryDesc


class Memory(hal_memory.Memory):
    """A memory pool (see mlts.runtime.hal.memory) with the application calls that need the runtime:
    `Memory.create_from_desc(desc)` and `Memory.copy(src, dst)`."""

    @classmethod
    def create_from_desc(cls, desc: MemoryDesc) -> "Memory":
        """ANeuralNetworksMemory_createFromDesc: a driver-allocated buffer for the descriptor's roles, or
        shared memory when no single driver can allocate it."""
        return create_from_desc(desc)

    @staticmethod
    def copy(src: hal_memory.Memory, dst: hal_memory.Memory) -> None:
        """ANeuralNetworksMemory_copy: the whole contents of `src` into `dst` (same logical size)."""
        copy(src, dst)


class DeviceMemory(Memory):
    """A driver-allocated buffer as the application sees it: usable only whole, in its roles, and
    through Memory.copy; the driver knows it by `token`."""

    def __init__(self, allocated: AllocatedBuffer, driver: Any, device_name: str,
                 driver_roles: set[tuple[int, str, int]], validator: DescMemoryValidator) -> None:
        super().__init__(b"", 0, kind="device", name=f"device-memory-on-{device_name}")
        self.buffer: DeviceBuffer = allocated.buffer
        self.token = int(allocated.token)
        self.driver = driver
        self.device_name = device_name
        self.driver_roles = driver_roles  # (id(prepared model), io, step io index) the buffer was allocated for
        self._prepared_alive = []  # the prepared models those ids belong to, kept alive with the memory
        self.validator = validator
        self._free = weakref.finalize(self, _free_quietly, self.buffer)

    @property
    def size(self) -> int:  # the logical size of the current contents (0 while unknown)
        return self.validator.logical_size if getattr(self, "validator", None) is not None else 0

    @size.setter
    def size(self, value: int) -> None:
        pass  # set by Memory.__init__; the size follows the validator

    def check_region(self, offset: int, length: int, what: str, *, for_write: bool = False) -> None:
        raise bad_data(f"{what}: {self.name} is a driver-allocated buffer; it has no regions to map")

    def view(self, offset: int = 0, length: int | None = None) -> memoryview:
        raise bad_data(f"{self.name} is opaque: copy it to shared memory with Memory.copy")

    def array(self, offset, dtype, shape):
        raise bad_data(f"{self.name} is opaque: copy it to shared memory with Memory.copy")

    def serves(self, prepared: Any, io: str, index: int) -> bool:
        return (id(prepared), io, index) in self.driver_roles

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._free()

    free = close


def _free_quietly(buffer: DeviceBuffer) -> None:
    try:
        buffer.free()
    except Exception:  # a driver failing to free must not take the client down
        pass


# -- creation -----------------------------------------------------------------------------------------
def step_roles(compilation: Any, io: str, index: int) -> list[tuple[Any, Any, int]]:
    """(step device, prepared model, step io index) of every partition reading model input `index` or
    writing model output `index` (AOSP's forEachStepRoleOfInput/Output)."""
    main = compilation.model.hal_model().main
    operand = (main.input_indexes if io == "input" else main.output_indexes)[index]
    out = []
    for step in compilation.plan.steps:
        ios = step.inputs if io == "input" else step.outputs
        if operand in ios:
            out.append((step.device, step.prepared, list(ios).index(operand)))
    return out


def create_from_desc(desc: MemoryDesc) -> Memory:
    """ANeuralNetworksMemory_createFromDesc."""
    if not isinstance(desc, MemoryDesc):
        raise bad_data(f"Memory.create_from_desc: expected a MemoryDesc, got {type(desc).__name__}")
    if not desc.finished:
        raise bad_state("Memory.create_from_desc: the MemoryDesc is not finished")
    memory_type = desc.memory_type
    roles = {"input": [], "output": []}
    devices, prepared_models = {}, []
    for io, declared in (("input", desc.input_roles), ("output", desc.output_roles)):
        for compilation, index, frequency in declared:
            for device, prepared, step_index in step_roles(compilation, io, index):
                devices[device.name] = device
                if not any(p is prepared for p in prepared_models):
                    prepared_models.append(prepared)
                model_index = next(k for k, p in enumerate(prepared_models) if p is prepared)
                roles[io].append(BufferRole(model_index, step_index, frequency))
    error: MltsError | None = None
    if len(devices) == 1:
        device = next(iter(devices.values()))
        try:
            memory = _allocate_on(device, desc, memory_type, prepared_models, roles)
            vlog.log("execution", f"create_from_desc: {device.name} allocated buffer {memory.token}")
            return memory
        except MltsError as e:
            error = e
            vlog.log("execution", f"create_from_desc: {device.name} cannot allocate ({e.message})")
    else:
        vlog.log("execution", f"create_from_desc: roles on {len(devices)} devices; no single allocator")
    explicit = any(c.explicit_devices for c, _, _ in desc.roles)
    size = memory_type.byte_size()
    if explicit or size == 0:
        why = ("a role's compilation was created for explicit devices" if explicit
               else "its dimensions are not fully known")
        reason = f" ({error.message})" if error is not None else ""
        raise MltsError(ResultCode.OP_FAILED, f"Memory.create_from_desc: no device could allocate the memory"
                                              f"{reason}, and it cannot fall back to shared memory: {why}")
    memory = Memory.create_shared(size)
    memory.validator = DescMemoryValidator(desc.roles, memory_type)
    return memory


def _allocate_on(device: Any, desc: MemoryDesc, memory_type, prepared_models: list, roles: dict) -> DeviceMemory:
    driver = device.driver
    try:
        allocated = driver.allocate(BufferDesc(tuple(desc.dimensions or ())), list(prepared_models),
                                    list(roles["input"]), list(roles["output"]))
    except MltsError:
        raise
    except Exception as e:  # the runtime survives any driver
        raise MltsError(ResultCode.OP_FAILED, f"{device.name}: allocate raised {type(e).__name__}: {e}") from None
    if not isinstance(allocated, AllocatedBuffer) or not isinstance(allocated.buffer, DeviceBuffer) \
            or isinstance(allocated.token, bool) or not isinstance(allocated.token, int) or allocated.token <= 0:
        raise MltsError(ResultCode.OP_FAILED, f"{device.name}: allocate returned no buffer and valid token")
    driver_roles = {(id(prepared_models[r.model_index]), io, r.io_index) for io in ("input", "output")
                    for r in roles[io]}
    memory = DeviceMemory(allocated, driver, device.name, driver_roles, DescMemoryValidator(desc.roles, memory_type))
    memory._prepared_alive = list(prepared_models)
    return memory


# -- copy -----------------------------------------------------------------------------------------------
def _metadata(memory: Memory) -> tuple[int, tuple[int, ...] | None, Any]:
    v = getattr(memory, "validator", None)
    if v is None:
        return memory.size, None, None
    return v.logical_size, v.dimensions, v.type


def copy(src: Memory, dst: Memory) -> None:
    """ANeuralNetworksMemory_copy: whole contents, between any two memories of the same logical size
    (and, for memories from descriptors, compatible type and dimensions)."""
    for what, m in (("source", src), ("destination", dst)):
        if not isinstance(m, hal_memory.Memory):
            raise bad_data(f"Memory.copy: the {what} must be a Memory, got {type(m).__name__}")
        if m.closed:
            raise bad_data(f"Memory.copy: the {what} memory {m.name} has been freed")
    if src is dst:
        return
    ok = False
    try:
        _copy(src, dst)
        ok = True
    finally:
        v = getattr(dst, "validator", None)
        if v is not None:
            v.set_initialized(ok)


def _copy(src: Memory, dst: Memory) -> None:
    sv, dv = getattr(src, "validator", None), getattr(dst, "validator", None)
    if sv is not None and not sv.initialized:
        raise bad_data(f"Memory.copy: the source memory {src.name} is not initialized")
    if not src.readable:
        raise bad_data(f"Memory.copy: the source memory {src.name} is not readable")
    if not dst.writable:
        raise bad_data(f"Memory.copy: the destination memory {dst.name} is not writable")
    size, dims, operand = _metadata(src)
    if dv is not None:
        if not dv.update(dims, size, operand):
            raise bad_data(f"Memory.copy: {src.name} ({size} bytes, dimensions {list(dims or ())}) does not fit "
                           f"{dst.name} ({dv.type.describe()})")
    elif size != dst.size:
        raise bad_data(f"Memory.copy: {src.name} holds {size} bytes, {dst.name} has {dst.size}")
    dims = tuple(dims or ())
    try:
        if isinstance(src, DeviceMemory) and isinstance(dst, DeviceMemory):
            stage = Memory.create_shared(max(size, 1)) if size else None
            if stage is None:
                raise bad_data(f"Memory.copy: the size of {src.name} is not known")
            try:
                src.buffer.copy_to(_exact(stage, size))
                dst.buffer.copy_from(_exact(stage, size), dims)
            finally:
                stage.close()
        elif isinstance(src, DeviceMemory):
            src.buffer.copy_to(dst)
        elif isinstance(dst, DeviceMemory):
            dst.buffer.copy_from(src, dims)
        else:
            dst.view(0, size)[:] = src.view(0, size)
    except MltsError:
        raise
    except Exception as e:  # a driver's bug is the copy's failure, never the client's crash
        raise MltsError(ResultCode.OP_FAILED, f"Memory.copy: {type(e).__name__}: {e}") from None


def _exact(stage: Memory, size: int) -> Memory:
    return stage if stage.size == size else Memory(stage.view(0, size), size, kind="shared", fd=None)


# -- executions -----------------------------------------------------------------------------------------
def bind(memory: Memory, compilation: Any, io: str, index: int, declared, operand_type, offset: Any, length: Any,
         call: str) -> tuple[int, int, tuple[int, ...]]:
    """set_input_from_memory / set_output_from_memory with a memory from a descriptor: (offset, length,
    dimensions) of the binding."""
    if memory.closed:
        raise bad_data(f"{call}: memory {memory.name} has been freed")
    dims = memory.validator.bind(compilation, io, index, declared, operand_type, offset, length, call)
    return 0, memory.size, tuple(dims or ())


def input_dimensions(memory: Memory, requested: tuple[int, ...], call: str) -> tuple[int, ...]:
    """At compute time: the dimensions an input memory from a descriptor holds (OP_FAILED if none)."""
    return memory.validator.input_dimensions(requested or None if memory.validator.type.is_tensor else (), call)


def finish_outputs(bindings: list, shapes: list | None, ok: bool) -> None:
    """After a computation: output memories from descriptors take the computed dimensions and become
    initialized, or uninitialized when it failed (as NNAPI)."""
    for k, b in enumerate(bindings):
        v = getattr(getattr(b, "memory", None), "validator", None)
        if v is None:
            continue
        if ok and shapes is not None and v.update(tuple(shapes[k].dimensions)):
            v.set_initialized(True)
        else:
            v.set_initialized(False)


class DriverPools:
    """Turns a request's device memories into what its driver can use: the buffer's token where the
    buffer was allocated for the argument's role on this prepared model, else a shared-memory copy
    (written back to the buffer after a successful run)."""

    def __init__(self, prepared: Any) -> None:
        self.prepared = prepared
        self._write_back: list[tuple[DeviceMemory, Memory, int]] = []  # (memory, staged copy, output index)
        self._stages: list[Memory] = []

    def convert(self, request: Request) -> Request:
        if not any(isinstance(p, DeviceMemory) for p in request.pools):
            return request
        pools: list = []
        placed: dict[Any, int] = {}

        def place(key: Any, pool: Any) -> int:
            if key not in placed:
                placed[key] = len(pools)
                pools.append(pool)
            return placed[key]

        converted = {}
        for io, args in (("input", request.inputs), ("output", request.outputs)):
            out = []
            for k, arg in enumerate(args):
                loc = arg.location
                if arg.has_no_value or loc is None:
                    out.append(arg)
                    continue
                pool = request.pools[loc.pool_index]
                if not isinstance(pool, DeviceMemory):
                    out.append(_relocate(arg, place(("pool", loc.pool_index), pool), loc.offset, loc.length))
                elif pool.serves(self.prepared, io, k):
                    out.append(_relocate(arg, place(("token", pool.token), BufferToken(pool.token)), 0, 0))
                else:
                    stage = self._stage(pool, io, k)
                    out.append(_relocate(arg, place(("stage", id(stage)), stage), 0, stage.size))
            converted[io] = tuple(out)
        return Request(converted["input"], converted["output"], tuple(pools))

    def _stage(self, memory: DeviceMemory, io: str, k: int) -> Memory:
        size = memory.validator.type.byte_size() if io == "output" else memory.size
        if size == 0:
            size = memory.size
        if size == 0:
            raise MltsError(ResultCode.OP_FAILED, f"{memory.name}: a buffer of unknown size cannot be used by "
                                                  f"another device's partition")
        stage = Memory.create_shared(size)
        self._stages.append(stage)
        if io == "input":
            memory.buffer.copy_to(stage)
        else:
            self._write_back.append((memory, stage, k))
        return stage

    def write_back(self, shapes: list) -> None:
        """After a successful run: staged outputs go into their buffers, with the computed dimensions."""
        for memory, stage, k in self._write_back:
            dims = tuple(shapes[k].dimensions) if k < len(shapes) else ()
            t = memory.validator.type
            size = _byte_size(t, dims)
            part = stage if size == stage.size else Memory(stage.view(0, size), size, kind="shared")
            memory.buffer.copy_from(part, dims)

    def close(self) -> None:
        for stage in self._stages:
            stage.close()
        self._stages.clear()


def _byte_size(t: OperandType, dims: tuple[int, ...]) -> int:
    return OperandType(t.code, dims, t.scale, t.zero_point, t.channel_quant).byte_size()


def _relocate(arg, pool_index: int, offset: int, length: int):
    return dataclasses.replace(arg, location=DataLocation(pool_index, offset, length))


def is_device_memory(memory: Any) -> bool:
    return isinstance(memory, DeviceMemory)


__all__ = ["DeviceMemory", "Memory", "DriverPools", "bind", "copy", "create_from_desc", "finish_outputs", "input_dimensions",
           "is_device_memory", "step_roles"]
