"""QUANTIZED_16BIT_LSTM and QUANTIZED_LSTM against independent expectations.

- plain Python-int transcriptions, element by element, of NNAPI's integer arithmetic: gemmlowp's
  16-bit logistic / tanh (int32 constants rounded by 16 bits, the exp's final addition saturating),
  the 1.2 cell (Q3.12 gates, Q4.11 state, 8-bit output) and the 1.3 cell (effective biases, saturating
  int16 accumulation, integer layer normalization with its Newton-Raphson inverse square root,
  shift-based cell update, hidden state requantization, projection, clipping); exact match expected;
- the float LSTM formula on the dequantized operands, within a few quantization steps;
- AOSP's test vectors V1_2/quantized_lstm.mod.py and V1_3/qlstm_{projection,noprojection}.mod.py;
- validation (types, quantization, omission rules, shapes), execution-time failures, shape inference.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from mlts.runtime import OperandCode, OperandType, OperationCode, ResultCode
from mlts.runtime.ops import _qlstm_math as qm
from support.int_reference import M31, exp_negative, quantize_multiplier_ref, rdbp, sat_pot, srdhm
from support.op_runner import Const, Input, expect_error, inferred_output_types, run_op

Q8A, Q8AS, Q8S = OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, OperandCode.TENSOR_QUANT8_SYMM
Q16S, TI32 = OperandCode.TENSOR_QUANT16_SYMM, OperandCode.TENSOR_INT32
T = OperandType.tensor
F32S, I32S = OperandType.scalar(OperandCode.FLOAT32), OperandType.scalar(OperandCode.INT32)
RNG = np.random.default_rng(18)
f32 = np.float32


# -- gemmlowp on 16-bit raw values, plain Python ints --------------------------------------------
H = 1 << 15


def wrap16(x: int) -> int:
    return ((x + H) & 0xFFFF) - H


def wrap32(x: int) -> int:
    return ((x + M31) & 0xFFFFFFFF) - M31


def sat16(x: int) -> int:
    return max(-H, min(H - 1, x))


def cdiv(a: int, b: int) -> int:
    return abs(a) // b * (1 if a >= 0 else -1)


def srdhm16(a: int, b: int) -> int:
    if a == b == -H:
        return H - 1
    ab = a * b
    return cdiv(ab + ((1 << 14) if ab >= 0 else 1 - (1 << 14)), H)


def pot16(x: int, e: int) -> int:
    if e <= 0:
        return rdbp(x, -e)
    limit = (1 << (15 - e)) - 1
    return H - 1 if x > limit else -H if x < -limit else x << e


def c16(raw32: int) -> int:
    return rdbp(raw32, 16)


def exp16(a: int, k: int) -> int:
    """exp(a), a <= 0 in Q{k}: the remainder above -1/4 by a Taylor polynomial around -1/8, the rest
    by multiplying in exp(-2^j) for each bit of the remainder."""
    frac = 15 - k
    quarter = 1 << (frac - 2)
    a_mod = wrap16((a & (quarter - 1)) - quarter)
    x = wrap16(pot16(a_mod, k) + (1 << 12))
    x2 = srdhm16(x, x)
    x3, x4 = srdhm16(x2, x), srdhm16(x2, x2)
    poly = pot16(wrap16(srdhm16(wrap16(pot16(x4, -2) + x3), c16(715827883)) + x2), -1)
    c = c16(1895147668)
    r = sat16(c + srdhm16(c, wrap16(x + poly)))
    rem = wrap16(a_mod - a)
    for j, m in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
                 (3, 720401), (4, 242)):
        if k > j and rem & (1 << (frac + j)):
            r = srdhm16(r, c16(m))
    if k > 5 and a < c16(-(1 << (36 - k))):
        r = 0
    return H - 1 if a == 0 else r


def reciprocal16(a: int) -> int:
    """~2 / (1 + a) in Q2 (a in Q0 [0, 1)), three Newton-Raphson steps on the half denominator."""
    s = a + H - 1
    half = cdiv(s + (1 if s >= 0 else -1), 2)
    x = wrap16(c16(1515870810) + srdhm16(half, c16(-1010580540)))
    for _ in range(3):
        x = wrap16(x + pot16(srdhm16(x, wrap16((1 << 13) - srdhm16(half, x))), 2))
    return x


def logistic16(a: int, k: int) -> int:
    if a == 0:
        return 1 << 14
    r = pot16(reciprocal16(exp16(-abs(a), k)), 1)
    return r if a > 0 else wrap16(H - 1 - r)


def tanh16(a: int, k: int) -> int:
    if a == 0:
        return 0
    t = pot16(wrap16(reciprocal16(exp16(-abs(a), k + 1)) - (1 << 13)), 2)
    return t if a > 0 else wrap16(-t)


def mbqm(x: int, m: int, s: int) -> int:
    """x * m * 2**(s - 31); the left shift wraps like C int32."""
    return rdbp(srdhm(wrap32(x << max(s, 0)), m), max(-s, 0))


def test_fixed_point_16bit_against_python_ints_and_floats():
    samples = np.unique(np.concatenate([np.arange(-H, H, 263), [-H, -H + 1, -2, -1, 0, 1, 2, H - 2, H - 1]]))
    for k in (0, 3, 4, 6):
        log, tan = qm.logistic(samples, k), qm.tanh(samples, k)
        assert log.tolist() == [logistic16(int(a), k) for a in samples]
        assert tan.tolist() == [tanh16(int(a), k) for a in samples]
        every = np.arange(-H, H)
        real = every / 2.0 ** (15 - k)
        assert np.abs(qm.logistic(every, k) / H - 1 / (1 + np.exp(-real))).max() < 8 / H
        assert np.abs(qm.tanh(every, k) / H - np.tanh(real)).max() < 16 / H


def test_fixed_point_generic_width_reproduces_32bit_exp():
    a = np.concatenate([-RNG.integers(0, M31, 300), [0, -1, -M31]])
    for k in (0, 1, 3, 4, 5):  # (the reference has no clamp below -32, which starts at 6 integer bits)
        assert qm.exp_on_negative_values(a, k, bits=32).tolist() == [exp_negative(int(v), k) for v in a]


# -- QUANTIZED_16BIT_LSTM ------------------------------------------------------------------------
Q16_OP = OperationCode.QUANTIZED_16BIT_LSTM
STATE_SCALE = 1 / 2048


def q16_operands(x, w_in, w_rec, biases, c, h, w_scale=0.00408021, w_zp=100, const_weights=False):
    units, size = w_in[0].shape
    wt = (T(Q8A, (units, size), w_scale, w_zp), T(Q8A, (units, units), w_scale, w_zp))
    bias_t = T(TI32, (units,), float(f32(w_scale)) / 128, 0)
    wrap = Const if const_weights else (lambda v: v)
    return ([(T(Q8A, x.shape, 1 / 128, 128), x)] + [(wt[0], wrap(w)) for w in w_in] + [(wt[1], wrap(w)) for w in w_rec]
            + [(bias_t, wrap(b)) for b in biases]
            + [(T(Q16S, c.shape, STATE_SCALE, 0), c), (T(Q8A, h.shape, 1 / 128, 128), h)])


def q16_outputs(batches, units):
    return [T(Q16S, (batches, units), STATE_SCALE, 0), T(Q8A, (batches, units), 1 / 128, 128)]


def q16_reference(x, w_in, w_rec, biases, c, h, w_scale, w_zp):
    """(cell state, output) element by element: gate accumulators are bias + [input, prev output]
    (minus 128) . [recurrent row, input row] (minus the zero point), NNAPI's pairing."""
    m, s = quantize_multiplier_ref(4096 * float(f32(f32(w_scale) / 128)))
    cells, outputs = np.zeros(c.shape, np.int16), np.zeros(h.shape, np.uint8)
    for b in range(x.shape[0]):
        concat = [int(v) - 128 for v in x[b]] + [int(v) - 128 for v in h[b]]
        for u in range(h.shape[1]):
            pre = []
            for g in range(4):
                row = [int(v) - w_zp for v in list(w_rec[g][u]) + list(w_in[g][u])]
                pre.append(sat16(mbqm(int(biases[g][u]) + sum(p * q for p, q in zip(concat, row)), m, s)))
            i, f, g, o = logistic16(pre[0], 3), logistic16(pre[1], 3), tanh16(pre[2], 3), logistic16(pre[3], 3)
            state = sat16(rdbp(srdhm16(i, g), 4) + srdhm16(f, int(c[b, u])))
            cells[b, u] = state
            outputs[b, u] = 128 + max(-128, min(127, rdbp(srdhm16(o, tanh16(pot16(state, 1), 3)), 8)))
    return cells, outputs


