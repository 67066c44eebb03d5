"""Writing files so that no reader ever sees half of one (results, reports, built models, driver caches)."""
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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
