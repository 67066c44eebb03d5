"""Fault-injecting drivers: drivers that misbehave on purpose, to test the tester.

Each is a KernelDriver (it computes with the shared CPU kernels, so whatever it does not break is
right) that injects exactly one fault, chosen by a spec `<fault>@<stage>[?option=value&...]`:

    crash@prepare        os.abort() in prepare_model
    crash@execute        prepares fine; os.abort() in every execution
    hang@prepare         prepare_model blocks (sleeps) for `seconds` (default: forever)
    hang@execute         prepares fine; every execution blocks for `seconds` (default: forever)
    fail@prepare         prepare_model fails with OP_FAILED
    stale-cache@prepare  caches compilations like a healthy driver, but prepares from its cache files
                         without checking them (token, driver, versions, checksums): a foreign or
                         corrupt cache is used as it is, and gives wrong results
    wrong-small@execute  every output element moved by s * (1e-3 * |x| + 1e-4) (floats) or by s * 4
                         steps (integer and quantized types; moved the other way where s would leave
                         the type's range); s = +-1 per element, drawn from `seed` (default 0);
                         booleans are left alone
    wrong-large@execute  every output rotated by one position along its last axis, then moved by
                         s * (0.25 * |x| + 0.05) (floats) or s * 32 steps; booleans are negated
    slow@execute         right results, `factor` (default 10) x the kernels' own time: sleeps
                         (factor - 1) x the measured compute time; reported timings scaled alike
    leak@execute         right results; keeps `mb` (default 8) MiB of written memory per execution
    ignores-deadline@execute
                         right results, but the execution's deadline is ignored: never refused nor
                         aborted, and a run with a deadline finishes `late` (default 0.2) seconds
                         after it and still reports NO_ERROR (a healthy driver reports MISSED_DEADLINE_*)
    unsupported@execute  claims every operation (even those without a kernel); executing a
                         partition with an operation of type `op` (default `*`: any) or without a
                         kernel fails with OP_FAILED naming the operation
    dynamic-shape@execute
                         computes, then answers OUTPUT_INSUFFICIENT_SIZE with every output's first
                         dimension doubled (`mode=insufficient`, default), or NO_ERROR with every
                         output's shape given one extra dimension (`mode=wrong`: the runtime must
                         reject the shapes)
    wrong-branch@control-flow
                         claims control flow like a healthy driver, but every IF runs its else
                         model when the condition is true and its then model when it is false
    accepts-foreign-token@memory
                         allocates device buffers like a healthy driver, but serves a request naming
                         any of its buffers by token without checking the buffer's roles: another
                         client's (or another model's) buffer is read and written
    ignores-fences@fenced
                         execute_fenced checks its sync fences like a healthy driver, but does not
                         wait for them: it runs at once (otherwise healthy), so it reads inputs that
                         whoever signals the fences may not have written yet

"small" is beyond the float32 conformance tolerance of SPEC section 3 (1e-5 + 6e-7 |x|) and the
whole-MobileNet quantized tolerance (3 steps), but within the float16/relaxed tolerance (4.9e-3) and
rarely changes a classifier's top-1; "large" changes a classifier's top-1 (the rotation) and is
far outside every tolerance. Every fault is deterministic; the wrong-* ones draw their signs from a
seeded generator (the same seed and inputs give the same outputs).

The driver for a spec is named `faulty-<fault>-<stage>` plus `-<option><value>` for each option
given (`faulty:wrong-small@execute?seed=3` -> `faulty-wrong-small-execute-seed3`,
`faulty:ignores-fences@fenced` -> `faulty-ignores-fences-fenced`). All declare
0.5 x the reference's execution time and power for every type, so partitioning gives them work.
"""
from __future__ import annotations

import math
import mmap
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ... import __version__
from ..cpu.executor import PreparedGraph
from ..enums import NO_TIMING, DeviceType, FeatureLevel, OperandCode, OperationCode, Preference, Priority, ResultCode
from ..errors import MltsError
from ..hal import CacheHandles, Capabilities, ExecutionResult, HalModel, OutputShape, Request, Timing
from .base import PreparedModel
from ..hal.validation import validate_execution_arguments, validate_fence_fds, validate_hal_model
from ..ops import get_operation
from .cache_files import load_for_driver
from .device_buffers import RequestBuffers
from .kernel_driver import KernelDriver, run_request

