"""The zoo's sequence and detection workloads with their committed weights: each imported model on nnapi-reference
against onnxruntime on what onnxruntime can run (the network), the detector's DETECTION_POSTPROCESSING against
the independent numpy implementation of NNAPI's documented semantics (test_ssdlite.reference_postprocess), and
the accuracy targets (LSTM held-out top-1 90-99.5%, detector mAP@0.5 >= 0.7) on held-out samples."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from mlts.benchmark.detection_metrics import DetectionAccuracy
from mlts.datasets.commands import CommandsDataset
from mlts.datasets.preprocess import to_float_input
from mlts.datasets.shapes_detection import ShapesDetectionDataset
from mlts.models import ssdlite
from mlts.models.quantizer import standard_part
from mlts.models.zoo_registry import get_entry, load, onnx_path
from mlts.runtime import OperationCode
from test_ssdlite import assert_detections_match, reference_postprocess

ort = pytest.importorskip("onnxruntime")

DETECTOR = ssdlite.MODEL_NAME
SEQUENCES = 60
#: the issue's held-out target for the LSTM (measured: 97.8% on all 1500, float; int8 the same within 1 point)
LSTM_ACCURACY = (0.90, 0.995)
#: int8 LSTM on nnapi-reference (40 QUANTIZED_LSTM steps: int8 hidden state, int16 cell and gates) against
#: onnxruntime's float LSTM between the same Q/DQ parameters: the argmax agrees on (measured) 100 of the first 100
LSTM_QUANT_AGREEMENT = 0.97
DETECTION_IMAGES = 30
MAP_TARGET = 0.7  # the issue's; measured 0.946 float, 0.934 uint8 on the 500 held-out images
#: quantized detector on nnapi-reference against onnxruntime's run of the same QDQ network (+ the numpy
#: postprocessing): measured 100% of detections matched on these images
QUANT_DETECTION_AGREEMENT = 0.95


def _session(model: onnx.ModelProto):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # onnxruntime's fused int8 kernels differ
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _network_part(name: str):
    """onnxruntime on the zoo model cut before its DetectionPostProcess node: box encodings and class scores."""
    full = onnx.load(str(onnx_path(name)))
    return _session(standard_part(full))


def _detector_inputs(imported, image: np.ndarray) -> np.ndarray:
    from mlts.benchmark.tasks import TASKS

    return TASKS["detection"].model_inputs(imported, [image])[0]


def _outputs(got: dict) -> list[np.ndarray]:
    return [got[n] for n in ssdlite.DETECTION_OUTPUTS]


@pytest.mark.slow
@pytest.mark.parametrize("name", [DETECTOR, DETECTOR + "_quant"])
def test_detector_matches_onnxruntime_and_the_documented_postprocessing(name):
    if not get_entry(name).available:
        pytest.fail(f"{name}: trained weights are missing")
    imported = load(name)
    codes = [code for code, _, _ in imported.model.operations()]
    assert codes[-1] == OperationCode.DETECTION_POSTPROCESSING and codes.count(OperationCode.DETECTION_POSTPROCESSING) == 1
    quantized = name.endswith("_quant")
    if quantized:  # pure 8-bit up to the float postprocessing: the scores and encodings dequantized just before it
        assert codes.count(OperationCode.DEQUANTIZE) == 2 and OperationCode.QUANTIZE not in codes
    peer = _network_part(name)
    params = dict(ssdlite.POSTPROCESS)
    ours, theirs = DetectionAccuracy(), DetectionAccuracy()
    ds = ShapesDetectionDataset("heldout", ssdlite.RESOLUTION, DETECTION_IMAGES)
    input_name = peer.get_inputs()[0].name
    for i in range(len(ds)):
        image, boxes, classes = ds[i]
        x = _detector_inputs(imported, image)
        got = imported.run({input_name: x}, devices=["nnapi-reference"])
        enc, scores = peer.run(None, {input_name: x})
        expected = reference_postprocess(enc, scores, ssdlite.anchors(), params)
        if not quantized and expected[3].sum():  # float: the same detections, element for element
            assert_detections_match(got, expected)
        expected = [e.reshape(got[n].shape) for e, n in zip(expected, ssdlite.DETECTION_OUTPUTS)]
        ours.add(_outputs(got), expected, (boxes, classes))
        theirs.add(expected, None, (boxes, classes))
    mine, peer_figures = ours.result(), theirs.result()
    assert mine["map50"] >= MAP_TARGET and peer_figures["map50"] >= MAP_TARGET, (mine["map50"], peer_figures["map50"])
    assert mine["detection_agreement"] >= (1.0 if not quantized else QUANT_DETECTION_AGREEMENT), mine


def test_detector_float_input_is_the_mobilenets_preprocessing():
    image = ShapesDetectionDataset("heldout", ssdlite.RESOLUTION, 1)[0][0]
    imported = load(DETECTOR)
    np.testing.assert_array_equal(_detector_inputs(imported, image), to_float_input(image))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lstm_commands", "lstm_commands_quant_int8"])
def test_lstm_matches_onnxruntime_and_reaches_its_accuracy(name):
    imported = load(name)
    codes = [code for code, _, _ in imported.model.operations()]
    quantized = name.endswith("_int8")
    if quantized:  # NNAPI's integer LSTM, one step per frame, and no float LSTM left
        assert codes.count(OperationCode.QUANTIZED_LSTM) == 40 and OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM not in codes
        assert OperationCode.DEQUANTIZE not in codes and OperationCode.QUANTIZE not in codes
    else:
        assert codes.count(OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM) == 1
    peer = _session(onnx.load(str(onnx_path(name))))
    from mlts.benchmark.tasks import TASKS

    features, labels = next(CommandsDataset("heldout", SEQUENCES).batches(SEQUENCES))
    inputs = TASKS["sequence-classification"].model_inputs(imported, list(features))
    input_name, output_name = peer.get_inputs()[0].name, peer.get_outputs()[0].name
    hits = agree = 0
    worst = 0.0
    for x, label in zip(inputs, labels):
        ours = imported.run({input_name: x}, devices=["nnapi-reference"])[output_name]
        (theirs,) = peer.run(None, {input_name: x})
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        worst = max(worst, float(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)).max()))
        agree += int(np.argmax(ours) == np.argmax(theirs))
        hits += int(np.argmax(ours) == label)
    if quantized:
        assert agree >= LSTM_QUANT_AGREEMENT * SEQUENCES, (agree, worst)
    else:
        assert agree == SEQUENCES and worst <= 1e-4 * max(1.0, float(np.abs(theirs).max())), worst
    assert LSTM_ACCURACY[0] <= hits / SEQUENCES <= LSTM_ACCURACY[1], hits
