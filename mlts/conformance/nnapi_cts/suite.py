"""Runs NNAPI's generated test cases on a device through mlts's public API, judged as NNAPI's CTS judges.

Each case is built as CTS builds it (every operand, constants set, operations, inputs/outputs, relaxed
flag; referenced models for IF/WHILE), compiled for one device only and executed on each execution path
(paths.py: sync, async, burst, fenced, cached). Outputs are compared with TestHarness's tolerances:
float32 atol 1e-5 + rtol 5 ULP, float16 (and float32 in relaxed or float16 models) atol = rtol = 5
float16 ULP, int32 and quantized types within 1 (3 for mobilenet), bool exact; ignored outputs are
skipped and output dimensions must match. A case expected to fail passes when building, compiling or
executing fails. The dynamic-output-shape variant declares every main output's dimensions unknown (0), as
CTS's DynamicOutputShapeTest does.

Statuses, per (case, variant, path): pass, fail (with the worst difference), n/a (the device declines an
operation), error (an MltsError where success was expected)."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from mlts.runtime import (Compilation, Execution, MltsError, Model, OperandCode, OperandType, OperationCode,
                          SymmPerChannelQuantParams)

from . import paths as execution_paths
from .paths import CACHED, PATHS, SYNC
from .store import Case, Subgraph

FLOAT32_TOLERANCE = (1e-5, 5.0 * 1.1920928955078125e-7)  # (atol, rtol)
FLOAT16_TOLERANCE = (5.0 * 0.0009765625, 5.0 * 0.0009765625)
INTEGER_TYPES = {"TENSOR_INT32", "INT32", "TENSOR_QUANT8_ASYMM", "TENSOR_QUANT8_ASYMM_SIGNED", "TENSOR_QUANT8_SYMM",
                 "TENSOR_QUANT16_ASYMM", "TENSOR_QUANT16_SYMM"}
QUANT8_TYPES = {"TENSOR_QUANT8_ASYMM", "TENSOR_QUANT8_ASYMM_SIGNED", "TENSOR_QUANT8_SYMM"}
STATIC, DYNAMIC = "static", "dynamic_output_shape"
WHILE_TIMEOUT_NS = 50_000_000  # expected-to-fail WHILE loops are infinite: stop them early


RECORD_KIND = "nnapi-cts"  # the `kind` of its results.jsonl records (mlts.benchmark.records reads any kind)
#: The input whose type names a case's operand type, where it is not input 0 (the values, not the lookups;
#: the first data input of IF / WHILE, after the condition and the referenced models).
PRIMARY_INPUT = {"EMBEDDING_LOOKUP": 1, "HASHTABLE_LOOKUP": 2, "IF": 3, "WHILE": 2}


@dataclass
class CaseResult:
    """One case, variant and path on one device. `seconds`: that path's execution and comparison; the
    model build and the compilation that sync, async, burst and fenced share count in the first of them."""

    case: str
    variant: str
    device: str
    operation: str
    spec: str
    version: str | None
    status: str  # pass, fail, n/a, error
    detail: str = ""
    worst: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    path: str = SYNC
    operand_type: str = ""  # primary_type(case)
    cache: str = ""  # cached path: the second compilation's cache_status
    spec_dir: str = ""


class CaseFailure(Exception):
    """The outputs (or their dimensions) are not what NNAPI's harness accepts."""

    def __init__(self, message: str, worst: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.worst = worst or {}


# -- building ---------------------------------------------------------------------------------------
def _operand_type(o, dims: Sequence[int]) -> OperandType:
    code = OperandCode[o.type] if o.type != "SUBGRAPH" else OperandCode.MODEL
    if code == OperandCode.MODEL or o.type in ("INT32", "UINT32", "FLOAT32", "FLOAT16", "BOOL"):
        return OperandType(code, ())
    channel = None
    if o.channel_quant is not None:
        channel = SymmPerChannelQuantParams(tuple(o.channel_quant[1]), o.channel_quant[0])
    # A tensor declared with no dimensions has an unknown rank (NNAPI: dimensionCount 0).
    return OperandType.tensor(code, list(dims) if len(dims) else None, o.scale, o.zero_point, channel)


def _value(o, t: OperandType) -> np.ndarray:
    data = np.asarray(o.data, dtype=t.dtype)
    return data.reshape(()) if t.is_scalar else data.reshape(o.dims)


def build_model(case: Case, dynamic_outputs: bool = False) -> Model:
    """The case's main model (referenced models built and finished first), finished."""
    built: dict[int, Model] = {}

    def build(index: int) -> Model:
        if index in built:
            return built[index]
        sg: Subgraph = case.subgraphs[index]
        model = Model()
        for k, o in enumerate(sg.operands):
            dims = o.dims
            if dynamic_outputs and index == 0 and k in sg.outputs:
                dims = [0] * len(o.dims)
            t = _operand_type(o, dims)
            idx = model.add_operand(t)
            if o.lifetime == "CONSTANT":
                model.set_operand_value(idx, _value(o, t))
            elif o.lifetime == "NO_VALUE":
                model.set_operand_value(idx, None)
            elif o.lifetime == "SUBGRAPH":
                model.set_operand_value_from_model(idx, build(int(o.data[0]) + 1))
        for name, ins, outs in sg.operations:
            model.add_operation(OperationCode[name], ins, outs)
        model.identify_inputs_and_outputs(sg.inputs, sg.outputs)
        model.relax_computation_float32_to_float16(case.relaxed)
        model.finish()
        built[index] = model
        return model

    return build(0)


# -- comparing --------------------------------------------------------------------------------------
def tolerance_of(case: Case, type_name: str) -> tuple[float, float]:
    """(atol, rtol) for an output type, as TestHarness's default criteria."""
    if type_name in INTEGER_TYPES:
        return (3.0 if type_name in QUANT8_TYPES and "mobilenet" in case.name else 1.0), 0.0
    if type_name == "TENSOR_FLOAT16":
        return FLOAT16_TOLERANCE
    has_float16 = any(o.type == "TENSOR_FLOAT16" for sg in case.subgraphs for o in sg.operands)
    return FLOAT16_TOLERANCE if case.relaxed or has_float16 else FLOAT32_TOLERANCE


def compare_outputs(case: Case, outputs: Sequence[np.ndarray]) -> None:
    """Raise CaseFailure naming the worst element when an output is outside NNAPI's tolerance."""
    main = case.main
    if len(outputs) != len(main.outputs):
        raise CaseFailure(f"{len(outputs)} outputs, expected {len(main.outputs)}")
    if case.multinomial_tolerance > 0:
        _check_multinomial(case, outputs[0])
        return
    for k, index in enumerate(main.outputs):
        o = main.operands[index]
        if o.ignored:
            continue
        actual = np.asarray(outputs[k])
        if list(actual.shape) != list(o.dims):
            raise CaseFailure(f"output {k}: dimensions {list(actual.shape)}, expected {list(o.dims)}",
                              {"output": k, "dimensions": list(actual.shape), "expected": list(o.dims)})
        expected = np.asarray(o.data).reshape(o.dims)
        if o.type in ("TENSOR_BOOL8", "BOOL"):
            wrong = np.flatnonzero(actual.reshape(-1).astype(bool) != expected.reshape(-1).astype(bool))
            if wrong.size:
                i = int(wrong[0])
                raise CaseFailure(f"output {k}: {wrong.size} of {expected.size} booleans differ (first at {i}: "
                                  f"{bool(actual.reshape(-1)[i])}, expected {bool(expected.reshape(-1)[i])})",
                                  {"output": k, "index": i, "mismatches": int(wrong.size)})
            continue
        atol, rtol = tolerance_of(case, o.type)
        a = actual.reshape(-1).astype(np.float64)
        e = expected.reshape(-1).astype(np.float64)
        allowed = atol + rtol * np.abs(e)
        diff = np.abs(a - e)
        bad = ~(diff <= allowed)  # NaN counts as outside
        if bad.any():
            excess = np.where(np.isnan(diff), np.inf, diff - allowed)
            i = int(np.argmax(excess))
            worst = {"output": k, "index": i, "actual": float(a[i]), "expected": float(e[i]),
                     "difference": float(diff[i]), "tolerance": float(allowed[i]), "outside": int(bad.sum()),
                     "of": int(bad.size)}
            raise CaseFailure(f"output {k} ({o.type}): {int(bad.sum())} of {bad.size} values outside tolerance; "
                              f"worst at {i}: {a[i]:.9g} vs expected {e[i]:.9g} (|diff| {diff[i]:.3g} > "
                              f"{allowed[i]:.3g})", worst)


def _check_multinomial(case: Case, samples: np.ndarray) -> None:
    """RANDOM_MULTINOMIAL: each class's sample frequency near softmax(input) within the case's tolerance."""
    logits = np.asarray(case.main.operands[case.main.inputs[0]].data, dtype=np.float64)
    batches, classes = case.main.operands[case.main.inputs[0]].dims
    logits = logits.reshape(batches, classes)
    samples = np.asarray(samples).reshape(batches, -1)
    for b in range(batches):
        expected = np.exp(logits[b]) / np.exp(logits[b]).sum()
        counts = np.bincount(samples[b].astype(np.int64), minlength=classes)[:classes] / samples.shape[1]
        worst = float(np.max(np.abs(counts - expected)))
        if worst > case.multinomial_tolerance:
            raise CaseFailure(f"batch {b}: class frequencies differ from softmax(input) by {worst:.3g} "
                              f"(> {case.multinomial_tolerance})", {"batch": b, "difference": worst})


# -- running ----------------------------------------------------------------------------------------
def primary_type(case: Case) -> str:
    """What the case's operation computes in, for tables: the type of its primary input (input 0 but for
    lookups and control flow), without the TENSOR_ prefix, "FLOAT32 relaxed" in relaxed models."""
    main = case.main
    tested = set(case.tested)
    op = next((o for o in main.operations if o[0] in tested), main.operations[0] if main.operations else None)
    if op is None:
        return "?"
    name, inputs, _ = op
    k = PRIMARY_INPUT.get(name, 0)
    type_name = main.operands[inputs[k if k < len(inputs) else 0]].type
    type_name = type_name.removeprefix("TENSOR_")
    return f"{type_name} relaxed" if case.relaxed and type_name == "FLOAT32" else type_name


def _declined(model: Model, device) -> list[str]:
    supported = model.get_supported_operations_for_devices([device])
    return [code.name for (code, _, _), ok in zip(model.operations(), supported) if not ok]


def _empty_output(case: Case) -> bool:
    return any(case.main.operands[i].data is None or case.main.operands[i].data.size == 0 for i in case.main.outputs)


def path_applies(case: Case, variant: str, path: str) -> bool:
    """Does `path` run this case and variant (paths.applies)?"""
    return execution_paths.applies(path, expect_failure=case.expect_failure, dynamic_outputs=variant == DYNAMIC,
                                   empty_output=_empty_output(case))


def run_compilation(case: Case, model: Model, compilation: Compilation, path: str = SYNC) -> list[np.ndarray]:
    """The case's inputs run on `compilation` through `path`; the outputs. MltsError propagates."""
    execution = Execution(compilation)
    if case.expect_failure and any(op == "WHILE" for sg in case.subgraphs for op, _, _ in sg.operations):
        execution.set_loop_timeout(WHILE_TIMEOUT_NS)
    for k, index in enumerate(case.main.inputs):
        o = case.main.operands[index]
        if o.data is None or o.data.size == 0:
            execution.set_input(k, None)  # an omitted optional input (CTS: a null buffer)
        else:
            execution.set_input(k, _value(o, model.operand_type(index)))
    execution_paths.compute(execution, compilation, path)
    return [execution.get_output(k) for k in range(len(case.main.outputs))]


def execute(case: Case, device, dynamic_outputs: bool = False,
            path: str = SYNC) -> tuple[list[np.ndarray] | None, list[str]]:
    """Build, compile for `device` and run the case on `path`; (outputs, declined operations). Outputs are
    None when the device declines an operation. MltsError propagates."""
    model = build_model(case, dynamic_outputs)
    declined = _declined(model, device)
    if declined:
        return None, declined
    if path == CACHED:
        compilation = execution_paths.compile_cached(model, device, _token(case, dynamic_outputs))
    else:
        compilation = execution_paths.compile_for(model, device)
    return run_compilation(case, model, compilation, path), []


def _token(case: Case, dynamic_outputs: bool) -> bytes:
    return execution_paths.cache_token(case.spec_dir, case.name, DYNAMIC if dynamic_outputs else STATIC)


class _Once:
    """A computation made once and shared by the paths of one case: its value, or its exception again."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make, self._done, self._value, self._error = make, False, None, None

    def __call__(self) -> Any:
        if not self._done:
            self._done = True
            try:
                self._value = self._make()
            except Exception as e:  # noqa: BLE001 - replayed to every path that needs it
                self._error = e
        if self._error is not None:
            raise self._error
        return self._value


def _judge(result: CaseResult, case: Case, attempt: Callable[[], tuple[list[np.ndarray] | None, list[str]]]) -> None:
    """Set the result's status from running `attempt` (outputs, declined): never raises for the case's failure."""
    try:
        outputs, declined = attempt()
        if declined:
            result.status, result.detail = "n/a", "declined: " + ", ".join(dict.fromkeys(declined))
        elif case.expect_failure:
            result.status, result.detail = "fail", "expected to fail validation or execution, but succeeded"
        else:
            compare_outputs(case, outputs)
    except CaseFailure as e:
        result.status, result.detail, result.worst = "fail", str(e), e.worst
    except MltsError as e:
        if case.expect_failure:
            result.detail = f"failed as expected: {e}"
        else:
            result.status, result.detail = "error", str(e)
    except Exception as e:  # noqa: BLE001 - a runtime bug is reported as the case's error, not a crash
        result.status, result.detail = "error", f"{type(e).__name__}: {e}"


def run_case_paths(case: Case, device, variant: str = STATIC, paths: Sequence[str] = PATHS) -> list[CaseResult]:
    """The case on every path of `paths` that runs it (path_applies), one result each. The model is built
    once; sync, async, burst and fenced share one compilation (NNAPI runs any number of executions of a
    compilation); cached makes its own two."""
    chosen = [p for p in paths if path_applies(case, variant, p)]
    dynamic = variant == DYNAMIC

    def build() -> tuple[Model, list[str]]:
        model = build_model(case, dynamic)
        return model, _declined(model, device)

    built = _Once(build)
    shared = _Once(lambda: execution_paths.compile_for(built()[0], device))
    operand_type = primary_type(case)
    results = []
    for path in chosen:
        started = time.perf_counter()
        result = CaseResult(case.name, variant, device.name, case.operation, case.spec, case.version, "pass",
                            path=path, operand_type=operand_type, spec_dir=case.spec_dir)

        def attempt(path: str = path, result: CaseResult = result) -> tuple[list[np.ndarray] | None, list[str]]:
            model, declined = built()
            if declined:
                return None, declined
            if path == CACHED:
                compilation = execution_paths.compile_cached(model, device, _token(case, dynamic))
                result.cache = compilation.cache_status
            else:
                compilation = shared()
            return run_compilation(case, model, compilation, path), []

        _judge(result, case, attempt)
        if result.cache and result.status == "pass" and result.cache not in ("prepared-from-cache", "unsupported"):
            result.detail = f"the second compilation did not prepare from the cache ({result.cache})"
        result.seconds = round(time.perf_counter() - started, 6)
        results.append(result)
    return results


def run_case(case: Case, device, variant: str = STATIC, path: str = SYNC) -> CaseResult:
    """One case on one device and path (whether or not CTS runs it there); never raises for the case's own
    failure."""
    started = time.perf_counter()
    result = CaseResult(case.name, variant, device.name, case.operation, case.spec, case.version, "pass",
                        path=path, operand_type=primary_type(case), spec_dir=case.spec_dir)
    _judge(result, case, lambda: execute(case, device, dynamic_outputs=variant == DYNAMIC, path=path))
    result.seconds = round(time.perf_counter() - started, 6)
    return result


def variants_of(case: Case, dynamic: bool = True) -> list[str]:
    """STATIC always; DYNAMIC too for cases CTS's DynamicOutputShapeTest runs (not expected to fail, no
    scalar outputs)."""
    if dynamic and not case.expect_failure and not case.has_scalar_outputs():
        return [STATIC, DYNAMIC]
    return [STATIC]


def count_runs(cases: Iterable[Case], dynamic: bool = True, paths: Sequence[str] = PATHS) -> int:
    """How many results run_suite gives per device."""
    return sum(path_applies(c, v, p) for c in cases for v in variants_of(c, dynamic) for p in paths)


def select_cases(cases: Iterable[Case], ops: Sequence[str] | None = None, names: Sequence[str] | None = None,
                 spec_dirs: Sequence[str] | None = None) -> list[Case]:
    """Cases testing any of `ops` (operation names), named in `names`, from `spec_dirs`."""
    wanted_ops = {o.upper() for o in ops} if ops else None
    wanted_names = set(names) if names else None
    chosen = []
    for c in cases:
        if wanted_ops and not wanted_ops & set(c.tested):
            continue
        if wanted_names and c.name not in wanted_names and f"{c.spec_dir}/{c.name}" not in wanted_names:
            continue
        if spec_dirs and c.spec_dir not in spec_dirs:
            continue
        chosen.append(c)
    return chosen


def record_of(result: CaseResult) -> dict[str, Any]:
    """The results.jsonl record of one result."""
    return {"kind": RECORD_KIND, "suite": "nnapi-cts", **asdict(result)}


def run_suite(cases: Sequence[Case], devices: Sequence[Any], *, dynamic: bool = True,
              paths: Sequence[str] = (SYNC,), results_path: str | None = None,
              on_result: Callable[[CaseResult], None] | None = None) -> list[CaseResult]:
    """Every case (and its variants) on every device and path; each result appended to `results_path`
    (JSON lines) as soon as it is known."""
    results = []
    sink = open(results_path, "a", encoding="utf-8") if results_path else None
    try:
        for device in devices:
            for case in cases:
                for variant in variants_of(case, dynamic):
                    for r in run_case_paths(case, device, variant, paths):
                        results.append(r)
                        if sink:
                            sink.write(json.dumps(record_of(r)) + "\n")
                            sink.flush()
                        if on_result:
                            on_result(r)
    finally:
        if sink:
            sink.close()
    return results


def summarize(results: Iterable[CaseResult]) -> dict[tuple[str, str], dict[str, int]]:
    """{(device, operation): {status: count}}."""
    table: dict[tuple[str, str], dict[str, int]] = {}
    for r in results:
        row = table.setdefault((r.device, r.operation), {"pass": 0, "fail": 0, "n/a": 0, "error": 0})
        row[r.status] += 1
    return table
