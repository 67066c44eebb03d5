"""The small models the conformance tests run, each with a hand-computable result: element-wise ADD
in float32 or uint8 (whichever the driver takes), an affine model whose weights live in a memory
pool (so a driver's data cache holds them), IF and WHILE models over INT32 counters and BOOL8
conditions, and a WHILE that never ends (for the loop timeout)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ...runtime import Memory, Model, OperandCode, OperandType, OperationCode

ADD, SUB, MUL = OperationCode.ADD, OperationCode.SUB, OperationCode.MUL
F32, U8 = OperandCode.TENSOR_FLOAT32, OperandCode.TENSOR_QUANT8_ASYMM
I32_1 = OperandType(OperandCode.TENSOR_INT32, (1,))   # a loop counter
BOOL_1 = OperandType(OperandCode.TENSOR_BOOL8, (1,))  # a condition
MODEL_REF = OperandType(OperandCode.MODEL)
INT = OperandType(OperandCode.INT32)
VECTOR = 16  # elements of the element-wise models
U8_SCALE, U8_ZERO = 0.5, 100  # uint8 operands: real = (q - 100) * 0.5


@dataclass
class ConformanceModel:
    """A finished model, example inputs, and the expected outputs for any inputs (`expect`)."""

    name: str
    model: Model
    inputs: list[np.ndarray]
    expect: Callable[..., list[np.ndarray]]
    exact: bool = True  # outputs compare bit-exactly (else within the float32 CTS tolerance)

    def expected(self, inputs: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        return self.expect(*(self.inputs if inputs is None else inputs))


class Builder:
    """A few lines per model: operands, constants, referenced models, operations (the runtime's control-flow
    tests build with it too)."""

    def __init__(self) -> None:
        self.m = Model()

    def operand(self, t: OperandType, value=None) -> int:
        i = self.m.add_operand(t)
        if value is not None:
            self.m.set_operand_value(i, value)
        return i

    def ref(self, model: Model) -> int:
        i = self.m.add_operand(MODEL_REF)
        self.m.set_operand_value_from_model(i, model)
        return i

    def op(self, code: OperationCode, inputs: list[int], *out_types: OperandType) -> int | list[int]:
        """One operation; its output operand (a list of them for several out types)."""
        outs = [self.operand(t) for t in out_types]
        self.m.add_operation(code, inputs, outs)
        return outs[0] if len(outs) == 1 else outs

    def arith(self, code: OperationCode, a: int, b: int, t: OperandType) -> int:
        return self.op(code, [a, b, self.operand(INT, np.int32(0))], t)

    def finish(self, inputs: list[int], outputs: list[int]) -> Model:
        self.m.identify_inputs_and_outputs(inputs, outputs)
        self.m.finish()
        return self.m


def _i32(v: int) -> np.ndarray:
    return np.array([v], np.int32)


# -- element-wise ---------------------------------------------------------------------------------
def add_model(code: OperandCode, seed: int = 0) -> ConformanceModel:
    """out = a + b over VECTOR elements, float32 or uint8 (hand-computed, exact in both)."""
    rng = np.random.default_rng(seed)
    if code == F32:
        t = OperandType(F32, (VECTOR,))
        # Multiples of 1/8 in [-64, 64]: every sum is exact in float32.
        a, b = (rng.integers(-512, 512, VECTOR).astype(np.float32) / 8 for _ in range(2))

        def expect(x, y):
            return [(x + y).astype(np.float32)]
    else:
        t = OperandType(U8, (VECTOR,), U8_SCALE, U8_ZERO)
        # Same scale and zero point in and out: q_out = q_a + q_b - zero, kept inside [0, 255].
        a, b = (rng.integers(50, 176, VECTOR).astype(np.uint8) for _ in range(2))

        def expect(x, y):
            return [np.clip(x.astype(np.int32) + y.astype(np.int32) - U8_ZERO, 0, 255).astype(np.uint8)]
    bld = Builder()
    x, y = bld.operand(t), bld.operand(t)
    model = bld.finish([x, y], [bld.arith(ADD, x, y, t)])
    return ConformanceModel(f"add_{'f32' if code == F32 else 'u8'}", model, [a, b], expect)


def affine_model(code: OperandCode, seed: int) -> ConformanceModel:
    """out = (x + w) * c: w a CONSTANT_REFERENCE in a shared-memory pool, c a small CONSTANT_COPY, so a
    driver's cache holds both kinds of constants; models of other seeds differ only in w and c."""
    rng = np.random.default_rng(1000 + seed)
    n = 64
    if code == F32:
        t = OperandType(F32, (n,))
        w = (rng.integers(-64, 64, n) / 4).astype(np.float32)
        c = (rng.integers(1, 4, n) * np.where(rng.random(n) < 0.5, -1, 1)).astype(np.float32)
        x = (rng.integers(-64, 64, n) / 4).astype(np.float32)

        def expect(xv):
            return [((xv + w) * c).astype(np.float32)]
    else:
        t = OperandType(U8, (n,), U8_SCALE, U8_ZERO)
        # Real values are small integers so the products stay exact on the uint8 grid.
        w = (U8_ZERO + rng.integers(-8, 8, n)).astype(np.uint8)
        c = (U8_ZERO + 2 * rng.integers(-2, 3, n)).astype(np.uint8)  # real c in {-2, -1, 0, 1, 2}
        x = (U8_ZERO + rng.integers(-8, 8, n)).astype(np.uint8)

        def expect(xv):
            real = ((xv.astype(np.float64) - U8_ZERO) * U8_SCALE + (w.astype(np.float64) - U8_ZERO) * U8_SCALE) \
                * ((c.astype(np.float64) - U8_ZERO) * U8_SCALE)
            return [np.clip(np.round(real / U8_SCALE) + U8_ZERO, 0, 255).astype(np.uint8)]
    memory = Memory.create_shared(w.nbytes)
    memory.array(0, w.dtype, w.shape)[:] = w
    bld = Builder()
    xi = bld.operand(t)
    wi = bld.m.add_operand(t)
    bld.m.set_operand_value_from_memory(wi, memory, 0, w.nbytes)
    ci = bld.operand(t, c)
    model = bld.finish([xi], [bld.arith(MUL, bld.arith(ADD, xi, wi, t), ci, t)])
    model._conformance_memory = memory  # the pool lives as long as the model
    return ConformanceModel(f"affine_{'f32' if code == F32 else 'u8'}_{seed}", model, [x], expect)


