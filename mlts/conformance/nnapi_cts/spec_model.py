"""The operands and models of our implementation of NNAPI's spec DSL (see spec_dsl).

NNAPI's test specs (`*.mod.py`) are written in a Python DSL.

The spec files are Python: they build models from Input/Output/Parameter/Internal operands, attach
Examples, and ask for variations (data types, relaxed, NCHW, axes, activations, lifetimes). This module
gives them those names, written from the generator's README and its documented behaviour, and expands
every variation the way NNAPI's generator does, so that test names, operand order and values match the
CTS/VTS tests. `run_spec_file` returns one `SpecCase` per generated test. Build time only: mlts reads the
converted data (store.py), never the spec files."""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

FLOAT_TYPES = {"FLOAT32", "FLOAT16", "TENSOR_FLOAT32", "TENSOR_FLOAT16"}
BOOL_TYPES = {"BOOL", "TENSOR_BOOL8"}
# Clamp ranges of the integer types a float value is quantized into.
_CLAMP = {"TENSOR_QUANT8_ASYMM": (0, 255), "TENSOR_QUANT16_ASYMM": (0, 65535),
          "TENSOR_QUANT8_SYMM_PER_CHANNEL": (-127, 127), "TENSOR_QUANT8_ASYMM_SIGNED": (-128, 127),
          "UINT32": (0, None)}


class SkipVariation(Exception):
    """A variation that does not apply to this model (e.g. no constant tensor to turn into an input)."""


class _FileState:
    """Everything one spec file accumulates; reset before each file, as each file is its own namespace."""

    def __init__(self, spec_name: str = "", version: str | None = None) -> None:
        self.spec_name = spec_name
        self.version = version
        self.operand_names: set[str] = set()
        self.test_names: set[str] = set()
        self.models: list[Model] = []
        self.examples: list = []  # spec_dsl.Example
        self.version_overrides: dict[str, str] = {}


_state = _FileState()


def current() -> _FileState:
    """The state of the spec file being executed."""
    return _state


def reset(spec_name: str, version: str | None) -> _FileState:
    """Start a new spec file: names, models and examples of the previous one are forgotten."""
    global _state
    _state = _FileState(spec_name, version)
    return _state


def _unique(name: str, taken: set[str], sep: str, first_suffix: int) -> str:
    """`name`, or name+sep+N with the first free N after `first_suffix` (the generator's renaming)."""
    unique, n = name, first_suffix
    while unique in taken:
        n += 1
        unique = f"{name}{sep}{n}"
    taken.add(unique)
    return unique


def _joined(*parts: Any) -> str:
    return "_".join(str(p) for p in parts if p is not None and p != "")


class SymmPerChannelQuantParams:
    """Per-channel scales; `hide` keeps them out of the model (used only to quantize bias values)."""

    def __init__(self, channelDim: int, scales: list[float], hide: bool = False) -> None:
        self.channelDim = channelDim
        self.scales = list(scales)
        self.hide = hide

    def broadcast(self, dims: list[int]) -> np.ndarray:
        shape = [1] * len(dims)
        shape[self.channelDim] = len(self.scales)
        return np.array(self.scales).reshape(shape)

    def __repr__(self) -> str:  # part of a type's identity, as the generator keys types by text
        return f"PerChannel({self.channelDim}, {self.scales}, {self.hide})"


@dataclass
class OperandKind:
    """An operand's type: NNAPI type name, dimensions, scale, zero point, per-channel parameters."""

    type: str
    dimensions: list[int]
    scale: float = 0.0
    zeroPoint: int = 0
    extraParams: SymmPerChannelQuantParams | None = None

    def count(self) -> int:
        return reduce(lambda a, b: a * b, self.dimensions, 1)

    def is_float(self) -> bool:
        return self.type in FLOAT_TYPES

    def is_scalar(self) -> bool:
        return not self.type.startswith("TENSOR_")


def _parse_shape_string(shape: str) -> tuple[list[int], float, int]:
    """The old string form "{d0, d1}, scale, zeroPoint" (scale and zero point optional)."""
    if shape in ("", "{}"):
        return [], 0.0, 0
    inside, _, rest = shape.partition("{")[2].partition("}")
    dims = [int(x) for x in inside.split(",")]
    numbers = [x.strip().rstrip("f") for x in rest.split(",") if x.strip()]
    scale = float(numbers[0]) if numbers else 0.0
    zero_point = int(numbers[1]) if len(numbers) > 1 else 0
    return dims, scale, zero_point


def _kind_from_tuple(spec: Any, extra: SymmPerChannelQuantParams | None) -> OperandKind:
    spec = list(spec)
    dims = spec[1]
    assert isinstance(dims, (list, tuple)), f"dimensions must be a list, got {dims!r}"
    scale = float(spec[2]) if len(spec) > 2 else 0.0
    zero_point = int(spec[3]) if len(spec) > 3 else 0
    if len(spec) > 4:
        extra = spec[4]
    return OperandKind(spec[0], list(dims), scale, zero_point, extra)


