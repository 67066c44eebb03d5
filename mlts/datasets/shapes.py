"""A procedurally generated, labeled image set: ten classes of shapes on textured, noisy backgrounds.

Every image is a pure function of (split, index, size): its geometry, colours and texture are drawn
from a generator seeded by split and index only, in resolution-independent coordinates, so the same
image renders at any resolution (MobileNet 128 to 224) and every machine sees the same pixels.
The held-out split has 1500 images, like MLTS. Difficulty comes from random colour contrast, scale,
rotation, clutter (distractor blobs and strokes), partial occlusion and pixel noise, so that
accuracy separates model widths and resolutions without being trivial.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np

CLASSES = ("circle", "triangle", "square", "pentagon", "hexagon", "star", "cross", "ring", "crescent", "arrow")
SPLITS = {"train": 200000, "calibration": 500, "heldout": 1500}
SUPERSAMPLE = 2

# Difficulty knobs (fixed once the zoo is trained on them).
RADIUS_RANGE = (0.21, 0.36)      # shape size, as a fraction of the image side
CONTRAST_RANGE = (0.15, 1.2)     # L1 distance between the shape's colour and the mean background colour
MAX_DISTRACTORS = 2              # small blobs and strokes besides the shape
DISTRACTOR_RADIUS = (0.01, 0.03)
OCCLUDER_PROBABILITY = 0.4       # a stroke across the shape
OCCLUDER_WIDTH = (0.02, 0.09)
NOISE_RANGE = (0.0, 0.12)        # per-pixel Gaussian noise sigma


def _seed(split: str, index: int, salt: str = "") -> int:
    digest = hashlib.sha256(f"mlts-shapes/{split}/{index}/{salt}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass(frozen=True)
class Scene:
    """Resolution-independent description of one image (coordinates in [0, 1])."""

    label: int
    center: tuple[float, float]
    radius: float
    angle: float
    aspect: float
    fg: tuple[float, float, float]
    bg: tuple[tuple[float, float, float], tuple[float, float, float]]
    texture: np.ndarray  # coarse grid in [0, 1] blending the two background colours
    distractors: tuple  # (kind, x, y, r, angle, colour)
    occluder: tuple | None  # (x0, y0, x1, y1, width, colour) or None
    noise_sigma: float
    noise_seed: int


def _polygon(label: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Outline(s) of a class in unit coordinates; the first is filled, later ones are cut out."""
    def regular(n: int, r: float = 1.0, phase: float = 0.0) -> np.ndarray:
        t = phase + np.arange(n) * 2 * np.pi / n
        return np.stack([r * np.cos(t), r * np.sin(t)], axis=1)

    name = CLASSES[label]
    if name == "circle":
        return [regular(64)]
    if name == "triangle":
        return [regular(3, 1.1)]
    if name == "square":
        return [regular(4, 1.05, np.pi / 4)]
    if name == "pentagon":
        return [regular(5)]
    if name == "hexagon":
        return [regular(6)]
    if name == "star":
        outer = regular(5, 1.1)
        inner = regular(5, rng.uniform(0.4, 0.55), np.pi / 5)
        pts = np.empty((10, 2))
        pts[0::2], pts[1::2] = outer, inner
        return [pts]
    if name == "cross":
        w = rng.uniform(0.28, 0.4)
        return [np.array([[w, 1], [-w, 1], [-w, w], [-1, w], [-1, -w], [-w, -w], [-w, -1], [w, -1],
                          [w, -w], [1, -w], [1, w], [w, w]], float)]
    if name == "ring":
        return [regular(64), regular(64, rng.uniform(0.45, 0.65))]
    if name == "crescent":
        cut = regular(64, rng.uniform(0.75, 0.9))
        cut[:, 0] += rng.uniform(0.35, 0.55)
        return [regular(64), cut]
    if name == "arrow":
        h = rng.uniform(0.45, 0.6)
        s = rng.uniform(0.18, 0.28)
        return [np.array([[1, 0], [0.1, h + 0.2], [0.1, s], [-1, s], [-1, -s], [0.1, -s], [0.1, -h - 0.2]], float)]
    raise ValueError(label)


