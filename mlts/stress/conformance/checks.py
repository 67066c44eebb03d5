"""What every conformance test shares: a record of named checks (pass / fail / n/a, with what was
seen), the choice of a model the driver runs, and direct calls through the driver interface (HAL)
with requests in shared memory, as Android's VTS talks to a driver without the runtime in between.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ...runtime import Compilation, Execution, Memory, MltsError, Preference, Priority, ResultCode
from ...runtime.hal import DataLocation, ExecutionResult, IPreparedModel, Request, RequestArgument
from ..context import StressContext, describe_error
from .models import F32, U8, ConformanceModel, add_model

PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "n/a"
LOOP_TIMEOUT_NS = 15_000_000_000  # loops that must finish get the longest loop timeout NNAPI allows
MISSED = (ResultCode.MISSED_DEADLINE_TRANSIENT, ResultCode.MISSED_DEADLINE_PERSISTENT)


class CheckFailed(Exception):
    """Raised inside a check: the check fails with this message."""


class NotApplicable(Exception):
    """Raised inside a check: the driver lacks the optional feature the check needs."""


@dataclass
class Check:
    name: str
    verdict: str
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"check": self.name, "verdict": self.verdict, "detail": self.detail}


class Checks:
    """Runs named checks in order; one that fails does not stop the others (a vendor wants every
    finding of one run). `finish()` fails the test when any check failed."""

    def __init__(self, ctx: StressContext, feature: str) -> None:
        self.ctx = ctx
        self.feature = feature
        self.done: list[Check] = []

    def run(self, name: str, fn: Callable[[], str | None]) -> bool:
        """Run one check; True when it passed."""
        self.ctx.beat(name)
        try:
            detail = fn() or ""
            check = Check(name, PASS, detail)
        except NotApplicable as e:
            check = Check(name, NOT_APPLICABLE, str(e))
        except CheckFailed as e:
            check = Check(name, FAIL, str(e))
        except Exception as e:  # an error the check did not expect is the driver's failure
            check = Check(name, FAIL, f"unexpected {describe_error(e)}")
        self.done.append(check)
        self.ctx.log(f"{check.verdict.upper():4} {name}" + (f": {check.detail}" if check.detail else ""))
        return check.verdict == PASS

    def skip(self, name: str, why: str) -> None:
        self.done.append(Check(name, NOT_APPLICABLE, why))
        self.ctx.log(f"N/A  {name}: {why}")

    def without_model(self) -> dict[str, Any]:
        """The driver runs none of the conformance models: nothing of it can be checked (SKIPPED)."""
        return self.finish(f"{self.ctx.driver} runs none of the conformance models")

    def finish(self, why_none: str = "") -> dict[str, Any]:
        """The record's details; FAILURE when a check failed, SKIPPED when none passed (every one n/a:
        the driver lacks the optional feature, or `why_none`), since nothing of the driver was tested."""
        failed = [c for c in self.done if c.verdict == FAIL]
        counts = {v: sum(c.verdict == v for c in self.done) for v in (PASS, FAIL, NOT_APPLICABLE)}
        details = {"feature": self.feature, "checks": [c.as_dict() for c in self.done], "counts": counts}
        if failed:
            reason = "; ".join(f"{c.name}: {c.detail}" for c in failed)
            self.ctx.fail(f"{len(failed)} of {len(self.done)} {self.feature} check(s) failed: {reason}", **details)
        if counts[PASS] == 0:
            self.ctx.skip(why_none or f"{self.ctx.driver} does not support {self.feature}: nothing to check",
                          **details)
        return details


# -- expectations -----------------------------------------------------------------------------------
def expect_code(what: str, got: ResultCode | int, allowed: Sequence[ResultCode], message: str = "") -> str:
    """CheckFailed unless `got` is one of `allowed`; returns the code's name."""
    code = ResultCode(got)
    if code not in allowed:
        raise CheckFailed(f"{what}: expected {' or '.join(c.name for c in allowed)}, got {code.name}"
                          + (f" ({message})" if message else ""))
    return code.name


def expect_error(what: str, call: Callable[[], Any], allowed: Sequence[ResultCode]) -> str:
    """`call` must raise MltsError with one of `allowed` (returning normally is the failure)."""
    try:
        call()
    except MltsError as e:
        return expect_code(what, e.code, allowed, e.message)
    raise CheckFailed(f"{what}: accepted (expected {' or '.join(c.name for c in allowed)})")


