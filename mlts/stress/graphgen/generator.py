"""Grow a random valid NNAPI graph from one input tensor.

Each step picks a tensor of the graph and an operation that can consume it (an "applier" per
operation, which knows the operation's signature, draws its parameters, constants or extra inputs,
and computes the output type), so every graph is valid by construction. Graphs are single-operation,
small (2-5) or large (8-24 operations), float32 or 8-bit quantized (uint8 or int8), with bool and
int32 side branches, random dimensions, constants or model inputs as second operands, and omitted
optional operands. Drivers legitimately differ within the CTS tolerances; to keep a healthy driver
from failing through amplified rounding, the graph tracks which tensors are bit-exact and a bound on
float magnitudes (see `growing`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...runtime import OperandCode, OperandType, OperationCode
from . import comparisons_and_casts, elementwise, shape_ops, spatial
from .growing import B8, F32, I32, S8, U8, Applier, GrowingGraph, Tensor

SIZES = ("single", "small", "small", "large")
#: how often an operation is tried first (the MobileNet-class operations drivers care most about)
WEIGHTS = {"CONV_2D": 5.0, "DEPTHWISE_CONV_2D": 4.0, "FULLY_CONNECTED": 2.0, "AVERAGE_POOL_2D": 2.0,
           "MAX_POOL_2D": 2.0, "ADD": 2.0, "MUL": 1.5, "SOFTMAX": 1.5}
#: Every operation the generator can add, by the name the support probe uses. The order is part of what a
#: seed means: a graph is only reproducible from its seed with the same order.
APPLIERS: dict[str, Applier] = {**elementwise.APPLIERS, **spatial.APPLIERS, **shape_ops.APPLIERS,
                                **comparisons_and_casts.APPLIERS}
#: The operand codes the support probe tries each operation on.
PROBE_CODES = (F32, U8, S8, I32, B8)


class GraphGenerator(GrowingGraph):
    """`generate(seed, size)` -> a graph spec; `allowed` limits the (operation, operand code) pairs."""

    def __init__(self, allowed: set[tuple[str, str]] | None = None) -> None:
        self.allowed = allowed

    def generate(self, seed: int, size: str | None = None) -> dict[str, Any]:
        """One valid graph; deterministic in (seed, size, allowed)."""
        self.begin(seed)
        size = size or SIZES[seed % len(SIZES)]
        n_ops = {"single": 1, "small": int(self.rng.integers(2, 6)), "large": int(self.rng.integers(8, 25))}[size]
        families = [c for c in (F32, U8, S8) if self._family_allowed(c)] or [F32]
        family = self.choice([f for f in families if f == F32] * 2 + [f for f in families if f != F32]) \
            if F32 in families else self.choice(families)
        self.pool = [self.start_tensor(family)]
        made = 0
        for _ in range(n_ops * 20):
            if made == n_ops:
                break
            # Mostly extend the newest tensors (deep graphs), sometimes branch from older ones.
            t = self.pool[-1] if self.chance(0.6) else self.choice(self.pool)
            options = [(name, fn) for name, fn in APPLIERS.items() if self._op_allowed(name, t.code)]
            if not options:
                continue
            weights = np.asarray([WEIGHTS.get(name, 1.0) for name, _ in options])
            order = self.rng.choice(len(options), size=len(options), replace=False, p=weights / weights.sum())
            for name, fn in (options[int(j)] for j in order):
                out = fn(self, t)
                if out is not None:
                    self.pool.append(out)
                    made += 1
                    break
        if made == 0:  # nothing the driver takes applies to this start: an identity RESHAPE
            t = self.pool[0]
            o = self.out(t, t.type, exact=t.exact, bound=t.bound)
            self.pool.append(self.emit(OperationCode.RESHAPE, [t.index, self.b.i32_tensor(list(t.dims))], [o], [t]))
        for t in self.pool:
            if t.index not in self.consumed and t.index not in self.b.inputs:
                self.b.output(t.index)
        return self.b.spec(seed=int(seed), size=size, generator="mlts.stress.random_graphs")

    def _family_allowed(self, code: OperandCode) -> bool:
        return self.allowed is None or any(c == code.name for _, c in self.allowed)

    def _op_allowed(self, name: str, code: OperandCode) -> bool:
        return self.allowed is None or (name, code.name) in self.allowed


def probe_pairs() -> list[tuple[str, str]]:
    """Every (operation, input operand code) pair the support probe asks a driver about."""
    return [(name, code.name) for name in APPLIERS for code in PROBE_CODES]


def single_op_spec(name: str, code_name: str, seed: int) -> dict[str, Any] | None:
    """A one-operation graph applying `name` to a fresh input of type `code_name` (None if it cannot)."""
    g = GraphGenerator()
    g.begin(seed)
    code = OperandCode[code_name]
    if code == B8:
        t_type = OperandType.tensor(B8, (2, 3))
        t = Tensor(g.b.input(t_type, g.values(t_type)), t_type)
    elif code == I32:
        t_type = OperandType.tensor(I32, (2, 3, 4))
        t = Tensor(g.b.input(t_type, g.values(t_type)), t_type, True, 8.0)
    else:
        t = g.start_tensor(code, rank=4)
    out = APPLIERS[name](g, t)
    if out is None:
        return None
    g.b.output(out.index)
    return g.b.spec(seed=seed, size="single")