def q16_float(x, w_in, w_rec, biases, c, h, w_scale, w_zp):
    """The LSTM formula on real values (NNAPI's pairing; pre-activations and the state read in [-8, 8))."""
    concat = np.concatenate([(x - 128.0) / 128, (h - 128.0) / 128], axis=1)
    pre = [np.clip(b * w_scale / 128 + concat @ ((np.concatenate([r, w], 1).astype(np.int64) - w_zp) * w_scale).T, -8, 8)
           for w, r, b in zip(w_in, w_rec, biases)]
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    state = sig(pre[0]) * np.tanh(pre[2]) + sig(pre[1]) * c * STATE_SCALE
    return state / STATE_SCALE, 128 + np.clip(sig(pre[3]) * np.tanh(np.clip(state, -8, 8)) * 128, -128, 127)


# V1_2/quantized_lstm.mod.py (AOSP): 2 batches, 2 inputs, 4 units.
CTS16 = dict(
    x=np.array([[166, 179], [50, 150]], np.uint8),
    w_in=[np.array(v, np.uint8).reshape(4, 2) for v in (
        [146, 250, 235, 171, 10, 218, 171, 108], [24, 50, 132, 179, 158, 110, 3, 169],
        [133, 34, 29, 49, 206, 109, 54, 183], [195, 187, 11, 99, 109, 10, 218, 48])],
    w_rec=[np.array(v, np.uint8).reshape(4, 4) for v in (
        [254, 206, 77, 168, 71, 20, 215, 6, 223, 7, 118, 225, 59, 130, 174, 26],
        [137, 240, 103, 52, 68, 51, 237, 112, 0, 220, 89, 23, 69, 4, 207, 253],
        [172, 60, 205, 65, 14, 0, 140, 168, 240, 223, 133, 56, 142, 64, 246, 216],
        [106, 214, 67, 23, 59, 158, 45, 3, 119, 132, 49, 205, 129, 218, 11, 98])],
    biases=[np.array(v, np.int32) for v in ([-7876, 13488, -726, 32839], [9206, -46884, -11693, -38724],
                                            [39481, 48624, 48976, -21419], [-58999, -17050, -41852, -40538])],
    c=np.array([[876, 1034, 955, -909], [761, 1029, 796, -1036]], np.int16),
    h=np.array([[136, 150, 140, 115], [135, 152, 138, 112]], np.uint8))
