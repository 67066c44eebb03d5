"""A HAL model as the two payloads of a compilation cache: its structure (JSON) and its constant data.

The structure is plain JSON (never pickle: a cache file is data, and reading it must not run code).
The data payload holds the model's CONSTANT_COPY values (`operand_values`) first, then every
CONSTANT_REFERENCE region, 64-byte aligned; a decoded model has one pool, the data payload itself,
and its referenced operands point into it. So a prepared-from-cache model owns its constants and
depends on no memory of the client that first compiled it.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from ..enums import OperandLifetime, OperationCode, ResultCode
from ..errors import MltsError
from ..hal import DataLocation, HalModel, HalOperand, HalOperation, Subgraph
from ..hal.memory import Memory
from ..operand_type import OperandType, SymmPerChannelQuantParams

ALIGNMENT = 64
#: the HAL fields this codec knows; a model type grown since is not cached rather than cached partly
_KNOWN_FIELDS = {
    HalModel: {"main", "referenced", "operand_values", "pools", "relax_computation_float32_to_float16"},
    Subgraph: {"operands", "operations", "input_indexes", "output_indexes"},
    HalOperand: {"type", "lifetime", "location", "number_of_consumers"},
    HalOperation: {"type", "inputs", "outputs"},
    OperandType: {"code", "dimensions", "scale", "zero_point", "channel_quant"},
}


def _check_known_fields() -> None:
    for cls, known in _KNOWN_FIELDS.items():
        unknown = {f.name for f in dataclasses.fields(cls)} - known
        if unknown:
            raise MltsError(ResultCode.OP_FAILED, f"model cache: {cls.__name__} has fields this cache format "
                                                  f"does not store ({', '.join(sorted(unknown))})")


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def encode_model(model: HalModel) -> tuple[bytes, bytes]:
    """(structure, data) of a validated model."""
    _check_known_fields()
    values = bytes(model.operand_values)
    chunks: list[bytes | memoryview] = [values]
    size = len(values)
    placed: dict[tuple[int, int, int], int] = {}  # (pool, offset, length) -> offset in the data payload

    def place(loc: DataLocation) -> int:
        nonlocal size
        key = (loc.pool_index, loc.offset, loc.length)
        if key not in placed:
            start = _align(size)
            chunks.append(bytes(start - size))
            chunks.append(model.pools[loc.pool_index].view(loc.offset, loc.length))
            placed[key] = start
            size = start + loc.length
        return placed[key]

    subgraphs = []
    for sg in (model.main, *model.referenced):
        operands = []
        for op in sg.operands:
            loc = op.location
            if loc is not None and op.lifetime == OperandLifetime.CONSTANT_REFERENCE:
                loc = DataLocation(0, place(loc), loc.length)
            operands.append([_encode_type(op.type), int(op.lifetime),
                             None if loc is None else [loc.pool_index, loc.offset, loc.length],
                             op.number_of_consumers])
        subgraphs.append({"operands": operands,
                          "operations": [[int(o.type), list(o.inputs), list(o.outputs)] for o in sg.operations],
                          "inputs": list(sg.input_indexes), "outputs": list(sg.output_indexes)})
    structure = {"subgraphs": subgraphs, "operand_values_length": len(values), "has_pool": bool(placed),
                 "relax": bool(model.relax_computation_float32_to_float16)}
    data = b"".join(chunks)
    return json.dumps(structure, separators=(",", ":")).encode(), data


def decode_model(structure: bytes | memoryview, data: np.ndarray) -> HalModel:
    """The model `encode_model` wrote; `data` is the data payload (uint8). Anything malformed is OP_FAILED."""
    try:
        d = json.loads(bytes(structure))
        n_values = int(d["operand_values_length"])
        if not 0 <= n_values <= data.size:
            raise ValueError(f"operand values length {n_values} exceeds the data payload ({data.size} bytes)")
        subgraphs = [_decode_subgraph(s) for s in d["subgraphs"]]
        pools = (Memory.wrap_array(data, writable=False),) if d["has_pool"] else ()
        return HalModel(subgraphs[0], tuple(subgraphs[1:]), data[:n_values].tobytes(), pools, bool(d["relax"]))
    except MltsError as e:
        raise MltsError(ResultCode.OP_FAILED, f"model cache: malformed structure: {e.message}") from None
    except Exception as e:
        raise MltsError(ResultCode.OP_FAILED, f"model cache: malformed structure: {type(e).__name__}: {e}") from None


def _encode_type(t: OperandType) -> list[Any]:
    cq = t.channel_quant
    return [int(t.code), None if t.dimensions is None else list(t.dimensions), t.scale, t.zero_point,
            None if cq is None else [list(cq.scales), cq.channel_dim]]


def _decode_type(v: list[Any]) -> OperandType:
    code, dims, scale, zero_point, cq = v
    return OperandType(code, None if dims is None else tuple(dims), scale, zero_point,
                       None if cq is None else SymmPerChannelQuantParams(tuple(cq[0]), cq[1]))


def _decode_subgraph(s: dict) -> Subgraph:
    operands = tuple(HalOperand(_decode_type(t), OperandLifetime(lt), None if loc is None else DataLocation(*loc),
                                int(consumers))
                     for t, lt, loc, consumers in s["operands"])
    operations = tuple(HalOperation(OperationCode(code), tuple(map(int, ins)), tuple(map(int, outs)))
                       for code, ins, outs in s["operations"])
    return Subgraph(operands, operations, tuple(map(int, s["inputs"])), tuple(map(int, s["outputs"])))