PREFIX = "faulty:"
FAULTY_PERFORMANCE = 0.5  # declared exec time and power, relative to the reference's 1.0
SMALL_REL, SMALL_ABS, SMALL_STEPS = 1e-3, 1e-4, 4
LARGE_REL, LARGE_ABS, LARGE_STEPS = 0.25, 0.05, 32

# (fault, stage) -> {option: (parser, default)}
_SEED = {"seed": (int, 0)}
FAULTS: dict[tuple[str, str], dict[str, tuple[Any, Any]]] = {
    ("crash", "prepare"): {},
    ("crash", "execute"): {},
    ("hang", "prepare"): {"seconds": (float, math.inf)},
    ("hang", "execute"): {"seconds": (float, math.inf)},
    ("fail", "prepare"): {},
    ("stale-cache", "prepare"): {},
    ("wrong-small", "execute"): _SEED,
    ("wrong-large", "execute"): _SEED,
    ("slow", "execute"): {"factor": (float, 10.0)},
    ("leak", "execute"): {"mb": (float, 8.0)},
    ("ignores-deadline", "execute"): {"late": (float, 0.2)},
    ("unsupported", "execute"): {"op": (str, "*")},
    ("dynamic-shape", "execute"): {"mode": (str, "insufficient")},
    ("wrong-branch", "control-flow"): {},
    ("accepts-foreign-token", "memory"): {},
    ("ignores-fences", "fenced"): {},
}
_CHOICES = {"mode": ("insufficient", "wrong")}


def fault_specs() -> list[str]:
    """Every valid `<fault>@<stage>`, in a stable order (for `faulty:all` and error messages)."""
    return [f"{f}@{s}" for f, s in FAULTS]


@dataclass(frozen=True)
class FaultSpec:
    fault: str
    stage: str
    options: tuple[tuple[str, Any], ...] = ()  # only the options given, sorted by name

    def option(self, key: str) -> Any:
        given = dict(self.options)
        return given[key] if key in given else FAULTS[(self.fault, self.stage)][key][1]

    @property
    def name(self) -> str:
        """The device name: stable and unique per spec, so several variants can coexist."""
        suffix = "".join(f"-{k}{_fmt(v)}" for k, v in self.options)
        return f"faulty-{self.fault}-{self.stage}{suffix}"

    def __str__(self) -> str:
        query = "&".join(f"{k}={_fmt(v)}" for k, v in self.options)
        return f"{PREFIX}{self.fault}@{self.stage}" + (f"?{query}" if query else "")


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _bad_spec(spec: str, why: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, f"fault spec {spec!r}: {why}; valid faults: "
                                          + ", ".join(PREFIX + s for s in fault_specs())
                                          + f" (or {PREFIX}all), with options after '?' "
                                            "(seed, seconds, factor, mb, op, mode, late; see mlts.runtime.drivers.faulty)")


def parse_spec(spec: str) -> FaultSpec:
    """`[faulty:]<fault>[@<stage>][?k=v&k=v]` -> FaultSpec; the stage may be left out when only one fits."""
    if not isinstance(spec, str):
        raise MltsError(ResultCode.BAD_DATA, f"fault spec must be a string, got {spec!r}")
    text = spec.strip()
    if text.startswith(PREFIX):
        text = text[len(PREFIX):]
    head, _, query = text.partition("?")
    fault, _, stage = head.strip().lower().partition("@")
    stages = [s for f, s in FAULTS if f == fault]
    if not stages:
        raise _bad_spec(spec, f"unknown fault {fault!r}")
    if not stage:
        if len(stages) != 1:
            raise _bad_spec(spec, f"fault {fault!r} needs a stage ({' or '.join(stages)})")
        stage = stages[0]
    if (fault, stage) not in FAULTS:
        raise _bad_spec(spec, f"fault {fault!r} cannot be injected at stage {stage!r}")
    allowed = FAULTS[(fault, stage)]
    options: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in query.split("&"))):
        key, eq, raw = item.partition("=")
        key = key.strip().lower()
        if key not in allowed or not eq:
            raise _bad_spec(spec, f"option {item!r} is not one of {fault}@{stage}'s "
                                  f"({', '.join(f'{k}=...' for k in allowed) or 'none'})")
        parser = allowed[key][0]
        try:
            value = parser(raw.strip())
        except ValueError:
            raise _bad_spec(spec, f"option {key}={raw!r} is not a valid {parser.__name__}") from None
        if isinstance(value, float) and not value >= 0:
            raise _bad_spec(spec, f"option {key}={raw!r} must be >= 0")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise _bad_spec(spec, f"option {key}={raw!r} must be one of {', '.join(_CHOICES[key])}")
        if key == "factor" and value < 1:
            raise _bad_spec(spec, "option factor must be >= 1")
        if key == "op" and value != "*":
            value = value.upper()
            if value not in OperationCode.__members__:
                raise _bad_spec(spec, f"option op={raw!r} is not an operation name (e.g. CONV_2D)")
        options[key] = value
    return FaultSpec(fault, stage, tuple(sorted(options.items())))


