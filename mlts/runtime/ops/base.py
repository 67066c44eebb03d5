"""The operation interface: one `Operation` per NNAPI operation (validation, shape inference, kernel).

Every operation is described once, in its own module under `mlts/runtime/ops/`, and registered with
`@register`. The model builder calls `validate` (types, counts, ranks, quantization, constant scalar
values) and, when the shapes are known, `prepare` (shape inference); the reference executor calls
`prepare` then `execute` on real arrays. Sample drivers run the same kernels.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from ..enums import FuseCode, OperandCode, OperationCode
from ..errors import MltsError, ResultCode
from ..operand_type import OperandType

Shape = tuple[int, ...]


class ValueUnknown(Exception):
    """Raised inside `prepare` at model-build time when a needed shape/value is only known at run time."""


@dataclass(frozen=True)
class SubgraphSignature:
    """What an operation sees of a MODEL operand (a control-flow branch, condition or body): the
    referenced model's input and output types, the output types its own shape inference found, and
    where an executor finds it (`index` into the HAL model's subgraphs; None while building a model)."""

    input_types: tuple[OperandType, ...]
    output_types: tuple[OperandType, ...]
    inferred_output_types: tuple[OperandType, ...] | None = None
    index: int | None = None

    @property
    def best_output_types(self) -> tuple[OperandType, ...]:
        return self.inferred_output_types or self.output_types


class SubgraphRunner(abc.ABC):
    """What control flow (IF, WHILE) needs from the executor running it: the referenced subgraphs, and
    running one under the same deadline, loop timeout and checkpoint as the operation itself."""

    #: absolute time.monotonic() deadline of the run (None: none)
    deadline: float | None = None
    #: the execution's loop timeout (None: NNAPI's default)
    loop_timeout_ns: int | None = None

    @abc.abstractmethod
    def subgraph(self, index: int) -> Any:
        """The HAL subgraph at `index` (0: main, k: referenced subgraph k - 1)."""

    @abc.abstractmethod
    def run(self, index: int, inputs: Sequence[Any]) -> list[np.ndarray]:
        """Run subgraph `index` on input arrays; its output arrays."""


class OperationContext:
    """What an operation sees of its operands, in one of three phases: validate, prepare, execute.

    Input `i` is omitted (NO_VALUE) when `input_type(i)` is None. In the validate phase only constant
    values are known (`value(i)` returns None otherwise); in the execute phase every value is a numpy
    array (scalars: 0-d arrays, read them with `scalar(i)`).
    """

    def __init__(self, *, op_index: int, code: OperationCode, input_types: Sequence[OperandType | None],
                 output_types: Sequence[OperandType], input_values: Sequence[Any],
                 input_operands: Sequence[int], output_operands: Sequence[int], phase: str,
                 relaxed: bool = False, error_code: ResultCode = ResultCode.BAD_DATA,
                 runner: SubgraphRunner | None = None):
        self.op_index = op_index
        self.code = code
        self._in_types = list(input_types)
        self._out_types = list(output_types)
        self._values = list(input_values)
        self._in_operands = list(input_operands)
        self._out_operands = list(output_operands)
        self.phase = phase
        self.relaxed = relaxed
        self._error_code = error_code
        self.output_shapes: list[Shape] | None = None
        #: the executor's subgraphs, for control flow; None while validating or building a model
        self.runner = runner
        #: outputs a control-flow operation computed while its shapes were asked for (see control_flow.py)
        self.control_flow_results: list[Any] | None = None

    def rebind(self, input_values: list[Any]) -> None:
        """The same operation, with the same types and prepared shapes, on new input values (one context
        reused run after run by cpu/bound_graph.py, where nothing prepare read can have changed)."""
        self._values = input_values

    # -- counts and types ---------------------------------------------------------------------
    @property
    def num_inputs(self) -> int:
        return len(self._in_types)

    @property
    def num_outputs(self) -> int:
        return len(self._out_types)

    def input_type(self, i: int) -> OperandType | None:
        return self._in_types[i]

    def output_type(self, i: int) -> OperandType:
        return self._out_types[i]

    def input_code(self, i: int) -> OperandCode | None:
        t = self._in_types[i]
        return None if t is None else t.code

    def is_omitted(self, i: int) -> bool:
        return i >= len(self._in_types) or self._in_types[i] is None

    @property
    def is_static(self) -> bool:
        return self.phase != "execute"

    # -- values -------------------------------------------------------------------------------
    def value(self, i: int) -> Any:
        """The operand's value: an array (or 0-d array for scalars); None when not known yet. Every read of
        a value indexes `_values` (cpu/bound_graph.py records what prepare reads there)."""
        types = self._in_types
        if i >= len(types) or types[i] is None:  # omitted (is_omitted, inline: on every kernel's path)
            return None
        return self._values[i]

    def require_value(self, i: int) -> Any:
        v = self.value(i)
        if v is None:
            if self.is_omitted(i):
                raise self.fail("required input is omitted", input=i)
            raise ValueUnknown(i)
        return v

    def scalar(self, i: int, default: Any = None) -> Any:
        """A scalar input as a Python value; `default` when omitted; raises ValueUnknown if unknown."""
        types = self._in_types
        if i < len(types) and types[i] is not None:  # value(), inline: on every kernel's path
            v = self._values[i]
            if v is not None:
                return v.item() if type(v) is np.ndarray else np.asarray(v).item()
        v = self.value(i)
        if v is None:
            if self.is_omitted(i):
                if default is None:
                    raise self.fail("required scalar input is omitted", input=i)
                return default
            raise ValueUnknown(i)
        return v.item() if type(v) is np.ndarray else np.asarray(v).item()

    def scalar_if_known(self, i: int) -> Any:
        v = self.value(i)
        return None if v is None else np.asarray(v).item()

    def input(self, i: int) -> np.ndarray:
        types = self._in_types
        if i < len(types) and types[i] is not None:  # value(), inline: on every kernel's path
            v = self._values[i]
            if v is not None:
                return v
        return self.require_value(i)  # the error

    def input_shape(self, i: int) -> Shape:
        """Fully known dimensions of input `i`; raises ValueUnknown at build time if not yet known."""
        t = self._in_types[i]
        if t is None:
            raise self.fail("required input is omitted", input=i)
        if t.dimensions is None or (self.is_static and not all(d > 0 for d in t.dimensions)):
            raise ValueUnknown(i)
        return t.dimensions

    def input_rank(self, i: int) -> int | None:
        t = self._in_types[i]
        return None if t is None else t.rank

    # -- errors -------------------------------------------------------------------------------
    def _where(self, input: int | None, output: int | None) -> str:
        if input is not None:
            operand = self._in_operands[input] if input < len(self._in_operands) else "?"
            return f": input {input} (operand {operand})"
        if output is not None:
            operand = self._out_operands[output] if output < len(self._out_operands) else "?"
            return f": output {output} (operand {operand})"
        return ""

    def fail(self, message: str, *, input: int | None = None, output: int | None = None,
             code: ResultCode | None = None) -> MltsError:
        return MltsError(code or self._error_code,
                         f"operation {self.op_index} ({self.code.name}){self._where(input, output)}: {message}")

    def check(self, condition: bool, message: str, *, input: int | None = None, output: int | None = None) -> None:
        if not condition:
            raise self.fail(message, input=input, output=output)

    # -- validation helpers (NNAPI validateInputTypes/validateOutputTypes style) -----------------
    def check_counts(self, inputs: int | Iterable[int], outputs: int | Iterable[int]) -> None:
        ins = (inputs,) if isinstance(inputs, int) else tuple(inputs)
        outs = (outputs,) if isinstance(outputs, int) else tuple(outputs)
        if self.num_inputs not in ins:
            raise self.fail(f"expected {' or '.join(map(str, ins))} inputs, got {self.num_inputs}")
        if self.num_outputs not in outs:
            raise self.fail(f"expected {' or '.join(map(str, outs))} outputs, got {self.num_outputs}")

    def check_input_type(self, i: int, allowed: OperandCode | Iterable[OperandCode], *,
                         optional: bool = False) -> None:
        allowed_set = {allowed} if isinstance(allowed, OperandCode) else set(allowed)
        t = self._in_types[i]
        if t is None:
            if not optional:
                raise self.fail("required input is omitted", input=i)
            return
        if t.code not in allowed_set:
            names = ", ".join(sorted(c.name for c in allowed_set))
            raise self.fail(f"type {t.code.name} not allowed (expected {names})", input=i)

    def check_output_type(self, i: int, allowed: OperandCode | Iterable[OperandCode]) -> None:
        allowed_set = {allowed} if isinstance(allowed, OperandCode) else set(allowed)
        t = self._out_types[i]
        if t.code not in allowed_set:
            names = ", ".join(sorted(c.name for c in allowed_set))
            raise self.fail(f"type {t.code.name} not allowed (expected {names})", output=i)

    def check_input_rank(self, i: int, ranks: int | Iterable[int] | None = None, *,
                         max_rank: int | None = None, min_rank: int | None = None) -> None:
        r = self.input_rank(i)
        if r is None:
            return
        if ranks is not None:
            allowed = (ranks,) if isinstance(ranks, int) else tuple(ranks)
            self.check(r in allowed, f"rank {r} not supported (expected {' or '.join(map(str, allowed))})", input=i)
        if max_rank is not None:
            self.check(r <= max_rank, f"rank {r} exceeds the maximum of {max_rank}", input=i)
        if min_rank is not None:
            self.check(r >= min_rank, f"rank {r} is below the minimum of {min_rank}", input=i)

    def check_same_quantization(self, i: int, *, output: int) -> None:
        """Ops like RESHAPE/MAX_POOL require the output to keep the input's scale and zero point."""
        a, b = self._in_types[i], self._out_types[output]
        if a is None:
            return
        if a.code != b.code:
            raise self.fail(f"output type {b.code.name} differs from input {i} type {a.code.name}", output=output)
        if a.scale != b.scale or a.zero_point != b.zero_point:
            raise self.fail(f"quantization (scale {b.scale:g}, zp {b.zero_point}) must equal input {i}'s "
                            f"(scale {a.scale:g}, zp {a.zero_point})", output=output)

    def check_fuse_code(self, i: int) -> None:
        self.check_input_type(i, OperandCode.INT32)
        v = self.scalar_if_known(i)
        if v is not None and v not in tuple(FuseCode):
            raise self.fail(f"invalid fused activation code {v}", input=i)


class Operation:
    """Base class of the registry's entries: override validate, prepare and execute."""

    code: OperationCode
    #: Operand codes of the operation's primary input for which the kernel exists; used by drivers
    #: to answer get_supported_operations and to look up declared performance.
    supported_types: frozenset[OperandCode] = frozenset()

    def validate(self, ctx: OperationContext) -> None:
        raise NotImplementedError

    def prepare(self, ctx: OperationContext) -> list[Shape]:
        raise NotImplementedError

    def execute(self, ctx: OperationContext) -> list[np.ndarray]:
        raise NotImplementedError

    def primary_type(self, ctx: OperationContext) -> OperandCode | None:
        """The operand type whose performance a driver declares for this operation (input 0's)."""
        return ctx.input_code(0) if ctx.num_inputs else None
