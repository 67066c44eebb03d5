"""The benchmark loop: every selected model on every selected driver, in every selected mode.

Per case (model x driver x mode): check what the driver supports (a driver that cannot run the whole
model is `unsupported`, and, with partitioning allowed, also runs partitioned with nnapi-reference
taking the rest), compile (timed without cache; where a driver caches, also timed saving to an empty
cache and preparing from it, with the cache's size), time inferences under the run-length rules,
then score the driver's outputs on held-out images against the nnapi-reference outputs (computed
once per model and cached in the run directory) and against the labels. Each finished case is
appended to results.jsonl at once, so a killed run keeps it; a case that fails becomes an `error`
record and the run goes on.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TextIO

import numpy as np

from mlts.runtime import Burst, Compilation, Execution, MltsError, OperandCode, Preference, ResultCode
from mlts.runtime.compilation_cache import cache_files_needed, cache_size_bytes
from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

from .accuracy import AccuracyAccumulator
from .case_info import driver_times, partition_info  # noqa: F401  (re-exported: mlts.benchmark.runner.driver_times)
from .conditions import CaseWindow, busy_note
from ..fileio import WriteError, atomic_write, write_error
from ..signals import signal_name
from .progress import Progress, RssSampler
from .records import MODES, BenchmarkRecord, ResultsWriter, case_key, read_results, to_jsonable, utc_now
from .stage_timeout import (CaseError as _CaseError, StageTimeout, Tick, Watchdog, error_text as _error_text,
                            inference_waiting_on, runs_waiting_on)
from .stats import DEFAULT, QUICK, Measurement, RunLengthRules, measure
from .threads import DEFAULT_THREADS, PinnedWatchdog, ThreadPinning, parse_threads

#: The default run: the MobileNets at their default size (width 1.0, 224x224), float and uint8.
DEFAULT_MODELS = ("mobilenet_v1_1.0_224", "mobilenet_v1_1.0_224_quant",
                  "mobilenet_v2_1.0_224", "mobilenet_v2_1.0_224_quant")
#: `--quick`: the smallest v1 and v2, float and uint8.
QUICK_MODELS = ("mobilenet_v1_0.25_128", "mobilenet_v1_0.25_128_quant",
                "mobilenet_v2_0.35_128", "mobilenet_v2_0.35_128_quant")
DEFAULT_IMAGES = 100
QUICK_IMAGES = 20
HELDOUT_SPLIT = "heldout"
#: The held-out image whose input every timed inference uses.
TIMING_IMAGE_INDEX = 0
REFERENCE_DIR = "reference"
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


# --- helpers -----------------------------------------------------------------------------------

def _digest(arrays: Iterable[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _file_digest(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()[:16]
    except OSError:
        return None


def _stage(stage: str, fn: Callable[[], Any]) -> Any:
    """A stage that calls no driver (loading, rendering images): unbounded, in this thread."""
    return Watchdog(None).run(stage, lambda _tick: fn())


class HeldOutImages:
    """The first N held-out images per resolution, rendered once for every model of that size."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def get(self, resolution: int) -> tuple[np.ndarray, np.ndarray]:
        """(images NxHxWx3 uint8, labels N); image TIMING_IMAGE_INDEX is rendered even when N is 0."""
        if resolution not in self._cache:
            from mlts.datasets.shapes import ShapesDataset

            ds = ShapesDataset(HELDOUT_SPLIT, resolution)
            n = max(self.count, TIMING_IMAGE_INDEX + 1)
            items = [ds[i] for i in range(n)]
            self._cache[resolution] = (np.stack([im for im, _ in items]),
                                       np.array([lb for _, lb in items], np.int64))
        return self._cache[resolution]


def model_inputs(imported: Any, images: np.ndarray) -> list[np.ndarray]:
    """Each image as the model's input 0: float NCHW in [-1, 1], or quantized with the input operand's
    own scale and zero point."""
    from mlts.datasets.preprocess import to_float_input, to_quant_input

    model = imported.model
    t = model.operand_type(model.inputs[0])
    if t.code == OperandCode.TENSOR_FLOAT32:
        return [to_float_input(images[i]) for i in range(len(images))]
    if t.code in (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED):
        return [to_quant_input(images[i], scale=t.scale, zero_point=t.zero_point, dtype=t.dtype)
                for i in range(len(images))]
    raise _bad(f"{imported.name}: input type {t.describe()} is not an image input this benchmark can feed")


