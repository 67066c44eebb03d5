"""A procedurally generated, labeled sequence set: twelve "spoken command"-like sound events as log-mel frames.

The sequence workload's counterpart of shapes.py. Every sample is a pure function of (split, index): the
event, its timing, pitch, level and the background are drawn from a generator seeded by the sha256 of
"mlts-commands/<split>/<index>/", so every machine sees the same features. Sounds are synthesized directly
in the time-frequency domain, as a mel filter bank would see them: a harmonic line at frequency f lands on
the mel bins around its mel position as a Gaussian ridge, noise is a smooth spectral shape with the
chi-square-like fluctuation of a power spectrum (stronger in the narrow low bins), and the result is
log-compressed and standardized by fixed constants (values in about [-3, 3]). numpy only, no FFT: a
sample takes ~0.7 ms on a slow shared 2-core CPU.

Difficulty comes from random onset, duration, pitch, sweep depth, level (signal-to-noise ratio down to
a few dB), speaker variation of the vowels' formants, background hum and short distractor blips, and from
classes that border each other (a shallow chirp vs. a drifting tone, a gliding two-tone vs. a chirp, a
short burst vs. a click), so that a small LSTM lands in MLTS-like territory: well above chance, not 100%.
"""
from __future__ import annotations

import hashlib
import operator
from functools import lru_cache
from typing import Iterator

import numpy as np

from ..runtime.enums import ResultCode
from ..runtime.errors import MltsError

CLASSES = ("rising_chirp", "falling_chirp", "steady_tone", "two_tone_up", "two_tone_down", "warble",
           "noise_burst", "double_burst", "vowel_ah", "vowel_ee", "vowel_oo", "click")
FRAMES = 40          # 25 ms hops: one second of sound
MEL_BINS = 32
SPLITS = {"train": 100000, "calibration": 500, "heldout": 1500}

# The mel filter bank's range (HTK mel scale); bin b is centred on a linear mel grid from F_LOW to F_HIGH.
F_LOW, F_HIGH = 60.0, 7600.0
LINE_WIDTH = 0.7               # a pure tone's spread over neighbouring mel bins (Gaussian sigma, bins)

# Difficulty knobs (fixed once the model is trained on them).
SNR_DB = (2.0, 26.0)           # event peak over the nominal noise floor
GAIN_DB = (-8.0, 8.0)          # overall recording level
NOISE_TILT_DB = (-10.0, 5.0)   # background spectral tilt, low to high bins
HUM_PROBABILITY = 0.3
HUM_DB = (0.0, 14.0)
MAX_BLIPS = 2                  # short distractor tones, quieter than the event
BLIP_BELOW_DB = (4.0, 18.0)

# Fixed log-energy standardization: (10 log10(power) - FEATURE_MEAN_DB) / FEATURE_SCALE_DB, clipped.
FLOOR_POWER = 1e-3             # -30 dB: the log's floor
FEATURE_MEAN_DB = 2.0
FEATURE_SCALE_DB = 10.0
FEATURE_CLIP = 4.0
FEATURE_GRID = 1024

# Vowel formants (Hz, Peterson & Barney's adult averages) and bandwidths.
FORMANTS = {"vowel_ah": (730.0, 1090.0, 2440.0), "vowel_ee": (270.0, 2290.0, 3010.0),
            "vowel_oo": (300.0, 870.0, 2240.0)}
FORMANT_BANDWIDTHS = (90.0, 110.0, 170.0)


def _mel(f):
    return 2595.0 * np.log10(1.0 + np.asarray(f, float) / 700.0)


_MEL_LOW, _MEL_HIGH = float(_mel(F_LOW)), float(_mel(F_HIGH))
_BINS = np.arange(MEL_BINS, dtype=float)
_FRAME_TIMES = np.arange(FRAMES, dtype=float)
# Wider (higher) mel bins average more FFT bins, so their power fluctuates less: a power estimate
# averaging k bins is gamma(k)-distributed, approximated here as log-normal with the same mean and
# log-variance ~1.64/k (cheaper to draw than gamma with a per-bin shape). k runs from ~2.5 FFT bins in
# the lowest mel band to ~24 in the highest (a 512-point FFT at 16 kHz): 3.5 dB down to 1.1 dB.
_NOISE_LOG_SIGMA = np.sqrt(1.64 / (2.5 + 0.7 * _BINS))


