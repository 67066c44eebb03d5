"""A procedurally generated detection set: one to four shapes of the ten shapes classes per image.

The detection counterpart of `shapes`: the same classes, outlines, colour-contrast rules, textured
backgrounds, clutter and pixel noise, but several smaller objects per image, each labeled with its
class and its tight box. Every image is a pure function of (split, index, size), drawn from a
generator seeded by split and index only, in resolution-independent coordinates, so the same scene
renders at any resolution and every machine sees the same pixels and boxes.

Boxes are (ymin, xmin, ymax, xmax) normalized to [0, 1] (TFLite's and NNAPI's detection order): the
exact extent of the shape's filled region (its outline minus any cut-out, as rendered), computed
from the outline's vertices and edge intersections rather than from pixels. Shapes never overlap
one another and lie wholly inside the image, so each box is that of the visible shape; a thin
occluding stroke may cross a shape (clutter) without changing its box. Detectors are scored on it by
mAP@0.5 (mlts.benchmark.detection_metrics).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from mlts.runtime import MltsError, ResultCode

from .shapes import (CLASSES, SUPERSAMPLE, _colour_at_contrast, _inside, _polygon,
                     _upsample, random_distractors)

SPLITS = {"train": 100000, "calibration": 300, "heldout": 500}

# Difficulty knobs (fixed once the detector is trained on them).
MAX_OBJECTS = 4
RADIUS_RANGE = (0.08, 0.22)      # shape size, as a fraction of the image side
ASPECT_RANGE = (0.8, 1.2)
CONTRAST_RANGE = (0.15, 1.2)     # L1 distance between a shape's colour and the mean background colour
MAX_DISTRACTORS = 3              # small blobs and strokes besides the shapes
DISTRACTOR_RADIUS = (0.01, 0.03)
OCCLUDER_PROBABILITY = 0.4       # a thin stroke across one of the shapes
OCCLUDER_WIDTH = (0.01, 0.035)
NOISE_RANGE = (0.0, 0.12)        # per-pixel Gaussian noise sigma
MARGIN = 0.01                    # nearest a shape comes to the image border or to another shape
PLACEMENT_TRIES = 40             # a shape that finds no free place in that many draws is left out


def _seed(split: str, index: int, salt: str = "") -> int:
    digest = hashlib.sha256(f"mlts-shapes-detection/{split}/{index}/{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, f"shapes-detection: {message}")


@dataclass(frozen=True)
class SceneObject:
    """One shape: class, outline(s) in unit coordinates (the first filled, later ones cut out), pose, colour."""

    label: int
    outline: tuple  # of (k, 2) float arrays
    center: tuple[float, float]  # (x, y)
    radius: float
    angle: float
    aspect: float
    colour: tuple[float, float, float]
    box: tuple[float, float, float, float]  # (ymin, xmin, ymax, xmax)


@dataclass(frozen=True)
class DetectionScene:
    """Resolution-independent description of one image (coordinates in [0, 1])."""

    objects: tuple  # of SceneObject
    bg: tuple[tuple[float, float, float], tuple[float, float, float]]
    texture: np.ndarray
    distractors: tuple  # (kind, x, y, r, angle, colour)
    occluder: tuple | None  # (x0, y0, x1, y1, width, colour) or None
    noise_sigma: float
    noise_seed: int


def _to_image(points: np.ndarray, center, radius: float, angle: float, aspect: float) -> np.ndarray:
    """Unit-coordinate (u, v) points -> image (x, y): the inverse of the renderer's mapping."""
    c, s = np.cos(angle), np.sin(angle)
    u, v = points[:, 0] * radius * aspect, points[:, 1] * radius / aspect
    return np.stack([center[0] + c * u - s * v, center[1] + s * u + c * v], axis=1)