# -- control flow ---------------------------------------------------------------------------------
def _binary_branch(code: OperationCode) -> Model:
    bld = Builder()
    x, y = bld.operand(I32_1), bld.operand(I32_1)
    return bld.finish([x, y], [bld.arith(code, x, y, I32_1)])


def if_model() -> ConformanceModel:
    """(cond, a, b) -> IF(cond, a + b, a - b) on shape-[1] INT32 tensors."""
    bld = Builder()
    cond, a, b = bld.operand(BOOL_1), bld.operand(I32_1), bld.operand(I32_1)
    out = bld.op(OperationCode.IF, [cond, bld.ref(_binary_branch(ADD)), bld.ref(_binary_branch(SUB)), a, b], I32_1)
    model = bld.finish([cond, a, b], [out])

    def expect(c, x, y):
        return [(x + y if bool(c[0]) else x - y).astype(np.int32)]
    return ConformanceModel("if_i32", model, [np.array([True]), _i32(30), _i32(12)], expect)


def while_sum_model() -> ConformanceModel:
    """n -> 1 + 2 + ... + n: a WHILE with an INT32 counter, a LESS_EQUAL condition and ADDs."""
    cond = Builder()
    s, i, n = cond.operand(I32_1), cond.operand(I32_1), cond.operand(I32_1)
    cond_model = cond.finish([s, i, n], [cond.op(OperationCode.LESS_EQUAL, [i, n], BOOL_1)])
    body = Builder()
    s, i, n = body.operand(I32_1), body.operand(I32_1), body.operand(I32_1)
    body_model = body.finish([s, i, n], [body.arith(ADD, s, i, I32_1),
                                         body.arith(ADD, i, body.operand(I32_1, _i32(1)), I32_1)])
    bld = Builder()
    n = bld.operand(I32_1)
    out = bld.op(OperationCode.WHILE, [bld.ref(cond_model), bld.ref(body_model), bld.operand(I32_1, _i32(0)),
                                       bld.operand(I32_1, _i32(1)), n], I32_1)
    model = bld.finish([n], [out])

    def expect(nv):
        k = int(nv[0])
        return [_i32(k * (k + 1) // 2 if k > 0 else 0)]
    return ConformanceModel("while_sum_i32", model, [_i32(10)], expect)


def endless_loop_model() -> ConformanceModel:
    """i -> WHILE(i >= 0) i = i + 1: ends only by the loop timeout."""
    cond = Builder()
    i = cond.operand(I32_1)
    cond_model = cond.finish([i], [cond.op(OperationCode.GREATER_EQUAL, [i, cond.operand(I32_1, _i32(0))], BOOL_1)])
    body = Builder()
    j = body.operand(I32_1)
    body_model = body.finish([j], [body.arith(ADD, j, body.operand(I32_1, _i32(1)), I32_1)])
    bld = Builder()
    start = bld.operand(I32_1)
    out = bld.op(OperationCode.WHILE, [bld.ref(cond_model), bld.ref(body_model), start], I32_1)
    return ConformanceModel("endless_while_i32", bld.finish([start], [out]), [_i32(0)], lambda _: [])


__all__ = ["ConformanceModel", "F32", "U8", "add_model", "affine_model", "endless_loop_model", "if_model",
           "while_sum_model"]
