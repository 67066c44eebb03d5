"""Post-training quantization of float ONNX models into QDQ ONNX models (NNAPI's 8-bit schemes).

`quantize_model(float_model, calibration_inputs, scheme=..., calibration=...)` runs the float
graph over calibration inputs with a small numpy evaluator (`Evaluator`; no onnxruntime needed),
collects the range of every activation that gets quantized, and returns a QDQ model:
QuantizeLinear/DequantizeLinear pairs around float operations, the format onnxruntime and the
mlts importer understand. Quantized values follow NNAPI: real = (q - zero_point) * scale.

Schemes
- "uint8": uint8 activations (asymmetric; the range always includes 0) and per-tensor
  asymmetric uint8 weights: NNAPI's TENSOR_QUANT8_ASYMM models.
- "int8": int8 activations (asymmetric, TENSOR_QUANT8_ASYMM_SIGNED) and per-channel symmetric
  int8 convolution weights (zero point 0, one scale per output channel, axis 0 of OIHW):
  TENSOR_QUANT8_SYMM_PER_CHANNEL. Fully-connected (Gemm) weights stay per-tensor symmetric int8
  unless `per_channel_fc=True`, because NNAPI's FULLY_CONNECTED has no per-channel filters.
- Biases: int32, scale = input scale x weight scale (per channel where the weights are),
  zero point 0, as DequantizeLinear(int32 bias).

Graph rules (what the NNAPI quantized operations require)
- Conv (or Gemm) followed by its only consumer Relu/Clip is fused: DQ -> Conv -> Clip -> Q, the
  activation's output range sets the output quantization (NNAPI keeps the fused RELU6 through it).
- Add (residuals): both inputs and the output are quantized.
- Pooling and reshaping (GlobalAveragePool, AveragePool, MaxPool, Flatten, Reshape, Identity)
  keep their input's scale and zero point, as NNAPI requires for them.
- Softmax outputs have scale 1/256 and zero point 0 (uint8) or -128 (int8).
- The graph input keeps its name and shape, becomes uint8/int8 with scale 1/127.5 and zero point
  128 (int8: 0) followed by DequantizeLinear, so the model takes quantized images directly;
  graph outputs keep their names and become the quantized tensors.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

SCHEMES = ("uint8", "int8")
CALIBRATIONS = ("minmax", "percentile")
QUANT_OPSET = 13

_DTYPES = {"uint8": np.uint8, "int8": np.int8}
_INPUT_ZERO_POINT = {"uint8": 128, "int8": 0}
_SOFTMAX_ZERO_POINT = {"uint8": 0, "int8": -128}
INPUT_SCALE = np.float32(1.0 / 127.5)
SOFTMAX_SCALE = np.float32(1.0 / 256.0)
_INT32 = np.iinfo(np.int32)

_FUSABLE_ACTIVATIONS = ("Relu", "Clip")
_SAME_PARAMS_OPS = ("GlobalAveragePool", "AveragePool", "MaxPool", "Flatten", "Reshape", "Identity")
_CALIBRATED_OPS = ("Conv", "Gemm", "MatMul", "Relu", "Clip", "Add", "Sub", "Mul")
_WEIGHTED_OPS = ("Conv", "Gemm", "MatMul")


# ---------------------------------------------------------------------------------------------
# Scale / zero-point arithmetic
# ---------------------------------------------------------------------------------------------

def _qrange(dtype) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def choose_qparams(lo: float, hi: float, dtype=np.uint8, *, bits: int = 8) -> tuple[np.float32, int]:
    """Asymmetric parameters for the real range [lo, hi] (widened to include 0).

    scale = (hi - lo) / (qmax - qmin), zero_point = round(qmin - lo / scale), clamped to the type.
    E.g. [-1, 3] uint8 -> scale 4/255, zero point 64; int8 -> scale 4/255, zero point -64.
    An empty range [0, 0] gets scale 1 and zero point qmin. bits < 8 uses the type's lowest
    2**bits levels (uint8: [0, 2**bits - 1]; int8: [-2**(bits-1), 2**(bits-1) - 1]).
    """
    qmin, qmax = _qrange(dtype)
    if bits < 8:
        qmin, qmax = (0, 2 ** bits - 1) if qmin == 0 else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ValueError(f"cannot quantize a non-finite range [{lo}, {hi}]")
    if hi - lo <= 0.0:
        return np.float32(1.0), qmin
    exact = (hi - lo) / (qmax - qmin)
    scale = np.float32(exact)
    if scale <= 0.0:  # a range below float32's resolution
        scale = np.float32(np.finfo(np.float32).tiny)
        exact = float(scale)
    zero_point = int(np.clip(np.rint(qmin - lo / exact), qmin, qmax))
    return scale, zero_point


def symmetric_scales(amax: np.ndarray | float, dtype=np.int8, *, bits: int = 8) -> np.ndarray:
    """Symmetric scales (zero point 0) for absolute maxima: amax / 127 for int8 (range [-127, 127]).

    bits < 8: amax / (2**(bits-1) - 1), e.g. 7 bits: [-63, 63].
    """
    _, qmax = _qrange(dtype)
    if bits < 8:
        qmax = 2 ** (bits - 1) - 1
    amax = np.asarray(amax, np.float64)
    scales = np.where(amax > 0, amax / qmax, 1.0)
    return np.maximum(scales, np.finfo(np.float32).tiny).astype(np.float32)


def _broadcast(param: np.ndarray, ndim: int, axis: int | None) -> np.ndarray:
    param = np.asarray(param)
    if param.ndim == 0 or axis is None:
        return param
    shape = [1] * ndim
    shape[axis] = param.size
    return param.reshape(shape)


def quantize_array(x: np.ndarray, scale, zero_point, dtype, axis: int | None = None) -> np.ndarray:
    """ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zero_point)."""
    dtype = np.dtype(dtype)
    x = np.asarray(x)
    axis = None if axis is None else axis % max(x.ndim, 1)
    lo, hi = _qrange(dtype)
    if dtype == np.int32:
        s = _broadcast(np.asarray(scale, np.float32).astype(np.float64), x.ndim, axis)
        zp = _broadcast(np.asarray(zero_point).astype(np.float64), x.ndim, axis)
        q = np.rint(x.astype(np.float64) / s) + zp
    else:  # float32 holds every 8/16-bit value exactly
        s = _broadcast(np.asarray(scale, np.float32), x.ndim, axis)
        zp = _broadcast(np.asarray(zero_point).astype(np.float32), x.ndim, axis)
        q = np.asarray(np.divide(x, s, dtype=np.float32))
        np.rint(q, out=q)
        q += zp
    np.clip(q, lo, hi, out=q)
    return q.astype(dtype)


def dequantize_array(q: np.ndarray, scale, zero_point=0, axis: int | None = None) -> np.ndarray:
    """ONNX DequantizeLinear: (q - zero_point) * scale, in float32."""
    q = np.asarray(q)
    axis = None if axis is None else axis % max(q.ndim, 1)
    s = _broadcast(np.asarray(scale, np.float32), q.ndim, axis)
    if q.dtype.itemsize >= 4:  # int32 biases: subtract in integers, then convert (as onnxruntime)
        zp = _broadcast(np.asarray(zero_point).astype(np.int64), q.ndim, axis)
        return ((q.astype(np.int64) - zp).astype(np.float32) * s).astype(np.float32)
    zp = _broadcast(np.asarray(zero_point).astype(np.float32), q.ndim, axis)
    out = np.asarray(q.astype(np.float32))
    out -= zp
    out *= s
    return out


@dataclass(frozen=True)
class QParams:
    """Quantization parameters of one tensor: scalar (per-tensor) or 1-D along `axis` (per-channel)."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    @property
    def dtype(self) -> np.dtype:
        return self.zero_point.dtype

    @staticmethod
    def per_tensor(scale: float, zero_point: int, dtype) -> "QParams":
        return QParams(np.array(scale, np.float32), np.array(zero_point, np.dtype(dtype)))


