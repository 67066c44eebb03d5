"""`mlts fuzz`: property-based fuzzing (hypothesis) of model building, validation and ONNX import.

Targets:
- "model": a valid random graph (mlts.stress.random_graphs) with random mutations (operand codes,
  dimensions, scales and zero points, constant values of the wrong size or type, operation codes,
  operand index lists, model inputs and outputs), built through the public Model API, then compiled
  on nnapi-reference and executed when it got that far;
- "onnx": small valid ONNX models with structural mutations (operator types, attributes, inputs,
  initializers, shapes, element types, opsets) or byte-level ones (flips, truncation, insertion,
  splicing), imported with `import_onnx` and run when they import.

The property: nothing but MltsError ever comes out. A violation is shrunk by hypothesis and saved as
a reproducer (`<out>/<target>-<n>.json` or `.onnx`, with a `.txt` traceback); `python -m
mlts.stress.fuzz FILE` runs a reproducer again.
"""
from __future__ import annotations

import json
import math
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..runtime import (Compilation, Execution, MltsError, Model, OperandCode, OperandType, OperationCode, ResultCode,
                       SymmPerChannelQuantParams, get_device)
from .graph_spec import decode_array

TARGETS = ("model", "onnx")
BATCH_EXAMPLES = 25


@dataclass
class FuzzReport:
    """What a fuzz run did: examples per target and the reproducers it saved."""

    seconds: float
    examples: dict[str, int] = field(default_factory=dict)
    crashes: list[Path] = field(default_factory=list)

    def summary(self) -> str:
        parts = ", ".join(f"{n} {t} examples" for t, n in self.examples.items())
        found = f"{len(self.crashes)} reproducer(s): " + ", ".join(map(str, self.crashes)) if self.crashes \
            else "no failures"
        return f"fuzzed {self.seconds:.1f} s ({parts}); {found}"


class Violation(Exception):
    """Something other than MltsError came out of the API (the property is violated)."""


