"""Calibration: the ranges of activations over calibration inputs (min/max or percentiles)."""
from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np

from .evaluator import Evaluator

CALIBRATIONS = ("minmax", "percentile")


class _MinMax:
    def __init__(self) -> None:
        self.lo, self.hi = np.inf, -np.inf

    def add(self, x: np.ndarray) -> None:
        self.lo = min(self.lo, float(x.min()))
        self.hi = max(self.hi, float(x.max()))

    def range(self) -> tuple[float, float]:
        return self.lo, self.hi


class _Histogram(_MinMax):
    """A histogram over [-R, R] whose range doubles (merging bin pairs, exactly) as values grow."""

    BINS = 8192

    def __init__(self, percentile: float) -> None:
        super().__init__()
        self.percentile = float(percentile)
        self.R = 0.0
        self.counts = np.zeros(self.BINS, np.int64)

    def add(self, x: np.ndarray) -> None:
        super().add(x)
        amax = max(abs(self.lo), abs(self.hi))
        if amax == 0.0:
            self.counts[self.BINS // 2] += x.size
            return
        if self.R == 0.0:
            zeros = self.counts.sum()
            self.R = amax
            self.counts[:] = 0
            self.counts[self.BINS // 2] = zeros
        while amax > self.R:
            merged = self.counts.reshape(-1, 2).sum(axis=1)
            self.counts[:] = 0
            self.counts[self.BINS // 4: 3 * self.BINS // 4] = merged
            self.R *= 2.0
        idx = ((x.ravel() + np.float32(self.R)) * np.float32(self.BINS / (2.0 * self.R))).astype(np.int64)
        np.clip(idx, 0, self.BINS - 1, out=idx)
        self.counts += np.bincount(idx, minlength=self.BINS)

    def range(self) -> tuple[float, float]:
        total = int(self.counts.sum())
        if total == 0 or self.R == 0.0:
            return super().range()
        cdf = np.cumsum(self.counts)
        width = 2.0 * self.R / self.BINS
        tail = total * (1.0 - self.percentile / 100.0)
        hi_bin = int(np.searchsorted(cdf, total - tail, side="left"))
        lo_bin = int(np.searchsorted(cdf, tail, side="right"))
        hi = min(self.hi, -self.R + (hi_bin + 1) * width)
        lo = max(self.lo, -self.R + lo_bin * width)
        return min(lo, hi), hi


def batches(inputs: Iterable[np.ndarray] | np.ndarray, batch_size: int, sample_rank: int = 3) -> Iterator[np.ndarray]:
    """Re-chunks arrays ([N, ...] batches or single samples of rank `sample_rank`, e.g. [C, H, W]) into
    batches of `batch_size`."""
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    pending, count = [], 0
    for item in inputs:
        arr = np.asarray(item, np.float32)
        if arr.ndim == sample_rank:
            arr = arr[None]
        while arr.shape[0]:
            take = min(batch_size - count, arr.shape[0])
            pending.append(arr[:take])
            count += take
            arr = arr[take:]
            if count == batch_size:
                yield np.concatenate(pending) if len(pending) > 1 else pending[0]
                pending, count = [], 0
    if pending:
        yield np.concatenate(pending) if len(pending) > 1 else pending[0]


def parse_calibration(calibration: str, percentile: float) -> tuple[str, float]:
    """("minmax" | "percentile", percentile) from the options; "percentile:<p>" sets the percentile."""
    if isinstance(calibration, str) and calibration.startswith("percentile:"):
        try:
            calibration, percentile = "percentile", float(calibration.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"bad calibration {calibration!r} (expected e.g. 'percentile:99.99')") from None
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {calibration!r} (expected one of {', '.join(CALIBRATIONS)})")
    return calibration, float(percentile)


def _float_inputs(items: Iterable[np.ndarray] | np.ndarray) -> Iterator[np.ndarray]:
    """Calibration inputs as float model inputs (NHWC uint8 images are preprocessed)."""
    from mlts.datasets.preprocess import to_float_input
    for item in ([items] if isinstance(items, np.ndarray) else items):
        item = np.asarray(item)
        yield to_float_input(item) if item.dtype == np.uint8 and item.shape[-1] == 3 else item


class BatchRunner:
    """Runs calibration batches; falls back to one sample at a time for graphs that fix their batch size.

    A graph that reshapes to constant shapes (e.g. [1, H] before its classifier) cannot run a
    batch of 16; such a graph then runs sample by sample, for the rest of the calibration.
    """

    def __init__(self, evaluator: Evaluator, names: list[str]) -> None:
        self.evaluator, self.names, self.per_sample = evaluator, names, False

    def run(self, batch: np.ndarray) -> Iterator[dict[str, np.ndarray]]:
        if not self.per_sample:
            try:
                yield self.evaluator.run(batch, outputs=self.names)
                return
            except Exception:  # noqa: BLE001 (retried one sample at a time; a real error recurs there)
                if batch.shape[0] == 1:
                    raise
                self.per_sample = True
        for i in range(batch.shape[0]):
            yield self.evaluator.run(batch[i:i + 1], outputs=self.names)


def collect_ranges(float_model, calibration_inputs: Iterable[np.ndarray] | np.ndarray, tensors: Iterable[str], *,
                   calibration: str = "minmax", percentile: float = 99.99, batch_size: int = 16,
                   derived: Sequence = ()) -> tuple[dict[str, tuple[float, float]], int]:
    """Runs the float model over the inputs; returns ({tensor: (lo, hi)}, number of samples).

    Inputs are float arrays of the model's input ([N, C, H, W] or [C, H, W]; for other inputs
    batches of the input's rank or single samples of one less, e.g. [N, T, F] or [T, F]) or, for
    image models, NHWC uint8 images, preprocessed with mlts.datasets.preprocess.to_float_input.
    calibration: "minmax", "percentile" (with `percentile`), or "percentile:<p>".
    derived: statistics computed from tensors rather than read (e.g. recurrent.LstmStateStatistic:
    every step's LSTM states): each has `sources` (tensor names), `keys` and `compute(values)`,
    which returns {key: array} for a batch; their ranges are returned under their keys.
    """
    calibration, percentile = parse_calibration(calibration, percentile)
    if calibration == "percentile" and not 50.0 < percentile <= 100.0:
        raise ValueError(f"percentile must be in (50, 100], got {percentile}")
    evaluator = float_model if isinstance(float_model, Evaluator) else Evaluator(float_model)
    read = set(tensors)
    keys = read | {k for d in derived for k in d.keys}
    stats = {t: (_Histogram(percentile) if calibration == "percentile" else _MinMax()) for t in keys}
    names = list(read | {t for d in derived for t in d.sources})
    runner = BatchRunner(evaluator, names)
    samples = 0
    rank = evaluator.input_ranks.get(evaluator.input_names[0]) if evaluator.input_names else None
    for batch in batches(_float_inputs(calibration_inputs), batch_size, (rank or 4) - 1):
        for values in runner.run(batch):
            for name in read:
                stats[name].add(values[name])
            for statistic in derived:
                for key, value in statistic.compute(values).items():
                    stats[key].add(value)
        samples += batch.shape[0]
    if samples == 0:
        raise ValueError("no calibration inputs")
    return {t: s.range() for t, s in stats.items()}, samples
