"""MemoryDesc (ANeuralNetworksMemoryDesc): describe a buffer by its roles on compilations.

The memory-domains issue adds driver-allocated opaque buffers; until a driver offers them, memory
created from a descriptor is runtime-managed shared memory of the described size, which NNAPI
allows as the fallback.
"""
from __future__ import annotations

from typing import Any

from .errors import bad_data, bad_state
from .memory import Memory
from .operand_type import OperandType


class MemoryDesc:
    def __init__(self) -> None:
        self.input_roles: list[tuple[Any, int, float]] = []
        self.output_roles: list[tuple[Any, int, float]] = []
        self.dimensions: tuple[int, ...] | None = None
        self.operand_type: OperandType | None = None
        self.finished = False

    def _role(self, compilation: Any, index: int, frequency: float, outputs: bool) -> None:
        from .compilation import Compilation

        if self.finished:
            raise bad_state("MemoryDesc: already finished")
        if not isinstance(compilation, Compilation) or not compilation.finished:
            raise bad_data("MemoryDesc: a role needs a finished Compilation")
        if not isinstance(frequency, (int, float)) or not 0.0 < frequency <= 1.0:
            raise bad_data(f"MemoryDesc: frequency must be in (0, 1], got {frequency!r}")
        sg = compilation.model.hal_model().main
        indexes = sg.output_indexes if outputs else sg.input_indexes
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(indexes):
            raise bad_data(f"MemoryDesc: {'output' if outputs else 'input'} index {index!r} out of range")
        roles = self.output_roles if outputs else self.input_roles
        if any(c is compilation and i == index for c, i, _ in roles):
            raise bad_data(f"MemoryDesc: role {'output' if outputs else 'input'} {index} given twice")
        t = sg.operands[indexes[index]].type
        if self.operand_type is not None and (t.code != self.operand_type.code or t.scale != self.operand_type.scale
                                              or t.zero_point != self.operand_type.zero_point):
            raise bad_data("MemoryDesc: all roles must have the same operand type")
        if self.operand_type is not None and t.dimensions is not None and self.operand_type.dimensions is not None:
            if len(t.dimensions) != len(self.operand_type.dimensions) or any(
                    a and b and a != b for a, b in zip(t.dimensions, self.operand_type.dimensions)):
                raise bad_data("MemoryDesc: roles have incompatible dimensions")
        if self.operand_type is None or (self.operand_type.dimensions is None and t.dimensions is not None):
            self.operand_type = t
        roles.append((compilation, index, float(frequency)))

    def add_input_role(self, compilation: Any, index: int, frequency: float) -> None:
        self._role(compilation, index, frequency, outputs=False)

    def add_output_role(self, compilation: Any, index: int, frequency: float) -> None:
        self._role(compilation, index, frequency, outputs=True)

    def set_dimensions(self, dimensions) -> None:
        if self.finished:
            raise bad_state("MemoryDesc: already finished")
        self.dimensions = tuple(int(d) for d in dimensions)

    def finish(self) -> None:
        if self.finished:
            raise bad_state("MemoryDesc: already finished")
        if not self.input_roles and not self.output_roles:
            raise bad_data("MemoryDesc: at least one role is required")
        self.finished = True

    def create_memory(self) -> Memory:
        """Memory for this descriptor (shared-memory fallback; needs fully known dimensions)."""
        if not self.finished:
            raise bad_state("MemoryDesc: not finished")
        t = self.operand_type
        if self.dimensions:
            t = t.with_dimensions(self.dimensions)
        if t.byte_size() == 0:
            raise bad_data("MemoryDesc: dimensions must be fully known for a shared-memory buffer")
        return Memory.create_shared(t.byte_size())