def _guard(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except MltsError as e:
        if not isinstance(e.code, ResultCode) or e.code == ResultCode.NO_ERROR or not e.message:
            raise Violation(f"MltsError with code {e.code!r} and message {e.message!r}") from e
        return False, e


# -- the "model" target -------------------------------------------------------------------------
def build_raw(spec: dict[str, Any]) -> tuple[bool, Any]:
    """Build a (possibly mutated) graph spec straight through the Model API, every call guarded:
    unlike graph_spec.build_model, nothing is checked or reshaped on the way."""
    model = Model()
    for d in spec["operands"]:
        def make(d=d) -> OperandType:
            cq = d.get("channel_quant")
            params = None if cq is None else SymmPerChannelQuantParams(tuple(cq["scales"]), cq["channel_dim"])
            code = OperandCode[d["type"]] if d["type"] in OperandCode.__members__ else d["type"]
            return OperandType(code, d["dims"], d["scale"], d["zero_point"], params)
        ok, t = _guard(make)
        _guard(lambda t=t: model.add_operand(t if ok else OperandType(OperandCode.INT32)))
    for k, d in enumerate(spec["operands"]):
        value = d.get("value")
        if value is None:
            continue
        v = None if value == "omitted" else decode_array(value)
        _guard(lambda k=k, v=v: model.set_operand_value(k, v))
    for op in spec["operations"]:
        code = OperationCode[op["op"]] if op["op"] in OperationCode.__members__ else op["op"]
        _guard(lambda op=op, code=code: model.add_operation(code, op["inputs"], op["outputs"]))
    _guard(lambda: model.identify_inputs_and_outputs(spec["inputs"], spec["outputs"]))
    ok, _ = _guard(model.finish)
    return ok, model


def exercise_model(spec: dict[str, Any]) -> str:
    """Build, compile and run a spec; returns how far it got. Raises Violation for non-MltsErrors."""
    try:
        ok, model = build_raw(spec)
        if not ok:
            return "rejected at build"
        ok, c = _guard(lambda: Compilation.for_devices(model, [get_device("nnapi-reference")]))
        if not ok:
            return "rejected at compilation"
        ok, _ = _guard(c.finish)
        if not ok:
            return "rejected at compilation"
        e = Execution(c)
        for i, v in enumerate(spec.get("input_values", [])):
            _guard(lambda i=i, v=v: e.set_input(i, decode_array(v)))
        ok, _ = _guard(e.compute)
        if not ok:
            return "rejected at execution"
        for i in range(len(spec["outputs"])):
            out = e.get_output(i)
            if not isinstance(out, np.ndarray):
                raise Violation(f"get_output({i}) returned {type(out).__name__}, not an array")
        return "ran"
    except Violation:
        raise
    except Exception as exc:
        raise Violation(f"{type(exc).__name__}: {exc}") from exc


def _mutate_model(data, spec: dict[str, Any]) -> dict[str, Any]:
    from hypothesis import strategies as st

    from .graph_spec import encode_array

    spec = json.loads(json.dumps(spec))
    n_operands = len(spec["operands"])
    codes = [c.name for c in OperandCode] + ["NOT_A_TYPE"]
    ops = [c.name for c in OperationCode] + ["NOT_AN_OP"]
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        kind = data.draw(st.sampled_from(["type", "dims", "quant", "value", "op", "indices", "io", "drop"]),
                         label="kind")
        k = data.draw(st.integers(0, max(n_operands - 1, 0)), label="operand")
        d = spec["operands"][k] if spec["operands"] else None
        if kind == "type" and d:
            d["type"] = data.draw(st.sampled_from(codes), label="code")
        elif kind == "dims" and d:
            d["dims"] = data.draw(st.one_of(st.none(), st.lists(st.sampled_from([0, 1, 2, 3, 7, -1, 65535, 1 << 31]),
                                                                   max_size=6)), label="dims")
        elif kind == "quant" and d:
            d["scale"] = data.draw(st.sampled_from([0.0, -1.0, 1e-30, 1e30, math.inf, math.nan, 0.5]), label="scale")
            d["zero_point"] = data.draw(st.sampled_from([0, -129, 255, 256, 1 << 31, -1]), label="zp")
            if data.draw(st.booleans(), label="per-channel"):
                d["channel_quant"] = {"scales": data.draw(st.lists(st.sampled_from([0.5, 0.0, -1.0, math.nan]),
                                                                   max_size=4), label="scales"),
                                      "channel_dim": data.draw(st.integers(-1, 4), label="channel dim")}
        elif kind == "value" and d:
            dtype = data.draw(st.sampled_from(["float32", "int32", "uint8", "int8", "float16", "bool", "int64"]),
                              label="dtype")
            size = data.draw(st.integers(0, 40), label="size")
            d["value"] = data.draw(st.sampled_from([None, "omitted"]), label="none") if size == 40 else \
                encode_array(np.zeros(size, dtype=dtype) + (1 if dtype != "bool" else True))
        elif kind == "op" and spec["operations"]:
            j = data.draw(st.integers(0, len(spec["operations"]) - 1), label="operation")
            spec["operations"][j]["op"] = data.draw(st.sampled_from(ops), label="op code")
        elif kind == "indices" and spec["operations"]:
            j = data.draw(st.integers(0, len(spec["operations"]) - 1), label="operation")
            which = data.draw(st.sampled_from(["inputs", "outputs"]), label="which")
            spec["operations"][j][which] = data.draw(
                st.lists(st.integers(-2, n_operands + 2), max_size=14), label="index list")
        elif kind == "io":
            which = data.draw(st.sampled_from(["inputs", "outputs"]), label="io")
            spec[which] = data.draw(st.lists(st.integers(-1, n_operands + 1), max_size=4), label="io list")
        elif kind == "drop" and spec["operations"]:
            spec["operations"].pop(data.draw(st.integers(0, len(spec["operations"]) - 1), label="drop"))
    return spec


def model_example(data) -> tuple[str, Any]:
    """One example of the "model" target: (outcome, reproducer payload)."""
    from hypothesis import strategies as st

    from .graphgen.generator import GraphGenerator

    seed = data.draw(st.integers(0, 1 << 30), label="graph seed")
    spec = GraphGenerator().generate(seed, data.draw(st.sampled_from(["single", "small"]), label="size"))
    if data.draw(st.integers(0, 4), label="mutate?") != 0:
        spec = _mutate_model(data, spec)
    return "model", spec


# -- the "onnx" target --------------------------------------------------------------------------
def _onnx_bases() -> list[Callable[[np.random.Generator], Any]]:
    from onnx import TensorProto, helper, numpy_helper

    F = TensorProto.FLOAT

    def model(nodes, inputs, outputs, inits, opset=13):
        g = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="mlts-fuzz")
        m.ir_version = 8
        return m

    def convnet(rng):
        w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
        b = numpy_helper.from_array(np.zeros(4, np.float32), "b")
        fw = numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "fw")
        fb = numpy_helper.from_array(np.zeros(5, np.float32), "fb")
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
                 helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
                 helper.make_node("Flatten", ["p"], ["f"]),
                 helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], transB=1),
                 helper.make_node("Softmax", ["g"], ["y"], axis=1)]
        return model(nodes, [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                     [helper.make_tensor_value_info("y", F, [1, 5])], [w, b, fw, fb])

    def elementwise(rng):
        k = numpy_helper.from_array(rng.uniform(0.5, 2, (1, 4)).astype(np.float32), "k")
        lo = numpy_helper.from_array(np.asarray(-1, np.float32), "lo")
        hi = numpy_helper.from_array(np.asarray(1, np.float32), "hi")
        nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Add", ["a", "x"], ["b"]),
                 helper.make_node("Div", ["b", "k"], ["c"]), helper.make_node("Clip", ["c", "lo", "hi"], ["d"]),
                 helper.make_node("Sigmoid", ["d"], ["e"]), helper.make_node("Sub", ["e", "d"], ["y"])]
        return model(nodes, [helper.make_tensor_value_info("x", F, [3, 4])],
                     [helper.make_tensor_value_info("y", F, [3, 4])], [k, lo, hi])

    def shapes(rng):
        shape = numpy_helper.from_array(np.asarray([2, 6], np.int64), "shape")
        pads = numpy_helper.from_array(np.asarray([0, 1, 0, 1], np.int64), "pads")
        axes = numpy_helper.from_array(np.asarray([0], np.int64), "axes")
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
                 helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
                 helper.make_node("Concat", ["t", "t"], ["c"], axis=1), helper.make_node("Pad", ["c", "pads"], ["p"]),
                 helper.make_node("Unsqueeze", ["p", "axes"], ["u"]),
                 helper.make_node("ReduceMean", ["u"], ["y"], axes=[2], keepdims=0)]
        return model(nodes, [helper.make_tensor_value_info("x", F, [3, 4])],
                     [helper.make_tensor_value_info("y", F, [1, 6])], [shape, pads, axes])

    def logic(rng):
        k = numpy_helper.from_array(rng.uniform(-1, 1, (4,)).astype(np.float32), "k")
        nodes = [helper.make_node("Greater", ["x", "k"], ["g"]), helper.make_node("Less", ["x", "k"], ["l"]),
                 helper.make_node("Not", ["g"], ["n"]), helper.make_node("Or", ["n", "l"], ["o"]),
                 helper.make_node("Cast", ["o"], ["y"], to=TensorProto.FLOAT)]
        return model(nodes, [helper.make_tensor_value_info("x", F, [2, 4])],
                     [helper.make_tensor_value_info("y", F, [2, 4])], [k])

    def qdq(rng):
        s = numpy_helper.from_array(np.asarray(0.02, np.float32), "s")
        z = numpy_helper.from_array(np.asarray(128, np.uint8), "z")
        w = numpy_helper.from_array(rng.standard_normal((2, 2, 1, 1)).astype(np.float32), "w")
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                 helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
                 helper.make_node("Conv", ["d", "w"], ["c"]),
                 helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2])]
        return model(nodes, [helper.make_tensor_value_info("x", F, [1, 2, 4, 4])],
                     [helper.make_tensor_value_info("y", F, [1, 2, 3, 3])], [s, z, w])

    return [convnet, elementwise, shapes, logic, qdq]


