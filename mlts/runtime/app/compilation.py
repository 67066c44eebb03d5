"""Compilation (ANeuralNetworksCompilation): partition a finished model and prepare it on drivers."""
from __future__ import annotations

import os
import threading
from typing import Any, Sequence

from .. import vlog
from ..enums import CACHE_TOKEN_BYTES, DeviceType, Preference, Priority, ResultCode
from ..errors import MltsError, bad_data, bad_state
from .fallbacks import FallbackEvent, record_fallback
from .execution_plan import ExecutionPlan, Step, log as plan_log, partition
from .compilation_cache import CacheReport, prepare_with_cache, summary_status
from ..hal import HalModel, IPreparedModel, deadline_from_timeout
from ..hal.validation import check_priority
from .manager import Device, check_device_list, devices as all_devices
from .model import Model


class Compilation:
    """`Compilation(model)` may use every device and falls back to the CPU;
    `Compilation.for_devices(model, devices)` uses only those devices and never falls back."""

    def __init__(self, model: Model, _devices: Sequence[Device] | None = None) -> None:
        if not isinstance(model, Model):
            raise bad_data(f"Compilation: expected a Model, got {type(model).__name__}")
        if not model.finished:
            raise bad_state("Compilation: the model is not finished")
        self.model = model
        self.explicit_devices = _devices is not None
        self.devices: list[Device] = list(_devices) if _devices is not None else all_devices()
        self.preference = Preference.FAST_SINGLE_ANSWER
        self.priority = Priority.MEDIUM
        self.timeout_ns: int | None = None
        self.cache_dir: str | None = None
        self.cache_token: bytes | None = None
        self.cache_reports: list[CacheReport] = []  # one per preparation: what compilation caching did
        self.finished = False
        self.plan: ExecutionPlan | None = None
        self.plan_log: list[str] = []
        self._lock = threading.Lock()
        self._cpu_fallback: dict[Any, IPreparedModel] = {}
        self._finish_failed = False
        #: driver failures hidden by the CPU fallback, at preparation and in executions (mlts.runtime.app.fallbacks)
        self.fallbacks: list[FallbackEvent] = []  # the first 100
        self.fallback_count = 0
        self._fallback_lock = threading.Lock()  # not _lock: finish() holds that while it falls back

    @classmethod
    def for_devices(cls, model: Model, devices: Sequence[Device]) -> "Compilation":
        return cls(model, check_device_list(devices, "Compilation.for_devices"))

    # -- settings -------------------------------------------------------------------------------
    def _check_not_finished(self, call: str) -> None:
        if self.finished:
            raise bad_state(f"{call}: the compilation is already finished")

    def set_preference(self, preference: Preference) -> None:
        self._check_not_finished("set_preference")
        try:
            self.preference = Preference(preference)
        except (ValueError, TypeError):
            raise bad_data(f"set_preference: invalid preference {preference!r}") from None

    def set_priority(self, priority: Priority) -> None:
        """Relative to this client's other compilations: honoured by each device's queue (mlts.runtime.qos)."""
        self._check_not_finished("set_priority")
        self.priority = check_priority(priority, "set_priority")

    def set_timeout(self, duration_ns: int) -> None:
        """Preparation deadline; only for a compilation of exactly one explicit device (as NNAPI)."""
        self._check_not_finished("set_timeout")
        if isinstance(duration_ns, bool) or not isinstance(duration_ns, int) or duration_ns < 0:
            raise bad_data(f"set_timeout: duration must be a non-negative int of nanoseconds, got {duration_ns!r}")
        if not self.is_single_explicit_device:
            raise bad_data("set_timeout: only allowed for a compilation created for exactly one device")
        self.timeout_ns = duration_ns or None

    def set_caching(self, cache_dir: str | os.PathLike, token: bytes) -> None:
        self._check_not_finished("set_caching")
        if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
            raise bad_data(f"set_caching: cache directory must be a path, got {cache_dir!r}")
        if not os.path.isdir(cache_dir):
            raise bad_data(f"set_caching: cache directory {os.fspath(cache_dir)!r} does not exist")
        if not isinstance(token, (bytes, bytearray)) or len(token) != CACHE_TOKEN_BYTES:
            raise bad_data(f"set_caching: token must be {CACHE_TOKEN_BYTES} bytes")
        self.cache_dir, self.cache_token = os.fspath(cache_dir), bytes(token)

    @property
    def is_single_explicit_device(self) -> bool:
        return self.explicit_devices and len(self.devices) == 1

    @property
    def allows_cpu_fallback(self) -> bool:
        return not self.explicit_devices

    @property
    def cpu_device(self) -> Device:
        for d in all_devices():
            if d.type == DeviceType.CPU and d.name == "nnapi-reference":
                return d
        raise MltsError(ResultCode.UNAVAILABLE_DEVICE, "nnapi-reference is not available")

    # -- finish ---------------------------------------------------------------------------------
    def finish(self) -> None:
        with self._lock:
            self._check_not_finished("finish")
            if self._finish_failed:
                raise bad_state("finish: an earlier finish() of this compilation failed")
            self._finish_failed = True  # cleared below on success (NNAPI marks the compilation finished first)
            hal = self.model.hal_model()
            deadline = deadline_from_timeout(self.timeout_ns)
            cpu = self.cpu_device if self.allows_cpu_fallback else None
            plan = partition(hal, self.devices, self.preference, cpu)
            try:
                for step in plan.steps:
                    step.prepared = self._prepare(step.device, step.model, deadline,
                                                  f"step{step.index}:" + ",".join(map(str, step.operations)))
            except MltsError as e:
                if not self.allows_cpu_fallback:
                    raise
                line = (f"preparation on {step.device.name} failed ({e.code.name}: {e.message}); "
                        f"the whole model falls back to {cpu.name}")
                plan_log.info(line)
                plan.log_lines.append(line)
                self.record_fallback(FallbackEvent(step.device.name, "preparation", e.code, e.message, "whole model"))
                self.cache_reports.clear()  # the steps prepared so far are dropped
                whole = Step(0, cpu, -1, list(range(len(hal.main.operations))), hal,
                             list(hal.main.input_indexes), list(hal.main.output_indexes))
                whole.prepared = self._prepare(cpu, hal, deadline, "whole")
                plan = ExecutionPlan([whole], plan.log_lines)
            self.plan = plan
            self.plan_log = plan.log_lines
            self.finished = True
            self._finish_failed = False
            vlog.log("compilation", f"compiled into {len(plan.steps)} step(s): "
                                    + ", ".join(s.device.name for s in plan.steps))

    @property
    def cache_status(self) -> str:
        """What compilation caching did: "prepared-from-cache", "saved", "not-saved", "mixed", "unsupported"
        or "disabled" (see compilation_cache.CacheStatus); per preparation in `cache_reports`."""
        return summary_status(self.cache_reports)

    def _prepare(self, device: Device, model: HalModel, deadline: float | None, part: str) -> IPreparedModel:
        try:
            prepared = prepare_with_cache(device, model, self.preference, self.priority, deadline, self.cache_dir,
                                          self.cache_token, part, self.cache_reports)
        except MltsError:
            raise
        except Exception as e:  # the runtime must survive any driver
            raise MltsError(ResultCode.OP_FAILED, f"{device.name}: prepare_model raised "
                                                  f"{type(e).__name__}: {e}") from None
        if not isinstance(prepared, IPreparedModel):
            raise MltsError(ResultCode.OP_FAILED, f"{device.name}: prepare_model returned no prepared model")
        return prepared

    def cpu_prepared(self, key: Any, model: HalModel) -> IPreparedModel:
        """The CPU preparation of a step (or of the whole model) for execution-time fallback."""
        with self._lock:
            if key not in self._cpu_fallback:
                self._cpu_fallback[key] = self._prepare(self.cpu_device, model, None, f"cpu-fallback:{key}")
            return self._cpu_fallback[key]

    def record_fallback(self, event: FallbackEvent) -> None:
        """Keep a hidden driver failure here and in the process log (executions call this too)."""
        with self._fallback_lock:
            self.fallback_count += 1
            if len(self.fallbacks) < 100:
                self.fallbacks.append(event)
        record_fallback(event)

    def check_finished(self, call: str) -> None:
        if not self.finished:
            raise bad_state(f"{call}: the compilation is not finished")
