"""The results record schema and the run directory's results files.

A run directory holds `results.jsonl`: one JSON object per line, one line per finished case, each
appended with a single write and fsynced, so a killed run keeps every finished record and at worst
a truncated last line (which readers report and skip, and which a resumed run cuts off). The schema
is documented in the README ("Results records"); bump SCHEMA_VERSION on incompatible changes.

Records of other kinds (e.g. "stress") pass through the readers untouched; only "benchmark"
records are validated here.
"""
from __future__ import annotations

import datetime as _dt
import enum
import json
import math
import os
import secrets
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Sequence

from mlts.runtime import MltsError, ResultCode

from ..fileio import atomic_write, make_dir, write_error

SCHEMA_VERSION = 1
BENCHMARK = "benchmark"
STRESS = "stress"
MODES = ("sync", "burst", "async")
STATUSES = ("ok", "unsupported", "error")
RESULTS_FILE = "results.jsonl"
ENVIRONMENT_FILE = "environment.json"
CSV_FILE = "results.csv"

CaseKey = tuple[str, str, str, str]


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def utc_now() -> str:
    """ISO 8601 UTC with seconds, the timestamp format of every record."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_run_id() -> str:
    """Unique across machines too (a timestamp alone is not), and still sorts by time."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def new_run_dir(base: str | os.PathLike = "reports") -> Path:
    """Create the default run directory `<base>/<local timestamp>/` (suffixed -2, -3... if taken)."""
    base = Path(base)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        candidate = base / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            return make_dir(candidate, exist_ok=False)  # WriteError: read-only, full, a file in the way
        except FileExistsError:
            continue
    raise MltsError(ResultCode.BAD_STATE, f"cannot create a new run directory under {base}")


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
                                                          "with_cache": None})
    compilation_cache: dict | None = None
    first_inference_ms: float | None = None
    latency: Any = None
    driver_time: dict | None = None
    accuracy: dict | None = None
    partition: dict | None = None
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


def _done_key(record: dict, retry_errors: bool) -> tuple | None:
    """The key a finished record marks as done (None: not done, it will run again)."""
    if record.get("kind") == BENCHMARK:
        return None if retry_errors and record.get("status") == "error" else case_key(record)
    if record.get("kind") == STRESS:
        return None if retry_errors and record.get("outcome") != "SUCCESS" else stress_key(record)
    return None


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


# --- reading ---------------------------------------------------------------------------------

@dataclass
class Source:
    """One results file that went into a `Results`, with its run directory's environment.json."""

    path: Path
    run_dir: Path
    environment: dict | None
    records: int = 0
    truncated: bool = False


@dataclass
class Results:
    """Records from one or more results files, in file order, with where each came from."""

    records: list[dict] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    origins: list[Source] = field(default_factory=list)
    _index: dict = field(default_factory=dict, repr=False, compare=False)

    def benchmark_records(self) -> list[dict]:
        return [r for r in self.records if r.get("kind") == BENCHMARK]

    def source_of(self, record: dict) -> Source | None:
        """The file `record` (one of `records`, by identity) was read from."""
        if len(self._index) != len(self.records):
            self._index = {id(r): s for r, s in zip(self.records, self.origins)}
        return self._index.get(id(record))

    def environment_for(self, record: dict) -> dict | None:
        """The environment of the machine that produced `record` (None when its run left none)."""
        s = self.source_of(record)
        return s.environment if s else None

    def latest_by_key(self) -> dict[CaseKey, dict]:
        """The last benchmark record of each case (a retried case's later record supersedes the earlier)."""
        latest: dict[CaseKey, dict] = {}
        for r in self.benchmark_records():
            latest[case_key(r)] = r
        return latest


def _results_file(path: str | os.PathLike) -> tuple[Path, Path]:
    p = Path(path)
    if p.is_dir():
        f = p / RESULTS_FILE
        if not f.is_file():
            raise _bad(f"{p}: not a run directory (no {RESULTS_FILE} in it)")
        return f, p
    if not p.exists():
        raise _bad(f"{p}: no such file or directory")
    return p, p.parent


#: Records are a few levels deep; a line nested deeper (or with an absurdly long integer) is not a
#: record mlts wrote, and walking it could exhaust the stack of a reader, the report or the CSV export.
MAX_RECORD_DEPTH = 32
MAX_INT_DIGITS = 64


