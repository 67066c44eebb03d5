"""Where a driver goes wrong, operation by operation (`mlts diff`, and the quantized accuracy verdict).

Every operation of a model (application order) is looked at twice:
- isolated: the operation alone (a single-operation model, see single_op.py) on the driver, fed the
  expected values of its inputs, its outputs compared with the expected values and judged by NNAPI's
  per-operation tolerance (SPEC.md section 3: the CTS float rule, one quantization step): this names
  the operation at fault, whatever happened before it;
- end to end: the whole model on the driver with every operation's outputs made model outputs: this
  shows where a drift starts and how it grows.
The expected values are nnapi-reference's (the CPU executor on the same inputs) unless the caller gives
others (onnxruntime's, mapped onto the NNAPI operands by mlts.models.onnx_import.onnx_values); an operand
without an expected value (inside an ONNX node's decomposition) is not judged, and is fed nnapi-reference's
value computed from the expected values before it. Differences are in each output's own units:
quantization steps for quantized operands, relative to the expected tensor's largest magnitude for float
ones, and mismatching elements for integer and boolean ones.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from mlts.runtime import Compilation, Execution, MltsError, Model, OperandCode, OperandLifetime, ResultCode
from mlts.runtime.hal import constant_array

from .accuracy import QUANT_TOLERANCE_PER_OP, cts_tolerance
from .single_op import reference_values, single_operation_model

_QUANTIZED = {OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED,
              OperandCode.TENSOR_QUANT8_SYMM, OperandCode.TENSOR_QUANT16_ASYMM, OperandCode.TENSOR_QUANT16_SYMM}
_FLOAT = {OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_FLOAT16}
_CONSTANT = (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE)


@dataclass
class OutputDiff:
    """One output of one operation against its expected value."""

    operand: int
    unit: str  # "steps", "relative" or "mismatches"
    max_diff: float  # in `unit`
    max_abs_diff: float  # in real units (float), steps (quantized) or elements (integer, boolean)
    within_tolerance: bool  # NNAPI's per-operation rule
    elements: int

    def text(self) -> str:
        if self.unit == "steps":
            return f"{self.max_diff:.0f} step{'s' if self.max_diff != 1 else ''}"
        if self.unit == "relative":
            return f"{self.max_diff:.2e} rel"
        return f"{self.max_diff:.0f} mismatch{'es' if self.max_diff != 1 else ''}"


@dataclass
class OperationDiff:
    """One operation: its isolated and end-to-end differences (None where not measured, with why)."""

    index: int
    operation: str
    origin: str = ""
    devices: list[str] = field(default_factory=list)  # where the isolated run ran (the partitioner's choice)
    isolated: list[OutputDiff] | None = None
    end_to_end: list[OutputDiff] | None = None
    status: str = "ok"  # "ok", "out of tolerance", "not judged", "unsupported", "error"
    message: str = ""

    @staticmethod
    def worst(diffs: list[OutputDiff] | None) -> OutputDiff | None:
        """The output that fails the rule, else the first one."""
        if not diffs:
            return None
        return next((d for d in diffs if not d.within_tolerance), diffs[0])

    def to_dict(self) -> dict:
        return asdict(self)


def compare_operand(operand: int, code: OperandCode, actual: np.ndarray, expected: np.ndarray,
                    *, relaxed: bool = False) -> OutputDiff:
    """`actual` against `expected` for an operand of type `code`, in that type's units."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape and [d for d in actual.shape if d != 1] == [d for d in expected.shape if d != 1]:
        actual = actual.reshape(expected.shape)  # a rank-0 ONNX value held as NNAPI's [1] (never a transposition)
    if actual.shape != expected.shape:
        raise MltsError(ResultCode.OP_FAILED, f"operand {operand}: shape {list(actual.shape)} differs from the "
                                              f"expected {list(expected.shape)}")
    quantized = code in _QUANTIZED
    rule = cts_tolerance(actual.dtype, relaxed=relaxed, quant_tolerance=QUANT_TOLERANCE_PER_OP)
    within = bool(rule.within(actual, expected).all())
    if code in _FLOAT:
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where((a == e) | (np.isnan(a) & np.isnan(e)), 0.0, np.abs(a - e))
        max_abs = float(np.max(np.nan_to_num(diff, nan=np.inf, posinf=np.inf), initial=0.0))
        scale = float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0))
        return OutputDiff(operand, "relative", max_abs / scale if scale > 0 else max_abs, max_abs, within,
                          int(actual.size))
    if quantized:
        steps = float(np.max(np.abs(actual.astype(np.int64) - expected.astype(np.int64)), initial=0))
        return OutputDiff(operand, "steps", steps, steps, within, int(actual.size))
    mismatches = float(np.count_nonzero(actual != expected))
    return OutputDiff(operand, "mismatches", mismatches, mismatches, within, int(actual.size))