def _mutate_onnx(data, proto) -> Any:
    from hypothesis import strategies as st
    from onnx import helper

    from ..models.onnx_import.converters import base as converters

    op_types = sorted(converters.registered_op_types()) + ["NotAnOp", "LSTM", "If"]
    graph = proto.graph
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        kind = data.draw(st.sampled_from(["op_type", "attr", "drop_attr", "input", "init", "shape", "elem", "opset",
                                          "output", "order", "duplicate"]), label="onnx kind")
        nodes = graph.node
        j = data.draw(st.integers(0, max(len(nodes) - 1, 0)), label="node")
        if kind == "op_type" and nodes:
            nodes[j].op_type = data.draw(st.sampled_from(op_types), label="op type")
        elif kind == "attr" and nodes:
            name = data.draw(st.sampled_from(["axis", "perm", "pads", "strides", "kernel_shape", "to", "transB",
                                              "keepdims", "axes", "group", "dilations", "alpha"]), label="attr")
            value = data.draw(st.one_of(st.integers(-3, 8), st.lists(st.integers(-2, 5), min_size=1, max_size=5),
                                        st.sampled_from([1 << 40, math.nan, 0.5, "text"])), label="value")
            del_attrs = [a for a in nodes[j].attribute if a.name == name]
            for a in del_attrs:
                nodes[j].attribute.remove(a)
            nodes[j].attribute.append(helper.make_attribute(name, value))
        elif kind == "drop_attr" and nodes and nodes[j].attribute:
            nodes[j].attribute.pop()
        elif kind == "input" and nodes:
            names = [i.name for i in graph.input] + [o for n in nodes for o in n.output] + ["", "nowhere"]
            if data.draw(st.booleans(), label="add?") or not nodes[j].input:
                nodes[j].input.append(data.draw(st.sampled_from(names), label="name"))
            else:
                nodes[j].input.pop()
        elif kind == "init" and graph.initializer:
            init = graph.initializer[data.draw(st.integers(0, len(graph.initializer) - 1), label="init")]
            what = data.draw(st.sampled_from(["dims", "type", "truncate"]), label="init what")
            if what == "dims":
                init.dims[:] = data.draw(st.lists(st.integers(0, 9), max_size=4), label="init dims")
            elif what == "type":
                init.data_type = data.draw(st.integers(0, 22), label="data type")
            else:
                raw = init.raw_data or b""
                init.raw_data = raw[:data.draw(st.integers(0, max(len(raw), 1)), label="keep")]
        elif kind == "shape" and graph.input:
            dims = graph.input[0].type.tensor_type.shape.dim
            if dims:
                d = dims[data.draw(st.integers(0, len(dims) - 1), label="dim")]
                v = data.draw(st.sampled_from([0, -1, 1, 2, 1 << 40, "batch"]), label="dim value")
                if isinstance(v, str):
                    d.dim_param = v
                else:
                    d.dim_value = v
        elif kind == "elem" and graph.input:
            graph.input[0].type.tensor_type.elem_type = data.draw(st.integers(0, 22), label="elem type")
        elif kind == "opset":
            proto.opset_import[0].version = data.draw(st.integers(1, 25), label="opset")
        elif kind == "output" and graph.output:
            graph.output[0].name = data.draw(st.sampled_from(["nowhere", "x", graph.output[0].name]), label="out name")
        elif kind == "order" and len(nodes) > 1:
            first = nodes[0]
            copy = type(first)()
            copy.CopyFrom(first)
            del nodes[0]
            nodes.append(copy)
        elif kind == "duplicate" and nodes:
            nodes.append(nodes[j])
    return proto


