"""A run directory's results files: reading (and merging) results.jsonl files, and the CSV export.

A run directory holds `results.jsonl` (one JSON record per line, one line per finished case; written by
results_writer.ResultsWriter, the record schema in record_schema), the machine's `environment.json`
and, on request, `results.csv`. A truncated last line (a killed run) is reported and skipped.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from mlts.runtime import MltsError, ResultCode

from ..fileio import atomic_write, make_dir
from .record_schema import BENCHMARK, CaseKey, case_key, to_jsonable, validate_record

RESULTS_FILE = "results.jsonl"
ENVIRONMENT_FILE = "environment.json"
CSV_FILE = "results.csv"


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


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


def parse_records(data: bytes, path: Path, problems: list[str] | None = None) -> tuple[list[dict], int, bool]:
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
        records, _, truncated = parse_records(data, f, out.problems)
        src = Source(path=f, run_dir=run_dir, environment=_read_environment(run_dir, out.problems),
                     records=len(records), truncated=truncated)
        if truncated:
            out.problems.append(f"{f}: last line is truncated (the run was interrupted); "
                                f"kept the {len(records)} complete record(s)")
        out.sources.append(src)
        out.records.extend(records)
        out.origins.extend([src] * len(records))
    return out


# --- CSV ---------------------------------------------------------------------------------------

LEADING_COLUMNS = ("run_id", "timestamp", "kind", "model", "driver", "mode", "preference", "status",
                   "message", "latency.p50_ms", "latency.mean_ms", "latency.p90_ms", "latency.p99_ms",
                   "latency.throughput_per_s", "first_inference_ms", "compilation_ms.without_cache",
                   "compilation_ms.save_to_cache", "compilation_ms.with_cache", "compilation_ms.first_use",
                   "compilation_cache.size_bytes",
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
