"""The cases of one model in a benchmark run: loaded once, its nnapi-reference outputs computed once, each
case checked for support, compiled (the first compilation for its devices timed apart: compile_timing),
timed (in slices with --repeat) and scored, and its record written.
`BenchmarkRunner` (runner.py) drives one ModelRun per model and the later passes over pending cases; a
ModelRun sees its runner only as a `RunHost`."""
from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

import numpy as np

from mlts.runtime import Compilation, Execution, Preference
from mlts.runtime.app.compilation_cache import cache_files_needed, cache_size_bytes
from mlts.runtime.drivers.reference import REFERENCE_DEVICE_NAME

from .accuracy import apply_quantized_verdict
from .case_info import driver_times, partition_info
from .compile_timing import FirstCompilations, compile_steady
from .conditions import CaseWindow, busy_note
from .inference import Inference, digest, file_digest, stage
from .op_diff import per_operation_verdict
from .op_profile import PROFILE_RUNS, profile_case
from .progress import Progress, RssSampler, RunSummary
from .record_schema import BenchmarkRecord
from .reference_cache import load_reference, reference_path, save_reference
from .results_writer import ResultsWriter
from .run_config import BenchmarkConfig
from .stage_timeout import (CaseError as _CaseError, StageTimeout, Tick, error_text as _error_text,
                            inference_waiting_on, runs_waiting_on)
from .stats import Measurement, RunLengthRules, measure
from .tasks import HELDOUT_SPLIT, TIMING_INDEX, HeldOutSamples, Task, task_of
from .threads import PinnedWatchdog, ThreadPinning


@dataclass(eq=False)
class PendingCase:
    """A case timed in slices (--repeat N): measured and scored in pass 1, written after its last slice."""

    model_run: "ModelRun"
    rec: BenchmarkRecord
    infer: "Inference"
    devices: list
    mode: str
    m: Measurement
    label: str = ""
    stuck: bool = False


class RunHost(Protocol):
    """What the cases of a model use of the run that drives them (runner.BenchmarkRunner)."""

    config: BenchmarkConfig
    run_dir: Path
    images: HeldOutSamples
    preference: Preference
    #: status of each case an earlier run of this directory wrote, by case key
    previous_status: dict[tuple, str | None]
    pinning: ThreadPinning | None
    #: cases whose later slices (--repeat) are still to come; a ModelRun appends its own
    pending: list[PendingCase]
    #: the (model, devices) compiled so far in the run: the first compilation of each is timed apart
    first_compilations: FirstCompilations