# ---------------------------------------------------------------------------------------------
# A numpy evaluator of float (and QDQ) ONNX graphs
# ---------------------------------------------------------------------------------------------

def _attrs(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _cnhw(shape: tuple[int, int, int, int]) -> np.ndarray:
    """A zeroed NCHW-shaped view of a channel-major (C, N, H, W) buffer.

    Convolutions keep their results channel-major, so a 1x1 convolution is one matrix product
    (O, C) @ (C, N*H*W) over the whole batch, with no copies in between (a few large products are
    much faster than many small ones, above all when BLAS threads compete for busy cores).
    """
    n, c, h, w = shape
    return np.zeros((c, n, h, w), np.float32).transpose(1, 0, 2, 3)


def _channel_major(x: np.ndarray) -> np.ndarray:
    """x (N, C, H, W) as a (C, N*H*W) matrix (free when x is a channel-major view)."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.transpose(1, 0, 2, 3)).reshape(c, n * h * w)


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, strides=(1, 1), pads=(0, 0, 0, 0),
          dilations=(1, 1), group: int = 1) -> np.ndarray:
    """2-D convolution of NCHW x with OIHW w (im2col + one matmul; depthwise by shifted slices)."""
    x = np.asarray(x, np.float32)
    w = np.asarray(w, np.float32)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    sh, sw = strides
    dh, dw = dilations
    pt, pl, pb, pr = pads
    if any(pads):
        xp = _cnhw((n, c, h + pt + pb, wd + pl + pr))
        xp[:, :, pt:pt + h, pl:pl + wd] = x
        x = xp
    hp, wp = x.shape[2], x.shape[3]
    oh = (hp - dh * (kh - 1) - 1) // sh + 1
    ow = (wp - dw * (kw - 1) - 1) // sw + 1

    def window(src: np.ndarray, i: int, j: int) -> np.ndarray:
        return src[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]

    if group == 1:
        if kh == kw == 1 and sh == sw == 1:
            cols = _channel_major(x)
        else:
            cols = np.empty((c, kh, kw, n, oh, ow), np.float32)
            for i in range(kh):
                for j in range(kw):
                    cols[:, i, j] = window(x, i, j).transpose(1, 0, 2, 3)
            cols = cols.reshape(c * kh * kw, n * oh * ow)
        out = np.matmul(w.reshape(o, c * kh * kw), cols).reshape(o, n, oh, ow).transpose(1, 0, 2, 3)
    elif group == c and cg == 1:
        mult = o // c
        if mult != 1:
            x = np.repeat(x, mult, axis=1)
        out = _cnhw((n, o, oh, ow))
        # Channel blocks small enough to stay in cache while the kernel taps accumulate.
        xc, oc = x.transpose(1, 0, 2, 3), out.transpose(1, 0, 2, 3)
        step = max(1, (1 << 17) // max(1, n * oh * ow))
        for c0 in range(0, o, step):
            c1 = min(o, c0 + step)
            acc, src = oc[c0:c1], xc[c0:c1]
            tmp = np.empty_like(acc)
            for i in range(kh):
                for j in range(kw):
                    np.multiply(window(src, i, j), w[c0:c1, 0, i, j][:, None, None, None], out=tmp)
                    acc += tmp
    else:
        og = o // group
        out = np.concatenate([
            _conv(x[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og], None, strides=strides, dilations=dilations)
            for g in range(group)], axis=1)
    if b is not None:
        out += np.asarray(b, np.float32)[None, :, None, None]
    return out


def _conv_node(node, ins: list, a: dict) -> np.ndarray:
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError(f"Conv {node.name!r}: auto_pad is not supported by the numpy evaluator")
    if x.ndim != 4:
        raise NotImplementedError(f"Conv {node.name!r}: only 2-D convolutions are supported")
    return _conv(x, w, b, strides=tuple(a.get("strides", (1, 1))), pads=tuple(a.get("pads", (0, 0, 0, 0))),
                 dilations=tuple(a.get("dilations", (1, 1))), group=int(a.get("group", 1)))


def _clip(node, ins: list, a: dict) -> np.ndarray:
    x = ins[0]
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else a.get("min")
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else a.get("max")
    if lo is None and hi is None:
        return x
    y = np.maximum(x, np.asarray(lo, x.dtype)) if lo is not None else np.array(x, copy=True)
    if hi is not None:
        np.minimum(y, np.asarray(hi, x.dtype), out=y)
    return y


def _gemm(node, ins: list, a: dict) -> np.ndarray:
    A, B = ins[0], ins[1]
    if a.get("transA", 0):
        A = A.T
    if a.get("transB", 0):
        B = B.T
    y = np.float32(a.get("alpha", 1.0)) * np.matmul(A, B)
    if len(ins) > 2 and ins[2] is not None:
        y = y + np.float32(a.get("beta", 1.0)) * ins[2]
    return y.astype(np.float32, copy=False)


def _softmax(node, ins: list, a: dict) -> np.ndarray:
    x = ins[0]
    axis = int(a.get("axis", -1))
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype, copy=False)


def _reshape(node, ins: list, a: dict) -> np.ndarray:
    x, shape = ins[0], [int(d) for d in ins[1]]
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def _flatten(node, ins: list, a: dict) -> np.ndarray:
    x = ins[0]
    axis = int(a.get("axis", 1)) % (x.ndim + 1) if x.ndim else 0
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)


def _pool(node, ins: list, a: dict) -> np.ndarray:
    x = ins[0]
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", (1, 1))
    pt, pl, pb, pr = a.get("pads", (0, 0, 0, 0))
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or a.get("ceil_mode", 0):
        raise NotImplementedError(f"{node.op_type} {node.name!r}: auto_pad/ceil_mode are not supported")
    is_max = node.op_type == "MaxPool"
    fill = -np.inf if is_max else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill) if any((pt, pl, pb, pr)) else x
    oh = (xp.shape[2] - kh) // sh + 1
    ow = (xp.shape[3] - kw) // sw + 1
    wins = [xp[:, :, i: i + sh * (oh - 1) + 1: sh, j: j + sw * (ow - 1) + 1: sw] for i in range(kh) for j in range(kw)]
    if is_max:
        return np.maximum.reduce(wins).astype(np.float32)
    total = np.add.reduce(wins)
    if a.get("count_include_pad", 0) or not any((pt, pl, pb, pr)):
        return (total / np.float32(kh * kw)).astype(np.float32)
    ones = np.pad(np.ones((1, 1) + x.shape[2:], np.float32), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    counts = np.add.reduce([ones[:, :, i: i + sh * (oh - 1) + 1: sh, j: j + sw * (ow - 1) + 1: sw]
                            for i in range(kh) for j in range(kw)])
    return (total / counts).astype(np.float32)


def _quantize_linear(node, ins: list, a: dict) -> np.ndarray:
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else np.array(0, np.uint8)
    axis = int(a.get("axis", 1)) if np.asarray(ins[1]).ndim else None
    return quantize_array(ins[0], ins[1], zp, zp.dtype, axis)


def _dequantize_linear(node, ins: list, a: dict) -> np.ndarray:
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else 0
    axis = int(a.get("axis", 1)) if np.asarray(ins[1]).ndim else None
    return dequantize_array(ins[0], ins[1], zp, axis)


_OPS: dict[str, Callable] = {
    "Conv": _conv_node,
    "Clip": _clip,
    "Relu": lambda n, ins, a: np.maximum(ins[0], np.float32(0)),
    "Add": lambda n, ins, a: ins[0] + ins[1],
    "Sub": lambda n, ins, a: ins[0] - ins[1],
    "Mul": lambda n, ins, a: ins[0] * ins[1],
    "GlobalAveragePool": lambda n, ins, a: ins[0].mean(axis=tuple(range(2, ins[0].ndim)), keepdims=True,
                                                       dtype=np.float32),
    "AveragePool": _pool,
    "MaxPool": _pool,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Identity": lambda n, ins, a: ins[0],
    "Gemm": _gemm,
    "MatMul": lambda n, ins, a: np.matmul(ins[0], ins[1]),
    "Softmax": _softmax,
    "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": _dequantize_linear,
}


def _toposort(nodes: Sequence, available: set[str]) -> list:
    """Nodes in data-dependency order (stable for graphs that are already sorted)."""
    ready = set(available)
    pending, ordered = list(nodes), []
    while pending:
        progressed, rest = False, []
        for node in pending:
            if all(not t or t in ready for t in node.input):
                ordered.append(node)
                ready.update(node.output)
                progressed = True
            else:
                rest.append(node)
        if not progressed:
            missing = sorted({t for n in rest for t in n.input if t and t not in ready})
            raise ValueError(f"graph has a cycle or undefined tensors: {missing[:5]}")
        pending = rest
    return ordered


class Evaluator:
    """Evaluates an ONNX graph with numpy, batch by batch, exposing intermediate tensors.

    Supports the operations MobileNet graphs and their QDQ versions use: Conv, Clip, Relu, Add,
    Sub, Mul, GlobalAveragePool, AveragePool, MaxPool, Flatten, Reshape, Identity, Gemm, MatMul,
    Softmax, QuantizeLinear, DequantizeLinear. The declared batch size is not enforced, so a
    [1, 3, H, W] model runs on [N, 3, H, W] batches.
    """

    def __init__(self, model) -> None:
        from onnx import numpy_helper
        graph = model.graph
        self.constants: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant":
                self.constants[node.output[0]] = numpy_helper.to_array(_attrs(node)["value"])
        self.input_names = [i.name for i in graph.input if i.name not in self.constants]
        self.output_names = [o.name for o in graph.output]
        nodes = [n for n in graph.node if n.op_type != "Constant"]
        unsupported = sorted({n.op_type for n in nodes if n.op_type not in _OPS})
        if unsupported:
            raise NotImplementedError(f"the numpy evaluator does not support {unsupported}")
        self.nodes = _toposort(nodes, set(self.constants) | set(self.input_names))
        self._attrs = [_attrs(n) for n in self.nodes]
        self._last_use: dict[str, int] = {}
        for k, node in enumerate(self.nodes):
            for t in node.input:
                if t:
                    self._last_use[t] = k

    def run(self, feeds: Mapping[str, np.ndarray] | np.ndarray, outputs: Sequence[str] | None = None, *,
            observe: Callable[[str, np.ndarray], None] | None = None) -> dict[str, np.ndarray]:
        """Runs the graph; returns `outputs` (default: the graph outputs; any tensor may be named).

        `observe(name, value)` is called for every graph input and every node output as it is
        produced; intermediate tensors are freed after their last use.
        """
        if not isinstance(feeds, Mapping):
            if len(self.input_names) != 1:
                raise ValueError(f"the model has inputs {self.input_names}: pass a dict")
            feeds = {self.input_names[0]: feeds}
        wanted = list(self.output_names if outputs is None else outputs)
        keep = set(wanted)
        env: dict[str, np.ndarray] = {}
        for name in self.input_names:
            if name not in feeds:
                raise ValueError(f"missing input {name!r}")
            env[name] = np.asarray(feeds[name])
            if observe is not None:
                observe(name, env[name])
        for k, (node, a) in enumerate(zip(self.nodes, self._attrs)):
            ins = [None if not t else (env[t] if t in env else self.constants[t]) for t in node.input]
            result = _OPS[node.op_type](node, ins, a)
            results = result if isinstance(result, tuple) else (result,)
            for name, value in zip(node.output, results):
                env[name] = value
                if observe is not None:
                    observe(name, value)
            for t in node.input:
                if t and t in env and self._last_use.get(t) == k and t not in keep:
                    del env[t]
        missing = [t for t in wanted if t not in env and t not in self.constants]
        if missing:
            raise ValueError(f"unknown tensors {missing}")
        return {t: env[t] if t in env else self.constants[t] for t in wanted}


# ---------------------------------------------------------------------------------------------
# Calibration: activation ranges
# ---------------------------------------------------------------------------------------------

class _MinMax:
    def __init__(self) -> None:
        self.lo, self.hi = np.inf, -np.inf

    def add(self, x: np.ndarray) -> None:
        self.lo = min(self.lo, float(x.min()))
        self.hi = max(self.hi, float(x.max()))

    def range(self) -> tuple[float, float]:
        return self.lo, self.hi


class _Histogram(_MinMax):
    """A histogram over [-R, R] whose range doubles (merging bin pairs, exactly) as values grow."""

    BINS = 8192

    def __init__(self, percentile: float) -> None:
        super().__init__()
        self.percentile = float(percentile)
        self.R = 0.0
        self.counts = np.zeros(self.BINS, np.int64)

    def add(self, x: np.ndarray) -> None:
        super().add(x)
        amax = max(abs(self.lo), abs(self.hi))
        if amax == 0.0:
            self.counts[self.BINS // 2] += x.size
            return
        if self.R == 0.0:
            zeros = self.counts.sum()
            self.R = amax
            self.counts[:] = 0
            self.counts[self.BINS // 2] = zeros
        while amax > self.R:
            merged = self.counts.reshape(-1, 2).sum(axis=1)
            self.counts[:] = 0
            self.counts[self.BINS // 4: 3 * self.BINS // 4] = merged
            self.R *= 2.0
        idx = ((x.ravel() + np.float32(self.R)) * np.float32(self.BINS / (2.0 * self.R))).astype(np.int64)
        np.clip(idx, 0, self.BINS - 1, out=idx)
        self.counts += np.bincount(idx, minlength=self.BINS)

    def range(self) -> tuple[float, float]:
        total = int(self.counts.sum())
        if total == 0 or self.R == 0.0:
            return super().range()
        cdf = np.cumsum(self.counts)
        width = 2.0 * self.R / self.BINS
        tail = total * (1.0 - self.percentile / 100.0)
        hi_bin = int(np.searchsorted(cdf, total - tail, side="left"))
        lo_bin = int(np.searchsorted(cdf, tail, side="right"))
        hi = min(self.hi, -self.R + (hi_bin + 1) * width)
        lo = max(self.lo, -self.R + lo_bin * width)
        return min(lo, hi), hi


def _batches(inputs: Iterable[np.ndarray] | np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """Re-chunks arrays ([N, ...] batches or single [C, H, W] samples) into batches of `batch_size`."""
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    pending, count = [], 0
    for item in inputs:
        arr = np.asarray(item, np.float32)
        if arr.ndim == 3:
            arr = arr[None]
        while arr.shape[0]:
            take = min(batch_size - count, arr.shape[0])
            pending.append(arr[:take])
            count += take
            arr = arr[take:]
            if count == batch_size:
                yield np.concatenate(pending) if len(pending) > 1 else pending[0]
                pending, count = [], 0
    if pending:
        yield np.concatenate(pending) if len(pending) > 1 else pending[0]


def _parse_calibration(calibration: str, percentile: float) -> tuple[str, float]:
    if isinstance(calibration, str) and calibration.startswith("percentile:"):
        try:
            return "percentile", float(calibration.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"bad calibration {calibration!r} (expected e.g. 'percentile:99.99')") from None
    return calibration, float(percentile)


def collect_ranges(float_model, calibration_inputs: Iterable[np.ndarray] | np.ndarray, tensors: Iterable[str], *,
                   calibration: str = "minmax", percentile: float = 99.99,
                   batch_size: int = 16) -> tuple[dict[str, tuple[float, float]], int]:
    """Runs the float model over the inputs; returns ({tensor: (lo, hi)}, number of samples).

    Inputs are float arrays of the model's input ([N, C, H, W] or [C, H, W]) or, for image
    models, NHWC uint8 images, preprocessed with mlts.datasets.preprocess.to_float_input.
    calibration: "minmax", "percentile" (with `percentile`), or "percentile:<p>".
    """
    calibration, percentile = _parse_calibration(calibration, percentile)
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {calibration!r} (expected one of {', '.join(CALIBRATIONS)})")
    if calibration == "percentile" and not 50.0 < float(percentile) <= 100.0:
        raise ValueError(f"percentile must be in (50, 100], got {percentile}")
    evaluator = float_model if isinstance(float_model, Evaluator) else Evaluator(float_model)
    tensors = set(tensors)
    stats = {t: (_Histogram(percentile) if calibration == "percentile" else _MinMax()) for t in tensors}

    def observe(name: str, value: np.ndarray) -> None:
        if name in stats:
            stats[name].add(value)

    def as_float(items):
        from mlts.datasets.preprocess import to_float_input
        for item in ([items] if isinstance(items, np.ndarray) else items):
            item = np.asarray(item)
            yield to_float_input(item) if item.dtype == np.uint8 and item.shape[-1] == 3 else item

    samples = 0
    for batch in _batches(as_float(calibration_inputs), batch_size):
        evaluator.run(batch, outputs=[], observe=observe)
        samples += batch.shape[0]
    if samples == 0:
        raise ValueError("no calibration inputs")
    return {t: s.range() for t, s in stats.items()}, samples


# ---------------------------------------------------------------------------------------------
# The QDQ rewrite
# ---------------------------------------------------------------------------------------------

@dataclass
class _Plan:
    """How each activation tensor is quantized: ("calibrated",), ("same", other) or ("fixed", s, zp)."""

    specs: dict[str, tuple]
    fused: set[str]
    order: list[str]


def _plan(model, scheme: str, input_params: tuple[float, int] | None) -> _Plan:
    graph = model.graph
    constants = {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant"
                                                        for o in n.output}
    inputs = [i.name for i in graph.input if i.name not in constants]
    nodes = _toposort([n for n in graph.node if n.op_type != "Constant"], constants | set(inputs))
    outputs = {o.name for o in graph.output}
    consumers: dict[str, list] = {}
    for node in nodes:
        for t in node.input:
            if t:
                consumers.setdefault(t, []).append(node)
    specs: dict[str, tuple] = {}
    order: list[str] = []
    for name in inputs:
        specs[name] = ("fixed",) + input_params if input_params is not None else ("calibrated",)
        order.append(name)
    fused: set[str] = set()
    for node in nodes:
        op = node.op_type
        if op not in _CALIBRATED_OPS and op not in _SAME_PARAMS_OPS and op != "Softmax":
            raise NotImplementedError(
                f"cannot quantize {op} ({node.name!r}); supported: "
                f"{', '.join(_CALIBRATED_OPS + _SAME_PARAMS_OPS + ('Softmax',))}")
        out = node.output[0]
        if op in _WEIGHTED_OPS:
            users = consumers.get(out, [])
            if (len(users) == 1 and users[0].op_type in _FUSABLE_ACTIVATIONS and out not in outputs
                    and all(not t or t in constants for t in users[0].input[1:])):
                fused.add(out)
                continue
        if op == "Softmax":
            specs[out] = ("fixed", SOFTMAX_SCALE, _SOFTMAX_ZERO_POINT[scheme])
        elif op in _SAME_PARAMS_OPS:
            specs[out] = ("same", node.input[0])
        else:
            specs[out] = ("calibrated",)
        order.append(out)
    return _Plan(specs, fused, order)


def _weight_params(w: np.ndarray, scheme: str, axis: int | None, bits: int = 8) -> QParams:
    """uint8: per-tensor asymmetric; int8: symmetric, per channel along `axis` (or per tensor)."""
    if scheme == "uint8":
        scale, zp = choose_qparams(float(w.min()), float(w.max()), np.uint8, bits=bits)
        return QParams.per_tensor(scale, zp, np.uint8)
    if axis is None:
        return QParams(symmetric_scales(np.abs(w).max(), bits=bits), np.array(0, np.int8))
    reduce = tuple(i for i in range(w.ndim) if i != axis)
    scales = symmetric_scales(np.abs(w).max(axis=reduce), bits=bits)
    return QParams(scales, np.zeros(scales.shape, np.int8), axis)


def _fit_bias(w: np.ndarray, b: np.ndarray | None, wq: QParams, in_scale: np.float32, scheme: str,
              bits: int = 8) -> QParams:
    """Widens weight scales where an int32 bias (scale = in x w) would overflow (very rare)."""
    if b is None:
        return wq
    b = np.asarray(b, np.float64).reshape(-1)
    limit = float(_INT32.max) - 1.0
    if wq.axis is None:
        need = float(np.abs(b).max(initial=0.0)) / (float(in_scale) * limit)
        if need <= float(wq.scale):
            return wq
        if scheme == "uint8":
            lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
            span = need * (2 ** bits - 1)
            grow = span / max(hi - lo, 1e-30)
            scale, zp = choose_qparams(lo * grow, hi * grow, np.uint8, bits=bits)
            return QParams.per_tensor(scale, zp, np.uint8)
        return QParams(np.array(np.float32(need) * np.float32(1.0001), np.float32), wq.zero_point)
    need = (np.abs(b) / (float(in_scale) * limit)).astype(np.float32) * np.float32(1.0001)
    return QParams(np.maximum(wq.scale, need).astype(np.float32), wq.zero_point, wq.axis)


def quantize_model(float_model, calibration_inputs: Iterable[np.ndarray] | np.ndarray, *, scheme: str = "uint8",
                   calibration: str = "minmax", percentile: float = 99.99, batch_size: int = 16,
                   input_params: tuple[float, int] | str | None = None, per_channel_fc: bool = False,
                   reduce_range: bool = False, ranges: Mapping[str, tuple[float, float]] | None = None):
    """Quantizes a float ONNX model into a QDQ ONNX model (see the module docstring).

    calibration_inputs: float inputs of the float model ([N, C, H, W] batches or [C, H, W] samples;
    for MobileNets `mlts.datasets.preprocess.to_float_input(images)`), or NHWC uint8 images
    (converted with to_float_input). Any iterable: a generator of batches keeps memory small.
    calibration: "minmax" (the observed range) or "percentile" (the `percentile`-th and
    (100 - `percentile`)-th percentiles of every tensor's values over all calibration inputs,
    from a histogram; "percentile:99.9" sets the percentile too).
    input_params: (scale, zero_point) of the graph input; default (1/127.5, 128) for uint8 and
    (1/127.5, 0) for int8; "calibrated" to calibrate it like any activation.
    per_channel_fc: int8 only: per-channel Gemm weights too (NNAPI's FULLY_CONNECTED has none).
    reduce_range: 7-bit weights (uint8 [0, 127], int8 [-63, 63]), like onnxruntime's option of the
    same name: x86 CPUs without VNNI saturate int8 x int8 products in onnxruntime's fused kernels.
    ranges: precomputed {tensor: (lo, hi)} (skips calibration for those tensors).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r} (expected one of {', '.join(SCHEMES)})")
    calibration, percentile = _parse_calibration(calibration, percentile)
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {calibration!r} (expected one of {', '.join(CALIBRATIONS)})")
    act_dtype = np.dtype(_DTYPES[scheme])
    elem_type = TensorProto.UINT8 if scheme == "uint8" else TensorProto.INT8
    if input_params is None:
        input_params = (INPUT_SCALE, _INPUT_ZERO_POINT[scheme])
    elif input_params == "calibrated":
        input_params = None
    else:
        input_params = (np.float32(input_params[0]), int(input_params[1]))

    graph = float_model.graph
    plan = _plan(float_model, scheme, input_params)
    known = dict(ranges or {})
    todo = [t for t, spec in plan.specs.items() if spec[0] == "calibrated" and t not in known]
    samples = 0
    if todo:
        found, samples = collect_ranges(float_model, calibration_inputs, todo, calibration=calibration,
                                        percentile=percentile, batch_size=batch_size)
        known.update(found)

    # Resolve every activation's parameters (in graph order, so "same" finds its source).
    params: dict[str, QParams] = {}
    for name in plan.order:
        spec = plan.specs[name]
        if spec[0] == "fixed":
            params[name] = QParams.per_tensor(spec[1], spec[2], act_dtype)
        elif spec[0] == "same":
            src = spec[1]
            if src not in params:
                raise ValueError(f"{name!r} must share the parameters of {src!r}, which is not quantized")
            params[name] = params[src]
        else:
            lo, hi = known[name]
            scale, zp = choose_qparams(lo, hi, act_dtype)
            params[name] = QParams.per_tensor(scale, zp, act_dtype)

    initializers = {t.name: t for t in graph.initializer}
    inits_out = [t for t in graph.initializer]
    nodes_out: list = []
    graph_inputs = [i.name for i in graph.input if i.name not in initializers]
    graph_outputs = {o.name for o in graph.output}

    added: set[str] = set()

    def add_params(prefix: str, qp: QParams) -> tuple[str, str]:
        s_name, z_name = f"{prefix}_scale", f"{prefix}_zero_point"
        if s_name in added:
            return s_name, z_name
        added.add(s_name)
        inits_out.append(numpy_helper.from_array(np.asarray(qp.scale, np.float32), s_name))
        inits_out.append(numpy_helper.from_array(np.asarray(qp.zero_point), z_name))
        return s_name, z_name

    def q_node(src: str, dst: str, prefix: str, qp: QParams) -> None:
        s, z = add_params(prefix, qp)
        nodes_out.append(helper.make_node("QuantizeLinear", [src, s, z], [dst], name=f"{prefix}/quantize"))

    def dq_node(src: str, dst: str, prefix: str, qp: QParams) -> None:
        s, z = add_params(prefix, qp)
        kw = {"axis": qp.axis} if qp.axis is not None else {}
        nodes_out.append(helper.make_node("DequantizeLinear", [src, s, z], [dst], name=f"{prefix}/dequantize", **kw))

    # Graph inputs: quantized tensors of the same name and shape, dequantized for their consumers.
    rename: dict[str, str] = {}
    for name in graph_inputs:
        qp = params[name]
        dq_node(name, f"{name}_dequantized", name, qp)
        rename[name] = f"{name}_dequantized"

    quantized_weights: dict[str, str] = {}
    used_initializers: set[str] = set()
    nodes = _toposort([n for n in graph.node if n.op_type != "Constant"],
                      set(initializers) | set(graph_inputs) | {o for n in graph.node if n.op_type == "Constant"
                                                          for o in n.output})
    nodes_out.extend(n for n in graph.node if n.op_type == "Constant")
    consumed = {t for n in nodes for t in n.input}
    for node in nodes:
        new_inputs = [rename.get(t, t) for t in node.input]
        if node.op_type in _WEIGHTED_OPS and len(node.input) > 1 and node.input[1] in initializers:
            a = _attrs(node)
            if node.op_type == "Gemm" and (a.get("transA", 0) or a.get("alpha", 1.0) != 1.0
                                           or a.get("beta", 1.0) != 1.0):
                raise NotImplementedError(f"Gemm {node.name!r}: only alpha = beta = 1, transA = 0 is supported")
            x_name = node.input[0]
            if x_name not in params:
                raise ValueError(f"{node.op_type} {node.name!r}: input {x_name!r} is not quantized")
            in_scale = np.float32(params[x_name].scale)
            w_name = node.input[1]
            w = numpy_helper.to_array(initializers[w_name]).astype(np.float32)
            if node.op_type == "Conv":
                axis = 0 if scheme == "int8" else None
            elif node.op_type == "Gemm":
                axis = (0 if a.get("transB", 0) else 1) if (scheme == "int8" and per_channel_fc) else None
            else:
                axis = 1 if (scheme == "int8" and per_channel_fc) else None
            b_name = node.input[2] if len(node.input) > 2 and node.input[2] in initializers else None
            b = numpy_helper.to_array(initializers[b_name]).astype(np.float32) if b_name else None
            if b is not None and b.ndim != 1:
                raise NotImplementedError(f"{node.op_type} {node.name!r}: bias must be 1-D")
            bits = 7 if reduce_range else 8
            wq = _fit_bias(w, b, _weight_params(w, scheme, axis, bits), in_scale, scheme, bits)
            key = f"{w_name}|{wq.scale.tobytes()}|{wq.zero_point.tobytes()}"
            if key not in quantized_weights:
                base = w_name if w_name not in used_initializers else f"{w_name}_{len(quantized_weights)}"
                used_initializers.add(w_name)
                q_arr = quantize_array(w, wq.scale, wq.zero_point, wq.dtype, wq.axis)
                inits_out.append(numpy_helper.from_array(q_arr, f"{base}_quantized"))
                dq_node(f"{base}_quantized", f"{base}_dequantized", base, wq)
                quantized_weights[key] = f"{base}_dequantized"
            new_inputs[1] = quantized_weights[key]
            if b_name is not None:
                b_scale = (in_scale * np.asarray(wq.scale, np.float32)).astype(np.float32)
                b_axis = 0 if wq.axis is not None else None
                bq = QParams(b_scale, np.zeros(b_scale.shape, np.int32), b_axis)
                base = f"{b_name}_{len(quantized_weights)}" if b_name in used_initializers else b_name
                used_initializers.add(b_name)
                inits_out.append(numpy_helper.from_array(quantize_array(b, bq.scale, 0, np.int32, b_axis),
                                                         f"{base}_quantized"))
                dq_node(f"{base}_quantized", f"{base}_dequantized", base, bq)
                new_inputs[2] = f"{base}_dequantized"
        new_outputs = list(node.output)
        out = node.output[0]
        emit_after = []
        if out in params:
            qp = params[out]
            if out in graph_outputs:
                new_outputs[0] = f"{out}_float"
                emit_after.append(("q", f"{out}_float", out, out, qp))
                if out in consumed:
                    emit_after.append(("dq", out, f"{out}_dequantized", out, qp))
            else:
                emit_after.append(("q", out, f"{out}_quantized", out, qp))
                emit_after.append(("dq", f"{out}_quantized", f"{out}_dequantized", out, qp))
            rename[out] = f"{out}_dequantized"
        new_node = helper.make_node(node.op_type, new_inputs, new_outputs, name=node.name, domain=node.domain or None)
        new_node.attribute.extend(node.attribute)
        nodes_out.append(new_node)
        for kind, src, dst, prefix, qp in emit_after:
            (q_node if kind == "q" else dq_node)(src, dst, prefix, qp)

    # Keep only the initializers still referenced (weights and biases were replaced).
    referenced = {t for n in nodes_out for t in n.input}
    inits_out = [t for t in inits_out if t.name in referenced]

    def value_info(vi, quantized: bool):
        if not quantized:
            return vi
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in vi.type.tensor_type.shape.dim]
        return helper.make_tensor_value_info(vi.name, elem_type, dims)

    new_inputs_vi = [value_info(i, i.name in params) for i in graph.input if i.name not in initializers]
    new_outputs_vi = [value_info(o, o.name in params) for o in graph.output]
    qgraph = helper.make_graph(nodes_out, f"{graph.name}_{scheme}", new_inputs_vi, new_outputs_vi, inits_out)
    opset = max([o.version for o in float_model.opset_import if o.domain in ("", "ai.onnx")] + [QUANT_OPSET])
    opsets = [helper.make_opsetid("", opset)] + [o for o in float_model.opset_import if o.domain not in ("", "ai.onnx")]
    qmodel = helper.make_model(qgraph, producer_name="mlts-quantizer", opset_imports=opsets)
    qmodel.ir_version = max(float_model.ir_version, 7)
    meta = {"scheme": scheme, "calibration": calibration, "calibration_samples": samples,
            "weights": "per-tensor asymmetric uint8" if scheme == "uint8" else "per-channel symmetric int8",
            "weight_bits": 7 if reduce_range else 8}
    if calibration == "percentile":
        meta["percentile"] = float(percentile)
    helper.set_model_props(qmodel, {"mlts.quantization": json.dumps(meta)})
    onnx.checker.check_model(qmodel)
    return qmodel