def _byte_mutations(data, raw: bytes) -> bytes:
    from hypothesis import strategies as st

    buf = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 6), label="byte mutations")):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "splice"]), label="byte kind")
        if not buf:
            break
        at = data.draw(st.integers(0, len(buf) - 1), label="at")
        if kind == "flip":
            buf[at] ^= data.draw(st.integers(1, 255), label="xor")
        elif kind == "truncate":
            del buf[at:]
        elif kind == "insert":
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=16), label="bytes")
        else:
            end = data.draw(st.integers(at, len(buf)), label="end")
            buf[at:at] = buf[at:end]
    return bytes(buf)


def onnx_example(data) -> tuple[str, bytes]:
    """One example of the "onnx" target: (target, serialized model bytes)."""
    from hypothesis import strategies as st

    bases = _onnx_bases()
    which = data.draw(st.integers(0, len(bases) - 1), label="base model")
    proto = bases[which](np.random.default_rng(data.draw(st.integers(0, 1000), label="weights seed")))
    mode = data.draw(st.sampled_from(["none", "structure", "structure", "bytes"]), label="mode")
    if mode == "structure":
        proto = _mutate_onnx(data, proto)
    raw = proto.SerializeToString()
    if mode == "bytes":
        raw = _byte_mutations(data, raw)
    return "onnx", raw


