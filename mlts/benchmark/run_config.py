"""What a benchmark run measures: the model, driver, mode and preference selection (names or regular
expressions), the presets, and BenchmarkConfig, which is recorded in run.json and in every record."""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

from mlts.runtime import MltsError, Preference, ResultCode
from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

from .record_schema import MODES
from .stats import DEFAULT, QUICK, RunLengthRules
from .threads import DEFAULT_THREADS, parse_threads

#: The default run: the MobileNets at their default size (width 1.0, 224x224), float and uint8, and MLTS's other
#: workloads: the LSTM sequence classifier (float, int8) and the SSD-lite detector (float, uint8).
DEFAULT_MODELS = ("mobilenet_v1_1.0_224", "mobilenet_v1_1.0_224_quant",
                  "mobilenet_v2_1.0_224", "mobilenet_v2_1.0_224_quant",
                  "lstm_commands", "lstm_commands_quant_int8",
                  "ssdlite_mobilenet_v2_0.5_160", "ssdlite_mobilenet_v2_0.5_160_quant")
#: `--quick`: the smallest v1 and v2, float and uint8.
QUICK_MODELS = ("mobilenet_v1_0.25_128", "mobilenet_v1_0.25_128_quant",
                "mobilenet_v2_0.35_128", "mobilenet_v2_0.35_128_quant")
DEFAULT_IMAGES = 100
QUICK_IMAGES = 20
PRESET_RULES = {"quick": QUICK, "default": DEFAULT}
DEFAULT_TIMEOUT_S = 120.0
MAX_REPEAT = 100
#: `mlts benchmark`'s slices per case unless --repeat says otherwise (BenchmarkConfig's own default is 1).
DEFAULT_REPEAT = 3


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


# --- selection ---------------------------------------------------------------------------------

def _split_patterns(patterns: str | Iterable[str] | None) -> list[str]:
    if patterns is None:
        return []
    if isinstance(patterns, str):
        patterns = [patterns]
    return [p.strip() for item in patterns for p in str(item).split(",") if p.strip()]


def _match(patterns: list[str], names: Sequence[str], what: str, listing: str) -> list[str]:
    """Names chosen by exact names or regular expressions (whole-name match), in `names` order."""
    chosen: set[str] = set()
    for p in patterns:
        if p in names:
            chosen.add(p)
            continue
        try:
            rx = re.compile(p)
        except re.error as e:
            raise _bad(f"{what} {p!r} is neither a known name nor a valid regular expression ({e})") from None
        hits = [n for n in names if rx.fullmatch(n)]
        if not hits:
            raise _bad(f"no {what} matches {p!r} ({listing}: {', '.join(names)})")
        chosen.update(hits)
    return [n for n in names if n in chosen]


def select_models(patterns: str | Iterable[str] | None = None, *, quick: bool = False) -> list[str]:
    """Zoo model names from names or regexes; none given: the quick or the default set."""
    from mlts.models.zoo_registry import zoo

    pats = _split_patterns(patterns)
    if not pats:
        return list(QUICK_MODELS if quick else DEFAULT_MODELS)
    return _match(pats, [e.name for e in zoo()], "model", "the zoo has")


def select_drivers(patterns: str | Iterable[str] | None = None, *, reference: bool = True) -> list[str]:
    """Device names from names or regexes (none given: every device); nnapi-reference first as the
    baseline row, added to any selection unless `reference` is False."""
    from mlts.runtime import devices

    names = [d.name for d in devices()]
    pats = _split_patterns(patterns)
    chosen = _match(pats, names, "driver", "available devices") if pats else list(names)
    chosen = [n for n in chosen if n != REFERENCE_DEVICE_NAME]
    if reference:
        chosen.insert(0, REFERENCE_DEVICE_NAME)
    if not chosen:
        raise _bad("no driver selected (nnapi-reference is excluded by --no-reference)")
    return chosen


def parse_modes(modes: str | Iterable[str] | None) -> list[str]:
    items = _split_patterns(modes) or ["sync"]
    out: list[str] = []
    for m in items:
        if m not in MODES:
            raise _bad(f"unknown mode {m!r} (choose from {', '.join(MODES)})")
        if m not in out:
            out.append(m)
    return out


