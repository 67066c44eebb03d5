"""Graph specs: NNAPI graphs (operands, operations, constants, example inputs) as plain JSON.

The random-graph test writes a failing graph as a spec file so that `mlts stress --replay FILE`
rebuilds exactly that graph with exactly those inputs; the stress suite's own small models are
specs too. Arrays are stored bit-exactly (dtype, shape, base64 of the bytes: NaNs survive).

    {"format": "mlts-graph", "version": 1,
     "operands": [{"type": "TENSOR_FLOAT32", "dims": [1, 4], "scale": 0.0, "zero_point": 0,
                   "channel_quant": null | {"scales": [...], "channel_dim": 0},
                   "value": null | {"dtype", "shape", "b64"} | "omitted"}],
     "operations": [{"op": "ADD", "inputs": [0, 1, 2], "outputs": [3]}],
     "inputs": [0], "outputs": [3], "input_values": [{"dtype", "shape", "b64"}],
     "relaxed": false, ...anything else (seed, driver, reason) is kept for the reader}
"""
from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..runtime import (Memory, MltsError, Model, OperandCode, OperandType, OperationCode, PROT_READ, ResultCode,
                       SymmPerChannelQuantParams)

FORMAT = "mlts-graph"
VERSION = 1
#: constants at least this large go through a memory pool when building with `memory_dir`
MEMORY_MIN_BYTES = 128


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def encode_array(a: np.ndarray) -> dict[str, Any]:
    """Bit-exact and JSON-safe (NaN payloads and all)."""
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_array(d: Any) -> np.ndarray:
    """The array `encode_array` stored; BAD_DATA for anything else."""
    try:
        dtype = np.dtype(d["dtype"])
        shape = tuple(int(s) for s in d["shape"])
        raw = base64.b64decode(d["b64"].encode("ascii"), validate=True)
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _bad(f"graph spec: bad array {str(d)[:80]!r}: {e}") from None