def create(spec: str) -> "FaultyDriver":
    """The driver factory named by `faulty:` specs (also what a driver service imports and calls)."""
    return FaultyDriver(parse_spec(spec))


def create_all() -> list["FaultyDriver"]:
    """One driver per fault, default options (`faulty:all`)."""
    return [create(s) for s in fault_specs()]


# -- the driver -----------------------------------------------------------------------------------
class FaultyDriver(KernelDriver):
    """A reference-kernel driver that injects the fault of its spec (see the module doc)."""

    feature_level = FeatureLevel.LEVEL_8

    def __init__(self, spec: FaultSpec | str) -> None:
        spec = parse_spec(spec) if isinstance(spec, str) else spec
        super().__init__(spec.name, Capabilities.uniform(FAULTY_PERFORMANCE, FAULTY_PERFORMANCE),
                         version=__version__, device_type=DeviceType.ACCELERATOR)
        self.spec = spec
        self.lock = threading.Lock()
        self.executions = 0  # requests received (any outcome)
        self.leaked: list[np.ndarray] = []
        self._released = threading.Event()

    # Tests (in-process only) may end a hang early; a hanging service is simply killed.
    def release(self) -> None:
        """End every current and future hang of this driver."""
        self._released.set()

    def _hang(self, where: str) -> None:
        seconds = float(self.spec.option("seconds"))
        _note(f"{self.name}: injected hang in {where} ({'forever' if math.isinf(seconds) else f'{seconds:g} s'})")
        end = time.monotonic() + seconds
        while not self._released.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return
            self._released.wait(min(left, 0.5))  # short waits: a kill or a release ends it promptly

    def _crash(self, where: str) -> None:
        _note(f"{self.name}: injected crash in {where} (os.abort)")
        os.abort()

    def get_supported_operations(self, model: HalModel) -> list[bool]:
        if self.spec.fault == "unsupported":
            validate_hal_model(model)
            return [True] * len(model.main.operations)  # the lie: everything, kernel or not
        return super().get_supported_operations(model)

    def prepare_model(self, model: HalModel, preference: Preference, priority: Priority,
                      deadline: float | None, cache: CacheHandles | None) -> PreparedModel:
        fault = self.spec.fault
        if self.spec.stage == "prepare":
            if fault == "crash":
                self._crash("prepare_model")
            elif fault == "hang":
                self._hang("prepare_model")
            elif fault == "fail":
                raise MltsError(ResultCode.OP_FAILED, f"{self.name}: injected preparation failure")
        if fault == "unsupported":
            validate_hal_model(model)
            try:
                graph = PreparedGraph(model)
            except MltsError:
                graph = None  # an operation without a kernel: fails at execution, as claimed
            return FaultyPreparedModel(self, model, graph)
        prepared = super().prepare_model(model, preference, priority, deadline, cache)
        if fault == "wrong-branch":
            return FaultyPreparedModel(self, model, PreparedGraph(swap_if_branches(model)))
        return FaultyPreparedModel(self, model, prepared.graph)

    def prepare_model_from_cache(self, deadline: float | None, cache: CacheHandles) -> PreparedModel:
        """The cached model goes through prepare_model (without handles), so that every fault of this
        driver strikes a cached compilation as it strikes a fresh one; stale-cache skips the cache checks."""
        model = load_for_driver(self, deadline, cache, verify=self.spec.fault != "stale-cache")
        return self.prepare_model(model, Preference.FAST_SINGLE_ANSWER, Priority.MEDIUM, deadline, None)