class _Pathological(ValueError):
    """A line that is JSON, or starts like it, but that no reader should walk."""


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Pathological(f"an integer of {len(text)} digits")
    return int(text)


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Is `value` nested more than `limit` levels deep? Iterative, so it cannot recurse too deep itself."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > limit:
                return True
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def _load_line(raw: bytes) -> Any:
    """One line's JSON value; _Pathological for lines too deep or with too long numbers to trust."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_int=_parse_int)
    except RecursionError:
        raise _Pathological(f"nested more than {MAX_RECORD_DEPTH} levels deep") from None
    if _depth_exceeds(value, MAX_RECORD_DEPTH):
        raise _Pathological(f"nested more than {MAX_RECORD_DEPTH} levels deep")
    return value


def _parse_lines(data: bytes, path: Path, problems: list[str] | None = None) -> tuple[list[dict], int, bool]:
    """(records, bytes of complete lines, truncated last line?) of a results file's contents.

    Pathological lines (nested too deep, absurd numbers) are skipped, each noted in `problems`.
    """
    records: list[dict] = []
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    good_len = len(data) - len(tail)
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = _load_line(raw)
        except _Pathological as e:
            if problems is not None:
                problems.append(f"{path}:{lineno}: skipped a line that is not a usable record ({e})")
            continue
        except (UnicodeDecodeError, ValueError) as e:
            raise _bad(f"{path}:{lineno}: not a JSON record ({e})") from None
        try:
            validate_record(rec)
        except MltsError as e:
            raise _bad(f"{path}:{lineno}: {e.message}") from None
        records.append(rec)
    truncated = False
    if tail.strip():
        # A last line without its newline: complete JSON (a hand-edited file) is kept, anything else
        # is what a killed writer left and is reported, not fatal.
        try:
            rec = _load_line(tail)
            validate_record(rec)
            records.append(rec)
            good_len = len(data)
        except (UnicodeDecodeError, ValueError, MltsError):
            truncated = True
    return records, good_len, truncated


def _read_environment(run_dir: Path, problems: list[str]) -> dict | None:
    f = run_dir / ENVIRONMENT_FILE
    if not f.is_file():
        return None
    try:
        env = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        problems.append(f"{f}: unreadable environment ({e}); records kept without it")
        return None
    if not isinstance(env, dict):
        problems.append(f"{f}: environment is not a JSON object; records kept without it")
        return None
    return env


def read_results(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> Results:
    """Read and merge run directories and/or results.jsonl files (several machines, drivers or runs).

    A truncated last line (a killed run) and pathological lines (nested too deep, integers of absurd
    length) are skipped and reported in `problems`; anything else that is wrong (a missing file, a corrupt line in the middle, a bad field) raises MltsError(BAD_DATA)
    naming the file and line. The same file given twice is read once.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = Results()
    seen: set[Path] = set()
    for p in paths:
        f, run_dir = _results_file(p)
        resolved = f.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        try:
            data = f.read_bytes()
        except OSError as e:
            raise _bad(f"{f}: cannot read ({e.strerror or e})") from None
        records, _, truncated = _parse_lines(data, f, out.problems)
        src = Source(path=f, run_dir=run_dir, environment=_read_environment(run_dir, out.problems),
                     records=len(records), truncated=truncated)
        if truncated:
            out.problems.append(f"{f}: last line is truncated (the run was interrupted); "
                                f"kept the {len(records)} complete record(s)")
        out.sources.append(src)
        out.records.extend(records)
        out.origins.extend([src] * len(records))
    return out


# --- writing ---------------------------------------------------------------------------------