class GraphBuilder:
    """Builds a graph spec one operand and operation at a time (the random generator and the
    suite's own models use it); `spec()` returns the JSON-ready dict."""

    def __init__(self) -> None:
        self.operands: list[dict[str, Any]] = []
        self.operations: list[dict[str, Any]] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.input_values: list[np.ndarray] = []
        self.types: list[OperandType] = []

    def _add(self, t: OperandType, value: Any = None) -> int:
        entry: dict[str, Any] = {"type": t.code.name, "dims": None if t.dimensions is None else list(t.dimensions),
                                 "scale": float(t.scale), "zero_point": int(t.zero_point), "channel_quant": None,
                                 "value": value}
        if t.channel_quant is not None:
            entry["channel_quant"] = {"scales": [float(s) for s in t.channel_quant.scales],
                                      "channel_dim": int(t.channel_quant.channel_dim)}
        self.operands.append(entry)
        self.types.append(t)
        return len(self.operands) - 1

    def input(self, t: OperandType, value: np.ndarray) -> int:
        i = self._add(t)
        self.inputs.append(i)
        self.input_values.append(np.ascontiguousarray(np.asarray(value, dtype=t.dtype)))
        return i

    def const(self, t: OperandType, value: Any) -> int:
        return self._add(t, encode_array(np.asarray(value, dtype=t.dtype).reshape(t.dimensions or ())))

    def scalar(self, code: OperandCode, value: Any) -> int:
        return self.const(OperandType.scalar(code), value)

    def i32(self, value: int) -> int:
        return self.scalar(OperandCode.INT32, value)

    def f32(self, value: float) -> int:
        return self.scalar(OperandCode.FLOAT32, value)

    def boolean(self, value: bool) -> int:
        return self.scalar(OperandCode.BOOL, value)

    def i32_tensor(self, values: Sequence[int]) -> int:
        return self.const(OperandType.tensor(OperandCode.TENSOR_INT32, (len(values),)), np.asarray(values, np.int32))

    def omitted(self, t: OperandType) -> int:
        return self._add(t, "omitted")

    def temp(self, t: OperandType) -> int:
        return self._add(t)

    def op(self, code: OperationCode | str, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        name = code.name if isinstance(code, OperationCode) else str(code)
        self.operations.append({"op": name, "inputs": list(inputs), "outputs": list(outputs)})

    def output(self, i: int) -> None:
        self.outputs.append(i)

    def spec(self, **extra: Any) -> dict[str, Any]:
        out = {"format": FORMAT, "version": VERSION, "operands": self.operands, "operations": self.operations,
               "inputs": list(self.inputs), "outputs": list(self.outputs),
               "input_values": [encode_array(v) for v in self.input_values], "relaxed": False}
        out.update(extra)
        return out


def _operand_type(d: dict[str, Any], k: int) -> OperandType:
    try:
        code = OperandCode[d["type"]]
        cq = d.get("channel_quant")
        channel_quant = None if cq is None else SymmPerChannelQuantParams(tuple(cq["scales"]), int(cq["channel_dim"]))
        dims = None if d.get("dims") is None else tuple(int(x) for x in d["dims"])
        return OperandType(code, dims, float(d.get("scale", 0.0)), int(d.get("zero_point", 0)), channel_quant)
    except (KeyError, TypeError, ValueError) as e:
        raise _bad(f"graph spec: operand {k}: {type(e).__name__}: {e}") from None


def check_spec(spec: Any) -> dict[str, Any]:
    """The spec itself, once it looks like one this version can read."""
    if not isinstance(spec, dict) or spec.get("format") != FORMAT:
        raise _bad(f"not an mlts graph spec (expected \"format\": \"{FORMAT}\")")
    if int(spec.get("version", 0)) > VERSION:
        raise _bad(f"graph spec version {spec.get('version')} is newer than this mlts understands ({VERSION})")
    for key in ("operands", "operations", "inputs", "outputs"):
        if not isinstance(spec.get(key), list):
            raise _bad(f"graph spec: {key!r} must be a list")
    return spec


def build_model(spec: dict[str, Any], *, memory_dir: str | os.PathLike | None = None) -> tuple[Model, list[np.ndarray]]:
    """The finished Model and its example inputs. With `memory_dir`, constants of MEMORY_MIN_BYTES or
    more are written to one file there and referenced through a memory-mapped Memory
    (CONSTANT_REFERENCE), as applications ship trained weights."""
    check_spec(spec)
    model = Model()
    types = [_operand_type(d, k) for k, d in enumerate(spec["operands"])]
    for t in types:
        model.add_operand(t)
    big: list[tuple[int, np.ndarray]] = []
    for k, d in enumerate(spec["operands"]):
        value = d.get("value")
        if value is None:
            continue
        if value == "omitted":
            model.set_operand_value(k, None)
            continue
        array = decode_array(value)
        if memory_dir is not None and array.nbytes >= MEMORY_MIN_BYTES:
            big.append((k, array))
        else:
            shape = (types[k].dimensions or ()) if types[k].is_tensor else ()
            model.set_operand_value(k, array.reshape(shape))
    if big:
        _constants_from_file(model, big, Path(memory_dir))
    for j, op in enumerate(spec["operations"]):
        try:
            code = OperationCode[op["op"]]
        except KeyError:
            raise _bad(f"graph spec: operation {j}: unknown operation {op.get('op')!r}") from None
        model.add_operation(code, list(op["inputs"]), list(op["outputs"]))
    model.identify_inputs_and_outputs(list(spec["inputs"]), list(spec["outputs"]))
    model.relax_computation_float32_to_float16(bool(spec.get("relaxed", False)))
    model.finish()
    inputs = [decode_array(v) for v in spec.get("input_values", [])]
    return model, inputs


def _constants_from_file(model: Model, arrays: list[tuple[int, np.ndarray]], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    blob = bytearray()
    places = []
    for k, a in arrays:
        offset = (len(blob) + 63) // 64 * 64  # aligned, as a weights file would be
        blob.extend(b"\0" * (offset - len(blob)))
        blob.extend(a.tobytes())
        places.append((k, offset, a.nbytes))
    fd, name = _unique_file(directory)
    with os.fdopen(fd, "wb") as f:
        f.write(bytes(blob))
    memory = Memory.from_file(name, protect=PROT_READ)
    for k, offset, length in places:
        model.set_operand_value_from_memory(k, memory, offset, length)
    model._stress_memory = memory  # keep the mapping alive as long as the model (the model refers to it too)


def _unique_file(directory: Path) -> tuple[int, str]:
    import tempfile

    return tempfile.mkstemp(prefix="weights-", suffix=".bin", dir=directory)


def save_spec(spec: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write atomically: a replay never reads half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(spec, indent=1, allow_nan=False), encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_spec(path: str | os.PathLike) -> dict[str, Any]:
    """Read a spec file with errors that name the file."""
    try:
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise _bad(f"{path}: cannot read ({e.strerror or e})") from None
    except ValueError as e:
        raise _bad(f"{path}: not JSON ({e})") from None
    return check_spec(spec)


def describe(spec: dict[str, Any]) -> str:
    """A short summary for a failure reason."""
    ops = [op["op"] for op in spec.get("operations", [])]
    return f"{len(ops)} operation(s): {', '.join(ops[:8])}{' ...' if len(ops) > 8 else ''}"


__all__ = ["FORMAT", "GraphBuilder", "build_model", "check_spec", "decode_array", "describe", "encode_array",
           "load_spec", "save_spec"]
