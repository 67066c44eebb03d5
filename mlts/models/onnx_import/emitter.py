"""Building the NNAPI model: operand types, constants, operations, layouts and requantization.

The `Emitter` is the context every converter works with. It maps ONNX tensor names to NNAPI
operands with a layout permutation (see `layout`), materializes constants on demand in whatever
layout and type an operation needs, inserts TRANSPOSE/RESHAPE where layouts differ, and inserts a
DEQUANTIZE + QUANTIZE pair where an NNAPI operation fixes an output quantization that differs from
the ONNX graph's (SOFTMAX's 1/256, or "same as input" for pooling and reshapes).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mlts.runtime import (FuseCode, MltsError, Model, OperandCode, OperandType, OperationCode,
                          SymmPerChannelQuantParams)

from . import layout
from .errors import import_error
from .ir import Graph, Node, Quant, Value

FLOAT_CODES = {np.dtype(np.float32): OperandCode.TENSOR_FLOAT32, np.dtype(np.float16): OperandCode.TENSOR_FLOAT16}
QUANT_CODES = {np.dtype(np.uint8): OperandCode.TENSOR_QUANT8_ASYMM,
               np.dtype(np.int8): OperandCode.TENSOR_QUANT8_ASYMM_SIGNED}
INT_DTYPES = {np.dtype(np.int32), np.dtype(np.int64)}
NUMPY_OF = {OperandCode.TENSOR_FLOAT32: np.float32, OperandCode.TENSOR_FLOAT16: np.float16,
            OperandCode.TENSOR_INT32: np.int32, OperandCode.TENSOR_BOOL8: np.bool_,
            OperandCode.TENSOR_QUANT8_ASYMM: np.uint8, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
            OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL: np.int8}


def nn_dims(shape: Sequence | None, perm: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """NNAPI dimensions (0 = unknown) of an ONNX shape under a permutation; rank 0 becomes [1]."""
    if shape is None:
        return None
    if len(shape) == 0:
        return (1,)
    if perm is not None:
        shape = layout.permute(shape, perm)
    return tuple(0 if d is None else int(d) for d in shape)


class Emitter:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.model = Model()
        self.node: Node | None = None
        self._keep: list[np.ndarray] = []  # constants the model references until finish()
        self._bindings: dict[str, dict[tuple[int, ...], int]] = {}
        self._native: dict[str, tuple[int, tuple[int, ...]]] = {}
        self._scalars: dict[tuple, int] = {}
        self._types: dict[int, OperandType] = {}
        self.operation_origins: list[str] = []  # per NNAPI operation (add order): the ONNX node
        self._pending_requant: list[tuple[int, int]] = []  # added right after the next operation

    # -- errors -----------------------------------------------------------------------------------
    def fail(self, message: str) -> MltsError:
        where = self.node.describe() if self.node is not None else "graph"
        return import_error(f"{where}: {message}")

    # -- types ------------------------------------------------------------------------------------
    def code_of(self, v: Value) -> OperandCode:
        if v.dtype is None:
            raise self.fail(f"the type of tensor {v.name!r} is unknown")
        if v.quant is not None and v.dtype in QUANT_CODES:
            return QUANT_CODES[v.dtype]
        if v.dtype in FLOAT_CODES:
            return FLOAT_CODES[v.dtype]
        if v.dtype in INT_DTYPES:
            return OperandCode.TENSOR_INT32
        if v.dtype == np.dtype(np.bool_):
            return OperandCode.TENSOR_BOOL8
        if v.dtype in QUANT_CODES:
            raise self.fail(f"tensor {v.name!r} is {v.dtype.name} without quantization parameters (NNAPI has no plain "
                            "8-bit integer tensors; a DequantizeLinear consumer would give them)")
        raise self.fail(f"tensor {v.name!r} has type {v.dtype.name}, which NNAPI cannot hold")

    def value_type(self, name: str, perm: Sequence[int] | None = None, *, quant: Quant | None = None,
                   dims: Sequence[int] | None = None) -> OperandType:
        v = self.graph.value(name)
        q = quant if quant is not None else v.quant
        code = self.code_of(Value(v.name, v.dtype, v.shape, None, q))
        if dims is None:
            dims = nn_dims(v.shape, perm)
        return self.make_type(code, dims, q)

    def make_type(self, code: OperandCode, dims: Sequence[int] | None, quant: Quant | None = None) -> OperandType:
        if code in (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED):
            if quant is None or not quant.per_tensor:
                raise self.fail("an activation tensor needs per-tensor quantization (NNAPI has no per-axis "
                                "activations)")
            return OperandType.tensor(code, dims, quant.s, quant.zp)
        return OperandType.tensor(code, dims)

    def operand_type(self, operand: int) -> OperandType:
        return self._types[operand]

    # -- operands and operations --------------------------------------------------------------------
    def add_operand(self, t: OperandType) -> int:
        index = self.model.add_operand(t)
        self._types[index] = t
        return index

    def constant(self, array: np.ndarray, t: OperandType) -> int:
        arr = np.ascontiguousarray(np.asarray(array).astype(NUMPY_OF.get(t.code, array.dtype), copy=False))
        if t.is_tensor and tuple(arr.shape) != tuple(t.dimensions):
            arr = arr.reshape(t.dimensions)
        index = self.add_operand(t)
        self._keep.append(arr)
        self.model.set_operand_value(index, arr)
        return index

    def int_scalar(self, v: int) -> int:
        return self._scalar(OperandCode.INT32, int(v), np.int32)

    def float_scalar(self, v: float) -> int:
        return self._scalar(OperandCode.FLOAT32, float(np.float32(v)), np.float32)

    def bool_scalar(self, v: bool) -> int:
        return self._scalar(OperandCode.BOOL, bool(v), np.bool_)

    def _scalar(self, code: OperandCode, v: Any, dtype) -> int:
        key = (code, v)
        if key not in self._scalars:
            index = self.add_operand(OperandType.scalar(code))
            self.model.set_operand_value(index, np.asarray(v, dtype=dtype))
            self._scalars[key] = index
        return self._scalars[key]

    def int_tensor(self, values: Sequence[int]) -> int:
        arr = np.asarray(list(values), dtype=np.int64)
        if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
            raise self.fail(f"value {arr.tolist()} does not fit in INT32")
        arr = arr.astype(np.int32)
        return self.constant(arr, OperandType.tensor(OperandCode.TENSOR_INT32, [arr.size]))

    def float_tensor(self, array: np.ndarray, dims: Sequence[int] | None = None) -> int:
        arr = np.asarray(array, dtype=np.float32)
        return self.constant(arr, OperandType.tensor(OperandCode.TENSOR_FLOAT32, dims or (arr.shape or (1,))))

    def temp(self, t: OperandType) -> int:
        return self.add_operand(t)

    def add_op(self, code: OperationCode, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.model.add_operation(code, list(inputs), list(outputs))
        self.operation_origins.append(self.node.describe() if self.node is not None else "graph boundary")
        pending, self._pending_requant = self._pending_requant, []
        for src, dst in pending:
            self.requantize_into(src, dst)

    def op(self, code: OperationCode, inputs: Sequence[int], out_type: OperandType) -> int:
        out = self.temp(out_type)
        self.add_op(code, inputs, [out])
        return out

    # -- bindings -----------------------------------------------------------------------------------
    def bind(self, name: str, operand: int, perm: Sequence[int]) -> None:
        perm = tuple(perm)
        self._native.setdefault(name, (operand, perm))
        self._bindings.setdefault(name, {})[perm] = operand

    def operand_tensors(self) -> dict[int, tuple[str, tuple[int, ...]]]:
        """Every computed operand that holds an ONNX tensor: operand -> (tensor name, layout permutation)
        (the first binding wins when an operand holds several names, e.g. through an Identity)."""
        held: dict[int, tuple[str, tuple[int, ...]]] = {}
        for name, by_perm in self._bindings.items():
            if self.graph.const(name) is not None:
                continue
            for perm, operand in by_perm.items():
                held.setdefault(operand, (name, perm))
        return held

    def is_bound(self, name: str) -> bool:
        return name in self._native

    def value(self, name: str) -> Value:
        return self.graph.value(name)

    def is_const(self, name: str | None) -> bool:
        return bool(name) and self.graph.const(name) is not None

    def perm_of(self, name: str) -> tuple[int, ...]:
        """The layout a tensor is available in without any conversion."""
        if name in self._native:
            return self._native[name][1]
        v = self.value(name)
        return layout.identity(v.rank or 0)

    def native(self, name: str) -> tuple[int, tuple[int, ...]]:
        if name not in self._native:
            v = self.value(name)
            if v.const is None:
                raise self.fail(f"tensor {name!r} has not been computed (internal importer error)")
            self.operand(name, layout.identity(v.const.ndim))
        return self._native[name]

    def rank(self, name: str) -> int:
        v = self.value(name)
        if v.rank is None:
            raise self.fail(f"the rank of tensor {name!r} is unknown (shape inference could not determine it)")
        return v.rank

    def shape(self, name: str) -> tuple:
        v = self.value(name)
        if v.shape is None:
            raise self.fail(f"the shape of tensor {name!r} is unknown")
        return v.shape

    def static_shape(self, name: str) -> tuple[int, ...]:
        shape = self.shape(name)
        if any(d is None for d in shape):
            raise self.fail(f"tensor {name!r} needs a static shape here, got {list(shape)}")
        return shape

    def operand(self, name: str, perm: Sequence[int] | None = None, *, code: OperandCode | None = None) -> int:
        """The NNAPI operand holding tensor `name` in layout `perm` (identity when None)."""
        v = self.value(name)
        if perm is None:
            perm = layout.identity(v.rank or 0)
        perm = tuple(perm)
        cache = self._bindings.get(name, {})
        if perm in cache:
            return cache[perm]
        if v.const is not None and name not in self._native:
            return self._materialize(name, perm)
        if v.const is not None:
            return self._materialize(name, perm, bind_native=False)
        if name not in self._native:
            raise self.fail(f"tensor {name!r} has not been computed (internal importer error)")
        src, src_perm = self._native[name]
        if len(src_perm) != len(perm):
            raise self.fail(f"layout of {name!r} has rank {len(src_perm)}, requested rank {len(perm)}")
        out_type = self._types[src].with_dimensions(nn_dims(v.shape, perm))
        if v.shape is not None and layout.same_bytes(v.shape, src_perm, perm):
            target = [(-1 if d is None else d) for d in layout.permute(v.shape, perm)]
            if target.count(-1) <= 1:
                out = self.op(OperationCode.RESHAPE, [src, self.int_tensor(target)], out_type)
                self._bindings[name][perm] = out
                return out
        t = layout.nnapi_transpose(src_perm, perm)
        out = self.op(OperationCode.TRANSPOSE, [src, self.int_tensor(t)], out_type)
        self._bindings[name][perm] = out
        return out

    def _materialize(self, name: str, perm: tuple[int, ...], *, bind_native: bool = True) -> int:
        v = self.value(name)
        arr = np.asarray(v.const)
        if arr.ndim:
            arr = np.transpose(arr, perm)
        t = self.const_type(v, arr.shape or (1,))
        index = self.constant(self.const_storage(v, arr), t)
        if bind_native:
            self.bind(name, index, perm)
        else:
            self._bindings[name][perm] = index
        return index

    def const_type(self, v: Value, dims: Sequence[int]) -> OperandType:
        code = self.code_of(v)
        return self.make_type(code, dims, v.quant)

    def const_storage(self, v: Value, arr: np.ndarray) -> np.ndarray:
        if v.dtype in INT_DTYPES:
            if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
                raise self.fail(f"constant {v.name!r} has values outside INT32")
            return arr.astype(np.int32)
        return arr

    def flat_operand(self, name: str) -> int:
        """An operand whose bytes are the tensor in ONNX row-major order (any shape): for RESHAPE-like uses."""
        op, perm = self.native(name)
        shape = self.value(name).shape
        if perm == layout.identity(len(perm)) or (shape is not None and layout.same_bytes(
                shape, perm, layout.identity(len(perm)))):
            return op
        return self.operand(name)

    def reshape_to(self, src: int, shape: Sequence, out: int | None = None, out_type: OperandType | None = None) -> int:
        """RESHAPE src to an ONNX shape (None dimensions -> -1, at most one); into `out` when given."""
        target = [(-1 if d is None else int(d)) for d in shape] or [1]
        if target.count(-1) > 1:
            raise self.fail(f"cannot reshape to {list(shape)}: more than one unknown dimension")
        if out is None:
            t = out_type or self._types[src].with_dimensions(nn_dims(shape))
            return self.op(OperationCode.RESHAPE, [src, self.int_tensor(target)], t)
        self.add_op(OperationCode.RESHAPE, [src, self.int_tensor(target)], [out])
        return out

    def broadcast_operand(self, name: str, rank: int, perm: Sequence[int]) -> int:
        """Operand of `name` right-aligned to `rank` dimensions (size-1 ones prepended), in layout `perm`."""
        v = self.value(name)
        r = self.rank(name)
        if r == rank:
            return self.operand(name, perm)
        if r > rank:
            raise self.fail(f"cannot broadcast {name!r} of rank {r} to rank {rank}")
        ident = layout.identity(rank)
        if v.const is not None:
            arr = np.asarray(v.const).reshape((1,) * (rank - r) + tuple(v.const.shape))
            arr = np.transpose(arr, perm)
            return self.constant(self.const_storage(v, arr), self.const_type(v, arr.shape))
        if tuple(perm) == ident:
            return self.operand(name)  # NNAPI broadcasting right-aligns like ONNX
        shape = (1,) * (rank - r) + tuple(v.shape)
        src = self.operand(name)
        target = [(-1 if d is None else d) for d in shape]
        if target.count(-1) > 1:
            raise self.fail(f"cannot broadcast {name!r} with shape {list(v.shape)} in this layout")
        t = self._types[src].with_dimensions(nn_dims(shape))
        expanded = self.op(OperationCode.RESHAPE, [src, self.int_tensor(target)], t)
        if layout.same_bytes(shape, ident, perm):
            t2 = t.with_dimensions(nn_dims(shape, perm))
            return self.op(OperationCode.RESHAPE, [expanded, self.int_tensor(
                [(-1 if d is None else d) for d in layout.permute(shape, perm)])], t2)
        return self.op(OperationCode.TRANSPOSE, [expanded, self.int_tensor(perm)],
                       t.with_dimensions(nn_dims(shape, perm)))

    # -- outputs -------------------------------------------------------------------------------------
    def output(self, name: str, perm: Sequence[int] | None = None, *, forced: Quant | None = None,
               dims: Sequence[int] | None = None, float_out: bool = False) -> int:
        """The operand an operation writes for ONNX output `name`, bound in layout `perm`.

        `forced`: the output quantization the NNAPI operation requires; when it differs from the
        ONNX tensor's, the operation writes a temporary that is requantized into the real output.
        """
        v = self.value(name)
        if perm is None:
            perm = layout.identity(v.rank or 0)
        final_type = self.value_type(name, perm, dims=dims)
        final = self.add_operand(final_type)
        self.bind(name, final, perm)
        if forced is None or (v.quant is not None and forced.same(v.quant)):
            return final
        if v.quant is None:
            raise self.fail(f"output {name!r} is float but the operation produces a quantized tensor")
        temp_type = self.make_type(QUANT_CODES[forced.dtype], final_type.dimensions, forced)
        temp = self.add_operand(temp_type)
        self._pending_requant.append((temp, final))  # emitted after the operation that writes `temp`
        return temp

    def requantize_into(self, src: int, dst: int) -> None:
        """dst = quantize(dequantize(src)) (two NNAPI operations through a float tensor)."""
        t_src = self._types[src]
        real = self.temp(OperandType.tensor(OperandCode.TENSOR_FLOAT32, t_src.dimensions))
        self.add_op(OperationCode.DEQUANTIZE, [src], [real])
        self.add_op(OperationCode.QUANTIZE, [real], [dst])

    def requantized(self, src: int, quant: Quant) -> int:
        """A new operand holding src's values under another per-tensor quantization."""
        t_src = self._types[src]
        dst = self.temp(self.make_type(QUANT_CODES[quant.dtype], t_src.dimensions, quant))
        self.requantize_into(src, dst)
        return dst

    # -- quantized helpers ----------------------------------------------------------------------------
    def quant_of(self, name: str) -> Quant | None:
        return self.value(name).quant

    def is_quantized(self, name: str) -> bool:
        v = self.value(name)
        return v.quant is not None and v.dtype in QUANT_CODES

    def fuse_code(self, node: Node) -> int:
        return int(node.attrs.get("_fuse", FuseCode.NONE))

    def per_channel_type(self, dims: Sequence[int], scales: np.ndarray, channel_dim: int) -> OperandType:
        return OperandType.tensor(OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, dims, 0.0, 0,
                                  SymmPerChannelQuantParams(tuple(float(s) for s in np.ravel(scales)), channel_dim))

    # -- finishing ------------------------------------------------------------------------------------
    def finish(self, input_names: Sequence[str], output_names: Sequence[str]) -> tuple[list[int], list[int]]:
        self.node = None
        inputs = [self._native[n][0] for n in input_names]
        outputs: list[int] = []
        for name in output_names:
            if not self.is_bound(name) and not self.is_const(name):
                raise import_error(f"graph output {name!r} was not computed")
            index = self.operand(name)
            if index in inputs or index in outputs or self.is_const(name):
                index = self._copy(index)  # NNAPI: a model output is never an input, a constant or listed twice
            outputs.append(index)
        return inputs, outputs

    def _copy(self, index: int) -> int:
        t = self._types[index]
        out = self.temp(t)
        self.add_op(OperationCode.CAST, [index], [out])
        return out