def _contrasting_colour(rng: np.random.Generator, against: np.ndarray, min_distance: float) -> np.ndarray:
    for _ in range(64):
        c = rng.uniform(0, 1, 3)
        if np.abs(c - against).sum() >= min_distance:
            return c
    return 1.0 - against


def _colour_at_contrast(rng: np.random.Generator, against: np.ndarray, distance: float) -> np.ndarray:
    """A random colour at L1 `distance` from `against`, so that low-contrast shapes really occur
    (a uniformly random colour is almost always far from the background)."""
    weights = rng.dirichlet(np.ones(3)) * distance
    up = rng.uniform(0, 1, 3) < 0.5
    up = np.where(up & (against + weights > 1), False, up)
    up = np.where(~up & (against - weights < 0), True, up)
    return np.clip(against + np.where(up, weights, -weights), 0, 1)


def random_distractors(rng: np.random.Generator, background: np.ndarray, most: int = MAX_DISTRACTORS,
                       radius: tuple[float, float] = DISTRACTOR_RADIUS) -> list[tuple]:
    """Up to `most` small blobs and strokes: (kind, x, y, radius, angle, colour) each."""
    distractors = []
    for _ in range(int(rng.integers(0, most + 1))):
        kind = int(rng.integers(2))
        distractors.append((kind, float(rng.uniform(0, 1)), float(rng.uniform(0, 1)),
                            float(rng.uniform(*radius)), float(rng.uniform(0, np.pi)),
                            tuple(_contrasting_colour(rng, background, 0.3))))
    return distractors


def make_scene(split: str, index: int) -> Scene:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    if not 0 <= index < SPLITS[split]:
        raise IndexError(f"{split} has {SPLITS[split]} images, index {index} is out of range")
    rng = np.random.default_rng(_seed(split, index))
    label = int(rng.integers(len(CLASSES)))
    radius = float(rng.uniform(*RADIUS_RANGE))
    margin = radius * 0.9
    center = (float(rng.uniform(margin, 1 - margin)), float(rng.uniform(margin, 1 - margin)))
    bg0 = rng.uniform(0, 1, 3)
    bg1 = np.clip(bg0 + rng.normal(0, 0.25, 3), 0, 1)
    fg = _colour_at_contrast(rng, (bg0 + bg1) / 2, rng.uniform(*CONTRAST_RANGE))
    texture = rng.uniform(0, 1, (int(rng.integers(3, 9)),) * 2)
    distractors = random_distractors(rng, bg0)
    occluder = None
    if rng.uniform() < OCCLUDER_PROBABILITY:
        x0, y0 = center[0] + rng.normal(0, radius), center[1] + rng.normal(0, radius)
        a = rng.uniform(0, np.pi)
        occluder = (x0 - np.cos(a), y0 - np.sin(a), x0 + np.cos(a), y0 + np.sin(a),
                    float(rng.uniform(*OCCLUDER_WIDTH)), tuple(bg1 if rng.uniform() < 0.5 else rng.uniform(0, 1, 3)))
    return Scene(label, center, radius, float(rng.uniform(0, 2 * np.pi)), float(rng.uniform(0.8, 1.2)),
                 tuple(fg), (tuple(bg0), tuple(bg1)), texture, tuple(distractors), occluder,
                 float(rng.uniform(*NOISE_RANGE)), _seed(split, index, "noise"))