# ---------------------------------------------------------------------------------------------
# Inspection and accuracy report
# ---------------------------------------------------------------------------------------------

def _const_params(model, node) -> QParams:
    from onnx import numpy_helper
    inits = {t.name: t for t in model.graph.initializer}
    scale = numpy_helper.to_array(inits[node.input[1]])
    zp = numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else np.array(0, np.uint8)
    axis = None
    if scale.ndim:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    return QParams(scale.astype(np.float32), zp, axis)


def input_qparams(quant_model, name: str | None = None) -> QParams:
    """Scale and zero point of a quantized model's input (the DequantizeLinear that reads it)."""
    name = name or quant_model.graph.input[0].name
    for node in quant_model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] == name:
            return _const_params(quant_model, node)
    raise ValueError(f"input {name!r} is not quantized")


def output_qparams(quant_model, name: str | None = None) -> QParams:
    """Scale and zero point of a quantized model's output (the QuantizeLinear that writes it)."""
    name = name or quant_model.graph.output[0].name
    for node in quant_model.graph.node:
        if node.op_type == "QuantizeLinear" and node.output[0] == name:
            return _const_params(quant_model, node)
    raise ValueError(f"output {name!r} is not quantized")


def _run_all(model, batches: Sequence[np.ndarray], runner: str) -> np.ndarray:
    if runner == "numpy":
        ev = Evaluator(model)
        return np.concatenate([ev.run(b)[ev.output_names[0]] for b in batches])
    if runner == "onnxruntime":
        import onnxruntime as ort  # test-only dependency
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        return np.concatenate([sess.run(None, {name: b[i:i + 1]})[0] for b in batches for i in range(b.shape[0])])
    raise ValueError(f"unknown runner {runner!r} (expected 'numpy' or 'onnxruntime')")