CTS16_CELL = [[1485, 1177, 1373, -1023], [1019, 1355, 1097, -1235]]
CTS16_OUTPUT = [[140, 151, 146, 112], [136, 156, 142, 112]]


@pytest.mark.parametrize("batches,const_weights", [(2, False), (1, True)], ids=["inputs", "constant_weights"])
def test_q16_cts_vectors(batches, const_weights):
    v = {k: (a[:batches] if k in "xch" else a) for k, a in CTS16.items()}
    cell, out = run_op(Q16_OP, q16_operands(**v, const_weights=const_weights), q16_outputs(batches, 4))
    assert cell.dtype == np.int16 and out.dtype == np.uint8
    assert cell.tolist() == CTS16_CELL[:batches] and out.tolist() == CTS16_OUTPUT[:batches]
    ref = q16_reference(**v, w_scale=0.00408021, w_zp=100)
    assert cell.tolist() == ref[0].tolist() and out.tolist() == ref[1].tolist()


@pytest.mark.parametrize("batches,size,units,w_scale,w_zp", [
    (1, 3, 3, 0.02, 128), (3, 2, 5, 0.015, 90), (2, 6, 4, 0.04, 140), (2, 4, 4, 0.3, 128)])
def test_q16_against_int_and_float_references(batches, size, units, w_scale, w_zp):
    v = dict(x=RNG.integers(0, 256, (batches, size)).astype(np.uint8),
             w_in=[RNG.integers(0, 256, (units, size)).astype(np.uint8) for _ in range(4)],
             w_rec=[RNG.integers(0, 256, (units, units)).astype(np.uint8) for _ in range(4)],
             biases=[RNG.integers(-40000, 40000, units).astype(np.int32) for _ in range(4)],
             c=RNG.integers(-16000, 16000, (batches, units)).astype(np.int16),
             h=RNG.integers(0, 256, (batches, units)).astype(np.uint8))
    cell, out = run_op(Q16_OP, q16_operands(**v, w_scale=w_scale, w_zp=w_zp), q16_outputs(batches, units))
    ref_cell, ref_out = q16_reference(**v, w_scale=w_scale, w_zp=w_zp)
    assert cell.tolist() == ref_cell.tolist() and out.tolist() == ref_out.tolist()
    real_cell, real_out = q16_float(**v, w_scale=w_scale, w_zp=w_zp)
    assert np.abs(cell - real_cell).max() <= 4 and np.abs(out - real_out).max() <= 1


def q16_mutated(index, **changes):
    ops = q16_operands(**CTS16)
    t, value = ops[index]
    ops[index] = (replace(t, **changes), value)
    return ops


@pytest.mark.parametrize("index,changes,words", [
    (0, dict(scale=1 / 64), ["input 0", "1/128"]),
    (14, dict(zero_point=127), ["input 14", "zero point 128"]),
    (6, dict(scale=0.005), ["input 6", "must equal input 1"]),
    (3, dict(zero_point=99), ["input 3", "must equal input 1"]),
    (10, dict(scale=0.001), ["input 10", "weights scale / 128"]),
    (13, dict(scale=1 / 1024), ["input 13", "2^-11"]),
    (13, dict(code=OperandCode.TENSOR_QUANT16_ASYMM), ["input 13", "not allowed"]),
    (2, dict(dimensions=(4, 3)), ["input 2", "must be [4, 2]"]),
    (7, dict(dimensions=(4, 4, 1)), ["input 7", "rank 3"]),
    (12, dict(dimensions=(3,)), ["input 12", "must be [4]"]),
    (13, dict(dimensions=(2, 3)), ["input 13", "[batches, output_size]"]),
    (0, dict(dimensions=(3, 2)), ["input 0", "batches"]),
])
def test_q16_validation(index, changes, words):
    expect_error(Q16_OP, q16_mutated(index, **changes), q16_outputs(2, 4), *words)


def test_q16_output_type_and_count():
    expect_error(Q16_OP, q16_operands(**CTS16), [q16_outputs(2, 4)[0], T(Q8AS, (2, 4), 1 / 128, 0)],
                 "output 1", "not allowed")
    expect_error(Q16_OP, q16_operands(**CTS16)[:14], q16_outputs(2, 4), "expected 15 inputs")


