"""Zoo models in the stress suite are fed a real held-out sample of their task and checked with the task's
rule: a detector's detections are compared as detections (an NMS tie resolved the other way passes, a
moved box fails), other models element-wise."""
from __future__ import annotations

import numpy as np
import pytest

from stress_context import make_context
from mlts.benchmark.detection_metrics import box_iou
from mlts.datasets.commands import CommandsDataset
from mlts.datasets.shapes_detection import ShapesDetectionDataset
from mlts.stress.context import StressFailure
from mlts.stress.models import check_outputs, zoo_model

DETECTOR = "ssdlite_mobilenet_v2_0.5_160"


def test_a_sequence_model_gets_the_first_held_out_sequence():
    m = zoo_model("lstm_commands")
    features, _ = CommandsDataset("heldout")[0]
    assert len(m.inputs) == 1 and m.sample_rule is None
    np.testing.assert_array_equal(m.inputs[0], features[None])


@pytest.fixture(scope="module")
def detector_run(tmp_path_factory):
    ctx = make_context("sample-all", spec="sample", out_dir=tmp_path_factory.mktemp("zoo"))
    try:
        m = ctx.usable_models([DETECTOR])[0]
        yield ctx, m, ctx.reference_outputs(m)
    finally:
        ctx.close()


def test_the_detector_sees_a_real_image_and_finds_its_shapes(detector_run):
    _, m, (scores, boxes, classes, count) = detector_run
    _, truth_boxes, truth_classes = ShapesDetectionDataset("heldout", 160)[0]
    n = int(count[0])
    # each shape of the image (the data set's own boxes) is found, with its class, by a confident detection
    iou = box_iou(truth_boxes, boxes[0, :n])
    for k, c in enumerate(truth_classes):
        same = (classes[0, :n] == c) & (scores[0, :n] >= 0.5)
        assert (iou[k][same] >= 0.5).any(), (k, c, iou[k], classes[0, :n], scores[0, :n])


def test_the_detector_is_checked_as_detections(detector_run):
    ctx, m, reference = detector_run
    n = int(reference[3][0])
    assert n >= 2
    swapped = [o.copy() for o in reference]
    for out in swapped[:3]:  # the first two detections in the other order: an NMS tie resolved differently
        out[0, [0, 1]] = out[0, [1, 0]]
    assert check_outputs(swapped, reference, m.output_codes) is not None  # element-wise, it would fail...
    ctx.check(m, swapped)  # ...the task's rule passes it
    moved = [o.copy() for o in reference]
    moved[1][0, 0] = moved[1][0, 0][[2, 3, 2, 3]]  # the first box collapsed to a point at its far corner
    with pytest.raises(StressFailure, match="wrong results.*detections differ from nnapi-reference's"):
        ctx.check(m, moved)