def _inside(poly: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Even-odd point-in-polygon over a grid (vectorized crossing test)."""
    inside = np.zeros(x.shape, bool)
    n = len(poly)
    for i in range(n):
        (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % n]
        if y1 == y2:
            continue
        crosses = (y1 > y) != (y2 > y)
        xs = x1 + (y - y1) * (x2 - x1) / (y2 - y1)
        inside ^= crosses & (x < xs)
    return inside


def _upsample(grid: np.ndarray, size: int) -> np.ndarray:
    """Bilinear upsampling of a coarse grid to size x size (texture)."""
    g = grid.shape[0]
    pos = (np.arange(size) + 0.5) / size * (g - 1)
    i0 = np.clip(np.floor(pos).astype(int), 0, g - 2)
    f = pos - i0
    rows = grid[i0] * (1 - f)[:, None] + grid[i0 + 1] * f[:, None]
    return rows[:, i0] * (1 - f)[None, :] + rows[:, i0 + 1] * f[None, :]


def render(scene: Scene, size: int) -> np.ndarray:
    """The scene as an HxWx3 uint8 image of `size` x `size` pixels."""
    s = size * SUPERSAMPLE
    coords = (np.arange(s) + 0.5) / s
    x, y = np.meshgrid(coords, coords)
    t = _upsample(scene.texture, s)[..., None]
    img = np.asarray(scene.bg[0]) * (1 - t) + np.asarray(scene.bg[1]) * t

    def paint(polys: list[np.ndarray], cx: float, cy: float, r: float, angle: float, aspect: float, colour) -> None:
        # Only the shape's bounding box is tested (every outline lies within 1.15 units of its centre).
        extent = 1.15 * r * max(aspect, 1 / aspect)
        r0, r1 = max(0, int((cy - extent) * s)), min(s, int((cy + extent) * s) + 2)
        c0, c1 = max(0, int((cx - extent) * s)), min(s, int((cx + extent) * s) + 2)
        if r0 >= r1 or c0 >= c1:
            return
        xs, ys = x[r0:r1, c0:c1], y[r0:r1, c0:c1]
        c, sn = np.cos(angle), np.sin(angle)
        u = ((xs - cx) * c + (ys - cy) * sn) / (r * aspect)
        v = (-(xs - cx) * sn + (ys - cy) * c) / (r / aspect)
        mask = _inside(polys[0], u, v)
        for cut in polys[1:]:
            mask &= ~_inside(cut, u, v)
        img[r0:r1, c0:c1][mask] = colour

    for kind, dx, dy, dr, da, colour in scene.distractors:
        shape = [np.array([[1, 0.25], [-1, 0.25], [-1, -0.25], [1, -0.25]])] if kind else \
            [np.stack([np.cos(np.linspace(0, 2 * np.pi, 24, endpoint=False)),
                       np.sin(np.linspace(0, 2 * np.pi, 24, endpoint=False))], 1)]
        paint(shape, dx, dy, dr, da, 1.0, colour)
    shape_rng = np.random.default_rng(scene.noise_seed ^ 0x5EED)
    paint(_polygon(scene.label, shape_rng), scene.center[0], scene.center[1], scene.radius, scene.angle,
          scene.aspect, scene.fg)
    if scene.occluder is not None:
        x0, y0, x1, y1, w, colour = scene.occluder
        dx, dy = x1 - x0, y1 - y0
        dist = np.abs(dy * (x - x0) - dx * (y - y0)) / np.hypot(dx, dy)
        img[dist < w / 2] = colour
    img = img.reshape(size, SUPERSAMPLE, size, SUPERSAMPLE, 3).mean(axis=(1, 3))
    noise = np.random.default_rng(scene.noise_seed + size).normal(0, scene.noise_sigma, img.shape)
    return np.clip(np.round((img + noise) * 255), 0, 255).astype(np.uint8)


class ShapesDataset:
    """One split rendered at one resolution: `images(indices)` -> (N, H, W, 3) uint8, `labels`."""

    def __init__(self, split: str = "heldout", size: int = 224, count: int | None = None) -> None:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
        self.split = split
        self.size = int(size)
        self.count = SPLITS[split] if count is None else min(int(count), SPLITS[split])
        self.classes = CLASSES

    def __len__(self) -> int:
        return self.count

    def label(self, index: int) -> int:
        return make_scene(self.split, index).label

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        scene = make_scene(self.split, index)
        return render(scene, self.size), scene.label

    def batches(self, batch_size: int = 32, start: int = 0, stop: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        stop = self.count if stop is None else min(stop, self.count)
        for b in range(start, stop, batch_size):
            items = [self[i] for i in range(b, min(b + batch_size, stop))]
            yield np.stack([im for im, _ in items]), np.array([lb for _, lb in items], np.int64)