def test_q16_shape_inference():
    ops = q16_operands(**CTS16)
    inferred = inferred_output_types(Q16_OP, ops, [T(Q16S, (0, 0), STATE_SCALE, 0), T(Q8A, None, 1 / 128, 128)])
    assert [t.dimensions for t in inferred] == [(2, 4), (2, 4)]
    ops[13] = (T(Q16S, (0, 4), STATE_SCALE, 0), ops[13][1])  # a state of unknown batch size: run time
    inferred = inferred_output_types(Q16_OP, ops, [T(Q16S, (0, 0), STATE_SCALE, 0), T(Q8A, (0, 4), 1 / 128, 128)])
    assert [t.dimensions for t in inferred] == [(0, 0), (0, 4)]


# -- QUANTIZED_LSTM ------------------------------------------------------------------------------
QOP = OperationCode.QUANTIZED_LSTM
GATES = ("input", "forget", "cell", "output")


@dataclass
class Cell:
    """One QUANTIZED_LSTM step: values (None: omitted) and quantization."""
    x: np.ndarray
    h: np.ndarray
    c: np.ndarray
    w_in: dict
    w_rec: dict
    bias: dict
    peephole: dict = field(default_factory=dict)
    layer_norm: dict = field(default_factory=dict)
    proj_w: np.ndarray | None = None
    proj_b: np.ndarray | None = None
    x_q: tuple = (0.0078125, 0)
    h_q: tuple = (3.05176e-05, 0)
    cell_shift: int = -15
    w_scale: float = 0.00784314
    peephole_scale: float = 1.0
    norm_scale: float = 3.05182e-05
    proj_scale: float = 0.00392157
    intermediate: tuple = (0.007059, 0.007812, 0.007059, 0.007812)
    cell_clip: float = 0.0
    proj_clip: float = 0.0
    hidden_zp: int = 0
    hidden_scale: float = 0.007

    def operands(self, omit_at_run=(), const=False):
        units, size = self.w_in["forget"].shape
        out_size = self.h.shape[1]
        values = ([self.x] + [self.w_in.get(g) for g in GATES] + [self.w_rec.get(g) for g in GATES]
                  + [self.peephole.get(g) for g in ("input", "forget", "output")] + [self.bias.get(g) for g in GATES]
                  + [self.proj_w, self.proj_b, self.h, self.c] + [self.layer_norm.get(g) for g in GATES]
                  + [self.cell_clip, self.proj_clip, *self.intermediate, self.hidden_zp, self.hidden_scale])
        types = ([T(Q8AS, self.x.shape, *self.x_q)] + [T(Q8S, (units, size), self.w_scale)] * 4
                 + [T(Q8S, (units, out_size), self.w_scale)] * 4 + [T(Q16S, (units,), self.peephole_scale)] * 3
                 + [T(TI32, (units,))] * 4 + [T(Q8S, (out_size, units), self.proj_scale), T(TI32, (out_size,))]
                 + [T(Q8AS, self.h.shape, *self.h_q), T(Q16S, self.c.shape, 2.0 ** self.cell_shift)]
                 + [T(Q16S, (units,), self.norm_scale)] * 4 + [F32S] * 6 + [I32S, F32S])
        wrap = (lambda v: v if v is None or np.ndim(v) == 0 else Const(v)) if const else (lambda v: v)
        return [(t, Input(None) if i in omit_at_run else wrap(v)) for i, (t, v) in enumerate(zip(types, values))]

    def outputs(self):
        return [T(Q8AS, self.h.shape, *self.h_q), T(Q16S, self.c.shape, 2.0 ** self.cell_shift),
                T(Q8AS, self.h.shape, *self.h_q)]

    def run(self, **kw):
        return run_op(QOP, self.operands(**kw), self.outputs())


def inv_sqrt_ref(v: int) -> tuple[int, int]:
    if v <= 1:
        return M31 - 1, 0
    shift = 11
    while v >= 1 << 29:
        v //= 4
        shift += 1
    pairs = (32 - v.bit_length() - 1) // 2 - 1
    shift -= pairs
    v <<= 2 * pairs
    half = rdbp(v >> 1, 1)
    x = 1 << 28
    for _ in range(5):
        x3 = sat_pot(srdhm(srdhm(x, x), x), 6)
        x = sat_pot(wrap32(srdhm(3 << 27, x) - srdhm(half, x3)), 3)
    x = srdhm(x, 1518500250)
    if shift < 0:
        x, shift = wrap32(x << -shift), 0
    return x, -shift


