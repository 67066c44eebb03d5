"""The procedural "spoken command" set: deterministic, balanced, distinct splits, and classes that carry the
acoustic cue they are named after (checked with simple statistics on the features, not with the model)."""
from __future__ import annotations

import numpy as np
import pytest

from mlts.datasets import commands
from mlts.datasets.commands import CLASSES, FRAMES, MEL_BINS, SPLITS, CommandsDataset, hz_to_bin, label_of, render
from mlts.runtime import MltsError, ResultCode


def _samples_of(name: str, count: int, split: str = "train") -> list[np.ndarray]:
    label = CLASSES.index(name)
    indices = [i for i in range(count * len(CLASSES) * 2) if label_of(split, i) == label][:count]
    return [render(split, i)[0] for i in indices]


def test_samples_are_a_pure_function_of_split_and_index():
    a, la = CommandsDataset("heldout")[7]
    b, lb = CommandsDataset("heldout", count=10)[7]
    assert la == lb and np.array_equal(a, b)
    assert render("heldout", 7)[0].tobytes() == a.tobytes()


def test_shape_dtype_and_range():
    feats = np.stack([render("calibration", i)[0] for i in range(120)])
    assert feats.shape == (120, FRAMES, MEL_BINS) and feats.dtype == np.float32
    assert (FRAMES, MEL_BINS) == (40, 32) and len(CLASSES) == 12
    assert np.isfinite(feats).all()
    assert -commands.FEATURE_CLIP <= feats.min() and feats.max() <= commands.FEATURE_CLIP
    # Standardized by fixed constants: centred near 0, within about [-3, 3].
    assert abs(float(feats.mean())) < 0.5 and 0.4 < float(feats.std()) < 1.2
    assert np.mean(np.abs(feats) > 3.0) < 1e-3
    # Values lie on the 1/1024 grid that makes them identical across machines.
    assert np.array_equal(np.round(feats * 1024) / 1024, feats)


def test_mel_bins_span_the_filter_bank_range():
    assert hz_to_bin(commands.F_LOW) == pytest.approx(0.0)
    assert hz_to_bin(commands.F_HIGH) == pytest.approx(MEL_BINS - 1)
    # HTK mel: 1000 Hz is 1000 mel; bin position linear in mel.
    expected = (1000.0 - commands._MEL_LOW) / (commands._MEL_HIGH - commands._MEL_LOW) * (MEL_BINS - 1)
    assert hz_to_bin(1000.0) == pytest.approx(expected, rel=1e-3)


def test_splits_differ():
    for i in range(20):
        held, train, calib = render("heldout", i)[0], render("train", i)[0], render("calibration", i)[0]
        assert not np.array_equal(held, train) and not np.array_equal(held, calib)
        assert not np.array_equal(train, calib)


def test_labels_are_balanced_in_every_run_of_twelve():
    assert SPLITS == {"train": 100000, "calibration": 500, "heldout": 1500}
    labels = np.array([label_of("heldout", i) for i in range(1500)])
    assert np.bincount(labels, minlength=12).tolist() == [125] * 12
    blocks = labels.reshape(-1, 12)
    assert all(sorted(b) == list(range(12)) for b in blocks)
    assert len({tuple(b) for b in blocks}) > 100  # not one fixed cycle
    assert [CommandsDataset("heldout").label(i) for i in range(24)] == labels[:24].tolist()


def _contrast(x: np.ndarray) -> np.ndarray:
    """Features over the clip's stationary background (each bin's median over time; removes the noise
    floor's tilt and the hum), averaged over 3 neighbouring bins: [FRAMES, MEL_BINS - 2]."""
    d = x - np.median(x, axis=0, keepdims=True)
    return (d[:, :-2] + d[:, 1:-1] + d[:, 2:]) / 3


def _clear_samples_of(name: str, count: int) -> list[np.ndarray]:
    """The samples of class `name` among the first `count` whose event stands 10 dB over the background."""
    return [x for x in _samples_of(name, count) if _contrast(x).max() > 1.0]


