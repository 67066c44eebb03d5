"""What a stress test function gets: its driver, duration, parameters, and helpers to compile, run,
check and report progress (every helper beats the watchdog's heartbeat)."""
from __future__ import annotations

import importlib
import random
import sys
import time
from pathlib import Path
from typing import Any, NoReturn, Sequence

import numpy as np

from ..runtime import Compilation, Device, Execution, MltsError, Model, get_device
from ..runtime.app.fallbacks import fallback_mark, fallbacks_since, summarize
from .drivers import ALL_DEVICES, REFERENCE, Target, open_service_reference, open_target
from .models import StressModel, check_outputs


class StressSkipped(Exception):
    """The test cannot exercise the driver at all: its outcome is SKIPPED (never SUCCESS)."""

    def __init__(self, reason: str, details: dict | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details or {}


class StressFailure(Exception):
    """A check failed: the test's outcome is FAILURE with this reason."""

    def __init__(self, reason: str, details: dict | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.details = details or {}


def describe_error(e: BaseException) -> str:
    """One line for a record's reason: API errors by their ResultCode name, others by type."""
    if isinstance(e, MltsError):
        return f"{e.code.name}: {e.message}"
    if isinstance(e, StressFailure):
        return e.reason
    return f"{type(e).__name__}: {e}"


def limit_address_space(extra_gb: float) -> None:
    """Cap this process (and what it starts later) at its current address space plus `extra_gb`, so
    that a driver allocating an impossible tensor fails instead of exhausting the machine."""
    try:
        import resource

        import psutil

        limit = psutil.Process().memory_info().vms + int(extra_gb * (1 << 30))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):  # not POSIX, or not allowed: run unbounded
        pass


class StressContext:
    """One test run in a test process (see mlts.stress.child for the job fields)."""

    def __init__(self, job: dict[str, Any], reporter: Any) -> None:
        self.job = job
        self.reporter = reporter
        self.test = str(job.get("test", "?"))
        self.target = Target.from_job(job.get("target") or {"name": ALL_DEVICES})
        self.driver = self.target.name
        self.specs: list[str] = list(job.get("specs") or [])
        self.hosting: str | None = job.get("hosting")
        self.duration = float(job.get("duration_s", 1.0))
        self.params: dict[str, Any] = dict(job.get("params") or {})
        self.seed = int(job.get("seed", 0))
        self.rng = np.random.default_rng(self.seed)
        self.random = random.Random(self.seed)
        self.out_dir = Path(job.get("out_dir") or ".")
        self.work_dir = Path(job.get("work_dir") or self.out_dir)
        self.device: Device | None = None
        self._undo: Any = None
        self._service_reference: tuple[Device, Any] | None = None  # opened on first use
        self._reference_outputs: dict[str, list[np.ndarray]] = {}
        self._whole: dict[int, bool] = {}                # id(model) -> the driver runs it whole
        self.coverage: dict[str, dict[str, Any]] = {}    # model name -> operations on the driver
        self._fallback_mark = fallback_mark()

    # -- set-up -----------------------------------------------------------------------------
    def open(self) -> None:
        extra_gb = self.params.get("address_space_gb")
        if extra_gb:
            limit_address_space(float(extra_gb))  # before any service starts: they inherit it
        self.device, self._undo = open_target(self.target, self.specs, self.hosting, log=self.log)
        self.beat("driver ready")

    def call_test(self) -> dict | None:
        module, _, name = str(self.job["function"]).partition(":")
        fn = getattr(importlib.import_module(module), name)
        return fn(self)

    def close(self) -> None:
        undos = [self._service_reference[1] if self._service_reference else None, self._undo]
        self._undo = self._service_reference = None
        for undo in undos:
            if undo is not None:
                try:
                    undo()
                except Exception:  # closing is best effort: the services exit with this process anyway
                    pass

    @property
    def all_devices(self) -> bool:
        return self.device is None

    def param(self, name: str, default: Any) -> Any:
        return self.params.get(name, default)

    # -- watchdog ---------------------------------------------------------------------------
    def beat(self, note: str | None = None) -> None:
        self.reporter.beat(note)

    def log(self, message: str) -> None:
        print(f"[stress] {message}", file=sys.stderr, flush=True)

    def fail(self, reason: str, **details: Any) -> NoReturn:
        raise StressFailure(reason, details)

    def skip(self, reason: str, **details: Any) -> NoReturn:
        """The test cannot exercise the driver: SKIPPED, with the reason (and what it found out, if anything)."""
        raise StressSkipped(reason, details)

    def deadline(self, seconds: float | None = None) -> float:
        """A time.monotonic() end, `seconds` (default: the test's scaled duration) from now."""
        return time.monotonic() + (self.duration if seconds is None else seconds)

    # -- compile and run --------------------------------------------------------------------
    def devices_for(self, model: Model) -> list[Device] | None:
        """[the driver] for a model it runs whole; [the driver, nnapi-reference] for one it runs part of
        (a partitioned compilation without CPU fallback: the driver's failures stay failures); None for
        ALL_DEVICES."""
        if self.device is None:
            return None
        whole = self._whole.get(id(model))
        if whole is None:
            whole = self.supports(model)
        if whole or self.device.name == REFERENCE:
            return [self.device]
        return [self.device, get_device(REFERENCE)]

    def supported_flags(self, model: Model) -> list[bool]:
        """Per operation: does the driver take it (every one for ALL_DEVICES; none if it refuses the model)."""
        if self.device is None:
            return [True] * model.operation_count
        try:
            return list(model.get_supported_operations_for_devices([self.device]))
        except MltsError:
            return [False] * model.operation_count

    def supports(self, model: Model) -> bool:
        return all(self.supported_flags(model))

    def compile(self, model: Model, devices: Sequence[Device] | None = None, *, reference: bool = False) -> Compilation:
        """A finished compilation on the driver (all devices for ALL_DEVICES); with `reference`, on
        nnapi-reference alone (or the reference `devices` given), not counted as the driver's coverage."""
        if reference and devices is None:
            devices = [get_device(REFERENCE)]
        elif devices is None:
            devices = self.devices_for(model)
        c = Compilation(model) if devices is None else Compilation.for_devices(model, list(devices))
        c.finish()
        if not reference:
            self._count_coverage(model, c)
        self.beat()
        return c

    def timing_reference(self, model: Model) -> Compilation:
        """nnapi-reference compiled to pair the driver's timings with, hosted as the driver is: for a
        service-hosted driver, nnapi-reference in a service of its own (see open_service_reference)."""
        if self.device is None or self.device.hosting != "service":
            return self.compile(model, reference=True)
        if self._service_reference is None:
            self._service_reference = open_service_reference()
        return self.compile(model, [self._service_reference[0]], reference=True)

    def _count_coverage(self, model: Model, c: Compilation) -> None:
        """How many of the model's operations the compilation gave the driver under test (for
        ALL_DEVICES: any device but nnapi-reference)."""
        name = getattr(model, "_stress_name", None)
        if name in self.coverage or c.plan is None:
            return
        if self.device is None:
            on = sum(len(s.operations) for s in c.plan.steps if s.device.name != REFERENCE)
        else:
            on = sum(len(s.operations) for s in c.plan.steps if s.device.name == self.device.name)
        total = model.operation_count
        partitioned = len({s.device.name for s in c.plan.steps}) > 1
        if name is None:  # built on the fly (random graphs, corner cases): one entry for all of them
            name = "other models"
            seen = self.coverage.get(name, {"ops_on_driver": 0, "ops_total": 0, "partitioned": False, "count": 0})
            on, total = on + seen["ops_on_driver"], total + seen["ops_total"]
            partitioned = partitioned or seen["partitioned"]
            self.coverage[name] = {"ops_on_driver": on, "ops_total": total, "partitioned": partitioned,
                                   "count": seen["count"] + 1}
            return
        self.coverage[name] = {"ops_on_driver": on, "ops_total": total, "partitioned": partitioned}

    def coverage_summary(self) -> dict[str, Any] | None:
        """The record's `coverage`: operations that ran on the driver, over every model the test compiled."""
        if not self.coverage:
            return None
        return {"ops_on_driver": sum(c["ops_on_driver"] for c in self.coverage.values()),
                "ops_total": sum(c["ops_total"] for c in self.coverage.values()),
                "models": [n if n != "other models" else f"{c['count']} other model(s)"
                           for n, c in self.coverage.items()],
                "partitioned": any(c["partitioned"] for c in self.coverage.values())}

    def fallbacks(self) -> dict[str, Any] | None:
        """Driver failures the CPU fallback hid since the test started (the record's `fallbacks`),
        less those the test declares legitimate (`tolerated_fallbacks`: result codes such as a clean
        refusal of impossible work; a dead driver is never tolerated)."""
        count, events = fallbacks_since(self._fallback_mark)
        tolerated = set(self.param("tolerated_fallbacks", [])) - {"DEAD_OBJECT"}
        if tolerated:
            kept = [e for e in events if e.code.name not in tolerated]
            count, events = count - (len(events) - len(kept)), kept
        return summarize(count, events)

    def run(self, compilation: Compilation, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        e = Execution(compilation)
        for i, x in enumerate(inputs):
            e.set_input(i, x)
        e.compute()
        outputs = [e.get_output(i) for i in range(len(compilation.model.outputs))]
        self.beat()
        return outputs

    def reference_outputs(self, m: StressModel) -> list[np.ndarray]:
        """The model's outputs on nnapi-reference (computed once per process)."""
        if m.name not in self._reference_outputs:
            self._reference_outputs[m.name] = self.run(self.compile(m.model, reference=True), m.inputs)
        return self._reference_outputs[m.name]

    def check(self, m: StressModel, outputs: Sequence[np.ndarray], what: str = "") -> None:
        """FAILURE unless `outputs` match the reference's (whole-model tolerance, or the model's task rule)."""
        why = check_outputs(list(outputs), self.reference_outputs(m), m.output_codes, sample_rule=m.sample_rule)
        if why is not None:
            self.fail(f"wrong results{' ' + what if what else ''} for {m.name} on {self.driver}: {why}")

    def liveness(self, m: StressModel) -> None:
        """The driver survived: a supported model still compiles and runs correctly on it."""
        try:
            outputs = self.run(self.compile(m.model), m.inputs)
        except MltsError as e:
            self.fail(f"liveness check: {self.driver} no longer runs {m.name}: {describe_error(e)}")
        self.check(m, outputs, "in the liveness check")
        self.log(f"liveness: {self.driver} still runs {m.name} correctly")

    def usable_models(self, names: Sequence[str], *, whole_only: bool = False) -> list[StressModel]:
        """The named models that exercise the driver: those it runs whole, and (unless `whole_only`)
        those it runs part of, compiled partitioned with nnapi-reference. None of them: the test
        cannot exercise the driver and is SKIPPED, naming what the driver lacks."""
        from .models import load_model

        out, why = [], []
        for name in names:
            m = load_model(name)
            self.beat(f"loaded {name}")
            flags = self.supported_flags(m.model)
            self._whole[id(m.model)] = all(flags)
            if all(flags):
                out.append(m)
                continue
            ops = m.model.operations()
            missing = sorted({code.name for (code, _, _), ok in zip(ops, flags) if not ok})
            line = (f"{self.driver} does not support every operation of {m.name} (it lacks {', '.join(missing)}; "
                    f"{sum(flags)} of {len(flags)} operations on the driver)")
            if any(flags) and not whole_only:
                self.log(f"{line}: run partitioned with {REFERENCE}")
                out.append(m)
            else:
                self.log(f"{line}: not used")
                why.append(f"{m.name} ({'none of its operations' if not any(flags) else 'lacks ' + ', '.join(missing)})")
        if not out:
            self.skip(f"{self.driver} cannot run any of the test's models: " + "; ".join(why))
        return out


__all__ = ["StressContext", "StressFailure", "StressSkipped", "describe_error"]
