"""The zoo's architectures, one registry: what each builds (its ONNX graph from trained weights), its size,
the task it is scored on, the data set that calibrates its quantized variants, and which variants exist.

MLTS benchmarks image classifiers, sequence models and detectors; each family here names its task
(`image-classification`, `sequence-classification`, `detection`), and the benchmark's task registry
(mlts/benchmark/tasks.py) feeds and scores it. The builders live in their own modules (mobilenet.py,
speech_lstm.py, ssdlite.py), imported when first used so that listing the zoo stays cheap.
"""
from __future__ import annotations

import importlib
from typing import Iterator

import numpy as np

from ..runtime import MltsError, ResultCode

IMAGE_CLASSIFICATION = "image-classification"
SEQUENCE_CLASSIFICATION = "sequence-classification"
DETECTION = "detection"


class Architecture:
    """One family of zoo models. `configs` lists its (width, resolution) sizes; a model without either
    has (None, None)."""

    family: str = ""
    task: str = ""
    dataset: str = ""
    #: the variants it comes in: None (float32), "uint8", "int8"
    quantizations: tuple = (None, "uint8", "int8")
    configs: tuple = ((None, None),)
    #: the build-time script that trains its weights
    trainer: str = "tools/train_zoo.py"

    def base_name(self, alpha, resolution) -> str:
        raise NotImplementedError

    def weight_shapes(self, alpha) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def macs(self, alpha, resolution) -> int:
        raise NotImplementedError

    def input_shape(self, alpha, resolution) -> tuple[int, ...]:
        raise NotImplementedError

    def build_onnx(self, alpha, resolution, weights, name: str):
        raise NotImplementedError

    def calibration_inputs(self, alpha, resolution, count: int) -> Iterator[np.ndarray]:
        """Float inputs of the float model, one batch of one at a time, from the data set's calibration split."""
        raise NotImplementedError

    def parameters(self, alpha) -> int:
        return sum(int(np.prod(s)) for s in self.weight_shapes(alpha).values())


class MobileNet(Architecture):
    task, dataset = IMAGE_CLASSIFICATION, "shapes"

    def __init__(self, family: str) -> None:
        from .mobilenet import ZOO_CONFIGS

        self.family = family
        self.configs = tuple((a, r) for f, a, r in ZOO_CONFIGS if f == family)

    def base_name(self, alpha, resolution) -> str:
        from .mobilenet import model_name
        return model_name(self.family, alpha, resolution)

    def weight_shapes(self, alpha):
        from .mobilenet import weight_shapes
        return weight_shapes(self.family, alpha)

    def macs(self, alpha, resolution) -> int:
        from .mobilenet import macs
        return macs(self.family, alpha, resolution)

    def input_shape(self, alpha, resolution):
        return (1, 3, resolution, resolution)

    def build_onnx(self, alpha, resolution, weights, name: str):
        from .mobilenet import build_onnx
        return build_onnx(self.family, alpha, resolution, weights, name=name)

    def calibration_inputs(self, alpha, resolution, count: int):
        from ..datasets.preprocess import to_float_input
        from ..datasets.shapes import ShapesDataset
        return (to_float_input(images) for images, _ in ShapesDataset("calibration", resolution, count).batches(1))


class OneSize(Architecture):
    """A family of one model whose builder module (`module`, in mlts.models) names it (MODEL_NAME) and gives its
    weight_shapes(), macs() and build_onnx(weights, name=...)."""

    module = ""

    def _builder(self):
        return importlib.import_module(f"{__package__}.{self.module}")

    def base_name(self, alpha, resolution) -> str:
        return self._builder().MODEL_NAME

    def weight_shapes(self, alpha):
        return self._builder().weight_shapes()

    def macs(self, alpha, resolution) -> int:
        return self._builder().macs()

    def build_onnx(self, alpha, resolution, weights, name: str):
        return self._builder().build_onnx(weights, name=name)


class SpeechLstm(OneSize):
    """The LSTM command classifier (MLTS's LSTM speech models): int8 only as a quantized variant, because
    NNAPI's QUANTIZED_LSTM is signed 8-bit."""

    family, task, dataset, module = "lstm", SEQUENCE_CLASSIFICATION, "commands", "speech_lstm"
    trainer = "tools/train_sequence.py"
    quantizations = (None, "int8")

    def input_shape(self, alpha, resolution):
        from ..datasets.commands import FRAMES, MEL_BINS
        return (1, FRAMES, MEL_BINS)

    def calibration_inputs(self, alpha, resolution, count: int):
        from ..datasets.commands import CommandsDataset
        return (features for features, _ in CommandsDataset("calibration", count).batches(1))


class SsdLite(OneSize):
    """SSD-lite on a MobileNet v2 backbone, ending in DETECTION_POSTPROCESSING (float: NNAPI has no
    quantized form of it, so the quantized variants dequantize the network's outputs before it)."""

    family, task, dataset, module = "ssdlite", DETECTION, "shapes-detection", "ssdlite"
    trainer = "tools/train_detector.py"

    @property
    def configs(self) -> tuple:
        builder = self._builder()
        return ((builder.ALPHA, builder.RESOLUTION),)

    def input_shape(self, alpha, resolution):
        return (1, 3, resolution, resolution)

    def calibration_inputs(self, alpha, resolution, count: int):
        from ..datasets.preprocess import to_float_input
        from ..datasets.shapes_detection import ShapesDetectionDataset
        ds = ShapesDetectionDataset("calibration", resolution, count)
        return (to_float_input(ds[i][0]) for i in range(len(ds)))


_ARCHITECTURES: dict[str, Architecture] = {}


def architectures() -> dict[str, Architecture]:
    """Every family, in the zoo's order (MobileNet v1, v2, the LSTM, SSD-lite)."""
    if not _ARCHITECTURES:
        for arch in (MobileNet("v1"), MobileNet("v2"), SpeechLstm(), SsdLite()):
            _ARCHITECTURES[arch.family] = arch
    return _ARCHITECTURES


def architecture(family: str) -> Architecture:
    try:
        return architectures()[family]
    except KeyError:
        raise MltsError(ResultCode.BAD_DATA, f"no zoo architecture family {family!r} "
                                             f"(known: {', '.join(architectures())})") from None