class _Inference:
    """One inference per call in the case's mode: a new Execution each time (as MLTS does), outputs
    into one preallocated buffer; returns the Execution so timings are read off the timed path."""

    def __init__(self, compilation: Compilation, mode: str, measure_timing: bool,
                 timeout_s: float | None = None) -> None:
        self.compilation = compilation
        self.mode = mode
        self.measure_timing = measure_timing and compilation.is_single_explicit_device
        single = compilation.is_single_explicit_device
        self.timeout_ns = int(timeout_s * 1e9) if (timeout_s and single) else None
        model = compilation.model
        t = model.inferred_operand_type(model.outputs[0])
        self.out = np.empty(t.dimensions, t.dtype) if t.is_tensor and t.is_fully_specified else None
        self.burst = Burst(compilation) if mode == "burst" else None

    def __call__(self, x: np.ndarray) -> Execution:
        ex = Execution(self.compilation)
        ex.set_input(0, x)
        if self.out is not None:
            ex.set_output(0, self.out)
        if self.measure_timing:
            ex.set_measure_timing(True)
        if self.timeout_ns is not None:
            ex.set_timeout(self.timeout_ns)
        if self.mode == "sync":
            ex.compute()
        elif self.mode == "burst":
            ex.burst_compute(self.burst)
        else:
            ex.start_compute().wait()
        return ex

    def output(self, ex: Execution) -> np.ndarray:
        return self.out.copy() if self.out is not None else np.array(ex.get_output(0))

    def close(self) -> None:
        if self.burst is not None:
            self.burst.close()


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
        self.pending: list[_PendingCase] = []

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

    def model_run(self, *args: Any) -> "_ModelRun":
        """The cases of one model (name, writer, progress, sampler, summary); paired.PairedRunner pairs them."""
        return _ModelRun(self, *args)

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


@dataclass(eq=False)
class _PendingCase:
    """A case timed in slices (--repeat N): measured and scored in pass 1, written after its last slice."""

    model_run: "_ModelRun"
    rec: BenchmarkRecord
    infer: "_Inference"
    devices: list
    mode: str
    m: Measurement
    label: str = ""
    stuck: bool = False


