"""The shared-memory ring of a reusable execution or a burst: one command slot and one answer slot in a
memfd both processes map once, and two eventfds to wake the other side (NNAPI's fast message queues).

One ring serves one client object (an IExecution or a burst), which runs one execution at a time: a
single producer and a single consumer, so no lock crosses the boundary and the host thread serving it
calls the driver directly. The client writes the command words, then the command's sequence number,
then writes the host's eventfd; the host answers with the result words, then the answer's sequence
number, then writes the client's eventfd (eventfd syscalls are full barriers). Before sleeping on its
eventfd each side first polls the other's sequence number for a short window (NNAPI's burst polling):
back-to-back runs then cross without a wake-up, which costs about 16 us a round trip on a 2-core VM
against about 1.3 us polled. Polling reads the words without the kernel's barriers, so it is used only
where stores are seen in program order (x86); see poll_window_ns. The common result
(status, timing, driver time, output dimensions) is fixed binary words; a result with a message or
anything odd is pickled into the answer area; a burst's new request is pickled into the command area.
"""
from __future__ import annotations

import mmap
import os
import pickle
import platform
import time
from typing import Any

from ..enums import ResultCode
from ..errors import MltsError
from ..hal import NO_TIMING_INFO, ExecutionResult, OutputShape, Timing

# -- the header: 64-bit words ------------------------------------------------------------------------
REQ_SEQ = 0  # the command's sequence number (written last by the client)
CLOSED = 1  # 1: the client is gone; the host thread exits
HAS_DEADLINE = 2  # 1: the deadline word holds a time.monotonic() value
DEADLINE = 3  # float64
REQ_KIND = 4  # RUN (an execution or a burst slot) | LOAD (a burst request pickled into the command area)
SLOT = 5  # bursts: the slot the request runs from (or is loaded into)
REQ_LEN = 6  # bytes of the pickled request
MEASURE = 7  # bursts: per call
LOOP_TIMEOUT = 8  # bursts: per call
POLL_NS = 9  # how long the host polls for the next command before sleeping (the client's window)
RESP_SEQ = 16  # the answered command's sequence number (written last by the host)
RESP_KIND = 17  # FIXED | PICKLED | RETRY (a pool the host has not mapped yet: send it through the channel)
STATUS = 18
ON_DEVICE = 19
IN_DRIVER = 20
DRIVER_US = 21
N_OUTPUTS = 22
RESP_LEN = 23  # bytes of the pickled result
SHAPES = 24  # per output: is_sufficient, rank, dimensions...
HEADER_WORDS = 512
SHAPE_WORDS = HEADER_WORDS - SHAPES

RUN, LOAD = 0, 1
FIXED, PICKLED, RETRY = 0, 1, 2

REQ_DATA = HEADER_WORDS * 8
REQ_CAPACITY = 60 * 1024
RESP_DATA = REQ_DATA + REQ_CAPACITY
RESP_CAPACITY = 64 * 1024
RING_BYTES = RESP_DATA + RESP_CAPACITY  # touched pages only: a memfd is allocated lazily

_CODES = {int(code): code for code in ResultCode}

POLL_ENV = "MLTS_SERVICE_POLL_US"
DEFAULT_POLL_US = 100  # longer than a client's own work between two back-to-back runs, with margin
MAX_POLL_NS = 10_000_000  # what a host accepts from a client's ring
#: machines whose stores other processors see in program order (total store order), where reading the
#: words without a barrier sees the sequence number only after the words written before it
_ORDERED_STORES = ("x86_64", "amd64", "i386", "i686", "x86")


def poll_window_ns() -> int:
    """How long each side of a ring polls before sleeping on its eventfd: $MLTS_SERVICE_POLL_US
    microseconds (0 never polls; default DEFAULT_POLL_US), and 0 on machines without ordered stores."""
    raw = os.environ.get(POLL_ENV, "").strip()
    if not raw:
        us = DEFAULT_POLL_US
    else:
        try:
            us = int(raw)
        except ValueError:
            us = -1
        if us < 0 or us * 1000 > MAX_POLL_NS:
            raise MltsError(ResultCode.BAD_DATA, f"${POLL_ENV} must be a whole number of microseconds from 0 to "
                                                 f"{MAX_POLL_NS // 1000}, got {raw!r}")
    if platform.machine().lower() not in _ORDERED_STORES:
        return 0
    return us * 1000


def poll_until(words: Any, index: int, value: int, window_ns: int) -> bool:
    """Poll `words[index]` for up to `window_ns` while it equals `value`; True when it changed. Each turn
    yields the processor and the GIL (os.sched_yield releases it), so that the process's other threads,
    other rings' included, are not held off by a poll."""
    if words[index] != value:
        return True
    clock, yield_ = time.perf_counter_ns, os.sched_yield
    until = clock() + window_ns
    while words[index] == value:
        if clock() >= until:
            return False
        yield_()
    return True


