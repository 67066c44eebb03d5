"""Writing a run directory's results.jsonl: one fsynced line per finished case, resumable.

Each record is appended with a single write and fsynced, so a killed run keeps every finished record
and at worst a truncated last line, which a resumed run cuts off (and readers report and skip).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
from pathlib import Path

from mlts.runtime import MltsError, ResultCode

from ..fileio import make_dir, write_error
from .record_schema import (BENCHMARK, SCHEMA_VERSION, STRESS, BenchmarkRecord, CaseKey, case_key, stress_key,
                            to_jsonable, utc_now, validate_record)
from .records import RESULTS_FILE, parse_records


def new_run_id() -> str:
    """Unique across machines too (a timestamp alone is not), and still sorts by time."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def _done_key(record: dict, retry_errors: bool) -> tuple | None:
    """The key a finished record marks as done (None: not done, it will run again)."""
    if record.get("kind") == BENCHMARK:
        return None if retry_errors and record.get("status") == "error" else case_key(record)
    if record.get("kind") == STRESS:
        return None if retry_errors and record.get("outcome") != "SUCCESS" else stress_key(record)
    return None


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
        records, good_len, truncated = parse_records(data, self.path)
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
