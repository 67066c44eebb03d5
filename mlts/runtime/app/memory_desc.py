"""MemoryDesc (ANeuralNetworksMemoryDesc): describe a buffer by its roles on compilations, and the
validator every memory created from a descriptor carries (AOSP's MemoryBuilder and
DeviceMemoryValidator).

Creating the memory (`Memory.create_from_desc(desc)`, see memory.py) asks the one driver all
roles run on to allocate an opaque buffer; otherwise, or when that driver cannot, it falls back to
shared memory of the described size, as NNAPI allows. Either way the memory may be used only in the
declared roles, whole (offset 0, length 0).
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from ..enums import ResultCode
from ..errors import MltsError, bad_data, bad_state
from ..operand_type import OperandType, check_dimensions, combine_dimensions, same_operand_kind
from .compilation import Compilation

IO = ("input", "output")



class MemoryDesc:
    """Roles (`add_input_role`, `add_output_role`), optional `set_dimensions`, then `finish()`;
    `Memory.create_from_desc(desc)` creates memories from it."""

    def __init__(self) -> None:
        self.input_roles: list[tuple[Any, int, float]] = []
        self.output_roles: list[tuple[Any, int, float]] = []
        self.roles: set[tuple[Any, str, int]] = set()  # (compilation, "input" | "output", index)
        self.dimensions: tuple[int, ...] | None = None  # combined over roles and set_dimensions; None = unknown rank
        self.operand_type: OperandType | None = None  # data type and quantization of every role
        self.finished = False

    def _role(self, compilation: Any, index: int, frequency: float, io: str) -> None:
        call = f"MemoryDesc.add_{io}_role"
        if self.finished:
            raise bad_state(f"{call}: the descriptor is already finished")
        if not isinstance(compilation, Compilation) or not compilation.finished:
            raise bad_data(f"{call}: a role needs a finished Compilation")
        sg = compilation.model.hal_model().main
        indexes = sg.output_indexes if io == "output" else sg.input_indexes
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(indexes):
            raise bad_data(f"{call}: {io} index {index!r} out of range (the model has {len(indexes)})")
        index = int(index)
        if (compilation, io, index) in self.roles:
            raise bad_data(f"{call}: {io} {index} of this compilation is given twice")
        t = sg.operands[indexes[index]].type
        if self.operand_type is not None and not same_operand_kind(t, self.operand_type):
            raise bad_data(f"{call}: {io} {index} is {t.describe()}, other roles are {self.operand_type.describe()}")
        if not t.is_tensor and self.dimensions:
            raise bad_data(f"{call}: {io} {index} is a scalar, the descriptor has dimensions {list(self.dimensions)}")
        combined = self.dimensions if t.dimensions is None else combine_dimensions(self.dimensions, t.dimensions)
        if combined is None and t.dimensions is not None:
            raise bad_data(f"{call}: {io} {index} dimensions {list(t.dimensions)} conflict with "
                           f"{list(self.dimensions or ())}")
        if isinstance(frequency, bool) or not isinstance(frequency, (int, float)) or not 0.0 < frequency <= 1.0:
            raise bad_data(f"{call}: frequency must be in (0, 1], got {frequency!r}")
        self.roles.add((compilation, io, index))
        (self.output_roles if io == "output" else self.input_roles).append((compilation, index, float(frequency)))
        self.operand_type = t
        self.dimensions = combined

    def add_input_role(self, compilation: Any, index: int, frequency: float = 1.0) -> None:
        self._role(compilation, index, frequency, "input")

    def add_output_role(self, compilation: Any, index: int, frequency: float = 1.0) -> None:
        self._role(compilation, index, frequency, "output")

    def set_dimensions(self, dimensions: Sequence[int]) -> None:
        """Further specify the dimensions (0 = unknown); they must agree with every role's."""
        if self.finished:
            raise bad_state("MemoryDesc.set_dimensions: the descriptor is already finished")
        dims = check_dimensions(dimensions, "MemoryDesc.set_dimensions")
        if self.operand_type is not None and not self.operand_type.is_tensor and dims:
            raise bad_data("MemoryDesc.set_dimensions: the roles are scalars, which take no dimensions")
        combined = combine_dimensions(self.dimensions, dims)
        if combined is None:
            raise bad_data(f"MemoryDesc.set_dimensions: {list(dims)} conflict with {list(self.dimensions or ())}")
        self.dimensions = combined

    def finish(self) -> None:
        if self.finished:
            raise bad_state("MemoryDesc.finish: the descriptor is already finished")
        if not self.roles:
            raise bad_data("MemoryDesc.finish: at least one role is required")
        self.finished = True

    @property
    def memory_type(self) -> OperandType:
        """The operand type of memories created from this descriptor (dims None = unknown rank)."""
        t = self.operand_type
        return OperandType(t.code, self.dimensions if t.is_tensor else (), t.scale, t.zero_point, t.channel_quant)


