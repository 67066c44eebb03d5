"""The HAL model of a finished Model: the model and the models it references flattened into HAL subgraphs,
small constants copied into one value buffer, large ones gathered into a shared pool (as NNAPI's runtime
does), operations in run order. Reads the Model's own records; Model.hal_model() is its only caller."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..enums import OperandLifetime
from ..hal import DataLocation, HalOperand, HalOperation, Subgraph
from ..hal.memory import Memory

if TYPE_CHECKING:
    from .model import Model


class HalBuilder:
    """Flattens a model and the models it references into HAL subgraphs, values and pools."""

    def __init__(self) -> None:
        self.subgraphs: list[Subgraph | None] = []
        self.values = bytearray()
        self.pools: list[Memory] = []
        self._pool_index: dict[int, int] = {}
        self._model_index: dict[int, int] = {}
        self._large: list[tuple[list, int, memoryview]] = []

    def _pool(self, memory: Memory) -> int:
        if memory.id not in self._pool_index:
            self._pool_index[memory.id] = len(self.pools)
            self.pools.append(memory)
        return self._pool_index[memory.id]

    def add_subgraph(self, model: Model) -> int:
        if id(model) in self._model_index:
            return self._model_index[id(model)]
        index = len(self.subgraphs)
        self._model_index[id(model)] = index
        self.subgraphs.append(None)
        consumers = [0] * len(model._operands)
        for op in model._operations:
            for i in op.inputs:
                consumers[i] += 1
        operands = []
        large_refs = []
        for i, rec in enumerate(model._operands):
            lifetime, location = rec.lifetime, None
            if i in model._inputs:
                lifetime = OperandLifetime.SUBGRAPH_INPUT
            elif i in model._outputs:
                lifetime = OperandLifetime.SUBGRAPH_OUTPUT
            elif rec.lifetime == OperandLifetime.CONSTANT_COPY:
                location = DataLocation(-1, len(self.values), len(rec.value))
                self.values += rec.value
                while len(self.values) % 8:
                    self.values.append(0)
            elif rec.lifetime == OperandLifetime.CONSTANT_REFERENCE:
                if isinstance(rec.value, memoryview):
                    large_refs.append((i, rec.value))
                else:
                    memory, offset, length = rec.value
                    location = DataLocation(self._pool(memory), offset, length)
            elif rec.lifetime == OperandLifetime.SUBGRAPH:
                location = DataLocation(-1, self.add_subgraph(rec.value), 0)
            operands.append(HalOperand(rec.type, lifetime, location, consumers[i]))
        if large_refs:
            # Large application buffers are referenced until finish, then gathered into one shared pool
            # so that only a pool handle crosses to the driver (as NNAPI's runtime does).
            total = sum(_align(v.nbytes) for _, v in large_refs)
            pool = Memory.create_shared(total)
            pool_index = self._pool(pool)
            offset = 0
            for i, v in large_refs:
                pool.view(offset, v.nbytes)[:] = v
                operands[i] = HalOperand(operands[i].type, OperandLifetime.CONSTANT_REFERENCE,
                                         DataLocation(pool_index, offset, v.nbytes), consumers[i])
                offset += _align(v.nbytes)
            pool.writable = False
        operations = tuple(HalOperation(model._operations[j].code, model._operations[j].inputs,
                                        model._operations[j].outputs) for j in model._run_order)
        self.subgraphs[index] = Subgraph(tuple(operands), operations, model._inputs, model._outputs)
        return index


def _align(n: int, to: int = 64) -> int:
    return (n + to - 1) // to * to
