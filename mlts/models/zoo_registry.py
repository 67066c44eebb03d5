"""The bundled model zoo: MobileNet v1/v2 at the MLTS sizes, an LSTM command classifier and an SSD-lite
detector (architectures.py), float and 8-bit quantized.

Float models are built from the trained weights shipped in `mlts/models/weights/` (float16 storage);
quantized ones are produced by the project's own post-training quantizer, calibrated on the
calibration split of the model's own data set, the first time they are needed, and cached (under
$MLTS_CACHE or ~/.cache/mlts). Nothing is downloaded.
"""
from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..fileio import atomic_write
from ..runtime import MltsError, ResultCode
from .architectures import Architecture, architecture, architectures

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
CALIBRATION_IMAGES = 200
QUANT_SUFFIX = {None: "", "uint8": "_quant", "int8": "_quant_int8"}
# Bump when the ONNX builder or the quantizer changes what they produce, to invalidate caches.
BUILD_VERSION = "1"


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str  # an architectures.py family: "v1" | "v2" (MobileNets) | "lstm" | "ssdlite"
    alpha: float | None  # width multiplier (None: the architecture has one size)
    resolution: int | None  # input image side (None: not an image model)
    quantization: str | None  # None (float32) | "uint8" | "int8" (per-channel weights)

    @property
    def architecture(self) -> Architecture:
        return architecture(self.family)

    @property
    def task(self) -> str:
        """What the model is scored on: architectures.IMAGE_CLASSIFICATION, SEQUENCE_CLASSIFICATION or DETECTION."""
        return self.architecture.task

    @property
    def base_name(self) -> str:
        return self.architecture.base_name(self.alpha, self.resolution)

    @property
    def weights_path(self) -> Path:
        return WEIGHTS_DIR / f"{self.base_name}.npz"

    @property
    def available(self) -> bool:
        return self.weights_path.exists()

    @property
    def macs(self) -> int:
        return self.architecture.macs(self.alpha, self.resolution)

    @property
    def parameters(self) -> int:
        return self.architecture.parameters(self.alpha)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.architecture.input_shape(self.alpha, self.resolution)


def zoo() -> list[ZooEntry]:
    """Every bundled model: each architecture's sizes in each of its variants (float, uint8, int8)."""
    return [ZooEntry(arch.base_name(a, r) + QUANT_SUFFIX[q], arch.family, a, r, q)
            for arch in architectures().values() for a, r in arch.configs for q in arch.quantizations]


def get_entry(name: str) -> ZooEntry:
    for e in zoo():
        if e.name == name:
            return e
    raise MltsError(ResultCode.BAD_DATA, f"no zoo model named {name!r} (see `mlts models`)")


def cache_dir() -> Path:
    return Path(os.environ.get("MLTS_CACHE", Path.home() / ".cache" / "mlts")) / "zoo"


def load_weights(entry: ZooEntry) -> dict[str, np.ndarray]:
    if not entry.available:
        raise MltsError(ResultCode.BAD_DATA, f"{entry.name}: trained weights {entry.weights_path} are missing "
                                             f"(run {entry.architecture.trainer})")
    with np.load(entry.weights_path) as data:
        return {k: data[k].astype(np.float32) for k in data.files}


_build_lock = threading.Lock()


def onnx_path(name: str) -> Path:
    """The model's ONNX file, built (and for quantized models, calibrated) on first use and cached."""
    entry = get_entry(name)
    digest = hashlib.sha256(entry.weights_path.read_bytes() if entry.available else b"").hexdigest()[:12]
    path = cache_dir() / f"{entry.name}-{BUILD_VERSION}-{digest}.onnx"
    with _build_lock:
        if not path.exists():
            model = _build(entry)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, model.SerializeToString())  # never a partial file under the final name
    return path


def _build(entry: ZooEntry):
    arch = entry.architecture
    float_model = arch.build_onnx(entry.alpha, entry.resolution, load_weights(entry), name=entry.name)
    if entry.quantization is None:
        return float_model
    from .quantizer import quantize_model

    inputs = arch.calibration_inputs(entry.alpha, entry.resolution, CALIBRATION_IMAGES)
    return quantize_model(float_model, inputs, scheme=entry.quantization)


def load(name: str):
    """The zoo model imported into the runtime (an ImportedModel)."""
    from .onnx_import import import_onnx

    return import_onnx(onnx_path(name))