class ResultsWriter:
    """Appends records to `<run_dir>/results.jsonl`, one fsynced line each; resumes an existing run.

    On resume the records already there tell which cases are done (`is_done`), so a rerun skips
    them; with `retry_errors` a case that ended in "error" is not done and is run again (readers
    take the later record). A truncated last line left by a killed run is cut off first (and noted
    in `notes`). An exclusive lock keeps two mlts processes from writing one run directory. A write
    that fails (a full or read-only disk) raises fileio.WriteError naming the file, with the file cut
    back to its previous length.
    """

    def __init__(self, run_dir: str | os.PathLike, *, run_id: str | None = None, retry_errors: bool = False):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / RESULTS_FILE
        self.retry_errors = retry_errors
        self.notes: list[str] = []
        self.done: set[CaseKey] = set()
        self.existing = 0
        make_dir(self.run_dir)
        try:
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise write_error(self.path, e) from None
        try:
            self._lock()
            previous_run_id = self._resume()
        except BaseException:
            self.close()
            raise
        self.run_id = run_id or previous_run_id or new_run_id()

    def _lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock, the rest works
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise MltsError(ResultCode.BAD_STATE,
                            f"{self.path}: another mlts process is writing this run directory") from None

    def _resume(self) -> str | None:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return None
        os.lseek(self._fd, 0, os.SEEK_SET)
        chunks = []
        while True:
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        records, good_len, truncated = _parse_lines(data, self.path)
        try:
            if truncated:
                os.ftruncate(self._fd, good_len)
                os.fsync(self._fd)
                self.notes.append(f"{self.path}: removed a truncated last line ({len(data) - good_len} bytes) "
                                  "left by an interrupted run; that case will run again")
            elif not data.endswith(b"\n"):
                self._append(b"\n")  # a complete last record without its newline
        except OSError as e:
            raise write_error(self.path, e) from None
        self.existing = len(records)
        run_id = None
        for r in records:
            if r.get("kind") not in (BENCHMARK, STRESS):
                continue
            run_id = r.get("run_id") or run_id
            key = _done_key(r, self.retry_errors)
            if key is not None:
                self.done.add(key)
        if records:
            self.notes.append(f"{self.path}: resuming after {len(records)} record(s) "
                              f"({len(self.done)} case(s) done)")
        return run_id

    def is_done(self, key: CaseKey | BenchmarkRecord | dict) -> bool:
        """Was this case finished by an earlier (interrupted) run of this directory? Stress cases are
        keyed ("stress", driver, test), given as such a tuple or as a stress record dict."""
        if isinstance(key, BenchmarkRecord):
            key = key.key
        elif isinstance(key, dict):
            key = stress_key(key) if key.get("kind") == STRESS else case_key(key)
        return tuple(key) in self.done

    def write(self, record: BenchmarkRecord | dict) -> dict:
        """Append one finished case; returns the record as written (run_id and timestamp filled in)."""
        if self._fd is None:
            raise MltsError(ResultCode.BAD_STATE, f"{self.path}: writer is closed")
        d = record.to_dict() if isinstance(record, BenchmarkRecord) else to_jsonable(dict(record))
        if d.get("kind") == BENCHMARK:
            d.setdefault("schema_version", SCHEMA_VERSION)
        if not d.get("run_id"):
            d["run_id"] = self.run_id
        if not d.get("timestamp"):
            d["timestamp"] = utc_now()
        validate_record(d)
        line = (json.dumps(d, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            self._append(line)
        except OSError as e:  # a full or failing disk: the file is back as it was, the caller is told why
            raise write_error(self.path, e) from None
        key = _done_key(d, self.retry_errors)
        if key is not None:
            self.done.add(key)
        return d

    def _append(self, data: bytes) -> None:
        """Append `data` whole and fsync it, or leave the file at its previous length: a write that fails
        half way (a full disk, an interrupt) is cut off, so no reader ever sees half a record."""
        assert self._fd is not None
        before = os.fstat(self._fd).st_size
        view = memoryview(data)
        try:
            while view:  # one write(2) in practice; the loop only guards against a short write
                n = os.write(self._fd, view)
                view = view[n:]
            os.fsync(self._fd)
        except BaseException:
            try:
                os.ftruncate(self._fd, before)
            except OSError:  # cannot even truncate: a reader reports the partial line, a resume cuts it off
                pass
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # also releases the lock
            self._fd = None

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- CSV ---------------------------------------------------------------------------------------

LEADING_COLUMNS = ("run_id", "timestamp", "kind", "model", "driver", "mode", "preference", "status",
                   "message", "latency.p50_ms", "latency.mean_ms", "latency.p90_ms", "latency.p99_ms",
                   "latency.throughput_per_s", "first_inference_ms", "compilation_ms.without_cache",
                   "compilation_ms.save_to_cache", "compilation_ms.with_cache", "compilation_cache.size_bytes",
                   "accuracy.top1_accuracy", "accuracy.top5_accuracy",
                   "accuracy.top1_agreement", "accuracy.cts_pass", "accuracy.max_abs_error",
                   "accuracy.mse", "peak_rss_bytes")


def flatten_record(record: dict, prefix: str = "") -> dict:
    """Nested objects become dotted columns; lists (histograms, op lists) become JSON text in one cell."""
    flat: dict = {}
    for k, v in record.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            flat.update(flatten_record(v, name + "."))
        elif isinstance(v, dict):
            flat[name] = None
        elif isinstance(v, list):
            flat[name] = json.dumps(v, separators=(",", ":"))
        else:
            flat[name] = v
    return flat


def to_csv(records: Iterable[dict], path: str | os.PathLike) -> Path:
    """Write `results.csv` (one row per record, flattened columns), atomically, for spreadsheets and pandas.
    Latency samples stay in results.jsonl: up to 10,000 numbers would not fit a spreadsheet cell."""
    import pandas as pd

    rows = [flatten_record(to_jsonable(r)) for r in records]
    for row in rows:
        row.pop("latency.samples_ms", None)
    columns: list[str] = [c for c in LEADING_COLUMNS if any(c in row for row in rows)]
    for row in rows:
        for c in row:
            if c not in columns:
                columns.append(c)
    frame = pd.DataFrame(rows, columns=columns)
    return atomic_write(path, frame.to_csv(index=False))