def expect_outputs(what: str, got: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> None:
    """Bit-exact: the conformance models' results are exact in every type they use."""
    for k, (g, e) in enumerate(zip(got, expected)):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape or not np.array_equal(g, e):
            bad = int(np.sum(g != e)) if g.shape == e.shape else "shape"
            raise CheckFailed(f"{what}: output {k} differs from the expected values ({bad} element(s); got "
                              f"{_preview(g)}, expected {_preview(e)})")


def _preview(a: np.ndarray) -> str:
    flat = np.asarray(a).ravel()
    return np.array2string(flat[:6], separator=", ") + (" ..." if flat.size > 6 else "")


# -- model choice -----------------------------------------------------------------------------------
def driver_model(ctx: StressContext, candidates: Sequence[ConformanceModel] | None = None) -> ConformanceModel | None:
    """The first candidate (default: float32 ADD, then uint8 ADD) the driver runs whole; None when it
    runs none of them."""
    for m in candidates if candidates is not None else (add_model(F32), add_model(U8)):
        if ctx.supports(m.model):
            return m
    return None


def claims_all(ctx: StressContext, m: ConformanceModel) -> bool:
    """Whether the driver says it supports every operation of `m` (a driver may legally say no)."""
    try:
        return all(ctx.device.driver.get_supported_operations(m.model.hal_model()))
    except MltsError:
        return False


# -- the public API on the driver alone -----------------------------------------------------------------
def compile_on(ctx: StressContext, m: ConformanceModel, **settings: Any) -> Compilation:
    c = Compilation.for_devices(m.model, [ctx.device])
    if "priority" in settings:
        c.set_priority(settings["priority"])
    if "caching" in settings:
        c.set_caching(*settings["caching"])
    c.finish()
    ctx.beat()
    return c


def execute(c: Compilation, inputs: Sequence[np.ndarray], *, loop_timeout_ns: int | None = LOOP_TIMEOUT_NS,
            timeout_ns: int | None = None) -> list[np.ndarray]:
    e = Execution(c)
    for k, x in enumerate(inputs):
        e.set_input(k, x)
    if loop_timeout_ns is not None:
        e.set_loop_timeout(loop_timeout_ns)
    if timeout_ns is not None:
        e.set_timeout(timeout_ns)
    e.compute()
    return [e.get_output(k) for k in range(len(c.model.outputs))]


# -- straight through the HAL -----------------------------------------------------------------------------
class HalRequest:
    """A request for `m` with every input and output in a shared memory of its own; `write_inputs`
    changes the inputs in place (the fenced check writes them after the execution was launched)."""

    def __init__(self, m: ConformanceModel, inputs: Sequence[np.ndarray] | None = None) -> None:
        self.m = m
        values = list(m.inputs if inputs is None else inputs)
        self.input_memories = [Memory.create_shared(max(1, v.nbytes)) for v in values]
        self.write_inputs(values)
        outs = [m.model.operand_type(i) for i in m.model.outputs]
        self.output_types = outs
        self.output_memories = [Memory.create_shared(max(1, t.byte_size())) for t in outs]
        pools = self.input_memories + self.output_memories
        self.request = Request(
            tuple(RequestArgument(False, DataLocation(k, 0, v.nbytes)) for k, v in enumerate(values)),
            tuple(RequestArgument(False, DataLocation(len(values) + k, 0, t.byte_size())) for k, t in enumerate(outs)),
            tuple(pools))

    def write_inputs(self, values: Sequence[np.ndarray]) -> None:
        for memory, v in zip(self.input_memories, values):
            v = np.ascontiguousarray(v)
            memory.view(0, v.nbytes)[:] = v.tobytes()

    def outputs(self) -> list[np.ndarray]:
        return [np.frombuffer(bytes(mem.view(0, t.byte_size())), t.dtype).reshape(t.dimensions)
                for mem, t in zip(self.output_memories, self.output_types)]

    def close(self) -> None:
        """Release the memories now (descriptor counts then measure the driver, not this request)."""
        for mem in self.input_memories + self.output_memories:
            mem.close()


def hal_prepare(ctx: StressContext, m: ConformanceModel, *, preference: Any = Preference.FAST_SINGLE_ANSWER,
                priority: Any = Priority.MEDIUM, deadline: Any = None, cache: Any = None) -> IPreparedModel:
    prepared = ctx.device.driver.prepare_model(m.model.hal_model(), preference, priority, deadline, cache)
    ctx.beat()
    if not isinstance(prepared, IPreparedModel):
        raise CheckFailed(f"prepare_model returned {type(prepared).__name__}, not a prepared model")
    return prepared


def hal_execute(prepared: IPreparedModel, request: Request, *, measure: bool = False, deadline: Any = None,
                loop_timeout_ns: Any = LOOP_TIMEOUT_NS) -> ExecutionResult:
    result = prepared.execute_synchronously(request, measure, deadline, loop_timeout_ns)
    if not isinstance(result, ExecutionResult):
        raise CheckFailed(f"execute_synchronously returned {type(result).__name__}, not an ExecutionResult")
    return result


def expect_success(what: str, result: ExecutionResult) -> None:
    if result.status != ResultCode.NO_ERROR:
        raise CheckFailed(f"{what}: {ResultCode(result.status).name} ({result.message})")


def seconds_from_now(s: float) -> float:
    return time.monotonic() + s


__all__ = ["CheckFailed", "Checks", "FAIL", "HalRequest", "LOOP_TIMEOUT_NS", "MISSED", "NOT_APPLICABLE",
           "NotApplicable", "PASS", "claims_all", "compile_on", "driver_model", "execute", "expect_code",
           "expect_error", "expect_outputs", "expect_success", "hal_execute", "hal_prepare", "seconds_from_now"]
