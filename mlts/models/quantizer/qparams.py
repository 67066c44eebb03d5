"""Scale / zero-point arithmetic: choosing parameters for a range, quantizing and dequantizing arrays.

Quantized values follow NNAPI (and ONNX QuantizeLinear/DequantizeLinear):
real = (q - zero_point) * scale.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ACTIVATION_DTYPES = {"uint8": np.uint8, "int8": np.int8}
INPUT_SCALE = np.float32(1.0 / 127.5)
INPUT_ZERO_POINT = {"uint8": 128, "int8": 0}
SOFTMAX_SCALE = np.float32(1.0 / 256.0)
SOFTMAX_ZERO_POINT = {"uint8": 0, "int8": -128}  # SOFTMAX's and LOGISTIC's (Sigmoid) output
TANH_SCALE = np.float32(1.0 / 128.0)
TANH_ZERO_POINT = {"uint8": 128, "int8": 0}
INT32 = np.iinfo(np.int32)


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
