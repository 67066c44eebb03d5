"""Single-operation profiles: each operation of a model timed alone on a driver, for drivers that do not
report per-operation times themselves (`mlts profile MODEL --driver D`).

Every operation becomes a model of its own: its constant inputs stay constants, its other inputs become
the model's inputs, fed with the values they hold in the whole model's run (the CPU executor computes
them once, on the same inputs), and its outputs are the model's outputs. Each such model is compiled for
the driver alone and timed; the time taken is the one the driver reports on its device when it reports
one, else the time in the driver, else the wall time of the computation (runtime overhead included).
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from mlts.runtime import (Compilation, Device, DurationCode, Execution, MltsError, Model, OperandLifetime,
                          ResultCode)
from mlts.runtime.cpu.executor import PreparedGraph
from mlts.runtime.cpu.profiling import ProfiledGraph
from mlts.runtime.enums import NO_TIMING
from mlts.runtime.hal import constant_array

from .op_profile import OpTiming

#: Time per operation: at most this many timed runs (after one warm-up run), fewer once the budget is spent.
SINGLE_OP_BUDGET_S = 1.0
_CONSTANT = (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE)


def reference_values(model: Model, inputs: Sequence[np.ndarray]) -> dict[int, np.ndarray | None]:
    """Every model input and operation output of one run of the CPU executor on `inputs`, by operand index
    (a HAL model numbers operands as the application's model does)."""
    hal = model.hal_model()
    graph = ProfiledGraph(PreparedGraph(hal), keep_values=True)
    graph.run(list(inputs))
    values: dict[int, np.ndarray | None] = dict(zip(hal.main.input_indexes, inputs))
    values.update(graph.values or {})
    return values


def single_operation_model(model: Model, index: int,
                           values: dict[int, np.ndarray | None]) -> tuple[Model, list[np.ndarray]]:
    """Operation `index` of `model` (application order) as a model of its own, and the arrays to feed its
    inputs. Raises MltsError for an operation that references subgraphs (IF, WHILE)."""
    hal = model.hal_model()
    code, op_inputs, op_outputs = model.operations()[index]
    sub = Model()
    remap: dict[int, int] = {}
    sub_inputs: list[int] = []
    feeds: list[np.ndarray] = []
    for i in dict.fromkeys((*op_inputs, *op_outputs)):
        operand = hal.main.operands[i]
        if operand.lifetime == OperandLifetime.SUBGRAPH:
            raise MltsError(ResultCode.BAD_DATA, f"{code.name} references a subgraph: not profiled alone")
        t = operand.type
        value = values.get(i)
        if t.is_tensor and isinstance(value, np.ndarray):
            t = t.with_dimensions(value.shape)
        remap[i] = sub.add_operand(t)
        if operand.lifetime in _CONSTANT:
            sub.set_operand_value(remap[i], np.array(constant_array(hal, operand.type, operand.location)))
        elif i in op_outputs:
            continue
        elif operand.lifetime == OperandLifetime.NO_VALUE or value is None:
            sub.set_operand_value(remap[i], None)
        else:
            sub_inputs.append(remap[i])
            feeds.append(np.asarray(value))
    sub.add_operation(code, [remap[i] for i in op_inputs], [remap[o] for o in op_outputs])
    sub.identify_inputs_and_outputs(sub_inputs, [remap[o] for o in op_outputs])
    sub.finish()
    return sub, feeds


def time_operation(sub: Model, feeds: Sequence[np.ndarray], device: Device, runs: int,
                   budget_s: float = SINGLE_OP_BUDGET_S) -> tuple[float, str, int]:
    """(mean microseconds, where they come from: "on_device", "in_driver" or "wall", timed runs) of a
    single-operation model on `device`, after one warm-up run."""
    c = Compilation.for_devices(sub, [device])
    c.finish()
    ex = Execution(c)
    for k, x in enumerate(feeds):
        ex.set_input(k, x)
    ex.set_measure_timing(True)
    ex.set_reusable(True)
    ex.compute()
    times: dict[str, list[float]] = {"on_device": [], "in_driver": [], "wall": []}
    started = time.monotonic()
    while len(times["wall"]) < runs and (not times["wall"] or time.monotonic() - started < budget_s):
        t0 = time.perf_counter_ns()
        ex.compute()
        times["wall"].append((time.perf_counter_ns() - t0) / 1000.0)
        for source, code in (("on_device", DurationCode.ON_HARDWARE), ("in_driver", DurationCode.IN_DRIVER)):
            ns = ex.get_duration(code)
            if ns != NO_TIMING:
                times[source].append(ns / 1000.0)
    n = len(times["wall"])
    source = next(s for s in ("on_device", "in_driver", "wall") if len(times[s]) == n)
    return float(np.mean(times[source])), source, n


def time_single_operations(model: Model, device: Device, inputs: Sequence[np.ndarray], *, runs: int,
                           budget_s: float = SINGLE_OP_BUDGET_S,
                           tick: Callable[[], None] | None = None) -> list[OpTiming]:
    """Every operation of `model` (application order) timed alone on `device`; those it does not support,
    or that cannot be run alone, have no time and say why."""
    values = reference_values(model, inputs)
    supported = model.get_supported_operations_for_devices([device])
    timings = []
    for index, (code, _, _) in enumerate(model.operations()):
        if not supported[index]:
            timings.append(OpTiming(index, code.name, device.name, None, status="unsupported",
                                    message=f"{device.name} does not support it"))
            continue
        try:
            sub, feeds = single_operation_model(model, index, values)
            mean_us, source, n = time_operation(sub, feeds, device, runs, budget_s)
            timings.append(OpTiming(index, code.name, device.name, mean_us, n, source))
        except MltsError as e:
            timings.append(OpTiming(index, code.name, device.name, None, status="error", message=str(e)))
        if tick is not None:
            tick()
    return timings
