"""The benchmark loop: every selected model on every selected driver, in every selected mode.

Per case (model x driver x mode): check what the driver supports (a driver that cannot run the whole
model is `unsupported`, and, with partitioning allowed, also runs partitioned with nnapi-reference
taking the rest), compile (timed without cache; where a driver caches, also timed saving to an empty
cache and preparing from it, with the cache's size), time inferences under the run-length rules,
then score the driver's outputs on held-out images against the nnapi-reference outputs (computed
once per model and cached in the run directory) and against the labels. Each finished case is
appended to results.jsonl at once, so a killed run keeps it; a case that fails becomes an `error`
record and the run goes on. The cases of one model are model_run.ModelRun; this module selects,
configures and drives them (with the later passes over cases timed in slices).
"""
from __future__ import annotations

import math
import os
import re
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence, TextIO

from mlts.runtime import MltsError, Preference, ResultCode
from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

from .case_info import driver_times, partition_info  # noqa: F401  (re-exported: mlts.benchmark.runner.driver_times)
from ..fileio import WriteError, atomic_write, write_error
from ..signals import signal_name
# Re-exported: tests and tools reach these through mlts.benchmark.runner.
from .inference import (HELDOUT_SPLIT, TIMING_IMAGE_INDEX, HeldOutImages, Inference as _Inference,  # noqa: F401
                        model_inputs, stage as _stage)
from .model_run import REFERENCE_DIR, ModelRun, PendingCase  # noqa: F401
from .model_run import ModelRun as _ModelRun  # noqa: F401
from .progress import Progress, RssSampler
from .records import MODES, ResultsWriter, case_key, read_results, to_jsonable, utc_now
from .stats import DEFAULT, QUICK, RunLengthRules
from .threads import DEFAULT_THREADS, ThreadPinning, parse_threads

#: The default run: the MobileNets at their default size (width 1.0, 224x224), float and uint8.
DEFAULT_MODELS = ("mobilenet_v1_1.0_224", "mobilenet_v1_1.0_224_quant",
                  "mobilenet_v2_1.0_224", "mobilenet_v2_1.0_224_quant")
#: `--quick`: the smallest v1 and v2, float and uint8.
QUICK_MODELS = ("mobilenet_v1_0.25_128", "mobilenet_v1_0.25_128_quant",
                "mobilenet_v2_0.35_128", "mobilenet_v2_0.35_128_quant")
DEFAULT_IMAGES = 100
QUICK_IMAGES = 20
RUN_FILE = "run.json"
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


# --- the run -----------------------------------------------------------------------------------

@dataclass
class RunSummary:
    run_dir: Path
    cases: int = 0
    records_written: int = 0
    resumed_records: int = 0
    counts: dict = field(default_factory=lambda: {"ok": 0, "unsupported": 0, "error": 0})
    skipped_models: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    peak_rss_bytes: int | None = None
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    #: "SIGINT" (Ctrl-C) or "SIGTERM" when interrupted
    interrupted_by: str | None = None

    def to_dict(self) -> dict:
        return to_jsonable(asdict(self))