def dequantize(values: np.ndarray, kind: OperandKind) -> np.ndarray:
    """Stored values -> real numbers, in place on a float32 copy (the generator's arithmetic)."""
    v = np.array(values, dtype=np.float32)
    v -= kind.zeroPoint
    if kind.scale != 0:
        v *= kind.scale
    if isinstance(kind.extraParams, SymmPerChannelQuantParams):
        v *= kind.extraParams.broadcast(kind.dimensions)
    return v


def quantize(values: Any, kind: OperandKind) -> Any:
    """Real numbers -> values of `kind`: divide by the scale(s), add the zero point, round half to even
    and clamp for integer types (float32 arithmetic for arrays, as the generator's)."""
    v = values.copy() if isinstance(values, np.ndarray) else values
    if kind.scale != 0:
        v /= kind.scale
    if isinstance(kind.extraParams, SymmPerChannelQuantParams):
        v = v / kind.extraParams.broadcast(kind.dimensions)
    v += kind.zeroPoint
    if not kind.is_float():
        v = np.round(v).astype(int)
    low, high = _CLAMP.get(kind.type, (None, None))
    if low is not None:
        v = np.maximum(v, low)
    if high is not None:
        v = np.minimum(v, high)
    return v


class Operand:
    """A named operand; operands with the same name are the same operand (across model copies)."""

    lifetime = "TEMPORARY_VARIABLE"

    def __init__(self, name: str, opType: Any, value: Any = None, backward: Any = None,
                 skipRenaming: bool = False, extraParams: SymmPerChannelQuantParams | None = None) -> None:
        self.name = name if skipRenaming else _unique(name, _state.operand_names, "", 0)
        if isinstance(opType, str):  # Operand(name, "TENSOR_FLOAT32", "{1, 2}", value)
            dims, scale, zero_point = _parse_shape_string(value)
            self.type = OperandKind(opType, dims, scale, zero_point, extraParams)
            value = backward
        else:
            self.type = _kind_from_tuple(opType, extraParams)
        self.SetValue(value)
        self.mayBeInternal = True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Operand) and self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __lt__(self, other: "Operand") -> bool:
        return self.name < other.name

    def __repr__(self) -> str:
        return self.name

    def SetValue(self, value: Any) -> "Operand":
        self.value = value if value is None or isinstance(value, (list, tuple)) else [value]
        return self

    def SetValueFromNumpy(self, array: np.ndarray) -> "Operand":
        self.value = np.asarray(array).flatten().tolist()
        return self

    def GetValueAsNumpy(self) -> np.ndarray:
        return np.array(self.value).reshape(self.type.dimensions)

    def ConvertTo(self, cls: type, name: str | None = None) -> "Operand":
        """The same operand (same name unless given) as another class: Input, Internal, ..."""
        t = self.type
        new = cls(self.name if name is None else name, (t.type, t.dimensions, t.scale, t.zeroPoint),
                  skipRenaming=True, extraParams=t.extraParams)
        if not issubclass(cls, Internal):
            new.SetValue(self.value)
        if not self.mayBeInternal:
            assert not issubclass(cls, Internal)
            new.ShouldNeverBeInternal()
        return new

    def ShouldNeverBeInternal(self) -> "Operand":
        self.mayBeInternal = False
        return self


class InOut(Operand):
    def __init__(self, name: str, opType: Any, backward: Any = None, skipRenaming: bool = False,
                 extraParams: SymmPerChannelQuantParams | None = None) -> None:
        super().__init__(name, opType, backward, None, skipRenaming=skipRenaming, extraParams=extraParams)

    def Feed(self, values: Any) -> "InOut":
        self.SetValue(values[self] if isinstance(values, dict) else values)
        return self


class Input(InOut):
    lifetime = "SUBGRAPH_INPUT"


class Output(InOut):
    lifetime = "SUBGRAPH_OUTPUT"


class IgnoredOutput(Output):
    """An output whose value is not compared (its expected data are zeros)."""

    def Feed(self, values: Any) -> "IgnoredOutput":
        self.value = [0] * self.type.count()
        return self


class Internal(Operand):
    lifetime = "TEMPORARY_VARIABLE"

    def __init__(self, name: str, opType: Any, backward: Any = None, skipRenaming: bool = False,
                 extraParams: SymmPerChannelQuantParams | None = None) -> None:
        super().__init__(name, opType, backward, None, skipRenaming=skipRenaming, extraParams=extraParams)


class Parameter(Operand):
    """A constant operand (lifetime CONSTANT; NO_VALUE when its value is None: an omitted input)."""

    def __init__(self, name: str, opType: Any, value: Any = None, backward: Any = None,
                 skipRenaming: bool = False, extraParams: SymmPerChannelQuantParams | None = None) -> None:
        super().__init__(name, opType, value, backward, skipRenaming=skipRenaming, extraParams=extraParams)

    @property
    def lifetime(self) -> str:  # type: ignore[override]
        if self.type.type == "SUBGRAPH":
            return "SUBGRAPH"
        return "NO_VALUE" if self.value is None else "CONSTANT"

    @staticmethod
    def accepts(value: Any) -> bool:
        return False