class Ring:
    """One side's mapping of a ring and its eventfds (`request_fd` wakes the host, `answer_fd` the client)."""

    def __init__(self, memory_fd: int, request_fd: int, answer_fd: int) -> None:
        self.memory_fd, self.request_fd, self.answer_fd = memory_fd, request_fd, answer_fd
        self._map = mmap.mmap(memory_fd, RING_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        whole = memoryview(self._map)
        self.words = whole[:REQ_DATA].cast("Q")
        self.floats = whole[:REQ_DATA].cast("d")
        self.request_area = whole[REQ_DATA:REQ_DATA + REQ_CAPACITY]
        self.answer_area = whole[RESP_DATA:RESP_DATA + RESP_CAPACITY]
        self.shapes = whole[SHAPES * 8:REQ_DATA]
        self._whole = whole
        self.closed = False

    @classmethod
    def create(cls) -> "Ring":
        """The client's: a fresh memfd, a blocking eventfd for the host to wait on, a non-blocking one for
        the client to poll (a descriptor's blocking mode is shared by every process holding it)."""
        fds: list[int] = []
        try:
            fds.append(os.memfd_create("mlts-ring", os.MFD_CLOEXEC))
            os.ftruncate(fds[0], RING_BYTES)
            fds.append(os.eventfd(0, os.EFD_CLOEXEC))
            fds.append(os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK))
            return cls(*fds)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    @property
    def fds(self) -> tuple[int, int, int]:
        return self.memory_fd, self.request_fd, self.answer_fd

    def close(self) -> None:
        """Unmap and close the descriptors (the other side keeps its own)."""
        if self.closed:
            return
        self.closed = True
        for view in (self.words, self.floats, self.request_area, self.answer_area, self.shapes, self._whole):
            view.release()
        self._map.close()
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass

    # -- answers -----------------------------------------------------------------------------------------
    def write_result(self, result: Any, driver_us: int) -> None:
        """The host's answer words (not yet its sequence number): fixed binary when the result fits them."""
        w = self.words
        w[DRIVER_US] = driver_us
        if type(result) is ExecutionResult and not result.message and result.fenced_timing is None \
                and result.call_timing is None and type(result.status) is ResultCode \
                and type(result.output_shapes) is list and self._write_timing(result.timing) \
                and self._write_shapes(result.output_shapes):
            w[STATUS] = result.status
            w[RESP_KIND] = FIXED
            return
        try:
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            data = pickle.dumps(ExecutionResult(ResultCode.OP_FAILED, [], message=f"the driver's result cannot be "
                                                                                  f"sent: {type(e).__name__}: {e}"))
        if len(data) > RESP_CAPACITY and isinstance(result, ExecutionResult):
            cut = ExecutionResult(result.status, [], result.timing, result.message[:RESP_CAPACITY // 8] + "...")
            data = pickle.dumps(cut, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > RESP_CAPACITY:
            data = pickle.dumps(ExecutionResult(ResultCode.OP_FAILED, [], message="the driver's result is too large "
                                                                                  "to send"))
        self.answer_area[:len(data)] = data
        w[RESP_LEN] = len(data)
        w[RESP_KIND] = PICKLED

    def _write_timing(self, timing: Any) -> bool:
        if timing is NO_TIMING_INFO:
            self.words[ON_DEVICE] = self.words[IN_DRIVER] = NO_TIMING_INFO.time_on_device
            return True
        if type(timing) is not Timing or type(timing.time_on_device) is not int \
                or type(timing.time_in_driver) is not int or timing.time_on_device < 0 or timing.time_in_driver < 0:
            return False
        self.words[ON_DEVICE] = timing.time_on_device
        self.words[IN_DRIVER] = timing.time_in_driver
        return True

    def _write_shapes(self, shapes: list) -> bool:
        w = self.words
        k = SHAPES
        for shape in shapes:
            if type(shape) is not OutputShape or type(shape.dimensions) is not tuple \
                    or type(shape.is_sufficient) is not bool:
                return False
            dims = shape.dimensions
            if k + 2 + len(dims) > HEADER_WORDS:
                return False
            w[k] = shape.is_sufficient
            w[k + 1] = len(dims)
            k += 2
            for d in dims:
                if type(d) is not int or d < 0:
                    return False
                w[k] = d
                k += 1
        w[N_OUTPUTS] = len(shapes)
        return True

    def read_result(self, cache: dict) -> tuple[Any, int]:
        """The client's reading of an answer: (the result, microseconds in the driver). Output shapes
        already seen come from `cache` (raw words -> OutputShapes), so repeated runs build none."""
        w = self.words
        if w[RESP_KIND] == PICKLED:
            return pickle.loads(self.answer_area[:w[RESP_LEN]]), w[DRIVER_US]
        n = w[N_OUTPUTS]
        end = SHAPES
        for _ in range(n):
            end += 2 + w[end + 1]
        key = self.shapes[:(end - SHAPES) * 8].tobytes()
        shapes = cache.get(key)
        if shapes is None:
            shapes = []
            k = SHAPES
            for _ in range(n):
                rank = w[k + 1]
                shapes.append(OutputShape(tuple(w[k + 2:k + 2 + rank].tolist()), bool(w[k])))
                k += 2 + rank
            shapes = tuple(shapes)
            if len(cache) < 64:
                cache[key] = shapes
        on_device, in_driver = w[ON_DEVICE], w[IN_DRIVER]
        timing = NO_TIMING_INFO if on_device == in_driver == NO_TIMING_INFO.time_on_device \
            else Timing(on_device, in_driver)
        return ExecutionResult(_CODES[w[STATUS]], list(shapes), timing), w[DRIVER_US]
