"""The benchmark loop: every selected model on every selected driver, in every selected mode.

Per case (model x driver x mode): check what the driver supports (a driver that cannot run the whole
model is `unsupported`, and, with partitioning allowed, also runs partitioned with nnapi-reference
taking the rest), compile (timed without cache, the run's first compilation of a model for its devices
timed apart as its first use; where a driver caches, also timed saving to an empty cache and preparing
from it, with the cache's size), time inferences under the run-length rules,
then score the driver's outputs on held-out images against the nnapi-reference outputs (computed
once per model and cached in the run directory) and against the labels. Each finished case is
appended to results.jsonl at once, so a killed run keeps it; a case that fails becomes an `error`
record and the run goes on. What a run measures is run_config.BenchmarkConfig; the cases of one model
are model_run.ModelRun; this module drives them (with the later passes over cases timed in slices).
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Sequence, TextIO

from ..fileio import WriteError, atomic_write, write_error
from ..signals import signal_name
from .compile_timing import FirstCompilations
from .tasks import HeldOutSamples
from .model_run import ModelRun, PendingCase
from .progress import Progress, RssSampler, RunSummary
from .record_schema import case_key, to_jsonable, utc_now
from .records import read_results
from .results_writer import ResultsWriter
from .run_config import BenchmarkConfig, parse_preference
from .threads import ThreadPinning

RUN_FILE = "run.json"


class BenchmarkRunner:
    """Runs a BenchmarkConfig into a run directory (resuming the cases it already finished)."""

    def __init__(self, config: BenchmarkConfig, run_dir: str | os.PathLike, *, stream: TextIO | None = None,
                 retry_errors: bool = False, driver_specs: Sequence[str] = ()) -> None:
        self.config = config
        self.driver_specs = list(driver_specs)
        self.run_dir = Path(run_dir)
        self.stream = stream
        self.retry_errors = retry_errors
        self.images = HeldOutSamples(config.images)
        self.preference = parse_preference(config.preference)
        self.previous_status: dict[tuple, str | None] = {}
        self.pinning: ThreadPinning | None = None
        #: cases whose later slices (--repeat) are still to come, in the order they were first timed
        self.pending: list[PendingCase] = []
        #: the (model, devices) compiled so far: the first compilation of each is timed apart (compile_timing)
        self.first_compilations = FirstCompilations()

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
                why = f"no trained weights ({entry.weights_path.name} is missing; run {entry.architecture.trainer})"
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
