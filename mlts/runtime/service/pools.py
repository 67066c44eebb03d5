"""Memory pools across the service boundary: which pools cross as file descriptors, staging of those
that cannot (application arrays), and the service's cache of mapped pools.

A pool's descriptor is sent once per connection; the service keeps the mapping under the pool's id
until the client drops the pool (NNAPI's burst memory cache, applied to every call). Application
arrays ("user" pools) live only in the client's address space, so the client copies them into
scratch shared memory for the call and copies outputs back afterwards: that copy is the runtime's.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from typing import Sequence

from ..enums import ResultCode
from ..errors import MltsError
from ..hal import BufferToken
from ..hal.memory import PROT_READ, PROT_WRITE, Memory
from .protocol import PoolRef

SCRATCH_MIN_BYTES = 4096
SCRATCH_KEEP_PER_SIZE = 4


def crossable(pool: Memory) -> bool:
    """Pools backed by a descriptor (memfd or mapped file) cross as handles."""
    return pool.kind in ("shared", "file") and pool.fd is not None and not pool.closed


def protection(pool: Memory) -> int:
    return (PROT_READ if pool.readable else 0) | (PROT_WRITE if pool.writable else 0) or PROT_READ


# -- client side ----------------------------------------------------------------------------------
class PoolExporter:
    """Per connection: decides which pools need their descriptor sent, and remembers dropped pools."""

    def __init__(self) -> None:
        self._sent: set[int] = set()
        self._forgotten: deque[int] = deque()

    def refs(self, pools: Sequence[Memory], *, cache: bool = True) -> tuple[list[PoolRef], list[int]]:
        """Call under the channel's send order: a pool is marked sent by the message that carries its fd."""
        refs, fds = [], []
        for pool in pools:
            if isinstance(pool, BufferToken):  # a driver-allocated buffer: only its token crosses
                refs.append(pool)
                continue
            offset = pool.file_offset if pool.kind == "file" else 0
            if pool.id in self._sent:
                refs.append(PoolRef(pool.id, pool.size, offset, protection(pool)))
                continue
            fds.append(pool.fd)
            refs.append(PoolRef(pool.id, pool.size, offset, protection(pool), len(fds) - 1, cache))
            if cache:
                self._sent.add(pool.id)
                weakref.finalize(pool, self._forgotten.append, pool.id)
        return refs, fds

    def known_refs(self, pools: Sequence[Memory]) -> list[PoolRef] | None:
        """The refs of pools the service has mapped already (no descriptor to send), or None if one has not
        been sent: what a message outside the channel (a burst's ring) may name."""
        refs = []
        for pool in pools:
            if isinstance(pool, BufferToken):
                refs.append(pool)
            elif pool.id in self._sent:
                refs.append(PoolRef(pool.id, pool.size, pool.file_offset if pool.kind == "file" else 0,
                                    protection(pool)))
            else:
                return None
        return refs

    def unsend(self, refs: Sequence[PoolRef], forgotten: Sequence[int]) -> None:
        """Undo `refs` and `drain_forgotten` for a message that could not be sent after all."""
        for ref in refs:
            if isinstance(ref, PoolRef) and ref.fd_index >= 0:
                self._sent.discard(ref.pool_id)
        self._forgotten.extendleft(reversed(forgotten))

    def forget(self, pool_id: int) -> None:
        self._sent.discard(pool_id)
        self._forgotten.append(pool_id)

    def drain_forgotten(self) -> tuple[int, ...]:
        """Pool ids to piggyback on the next call, so that the service unmaps them."""
        out = []
        while True:
            try:
                pool_id = self._forgotten.popleft()
            except IndexError:
                return tuple(out)
            self._sent.discard(pool_id)
            out.append(pool_id)


class ScratchPools:
    """Reusable shared-memory pools for staging application arrays (so their fds are sent only once)."""

    def __init__(self, exporter: PoolExporter) -> None:
        self._exporter = exporter
        self._free: dict[int, list[Memory]] = {}
        self._lock = threading.Lock()

    def acquire(self, size: int) -> Memory:
        capacity = max(SCRATCH_MIN_BYTES, 1 << max(0, size - 1).bit_length())
        with self._lock:
            free = self._free.get(capacity)
            if free:
                return free.pop()
        return Memory.create_shared(capacity)

    def release(self, pool: Memory) -> None:
        with self._lock:
            free = self._free.setdefault(pool.size, [])
            if len(free) < SCRATCH_KEEP_PER_SIZE:
                free.append(pool)
                return
        self.discard(pool)

    def discard(self, pool: Memory) -> None:
        """A pool the service may still write into (an abandoned call), or one too many: never reuse it."""
        self._exporter.forget(pool.id)
        pool.close()


