"""Conformance: an asynchronous execution signals completion only once its outputs are written.

NNAPI's IPreparedModel::execute returns at once and notifies its callback when the execution is done;
whoever waits on it reads the outputs right away. So the outputs are poisoned with a sentinel before
each call and read the moment completion is signalled (the HAL callback; the public API's Event): a
driver that signals first leaves sentinel values. Without the poison, stale outputs of an earlier run
(the same request, or a reused buffer) would pass by luck.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...runtime import Compilation, Execution, Memory
from ...runtime.hal import ExecutionResult, IPreparedModel
from .checks import CheckFailed, HalRequest, expect_outputs, expect_success, hal_execute
from .models import ConformanceModel
from .timing import WAIT_S

ROUNDS = 3
SENTINELS = (0xA5, 0x5A, 0xC3, 0x3C, 0x96, 0x69)  # bytes; none makes a float NaN


def sentinel_for(expected: Sequence[np.ndarray]) -> int:
    """A byte whose repetition is no element of any expected output (so every poisoned element shows)."""
    for byte in SENTINELS:
        if not any(np.any(np.asarray(e) == _mark(np.asarray(e), byte)) for e in expected):
            return byte
    return SENTINELS[0]  # outputs made of every candidate: counted only where the expected value differs


def _mark(like: np.ndarray, byte: int) -> np.ndarray:
    return np.frombuffer(bytes([byte]) * like.nbytes, like.dtype).reshape(like.shape)


def poison(memories: Sequence[Memory], byte: int) -> None:
    for memory in memories:
        view = memory.view()
        view[:] = bytes([byte]) * len(view)


def expect_written(what: str, seen: Sequence[np.ndarray], expected: Sequence[np.ndarray], byte: int,
                   round_: int) -> None:
    """`seen` (read when completion was signalled) holds the results, not the sentinel written before."""
    for k, (got, want) in enumerate(zip(seen, expected)):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape == want.shape:
            mark = _mark(want, byte)
            stale = int(np.sum((got == mark) & (want != mark)))
            if stale:
                raise CheckFailed(f"{what} signalled completion before its outputs were written: output {k} still "
                                  f"held the sentinel written before the call in {stale} of {want.size} elements "
                                  f"when completion was signalled (round {round_} of {ROUNDS})")
    expect_outputs(f"{what}, read as soon as completion was signalled", seen, expected)


def hal_async_outputs(m: ConformanceModel, prepared: IPreparedModel, loop_timeout_ns: int) -> str:
    """Straight through the HAL: the request's outputs first hold right results (a synchronous run), then
    the sentinel; each asynchronous execute() must have replaced all of it when its callback is notified."""
    expected = m.expected()
    byte = sentinel_for(expected)
    r = HalRequest(m)
    try:
        expect_success("execute_synchronously", hal_execute(prepared, r.request))
        expect_outputs("execute_synchronously", r.outputs(), expected)
        for k in range(1, ROUNDS + 1):
            poison(r.output_memories, byte)
            result = prepared.execute(r.request, False, None, loop_timeout_ns).wait(WAIT_S)
            seen = r.outputs()  # at once: the callback says the outputs are there
            if not isinstance(result, ExecutionResult):
                raise CheckFailed(f"execute() (asynchronous): the callback was not notified within {WAIT_S:g} s")
            expect_success("execute() (asynchronous)", result)
            expect_written("execute() (asynchronous)", seen, expected, byte, k)
    finally:
        r.close()
    return f"outputs written on all {ROUNDS} rounds (sentinel 0x{byte:02X})"


def api_async_outputs(m: ConformanceModel, c: Compilation) -> str:
    """Through the public API: outputs in shared memories (they reach the driver as they are, hosted in a
    service or not), poisoned before each start_compute() and read as soon as its Event is signalled."""
    expected = m.expected()
    byte = sentinel_for(expected)
    types = [m.model.operand_type(i) for i in m.model.outputs]
    memories = [Memory.create_shared(max(1, t.byte_size())) for t in types]

    def execution() -> Execution:
        e = Execution(c)
        for k, x in enumerate(m.inputs):
            e.set_input(k, x)
        for k, (memory, t) in enumerate(zip(memories, types)):
            e.set_output_from_memory(k, memory, 0, t.byte_size())
        return e

    def read() -> list[np.ndarray]:
        return [np.frombuffer(bytes(memory.view(0, t.byte_size())), t.dtype).reshape(t.dimensions)
                for memory, t in zip(memories, types)]

    try:
        execution().compute()
        expect_outputs("compute()", read(), expected)
        for k in range(1, ROUNDS + 1):
            poison(memories, byte)
            execution().start_compute().wait(WAIT_S)
            expect_written("start_compute()", read(), expected, byte, k)
    finally:
        for memory in memories:
            memory.close()
    return f"outputs written on all {ROUNDS} rounds (sentinel 0x{byte:02X})"


__all__ = ["ROUNDS", "api_async_outputs", "expect_written", "hal_async_outputs", "poison", "sentinel_for"]
