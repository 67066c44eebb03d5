"""The benchmark's tasks (tasks.py): what each kind of zoo model is fed and how it is scored, and how the
detectors' figures travel through compare and the report."""
from types import SimpleNamespace

import numpy as np
import pytest

from mlts.benchmark.accuracy import AccuracyAccumulator, apply_quantized_verdict
from mlts.benchmark.compare import compare
from mlts.benchmark.decision import FAIL, PASS, WARN
from mlts.benchmark.tasks import TASKS, HeldOutSamples, quantize_input, task_of
from mlts.models.architectures import DETECTION, IMAGE_CLASSIFICATION, SEQUENCE_CLASSIFICATION, architectures
from mlts.models.zoo_registry import zoo
from mlts.report.families import CLASSIFICATION_HEADERS, QUALITY_HEADERS, family_of
from mlts.report.rows import agreement_of, quality_of
from mlts.runtime import MltsError, OperandCode, OperandType, ResultCode


class _Imported:
    """What quantize_input reads of an imported model: the type of its model's input 0."""

    def __init__(self, t: OperandType) -> None:
        self.name = "m"
        self.model = SimpleNamespace(inputs=[0], operand_type=lambda index: t)


def test_every_architecture_has_a_task_and_every_zoo_entry_its_variants():
    assert {a.task for a in architectures().values()} == {IMAGE_CLASSIFICATION, SEQUENCE_CLASSIFICATION, DETECTION}
    assert set(TASKS) == {IMAGE_CLASSIFICATION, SEQUENCE_CLASSIFICATION, DETECTION}
    names = [e.name for e in zoo()]
    assert len(names) == len(set(names))
    lstm = [e for e in zoo() if e.family == "lstm"]
    # QUANTIZED_LSTM is signed 8-bit only: no uint8 variant
    assert [e.quantization for e in lstm] == [None, "int8"]
    assert all(task_of(e.task) is TASKS[e.task] for e in zoo())
    with pytest.raises(MltsError) as e:
        task_of("segmentation")
    assert e.value.code == ResultCode.BAD_DATA and "segmentation" in str(e.value)


def test_quantize_input_uses_the_input_operands_parameters():
    f = _Imported(OperandType.tensor(OperandCode.TENSOR_FLOAT32, [1, 3]))
    x = np.array([[0.5, -1.25, 3.0]], np.float32)
    assert quantize_input(x, f).tolist() == x.tolist()
    q = _Imported(OperandType.tensor(OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, [1, 3], 0.25, -3))
    # round(v / 0.25) - 3, clamped to int8: 2 - 3, -5 - 3, 12 - 3
    assert quantize_input(x, q).tolist() == [[-1, -8, 9]]
    big = np.array([[100.0, -100.0, 0.0]], np.float32)
    assert quantize_input(big, q).tolist() == [[127, -128, -3]]
    i = _Imported(OperandType.tensor(OperandCode.TENSOR_INT32, [1, 3]))
    with pytest.raises(MltsError) as e:
        quantize_input(x, i)
    assert "m: input type" in str(e.value)


def test_classification_scorer_is_the_accuracy_accumulator():
    rng = np.random.default_rng(3)
    outs = rng.normal(size=(6, 10)).astype(np.float32)
    ref = outs + rng.normal(scale=0.5, size=outs.shape).astype(np.float32)
    labels = [0, 3, 3, 9, 1, 2]
    scorer = TASKS[SEQUENCE_CLASSIFICATION].scorer(False)
    acc = AccuracyAccumulator()
    for i in range(6):
        scorer.add([outs[i:i + 1]], [ref[i:i + 1]], labels[i])
        acc.add(outs[i:i + 1], ref[i:i + 1], np.array([labels[i]]))
    assert scorer.result() == acc.result()


def test_held_out_samples_are_rendered_once_per_task_and_resolution():
    calls = []

    class Counting(type(TASKS[IMAGE_CLASSIFICATION])):
        def heldout(self, resolution, count):
            calls.append((resolution, count))
            return [np.zeros(1)] * max(count, 1), [0] * max(count, 1)

    held, task = HeldOutSamples(0), Counting()
    a = held.get(task, 128)
    assert held.get(task, 128) is a and calls == [(128, 0)]
    held.get(task, 160)
    assert calls == [(128, 0), (160, 0)] and len(a[0]) == 1  # the timing sample is there with N = 0


