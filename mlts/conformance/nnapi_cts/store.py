"""The committed NNAPI CTS data set: one xz file per spec directory (vectors/<dir>.nnvec.xz).

A file holds a JSON document (cases, skipped spec files, provenance) followed by one binary blob of every
operand value, each distinct array stored once. A case mirrors NNAPI's TestModel: subgraph 0 is the main
model, the others are the models IF/WHILE reference (a SUBGRAPH operand's value is the index of its
subgraph); an operand is [type, dims, scale, zeroPoint, lifetime, data, channelQuant, ignored] where data
indexes the array table (-1: none) and channelQuant is [channelDim, scales] or null."""
from __future__ import annotations

import json
import lzma
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

FORMAT = 1
VECTORS_DIR = Path(__file__).with_name("vectors")
SPEC_DIRS = ("V1_0", "V1_1", "V1_2", "V1_3", "V1_3_cts_only")
SUFFIX = ".nnvec.xz"

DTYPES = {"FLOAT32": "float32", "TENSOR_FLOAT32": "float32", "FLOAT16": "float16", "TENSOR_FLOAT16": "float16",
          "INT32": "int32", "TENSOR_INT32": "int32", "UINT32": "uint32", "BOOL": "bool", "TENSOR_BOOL8": "bool",
          "TENSOR_QUANT8_ASYMM": "uint8", "TENSOR_QUANT8_ASYMM_SIGNED": "int8", "TENSOR_QUANT8_SYMM": "int8",
          "TENSOR_QUANT8_SYMM_PER_CHANNEL": "int8", "TENSOR_QUANT16_ASYMM": "uint16", "TENSOR_QUANT16_SYMM": "int16",
          "SUBGRAPH": "int32"}


@dataclass
class Operand:
    type: str
    dims: list[int]
    scale: float
    zero_point: int
    lifetime: str  # SUBGRAPH_INPUT, SUBGRAPH_OUTPUT, TEMPORARY_VARIABLE, CONSTANT, NO_VALUE, SUBGRAPH
    data: np.ndarray | None
    channel_quant: tuple[int, list[float]] | None = None
    ignored: bool = False


@dataclass
class Subgraph:
    operands: list[Operand]
    operations: list[tuple[str, list[int], list[int]]]
    inputs: list[int]
    outputs: list[int]


@dataclass
class Case:
    """One generated test, as NNAPI's TestModel: inputs and expected outputs are the data of the main
    subgraph's input and output operands."""

    name: str
    spec: str
    spec_dir: str
    version: str | None
    relaxed: bool
    expect_failure: bool
    multinomial_tolerance: float
    variations: list[str]
    subgraphs: list[Subgraph]
    tested: list[str] = field(default_factory=list)  # the spec model's operations, before variations

    @property
    def main(self) -> Subgraph:
        return self.subgraphs[0]

    @property
    def operation_names(self) -> list[str]:
        """The operations of the main model in order, then those of referenced models, deduplicated."""
        seen: dict[str, None] = {}
        for sg in self.subgraphs:
            for op, _, _ in sg.operations:
                seen.setdefault(op, None)
        return list(seen)

    @property
    def operation(self) -> str:
        """What the case tests, for summaries: the spec model's operation ("A+B" for several)."""
        return "+".join(self.tested)

    def has_scalar_outputs(self) -> bool:
        return any(op in ("RANK", "IF", "WHILE") for sg in self.subgraphs for op, _, _ in sg.operations)


@dataclass
class DataSet:
    spec_dir: str
    cases: list[Case]
    skipped: list[dict[str, str]] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)