def parse_preference(name: str | Preference | None) -> Preference:
    if name is None:
        return Preference.FAST_SINGLE_ANSWER
    if isinstance(name, Preference):
        return name
    key = str(name).strip().upper().replace("-", "_")
    try:
        return Preference[key]
    except KeyError:
        choices = ", ".join(p.name.lower().replace("_", "-") for p in Preference)
        raise _bad(f"unknown preference {name!r} (choose from {choices})") from None


# --- configuration -----------------------------------------------------------------------------

@dataclass
class BenchmarkConfig:
    """Everything that decides what a run measures; recorded in run.json and in every record."""

    models: list[str]
    drivers: list[str]
    modes: list[str] = field(default_factory=lambda: ["sync"])
    preference: str = "FAST_SINGLE_ANSWER"
    rules: RunLengthRules = DEFAULT
    images: int = DEFAULT_IMAGES
    partition: bool = True
    reference_row: bool = True
    measure_timing: bool = True
    compile_with_cache: bool = True
    preset: str = "default"
    #: Deadline of each compilation and inference on a single device (NNAPI allows none on several), so a
    #: hanging driver service is given up on and the run goes on; None: no deadline.
    timeout_s: float | None = DEFAULT_TIMEOUT_S
    #: Threads of every BLAS, OpenMP and numba pool during the run (threads.ThreadPinning).
    threads: int = DEFAULT_THREADS
    #: Slices per case (`--repeat N`): pass 1 measures every case and times its first slice, passes 2..N time one
    #: more slice each (warm-up, timed runs, under rules.sliced(N)); the record keeps each slice's sample
    #: count (`latency.repetition_counts`), whose spread `mlts compare` feeds into its decision.
    repeat: int = 1
    #: Paired A/B runs (paired.PairedRunner): [baseline, candidate], the run's drivers, timed in alternation.
    ab: list[str] | None = None

    def __post_init__(self) -> None:
        self.threads = parse_threads(self.threads, "threads")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or not 1 <= self.repeat <= MAX_REPEAT:
            raise _bad(f"repeat must be an integer from 1 to {MAX_REPEAT}, got {self.repeat!r}")
        if self.timeout_s is not None and (isinstance(self.timeout_s, bool)
                                           or not isinstance(self.timeout_s, (int, float))
                                           or not math.isfinite(self.timeout_s) or self.timeout_s <= 0):
            raise _bad(f"timeout must be a number of seconds > 0, got {self.timeout_s!r}")
        if isinstance(self.images, bool) or not isinstance(self.images, int) or not 0 <= self.images <= 1500:
            raise _bad(f"images must be an integer from 0 to 1500 (the held-out set), got {self.images!r}")
        self.modes = parse_modes(self.modes)
        self.preference = parse_preference(self.preference).name
        if not self.models:
            raise _bad("no model selected")
        if not self.drivers:
            raise _bad("no driver selected")
        if self.ab is not None:
            if (not isinstance(self.ab, (list, tuple)) or len(self.ab) != 2 or self.ab[0] == self.ab[1]
                    or not all(isinstance(n, str) for n in self.ab)):
                raise _bad(f"ab must name two different drivers [baseline, candidate], got {self.ab!r}")
            self.ab = list(self.ab)
            if self.drivers != self.ab:
                raise _bad(f"a paired run's drivers are its ab pair {self.ab}, got {self.drivers}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["rules"] = self.rules.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BenchmarkConfig":
        values = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        if "rules" in values:
            values["rules"] = RunLengthRules.from_dict(values["rules"])
        return cls(**values)

    def record_config(self) -> dict:
        """The per-record copy: what this case ran under (the selection lists live in run.json)."""
        return {"preset": self.preset, "rules": self.rules.to_dict(), "images": self.images,
                "partition": self.partition, "measure_timing": self.measure_timing, "timeout_s": self.timeout_s,
                "repeat": self.repeat, "ab": self.ab, "reference_device": REFERENCE_DEVICE_NAME}
