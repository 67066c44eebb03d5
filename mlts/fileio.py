"""Writing files so that no reader ever sees half of one (results, reports, built models, driver caches),
and saying in one line which path could not be written and why (WriteError)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence


def atomic_write(path: str | os.PathLike, data: str | bytes | memoryview | Sequence[bytes | memoryview], *,
                 fsync: bool = True) -> Path:
    """Write `data` (text, bytes, or byte chunks written in order) to `path` through a temporary file and a
    rename, so a killed process leaves the old file or the new one. `fsync=False` for files whose readers
    check them anyway (a cache): a power loss may then leave a short file, never a mixed one."""
    path = Path(path)
    if isinstance(data, str):
        chunks: Sequence[bytes | memoryview] = [data.encode("utf-8")]
    elif isinstance(data, (bytes, bytearray, memoryview)):
        chunks = [data]
    else:
        chunks = data
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:  # name the file being written, not the temporary one
        raise OSError(e.errno, e.strerror, os.fspath(path)) from None
    try:
        # mkstemp's file is private (0600); results and reports are meant to be shared like any new file.
        mask = os.umask(0o022)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and e.errno is not None and e.filename != os.fspath(path):
            raise OSError(e.errno, e.strerror, os.fspath(path)) from None
        raise
    return path


# Imported after atomic_write: the runtime's driver caches import atomic_write from this module, so the
# runtime may be mid-import when these lines run.
from .runtime.enums import ResultCode  # noqa: E402
from .runtime.errors import MltsError  # noqa: E402


class WriteError(MltsError):
    """A file or directory mlts has to write could not be written (read-only, full, a path through a
    regular file). The CLI prints its message as one line: `mlts <command>: error: cannot write <path>: <cause>`."""

    def __init__(self, path: str | os.PathLike, cause: str) -> None:
        self.path = os.fspath(path)
        self.cause = cause
        super().__init__(ResultCode.OP_FAILED, f"cannot write {self.path}: {cause}")


def write_error(path: str | os.PathLike, error: OSError | str) -> WriteError:
    """The WriteError for `path`; an OSError gives its cause as its strerror ("No space left on device")."""
    if isinstance(error, OSError):
        error = error.strerror or str(error)
    return WriteError(path, error)


def _blocker(path: Path) -> Path | None:
    """The nearest existing ancestor of `path` (or `path` itself) that is not a directory."""
    for p in (path, *path.parents):
        if os.path.lexists(p):
            return None if p.is_dir() else p
    return None


def make_dir(path: str | os.PathLike, *, exist_ok: bool = True) -> Path:
    """`mkdir -p path`, failing with a WriteError that says why (a regular file in the way, a read-only
    or full file system). With `exist_ok=False` an existing `path` raises FileExistsError (name taken)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
        return path
    except FileExistsError as e:
        if not exist_ok and os.path.lexists(path):
            raise
        blocker = _blocker(path)
        raise write_error(path, f"{blocker} is not a directory" if blocker is not None else e) from None
    except NotADirectoryError as e:
        blocker = _blocker(path)
        raise write_error(path, f"{blocker} is not a directory" if blocker is not None else e) from None
    except OSError as e:
        raise write_error(path, e) from None