def _edge_crossings(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Points where an edge of closed polygon `a` crosses an edge of closed polygon `b`."""
    p, r = a, np.roll(a, -1, axis=0) - a
    q, s = b, np.roll(b, -1, axis=0) - b
    denom = r[:, None, 0] * s[None, :, 1] - r[:, None, 1] * s[None, :, 0]
    qp = q[None, :, :] - p[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (qp[..., 0] * s[None, :, 1] - qp[..., 1] * s[None, :, 0]) / denom
        w = (qp[..., 0] * r[:, None, 1] - qp[..., 1] * r[:, None, 0]) / denom
    hit = (denom != 0) & (t >= 0) & (t <= 1) & (w >= 0) & (w <= 1)
    i, _ = np.nonzero(hit)
    return p[i] + t[hit][:, None] * r[i]


def boundary_points(outline: Sequence[np.ndarray]) -> np.ndarray:
    """Vertices of the filled region's boundary (unit coordinates): the outer polygon's vertices outside
    the cut-outs, the cut-outs' vertices inside the outer polygon, and where their edges cross. The region's
    extent in any direction is reached at one of them."""
    outer, cuts = np.asarray(outline[0], float), [np.asarray(c, float) for c in outline[1:]]
    keep = np.ones(len(outer), bool)
    points = []
    for cut in cuts:
        keep &= ~_inside(cut, outer[:, 0], outer[:, 1])
        points.append(cut[_inside(outer, cut[:, 0], cut[:, 1])])
        points.append(_edge_crossings(outer, cut))
    return np.concatenate([outer[keep]] + points)


def _draw_object(rng: np.random.Generator, label: int, bg_mean: np.ndarray) -> tuple:
    outline = tuple(_polygon(label, rng))
    radius = float(rng.uniform(*RADIUS_RANGE))
    angle = float(rng.uniform(0, 2 * np.pi))
    aspect = float(rng.uniform(*ASPECT_RANGE))
    colour = tuple(float(v) for v in _colour_at_contrast(rng, bg_mean, rng.uniform(*CONTRAST_RANGE)))
    return outline, radius, angle, aspect, colour


def _place(rng: np.random.Generator, points: np.ndarray, taken: list[tuple[float, float, float]]):
    """A centre keeping the shape (boundary `points` relative to its centre) inside the image, away from
    the shapes already placed (circles around their outlines never meet); None when none is found."""
    lo, hi = points.min(axis=0), points.max(axis=0)
    extent = float(np.sqrt((points ** 2).sum(axis=1)).max())
    x_range, y_range = (MARGIN - lo[0], 1 - MARGIN - hi[0]), (MARGIN - lo[1], 1 - MARGIN - hi[1])
    if x_range[0] > x_range[1] or y_range[0] > y_range[1]:
        return None
    for _ in range(PLACEMENT_TRIES):
        x, y = float(rng.uniform(*x_range)), float(rng.uniform(*y_range))
        if all(np.hypot(x - tx, y - ty) >= extent + te + MARGIN for tx, ty, te in taken):
            taken.append((x, y, extent))
            return x, y
    return None


def make_scene(split: str, index: int) -> DetectionScene:
    """The scene of image `index` of `split` (MltsError BAD_DATA for an unknown split or index)."""
    if split not in SPLITS:
        raise _bad(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
        raise _bad(f"image index must be an integer, got {index!r}")
    if not 0 <= int(index) < SPLITS[split]:
        raise _bad(f"{split} has {SPLITS[split]} images, index {index} is out of range")
    index = int(index)
    rng = np.random.default_rng(_seed(split, index))
    bg0 = rng.uniform(0, 1, 3)
    bg1 = np.clip(bg0 + rng.normal(0, 0.25, 3), 0, 1)
    bg_mean = (bg0 + bg1) / 2
    texture = rng.uniform(0, 1, (int(rng.integers(3, 9)),) * 2)
    objects, taken = [], []
    for _ in range(int(rng.integers(1, MAX_OBJECTS + 1))):
        label = int(rng.integers(len(CLASSES)))
        outline, radius, angle, aspect, colour = _draw_object(rng, label, bg_mean)
        points = _to_image(boundary_points(outline), (0.0, 0.0), radius, angle, aspect)
        center = _place(rng, points, taken)
        if center is None:
            continue
        lo, hi = points.min(axis=0) + center, points.max(axis=0) + center
        box = tuple(float(v) for v in np.clip([lo[1], lo[0], hi[1], hi[0]], 0.0, 1.0))
        objects.append(SceneObject(label, outline, center, radius, angle, aspect, colour, box))
    distractors = random_distractors(rng, bg0, MAX_DISTRACTORS, DISTRACTOR_RADIUS)
    occluder = None
    if objects and rng.uniform() < OCCLUDER_PROBABILITY:
        target = objects[int(rng.integers(len(objects)))]
        x0 = target.center[0] + rng.normal(0, target.radius)
        y0 = target.center[1] + rng.normal(0, target.radius)
        a = rng.uniform(0, np.pi)
        occluder = (x0 - np.cos(a), y0 - np.sin(a), x0 + np.cos(a), y0 + np.sin(a),
                    float(rng.uniform(*OCCLUDER_WIDTH)), tuple(bg1 if rng.uniform() < 0.5 else rng.uniform(0, 1, 3)))
    return DetectionScene(tuple(objects), (tuple(bg0), tuple(bg1)), texture, tuple(distractors), occluder,
                          float(rng.uniform(*NOISE_RANGE)), _seed(split, index, "noise"))


def _shape_mask(outline: Sequence[np.ndarray], center, radius: float, angle: float, aspect: float,
                x: np.ndarray, y: np.ndarray) -> tuple[slice, slice, np.ndarray] | None:
    """The filled region on the grid (x, y) of pixel centres, tested only around the shape:
    (rows, cols, mask of that window), None when the window is empty."""
    n = x.shape[0]
    extent = 1.15 * radius * max(aspect, 1 / aspect)  # every outline lies within 1.15 units of its centre
    r0, r1 = max(0, int((center[1] - extent) * n)), min(n, int((center[1] + extent) * n) + 2)
    c0, c1 = max(0, int((center[0] - extent) * n)), min(n, int((center[0] + extent) * n) + 2)
    if r0 >= r1 or c0 >= c1:
        return None
    xs, ys = x[r0:r1, c0:c1], y[r0:r1, c0:c1]
    c, s = np.cos(angle), np.sin(angle)
    u = ((xs - center[0]) * c + (ys - center[1]) * s) / (radius * aspect)
    v = (-(xs - center[0]) * s + (ys - center[1]) * c) / (radius / aspect)
    mask = _inside(outline[0], u, v)
    for cut in outline[1:]:
        mask &= ~_inside(cut, u, v)
    return slice(r0, r1), slice(c0, c1), mask


def _grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    coords = (np.arange(n) + 0.5) / n
    return np.meshgrid(coords, coords)


def object_masks(scene: DetectionScene, size: int) -> np.ndarray:
    """[objects, size, size] bool: which pixel centres each shape's filled region covers."""
    x, y = _grid(size)
    masks = np.zeros((len(scene.objects), size, size), bool)
    for k, obj in enumerate(scene.objects):
        found = _shape_mask(obj.outline, obj.center, obj.radius, obj.angle, obj.aspect, x, y)
        if found is not None:
            rows, cols, mask = found
            masks[k, rows, cols] = mask
    return masks


def render(scene: DetectionScene, size: int) -> np.ndarray:
    """The scene as a `size` x `size` x 3 uint8 image (drawn supersampled, like `shapes.render`)."""
    s = size * SUPERSAMPLE
    x, y = _grid(s)
    t = _upsample(scene.texture, s)[..., None]
    img = np.asarray(scene.bg[0]) * (1 - t) + np.asarray(scene.bg[1]) * t

    def paint(outline, center, radius, angle, aspect, colour) -> None:
        found = _shape_mask(outline, center, radius, angle, aspect, x, y)
        if found is not None:
            rows, cols, mask = found
            img[rows, cols][mask] = colour

    bar = (np.array([[1, 0.25], [-1, 0.25], [-1, -0.25], [1, -0.25]]),)
    disc = (np.stack([np.cos(np.linspace(0, 2 * np.pi, 24, endpoint=False)),
                      np.sin(np.linspace(0, 2 * np.pi, 24, endpoint=False))], 1),)
    for kind, dx, dy, dr, da, colour in scene.distractors:
        paint(bar if kind else disc, (dx, dy), dr, da, 1.0, colour)
    for obj in scene.objects:
        paint(obj.outline, obj.center, obj.radius, obj.angle, obj.aspect, obj.colour)
    if scene.occluder is not None:
        x0, y0, x1, y1, w, colour = scene.occluder
        dx, dy = x1 - x0, y1 - y0
        img[np.abs(dy * (x - x0) - dx * (y - y0)) / np.hypot(dx, dy) < w / 2] = colour
    img = img.reshape(size, SUPERSAMPLE, size, SUPERSAMPLE, 3).mean(axis=(1, 3))
    noise = np.random.default_rng(scene.noise_seed + size).normal(0, scene.noise_sigma, img.shape)
    return np.clip(np.round((img + noise) * 255), 0, 255).astype(np.uint8)


def annotations(scene: DetectionScene) -> tuple[np.ndarray, np.ndarray]:
    """(boxes float32 [n, 4] (ymin, xmin, ymax, xmax), classes int64 [n]) of a scene."""
    boxes = np.array([o.box for o in scene.objects], np.float32).reshape(-1, 4)
    return boxes, np.array([o.label for o in scene.objects], np.int64)


class ShapesDetectionDataset:
    """One split rendered at one resolution: `ds[i]` -> (image uint8 [size, size, 3], boxes, classes)."""

    def __init__(self, split: str = "heldout", size: int = 160, count: int | None = None) -> None:
        if split not in SPLITS:
            raise _bad(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
        if int(size) < 8:
            raise _bad(f"image size {size} is too small (at least 8 pixels)")
        self.split = split
        self.size = int(size)
        self.count = SPLITS[split] if count is None else min(int(count), SPLITS[split])
        if self.count < 0:
            raise _bad(f"count {count} is negative")
        self.classes = CLASSES

    def __len__(self) -> int:
        return self.count

    def _scene(self, index: int) -> DetectionScene:
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool) and not 0 <= index < self.count:
            raise _bad(f"this {self.split} set has {self.count} images, index {index} is out of range")
        return make_scene(self.split, index)

    def annotations(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(boxes, classes) of image `index`, without rendering it."""
        return annotations(self._scene(index))

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        scene = self._scene(index)
        return (render(scene, self.size),) + annotations(scene)

    def batches(self, batch_size: int = 32, start: int = 0, stop: int | None = None
                ) -> Iterator[tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]]:
        """(images [B, size, size, 3], per-image boxes, per-image classes) in index order."""
        stop = self.count if stop is None else min(stop, self.count)
        for b in range(start, stop, batch_size):
            items = [self[i] for i in range(b, min(b + batch_size, stop))]
            yield np.stack([it[0] for it in items]), [it[1] for it in items], [it[2] for it in items]
