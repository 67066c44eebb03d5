"""The benchmark's tasks, one registry: for each kind of zoo model (architectures.py's task), the held-out data it
is fed, how a sample becomes the model's input, and how its outputs are scored (against the nnapi-reference
outputs on the same input and against the data set's truth).

- image-classification (the MobileNets): shapes images, top-1/top-5 (accuracy.AccuracyAccumulator).
- sequence-classification (the LSTM): command feature sequences, scored like the images.
- detection (SSD-lite): shapes-detection images, mAP@0.5 and agreement with the reference's detections
  (detection_metrics.DetectionAccuracy).
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np

from mlts.models.architectures import DETECTION, IMAGE_CLASSIFICATION, SEQUENCE_CLASSIFICATION
from mlts.runtime import MltsError, OperandCode, ResultCode

from .accuracy import AccuracyAccumulator

HELDOUT_SPLIT = "heldout"
#: The held-out sample whose input every timed inference uses.
TIMING_INDEX = 0

_QUANT8 = (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)


class Scorer(Protocol):
    """Accumulates one sample at a time: `add(outputs, expected, truth)`, then `result()` (the record's accuracy)."""

    def add(self, outputs: list[np.ndarray], expected: list[np.ndarray] | None, truth: Any) -> None: ...

    def result(self) -> dict: ...


class _Classification:
    """A classifier's first output, scored by AccuracyAccumulator."""

    def __init__(self, relaxed: bool) -> None:
        self.acc = AccuracyAccumulator(relaxed=relaxed)

    @property
    def tolerance(self):
        return self.acc.tolerance

    def add(self, outputs, expected, truth) -> None:
        self.acc.add(outputs[0], None if expected is None else expected[0], np.asarray([truth], np.int64))

    def result(self) -> dict:
        return self.acc.result()


def quantize_input(real: np.ndarray, imported: Any) -> np.ndarray:
    """A float input as the model's input 0: as is for a float input, else quantized with the input
    operand's own scale and zero point, as ONNX's QuantizeLinear (the quantizer's quantize_array)."""
    model = imported.model
    t = model.operand_type(model.inputs[0])
    if t.code == OperandCode.TENSOR_FLOAT32:
        return np.ascontiguousarray(real, np.float32)
    if t.code in _QUANT8:
        from mlts.models.quantizer import quantize_array

        return np.ascontiguousarray(quantize_array(real, t.scale, t.zero_point, t.dtype))
    raise MltsError(ResultCode.BAD_DATA, f"{imported.name}: input type {t.describe()} is not an input this "
                                         "benchmark can feed")


class Task:
    """What one kind of model is fed and how it is scored."""

    name: str = ""
    dataset: str = ""
    #: the record's accuracy field that says how well a driver agrees with nnapi-reference
    agreement_key: str = "top1_agreement"
    #: the field a quantized model's whole-model verdict judges (accuracy.apply_quantized_verdict)
    quantized_key: str = "top1_agreement"
    sample_word: str = "image"

    def heldout(self, resolution: int | None, count: int) -> tuple[list, list]:
        """The first `count` held-out samples (at least TIMING_INDEX + 1) and their truths."""
        raise NotImplementedError

    def model_inputs(self, imported: Any, samples: list) -> list[np.ndarray]:
        raise NotImplementedError

    def scorer(self, relaxed: bool) -> Scorer:
        return _Classification(relaxed)

    def sample_rule(self) -> Callable[[list, list], str | None] | None:
        """A whole-model rule for one sample's outputs against nnapi-reference's (why they fail, or None)
        that replaces the element-wise one; None: element-wise."""
        return None

    def seed_text(self) -> str:
        return f"sha256('mlts-{self.dataset}/{HELDOUT_SPLIT}/<index>/')"


class ImageClassification(Task):
    name, dataset = IMAGE_CLASSIFICATION, "shapes"

    def heldout(self, resolution, count):
        from mlts.datasets.shapes import ShapesDataset

        ds = ShapesDataset(HELDOUT_SPLIT, resolution)
        items = [ds[i] for i in range(max(count, TIMING_INDEX + 1))]
        return [im for im, _ in items], [lb for _, lb in items]

    def model_inputs(self, imported, samples):
        from .inference import model_inputs

        return model_inputs(imported, np.stack(samples))


class SequenceClassification(Task):
    name, dataset = SEQUENCE_CLASSIFICATION, "commands"
    sample_word = "sequence"

    def heldout(self, resolution, count):
        from mlts.datasets.commands import CommandsDataset

        ds = CommandsDataset(HELDOUT_SPLIT)
        items = [ds[i] for i in range(max(count, TIMING_INDEX + 1))]
        return [f for f, _ in items], [lb for _, lb in items]

    def model_inputs(self, imported, samples):
        return [quantize_input(f[None], imported) for f in samples]


class Detection(Task):
    name, dataset = DETECTION, "shapes-detection"
    agreement_key, quantized_key = "detection_agreement", "map50"

    def heldout(self, resolution, count):
        from mlts.datasets.shapes_detection import ShapesDetectionDataset

        ds = ShapesDetectionDataset(HELDOUT_SPLIT, resolution)
        items = [ds[i] for i in range(max(count, TIMING_INDEX + 1))]
        return [im for im, _, _ in items], [(boxes, classes) for _, boxes, classes in items]

    model_inputs = ImageClassification.model_inputs  # images, preprocessed as the MobileNets'

    def scorer(self, relaxed: bool) -> Scorer:
        from mlts.datasets.shapes_detection import CLASSES

        from .detection_metrics import DetectionAccuracy

        return DetectionAccuracy(relaxed=relaxed, class_names=CLASSES)

    def sample_rule(self) -> Callable[[list, list], str | None] | None:
        """NMS is discontinuous: detections are compared as the verdict compares them, per image."""
        from .detection_metrics import image_disagreement

        return image_disagreement


TASKS: dict[str, Task] = {t.name: t for t in (ImageClassification(), SequenceClassification(), Detection())}


def task_of(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise MltsError(ResultCode.BAD_DATA, f"no benchmark task {name!r} (known: {', '.join(TASKS)})") from None


class HeldOutSamples:
    """The first N held-out samples of each task and resolution, rendered once for every model that uses them."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._cache: dict[tuple, tuple[list, list]] = {}

    def get(self, task: Task, resolution: int | None) -> tuple[list, list]:
        """(samples, truths); sample TIMING_INDEX is there even when N is 0."""
        key = (task.name, resolution)
        if key not in self._cache:
            self._cache[key] = task.heldout(resolution, self.count)
        return self._cache[key]
