"""Random valid NNAPI graphs, run on a driver and compared with nnapi-reference (CTS tolerances).

The generator grows a graph from one input tensor: each step picks a tensor of the graph and an
operation that can consume it (an "applier" per operation, which knows the operation's signature,
draws its parameters, constants or extra inputs, and computes the output type), so every graph is
valid by construction. Graphs are single-operation, small (2-5) or large (8-24 operations), float32
or 8-bit quantized (uint8 or int8), with bool and int32 side branches, random dimensions, constants
or model inputs as second operands, and omitted optional operands.

Drivers legitimately differ within the CTS tolerances; to keep a healthy driver from failing through
amplified rounding, the generator tracks which tensors are bit-exact across correct drivers and a
bound on float magnitudes: rounding-sensitive operations (comparisons, float-to-int casts,
quantized arithmetic) only consume exact tensors, and float arithmetic only small values.

A mismatch or an API error on a graph the driver claims to support is a FAILURE; the graph is saved
as a spec (mlts.stress.graph_spec) that `mlts stress --replay FILE` runs again.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..runtime import (FuseCode, MltsError, OperandCode, OperandType, OperationCode, PaddingCode,
                       SymmPerChannelQuantParams)
from .context import StressContext, describe_error
from .graph_spec import GraphBuilder, build_model, describe, save_spec
from .models import compare
from .shrink import Shrunk, shrink

F32 = OperandCode.TENSOR_FLOAT32
U8 = OperandCode.TENSOR_QUANT8_ASYMM
S8 = OperandCode.TENSOR_QUANT8_ASYMM_SIGNED
I32 = OperandCode.TENSOR_INT32
B8 = OperandCode.TENSOR_BOOL8
PC = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
QUANT = (U8, S8)
MAX_ELEMENTS = 4096
FLOAT_BOUND = 4.0  # float arithmetic only on tensors known to stay within this magnitude
INT_BOUND = 1 << 20
SIZES = ("single", "small", "small", "large")
#: how often an operation is tried first (the MobileNet-class operations drivers care most about)
WEIGHTS = {"CONV_2D": 5.0, "DEPTHWISE_CONV_2D": 4.0, "FULLY_CONNECTED": 2.0, "AVERAGE_POOL_2D": 2.0,
           "MAX_POOL_2D": 2.0, "ADD": 2.0, "MUL": 1.5, "SOFTMAX": 1.5}


@dataclass(frozen=True)
class Tensor:
    """A tensor operand of the graph being grown, with what the generator knows of its values."""

    index: int
    type: OperandType
    exact: bool = True  # bit-identical on every correct driver (no rounding-sensitive step made it)
    bound: float = 2.0  # an upper estimate of |value| (real value for quantized tensors)

    @property
    def code(self) -> OperandCode:
        return self.type.code

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(self.type.dimensions or ())

    @property
    def rank(self) -> int:
        return len(self.dims)


def _count(dims) -> int:
    return int(np.prod(dims, dtype=np.int64)) if dims else 1


class GraphGenerator:
    """`generate(seed, size)` -> a graph spec; `allowed` limits the (operation, operand code) pairs."""

    def __init__(self, allowed: set[tuple[str, str]] | None = None) -> None:
        self.allowed = allowed

    # -- the pieces every applier uses ---------------------------------------------------------
    def _begin(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.b = GraphBuilder()
        self.consumed: set[int] = set()
        self.pool: list[Tensor] = []

    def choice(self, options):
        return options[int(self.rng.integers(len(options)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def quant_params(self, code: OperandCode) -> tuple[float, int]:
        scale = float(np.float32(math.exp(self.rng.uniform(math.log(0.004), math.log(0.1)))))
        zp = int(self.rng.integers(100, 157)) if code == U8 else int(self.rng.integers(-28, 29))
        return scale, zp

    def values(self, t: OperandType, *, nonzero: bool = False) -> np.ndarray:
        dims = t.dimensions or ()
        if t.code == F32:
            v = self.rng.uniform(-2, 2, dims)
            if nonzero:
                v = np.sign(v + 1e-9) * self.rng.uniform(0.5, 2, dims)
            return v.astype(np.float32)
        if t.code == I32:
            v = self.rng.integers(-8, 9, dims)
            if nonzero:
                v = np.where(v == 0, 3, v)
            return v.astype(np.int32)
        if t.code == B8:
            return self.rng.integers(0, 2, dims).astype(np.bool_)
        info = np.iinfo(t.dtype)
        return self.rng.integers(info.min, int(info.max) + 1, dims).astype(t.dtype)

    def operand(self, t: OperandType, *, nonzero: bool = False, const: bool | None = None) -> int:
        """A second operand: a constant or a new model input (both are worth testing)."""
        value = self.values(t, nonzero=nonzero)
        if const if const is not None else self.chance(0.5):
            return self.b.const(t, value)
        return self.b.input(t, value)

    def out(self, src: Tensor, t: OperandType, *, exact: bool, bound: float) -> Tensor:
        """A new temporary operand for the output of an operation on `src`."""
        i = self.b.temp(t)
        return Tensor(i, t, exact, bound)

    def emit(self, code: OperationCode, inputs: list[int], outs: list[Tensor], consumed: list[Tensor]) -> Tensor:
        self.b.op(code, inputs, [o.index for o in outs])
        for c in consumed:
            self.consumed.add(c.index)
        return outs[0]

    def real_bound(self, t: Tensor) -> float:
        if t.code in QUANT:
            info = np.iinfo(t.type.dtype)
            return t.type.scale * max(info.max - t.type.zero_point, t.type.zero_point - info.min)
        return t.bound

    # -- generation ----------------------------------------------------------------------------
    def start_tensor(self, family: OperandCode, rank: int | None = None) -> Tensor:
        rank = rank or self.choice([4, 4, 4, 1, 2, 3])
        if rank == 4:
            dims = (int(self.rng.integers(1, 3)), int(self.rng.integers(3, 9)), int(self.rng.integers(3, 9)),
                    int(self.rng.integers(1, 7)))
        else:
            dims = tuple(int(self.rng.integers(1, 7)) for _ in range(rank))
        if family in QUANT:
            t = OperandType.tensor(family, dims, *self.quant_params(family))
        else:
            t = OperandType.tensor(family, dims)
        return Tensor(self.b.input(t, self.values(t)), t, True, 2.0 if family == F32 else 8.0)

    def generate(self, seed: int, size: str | None = None) -> dict[str, Any]:
        """One valid graph; deterministic in (seed, size, allowed)."""
        self._begin(seed)
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


# -- appliers: one per operation; each returns the output Tensor or None when t does not fit ------
Applier = Callable[[GraphGenerator, Tensor], "Tensor | None"]
APPLIERS: dict[str, Applier] = {}


def applier(name: str):
    """Register an applier under an operation name (the name the support probe uses)."""
    def register(fn: Applier) -> Applier:
        APPLIERS[name] = fn
        return fn
    return register


def _broadcast_partner(g: GraphGenerator, t: Tensor) -> tuple[int, ...]:
    dims = list(t.dims)
    kind = int(g.rng.integers(3))
    if kind == 0 or not dims:
        return tuple(dims)
    if kind == 1:
        return tuple(1 if g.chance(0.5) else d for d in dims)
    return tuple(dims[int(g.rng.integers(len(dims))):]) or (1,)


def _fuse(g: GraphGenerator) -> int:
    return int(g.choice([FuseCode.NONE, FuseCode.NONE, FuseCode.RELU, FuseCode.RELU1, FuseCode.RELU6]))


def _fused_bound(fuse: int, bound: float) -> float:
    return {FuseCode.RELU1: 1.0, FuseCode.RELU6: 6.0}.get(fuse, bound)


def _binary(code: OperationCode, types: tuple):
    def apply(g: GraphGenerator, t: Tensor) -> Tensor | None:
        if t.code not in types or t.rank == 0:
            return None
        if t.code in QUANT and not t.exact:
            return None
        if t.code == F32 and t.bound > FLOAT_BOUND:
            return None
        if t.code == I32 and (not t.exact or t.bound > INT_BOUND / 16):
            return None
        pdims = _broadcast_partner(g, t)
        divide = code == OperationCode.DIV
        if t.code in QUANT:
            p_t = OperandType.tensor(t.code, pdims, *g.quant_params(t.code))
        else:
            p_t = OperandType.tensor(t.code, pdims)
        other = g.operand(p_t, nonzero=divide)
        fuse = FuseCode.NONE if t.code == I32 else _fuse(g)
        out_dims = tuple(max(a, b) for a, b in zip((1,) * (t.rank - len(pdims)) + pdims, t.dims))
        if t.code in QUANT:
            s1, s2 = t.type.scale, p_t.scale
            if code == OperationCode.MUL:
                scale = float(np.float32(s1 * s2 * g.rng.uniform(40, 400)))
            else:
                scale = float(np.float32(max(s1, s2) * g.rng.uniform(1.0, 3.0)))
            zp = g.quant_params(t.code)[1]
            o_t = OperandType.tensor(t.code, out_dims, scale, zp)
            bound = 0.0
        else:
            o_t = OperandType.tensor(t.code, out_dims)
            pb = 2.0 if t.code == F32 else 8.0
            bound = {OperationCode.ADD: t.bound + pb, OperationCode.SUB: t.bound + pb,
                     OperationCode.MUL: t.bound * pb, OperationCode.DIV: t.bound * 2.0}[code]
            bound = _fused_bound(fuse, bound)
        o = g.out(t, o_t, exact=t.code != F32, bound=bound)
        return g.emit(code, [t.index, other, g.b.i32(fuse)], [o], [t])
    return apply


for _code, _types in ((OperationCode.ADD, (F32, U8, S8, I32)), (OperationCode.SUB, (F32, U8, S8, I32)),
                      (OperationCode.MUL, (F32, U8, S8, I32)), (OperationCode.DIV, (F32, I32))):
    APPLIERS[_code.name] = _binary(_code, _types)


def _activation(code: OperationCode):
    def apply(g: GraphGenerator, t: Tensor) -> Tensor | None:
        if t.code not in (F32, U8, S8) or t.rank == 0 or t.rank > 4:
            return None
        transcendental = code in (OperationCode.LOGISTIC, OperationCode.TANH)
        if t.code in QUANT:
            if transcendental and not t.exact:
                return None
            signed = t.code == S8
            if code == OperationCode.LOGISTIC:
                o_t = OperandType.tensor(t.code, t.dims, 1.0 / 256, -128 if signed else 0)
            elif code == OperationCode.TANH:
                o_t = OperandType.tensor(t.code, t.dims, 1.0 / 128, 0 if signed else 128)
            else:
                o_t = t.type
            exact = t.exact
        else:
            o_t = t.type
            exact = t.exact and not transcendental
        bound = {OperationCode.RELU1: 1.0, OperationCode.RELU6: 6.0, OperationCode.LOGISTIC: 1.0,
                 OperationCode.TANH: 1.0}.get(code, t.bound)
        return g.emit(code, [t.index], [g.out(t, o_t, exact=exact, bound=bound)], [t])
    return apply


for _code in (OperationCode.RELU, OperationCode.RELU1, OperationCode.RELU6, OperationCode.LOGISTIC, OperationCode.TANH):
    APPLIERS[_code.name] = _activation(_code)


@applier("SOFTMAX")
def _softmax(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4 or (t.code in QUANT and not t.exact):
        return None
    if t.code == F32 and t.bound > 2 * FLOAT_BOUND:
        return None
    ins = [t.index, g.b.f32(float(g.choice([0.5, 1.0, 1.5])))]
    if g.chance(0.5):
        ins.append(g.b.i32(int(g.rng.integers(-t.rank, t.rank))))  # else the optional axis is left out
    o_t = t.type if t.code == F32 else OperandType.tensor(t.code, t.dims, 1.0 / 256, -128 if t.code == S8 else 0)
    return g.emit(OperationCode.SOFTMAX, ins, [g.out(t, o_t, exact=t.code != F32, bound=1.0)], [t])


def _spatial(g: GraphGenerator, t: Tensor, k_max: int = 3) -> tuple | None:
    """(kh, kw, stride_h, stride_w, padding scalars, out_h, out_w) for a 4-D NHWC tensor."""
    n, h, w, c = t.dims
    kh, kw = int(g.rng.integers(1, min(k_max, h) + 1)), int(g.rng.integers(1, min(k_max, w) + 1))
    sh, sw = int(g.rng.integers(1, 3)), int(g.rng.integers(1, 3))
    if g.chance(0.3):  # explicit padding, each side smaller than the filter
        pl, pr = int(g.rng.integers(0, kw)), int(g.rng.integers(0, kw))
        pt, pb = int(g.rng.integers(0, kh)), int(g.rng.integers(0, kh))
        oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
        if oh <= 0 or ow <= 0:
            return None
        return kh, kw, sh, sw, ("explicit", pl, pr, pt, pb), oh, ow
    code = g.choice([PaddingCode.SAME, PaddingCode.VALID])
    if code == PaddingCode.SAME:
        oh, ow = -(-h // sh), -(-w // sw)
    else:
        oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    return kh, kw, sh, sw, ("implicit", int(code)), oh, ow


def _padding_inputs(g: GraphGenerator, padding: tuple) -> list[int]:
    return [g.b.i32(v) for v in padding[1:]]


def _conv(depthwise: bool):
    def apply(g: GraphGenerator, t: Tensor) -> Tensor | None:
        if t.code not in (F32, U8, S8) or t.rank != 4 or not t.exact and t.code in QUANT:
            return None
        if t.code == F32 and t.bound > FLOAT_BOUND:
            return None
        geo = _spatial(g, t)
        if geo is None:
            return None
        kh, kw, sh, sw, padding, oh, ow = geo
        n, h, w, c = t.dims
        mult = int(g.rng.integers(1, 3)) if depthwise else 1
        out_c = c * mult if depthwise else int(g.rng.integers(1, 9))
        if n * oh * ow * out_c > MAX_ELEMENTS:
            return None
        f_dims = (1, kh, kw, out_c) if depthwise else (out_c, kh, kw, c)
        fan_in = kh * kw * (1 if depthwise else c)
        weights = g.rng.standard_normal(f_dims) / math.sqrt(fan_in)
        fuse = _fuse(g)
        if t.code == F32:
            f_idx = g.b.const(OperandType.tensor(F32, f_dims), weights)
            b_idx = g.b.const(OperandType.tensor(F32, (out_c,)), g.rng.uniform(-0.1, 0.1, out_c))
            o_t = OperandType.tensor(F32, (n, oh, ow, out_c))
            bound = _fused_bound(fuse, 3 * t.bound + 0.1)
        else:
            s_in = t.type.scale
            if g.chance(0.3):  # per-channel filter (channelDim 0 for CONV_2D, 3 for DEPTHWISE_CONV_2D)
                per = np.abs(weights).reshape(-1, out_c).max(axis=0) if depthwise else \
                    np.abs(weights).reshape(out_c, -1).max(axis=1)
                scales = tuple(float(np.float32(max(s, 1e-3) / 127)) for s in per)
                shape = (1, 1, 1, out_c) if depthwise else (out_c, 1, 1, 1)
                q = np.clip(np.round(weights / np.asarray(scales).reshape(shape)), -127, 127).astype(np.int8)
                f_t = OperandType.tensor(PC, f_dims, 0.0, 0, SymmPerChannelQuantParams(scales, 3 if depthwise else 0))
                b_t = OperandType.tensor(I32, (out_c,), 0.0, 0)
                product = max(scales) * s_in
            else:
                s_f = float(np.float32(np.abs(weights).max() / 127 or 1.0))
                zp_f = int(g.rng.integers(120, 137)) if t.code == U8 else 0
                q = np.clip(np.round(weights / s_f) + zp_f, *((0, 255) if t.code == U8 else (-127, 127)))
                f_t = OperandType.tensor(t.code, f_dims, s_f, zp_f)
                product = float(np.float32(s_in) * np.float32(s_f))
                b_t = OperandType.tensor(I32, (out_c,), product, 0)
            f_idx = g.b.const(f_t, q)
            b_idx = g.b.const(b_t, np.round(g.rng.uniform(-0.1, 0.1, out_c) / product).astype(np.int32))
            real_in = g.real_bound(t)
            o_scale = float(np.float32(max(real_in * math.sqrt(fan_in) * 2 / 255, product * 2)))
            o_t = OperandType.tensor(t.code, (n, oh, ow, out_c), o_scale, g.quant_params(t.code)[1])
            bound = 0.0
        ins = [t.index, f_idx, b_idx] + _padding_inputs(g, padding) + [g.b.i32(sw), g.b.i32(sh)]
        if depthwise:
            ins.append(g.b.i32(mult))
        ins.append(g.b.i32(fuse))
        if padding[0] == "implicit" and g.chance(0.15):  # layout flag (NHWC) and dilation 1 given explicitly
            ins += [g.b.boolean(False), g.b.i32(1), g.b.i32(1)]
        code = OperationCode.DEPTHWISE_CONV_2D if depthwise else OperationCode.CONV_2D
        return g.emit(code, ins, [g.out(t, o_t, exact=t.code != F32, bound=bound)], [t])
    return apply


APPLIERS["CONV_2D"] = _conv(False)
APPLIERS["DEPTHWISE_CONV_2D"] = _conv(True)


def _pool(code: OperationCode):
    def apply(g: GraphGenerator, t: Tensor) -> Tensor | None:
        types = (F32,) if code == OperationCode.L2_POOL_2D else (F32, U8, S8)
        if t.code not in types or t.rank != 4:
            return None
        if code != OperationCode.MAX_POOL_2D and t.code in QUANT and not t.exact:
            return None
        geo = _spatial(g, t)
        if geo is None:
            return None
        kh, kw, sh, sw, padding, oh, ow = geo
        n, h, w, c = t.dims
        fuse = _fuse(g)
        ins = [t.index] + _padding_inputs(g, padding) + [g.b.i32(sw), g.b.i32(sh), g.b.i32(kw), g.b.i32(kh),
                                                        g.b.i32(fuse)]
        o_t = t.type.with_dimensions((n, oh, ow, c))
        exact = t.exact and code == OperationCode.MAX_POOL_2D
        bound = _fused_bound(fuse, t.bound * (kh * kw if code == OperationCode.L2_POOL_2D else 1))
        return g.emit(code, ins, [g.out(t, o_t, exact=exact, bound=bound)], [t])
    return apply


for _code in (OperationCode.AVERAGE_POOL_2D, OperationCode.MAX_POOL_2D, OperationCode.L2_POOL_2D):
    APPLIERS[_code.name] = _pool(_code)


@applier("FULLY_CONNECTED")
def _fully_connected(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 2 <= t.rank <= 4 or (t.code in QUANT and not t.exact):
        return None
    if t.code == F32 and t.bound > FLOAT_BOUND:
        return None
    size = t.dims[-1]
    batch = _count(t.dims) // size
    units = int(g.rng.integers(1, 9))
    weights = g.rng.standard_normal((units, size)) / math.sqrt(size)
    fuse = _fuse(g)
    if t.code == F32:
        w_idx = g.b.const(OperandType.tensor(F32, (units, size)), weights)
        b_idx = g.b.const(OperandType.tensor(F32, (units,)), g.rng.uniform(-0.1, 0.1, units))
        o_t = OperandType.tensor(F32, (batch, units))
        bound = _fused_bound(fuse, 3 * t.bound + 0.1)
    else:
        s_f = float(np.float32(np.abs(weights).max() / 127 or 1.0))
        zp_f = int(g.rng.integers(120, 137)) if t.code == U8 else 0
        q = np.clip(np.round(weights / s_f) + zp_f, *((0, 255) if t.code == U8 else (-127, 127)))
        product = float(np.float32(t.type.scale) * np.float32(s_f))
        w_idx = g.b.const(OperandType.tensor(t.code, (units, size), s_f, zp_f), q)
        b_idx = g.b.const(OperandType.tensor(I32, (units,), product, 0),
                          np.round(g.rng.uniform(-0.1, 0.1, units) / product).astype(np.int32))
        o_scale = float(np.float32(max(g.real_bound(t) * math.sqrt(size) * 2 / 255, product * 2)))
        o_t = OperandType.tensor(t.code, (batch, units), o_scale, g.quant_params(t.code)[1])
        bound = 0.0
    return g.emit(OperationCode.FULLY_CONNECTED, [t.index, w_idx, b_idx, g.b.i32(fuse)],
                  [g.out(t, o_t, exact=t.code != F32, bound=bound)], [t])


@applier("CONCATENATION")
def _concatenation(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4:
        return None
    axis = int(g.rng.integers(t.rank))
    parts = [t]
    others = []
    for _ in range(int(g.rng.integers(1, 3))):
        dims = list(t.dims)
        dims[axis] = int(g.rng.integers(1, 4))
        if t.code in QUANT:
            same = g.chance(0.5)
            p_t = OperandType.tensor(t.code, dims, *((t.type.scale, t.type.zero_point) if same
                                                     else g.quant_params(t.code)))
        else:
            p_t = OperandType.tensor(t.code, dims)
        others.append((g.operand(p_t), p_t))
    total = t.dims[axis] + sum(p.dimensions[axis] for _, p in others)
    out_dims = list(t.dims)
    out_dims[axis] = total
    if _count(out_dims) > MAX_ELEMENTS:
        return None
    requantized = t.code in QUANT and any((p.scale, p.zero_point) != (t.type.scale, t.type.zero_point)
                                          for _, p in others)
    if requantized and not t.exact:
        return None
    o_t = t.type.with_dimensions(tuple(out_dims))
    ins = [t.index] + [i for i, _ in others] + [g.b.i32(axis)]
    return g.emit(OperationCode.CONCATENATION, ins, [g.out(t, o_t, exact=t.exact, bound=max(t.bound, 2.0))], parts)


@applier("RESHAPE")
def _reshape(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8, I32) or t.rank == 0:
        return None
    count = _count(t.dims)
    factors = []
    n = count
    p = 2
    while p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    if n > 1:
        factors.append(n)
    rank = int(g.rng.integers(1, 5))
    dims = [1] * rank
    for f in factors:
        dims[int(g.rng.integers(rank))] *= f
    target = list(dims)
    if g.chance(0.3):
        target[int(g.rng.integers(rank))] = -1
    o_t = t.type.with_dimensions(tuple(dims))
    return g.emit(OperationCode.RESHAPE, [t.index, g.b.i32_tensor(target)],
                  [g.out(t, o_t, exact=t.exact, bound=t.bound)], [t])


@applier("SQUEEZE")
def _squeeze(g: GraphGenerator, t: Tensor) -> Tensor | None:
    ones = [d for d, s in enumerate(t.dims) if s == 1]
    if t.code not in (F32, U8, S8) or not ones or t.rank > 4:
        return None
    if g.chance(0.5):
        axes_idx = g.b.omitted(OperandType.tensor(I32, (1,)))  # omitted: every size-1 dimension goes
        drop = set(ones)
    else:
        drop = {d for d in ones if g.chance(0.6)} or {ones[0]}
        axes_idx = g.b.i32_tensor([d - t.rank if g.chance(0.3) else d for d in sorted(drop)])
    out = tuple(s for d, s in enumerate(t.dims) if d not in drop) or (1,)
    return g.emit(OperationCode.SQUEEZE, [t.index, axes_idx],
                  [g.out(t, t.type.with_dimensions(out), exact=t.exact, bound=t.bound)], [t])


@applier("TRANSPOSE")
def _transpose(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4:
        return None
    if g.chance(0.3):
        perm = list(range(t.rank))[::-1]
        perm_idx = g.b.omitted(OperandType.tensor(I32, (t.rank,)))
    else:
        perm = [int(p) for p in g.rng.permutation(t.rank)]
        perm_idx = g.b.i32_tensor(perm)
    out = tuple(t.dims[p] for p in perm)
    return g.emit(OperationCode.TRANSPOSE, [t.index, perm_idx],
                  [g.out(t, t.type.with_dimensions(out), exact=t.exact, bound=t.bound)], [t])


@applier("MEAN")
def _mean(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4 or (t.code in QUANT and not t.exact):
        return None
    axes = sorted({int(a) for a in g.rng.integers(0, t.rank, int(g.rng.integers(1, t.rank + 1)))})
    keep = int(g.chance(0.5))
    out = tuple(1 if d in axes else s for d, s in enumerate(t.dims)) if keep else \
        (tuple(s for d, s in enumerate(t.dims) if d not in axes) or (1,))
    return g.emit(OperationCode.MEAN, [t.index, g.b.i32_tensor(axes), g.b.i32(keep)],
                  [g.out(t, t.type.with_dimensions(out), exact=False, bound=t.bound)], [t])


def _pad(v2: bool):
    def apply(g: GraphGenerator, t: Tensor) -> Tensor | None:
        if t.code not in (F32, U8, S8) or not 1 <= t.rank <= 4:
            return None
        pads = [[int(g.rng.integers(0, 3)), int(g.rng.integers(0, 3))] for _ in range(t.rank)]
        out = tuple(a + s + b for s, (a, b) in zip(t.dims, pads))
        if _count(out) > MAX_ELEMENTS:
            return None
        ins = [t.index, g.b.const(OperandType.tensor(I32, (t.rank, 2)), np.asarray(pads, np.int32))]
        bound = t.bound
        if v2:
            if t.code == F32:
                value = float(np.float32(g.rng.uniform(-1, 1)))
                ins.append(g.b.f32(value))
            else:
                info = np.iinfo(t.type.dtype)
                ins.append(g.b.i32(int(g.rng.integers(info.min, int(info.max) + 1))))
        code = OperationCode.PAD_V2 if v2 else OperationCode.PAD
        return g.emit(code, ins, [g.out(t, t.type.with_dimensions(out), exact=t.exact, bound=max(bound, 1.0))], [t])
    return apply


APPLIERS["PAD"] = _pad(False)
APPLIERS["PAD_V2"] = _pad(True)


def _comparison(code: OperationCode):
    def apply(g: GraphGenerator, t: Tensor) -> Tensor | None:
        if t.code not in (F32, I32) or not t.exact or t.rank == 0:
            return None
        pdims = _broadcast_partner(g, t)
        other = g.operand(OperandType.tensor(t.code, pdims))
        out_dims = tuple(max(a, b) for a, b in zip((1,) * (t.rank - len(pdims)) + pdims, t.dims))
        o_t = OperandType.tensor(B8, out_dims)
        return g.emit(code, [t.index, other], [g.out(t, o_t, exact=True, bound=1.0)], [t])
    return apply


for _code in (OperationCode.EQUAL, OperationCode.NOT_EQUAL, OperationCode.LESS, OperationCode.LESS_EQUAL,
              OperationCode.GREATER, OperationCode.GREATER_EQUAL):
    APPLIERS[_code.name] = _comparison(_code)


@applier("LOGICAL_NOT")
def _logical_not(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code != B8:
        return None
    return g.emit(OperationCode.LOGICAL_NOT, [t.index], [g.out(t, t.type, exact=True, bound=1.0)], [t])


def _logical(code: OperationCode):
    def apply(g: GraphGenerator, t: Tensor) -> Tensor | None:
        if t.code != B8:
            return None
        pdims = _broadcast_partner(g, t)
        other = g.operand(OperandType.tensor(B8, pdims))
        out_dims = tuple(max(a, b) for a, b in zip((1,) * (t.rank - len(pdims)) + pdims, t.dims))
        return g.emit(code, [t.index, other], [g.out(t, OperandType.tensor(B8, out_dims), exact=True, bound=1.0)], [t])
    return apply


APPLIERS["LOGICAL_AND"] = _logical(OperationCode.LOGICAL_AND)
APPLIERS["LOGICAL_OR"] = _logical(OperationCode.LOGICAL_OR)


@applier("CAST")
def _cast(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code == F32 and t.exact and t.bound <= INT_BOUND:
        return g.emit(OperationCode.CAST, [t.index], [g.out(t, OperandType.tensor(I32, t.dims), exact=True,
                                                            bound=t.bound)], [t])
    if t.code == I32 and t.exact and t.bound <= 1 << 24:
        return g.emit(OperationCode.CAST, [t.index], [g.out(t, OperandType.tensor(F32, t.dims), exact=True,
                                                            bound=t.bound)], [t])
    return None


@applier("QUANTIZE")
def _quantize(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code != F32 or t.rank == 0:
        return None
    code = U8 if g.chance(0.5) else S8
    o_t = OperandType.tensor(code, t.dims, *g.quant_params(code))
    return g.emit(OperationCode.QUANTIZE, [t.index], [g.out(t, o_t, exact=False, bound=0.0)], [t])


@applier("DEQUANTIZE")
def _dequantize(g: GraphGenerator, t: Tensor) -> Tensor | None:
    if t.code not in QUANT or t.rank == 0:
        return None
    bound = g.real_bound(t)
    return g.emit(OperationCode.DEQUANTIZE, [t.index], [g.out(t, OperandType.tensor(F32, t.dims), exact=t.exact,
                                                              bound=bound)], [t])


# -- which (operation, operand code) pairs a driver takes ----------------------------------------
def _probe_pairs() -> list[tuple[str, str]]:
    pairs = []
    for name, fn in APPLIERS.items():
        for code in (F32, U8, S8, I32, B8):
            pairs.append((name, code.name))
    return pairs


def single_op_spec(name: str, code_name: str, seed: int) -> dict[str, Any] | None:
    """A one-operation graph applying `name` to a fresh input of type `code_name` (None if it cannot)."""
    g = GraphGenerator()
    g._begin(seed)
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


def supported_pairs(ctx: StressContext) -> set[tuple[str, str]] | None:
    """The (operation, input type) pairs the driver takes, learnt from single-operation graphs
    (None: every pair, for ALL_DEVICES where the runtime falls back to the CPU)."""
    if ctx.device is None:
        return None
    out = set()
    for name, code_name in _probe_pairs():
        for seed in range(6):
            spec = single_op_spec(name, code_name, seed)
            if spec is None:
                continue
            model, _ = build_model(spec)
            if ctx.supports(model):
                out.add((name, code_name))
                break
        ctx.beat()
    return out


# -- the test --------------------------------------------------------------------------------------
def run_graph(ctx: StressContext, spec: dict[str, Any]) -> tuple[str | None, bool]:
    """(why it failed or None, whether the driver ran it); compares with nnapi-reference."""
    model, inputs = build_model(spec)
    if not ctx.supports(model):
        return None, False
    expected = ctx.run(ctx.compile(model, reference=True), inputs)
    try:
        actual = ctx.run(ctx.compile(model), inputs)
    except MltsError as e:
        return f"{describe_error(e)}", True
    codes = [model.operand_type(i).code for i in model.outputs]
    for k, (a, e, c) in enumerate(zip(actual, expected, codes)):
        why = compare(a, e, c, whole_model=False)
        if why is not None:
            return f"output {k} ({c.name}): {why}", True
    return None, True


def save_failing(ctx: StressContext, spec: dict[str, Any], reason: str, suffix: str = "") -> Path:
    """Save a failing graph with what replaying it needs (driver, its spec, hosting, reason)."""
    spec = dict(spec, driver=ctx.driver, target=ctx.target.to_job(), specs=ctx.specs, hosting=ctx.hosting,
                reason=reason)
    name = f"{ctx.driver}-seed{spec.get('seed', 0)}{suffix}.graph.json".replace("/", "_").replace(":", "_")
    return save_spec(spec, ctx.out_dir / "failing_graphs" / name)


def _shrink(ctx: StressContext, spec: dict[str, Any], why: str) -> Shrunk | None:
    """The smallest graph that still fails on the driver (mlts.stress.shrink), or None."""
    if len(spec["operations"]) == 1:
        return Shrunk(spec, why, [0], False, 0)
    def fails(candidate: dict[str, Any]) -> str | None:
        why, did_run = run_graph(ctx, candidate)
        return why if did_run else None

    def on_reference(candidate: dict[str, Any]) -> list:
        model, inputs = build_model(candidate)
        return ctx.run(ctx.compile(model, reference=True), inputs)

    return shrink(spec, fails, on_reference, budget_s=float(ctx.param("shrink_s", 30.0)), beat=ctx.beat)


def random_graphs(ctx: StressContext) -> dict[str, Any]:
    """Graphs until the duration is over (at least one): FAILURE at the first mismatch or error."""
    allowed = supported_pairs(ctx)
    if allowed is not None and not allowed:
        return {"note": f"skipped: {ctx.driver} takes none of the generator's operations"}
    gen = GraphGenerator(allowed)
    end = ctx.deadline()
    base = int(ctx.param("first_seed", ctx.seed * 100003))
    ran = skipped = 0
    k = 0
    max_graphs = int(ctx.param("max_graphs", 1 << 30))
    while (ran == 0 and k < 200 or time.monotonic() < end) and k < max_graphs:
        seed = base + k
        k += 1
        spec = gen.generate(seed)
        try:
            why, did_run = run_graph(ctx, spec)
        except MltsError as e:  # the reference refused the graph: a generator bug, not the driver's
            ctx.log(f"graph seed {seed} is invalid ({describe_error(e)}); skipped")
            skipped += 1
            continue
        if not did_run:
            skipped += 1
            continue
        ran += 1
        if why is not None:
            path = save_failing(ctx, spec, why)
            found = _shrink(ctx, spec, why)
            if found is None:
                ctx.fail(f"random graph seed {seed} ({describe(spec)}): {why}; reproduce with "
                         f"`mlts stress --replay {path}`", graph=str(path), seed=seed, graphs_run=ran)
            small = path if found.spec is spec else save_failing(ctx, dict(found.spec, seed=seed), found.reason,
                                                                  suffix=".shrunk")
            whole = "" if small == path else f" (whole graph: {path})"
            ctx.fail(f"random graph seed {seed} ({describe(spec)}) fails on {ctx.driver}; shrunk: "
                     f"{found.describe(spec)}; reproduce with `mlts stress --replay {small}`{whole}",
                     graph=str(path), shrunk_graph=str(small), seed=seed, graphs_run=ran,
                     shrunk_operations=found.operations)
    ctx.log(f"{ran} random graphs matched nnapi-reference ({skipped} skipped: not supported as a whole)")
    return {"graphs": ran, "skipped": skipped, "pairs": None if allowed is None else len(allowed)}


def replay(ctx: StressContext) -> dict[str, Any]:
    """`mlts stress --replay FILE`: the saved graph once more, on the same driver."""
    from .graph_spec import load_spec

    spec = load_spec(ctx.param("spec_path", ""))
    model, _ = build_model(spec)
    if not ctx.supports(model):
        ctx.fail(f"{ctx.driver} does not support every operation of the graph")
    why, _ = run_graph(ctx, spec)
    if why is not None:
        ctx.fail(f"reproduced: {why}")
    return {"note": "did not reproduce: the driver's results match nnapi-reference"}


__all__ = ["APPLIERS", "GraphGenerator", "Tensor", "random_graphs", "replay", "run_graph", "single_op_spec",
           "supported_pairs"]