def with_every_output(model: Model) -> tuple[Model, list[int]]:
    """A copy of `model` whose outputs are its own followed by every other operation output, and the
    original operand index of each of the copy's outputs (in order)."""
    hal = model.hal_model()
    copy = Model()
    for i, operand in enumerate(hal.main.operands):
        if operand.lifetime in (OperandLifetime.SUBGRAPH,):
            raise MltsError(ResultCode.BAD_DATA, "a model with control flow (IF, WHILE) cannot be diffed operation "
                                                 "by operation")
        index = copy.add_operand(operand.type if operand.lifetime in _CONSTANT else model.operand_type(i))
        if operand.lifetime in _CONSTANT:
            copy.set_operand_value(index, np.array(constant_array(hal, operand.type, operand.location)))
        elif operand.lifetime == OperandLifetime.NO_VALUE:
            copy.set_operand_value(index, None)
    for code, ins, outs in model.operations():
        copy.add_operation(code, list(ins), list(outs))
    outputs = list(model.outputs)
    for _, _, outs in model.operations():
        outputs.extend(o for o in outs if o not in outputs)
    copy.identify_inputs_and_outputs(list(model.inputs), outputs)
    copy.relax_computation_float32_to_float16(model.relaxed)
    copy.finish()
    return copy, outputs


def _run(model: Model, devices: Sequence, feeds: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[str]]:
    """The outputs of one computation, and the devices the partitioner chose for it (plan order)."""
    compilation = Compilation.for_devices(model, list(devices))
    compilation.finish()
    execution = Execution(compilation)
    for k, x in enumerate(feeds):
        execution.set_input(k, x)
    execution.compute()
    ran_on = list(dict.fromkeys(step.device.name for step in compilation.plan.steps))
    return [execution.get_output(k) for k in range(len(model.outputs))], ran_on


