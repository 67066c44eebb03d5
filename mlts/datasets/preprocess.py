"""Image preprocessing shared by the float and the quantized MobileNets.

Images are HxWx3 (or NxHxWx3) uint8 pixels. The float models take NCHW float32 `x / 127.5 - 1`
(in [-1, 1]); the quantized models take the pixels themselves as their quantized input, with
scale 1/127.5 and zero point 128 (uint8) or 0 (int8), like TFLite's quantized MobileNets.
"""
from __future__ import annotations

import numpy as np

#: Quantization parameters of the quantized models' image input (scale, uint8 zero point).
INPUT_SCALE = np.float32(1.0 / 127.5)
INPUT_ZERO_POINT = {"uint8": 128, "int8": 0}


def _nhwc(images: np.ndarray) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[None]
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"expected HxWx3 or NxHxWx3 images, got shape {images.shape}")
    return images


def to_float_input(images: np.ndarray) -> np.ndarray:
    """NHWC (or HWC) uint8 images -> NCHW float32 in [-1, 1] (x / 127.5 - 1)."""
    x = _nhwc(images).astype(np.float32)
    return np.ascontiguousarray((x / np.float32(127.5) - np.float32(1.0)).transpose(0, 3, 1, 2))


def to_quant_input(images: np.ndarray, scale: float = float(INPUT_SCALE), zero_point: int = 128,
                   dtype=np.uint8) -> np.ndarray:
    """NHWC (or HWC) uint8 images -> NCHW quantized input with the given parameters.

    With scale 1/127.5 (the quantized MobileNets' input) the pixel itself is the quantized value,
    shifted by `zero_point - 128`: real = (q - zero_point) * scale = (pixel - 128) / 127.5, half a
    step from the float models' (pixel - 127.5) / 127.5 (rounding either way would be a tie).
    Other parameters quantize the float input: q = clamp(round(real / scale) + zero_point).
    """
    dtype = np.dtype(dtype)
    info = np.iinfo(dtype)
    px = _nhwc(images)
    if px.dtype == np.uint8 and abs(float(scale) * 127.5 - 1.0) < 1e-6:
        q = px.astype(np.int32) + (int(zero_point) - 128)
        q = q.transpose(0, 3, 1, 2)
    else:
        real = to_float_input(px).astype(np.float64)
        q = np.rint(real / float(scale)) + int(zero_point)
    return np.ascontiguousarray(np.clip(q, info.min, info.max).astype(dtype))