class _ArrayTable:
    """Distinct arrays, stored once, concatenated into one blob."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, bytes], int] = {}
        self.entries: list[list[Any]] = []
        self.blob = bytearray()

    def add(self, array: np.ndarray) -> int:
        raw = np.ascontiguousarray(array).tobytes()
        key = (array.dtype.str, raw)
        if key not in self.index:
            self.index[key] = len(self.entries)
            self.entries.append([array.dtype.name, len(self.blob), len(raw)])
            self.blob += raw
        return self.index[key]


def _encode_case(case: Case, table: _ArrayTable) -> dict[str, Any]:
    subgraphs = []
    for sg in case.subgraphs:
        operands = []
        for o in sg.operands:
            data = -1 if o.data is None else table.add(o.data)
            cq = None if o.channel_quant is None else [o.channel_quant[0], list(o.channel_quant[1])]
            operands.append([o.type, list(o.dims), o.scale, o.zero_point, o.lifetime, data, cq, o.ignored])
        subgraphs.append({"operands": operands, "operations": [list(op) for op in sg.operations],
                          "inputs": sg.inputs, "outputs": sg.outputs})
    return {"name": case.name, "spec": case.spec, "version": case.version, "relaxed": case.relaxed,
            "expect_failure": case.expect_failure, "multinomial_tolerance": case.multinomial_tolerance,
            "variations": case.variations, "tested": case.tested, "subgraphs": subgraphs}


def write_data_set(data: DataSet, path: str | os.PathLike) -> int:
    """Write `data` to `path` (xz); returns the compressed size in bytes."""
    table = _ArrayTable()
    doc = {"format": FORMAT, "spec_dir": data.spec_dir, "provenance": data.provenance, "skipped": data.skipped,
           "cases": [_encode_case(c, table) for c in data.cases], "arrays": table.entries}
    header = json.dumps(doc, separators=(",", ":")).encode()
    payload = struct.pack("<Q", len(header)) + header + bytes(table.blob)
    compressed = lzma.compress(payload, preset=9 | lzma.PRESET_EXTREME)
    Path(path).write_bytes(compressed)
    return len(compressed)


def _decode_case(doc: dict[str, Any], arrays: list[np.ndarray], spec_dir: str) -> Case:
    subgraphs = []
    for sg in doc["subgraphs"]:
        operands = [Operand(t, dims, scale, zp, lifetime, None if data < 0 else arrays[data],
                            None if cq is None else (cq[0], cq[1]), ignored)
                    for t, dims, scale, zp, lifetime, data, cq, ignored in sg["operands"]]
        subgraphs.append(Subgraph(operands, [(op, ins, outs) for op, ins, outs in sg["operations"]],
                                  sg["inputs"], sg["outputs"]))
    return Case(doc["name"], doc["spec"], spec_dir, doc["version"], doc["relaxed"], doc["expect_failure"],
                doc["multinomial_tolerance"], doc["variations"], subgraphs, doc["tested"])


def read_data_set(path: str | os.PathLike) -> DataSet:
    payload = lzma.decompress(Path(path).read_bytes())
    (length,) = struct.unpack_from("<Q", payload)
    doc = json.loads(payload[8:8 + length])
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: data set format {doc.get('format')}, expected {FORMAT}")
    blob = memoryview(payload)[8 + length:]
    arrays = [np.frombuffer(blob[offset:offset + size], dtype=dtype) for dtype, offset, size in doc["arrays"]]
    cases = [_decode_case(c, arrays, doc["spec_dir"]) for c in doc["cases"]]
    return DataSet(doc["spec_dir"], cases, doc.get("skipped", []), doc.get("provenance", {}))


def load_cases(spec_dirs: Iterable[str] = SPEC_DIRS, directory: str | os.PathLike = VECTORS_DIR) -> list[Case]:
    """Every case of the committed data set (the given spec directories), in file order."""
    cases: list[Case] = []
    for d in spec_dirs:
        path = Path(directory) / f"{d}{SUFFIX}"
        if path.exists():
            cases.extend(read_data_set(path).cases)
    return cases


def values_of(type_name: str, values: Any) -> np.ndarray:
    """A spec value list as the array a test stores: floats through float32 (C float literals),
    integers truncated as C's int(), booleans by truth."""
    dtype = DTYPES[type_name]
    if dtype in ("float32", "float16"):
        return np.asarray(values, dtype=np.float64).astype(np.float32).astype(dtype)
    if dtype == "bool":
        return np.asarray([bool(v) for v in values], dtype=np.bool_)
    return np.asarray([int(v) for v in values], dtype=np.int64).astype(dtype)