class ModelRun:
    """The cases of one model: loaded once, its reference outputs computed once."""

    def __init__(self, runner: RunHost, name: str, writer: ResultsWriter, progress: Progress,
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
        self.task: Task | None = None
        self.inputs: list[np.ndarray] = []
        self.timing_input: np.ndarray | None = None
        self.truths: list = []  # per accuracy input: its label (classifiers) or (boxes, classes) (detectors)
        self._reference: list[np.ndarray] | None = None  # per model output: every accuracy input's, stacked
        self._reference_error: str | None = None
        self._op_verdicts: dict[tuple, dict] = {}  # device names -> op_diff.per_operation_verdict (mode-free)

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
            if acc.get("map50") is not None:
                outcome += f", mAP@0.5 {acc['map50']:.3f}"
            agreement = acc.get(self.task.agreement_key if self.task else "top1_agreement")
            if agreement is not None:
                outcome += f", agrees with reference {agreement:.0%}"
                outcome += ", CTS pass" if acc.get("cts_pass") else ", CTS FAIL"
                if acc.get("verdict_reason") and not acc.get("cts_pass"):
                    outcome += f" ({acc['verdict_reason']})"
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

    def _skip_done(self, skipped: int) -> None:
        """Count the cases an earlier run of this directory finished."""
        if skipped:
            self.progress.done += skipped
            self.progress.resumed += skipped
            self.progress.log(f"{self.name}: {skipped} case(s) already done (resumed)")

    def run(self) -> None:
        pending = self._pending()
        self._skip_done(len(self.cfg.drivers) * len(self.cfg.modes) - len(pending))
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
        self.task = task = task_of(entry.task)
        t = time.perf_counter()
        self.imported = stage("loading the model", lambda: load(self.name))
        load_s = time.perf_counter() - t
        model = self.imported.model
        in_t = model.operand_type(model.inputs[0])
        out_t = model.inferred_operand_type(model.outputs[0])
        samples, truths = stage(f"rendering the held-out {task.sample_word}s",
                                lambda: self.runner.images.get(task, entry.resolution))
        all_inputs = stage(f"preprocessing the {task.sample_word}s", lambda: task.model_inputs(self.imported, samples))
        self.timing_input = all_inputs[TIMING_INDEX]
        self.inputs = all_inputs[:self.cfg.images]
        self.truths = truths[:self.cfg.images]
        self.model_info = {
            "task": entry.task, "family": entry.family, "width": entry.alpha, "resolution": entry.resolution,
            "quantization": entry.quantization or "float32", "parameters": entry.parameters, "macs": entry.macs,
            "operations": model.operation_count, "input": in_t.describe(), "output": out_t.describe(),
            "relaxed": bool(model.relaxed), "onnx_sha256": file_digest(onnx_path(self.name)),
            "weights_sha256": file_digest(entry.weights_path), "load_s": load_s,
        }
        self.seeds = {
            "dataset": f"{task.dataset}/{HELDOUT_SPLIT}", "images": [0, len(self.inputs)],
            "image_seed": task.seed_text(),
            "timing_image": TIMING_INDEX, "timing_input_sha256": digest([self.timing_input]),
            "accuracy_inputs_sha256": digest(self.inputs) if self.inputs else None,
        }
        if entry.quantization is not None:
            from mlts.models import zoo_registry as zoo_module

            self.seeds["calibration"] = {"split": "calibration", "images": zoo_module.CALIBRATION_IMAGES}

    # -- reference outputs --
    def reference_outputs(self) -> list[np.ndarray] | None:
        """nnapi-reference's outputs on the accuracy images: computed once, kept in the run directory.
        A failure leaves accuracy scored against the labels only; a timeout (StageTimeout) also fails
        the case that was waiting for them, and later cases of the model do not wait again."""
        if self._reference is not None or self._reference_error is not None or not self.inputs:
            return self._reference
        digests = self.seeds.get("accuracy_inputs_sha256"), str(self.model_info.get("onnx_sha256"))
        path = reference_path(self.runner.run_dir, self.name)
        self._reference = load_reference(path, *digests)
        if self._reference is not None:
            return self._reference
        from mlts.runtime import get_device

        def compute(tick: Tick) -> list[np.ndarray]:
            c = Compilation.for_devices(self.imported.model, [get_device(REFERENCE_DEVICE_NAME)])
            c.set_preference(self.runner.preference)
            c.finish()
            self.runner.first_compilations.mark(self.name, [REFERENCE_DEVICE_NAME])
            tick()
            infer = Inference(c, "sync", False)
            outputs = []
            for x in self.inputs:
                outputs.append(infer.outputs(infer(x)))
                tick()
            return [np.stack(per_output) for per_output in zip(*outputs)]

        try:
            self._reference = self.watchdog.run(
                "computing nnapi-reference's outputs for accuracy", compute,
                waiting_on=lambda units, _s: "the compilation" if units == 0
                else f"{self.task.sample_word} {units} of {len(self.inputs)}")
        except StageTimeout as e:
            self._reference_error = f"reference outputs: {e}"
            raise
        except _CaseError as e:
            self._reference_error = f"reference outputs: {_error_text(e.cause)}"
            self.progress.log(f"{self.name}: {self._reference_error}; accuracy is scored against labels only")
            return None
        try:  # for a resumed run; best effort (they are also in memory)
            save_reference(path, self._reference, *digests)
        except OSError as e:
            self.progress.log(f"{self.name}: cannot keep the reference outputs in {path} "
                              f"({e.strerror or e}); a resumed run computes them again")
        return self._reference

    # -- one case --
    def _run_case(self, driver: str, mode: str) -> None:
        from mlts.runtime import get_device

        label = f"{self.name} | {driver} | {mode}"
        key = self._key(driver, mode)
        rec = self._record(driver, mode, [driver])
        try:
            device = stage("finding the device", lambda: get_device(driver))
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
            ref = stage("finding the device", lambda: get_device(REFERENCE_DEVICE_NAME))
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

    def _compile_timed(self, devices: list, tick: Tick) -> tuple[Compilation, dict]:
        """The case's compilation and its `compilation_ms`, one-time costs apart (compile_timing)."""
        return compile_steady(lambda: self._compile(devices), self.runner.first_compilations, self.name, devices,
                              tick)

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

    def _measure_case(self, rec: BenchmarkRecord, devices: list, mode: str) -> "PendingCase | None":
        """Fill `rec` with compilation, latency, driver timing, partition and accuracy; a failing or stalled
        stage makes it an error record keeping what the stages before it measured. With --repeat N > 1 an
        ok case is returned pending: its compilation kept for the later slices."""
        cfg = self.cfg
        guard = self.watchdog
        single = len(devices) == 1  # NNAPI's deadline applies too (_compile, Inference), and goes first
        infer = None
        stuck = False
        try:
            compilation, rec.compilation_ms = guard.run("compiling", lambda tick: self._compile_timed(devices, tick),
                                                        devices, nnapi_deadline=single)
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
                              lambda _tick: Inference(compilation, mode, cfg.measure_timing, cfg.timeout_s), devices)
            m = self._timed(infer, devices, mode, 1)
            self._fill_latency(rec, m)
            reference = self.reference_outputs() if self.inputs else None
            rec.accuracy = guard.run("scoring accuracy",
                                     lambda tick: self._accuracy(infer, devices, mode, reference, tick), devices,
                                     waiting_on=inference_waiting_on(len(self.inputs), self.task.sample_word),
                                     nnapi_deadline=single)
            guard.run("profiling the operations", partial(profile_case, rec, compilation, [self.timing_input]),
                      devices, waiting_on=inference_waiting_on(PROFILE_RUNS, "profiled run"))
            if cfg.repeat > 1:  # the other slices come in later passes over every case (BenchmarkRunner.run)
                return PendingCase(self, rec, infer, devices, mode, m)
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

    def time_slice(self, case: "PendingCase", k: int) -> None:
        """Slice k of a pending case; a failing or stalled slice makes it an error record (later slices skip it)."""
        if case.rec.status != "ok":
            return
        try:
            case.m.extend(self._timed(case.infer, case.devices, case.mode, k))
        except _CaseError as e:
            case.rec.status, case.rec.message = "error", str(e)
            case.stuck = isinstance(e, StageTimeout) and e.abandoned

    def finish(self, case: "PendingCase") -> None:
        """A pending case's record from all its slices, written."""
        self._fill_latency(case.rec, case.m)
        if not case.stuck:
            self._close(case.infer, case.rec, case.devices)
        self._write(case.rec, case.label)

    def _settle(self, rec: BenchmarkRecord, label: str, pending: "PendingCase | None") -> None:
        """Write a finished case now; one with slices to come waits for the later passes."""
        if pending is None:
            self._write(rec, label)
            return
        pending.label = label
        self.runner.pending.append(pending)
        lat = rec.latency.to_dict() if hasattr(rec.latency, "to_dict") else rec.latency
        self.progress.log(f"{label}: slice 1 of {self.cfg.repeat} timed (p50 {lat['p50_ms']:.2f} ms)")

    def _timed(self, infer: Inference, devices: list, mode: str, k: int) -> Measurement:
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

    def _close(self, infer: Inference, rec: BenchmarkRecord, devices: list) -> None:
        if infer.burst is None:
            return  # nothing to close
        try:
            self.watchdog.run("closing the burst", lambda _tick: infer.close(), devices)
        except _CaseError as e:  # a driver that cannot close a burst is broken, whatever it measured
            if rec.status != "error":
                rec.status, rec.message = "error", str(e)

    def _accuracy(self, infer: Inference, devices: list, mode: str, reference: list[np.ndarray] | None,
                  tick: Tick) -> dict | None:
        if not self.inputs:
            return None
        shared = (len(devices) == 1 and devices[0].name == REFERENCE_DEVICE_NAME and mode == "sync"
                  and reference is not None)
        scorer = self.task.scorer(bool(self.imported.model.relaxed))
        for i, x in enumerate(self.inputs):
            expected = None if reference is None else [r[i] for r in reference]
            outputs = expected if shared else infer.outputs(infer(x))
            tick()
            scorer.add(outputs, expected, self.truths[i])
        result = scorer.result()
        result["images"] = len(self.inputs)
        if reference is not None and not shared and self.model_info.get("quantization") != "float32":
            key = tuple(d.name for d in devices)
            if key not in self._op_verdicts:
                self._op_verdicts[key] = per_operation_verdict(self.imported.model, devices, self.inputs[:1],
                                                               self.imported.origin, tick)
            apply_quantized_verdict(result, self._op_verdicts[key], agreement_key=self.task.quantized_key)
        if shared:
            result["outputs"] = "the reference outputs themselves (nnapi-reference, sync, same compilation options)"
        if self._reference_error:
            result["reference_error"] = self._reference_error
        return result