def test_quantized_verdict_uses_the_tasks_agreement():
    per_op = {"pass": True, "first_out_of_tolerance": None, "operations_failed": [], "operations_out_of_tolerance": 0}
    result = {"detection_agreement": 0.95, "top1_agreement": None, "max_abs_error": 0.1, "cts_violations": 1}
    apply_quantized_verdict(result, dict(per_op), agreement_key="detection_agreement")
    assert result["cts_pass"] is False and result["verdict_reason"] == "detection agreement 95.0% < 99%"
    result = {"detection_agreement": 1.0, "top1_agreement": None, "max_abs_error": 0.1, "cts_violations": 1}
    apply_quantized_verdict(result, dict(per_op), agreement_key="detection_agreement")
    assert result["cts_pass"] is True


@pytest.mark.parametrize("driver_map, passes", [(0.94, True), (0.93, True), (0.929, False), (0.5, False)])
def test_a_quantized_detector_is_judged_by_its_map_against_the_references(driver_map, passes):
    """Per-operation rule plus mAP@0.5 at most 2 points below nnapi-reference's on the same images; the
    matched-detection share is a figure (a driver within one step per operation moves near-threshold detections)."""
    per_op = {"pass": True, "first_out_of_tolerance": None, "operations_failed": [], "operations_out_of_tolerance": 0}
    result = {"map50": driver_map, "reference_map50": 0.95, "detection_agreement": 0.957, "cts_violations": 3}
    apply_quantized_verdict(result, dict(per_op), agreement_key=TASKS[DETECTION].quantized_key)
    assert result["cts_pass"] is passes
    if not passes:
        assert result["verdict_reason"] == f"mAP@0.5 {driver_map:.3f} is more than 0.02 below nnapi-reference's 0.950"


def test_the_detection_scorer_reports_the_references_map_on_the_same_images():
    from mlts.benchmark.detection_metrics import DetectionAccuracy

    def outputs(boxes, classes, scores):
        n = 4
        out = [np.zeros((1, n), np.float32), np.zeros((1, n, 4), np.float32), np.zeros((1, n), np.int32),
               np.array([len(classes)], np.int32)]
        out[0][0, :len(scores)], out[1][0, :len(boxes)], out[2][0, :len(classes)] = scores, boxes, classes
        return out

    truth = (np.array([[0.1, 0.1, 0.4, 0.4]], np.float32), np.array([2]))
    right = outputs([[0.1, 0.1, 0.4, 0.4]], [2], [0.9])
    wrong = outputs([[0.6, 0.6, 0.9, 0.9]], [2], [0.9])
    scorer = DetectionAccuracy()
    scorer.add(wrong, right, truth)  # the driver misses what the reference finds
    result = scorer.result()
    assert result["map50"] == 0.0 and result["reference_map50"] == 1.0


def _detection_record(make_record, map50, agreement):
    rec = make_record(model="ssdlite_det", top1=None, top5=None, agree1=None)
    rec["accuracy"].update({"metric": "detection", "map50": map50, "detection_agreement": agreement})
    rec["model_info"] = {"task": DETECTION, "family": "ssdlite", "quantization": "float32"}
    return rec


@pytest.mark.parametrize("current, verdict", [(0.80, PASS), (0.79, WARN), (0.77, FAIL)])
def test_compare_judges_map_in_points(make_record, current, verdict):
    comparison = compare([_detection_record(make_record, 0.80, 1.0)], [_detection_record(make_record, current, 1.0)])
    row = comparison.rows[0]
    assert row.verdict == verdict
    assert row.accuracy["map50"]["delta_points"] == pytest.approx(100 * (current - 0.80))


def test_compare_fails_a_detection_agreement_drop(make_record):
    row = compare([_detection_record(make_record, 0.8, 1.0)], [_detection_record(make_record, 0.8, 0.9)]).rows[0]
    assert row.verdict == FAIL and any("detection_agreement" in r for r in row.reasons)


def test_report_shows_map_for_detectors(make_record):
    rec = _detection_record(make_record, 0.812, 0.97)
    assert quality_of(rec["accuracy"]) == 0.812 and agreement_of(rec["accuracy"]) == 0.97
    cls = make_record(top1=0.7, agree1=0.99)
    assert quality_of(cls["accuracy"]) == 0.7 and agreement_of(cls["accuracy"]) == 0.99
    assert family_of(rec) == ("SSD-lite detector", False)
    # by name alone too (a record without model_info): the detector's backbone name does not make it a MobileNet
    assert family_of({"model": "ssdlite_mobilenet_v2_0.5_160_quant"}) == ("SSD-lite detector", True)
    assert family_of({"model": "mobilenet_v2_0.5_160_quant"}) == ("MobileNet v2", True)
    assert family_of({"model": "lstm_commands", "model_info": {"family": "lstm", "quantization": "float32"}}) == \
        ("LSTM sequence classifier", False)
    assert QUALITY_HEADERS[DETECTION][0].startswith("mAP") and CLASSIFICATION_HEADERS[0] == "Top-1 %"