class DescMemoryValidator:
    """What a memory created from a descriptor allows: its roles only, whole, inputs only once written
    (by an execution or a copy), with the dimensions of its last write (AOSP's DeviceMemoryValidator)."""

    def __init__(self, roles: set[tuple[Any, str, int]], memory_type: OperandType) -> None:
        self.roles = frozenset(roles)
        self.type = memory_type  # data type, quantization and initial dimensions
        self.dimensions = memory_type.dimensions  # updated by each successful write
        self.initialized = False
        self._lock = threading.Lock()

    @property
    def logical_size(self) -> int:
        """Bytes of the current contents, 0 while the dimensions are unknown."""
        return self._type(self.dimensions).byte_size()

    @property
    def created_with_unknown_shape(self) -> bool:
        return self.type.byte_size() == 0

    def _type(self, dims: tuple[int, ...] | None) -> OperandType:
        t = self.type
        return OperandType(t.code, dims, t.scale, t.zero_point, t.channel_quant)

    def bind(self, compilation: Any, io: str, index: int, declared: OperandType, operand_type: OperandType | None,
             offset: Any, length: Any, call: str) -> tuple[int, ...] | None:
        """Check one use (set_input_from_memory / set_output_from_memory); returns the use's dimensions."""
        if (compilation, io, index) not in self.roles:
            raise bad_data(f"{call}: the memory was created from a MemoryDesc without {io} {index} of this "
                           f"compilation among its roles")
        if isinstance(offset, bool) or isinstance(length, bool) or offset != 0 or length != 0:
            raise bad_data(f"{call}: a memory created from a MemoryDesc is used whole: offset and length must be "
                           f"0, got {offset!r} and {length!r}")
        dims = declared.dimensions
        if operand_type is not None:
            if not isinstance(operand_type, OperandType) or not same_operand_kind(operand_type, declared):
                raise bad_data(f"{call}: the given type may only differ from the model's in its dimensions")
            if not declared.is_tensor and operand_type.dimensions:
                raise bad_data(f"{call}: invalid dimensions for a scalar memory")
            if operand_type.dimensions is not None:
                dims = combine_dimensions(declared.dimensions, operand_type.dimensions)
                if dims is None:
                    raise bad_data(f"{call}: dimensions {list(operand_type.dimensions)} conflict with the model's "
                                   f"{list(declared.dimensions or ())}")
        if declared.is_tensor and dims is not None and self.type.dimensions is not None \
                and combine_dimensions(dims, self.type.dimensions) is None:
            raise bad_data(f"{call}: dimensions {list(dims)} conflict with the memory's {list(self.type.dimensions)}")
        return dims

    def input_dimensions(self, requested: tuple[int, ...] | None, call: str) -> tuple[int, ...]:
        """At the start of a computation: an input memory must hold a value, of the requested dimensions
        (unknown requested dimensions take the memory's). OP_FAILED otherwise, as NNAPI."""
        with self._lock:
            initialized, current = self.initialized, self.dimensions
        if not initialized:
            raise MltsError(ResultCode.OP_FAILED, f"{call}: an uninitialized memory is used as an input")
        if not self.type.is_tensor:
            return ()
        dims = current if requested is None else combine_dimensions(requested, current)
        if dims is None or tuple(dims) != tuple(current or ()):
            raise MltsError(ResultCode.OP_FAILED, f"{call}: input dimensions {list(requested or ())} do not match "
                                                  f"the memory's {list(current or ())}")
        return tuple(dims)

    def update(self, dimensions: tuple[int, ...] | None, logical_size: int = 0,
               operand_type: OperandType | None = None) -> bool:
        """Take the metadata of a new value (from an execution or a copy); False when incompatible."""
        if operand_type is not None and not same_operand_kind(operand_type, self.type):
            return False
        if dimensions and not self.type.is_tensor:
            return False
        dims = self.type.dimensions if dimensions is None or (not dimensions and self.type.is_tensor
                                                              and self.type.dimensions) else tuple(dimensions)
        combined = combine_dimensions(dims, self.type.dimensions) if self.type.is_tensor else ()
        if combined is None and dims is not None:
            return False
        if logical_size and logical_size != self._type(combined).byte_size():
            return False
        with self._lock:
            self.dimensions = combined
        return True

    def set_initialized(self, initialized: bool) -> None:
        with self._lock:
            self.initialized = bool(initialized)


__all__ = ["DescMemoryValidator", "MemoryDesc"]