def swap_if_branches(model: HalModel) -> HalModel:
    """The wrong-branch fault: every IF (in any subgraph) with its then and else models exchanged.
    Both branches have the same signature, so the model stays valid; only the choice is wrong."""
    import dataclasses

    def swapped(sg):
        ops = tuple(dataclasses.replace(op, inputs=(op.inputs[0], op.inputs[2], op.inputs[1], *op.inputs[3:]))
                    if op.type == OperationCode.IF else op for op in sg.operations)
        return dataclasses.replace(sg, operations=ops)

    return dataclasses.replace(model, main=swapped(model.main),
                               referenced=tuple(swapped(sg) for sg in model.referenced))


class FaultyPreparedModel(PreparedModel):
    def __init__(self, driver: FaultyDriver, model: HalModel, graph: PreparedGraph | None) -> None:
        self.driver = driver
        self.model = model
        self.graph = graph

    def execute_synchronously(self, request: Request, measure: bool, deadline: float | None,
                              loop_timeout_ns: int) -> ExecutionResult:
        d = self.driver
        spec = d.spec
        try:  # as a healthy driver: malformed arguments are refused before any fault strikes
            validate_execution_arguments(measure, deadline, loop_timeout_ns, f"{d.name}: execute")
        except MltsError as e:
            return ExecutionResult(e.code, [], message=e.message)
        with d.lock:
            d.executions += 1
        if spec.stage == "execute":
            if spec.fault == "crash":
                d._crash("execution")
            elif spec.fault == "hang":
                d._hang("execution")
            elif spec.fault == "unsupported":
                failing = self._failing_operation(str(spec.option("op")))
                if failing is not None:
                    return ExecutionResult(ResultCode.OP_FAILED, [], message=f"{failing} failed: claimed as "
                                                                             f"supported, but it is not")
        assert self.graph is not None
        if spec.fault == "ignores-deadline":
            return self._past_deadline(request, measure, deadline, loop_timeout_ns)
        started = time.perf_counter()
        result = run_request(self.graph, request, measure, deadline, loop_timeout_ns, d.name,
                             device_buffers=self._device_buffers())
        elapsed = time.perf_counter() - started
        if result.status != ResultCode.NO_ERROR or spec.stage != "execute":
            return result
        try:
            return self._inject(request, result, elapsed)
        except Exception as e:  # a bug here must look like a driver failure, never escape
            return ExecutionResult(ResultCode.OP_FAILED, [], message=f"{d.name}: {type(e).__name__}: {e}")

    def execute_fenced(self, request: Request, wait_for: Sequence[int], measure: bool, deadline: float | None,
                       loop_timeout_ns: int, timeout_after_fence_ns: int | None) -> ExecutionResult:
        """ignores-fences: `wait_for` is checked (BAD_DATA as a healthy driver), then not waited for."""
        if self.driver.spec.fault != "ignores-fences":
            return super().execute_fenced(request, wait_for, measure, deadline, loop_timeout_ns,
                                          timeout_after_fence_ns)
        try:
            validate_fence_fds(wait_for, f"{self.driver.name}: execute_fenced")
        except MltsError as e:
            return ExecutionResult(e.code, [], message=e.message)
        return super().execute_fenced(request, [], measure, deadline, loop_timeout_ns, timeout_after_fence_ns)

    def _device_buffers(self) -> RequestBuffers | None:
        """Memory domains as the kernel driver serves them; accepts-foreign-token skips the role checks."""
        if self.driver.buffer_tracker is None:
            return None
        return RequestBuffers(self.driver.buffer_tracker, self,
                              check_roles=self.driver.spec.fault != "accepts-foreign-token")

    def _past_deadline(self, request: Request, measure: bool, deadline: float | None,
                       loop_timeout_ns: int) -> ExecutionResult:
        """ignores-deadline: compute without the deadline, then finish `late` s after it, claiming success."""
        result = run_request(self.graph, request, measure, None, loop_timeout_ns, self.driver.name,
                             device_buffers=self._device_buffers())
        if deadline is not None and result.status == ResultCode.NO_ERROR:
            late = float(self.driver.spec.option("late"))
            time.sleep(max(0.0, deadline + late - time.monotonic()))
        return result

    def _failing_operation(self, op: str) -> str | None:
        for j, operation in enumerate(self.model.main.operations):
            if op == "*" or operation.type.name == op or get_operation(operation.type) is None:
                return f"operation {j} ({operation.type.name})"
        return None if self.graph is not None else "preparation"

    def _inject(self, request: Request, result: ExecutionResult, elapsed: float) -> ExecutionResult:
        d, fault = self.driver, self.driver.spec.fault
        if fault == "slow":
            factor = float(d.spec.option("factor"))
            time.sleep((factor - 1.0) * elapsed)
            t = result.timing
            if t.time_on_device != NO_TIMING and t.time_in_driver != NO_TIMING:
                result.timing = Timing(int(t.time_on_device * factor), int(t.time_in_driver * factor))
        elif fault == "leak":
            # Fresh anonymous pages, written: resident whatever the allocator holds free from earlier work
            # (a heap block could reuse pages already resident, and the process would not grow).
            block = np.frombuffer(mmap.mmap(-1, int(float(d.spec.option("mb")) * (1 << 20))), np.uint8)
            block.fill(0xA5)
            with d.lock:
                d.leaked.append(block)
        elif fault in ("wrong-small", "wrong-large"):
            seed = int(d.spec.option("seed"))
            for k, (arg, shape) in enumerate(zip(request.outputs, result.output_shapes)):
                t = self.model.main.operands[self.model.main.output_indexes[k]].type
                view = request.pools[arg.location.pool_index].array(arg.location.offset, t.dtype,
                                                                    tuple(shape.dimensions))
                view[...] = perturb(view, t.code, large=fault == "wrong-large", seed=seed, index=k)
        elif fault == "dynamic-shape":
            if d.spec.option("mode") == "wrong":
                shapes = [OutputShape(tuple(s.dimensions) + (1,), True) for s in result.output_shapes]
                return ExecutionResult(ResultCode.NO_ERROR, shapes, result.timing)
            shapes = [OutputShape(_doubled(s.dimensions), False) for s in result.output_shapes]
            return ExecutionResult(ResultCode.OUTPUT_INSUFFICIENT_SIZE, shapes,
                                   message="injected dynamic-shape error: outputs need "
                                           + ", ".join(str(s.dimensions) for s in shapes))
        return result