def quantization_report(float_model, quant_model, inputs: Iterable[np.ndarray] | np.ndarray, *,
                        labels: Sequence[int] | np.ndarray | None = None, runner: str = "numpy",
                        batch_size: int = 16) -> dict:
    """Compares a quantized model with its float model on the same inputs.

    inputs: NHWC uint8 images (preprocessed for each model with mlts.datasets.preprocess), or
    float inputs of the float model (quantized with the quantized model's input parameters).
    runner: "numpy" (this module's evaluator, for both) or "onnxruntime" (a test-only dependency).
    Returns top-1 agreement, the output error in quantization steps of the output (max, mean),
    the max absolute error, and with labels each model's top-1 accuracy.
    """
    from mlts.datasets.preprocess import to_float_input, to_quant_input

    qin = input_qparams(quant_model)
    qout = output_qparams(quant_model)
    arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
    float_batches, quant_batches = [], []
    for arr in arrays:
        arr = np.asarray(arr)
        if arr.dtype == np.uint8 and arr.shape[-1] == 3:
            float_batches.append(to_float_input(arr))
            quant_batches.append(to_quant_input(arr, float(qin.scale), int(qin.zero_point), qin.dtype))
        else:
            f = np.asarray(arr, np.float32)
            f = f[None] if f.ndim == 3 else f
            float_batches.append(f)
            quant_batches.append(quantize_array(f, qin.scale, qin.zero_point, qin.dtype))
    float_batches = list(_batches(float_batches, batch_size))
    quant_batches = [np.concatenate(quant_batches)[i:i + batch_size]
                     for i in range(0, sum(b.shape[0] for b in quant_batches), batch_size)]
    y_float = _run_all(float_model, float_batches, "numpy")
    y_quant_q = _run_all(quant_model, quant_batches, runner)
    y_quant = dequantize_array(y_quant_q, qout.scale, qout.zero_point)
    err = np.abs(y_quant.astype(np.float64) - y_float.astype(np.float64))
    steps = err / float(qout.scale)
    top_float = y_float.reshape(len(y_float), -1).argmax(axis=1)
    top_quant = y_quant.reshape(len(y_quant), -1).argmax(axis=1)
    report = {
        "num_inputs": int(len(y_float)),
        "top1_agreement": float(np.mean(top_float == top_quant)),
        "max_abs_error_steps": float(steps.max()),
        "mean_abs_error_steps": float(steps.mean()),
        "max_abs_error": float(err.max()),
        "output_scale": float(qout.scale),
        "output_zero_point": int(qout.zero_point),
        "runner": runner,
    }
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        report["float_accuracy"] = float(np.mean(top_float == labels))
        report["quant_accuracy"] = float(np.mean(top_quant == labels))
    return report
