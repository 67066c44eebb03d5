"""What every benchmark case feeds and calls: images as an image model's inputs, one inference in the case's mode,
digests that identify inputs and files in a record, and a stage that calls no driver. (Which held-out samples a
model gets, and how they are scored, is tasks.py's.)"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from mlts.runtime import Burst, Compilation, Execution, MltsError, OperandCode, ResultCode

from .stage_timeout import Watchdog


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def digest(arrays: Iterable[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def file_digest(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()[:16]
    except OSError:
        return None


def stage(stage: str, fn: Callable[[], Any]) -> Any:
    """A stage that calls no driver (loading, rendering images): unbounded, in this thread."""
    return Watchdog(None).run(stage, lambda _tick: fn())


def model_inputs(imported: Any, images: np.ndarray) -> list[np.ndarray]:
    """Each image as the model's input 0: float NCHW in [-1, 1], or quantized with the input operand's
    own scale and zero point."""
    from mlts.datasets.preprocess import to_float_input, to_quant_input

    model = imported.model
    t = model.operand_type(model.inputs[0])
    if t.code == OperandCode.TENSOR_FLOAT32:
        return [to_float_input(images[i]) for i in range(len(images))]
    if t.code in (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED):
        return [to_quant_input(images[i], scale=t.scale, zero_point=t.zero_point, dtype=t.dtype)
                for i in range(len(images))]
    raise _bad(f"{imported.name}: input type {t.describe()} is not an image input this benchmark can feed")


class Inference:
    """One inference per call in the case's mode, each output into its preallocated buffer (where its shape is
    known before running); returns the Execution so timings are read off the timed path.

    One reusable Execution serves the calls (NNAPI's setReusable, feature level 5), as a client that
    runs a model repeatedly does: while the input is the same array as last time (the timed runs feed
    one image) nothing is set again, so a synchronous or burst compute goes through the reusable
    execution the driver created once, and the latency measured is the driver's plus what a lean
    client adds, not the cost of building an execution. A new input rebinds it; a failed call, or a call
    made while an earlier one has not returned (a hung driver), gets a new Execution.
    """

    def __init__(self, compilation: Compilation, mode: str, measure_timing: bool,
                 timeout_s: float | None = None) -> None:
        self.compilation = compilation
        self.mode = mode
        self.measure_timing = measure_timing and compilation.is_single_explicit_device
        single = compilation.is_single_explicit_device
        self.timeout_ns = int(timeout_s * 1e9) if (timeout_s and single) else None
        model = compilation.model
        self.outs: list[np.ndarray | None] = []
        for index in model.outputs:
            t = model.inferred_operand_type(index)
            self.outs.append(np.empty(t.dimensions, t.dtype) if t.is_tensor and t.is_fully_specified else None)
        self.burst = Burst(compilation) if mode == "burst" else None
        self._execution: Execution | None = None
        self._bound: np.ndarray | None = None  # the input array the execution is bound to
        self._in_call = False

    def _execution_for(self, x: np.ndarray) -> Execution:
        ex = self._execution
        if ex is None or self._in_call:
            ex = self._execution = Execution(self.compilation)
            ex.set_reusable(True)
            for k, out in enumerate(self.outs):
                if out is not None:
                    ex.set_output(k, out)
            if self.measure_timing:
                ex.set_measure_timing(True)
            if self.timeout_ns is not None:
                ex.set_timeout(self.timeout_ns)
            self._bound = None
        if x is not self._bound:
            ex.set_input(0, x)
            self._bound = x
        return ex

    def __call__(self, x: np.ndarray) -> Execution:
        ex = self._execution_for(x)
        self._in_call = True
        try:
            if self.mode == "sync":
                ex.compute()
            elif self.mode == "burst":
                ex.burst_compute(self.burst)
            else:
                ex.start_compute().wait()
        except BaseException:
            self._execution = None  # the next call starts afresh
            raise
        finally:
            self._in_call = False
        return ex

    def outputs(self, ex: Execution) -> list[np.ndarray]:
        """Every output of the call that returned `ex`, copied."""
        return [out.copy() if out is not None else np.array(ex.get_output(k)) for k, out in enumerate(self.outs)]

    def close(self) -> None:
        if self._execution is not None and not self._in_call:
            self._execution.free()  # its reusable execution: a driver service's ring and thread, now
        self._execution = None
        if self.burst is not None:
            self.burst.close()