class OperationDiffer:
    """Diffs of one model on one set of devices (a driver, possibly with a fallback) against expected values."""

    def __init__(self, model: Model, devices: Sequence, inputs: Sequence[np.ndarray], *,
                 expected: Mapping[int, np.ndarray] | None = None,
                 origins: Callable[[int], str] | None = None) -> None:
        self.model = model
        self.devices = list(devices)
        self.inputs = [np.asarray(x) for x in inputs]
        reference = reference_values(model, self.inputs)
        self.expected: dict[int, np.ndarray] = dict(reference if expected is None else expected)
        # What each operation is fed: the expected values, nnapi-reference's where there are none.
        self.feeds: dict[int, np.ndarray | None] = {**reference, **self.expected}
        if expected is not None:
            self._chain_feeds()
        self.origins = origins or (lambda _j: "")

    def _chain_feeds(self) -> None:
        """An operand without an expected value (inside an ONNX node's decomposition) is fed nnapi-reference's
        value computed from the feeds of its operation's inputs, in run order: the operations after it then
        carry on from the expected values, not from nnapi-reference's own whole-model drift."""
        by_outputs = {tuple(outs): j for j, (_, _, outs) in enumerate(self.model.operations())}
        for op in self.model.hal_model().main.operations:
            missing = [o for o in op.outputs if self.expected.get(o) is None]
            if not missing:
                continue
            try:
                sub, feeds = single_operation_model(self.model, by_outputs[tuple(op.outputs)], self.feeds)
                values = reference_values(sub, feeds)
            except MltsError:
                continue  # nnapi-reference's whole-model value stays
            for o, sub_o in zip(op.outputs, sub.outputs):
                if o in missing:
                    self.feeds[o] = values.get(sub_o)

    def _diffs(self, outputs: Sequence[int], values: Sequence[np.ndarray]) -> list[OutputDiff]:
        diffs = []
        for operand, value in zip(outputs, values):
            if operand in self.expected and self.expected[operand] is not None:
                diffs.append(compare_operand(operand, self.model.operand_type(operand).code, value,
                                             self.expected[operand], relaxed=self.model.relaxed))
        return diffs

    def isolated(self, tick: Callable[[], None] | None = None) -> list[OperationDiff]:
        """Each operation alone on the devices, fed the expected values of its inputs."""
        supported = self.model.get_supported_operations_for_devices(self.devices)
        rows = []
        for j, (code, _, outs) in enumerate(self.model.operations()):
            row = OperationDiff(j, code.name, self.origins(j))
            rows.append(row)
            if supported[j]:
                self._isolate(row, j, outs)
            else:
                row.status, row.message = "unsupported", "no device of the run supports it"
            if tick is not None:
                tick()
        return rows

    def _isolate(self, row: OperationDiff, j: int, outs: Sequence[int]) -> None:
        try:
            sub, feeds = single_operation_model(self.model, j, self.feeds)
            values, row.devices = _run(sub, self.devices, feeds)
            row.isolated = self._diffs(outs, values)
        except MltsError as e:
            row.status, row.message = "error", str(e)
            return
        if not row.isolated:
            row.status, row.message = "not judged", "no expected value for its outputs"
        elif not all(d.within_tolerance for d in row.isolated):
            row.status = "out of tolerance"

    def end_to_end(self, rows: list[OperationDiff]) -> str | None:
        """Fill each row's end-to-end differences from one run of the whole model; the error, if it failed."""
        try:
            every, outputs = with_every_output(self.model)
            values = dict(zip(outputs, _run(every, self.devices, self.inputs)[0]))
        except MltsError as e:
            return str(e)
        for row, (_, _, outs) in zip(rows, self.model.operations()):
            row.end_to_end = self._diffs(outs, [values[o] for o in outs])
        return None


def first_out_of_tolerance(rows: Sequence[OperationDiff]) -> OperationDiff | None:
    """The first operation (run order of the model's add order) whose isolated result breaks the rule."""
    return next((r for r in rows if r.status == "out of tolerance"), None)


def per_operation_verdict(model: Model, devices: Sequence, inputs: Sequence[np.ndarray],
                          origins: Callable[[int], str] | None = None,
                          tick: Callable[[], None] | None = None) -> dict:
    """The quantized whole-model verdict's first half: every operation within NNAPI's per-operation tolerance
    given nnapi-reference's inputs. A JSON-ready summary naming the first operation out of tolerance."""
    rows = OperationDiffer(model, devices, inputs, origins=origins).isolated(tick)
    judged = [r for r in rows if r.isolated]
    bad = first_out_of_tolerance(rows)
    summary = {
        "operations": len(rows),
        "operations_judged": len(judged),
        "operations_out_of_tolerance": sum(r.status == "out of tolerance" for r in rows),
        "operations_failed": [f"{r.index} {r.operation}: {r.message}" for r in rows if r.status == "error"],
        "pass": bad is None and not any(r.status == "error" for r in rows),
        "first_out_of_tolerance": None,
    }
    if bad is not None:
        worst = OperationDiff.worst(bad.isolated)
        summary["first_out_of_tolerance"] = {"index": bad.index, "operation": bad.operation, "origin": bad.origin,
                                             "difference": worst.text(), "max_diff": worst.max_diff}
    return summary