def exercise_onnx(raw: bytes) -> str:
    """Import and run ONNX bytes; returns how far they got. Raises Violation for non-MltsErrors."""
    from ..models import import_onnx

    try:
        ok, imported = _guard(lambda: import_onnx(raw))
        if not ok:
            return "rejected at import"
        rng = np.random.default_rng(0)
        feeds = {}
        for name in imported.input_names:
            dtype, shape = imported.input_type(name)
            dims = [d if isinstance(d, int) and 0 < d < 64 else 2 for d in (shape or ())]
            dtype = np.dtype(dtype or np.float32)
            feeds[name] = (rng.uniform(-1, 1, dims).astype(dtype) if dtype.kind == "f"
                           else rng.integers(0, 3, dims).astype(dtype))
        ok, _ = _guard(lambda: imported.run(feeds))
        return "ran" if ok else "rejected at run"
    except Violation:
        raise
    except Exception as exc:
        raise Violation(f"{type(exc).__name__}: {exc}") from exc


# -- the driver loop ------------------------------------------------------------------------------
EXAMPLES = {"model": model_example, "onnx": onnx_example}
EXERCISE = {"model": exercise_model, "onnx": exercise_onnx}


def _save(out_dir: Path, target: str, payload: Any, error: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    n = len(list(out_dir.glob(f"{target}-*.txt"))) + 1
    if target == "onnx":
        path = out_dir / f"onnx-{n}.onnx"
        path.write_bytes(payload)
    else:
        path = out_dir / f"model-{n}.json"
        path.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    path.with_suffix(".txt").write_text(error, encoding="utf-8")
    return path


def fuzz(seconds: float, *, out_dir: str | Path = "reports/fuzz", targets: list[str] | None = None,
         seed: int | None = None, log: Callable[[str], None] = lambda line: None) -> FuzzReport:
    """Fuzz for `seconds`; returns the examples run and the reproducers saved."""
    try:
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import seed as hseed
        from hypothesis import strategies as st
    except ImportError:
        raise MltsError(ResultCode.BAD_STATE, "mlts fuzz needs hypothesis: pip install hypothesis "
                                              "(it comes with mlts[test])") from None
    targets = list(targets or TARGETS)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise MltsError(ResultCode.BAD_DATA, f"unknown fuzz target(s) {', '.join(unknown)} "
                                             f"(known: {', '.join(TARGETS)})")
    out_dir = Path(out_dir)
    started = time.monotonic()
    end = started + seconds
    report = FuzzReport(seconds)
    rng = np.random.default_rng(seed)
    batch = 0
    while time.monotonic() < end:
        target = targets[batch % len(targets)]
        batch += 1
        last_failure: list[Any] = []

        @settings(max_examples=BATCH_EXAMPLES, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink], print_blob=False)
        @hseed(int(rng.integers(1 << 31)))
        @given(st.data())
        def prop(data) -> None:
            if last_failure and time.monotonic() >= end + 5.0:
                return  # shrinking took too long: hypothesis reports a flaky failure, the last one is saved
            _, payload = EXAMPLES[target](data)
            report.examples[target] = report.examples.get(target, 0) + 1
            try:
                EXERCISE[target](payload)
            except Violation as v:
                last_failure[:] = [payload, "".join(traceback.format_exception(v.__cause__ or v))]
                raise

        try:
            prop()
        except Exception as e:  # the shrunk Violation, or hypothesis's report of a flaky one
            if not last_failure:
                raise MltsError(ResultCode.OP_FAILED, f"the fuzzer itself failed: {type(e).__name__}: {e}") from e
            path = _save(out_dir, target, last_failure[0], last_failure[1])
            report.crashes.append(path)
            log(f"{target}: a non-MltsError escaped; reproducer {path}: {last_failure[1].strip().splitlines()[-1]}")
    report.seconds = time.monotonic() - started
    return report


def reproduce(path: str | Path) -> str:
    """Run a saved reproducer again: returns how far it got, or raises what it raised."""
    path = Path(path)
    if path.suffix == ".onnx":
        return exercise_onnx(path.read_bytes())
    return exercise_model(json.loads(path.read_text(encoding="utf-8")))


if __name__ == "__main__":
    import sys

    for arg in sys.argv[1:]:
        print(f"{arg}: {reproduce(arg)}")

__all__ = ["FuzzReport", "Violation", "build_raw", "exercise_model", "exercise_onnx", "fuzz", "reproduce"]
