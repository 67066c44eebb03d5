"""A user's labeled image folder: both layouts, resizing, and clear errors."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mlts.datasets.folder import FolderDataset, load_image
from mlts.runtime import MltsError, ResultCode


def _save(path, colour, size=(40, 20)):
    Image.new("RGB", size, colour).save(path)


def test_one_folder_per_class(tmp_path):
    for name, colour in (("cat", (255, 0, 0)), ("dog", (0, 0, 255))):
        (tmp_path / name).mkdir()
        for k in range(2):
            _save(tmp_path / name / f"{k}.png", colour)
    ds = FolderDataset(tmp_path, 16)
    assert ds.classes == ("cat", "dog") and len(ds) == 4
    image, label = ds[3]
    assert image.shape == (16, 16, 3) and label == 1
    assert image[..., 2].min() == 255 and image[..., 0].max() == 0


def test_flat_folder_with_labels_file_and_model_classes(tmp_path):
    _save(tmp_path / "a.png", (10, 200, 10))
    _save(tmp_path / "b.jpg", (10, 10, 10))
    (tmp_path / "labels.csv").write_text("# file, class\na.png, ring\nb.jpg, star\n")
    ds = FolderDataset(tmp_path, 8, classes=("circle", "ring", "star"))
    assert [ds.label(i) for i in range(2)] == [1, 2]


def test_resize_keeps_the_centre(tmp_path):
    img = np.zeros((20, 60, 3), np.uint8)
    img[:, 20:40] = 255  # a white centre third
    Image.fromarray(img).save(tmp_path / "x.png")
    out = load_image(tmp_path / "x.png", 10)
    assert out.shape == (10, 10, 3) and out.mean() > 200  # the crop is the white centre


@pytest.mark.parametrize("setup,message", [
    (lambda p: None, "no images found"),
    (lambda p: (p / "labels.txt").write_text("missing.png, cat\n"), "does not exist"),
    (lambda p: (p / "bad").mkdir() or (p / "bad" / "x.png").write_bytes(b"not an image"), "cannot read image"),
])
def test_bad_folders_give_clear_errors(tmp_path, setup, message):
    setup(tmp_path)
    with pytest.raises(MltsError) as info:
        ds = FolderDataset(tmp_path, 8)
        ds[0]
    assert info.value.code == ResultCode.BAD_DATA and message in info.value.message


def test_unknown_class_is_refused(tmp_path):
    (tmp_path / "zebra").mkdir()
    _save(tmp_path / "zebra" / "1.png", (1, 2, 3))
    with pytest.raises(MltsError) as info:
        FolderDataset(tmp_path, 8, classes=("circle",))
    assert "zebra" in info.value.message