def _doubled(dims: tuple[int, ...]) -> tuple[int, ...]:
    return (max(1, dims[0]) * 2, *dims[1:]) if dims else (2,)


_FLOATS = {OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16, OperandCode.FLOAT32, OperandCode.FLOAT16}
_BOOLS = {OperandCode.TENSOR_BOOL8, OperandCode.BOOL}


def perturb(x: np.ndarray, code: OperandCode, *, large: bool, seed: int, index: int = 0) -> np.ndarray:
    """The wrong-small / wrong-large output for a correct output `x` (see the module doc)."""
    x = np.asarray(x)
    rng = np.random.default_rng([seed, index])
    sign = rng.integers(0, 2, size=x.shape) * 2 - 1
    if large and x.ndim >= 1:
        x = np.roll(x, 1, axis=-1)
    if code in _BOOLS:
        return np.logical_not(x).astype(x.dtype) if large else x.copy()
    if code in _FLOATS:
        rel, absolute = (LARGE_REL, LARGE_ABS) if large else (SMALL_REL, SMALL_ABS)
        wide = x.astype(np.float64)
        return (wide + sign * (rel * np.abs(wide) + absolute)).astype(x.dtype)
    info = np.iinfo(x.dtype)
    steps = LARGE_STEPS if large else SMALL_STEPS
    moved = x.astype(np.int64) + sign * steps
    # Saturating would leave values at the type's edge unchanged; bounce them the other way instead.
    moved = np.where((moved < info.min) | (moved > info.max), x.astype(np.int64) - sign * steps, moved)
    return np.clip(moved, info.min, info.max).astype(x.dtype)


def _note(line: str) -> None:
    """Say on stderr what is being injected: the only trace a crash or hang leaves in a service's log."""
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:  # stderr closed: injecting matters more than telling
        pass


__all__ = ["FAULTS", "FaultSpec", "FaultyDriver", "FaultyPreparedModel", "create", "create_all", "fault_specs",
           "parse_spec", "perturb", "swap_if_branches"]