class _ModelRun:
    """The cases of one model: loaded once, its reference outputs computed once."""

    def __init__(self, runner: BenchmarkRunner, name: str, writer: ResultsWriter, progress: Progress,
                 sampler: RssSampler, summary: RunSummary) -> None:
        self.runner = runner
        self.cfg = runner.config
        self.name = name
        self.writer = writer
        self.progress = progress
        self.sampler = sampler
        self.summary = summary
        self.watchdog = PinnedWatchdog(self.cfg.timeout_s, runner.pinning)
        self._windows: dict[int, CaseWindow] = {}  # id(record) -> its conditions, from _record to _write
        self.imported = None
        self.model_info: dict = {}
        self.seeds: dict = {}
        self.inputs: list[np.ndarray] = []
        self.timing_input: np.ndarray | None = None
        self.labels: np.ndarray | None = None
        self._reference: np.ndarray | None = None
        self._reference_error: str | None = None

    # -- keys and records --
    def _key(self, driver: str, mode: str) -> tuple:
        return (self.name, driver, mode, self.cfg.preference)

    def _record(self, driver: str, mode: str, devices: list[str]) -> BenchmarkRecord:
        """A new case's record; the case's conditions are watched from now until it is written."""
        rec = BenchmarkRecord(model=self.name, driver=driver, mode=mode, preference=self.cfg.preference,
                              devices=devices, model_info=dict(self.model_info), seeds=dict(self.seeds),
                              config=self.cfg.record_config())
        self._windows[id(rec)] = CaseWindow(self.cfg.threads)
        return rec

    def _write(self, rec: BenchmarkRecord, label: str, counted: bool = True) -> None:
        rec.peak_rss_bytes = self.sampler.case_peak()
        window = self._windows.pop(id(rec), None)
        if window is not None:
            rec.extra["conditions"] = window.finish()
        self.writer.write(rec)
        self.summary.records_written += 1
        self.summary.counts[rec.status] = self.summary.counts.get(rec.status, 0) + 1
        if rec.status == "ok":
            lat = rec.latency.to_dict() if hasattr(rec.latency, "to_dict") else rec.latency
            outcome = f"ok, p50 {lat['p50_ms']:.2f} ms"
            acc = rec.accuracy or {}
            if acc.get("top1_accuracy") is not None:
                outcome += f", top-1 {acc['top1_accuracy']:.0%}"
            if acc.get("top1_agreement") is not None:
                outcome += f", agrees with reference {acc['top1_agreement']:.0%}"
                outcome += ", CTS pass" if acc.get("cts_pass") else ", CTS FAIL"
        elif rec.status == "unsupported":
            outcome = f"unsupported ({len(rec.unsupported_ops)} operation type(s) missing)"
        else:
            outcome = f"error: {rec.message}"
        note = busy_note(rec.extra.get("conditions"))
        self.progress.case_done(label, f"{outcome}; {note}" if note else outcome, counted)

    # -- model --
    def _pending(self) -> list[tuple[str, str]]:
        """Cases not finished by an earlier run of this directory; an unsupported case whose
        partitioned run was cut off is not finished."""
        pending = []
        for d in self.cfg.drivers:
            for m in self.cfg.modes:
                key = self._key(d, m)
                if not self.writer.is_done(key):
                    pending.append((d, m))
                elif (self.cfg.partition and self.runner.previous_status.get(key) == "unsupported"
                      and d != REFERENCE_DEVICE_NAME
                      and not self.writer.is_done(self._key(f"{d}+{REFERENCE_DEVICE_NAME}", m))):
                    pending.append((d, m))
        return pending

    def run(self) -> None:
        pending = self._pending()
        skipped = len(self.cfg.drivers) * len(self.cfg.modes) - len(pending)
        if skipped:
            self.progress.done += skipped
            self.progress.resumed += skipped
            self.progress.log(f"{self.name}: {skipped} case(s) already done (resumed)")
        if not pending:
            return
        try:
            self._load()
        except _CaseError as e:
            for driver, mode in pending:
                rec = self._record(driver, mode, [driver])
                rec.status, rec.message = "error", str(e)
                self._write(rec, f"{self.name} | {driver} | {mode}")
            return
        for driver, mode in pending:
            self._run_case(driver, mode)
        self.imported = None

    def _load(self) -> None:
        from mlts.models.zoo_registry import get_entry, load, onnx_path

        entry = get_entry(self.name)
        t = time.perf_counter()
        self.imported = _stage("loading the model", lambda: load(self.name))
        load_s = time.perf_counter() - t
        model = self.imported.model
        in_t = model.operand_type(model.inputs[0])
        out_t = model.inferred_operand_type(model.outputs[0])
        images, labels = _stage("rendering the held-out images", lambda: self.runner.images.get(entry.resolution))
        all_inputs = _stage("preprocessing the images", lambda: model_inputs(self.imported, images))
        self.timing_input = all_inputs[TIMING_IMAGE_INDEX]
        self.inputs = all_inputs[:self.cfg.images]
        self.labels = labels[:self.cfg.images]
        self.model_info = {
            "family": entry.family, "width": entry.alpha, "resolution": entry.resolution,
            "quantization": entry.quantization or "float32", "parameters": entry.parameters, "macs": entry.macs,
            "operations": model.operation_count, "input": in_t.describe(), "output": out_t.describe(),
            "relaxed": bool(model.relaxed), "onnx_sha256": _file_digest(onnx_path(self.name)),
            "weights_sha256": _file_digest(entry.weights_path), "load_s": load_s,
        }
        self.seeds = {
            "dataset": f"shapes/{HELDOUT_SPLIT}", "images": [0, len(self.inputs)],
            "image_seed": f"sha256('mlts-shapes/{HELDOUT_SPLIT}/<index>/')",
            "timing_image": TIMING_IMAGE_INDEX, "timing_input_sha256": _digest([self.timing_input]),
            "accuracy_inputs_sha256": _digest(self.inputs) if self.inputs else None,
        }
        if entry.quantization is not None:
            from mlts.models import zoo_registry as zoo_module

            self.seeds["calibration"] = {"split": "calibration", "images": zoo_module.CALIBRATION_IMAGES}

    # -- reference outputs --
    def _reference_path(self) -> Path:
        return self.runner.run_dir / REFERENCE_DIR / f"{self.name}.npz"

    def reference_outputs(self) -> np.ndarray | None:
        """nnapi-reference's outputs on the accuracy images: computed once, kept in the run directory.
        A failure leaves accuracy scored against the labels only; a timeout (StageTimeout) also fails
        the case that was waiting for them, and later cases of the model do not wait again."""
        if self._reference is not None or self._reference_error is not None or not self.inputs:
            return self._reference
        digest = self.seeds.get("accuracy_inputs_sha256")
        path = self._reference_path()
        if path.is_file():
            try:
                with np.load(path) as data:
                    if (str(data["inputs_sha256"]) == digest
                            and str(data["onnx_sha256"]) == str(self.model_info.get("onnx_sha256"))):
                        self._reference = data["outputs"]
                        return self._reference
            except (OSError, KeyError, ValueError):
                pass  # unreadable (a killed run): compute again
        from mlts.runtime import get_device

        def compute(tick: Tick) -> np.ndarray:
            c = Compilation.for_devices(self.imported.model, [get_device(REFERENCE_DEVICE_NAME)])
            c.set_preference(self.runner.preference)
            c.finish()
            tick()
            infer = _Inference(c, "sync", False)
            outputs = []
            for x in self.inputs:
                outputs.append(infer.output(infer(x)))
                tick()
            return np.stack(outputs)

        try:
            self._reference = self.watchdog.run(
                "computing nnapi-reference's outputs for accuracy", compute,
                waiting_on=lambda units, _s: "the compilation" if units == 0
                else f"image {units} of {len(self.inputs)}")
        except StageTimeout as e:
            self._reference_error = f"reference outputs: {e}"
            raise
        except _CaseError as e:
            self._reference_error = f"reference outputs: {_error_text(e.cause)}"
            self.progress.log(f"{self.name}: {self._reference_error}; accuracy is scored against labels only")
            return None
        self._save_reference(path, digest)
        return self._reference

    def _save_reference(self, path: Path, digest: str | None) -> None:
        """Keep the reference outputs for a resumed run; best effort (they are also in memory)."""
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
            with os.fdopen(fd, "wb") as f:
                np.savez(f, outputs=self._reference, inputs_sha256=np.array(digest),
                         onnx_sha256=np.array(str(self.model_info.get("onnx_sha256"))))
            os.replace(tmp, path)
        except OSError as e:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            self.progress.log(f"{self.name}: cannot keep the reference outputs in {path} "
                              f"({e.strerror or e}); a resumed run computes them again")

    # -- one case --
    def _run_case(self, driver: str, mode: str) -> None:
        from mlts.runtime import get_device

        label = f"{self.name} | {driver} | {mode}"
        key = self._key(driver, mode)
        rec = self._record(driver, mode, [driver])
        try:
            device = _stage("finding the device", lambda: get_device(driver))
            flags = self.watchdog.run(
                "asking for the supported operations",
                lambda _tick: self.imported.model.get_supported_operations_for_devices([device]), [device])
        except _CaseError as e:
            rec.status, rec.message = "error", str(e)
            self._write(rec, label)
            return
        ops = self.imported.model.operations()
        missing = [(j, code.name) for j, ((code, _, _), ok) in enumerate(zip(ops, flags)) if not ok]
        if not missing:
            self._settle(rec, label, self._measure_case(rec, [device], mode))
            return
        types = sorted({name for _, name in missing})
        support = {"supported_operations": len(ops) - len(missing), "total_operations": len(ops),
                   "unsupported_operations": [f"{j}:{name}" for j, name in missing]}
        rec.status = "unsupported"
        rec.unsupported_ops = types
        rec.extra["support"] = support
        rec.message = (f"{driver} supports {len(ops) - len(missing)} of {len(ops)} operations; "
                       f"it lacks {', '.join(types)}")
        partitioned = self.cfg.partition and driver != REFERENCE_DEVICE_NAME and len(missing) < len(ops)
        pname = f"{driver}+{REFERENCE_DEVICE_NAME}"
        if partitioned:
            rec.message += f"; also run partitioned as {pname} (nnapi-reference takes the rest)"
        elif not self.cfg.partition:
            rec.message += "; partitioning is off (--no-partition)"
        elif driver != REFERENCE_DEVICE_NAME:
            rec.message += "; with no operation to take, there is nothing to partition"
        plabel = f"{self.name} | {pname} | {mode}"
        if not self.writer.is_done(key):
            self._write(rec, label, counted=not partitioned)
        if not partitioned:
            return
        if self.writer.is_done(self._key(pname, mode)):
            self.progress.resumed += 1
            self.progress.case_done(plabel, "already done (resumed)")
            return
        prec = self._record(pname, mode, [driver, REFERENCE_DEVICE_NAME])
        prec.extra["partitioned"] = {"driver": driver, "with": REFERENCE_DEVICE_NAME, **support}
        pending = None
        try:
            ref = _stage("finding the device", lambda: get_device(REFERENCE_DEVICE_NAME))
            pending = self._measure_case(prec, [device, ref], mode)
        except _CaseError as e:  # the reference device itself went away
            prec.status, prec.message = "error", str(e)
        self._settle(prec, plabel, pending)

    def _compile(self, devices: list, cache: tuple[str, bytes] | None = None) -> tuple[Compilation, float]:
        t = time.perf_counter()
        c = Compilation.for_devices(self.imported.model, devices)
        c.set_preference(self.runner.preference)
        if self.cfg.timeout_s and len(devices) == 1:
            c.set_timeout(int(self.cfg.timeout_s * 1e9))
        if cache is not None:
            c.set_caching(*cache)
        c.finish()
        return c, (time.perf_counter() - t) * 1000.0

    def _cache_measurements(self, devices: list, tick: Tick) -> tuple[dict, dict] | None:
        """As MLTS: a compilation that saves to an empty cache, then one that prepares from it, and the
        cache's size; None when no device of the case caches. Returns (compilation_ms fields, cache)."""
        if all(cache_files_needed(d) == (0, 0) for d in devices):
            return None
        token = hashlib.sha256(f"mlts-benchmark/{self.name}/{'+'.join(d.name for d in devices)}".encode()).digest()
        with tempfile.TemporaryDirectory(prefix="mlts-cache-") as d:
            saving, save_ms = self._compile(devices, (d, token))
            tick()
            size = cache_size_bytes(saving.cache_reports)
            loading, load_ms = self._compile(devices, (d, token))
        cache = {"status": loading.cache_status, "saved": saving.cache_status, "size_bytes": size,
                 "prepared_from_cache": loading.cache_status == "prepared-from-cache"}
        return {"save_to_cache": save_ms, "with_cache": load_ms}, cache

    def _measure_case(self, rec: BenchmarkRecord, devices: list, mode: str) -> "_PendingCase | None":
        """Fill `rec` with compilation, latency, driver timing, partition and accuracy; a failing or stalled
        stage makes it an error record keeping what the stages before it measured. With --repeat N > 1 an
        ok case is returned pending: its compilation kept for the later slices."""
        cfg = self.cfg
        guard = self.watchdog
        single = len(devices) == 1  # NNAPI's deadline applies too (_compile, _Inference), and goes first
        infer = None
        stuck = False
        try:
            compilation, compile_ms = guard.run("compiling", lambda _tick: self._compile(devices), devices,
                                                nnapi_deadline=single)
            rec.compilation_ms = {"without_cache": compile_ms, "save_to_cache": None, "with_cache": None}
            rec.partition = partition_info(compilation)
            if cfg.compile_with_cache:
                cached = guard.run("compiling with the cache", lambda tick: self._cache_measurements(devices, tick),
                                   devices, waiting_on=lambda units, _s: ("the compilation saving to the cache",
                                                                          "the compilation from the cache")[units],
                                   nnapi_deadline=single)
                if cached is not None:
                    rec.compilation_ms.update(cached[0])
                    rec.compilation_cache = cached[1]
            infer = guard.run("starting the execution",
                              lambda _tick: _Inference(compilation, mode, cfg.measure_timing, cfg.timeout_s), devices)
            m = self._timed(infer, devices, mode, 1)
            self._fill_latency(rec, m)
            reference = self.reference_outputs() if self.inputs else None
            rec.accuracy = guard.run("scoring accuracy",
                                     lambda tick: self._accuracy(infer, devices, mode, reference, tick), devices,
                                     waiting_on=inference_waiting_on(len(self.inputs), "image"), nnapi_deadline=single)
            if cfg.repeat > 1:  # the other slices come in later passes over every case (BenchmarkRunner.run)
                return _PendingCase(self, rec, infer, devices, mode, m)
        except _CaseError as e:
            rec.status, rec.message = "error", str(e)
            stuck = isinstance(e, StageTimeout) and e.abandoned
        if infer is not None and not stuck:  # never wait on a thread stuck in the driver (nor when interrupted)
            self._close(infer, rec, devices)
        return None

    def _fill_latency(self, rec: BenchmarkRecord, m: Measurement) -> None:
        rec.first_inference_ms = m.first_s * 1000.0 if m.first_s is not None else None
        rec.latency = m.stats()
        rec.run_length = {**m.summary(), "rules": self.cfg.rules.to_dict()}
        if self.cfg.repeat > 1:
            rec.run_length["slice_rules"] = self.slice_rules.to_dict()
        rec.driver_time = driver_times(m.returns)

    @property
    def slice_rules(self) -> RunLengthRules:
        return self.cfg.rules.sliced(self.cfg.repeat)

    def time_slice(self, case: "_PendingCase", k: int) -> None:
        """Slice k of a pending case; a failing or stalled slice makes it an error record (later slices skip it)."""
        if case.rec.status != "ok":
            return
        try:
            case.m.extend(self._timed(case.infer, case.devices, case.mode, k))
        except _CaseError as e:
            case.rec.status, case.rec.message = "error", str(e)
            case.stuck = isinstance(e, StageTimeout) and e.abandoned

    def finish(self, case: "_PendingCase") -> None:
        """A pending case's record from all its slices, written."""
        self._fill_latency(case.rec, case.m)
        if not case.stuck:
            self._close(case.infer, case.rec, case.devices)
        self._write(case.rec, case.label)

    def _settle(self, rec: BenchmarkRecord, label: str, pending: "_PendingCase | None") -> None:
        """Write a finished case now; one with slices to come waits for the later passes."""
        if pending is None:
            self._write(rec, label)
            return
        pending.label = label
        self.runner.pending.append(pending)
        lat = rec.latency.to_dict() if hasattr(rec.latency, "to_dict") else rec.latency
        self.progress.log(f"{label}: slice 1 of {self.cfg.repeat} timed (p50 {lat['p50_ms']:.2f} ms)")

    def _timed(self, infer: _Inference, devices: list, mode: str, k: int) -> Measurement:
        """The warm-up and timed runs of slice k of a case, under the (sliced) run-length rules."""
        x, rules = self.timing_input, self.slice_rules
        of = f", slice {k} of {self.cfg.repeat}" if self.cfg.repeat > 1 else ""

        def timed(tick: Tick) -> Measurement:
            def once() -> Execution:
                ex = infer(x)
                tick()
                return ex
            return measure(once, rules)

        return self.watchdog.run(f"running ({mode}{of})", timed, devices, waiting_on=runs_waiting_on(rules),
                                 nnapi_deadline=len(devices) == 1)

    def _close(self, infer: _Inference, rec: BenchmarkRecord, devices: list) -> None:
        if infer.burst is None:
            return  # nothing to close
        try:
            self.watchdog.run("closing the burst", lambda _tick: infer.close(), devices)
        except _CaseError as e:  # a driver that cannot close a burst is broken, whatever it measured
            if rec.status != "error":
                rec.status, rec.message = "error", str(e)

    def _accuracy(self, infer: _Inference, devices: list, mode: str, reference: np.ndarray | None,
                  tick: Tick) -> dict | None:
        if not self.inputs:
            return None
        shared = (len(devices) == 1 and devices[0].name == REFERENCE_DEVICE_NAME and mode == "sync"
                  and reference is not None)
        acc = AccuracyAccumulator(relaxed=bool(self.imported.model.relaxed))
        for i, x in enumerate(self.inputs):
            out = reference[i] if shared else infer.output(infer(x))
            tick()
            acc.add(out, None if reference is None else reference[i], self.labels[i:i + 1])
        result = acc.result()
        result["images"] = len(self.inputs)
        if shared:
            result["outputs"] = "the reference outputs themselves (nnapi-reference, sync, same compilation options)"
        if self._reference_error:
            result["reference_error"] = self._reference_error
        return result


def run_benchmark_config(config: BenchmarkConfig, run_dir: str | os.PathLike, *, stream: TextIO | None = None,
                         retry_errors: bool = False) -> RunSummary:
    """Run `config` into `run_dir` (created if needed): results.jsonl, run.json and the reference cache."""
    return BenchmarkRunner(config, run_dir, stream=stream, retry_errors=retry_errors).run()
