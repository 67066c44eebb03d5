"""Conformance: memory domains. Straight through the HAL (as VTS's memory-domain tests do): a buffer
the driver allocates for roles on a model it prepared round-trips its contents, serves requests that
name it by token in those roles, and is refused everywhere else (another model's request, a token
never allocated, a freed buffer, an input never written). Through the public API: a memory created
from a MemoryDesc chains two executions, illegal uses fail at once, and concurrent use of one buffer
neither crashes nor blocks. Memory domains are optional: for a driver that cannot allocate, these
checks are not applicable."""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ...runtime import Execution, Memory, MemoryDesc, MltsError, ResultCode
from ...runtime.hal import BufferDesc, BufferRole, BufferToken, DataLocation, Request, RequestArgument
from ..context import StressContext
from .checks import (CheckFailed, Checks, NotApplicable, compile_on, driver_model, expect_code, expect_error,
                     expect_outputs, expect_success, hal_execute, hal_prepare)

CONCURRENT_S = 0.5
JOIN_WITHIN_S = 20.0


def memory_domains(ctx: StressContext) -> dict[str, Any]:
    checks = Checks(ctx, "memory domains")
    m = driver_model(ctx)
    if m is None:
        return checks.without_model()
    driver = ctx.device.driver
    owner, stranger = hal_prepare(ctx, m), hal_prepare(ctx, m)
    a, b = m.inputs
    t = m.model.operand_type(m.model.inputs[0])
    size = t.byte_size()

    def shared(values: np.ndarray) -> Memory:
        mem = Memory.create_shared(values.nbytes)
        mem.view()[:] = np.ascontiguousarray(values).tobytes()
        return mem

    def read(mem: Memory) -> np.ndarray:
        return np.frombuffer(bytes(mem.view()), t.dtype).reshape(t.dimensions)

    def allocate(inputs=(BufferRole(0, 0, 1.0),), outputs=()):
        try:
            return driver.allocate(BufferDesc(), [owner], list(inputs), list(outputs))
        except MltsError as e:
            if e.code == ResultCode.OP_FAILED and "support" in e.message:
                raise NotApplicable(f"{ctx.driver} has no memory domains ({e.message})") from None
            raise

    def token_request(token: int, *, output_token: bool = False) -> tuple[Request, Memory]:
        """Input 0 named by `token` (or, with output_token, output 0), the rest in shared memory."""
        second, out = shared(b), Memory.create_shared(size)
        if output_token:
            first = shared(a)
            return Request((RequestArgument(False, DataLocation(0, 0, size)),
                            RequestArgument(False, DataLocation(1, 0, size))),
                           (RequestArgument(False, DataLocation(2, 0, 0)),),
                           (first, second, BufferToken(token))), out
        return Request((RequestArgument(False, DataLocation(0, 0, 0)), RequestArgument(False, DataLocation(1, 0, size))),
                       (RequestArgument(False, DataLocation(2, 0, size)),), (BufferToken(token), second, out)), out

    def round_trip():
        allocated = allocate()
        allocated.buffer.copy_from(shared(a), ())
        back = Memory.create_shared(size)
        allocated.buffer.copy_to(back)
        expect_outputs("copy_from then copy_to", [read(back)], [a])
        allocated.buffer.free()
        return f"token {allocated.token}"
    checks.run("a buffer round-trips copy_from / copy_to", round_trip)

    def token_input():
        allocated = allocate()
        allocated.buffer.copy_from(shared(a), ())
        request, out = token_request(allocated.token)
        expect_success("execute(input 0 by token)", hal_execute(owner, request))
        expect_outputs("execute(input 0 by token)", [read(out)], m.expected([a, b]))
        allocated.buffer.free()
    checks.run("a request naming the buffer as its input reads its contents", token_input)

    def token_output():
        allocated = allocate(inputs=(), outputs=(BufferRole(0, 0, 1.0),))
        request, _ = token_request(allocated.token, output_token=True)
        expect_success("execute(output 0 by token)", hal_execute(owner, request))
        back = Memory.create_shared(size)
        allocated.buffer.copy_to(back)
        expect_outputs("the output buffer copied out", [read(back)], m.expected([a, b]))
        allocated.buffer.free()
    checks.run("a request naming the buffer as its output writes it", token_output)

    def refused(what: str, prepared, token: int):
        request, _ = token_request(token)
        result = hal_execute(prepared, request)
        return expect_code(what, result.status, (ResultCode.BAD_DATA,), result.message)

    def foreign_model():
        allocated = allocate()
        allocated.buffer.copy_from(shared(a), ())
        try:
            return refused("another prepared model naming the token", stranger, allocated.token)
        finally:
            allocated.buffer.free()
    checks.run("another model's request naming the token is refused", foreign_model)

    def wrong_role():
        allocated = allocate()  # an input role only
        allocated.buffer.copy_from(shared(a), ())
        try:
            request, _ = token_request(allocated.token, output_token=True)
            result = hal_execute(owner, request)
            return expect_code("the token as output 0 of a buffer allocated for input 0", result.status,
                               (ResultCode.BAD_DATA,), result.message)
        finally:
            allocated.buffer.free()
    checks.run("a buffer used outside its roles is refused", wrong_role)

    def unknown_token():
        allocated = allocate()
        allocated.buffer.free()
        refused("a freed buffer's token", owner, allocated.token)
        return refused("a token never allocated", owner, allocated.token + 7919)
    checks.run("freed and unknown tokens are refused", unknown_token)

    def uninitialized():
        allocated = allocate()
        try:
            request, _ = token_request(allocated.token)
            result = hal_execute(owner, request)
            return expect_code("an input buffer never written", result.status,
                               (ResultCode.BAD_DATA, ResultCode.OP_FAILED), result.message)
        finally:
            allocated.buffer.free()
    checks.run("a buffer never written cannot be read", uninitialized)

    # -- the public API -----------------------------------------------------------------------------------
    producer, consumer = compile_on(ctx, m), compile_on(ctx, m)
    desc = MemoryDesc()
    desc.add_output_role(producer, 0, 1.0)
    desc.add_input_role(consumer, 0, 1.0)
    desc.finish()

    def create(d: MemoryDesc) -> Memory:
        """A memory for roles on compilations of this driver alone; without domains NNAPI does not fall back
        to shared memory for explicit-device compilations, so creation fails (OP_FAILED) and there is
        nothing of the driver's to check."""
        try:
            return Memory.create_from_desc(d)
        except MltsError as e:
            if e.code == ResultCode.OP_FAILED and "does not support memory domains" in e.message:
                raise NotApplicable(f"{ctx.driver} has no memory domains; creation fails as NNAPI says") from None
            raise

    def chained():
        mem = create(desc)
        e = Execution(producer)
        e.set_input(0, a)
        e.set_input(1, b)
        e.set_output_from_memory(0, mem, 0, 0)
        e.compute()
        middle = m.expected([a, b])[0]
        e2 = Execution(consumer)
        e2.set_input_from_memory(0, mem, 0, 0)
        e2.set_input(1, b)
        e2.compute()
        expect_outputs("two executions chained through a MemoryDesc memory", [e2.get_output(0)],
                       m.expected([middle, b]))
        return "driver-allocated" if getattr(mem, "token", None) else "shared memory"
    checks.run("a MemoryDesc memory chains two executions", chained)

    def illegal_api_use():
        mem = create(desc)
        e = Execution(producer)
        expect_error("a memory described as producer output 0, set as producer input 0",
                     lambda: e.set_input_from_memory(0, mem, 0, 0), (ResultCode.BAD_DATA,))
        expect_error("the memory with an offset", lambda: e.set_output_from_memory(0, mem, 4, 0),
                     (ResultCode.BAD_DATA,))
        e2 = Execution(consumer)
        expect_error("the memory as consumer output 0", lambda: e2.set_output_from_memory(0, mem, 0, 0),
                     (ResultCode.BAD_DATA,))
    checks.run("illegal uses of a MemoryDesc memory fail at once", illegal_api_use)

    def concurrent():
        both = MemoryDesc()
        both.add_output_role(producer, 0, 1.0)
        both.add_input_role(consumer, 0, 1.0)
        both.finish()
        mem = create(both)
        e = Execution(producer)
        e.set_input(0, a)
        e.set_input(1, b)
        e.set_output_from_memory(0, mem, 0, 0)
        e.compute()  # initialized once
        end = time.monotonic() + CONCURRENT_S
        runs, unexpected = [0], []

        def writer():
            while time.monotonic() < end:
                ex = Execution(producer)
                ex.set_input(0, a)
                ex.set_input(1, b)
                ex.set_output_from_memory(0, mem, 0, 0)
                _attempt(ex)

        def reader():
            while time.monotonic() < end:
                ex = Execution(consumer)
                ex.set_input_from_memory(0, mem, 0, 0)
                ex.set_input(1, b)
                _attempt(ex)

        def _attempt(ex):
            try:
                ex.compute()
                runs[0] += 1
            except MltsError:
                pass  # concurrent writes give undefined contents; errors are allowed, crashes and hangs are not
            except Exception as exc:
                unexpected.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=f, daemon=True) for f in (writer, writer, reader, reader)]
        for th in threads:
            th.start()
        give_up = time.monotonic() + JOIN_WITHIN_S
        for th in threads:
            while th.is_alive() and time.monotonic() < give_up:
                th.join(0.2)
                ctx.beat()
        if any(th.is_alive() for th in threads):
            raise CheckFailed(f"concurrent executions on one buffer still running {JOIN_WITHIN_S:g} s later")
        if unexpected:
            raise CheckFailed(f"concurrent use raised {unexpected[0]}")
        return f"{runs[0]} executions in {CONCURRENT_S:g} s"
    checks.run("concurrent reads and writes of one buffer end without crash or hang", concurrent)
    return checks.finish()


__all__ = ["memory_domains"]