def _event_frames(s: np.ndarray) -> np.ndarray:
    return np.flatnonzero(s.max(axis=1) > 0.5 * s.max())


def test_chirps_rise_and_fall():
    """The loudest bin's least-squares slope over the event's frames has the chirp's sign."""
    def slope(x):
        s = _contrast(x)
        frames = _event_frames(s)
        return float(np.polyfit(frames, s[frames].argmax(axis=1), 1)[0]) if len(frames) >= 3 else 0.0
    rising = [slope(x) for x in _clear_samples_of("rising_chirp", 60)]
    falling = [slope(x) for x in _clear_samples_of("falling_chirp", 60)]
    assert len(rising) >= 15 and len(falling) >= 15
    assert np.mean(np.array(rising) > 0) > 0.85
    assert np.mean(np.array(falling) < 0) > 0.85


def test_clicks_are_short_and_bursts_are_long():
    """Frames whose mean contrast over all bins is above half its peak: a click's 1-4, a burst's 6 or more."""
    def loud_frames(x):
        energy = (x - np.median(x, axis=0, keepdims=True)).mean(axis=1)
        return int((energy > 0.5 * energy.max()).sum())
    clicks = [loud_frames(x) for x in _clear_samples_of("click", 60)]
    bursts = [loud_frames(x) for x in _clear_samples_of("noise_burst", 60)]
    assert len(clicks) >= 15 and len(bursts) >= 15
    assert max(clicks) <= 4 and min(bursts) >= 6


def test_vowel_ee_is_loud_near_2300_hz_and_oo_near_900_hz():
    """ee's second formant sits near 2.3 kHz (with a valley at 900 Hz), oo's below 900 Hz."""
    at_2300, at_900 = (int(round(hz_to_bin(f))) - 1 for f in (2300.0, 900.0))  # -1: _contrast drops bin 0

    def balance(x):
        s = _contrast(x)
        frames = _event_frames(s)
        return float(s[frames, at_2300].mean() - s[frames, at_900].mean())
    ee = [balance(x) for x in _clear_samples_of("vowel_ee", 60)]
    oo = [balance(x) for x in _clear_samples_of("vowel_oo", 60)]
    assert len(ee) >= 5 and len(oo) >= 5
    assert np.median(ee) > 0.2 and np.median(oo) < 0.0
    assert min(ee) > np.median(oo) and max(oo) < np.median(ee)


def test_batches_cover_the_requested_range():
    ds = CommandsDataset("calibration", count=10)
    batches = list(ds.batches(4))
    assert [b[0].shape for b in batches] == [(4, FRAMES, MEL_BINS), (4, FRAMES, MEL_BINS), (2, FRAMES, MEL_BINS)]
    assert all(b[1].dtype == np.int64 for b in batches)
    assert np.concatenate([b[1] for b in batches]).tolist() == [ds.label(i) for i in range(10)]
    assert np.array_equal(np.concatenate([b[0] for b in batches]), np.stack([x for x, _ in ds]))
    assert [b[0].shape[0] for b in ds.batches(4, start=3, stop=8)] == [4, 1]
    assert len(ds) == 10 and len(CommandsDataset("calibration")) == 500


@pytest.mark.parametrize("make, culprit", [
    (lambda: CommandsDataset("test"), "'test'"),
    (lambda: render("heldout", 1500), "1500"),
    (lambda: render("heldout", -1), "-1"),
    (lambda: render("heldout", 2.5), "2.5"),
    (lambda: label_of("validation", 0), "'validation'"),
    (lambda: CommandsDataset("calibration", count=5)[5], "5"),
    (lambda: CommandsDataset("calibration", count=-3), "-3"),
    (lambda: next(CommandsDataset("calibration").batches(0)), "0"),
])
def test_bad_split_index_or_count_is_refused(make, culprit):
    with pytest.raises(MltsError) as info:
        make()
    assert info.value.code == ResultCode.BAD_DATA
    assert culprit in str(info.value)
