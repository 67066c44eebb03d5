"""Memory pools: anonymous shared memory and memory-mapped files (NNAPI's ANeuralNetworksMemory).

A pool is what crosses the driver boundary instead of data: constants (CONSTANT_REFERENCE),
execution inputs and outputs. Every region used is checked against the pool's size and protection.
"""
from __future__ import annotations

import itertools
import math
import mmap
import os
import weakref
from typing import Any

import numpy as np

from ..enums import ResultCode
from ..errors import MltsError, bad_data

PROT_READ = mmap.PROT_READ
PROT_WRITE = mmap.PROT_WRITE


class Memory:
    """A memory pool. Create with `Memory.create_shared(size)`, `Memory.from_file(path, ...)` or
    `Memory.from_fd(size, protect, fd, offset)`."""

    _ids = itertools.count(1)
    #: memories created from a MemoryDesc carry its role and initialization checks (memory_desc.py)
    validator: Any = None

    def __init__(self, buffer: Any, size: int, *, kind: str, readable: bool = True, writable: bool = True,
                 fd: int | None = None, mapping: mmap.mmap | None = None, name: str = "", owner: Any = None,
                 file_offset: int = 0, path: str | None = None):
        self._buffer = memoryview(buffer).cast("B") if size else memoryview(b"")
        self.size = int(size)
        self.kind = kind  # "shared" | "file" | "user" (an application array, in-process only)
        self.readable = readable
        self.writable = writable
        self.fd = fd
        # The one place the descriptor is closed: free() or, for a memory dropped without it (a finished
        # model's constant pool goes with the model), garbage collection; never twice.
        self._close_fd = weakref.finalize(self, _close_quietly, fd) if fd is not None else None
        self.path = path
        self.file_offset = file_offset
        self._mapping = mapping
        self._owner = owner  # keeps a wrapped array alive
        self.closed = False
        self.id = next(Memory._ids)  # itertools.count: atomic under the GIL
        self._name = name

    @property
    def name(self) -> str:
        """Its given name, or one made from its kind and id (made when first asked: most never are)."""
        return self._name or f"{self.kind}-memory-{self.id}"

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def create_shared(cls, size: int) -> "Memory":
        """Anonymous shared memory (the ashmem equivalent): a memfd that other processes can map."""
        size = _check_size(size, "shared memory")
        try:
            fd = os.memfd_create("mlts-pool", getattr(os, "MFD_CLOEXEC", 0))
            os.ftruncate(fd, size)
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, PROT_READ | PROT_WRITE)
        except (OSError, ValueError, OverflowError) as e:
            raise MltsError(ResultCode.OUT_OF_MEMORY, f"cannot create {size} bytes of shared memory: {e}") from None
        return cls(mapping, size, kind="shared", fd=fd, mapping=mapping)

    @classmethod
    def from_fd(cls, size: int, protect: int, fd: int, offset: int = 0) -> "Memory":
        """ANeuralNetworksMemory_createFromFd: map `size` bytes of `fd` from `offset` with `protect`."""
        size = _check_size(size, "file memory")
        offset = _as_int(offset, "memory offset")
        protect = _as_int(protect, "memory protection")
        if offset < 0:
            raise bad_data(f"memory offset must be non-negative, got {offset}")
        if protect & ~(PROT_READ | PROT_WRITE) or protect == 0:
            raise bad_data(f"memory protection must be a combination of PROT_READ and PROT_WRITE, got {protect!r}")
        try:
            file_size = os.fstat(fd).st_size
        except (OSError, TypeError) as e:
            raise bad_data(f"invalid file descriptor {fd!r}: {e}") from None
        if offset + size > file_size:
            raise bad_data(f"region [{offset}, {offset + size}) exceeds the file's {file_size} bytes")
        aligned = offset - offset % mmap.ALLOCATIONGRANULARITY
        try:
            mapping = mmap.mmap(fd, size + offset - aligned, mmap.MAP_SHARED, protect, offset=aligned)
        except (OSError, ValueError) as e:
            raise MltsError(ResultCode.UNMAPPABLE, f"cannot map fd {fd}: {e}") from None
        try:
            dup = os.dup(fd)
        except OSError:
            dup = None
        view = memoryview(mapping)[offset - aligned:offset - aligned + size]
        return cls(view, size, kind="file", readable=bool(protect & PROT_READ), writable=bool(protect & PROT_WRITE),
                   fd=dup, mapping=mapping, file_offset=offset)

    @classmethod
    def from_file(cls, path: str | os.PathLike, offset: int = 0, size: int | None = None,
                  protect: int = PROT_READ | PROT_WRITE) -> "Memory":
        """Map a region of a file (the training-weights file of the NNAPI guide, a model's constants)."""
        offset = _as_int(offset, "memory offset")
        protect = _as_int(protect, "memory protection")
        if offset < 0:
            raise bad_data(f"memory offset must be non-negative, got {offset}")
        flags = os.O_RDWR if protect & PROT_WRITE else os.O_RDONLY
        try:
            fd = os.open(os.fspath(path), flags)
        except (OSError, TypeError) as e:
            raise bad_data(f"cannot open memory file {path!r}: {e}") from None
        try:
            if size is None:
                file_size = os.fstat(fd).st_size
                if offset >= file_size:
                    raise bad_data(f"memory file {os.fspath(path)!r}: offset {offset} is at or beyond its "
                                   f"end ({file_size} bytes)")
                size = file_size - offset
            memory = cls.from_fd(size, protect, fd, offset)
            memory.path = os.fspath(path)
            return memory
        finally:
            os.close(fd)

    @classmethod
    def wrap_array(cls, array: np.ndarray, *, writable: bool) -> "Memory":
        """An application array as an in-process pool, without copying (the runtime's user buffers)."""
        arr = np.ascontiguousarray(array) if not writable else array
        if writable and not (arr.flags.c_contiguous and arr.flags.writeable):
            raise bad_data("output arrays must be C-contiguous and writable")
        return cls(arr.reshape(-1).view(np.uint8) if arr.size else b"", arr.nbytes, kind="user",
                   readable=True, writable=writable, owner=arr)

    # -- access -------------------------------------------------------------------------------
    def check_region(self, offset: int, length: int, what: str, *, for_write: bool = False) -> None:
        if self.closed:
            raise bad_data(f"{what}: memory {self.name} has been freed")
        offset = _as_int(offset, f"{what}: offset")
        length = _as_int(length, f"{what}: length")
        if offset < 0 or length < 0 or offset + length > self.size:
            raise bad_data(f"{what}: region [offset {offset}, length {length}] is outside memory "
                           f"{self.name} of {self.size} bytes")
        if for_write and not self.writable:
            raise bad_data(f"{what}: memory {self.name} is not writable")
        if not for_write and not self.readable:
            raise bad_data(f"{what}: memory {self.name} is not readable")

    def view(self, offset: int = 0, length: int | None = None) -> memoryview:
        if length is None:
            length = self.size - offset
        return self._buffer[offset:offset + length]

    def array(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A numpy view of a region (no copy)."""
        count = math.prod(shape)  # exact (Python ints), and far cheaper than np.prod on the hot path
        arr = np.frombuffer(self._buffer, dtype=dtype, count=count, offset=offset)
        if not self.writable:
            arr.flags.writeable = False
        return arr.reshape(shape)

    def close(self) -> None:
        """ANeuralNetworksMemory_free. Views handed out earlier stay valid until released."""
        if self.closed:
            return
        self.closed = True
        if self._close_fd is not None:
            self._close_fd()
            self.fd = None

    free = close

    def __repr__(self) -> str:
        return f"<Memory {self.name} {self.size} bytes>"


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _as_int(value: Any, what: str) -> int:
    """A plain Python int (no numpy wrap-around in later arithmetic); bools and floats refused."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise bad_data(f"{what} must be an int, got {value!r}")
    return int(value)


def _check_size(size: Any, what: str) -> int:
    size = _as_int(size, f"{what} size")
    if size <= 0:
        raise bad_data(f"{what} size must be positive, got {size}")
    if size > 2**40:
        raise MltsError(ResultCode.OUT_OF_MEMORY, f"{what} of {size} bytes is too large")
    return int(size)
