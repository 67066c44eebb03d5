"""The results record schema: what one line of results.jsonl holds, and how a reader validates it.

The schema is documented in the README ("Results records"); bump SCHEMA_VERSION on incompatible
changes. Records of other kinds (e.g. "stress") pass through the readers untouched; only "benchmark"
records are validated here.
"""
from __future__ import annotations

import datetime as _dt
import enum
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any

from mlts.runtime import MltsError, ResultCode

SCHEMA_VERSION = 1
BENCHMARK = "benchmark"
STRESS = "stress"
MODES = ("sync", "burst", "async")
STATUSES = ("ok", "unsupported", "error")

CaseKey = tuple[str, str, str, str]


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def utc_now() -> str:
    """ISO 8601 UTC with seconds, the timestamp format of every record."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_jsonable(obj: Any) -> Any:
    """Plain JSON values: numpy scalars and arrays unwrapped, enums by name, NaN/inf as null (JSON has neither)."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k.name if isinstance(k, enum.Enum) else k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_jsonable(to_dict())
    tolist = getattr(obj, "tolist", None)  # numpy scalars and arrays, without importing numpy
    if callable(tolist):
        return to_jsonable(tolist())
    return str(obj)


@dataclass
class BenchmarkRecord:
    """One model x driver x mode (x preference) case of a benchmark run. See the README for each field."""

    model: str
    driver: str
    mode: str = "sync"
    preference: str = "FAST_SINGLE_ANSWER"
    status: str = "ok"
    message: str | None = None
    unsupported_ops: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    run_id: str | None = None
    timestamp: str | None = None
    model_info: dict = field(default_factory=dict)
    compilation_ms: dict = field(default_factory=lambda: {"without_cache": None, "save_to_cache": None,
                                                          "with_cache": None, "first_use": None})
    compilation_cache: dict | None = None
    first_inference_ms: float | None = None
    latency: Any = None
    driver_time: dict | None = None
    accuracy: dict | None = None
    partition: dict | None = None
    #: per operation (op_profile.py): index, type, device, mean_us, share; None: no device reported any
    op_profile: list | None = None
    peak_rss_bytes: int | None = None
    run_length: dict | None = None
    seeds: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    kind: str = BENCHMARK

    def to_dict(self) -> dict:
        """The JSON record: fields in a stable order, then `extra` (fields this version does not know)."""
        d = {"schema_version": self.schema_version, "kind": self.kind}
        for f in fields(self):
            if f.name not in ("schema_version", "kind", "extra"):
                d[f.name] = getattr(self, f.name)
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return to_jsonable(d)

    @classmethod
    def from_dict(cls, d: dict) -> "BenchmarkRecord":
        """Validate and load; unknown fields are kept in `extra` so a round trip loses nothing."""
        validate_record(d)
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in d.items() if k in known}
        extra = {k: v for k, v in d.items() if k not in known}
        return cls(**values, extra=extra)

    @property
    def key(self) -> CaseKey:
        return (self.model, self.driver, self.mode, self.preference)


def case_key(record: dict) -> CaseKey:
    """What identifies a benchmark case across runs: (model, driver, mode, preference)."""
    return (str(record.get("model")), str(record.get("driver")), str(record.get("mode", "sync")),
            str(record.get("preference", "FAST_SINGLE_ANSWER")))


def stress_key(record: dict) -> tuple[str, str, str]:
    """What identifies a stress case across runs: ("stress", driver, test)."""
    return (STRESS, str(record.get("driver")), str(record.get("test")))


def _check_number(d: dict, name: str, *, allow_none: bool = True) -> None:
    v = d.get(name)
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(f"field {name!r} must be a number{' or null' if allow_none else ''}, got {v!r}")


def validate_record(d: Any) -> None:
    """Reject what a reader cannot trust (wrong types, unknown enums, a newer schema); name the field.

    Only "benchmark" records are checked beyond being JSON objects with a `kind`.
    """
    if not isinstance(d, dict):
        raise _bad(f"a record must be a JSON object, got {type(d).__name__}")
    kind = d.get("kind")
    if not isinstance(kind, str) or not kind:
        raise _bad("field 'kind' is missing (every record names its kind, e.g. \"benchmark\")")
    if kind != BENCHMARK:
        return
    version = d.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise _bad(f"field 'schema_version' must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise _bad(f"schema_version {version} is newer than this mlts understands ({SCHEMA_VERSION}); upgrade mlts")
    if version < 1:
        raise _bad(f"field 'schema_version' must be >= 1, got {version}")
    for name in ("model", "driver"):
        if not isinstance(d.get(name), str) or not d.get(name):
            raise _bad(f"field {name!r} must be a non-empty string, got {d.get(name)!r}")
    if d.get("mode", "sync") not in MODES:
        raise _bad(f"field 'mode' must be one of {', '.join(MODES)}, got {d.get('mode')!r}")
    if not isinstance(d.get("preference", ""), str):
        raise _bad(f"field 'preference' must be a string, got {d.get('preference')!r}")
    status = d.get("status", "ok")
    if status not in STATUSES:
        raise _bad(f"field 'status' must be one of {', '.join(STATUSES)}, got {status!r}")
    if not isinstance(d.get("unsupported_ops", []), list):
        raise _bad("field 'unsupported_ops' must be a list of operation names")
    for name in ("first_inference_ms", "peak_rss_bytes"):
        _check_number(d, name)
    for name in ("latency", "accuracy", "driver_time", "partition", "run_length", "compilation_ms",
                 "compilation_cache", "model_info", "seeds", "config"):
        if d.get(name) is not None and not isinstance(d.get(name), dict):
            raise _bad(f"field {name!r} must be an object or null, got {type(d.get(name)).__name__}")
    latency = d.get("latency")
    if latency is not None:
        for name in ("count", "min_ms", "mean_ms", "std_ms", "p50_ms", "p90_ms", "max_ms"):
            if name not in latency:
                raise _bad(f"field 'latency.{name}' is missing")
            _check_number(latency, name, allow_none=False)
    if status == "ok" and latency is None:
        raise _bad("field 'latency' is required when status is \"ok\"")
    _check_op_profile(d.get("op_profile"))


def _check_op_profile(profile: Any) -> None:
    """`op_profile`: null (absent in records older than it), or a list of one object per operation."""
    if profile is None:
        return
    if not isinstance(profile, list):
        raise _bad(f"field 'op_profile' must be a list or null, got {type(profile).__name__}")
    for k, entry in enumerate(profile):
        if not isinstance(entry, dict):
            raise _bad(f"field 'op_profile[{k}]' must be an object, got {type(entry).__name__}")
        for name, kinds, what in (("index", (int,), "an integer"), ("type", (str,), "a string"),
                                  ("device", (str,), "a string"), ("mean_us", (int, float), "a number"),
                                  ("share", (int, float), "a number or null")):
            v = entry.get(name)
            if (v is None and name != "share") or (v is not None and (isinstance(v, bool) or not isinstance(v, kinds))):
                raise _bad(f"field 'op_profile[{k}].{name}' must be {what}, got {v!r}")
