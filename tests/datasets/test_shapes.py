"""The procedural image set: deterministic, resolution-independent, balanced, disjoint splits."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mlts.datasets.shapes import CLASSES, SPLITS, ShapesDataset, make_scene, render


def test_images_are_a_pure_function_of_split_index_and_size():
    a, la = ShapesDataset("heldout", 96)[7]
    b, lb = ShapesDataset("heldout", 96)[7]
    assert la == lb and np.array_equal(a, b)
    assert a.shape == (96, 96, 3) and a.dtype == np.uint8


def test_the_same_scene_renders_at_any_resolution():
    # Noise is drawn per size, so compare the noiseless scene: averaging the large image down to
    # 64x64 gives the small one up to anti-aliasing at the edges.
    scene = dataclasses.replace(make_scene("heldout", 3), noise_sigma=0.0)
    small, large = render(scene, 64), render(scene, 256)
    pooled = large.reshape(64, 4, 64, 4, 3).mean(axis=(1, 3))
    assert np.abs(pooled - small.astype(float)).mean() < 3


def test_split_sizes_and_class_balance():
    assert SPLITS["heldout"] == 1500 and len(ShapesDataset("heldout", 32)) == 1500
    labels = [make_scene("heldout", i).label for i in range(1500)]
    counts = np.bincount(labels, minlength=len(CLASSES))
    assert len(CLASSES) >= 10
    assert counts.min() > 100 and counts.max() < 200  # roughly 150 each


def test_splits_are_disjoint():
    def signature(split, i):
        s = make_scene(split, i)
        return (s.label, round(s.radius, 9), s.center)
    held = {signature("heldout", i) for i in range(300)}
    train = {signature("train", i) for i in range(300)}
    calib = {signature("calibration", i) for i in range(300)}
    assert not held & train and not held & calib and not train & calib


def test_bad_split_or_index_is_refused():
    with pytest.raises(ValueError):
        ShapesDataset("test", 32)
    with pytest.raises(IndexError):
        make_scene("heldout", 1500)


def test_batches_cover_the_requested_range():
    ds = ShapesDataset("calibration", 32, count=10)
    batches = list(ds.batches(4))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    assert np.concatenate([b[1] for b in batches]).tolist() == [ds.label(i) for i in range(10)]
