"""A user's own labeled images, so the benchmark can run on real photos.

Two layouts are accepted:
- one sub-folder per class (`root/<class name>/*.png|jpg|...`);
- a flat folder plus a labels file (`labels.txt` or `labels.csv`: `file name, class name` per line).
Images are decoded with Pillow, resized (shorter side to the model's resolution, bilinear) and
centre-cropped to a square, giving the same HxWx3 uint8 arrays as the bundled set.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..runtime import MltsError, ResultCode

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif", ".tiff"}
LABEL_FILES = ("labels.txt", "labels.csv")


def _error(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def load_image(path: str | Path, size: int) -> np.ndarray:
    """Decode, resize the shorter side to `size`, centre-crop: (size, size, 3) uint8."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:  # pragma: no cover - Pillow is a dependency
        raise _error("reading image folders needs Pillow (pip install pillow)") from None
    try:
        with Image.open(path) as img:
            img = img.convert("RGB")
            w, h = img.size
            scale = size / min(w, h)
            img = img.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.BILINEAR)
            w, h = img.size
            left, top = (w - size) // 2, (h - size) // 2
            return np.asarray(img.crop((left, top, left + size, top + size)), dtype=np.uint8)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise _error(f"cannot read image {path}: {e}") from None


class FolderDataset:
    """Labeled images from a folder; same interface as ShapesDataset."""

    def __init__(self, root: str | Path, size: int, classes: Sequence[str] | None = None) -> None:
        self.root = Path(root)
        self.size = int(size)
        if not self.root.is_dir():
            raise _error(f"image folder {self.root} does not exist")
        items = self._from_labels_file() or self._from_subfolders()
        if not items:
            raise _error(f"{self.root}: no images found (expected one sub-folder per class, or images plus "
                         f"{' or '.join(LABEL_FILES)})")
        names = sorted({name for _, name in items})
        self.classes = tuple(classes) if classes is not None else tuple(names)
        unknown = sorted(set(names) - set(self.classes))
        if unknown:
            raise _error(f"{self.root}: classes {unknown} are not among the model's classes {list(self.classes)}")
        self.items = [(path, self.classes.index(name)) for path, name in items]
        self.split = f"folder:{self.root}"

    def _from_subfolders(self) -> list[tuple[Path, str]]:
        items = []
        for sub in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for f in sorted(sub.iterdir()):
                if f.suffix.lower() in IMAGE_SUFFIXES:
                    items.append((f, sub.name))
        return items

    def _from_labels_file(self) -> list[tuple[Path, str]] | None:
        for name in LABEL_FILES:
            path = self.root / name
            if path.exists():
                break
        else:
            return None
        items = []
        with open(path, newline="") as f:
            for line_no, row in enumerate(csv.reader(f, skipinitialspace=True), start=1):
                if not row or row[0].startswith("#"):
                    continue
                if len(row) < 2:
                    raise _error(f"{path}:{line_no}: expected 'file, class', got {','.join(row)!r}")
                image = self.root / row[0].strip()
                if not image.exists():
                    raise _error(f"{path}:{line_no}: image {row[0].strip()!r} does not exist")
                items.append((image, row[1].strip()))
        return items

    def __len__(self) -> int:
        return len(self.items)

    def label(self, index: int) -> int:
        return self.items[index][1]

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        path, label = self.items[index]
        return load_image(path, self.size), label

    def batches(self, batch_size: int = 32, start: int = 0, stop: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        stop = len(self) if stop is None else min(stop, len(self))
        for b in range(start, stop, batch_size):
            chunk = [self[i] for i in range(b, min(b + batch_size, stop))]
            yield np.stack([im for im, _ in chunk]), np.array([lb for _, lb in chunk], np.int64)