def layer_norm_ref(row: list[int], weights, bias, scale: float) -> list[int]:
    n = len(row)
    mean = cdiv(sum(row) * 1024, n)
    variance = cdiv(sum(v * v for v in row) * ((1 << 20) // n) - mean * mean, 1 << 20)
    if variance < 1:
        variance = min(1, int(f32(10000) * f32(scale)))
    im, ish = inv_sqrt_ref(variance)
    m, s = quantize_multiplier_ref(float(f32(scale)))
    out = []
    for v, w, b in zip(row, weights, bias):
        val = wrap32(wrap32(mbqm(1024 * v - mean, im, ish) * int(w)) + int(b))
        out.append(sat16(mbqm(cdiv(val + 512 if val > 0 else val - 512, 1024), m, s + 12)))
    return out


def qlstm_reference(p: Cell) -> tuple[np.ndarray, np.ndarray]:
    """(output, cell state) of one step, batch row by batch row in Python ints."""
    shift = p.cell_shift
    cifg = p.w_in.get("input") is None
    out_size, units = p.h.shape[1], p.c.shape[1]
    inter = dict(zip(GATES, p.intermediate))
    outputs, cells = [], []

    def gate(name, b, cell_row):
        ln = p.layer_norm.get(name) is not None
        pre = [0] * units
        for w, vec, (scale, zp), folded in ((p.w_in[name], p.x[b], p.x_q, None if ln else p.bias[name]),
                                            (p.w_rec[name], p.h[b], p.h_q, None)):
            m, s = quantize_multiplier_ref(float(f32(f32(p.w_scale) * f32(scale)) / f32(inter[name])))
            for u in range(units):
                acc = (0 if folded is None else int(folded[u])) + sum(int(q) * (int(v) - zp) for q, v in zip(w[u], vec))
                pre[u] = sat16(mbqm(acc, m, s) + pre[u])
        if p.peephole.get(name) is not None:
            real = f32(2.0 ** shift * float(f32(p.peephole_scale)) / float(f32(inter[name])))
            m, s = quantize_multiplier_ref(float(real))
            pre = [sat16(mbqm(int(w) * c, m, s) + v) for w, c, v in zip(p.peephole[name], cell_row, pre)]
        return layer_norm_ref(pre, p.layer_norm[name], p.bias[name], p.norm_scale) if ln else pre

    for b in range(p.x.shape[0]):
        c_prev = [int(v) for v in p.c[b]]
        f = [logistic16(v, 3) for v in gate("forget", b, c_prev)]
        g = [tanh16(v, 3) for v in gate("cell", b, c_prev)]
        i = [H - 1 - v for v in f] if cifg else [logistic16(v, 3) for v in gate("input", b, c_prev)]
        c = [sat16(wrap16(rdbp(fv * cv, 15)) + wrap16(rdbp(iv * gv, 30 + shift))) for fv, cv, iv, gv in
             zip(f, c_prev, i, g)]
        if p.cell_clip > 0:
            clip = int(min(f32(p.cell_clip) / f32(2.0 ** shift), H - 1))
            c = [max(-clip, min(clip, v)) for v in c]
        o = [logistic16(v, 3) for v in gate("output", b, c)]
        m, s = quantize_multiplier_ref(float(f32(2.0 ** -15 / float(f32(p.hidden_scale)) * 2.0 ** -15)))
        hidden = [max(-128, min(127, mbqm(ov * tanh16(cv, shift + 15), m, s) - p.hidden_zp)) for ov, cv in zip(o, c)]
        if p.proj_w is None:
            out = hidden
        else:
            m, s = quantize_multiplier_ref(float(f32(p.proj_scale) * f32(p.hidden_scale) / f32(p.h_q[0])))
            out = []
            for r in range(out_size):
                acc = (0 if p.proj_b is None else int(p.proj_b[r])) + sum(
                    int(w) * (hv + p.hidden_zp) for w, hv in zip(p.proj_w[r], hidden))
                out.append(max(-128, min(127, mbqm(acc, m, s) + p.h_q[1])))
            if p.proj_clip > 0:
                clip = int(min(f32(p.proj_clip) / f32(p.proj_scale), 127))
                out = [max(-clip, min(clip, v)) for v in out]
        outputs.append(out)
        cells.append(c)
    return np.array(outputs, np.int8), np.array(cells, np.int16)


def qlstm_float(p: Cell) -> tuple[np.ndarray, np.ndarray]:
    """The LSTM formula on dequantized values (gate pre-activations read in [-8, 8))."""
    x = (p.x.astype(np.int64) - p.x_q[1]) * p.x_q[0]
    h = (p.h.astype(np.int64) - p.h_q[1]) * p.h_q[0]
    c = p.c * 2.0 ** p.cell_shift
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731

    def gate(name, cell):
        z = x @ (p.w_in[name] * p.w_scale).T + h @ (p.w_rec[name] * p.w_scale).T
        if p.peephole.get(name) is not None:
            z = z + p.peephole[name] * p.peephole_scale * cell
        if p.layer_norm.get(name) is not None:
            z = (z - z.mean(1, keepdims=True)) / z.std(1, keepdims=True)
            z = z * p.layer_norm[name] * p.norm_scale + p.bias[name] * p.norm_scale / 1024
        else:
            z = z + p.bias[name] * p.x_q[0] * p.w_scale
        return np.clip(z, -8, 8)

    f = sig(gate("forget", c))
    i = 1 - f if p.w_in.get("input") is None else sig(gate("input", c))
    c = np.clip(f * c + i * np.tanh(gate("cell", c)), -(2.0 ** (p.cell_shift + 15)), 2.0 ** (p.cell_shift + 15))
    hidden = sig(gate("output", c)) * np.tanh(c)
    out = np.clip(np.round(hidden / p.hidden_scale), -128, 127)  # hidden zero point 0
    if p.proj_w is not None:
        y = (out * p.hidden_scale) @ (p.proj_w * p.proj_scale).T + p.proj_b * p.proj_scale * p.hidden_scale
        out = np.clip(y / p.h_q[0] + p.h_q[1], -128, 127)
    return out, c / 2.0 ** p.cell_shift


def q8(shape, lo=-127, hi=127):
    return RNG.integers(lo, hi + 1, shape).astype(np.int8)


def random_cell(batches=2, size=5, units=4, out_size=3, *, cifg=False, peephole=False, layer_norm=True,
                projection=True, projection_bias=True, **quant) -> Cell:
    out_size = out_size if projection else units
    gates = GATES[1:] if cifg else GATES
    cell = Cell(x=q8((batches, size), -128), h=q8((batches, out_size), -128),
                c=RNG.integers(-20000, 20000, (batches, units)).astype(np.int16),
                w_in={g: q8((units, size)) for g in gates}, w_rec={g: q8((units, out_size)) for g in gates},
                bias={g: RNG.integers(-2000, 2000, units).astype(np.int32) for g in gates})
    if peephole:
        cell.peephole = {g: RNG.integers(-300, 300, units).astype(np.int16)
                         for g in ("forget", "output") + (() if cifg else ("input",))}
    if layer_norm:
        cell.layer_norm = {g: RNG.integers(3000, 30000, units).astype(np.int16) for g in gates}
        cell.bias = {g: RNG.integers(-2000000, 2000000, units).astype(np.int32) for g in gates}
    if projection:
        cell.proj_w = q8((out_size, units))
        cell.proj_b = RNG.integers(-3000, 3000, out_size).astype(np.int32) if projection_bias else None
    return replace(cell, **quant)


INT_CASES = {
    "full": dict(peephole=True, peephole_scale=0.01, x_q=(0.01, 5), h_q=(0.02, -3), cell_shift=-11, cell_clip=3.0, proj_clip=0.25,
                 hidden_zp=3, intermediate=(0.004, 0.005, 0.004, 0.006)),
    "cifg_peephole_no_projection": dict(cifg=True, peephole=True, projection=False, units=5, size=3,
                                        h_q=(0.006, 2)),
    "no_layer_norm_projection_without_bias": dict(layer_norm=False, projection_bias=False, cell_shift=-9,
                                                  intermediate=(2 ** -12,) * 4, h_q=(0.01, 0), batches=3),
    "no_layer_norm_cifg_peephole": dict(layer_norm=False, cifg=True, peephole=True, projection=False,
                                        intermediate=(2 ** -12,) * 4, x_q=(0.02, -7), h_q=(0.01, 4), batches=1),
}


@pytest.mark.parametrize("name", INT_CASES)
def test_qlstm_against_int_reference(name):
    cell = random_cell(**INT_CASES[name])
    state_out, cell_out, output = cell.run()
    ref_out, ref_cell = qlstm_reference(cell)
    assert (state_out.dtype, cell_out.dtype, output.dtype) == (np.int8, np.int16, np.int8)
    assert cell_out.tolist() == ref_cell.tolist()
    assert output.tolist() == ref_out.tolist() and state_out.tolist() == ref_out.tolist()


@pytest.mark.parametrize("variant", [dict(), dict(peephole=True, cifg=True), dict(layer_norm=False)])
def test_qlstm_against_float_formula(variant):
    quant = dict(x_q=(0.01, 0), h_q=(0.01, 0), cell_shift=-12, hidden_scale=1 / 128, proj_scale=0.002,
                 intermediate=(2 ** -12,) * 4, w_scale=0.004, peephole_scale=0.0005)
    cell = random_cell(**variant, **quant)
    _, cell_out, output = cell.run()
    real_out, real_cell = qlstm_float(cell)
    assert np.abs(cell_out - real_cell).max() <= 8  # 2^-12 steps: the 16-bit gates' precision
    assert np.abs(output - real_out).max() <= 1


# V1_3/qlstm_projection.mod.py and qlstm_noprojection.mod.py (AOSP): 2 batches, 5 inputs, 4 units.
CTS_W_IN = {"input": [64, 77, 89, -102, -115, 13, 25, 38, -51, 64, -102, 89, -77, 64, -51, -64, -51, -38, -25, -13],
            "forget": [-77, -13, 38, 25, 115, -64, -25, -51, 38, -102, -51, 38, -64, -51, -77, 38, -51, -77, -64, -64],
            "cell": [-51, -38, -25, -13, -64, 64, -25, -38, -25, -77, 77, -13, -51, -38, -89, 89, -115, -64, 102, 77],
            "output": [-102, -51, -25, -115, -13, -89, 38, -38, -102, -25, 77, -25, 51, -89, -38, -64, 13, 64, -77,
                       -51]}
CTS_W_REC = {"input": [-25, -38, 51, 13, -64, 115, -25, -38, -89, 6, -25, -77],
             "forget": [-64, -38, -64, -25, 77, 51, 115, 38, -13, 25, 64, 25],
             "cell": [-38, 25, 13, -38, 102, -10, -25, 38, 102, -77, -13, 25],
             "output": [38, -13, 13, -25, -64, -89, -25, -77, -13, -51, -89, -25]}
CTS_W_REC_NOPROJ = {"forget": CTS_W_REC["forget"] + [25, 38, -13, 51], "cell": CTS_W_REC["cell"] + [38, -13, 25, 64],
                    "output": CTS_W_REC["output"] + [13, 64, 25, -38]}
CTS_BIAS = {"input": [644245, 3221226, 4724464, 8160438], "forget": [2147484, -6442451, -4294968, 2147484],
            "cell": [-1073742, 15461883, 5368709, 1717987], "output": [1073742, -214748, 4294968, 2147484]}
CTS_NORM = {"input": [3277, 6553, 9830, 16384], "forget": [6553, 6553, 13107, 9830],
            "cell": [22937, 6553, 9830, 26214], "output": [19660, 6553, 6553, 16384]}
CTS_X = np.array([[90, 102, 13, 26, 38], [102, 13, 26, 51, 64]], np.int8)


def cts_cell(gates, out_size, rec, projection):
    arr = lambda d, shape, dt: {g: np.array(d[g], dt).reshape(shape) for g in gates}  # noqa: E731
    return Cell(x=CTS_X, h=np.zeros((2, out_size), np.int8), c=np.zeros((2, 4), np.int16),
                w_in=arr(CTS_W_IN, (4, 5), np.int8), w_rec=arr(rec, (4, out_size), np.int8),
                bias=arr(CTS_BIAS, (4,), np.int32), layer_norm=arr(CTS_NORM, (4,), np.int16),
                proj_w=np.array([-25, 51, 3, -51, 25, 127, 77, 20, 18, 51, -102, 51], np.int8).reshape(3, 4)
                if projection else None, proj_b=np.zeros(3, np.int32) if projection else None,
                h_q=(3.05176e-05, 0) if projection else (3.05176e-05, 0))


CTS_QLSTM = {
    "projection": (GATES, 3, CTS_W_REC, True, [[127, 127, -108], [-67, 127, 127]],
                   [[-14650, 8939, 5771, 6715], [-11843, 7847, 1508, 12939]]),
    "projection_cifg": (GATES[1:], 3, CTS_W_REC, True, [[127, 127, 127], [-128, 127, 127]],
                        [[-11692, 9960, 5491, 8861], [-9422, 7726, 2056, 13149]]),
    "noprojection_cifg": (GATES[1:], 4, CTS_W_REC_NOPROJ, False, [[-15, 21, 14, 20], [-15, 15, 5, 27]],
                          [[-11692, 9960, 5491, 8861], [-9422, 7726, 2056, 13149]]),
}


@pytest.mark.parametrize("name", CTS_QLSTM)
def test_qlstm_cts_vectors(name):
    gates, out_size, rec, projection, want_out, want_cell = CTS_QLSTM[name]
    cell = cts_cell(gates, out_size, rec, projection)
    state_out, cell_out, output = cell.run()
    assert output.tolist() == want_out and state_out.tolist() == want_out and cell_out.tolist() == want_cell
    ref_out, ref_cell = qlstm_reference(cell)
    assert ref_out.tolist() == want_out and ref_cell.tolist() == want_cell


def test_qlstm_cifg_omitted_by_the_request():
    """The CTS form: the CIFG operands are model inputs the request leaves out."""
    gates, out_size, rec, projection, want_out, want_cell = CTS_QLSTM["projection_cifg"]
    cell = cts_cell(gates, out_size, rec, projection)
    _, cell_out, output = cell.run(omit_at_run={1, 5, 12, 20})
    assert output.tolist() == want_out and cell_out.tolist() == want_cell


def omitting(*inputs, const=True):
    ops = random_cell(peephole=True).operands(const=const)
    for i in inputs:
        ops[i] = (ops[i][0], None)
    return ops


PEEP = np.zeros(4, np.int16)
OMISSION_ERRORS = [
    ((5,), ["input 1", "CIFG"]),
    ((1, 5, 9, 20), ["input 12", "CIFG"]),
    ((1, 5, 12, 9), ["input 20", "input layer norm"]),
    ((11,), ["input 9", "peephole"]),
    ((20,), ["input 20", "layer norm"]),
    ((1, 5, 12, 9, 20, 22), ["input 21", "layer norm"]),
]


@pytest.mark.parametrize("omitted,words", OMISSION_ERRORS + [((2,), ["input 2", "omitted"]),
                                                             ((19,), ["input 19", "omitted"]),
                                                             ((26,), ["input 26", "omitted"])])
def test_qlstm_omission_rules_on_constants(omitted, words):
    # Constant (or omitted) operands: the rules are checked while the model is built.
    expect_error(QOP, omitting(*omitted), random_cell().outputs(), *words)


@pytest.mark.parametrize("omitted,words", OMISSION_ERRORS[:2])
def test_qlstm_omission_rules_on_model_inputs(omitted, words):
    # A request may still omit a model input, so the rules wait for the execution (as in NNAPI).
    expect_error(QOP, omitting(*omitted, const=False), random_cell().outputs(), *words,
                 result=ResultCode.OP_FAILED)


def test_qlstm_cifg_keeps_an_input_peephole():
    # NNAPI lets CIFG keep the (unused) input peephole weights when the other two are given.
    cell = random_cell(cifg=True, peephole=True)
    cell.peephole["input"] = PEEP
    _, cell_out, output = cell.run()
    ref_out, ref_cell = qlstm_reference(cell)
    assert cell_out.tolist() == ref_cell.tolist() and output.tolist() == ref_out.tolist()


def qlstm_mutated(index, **changes):
    ops = random_cell().operands()
    t, v = ops[index]
    ops[index] = (replace(t, **changes), v)
    return ops


@pytest.mark.parametrize("ops,words", [
    (qlstm_mutated(3, code=Q8AS), ["input 3", "not allowed"]),
    (qlstm_mutated(0, code=Q8A), ["input 0", "not allowed"]),
    (qlstm_mutated(30, code=OperandCode.FLOAT32), ["input 30", "not allowed"]),
    (qlstm_mutated(6, dimensions=(4, 4)), ["input 6", "must be [4, 3]"]),
    (qlstm_mutated(2, dimensions=(4, 6)), ["input 2", "must be [4, 5]"]),
    (qlstm_mutated(16, dimensions=(4, 4)), ["input 16", "must be [3, 4]"]),
    (qlstm_mutated(22, dimensions=(5,)), ["input 22", "must be [4]"]),
    (qlstm_mutated(19, dimensions=(3, 4)), ["input 19", "batches"]),
    (qlstm_mutated(0, dimensions=(2, 5, 1)), ["input 0", "rank 3"]),
])
def test_qlstm_validation(ops, words):
    expect_error(QOP, ops, random_cell().outputs(), *words)


def test_qlstm_outputs_counts_and_projection_sizes():
    cell = random_cell()
    outs = cell.outputs()
    expect_error(QOP, cell.operands(), [outs[0], T(Q16S, (2, 4), 2 ** -15), outs[0], outs[0]], "expected 3 outputs")
    expect_error(QOP, cell.operands(), [outs[0], outs[1], T(Q8A, (2, 3), 0.1, 0)], "output 2", "not allowed")
    expect_error(QOP, cell.operands()[:31], outs, "expected 32 inputs")
    no_projection = random_cell(projection=False)
    ops = no_projection.operands()
    ops[18] = (T(Q8AS, (2, 3), 0.01, 0), np.zeros((2, 3), np.int8))
    for g in (5, 6, 7, 8):
        ops[g] = (T(Q8S, (4, 3), 0.01), np.zeros((4, 3), np.int8))
    expect_error(QOP, ops, [T(Q8AS, (2, 3), 0.01, 0), outs[1], T(Q8AS, (2, 3), 0.01, 0)], "input 18",
                 "output size (3) must equal the number of units (4)")


@pytest.mark.parametrize("scale,words", [(2.0 ** -8, ["input 19", "2^-9"]), (0.0001, ["input 19", "power of two"]),
                                         (2.0 ** -16, ["input 19", "2^-15"])])
def test_qlstm_cell_scale_fails_at_execution(scale, words):
    ops = random_cell().operands()
    ops[19] = (replace(ops[19][0], scale=scale), ops[19][1])
    outs = random_cell().outputs()
    outs[1] = replace(outs[1], scale=scale)
    expect_error(QOP, ops, outs, *words, result=ResultCode.OP_FAILED)


def test_qlstm_shape_inference():
    cell = random_cell()
    outs = [T(Q8AS, (0, 0), *cell.h_q), T(Q16S, None, 2.0 ** -15), T(Q8AS, (2, 0), *cell.h_q)]
    assert [t.dimensions for t in inferred_output_types(QOP, cell.operands(), outs)] == [(2, 3), (2, 4), (2, 3)]
    ops = cell.operands()
    ops[19] = (T(Q16S, (0, 4), 2.0 ** -15), ops[19][1])  # unknown batch size: shapes wait for run time
    assert [t.dimensions for t in inferred_output_types(QOP, ops, outs)] == [(0, 0), None, (2, 0)]


def test_qlstm_quantized_clip_values():
    # cell clip 0.5 at 2^-11: 1024 steps; projection clip 0.05 / 0.00392157 = 12.75: 12 steps.
    cell = random_cell(cell_shift=-11, cell_clip=0.5, proj_clip=0.05)
    _, cell_out, output = cell.run()
    assert np.abs(cell_out).max() == 1024 and np.abs(output).max() == 12
    ref_out, ref_cell = qlstm_reference(cell)
    assert cell_out.tolist() == ref_cell.tolist() and output.tolist() == ref_out.tolist()
