"""The detection image set: deterministic, resolution-independent, tight and disjoint boxes, clean errors."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mlts.datasets import shapes
from mlts.datasets.shapes_detection import (CLASSES, MAX_OBJECTS, SPLITS, ShapesDetectionDataset, annotations,
                                            make_scene, object_masks, render)
from mlts.runtime import MltsError, ResultCode


def test_images_and_boxes_are_a_pure_function_of_split_index_and_size():
    a = ShapesDetectionDataset("heldout", 96)[7]
    b = ShapesDetectionDataset("heldout", 96)[7]
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    image, boxes, classes = a
    assert image.shape == (96, 96, 3) and image.dtype == np.uint8
    assert boxes.dtype == np.float32 and boxes.shape == (len(classes), 4)
    assert classes.dtype == np.int64 and 1 <= len(classes) <= MAX_OBJECTS
    other = ShapesDetectionDataset("heldout", 96)[8]
    assert not np.array_equal(image, other[0])
    # The boxes do not depend on the resolution.
    assert np.array_equal(ShapesDetectionDataset("heldout", 160)[7][1], boxes)


def test_the_same_scene_renders_at_any_resolution():
    scene = dataclasses.replace(make_scene("heldout", 3), noise_sigma=0.0)
    small, large = render(scene, 64), render(scene, 256)
    pooled = large.reshape(64, 4, 64, 4, 3).mean(axis=(1, 3))
    assert np.abs(pooled - small.astype(float)).mean() < 3


def test_counts_sizes_classes_and_bounds_over_the_heldout_split():
    assert SPLITS == {"train": 100000, "calibration": 300, "heldout": 500}
    assert CLASSES == shapes.CLASSES
    counts, labels, sides = [], [], []
    for i in range(SPLITS["heldout"]):
        boxes, classes = annotations(make_scene("heldout", i))
        counts.append(len(classes))
        labels.extend(classes)
        assert np.all(boxes >= 0) and np.all(boxes <= 1)
        assert np.all(boxes[:, 2] > boxes[:, 0]) and np.all(boxes[:, 3] > boxes[:, 1])
        sides.extend(np.sqrt((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])))
    assert set(counts) == set(range(1, MAX_OBJECTS + 1))
    per_class = np.bincount(labels, minlength=len(CLASSES))
    assert per_class.min() > 0.6 * per_class.mean() and per_class.max() < 1.4 * per_class.mean()
    # Objects are small: radius 0.08 to 0.22 of the side gives boxes of about 0.1 to 0.55.
    assert 0.08 < min(sides) and max(sides) < 0.55 and 0.2 < np.median(sides) < 0.35


@pytest.mark.parametrize("index", [0, 1, 2, 5, 11])
def test_boxes_tightly_enclose_each_rendered_shape(index):
    """Rasterized at 320 px, every covered pixel centre lies in the box, and the covered extent reaches
    each side of it within 3 pixels (sharp tips narrower than a pixel lose up to ~2.5); in the rendered
    image (noise and stroke removed), the pixels wholly of the shape's colour lie in its box too."""
    scene = dataclasses.replace(make_scene("train", index), noise_sigma=0.0, occluder=None)
    boxes, _ = annotations(scene)
    size = 320
    masks = object_masks(scene, size)
    assert not np.any(masks.sum(axis=0) > 1), "shapes overlap"
    for box, mask in zip(boxes, masks):
        rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
        extent = (np.array([rows[0], cols[0], rows[-1], cols[-1]]) + 0.5) / size
        assert np.all(extent[:2] >= box[:2] - 1e-6) and np.all(extent[2:] <= box[2:] + 1e-6)
        assert np.all(np.abs(extent - box) * size < 3), (extent * size, box * size)
    image = render(scene, 128).astype(int)
    for obj, box in zip(scene.objects, boxes):
        colour = np.round(np.asarray(obj.colour) * 255).astype(int)
        rows, cols = np.nonzero(np.all(image == colour, axis=-1))
        near = np.hypot((cols + 0.5) / 128 - obj.center[0], (rows + 0.5) / 128 - obj.center[1]) < 0.4
        rows, cols = rows[near], cols[near]
        assert len(rows) > 0
        # A pixel wholly of the colour has its centre inside the shape, hence inside the box.
        assert np.all((rows + 0.5) / 128 >= box[0]) and np.all((rows + 0.5) / 128 <= box[2])
        assert np.all((cols + 0.5) / 128 >= box[1]) and np.all((cols + 0.5) / 128 <= box[3])


def test_batches_and_count():
    ds = ShapesDetectionDataset("calibration", 32, count=5)
    assert len(ds) == 5
    batches = list(ds.batches(2))
    assert [len(b[0]) for b in batches] == [2, 2, 1]
    images, boxes, classes = batches[1]
    assert images.shape == (2, 32, 32, 3)
    assert np.array_equal(boxes[0], ds[2][1]) and np.array_equal(classes[1], ds[3][2])
    assert len(ShapesDetectionDataset("calibration", 32, count=10 ** 6)) == SPLITS["calibration"]


@pytest.mark.parametrize("call", [
    lambda: ShapesDetectionDataset("validation"),
    lambda: make_scene("heldout", SPLITS["heldout"]),
    lambda: make_scene("heldout", -1),
    lambda: make_scene("heldout", 1.5),
    lambda: make_scene("nope", 0),
    lambda: ShapesDetectionDataset("heldout", 32, count=3)[3],
    lambda: ShapesDetectionDataset("heldout", 32)[-1],
])
def test_bad_split_or_index_is_bad_data(call):
    with pytest.raises(MltsError) as e:
        call()
    assert e.value.code == ResultCode.BAD_DATA
    assert "shapes-detection" in e.value.message