class BenchmarkRunner:
    """Runs a BenchmarkConfig into a run directory (resuming the cases it already finished)."""

    def __init__(self, config: BenchmarkConfig, run_dir: str | os.PathLike, *, stream: TextIO | None = None,
                 retry_errors: bool = False, driver_specs: Sequence[str] = ()) -> None:
        self.config = config
        self.driver_specs = list(driver_specs)
        self.run_dir = Path(run_dir)
        self.stream = stream
        self.retry_errors = retry_errors
        self.images = HeldOutImages(config.images)
        self.preference = parse_preference(config.preference)
        self.previous_status: dict[tuple, str | None] = {}
        self.pinning: ThreadPinning | None = None
        #: cases whose later slices (--repeat) are still to come, in the order they were first timed
        self.pending: list[PendingCase] = []

    def _later_passes(self, progress: Progress) -> None:
        """Passes 2..N over every pending case, one slice each, then their records: a few seconds of contention
        on a shared machine touch one slice of a case, not all of it. Interrupted, pending cases are not
        written (a resumed run times them again)."""
        for k in range(2, self.config.repeat + 1):
            if self.pending:
                progress.log(f"pass {k} of {self.config.repeat}: slice {k} of {len(self.pending)} case(s)")
            for case in self.pending:
                case.model_run.time_slice(case, k)
        while self.pending:
            case = self.pending.pop(0)
            case.model_run.finish(case)

    def model_run(self, *args: Any) -> ModelRun:
        """The cases of one model (name, writer, progress, sampler, summary); paired.PairedRunner pairs them."""
        return ModelRun(self, *args)

    # -- bookkeeping --
    def _write_run_file(self, summary: RunSummary, started: str, finished: str | None) -> None:
        import json

        doc = {"config": self.config.to_dict(), "rules": self.config.rules.describe(),
               "driver_specs": self.driver_specs, "started": started, "finished": finished,
               "interrupted": summary.interrupted, "interrupted_by": summary.interrupted_by,
               "summary": summary.to_dict()}
        try:
            atomic_write(self.run_dir / RUN_FILE, json.dumps(to_jsonable(doc), indent=2) + "\n")
        except OSError as e:
            raise write_error(self.run_dir / RUN_FILE, e) from None

    def run(self) -> RunSummary:
        from mlts.models.zoo_registry import get_entry

        cfg = self.config
        summary = RunSummary(self.run_dir)
        started = utc_now()
        t0 = time.monotonic()
        available = []
        for name in cfg.models:
            entry = get_entry(name)
            if entry.available:
                available.append(name)
            else:
                why = f"no trained weights ({entry.weights_path.name} is missing; run tools/train_zoo.py)"
                summary.skipped_models[name] = why
        summary.cases = len(available) * len(cfg.drivers) * len(cfg.modes)
        progress = Progress(summary.cases, self.stream)
        for name, why in summary.skipped_models.items():
            progress.log(f"skipping {name}: {why}")
        sampler = RssSampler().start()
        writer = ResultsWriter(self.run_dir, retry_errors=self.retry_errors)
        summary.resumed_records = writer.existing
        if writer.existing:
            self.previous_status = {case_key(r): r.get("status")
                                    for r in read_results(self.run_dir).benchmark_records()}
        summary.notes.extend(writer.notes)
        for note in writer.notes:
            progress.log(note)
        self._write_run_file(summary, started, None)
        progress.log(f"{summary.cases} case(s): {len(available)} model(s) x {len(cfg.drivers)} driver(s) "
                     f"x {len(cfg.modes)} mode(s); {cfg.images} held-out image(s) for accuracy; "
                     f"rules {cfg.rules.describe()}"
                     + (f"; each case timed in {cfg.repeat} slices, one per pass over every case" if cfg.repeat > 1 else ""))
        ended = False  # True unless an error (a results file that cannot be written) is on its way out
        try:
            with ThreadPinning(cfg.threads) as self.pinning:
                for name in available:
                    self.model_run(name, writer, progress, sampler, summary).run()
                self._later_passes(progress)
            ended = True
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM through mlts.signals
            summary.interrupted = True
            summary.interrupted_by = signal_name(getattr(e, "signum", signal.SIGINT))
            progress.log(f"interrupted ({summary.interrupted_by}): every finished case is kept in "
                         "results.jsonl (rerun with --resume)")
            ended = True
        finally:
            writer.close()
            sampler.stop()
            summary.elapsed_s = time.monotonic() - t0
            summary.peak_rss_bytes = sampler.peak or None
            try:
                self._write_run_file(summary, started, utc_now() if ended and not summary.interrupted else None)
            except WriteError:
                if ended:
                    raise  # else the error already on its way says what failed first
        return summary


def run_benchmark_config(config: BenchmarkConfig, run_dir: str | os.PathLike, *, stream: TextIO | None = None,
                         retry_errors: bool = False) -> RunSummary:
    """Run `config` into `run_dir` (created if needed): results.jsonl, run.json and the reference cache."""
    return BenchmarkRunner(config, run_dir, stream=stream, retry_errors=retry_errors).run()