class StagedPools:
    """The pools of one call as they cross, with the copies back to application arrays to do afterwards;
    kept by a reusable execution or a burst slot, `copy_in` stages the arrays again for another run."""

    def __init__(self, pools: Sequence[Memory], scratch: ScratchPools) -> None:
        self._scratch = scratch
        self.pools: list[Memory] = []
        self._staged: list[tuple[Memory, Memory]] = []
        self._copies: list[tuple[memoryview, memoryview]] = []  # application array -> its stage, per pool
        self._backs: list[tuple[memoryview, memoryview]] = []  # the writable ones
        try:
            for pool in pools:
                if isinstance(pool, BufferToken) or crossable(pool):
                    self.pools.append(pool)
                    continue
                if pool.closed:
                    raise MltsError(ResultCode.BAD_DATA, f"memory {pool.name} has been freed")
                stage = scratch.acquire(pool.size)
                self.pools.append(stage)
                self._staged.append((pool, stage))
                if pool.size:
                    self._copies.append((pool.view(), stage.view(0, pool.size)))
                    if pool.writable:
                        self._backs.append((pool.view(), stage.view(0, pool.size)))
            self.copy_in()
        except BaseException:
            self.release(reusable=True)
            raise

    @property
    def staged(self) -> bool:
        """Whether any pool is an application array (copied in and out around each run)."""
        return bool(self._staged)

    def copy_in(self) -> None:
        for src, stage in self._copies:
            stage[:] = src

    def copy_back(self) -> None:
        for dst, stage in self._backs:
            dst[:] = stage

    def release(self, *, reusable: bool) -> None:
        for _, stage in self._staged:
            if reusable:
                self._scratch.release(stage)
            else:
                self._scratch.discard(stage)
        self._staged, self._copies, self._backs = [], [], []


def model_pools(pools: Sequence[Memory]) -> list[Memory]:
    """A model's constant pools as they cross: application arrays are copied into read-only shared memory."""
    out = []
    for pool in pools:
        if crossable(pool):
            out.append(pool)
            continue
        if pool.closed:
            raise MltsError(ResultCode.BAD_DATA, f"model constant memory {pool.name} has been freed")
        copy = Memory.create_shared(max(pool.size, 1))
        if pool.size:
            copy.view(0, pool.size)[:] = pool.view()
        copy.writable = False
        out.append(copy)
    return out


# -- service side ---------------------------------------------------------------------------------
class PoolCache:
    """The service's mappings of the client's pools, by pool id."""

    def __init__(self) -> None:
        self._pools: dict[int, Memory] = {}

    def __len__(self) -> int:
        return len(self._pools)

    def resolve(self, refs: Sequence[PoolRef], fds: Sequence[int], keep: Sequence[int] = ()) -> list[Memory]:
        """Map new pools, find known ones; the received descriptors are always closed here, except those at
        the indexes in `keep` (a call's sync fences, which are not pools and which its handler closes)."""
        try:
            out = []
            for ref in refs:
                if isinstance(ref, BufferToken):
                    out.append(ref)
                    continue
                if ref.fd_index in keep:
                    raise MltsError(ResultCode.BAD_DATA, f"memory pool {ref.pool_id} names a sync fence as its "
                                                         f"descriptor")
                if ref.fd_index >= 0:
                    try:
                        pool = Memory.from_fd(ref.size, ref.protect, fds[ref.fd_index], ref.offset)
                    except MltsError as e:
                        raise MltsError(ResultCode.OP_FAILED, f"cannot map memory pool {ref.pool_id}: {e.message}") \
                            from None
                    if ref.cache:
                        self._pools[ref.pool_id] = pool
                else:
                    pool = self._pools.get(ref.pool_id)
                    if pool is None:
                        raise MltsError(ResultCode.OP_FAILED, f"memory pool {ref.pool_id} is not mapped in the service")
                out.append(pool)
            return out
        finally:
            for k, fd in enumerate(fds):
                if k in keep:
                    continue
                try:
                    os.close(fd)
                except OSError:
                    pass

    def forget(self, pool_ids: Sequence[int]) -> None:
        for pool_id in pool_ids:
            pool = self._pools.pop(pool_id, None)
            if pool is not None:
                pool.close()  # the mapping itself lives on while a prepared model still uses it