class Int32Scalar(Parameter):
    def __init__(self, name: str, value: Any) -> None:
        super().__init__(name, ("INT32", []), int(value))

    @staticmethod
    def accepts(value: Any) -> bool:
        return type(value) is int


class Float16Scalar(Parameter):
    def __init__(self, name: str, value: Any) -> None:
        super().__init__(name, ("FLOAT16", []), float(value))


class Float32Scalar(Parameter):
    def __init__(self, name: str, value: Any) -> None:
        super().__init__(name, ("FLOAT32", []), float(value))

    @staticmethod
    def accepts(value: Any) -> bool:
        return type(value) is float


class BoolScalar(Parameter):
    def __init__(self, name: str, value: Any) -> None:
        super().__init__(name, ("BOOL", []), bool(value))

    @staticmethod
    def accepts(value: Any) -> bool:
        return type(value) is bool


class Int32Vector(Parameter):
    def __init__(self, name: str, value: Any) -> None:
        super().__init__(name, ("TENSOR_INT32", [len(value)]), [int(v) for v in value])

    @staticmethod
    def accepts(value: Any) -> bool:
        return isinstance(value, (list, tuple)) and all(type(v) is int for v in value)


class Float32Vector(Parameter):
    def __init__(self, name: str, value: Any) -> None:
        super().__init__(name, ("TENSOR_FLOAT32", [len(value)]), [float(v) for v in value])

    @staticmethod
    def accepts(value: Any) -> bool:
        return isinstance(value, (list, tuple)) and all(type(v) is float for v in value)


class SubgraphReference(Parameter):
    """A SUBGRAPH operand: a model referenced by IF or WHILE."""

    def __init__(self, name: str, model: "Model") -> None:
        super().__init__(name, ("SUBGRAPH", []), model)
        if model.name is None:
            model.name = name

    @staticmethod
    def accepts(value: Any) -> bool:
        return isinstance(value, Model)


# Python values an operation may take directly, in the order they are tried.
_IMPLICIT_PARAMETERS = (Int32Scalar, Float32Scalar, BoolScalar, Int32Vector, Float32Vector, SubgraphReference)


def _as_operand(value: Any) -> Operand:
    if isinstance(value, Operand):
        return value
    for cls in _IMPLICIT_PARAMETERS:
        if cls.accepts(value):
            return cls("param", value)
    raise TypeError(f"{value!r} cannot be an implicit parameter")


class Operation:
    def __init__(self, optype: str, ins: list[Any], outs: list[Operand]) -> None:
        self.optype = optype
        self.ins = [_as_operand(i) for i in ins]
        self.outs = list(outs)


class Model:
    """A model under construction: operands in the order they are first used, operations in order."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.operations: list[Operation] = []
        self.operands: list[Operand] = []
        self.isRelaxed = False
        self.version = _state.version
        _state.models.append(self)

    def AddOperand(self, operand: Operand) -> "Model":
        if operand not in self.operands:
            self.operands.append(operand)
        return self

    def IdentifyInputs(self, *args: Operand) -> "Model":
        for a in args:
            self.AddOperand(a)
        assert tuple(self.GetInputs()) == args, f"{self.GetInputs()} vs {args}"
        return self

    def IdentifyOutputs(self, *args: Operand) -> "Model":
        for a in args:
            self.AddOperand(a)
        assert tuple(self.GetOutputs()) == args, f"{self.GetOutputs()} vs {args}"
        return self

    def Operation(self, optype: str, *args: Any) -> "Model":
        operation = Operation(optype, list(args), [])
        self.operations.append(operation)
        for operand in operation.ins:
            self.AddOperand(operand)
        return self

    def To(self, *args: Any) -> "Model":
        outs = list(args[0]) if isinstance(args[0], (list, tuple)) else list(args)
        self.operations[-1].outs = outs
        for operand in outs:
            self.AddOperand(operand)
        return self

    def RelaxedExecution(self, is_relaxed: bool) -> "Model":
        self.isRelaxed = is_relaxed
        return self

    def IntroducedIn(self, version: str | None) -> "Model":
        self.version = version
        return self

    def GetInputs(self) -> list[Operand]:
        return [o for o in self.operands if isinstance(o, Input)]

    def GetOutputs(self) -> list[Operand]:
        return [o for o in self.operands if isinstance(o, Output)]

    def find(self, operand: Operand) -> Operand:
        return self.operands[self.operands.index(operand)]

    def replace(self, operands: list[Operand]) -> None:
        for o in operands:
            self.operands[self.operands.index(o)] = o

    def Feed(self, feed: tuple[dict, dict]) -> "Model":
        for i in self.GetInputs():
            i.Feed(feed[0])
        for o in self.GetOutputs():
            o.Feed(feed[1])
        return self