def hz_to_bin(f):
    """Fractional mel-bin position of frequency f (Hz)."""
    return (_mel(f) - _MEL_LOW) / (_MEL_HIGH - _MEL_LOW) * (MEL_BINS - 1)


def _db(level):
    return 10.0 ** (np.asarray(level, float) / 10.0)


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def _check(split: str, index) -> int:
    if split not in SPLITS:
        raise _bad(f"commands data set: unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    try:
        index = operator.index(index)
    except TypeError:
        raise _bad(f"commands data set: {split} index {index!r} is not an integer") from None
    if not 0 <= index < SPLITS[split]:
        raise _bad(f"commands data set: {split} has {SPLITS[split]} samples, index {index} is out of range")
    return index


def _seed(split: str, index: int) -> int:
    digest = hashlib.sha256(f"mlts-commands/{split}/{index}/".encode()).digest()
    return int.from_bytes(digest[:8], "little")


@lru_cache(maxsize=4096)
def _label_block(split: str, block: int) -> tuple[int, ...]:
    """Each run of len(CLASSES) consecutive indices holds every class once, in a seeded order."""
    digest = hashlib.sha256(f"mlts-commands/{split}/labels/{block}/".encode()).digest()
    order = np.random.default_rng(int.from_bytes(digest[:8], "little")).permutation(len(CLASSES))
    return tuple(int(c) for c in order)


def label_of(split: str, index: int) -> int:
    index = _check(split, index)
    return _label_block(split, index // len(CLASSES))[index % len(CLASSES)]


# ---------------------------------------------------------------------------------------------- synthesis


def _unit(x: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, 0.0), 1.0)


def _envelope(onset: float, duration: float, attack: float, release: float) -> np.ndarray:
    """Per-frame linear amplitude (power) of an event: soft trapezoid, fractional onset."""
    return _unit((_FRAME_TIMES - onset + 1.0) / attack) * _unit((onset + duration - _FRAME_TIMES) / release)


def _lines(positions: np.ndarray, powers: np.ndarray) -> np.ndarray:
    """Power over [N, MEL_BINS] of spectral lines at bin `positions` [N, K] with `powers` [N, K]."""
    d = (_BINS[None, None, :] - positions[:, :, None]) / LINE_WIDTH
    return (powers[:, :, None] * np.exp(-0.5 * d * d)).sum(axis=1)


def _harmonic_lines(log2_f0: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A whistle-like tone following log2-frequency track `log2_f0` [N] with weak 2nd/3rd harmonics: [N, MEL_BINS]."""
    rel = np.array([1.0, rng.uniform(0.0, 0.35), rng.uniform(0.0, 0.15)])
    f = np.exp2(log2_f0)[:, None] * np.arange(1, 4)[None, :]
    powers = np.where(f < F_HIGH, rel[None, :], 0.0)
    return _lines(hz_to_bin(np.minimum(f, F_HIGH)), powers)


def _tone_event(name: str, u: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Pitch track (log2 Hz) over event time u in [0, 1] for the tonal classes, then its lines."""
    low, high = np.log2(220.0), np.log2(2400.0)
    if name in ("rising_chirp", "falling_chirp"):
        sweep = rng.uniform(0.5, 1.5)
        start = rng.uniform(low, high - sweep)
        shape = u ** rng.uniform(0.6, 1.6)  # linear, concave or convex sweeps
        track = start + sweep * (shape if name == "rising_chirp" else 1.0 - shape)
    elif name == "steady_tone":
        drift = rng.uniform(-0.06, 0.06)
        track = rng.uniform(low + 0.1, high - 0.1) + drift * u
    elif name in ("two_tone_up", "two_tone_down"):
        interval = rng.uniform(0.35, 1.0)
        first = rng.uniform(low, high - interval)
        change, glide = rng.uniform(0.35, 0.65), rng.uniform(0.01, 0.2)
        step = _unit((u - change) / glide + 0.5)
        track = first + interval * (step if name == "two_tone_up" else 1.0 - step)
    elif name == "warble":
        depth, cycles = rng.uniform(0.12, 0.35), rng.uniform(1.5, 4.0)
        centre = rng.uniform(low + depth, high - depth)
        track = centre + depth * np.sin(2 * np.pi * cycles * u + rng.uniform(0, 2 * np.pi))
    else:
        raise ValueError(name)
    track = track + rng.normal(0.0, 0.01, FRAMES)  # slight pitch jitter
    return _harmonic_lines(track, rng)


def _noise_shape(rng: np.random.Generator) -> np.ndarray:
    """A broadband noise's smooth spectral shape over the mel bins (peak 1)."""
    centre, width = rng.uniform(6, MEL_BINS), rng.uniform(4.0, 12.0)
    return np.exp(-0.5 * ((_BINS - centre) / width) ** 2) + rng.uniform(0.02, 0.2)


def _fluctuating(power: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Noise power as a spectrum estimate sees it: fluctuating around its mean `power` ([FRAMES or 1,
    MEL_BINS]), independently per bin and frame."""
    z = rng.standard_normal((FRAMES, MEL_BINS))
    return power * np.exp(_NOISE_LOG_SIGMA * z - 0.5 * _NOISE_LOG_SIGMA ** 2)


def _vowel(name: str, rng: np.random.Generator) -> np.ndarray:
    """One frame's spectrum of a voiced vowel: f0 harmonics weighted by three formant resonances."""
    speaker = rng.uniform(0.85, 1.25)
    formants = np.array(FORMANTS[name]) * speaker * rng.uniform(0.92, 1.08, 3)
    levels = np.array([1.0, 10 ** (-rng.uniform(3, 10) / 10), 10 ** (-rng.uniform(9, 18) / 10)])
    f0 = rng.uniform(90.0, 280.0)
    harmonics = f0 * np.arange(1, int(5000.0 / f0) + 1)
    half_bw = np.array(FORMANT_BANDWIDTHS) * speaker / 2
    envelope = (levels[None, :] / (1.0 + ((harmonics[:, None] - formants[None, :]) / half_bw[None, :]) ** 2)).sum(1)
    envelope += 0.01 * (f0 / harmonics)  # glottal source between the formants
    d = (_BINS[None, :] - hz_to_bin(harmonics)[:, None]) / LINE_WIDTH
    return (envelope[:, None] * np.exp(-0.5 * d * d)).sum(axis=0)


def _event(label: int, rng: np.random.Generator) -> np.ndarray:
    """The labeled event's power over [FRAMES, MEL_BINS], peak bin power 1."""
    name = CLASSES[label]
    if name == "click":
        onset = rng.uniform(1, FRAMES - 5)
        decay = rng.uniform(0.3, 1.2)
        t = _FRAME_TIMES - onset
        env = np.where(t >= -0.5, np.exp(-np.maximum(t, 0.0) / decay), 0.0) * (t < 4)
        tilt = np.exp(rng.uniform(-1.5, 1.5) * (_BINS / MEL_BINS - 0.5))
        power = _fluctuating(env[:, None] * tilt[None, :], rng)
    elif name in ("noise_burst", "double_burst"):
        shape = _noise_shape(rng)
        if name == "noise_burst":
            duration = rng.uniform(6, 24)
            onset = rng.uniform(0, FRAMES - duration)
            env = _envelope(onset, duration, rng.uniform(1, 3), rng.uniform(1, 4))
            env = env * (1.0 - rng.uniform(0.0, 0.5) * np.sin(np.pi * _FRAME_TIMES / rng.uniform(3, 8)) ** 2)
        else:
            first, gap, second = rng.uniform(3, 9), rng.uniform(2, 8), rng.uniform(3, 9)
            onset = rng.uniform(0, FRAMES - first - gap - second)
            env = (_envelope(onset, first, 1.0, rng.uniform(1, 2))
                   + rng.uniform(0.5, 1.0) * _envelope(onset + first + gap, second, 1.0, rng.uniform(1, 3)))
        power = _fluctuating(env[:, None] * shape[None, :], rng)
    else:
        duration = rng.uniform(12, 32)
        onset = rng.uniform(0, FRAMES - duration)
        env = _envelope(onset, duration, rng.uniform(1, 4), rng.uniform(1, 5))
        if name in FORMANTS:
            power = env[:, None] * _vowel(name, rng)[None, :]
        else:
            u = _unit((_FRAME_TIMES - onset) / duration)
            power = env[:, None] * _tone_event(name, u, rng)
        power = power * np.exp(rng.normal(0.0, 0.15, (FRAMES, MEL_BINS)))  # interference with the noise
    return power / power.max()


def _blip(rng: np.random.Generator) -> np.ndarray:
    """A short, steady distractor tone somewhere in the clip."""
    duration = rng.uniform(2, 5)
    env = _envelope(rng.uniform(-1, FRAMES - 1), duration, 1.0, 1.0)
    pitch = np.array([rng.uniform(np.log2(300.0), np.log2(4000.0))])
    return env[:, None] * _harmonic_lines(pitch, rng)


def _hum(rng: np.random.Generator) -> np.ndarray:
    """Mains hum: 50 or 60 Hz and its first harmonics, steady over the whole clip (lowest bins)."""
    mains = 50.0 if rng.uniform() < 0.5 else 60.0
    f = mains * np.arange(1, 6)
    spectrum = (np.array([1.0, 0.6, 0.4, 0.25, 0.15])[:, None]
                * np.exp(-0.5 * ((_BINS[None, :] - hz_to_bin(f)[:, None]) / LINE_WIDTH) ** 2)).sum(0)
    return np.repeat(spectrum[None, :], FRAMES, axis=0)


def render(split: str, index: int) -> tuple[np.ndarray, int]:
    """Sample `index` of `split`: (features float32 [FRAMES, MEL_BINS], label)."""
    index = _check(split, index)
    label = label_of(split, index)
    rng = np.random.default_rng(_seed(split, index))
    snr = rng.uniform(*SNR_DB)
    power = _db(snr) * _event(label, rng)
    if rng.uniform() < HUM_PROBABILITY:
        power += _db(rng.uniform(*HUM_DB)) * _hum(rng)
    for _ in range(int(rng.integers(0, MAX_BLIPS + 1))):
        power += _db(snr - rng.uniform(*BLIP_BELOW_DB)) * _blip(rng)
    floor = _db(rng.uniform(*NOISE_TILT_DB) * (_BINS / (MEL_BINS - 1) - 0.5))
    power = (power + _fluctuating(floor[None, :], rng)) * _db(rng.uniform(*GAIN_DB))
    features = (10.0 * np.log10(power + FLOOR_POWER) - FEATURE_MEAN_DB) / FEATURE_SCALE_DB
    features = np.minimum(np.maximum(features, -FEATURE_CLIP), FEATURE_CLIP)
    # On a 1/1024 grid (0.01 dB): last-ulp differences between machines' exp/log/sin implementations
    # (numpy's SIMD paths vary by CPU) then practically never reach the float32 features.
    return (np.round(features * FEATURE_GRID) / FEATURE_GRID).astype(np.float32), label


class CommandsDataset:
    """One split: `ds[i]` -> (features [FRAMES, MEL_BINS] float32, label); `batches` for evaluation loops."""

    def __init__(self, split: str = "heldout", count: int | None = None) -> None:
        if split not in SPLITS:
            raise _bad(f"commands data set: unknown split {split!r} (expected one of {', '.join(SPLITS)})")
        if count is not None:
            try:
                count = operator.index(count)
            except TypeError:
                raise _bad(f"commands data set: count {count!r} is not an integer") from None
            if count < 0:
                raise _bad(f"commands data set: count {count} is negative")
        self.split = split
        self.count = SPLITS[split] if count is None else min(count, SPLITS[split])
        self.classes = CLASSES

    def __len__(self) -> int:
        return self.count

    def _in_range(self, index) -> int:
        index = _check(self.split, index)
        if index >= self.count:
            raise _bad(f"commands data set: index {index} is past this {self.split} subset's {self.count} samples")
        return index

    def label(self, index: int) -> int:
        return label_of(self.split, self._in_range(index))

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        return render(self.split, self._in_range(index))

    def __iter__(self) -> Iterator[tuple[np.ndarray, int]]:
        return (self[i] for i in range(self.count))

    def batches(self, batch_size: int = 32, start: int = 0,
                stop: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(features [N, FRAMES, MEL_BINS], labels [N] int64) for indices start..stop-1."""
        if batch_size < 1:
            raise _bad(f"commands data set: batch size {batch_size} must be positive")
        stop = self.count if stop is None else min(stop, self.count)
        for b in range(start, stop, batch_size):
            items = [self[i] for i in range(b, min(b + batch_size, stop))]
            yield np.stack([x for x, _ in items]), np.array([lb for _, lb in items], np.int64)
