"""How mlts-fast's kernels are compiled: numba's njit, cached on disk in a directory keyed by the kernel
modules' sources.

numba invalidates a cached kernel when its own source file changes, but not when a function it inlines
from another file changes (kernels_quant inlines kernels_float's row kernels): after an edit or an
upgrade that touches only kernels_float, the quantized kernels would load stale machine code and
compute what the old source did. Measured: with kernels_float's depthwise row kernel broken, the
quantized depthwise tests still passed from the cache and failed only once it was cleared. So every
kernel's cache lives under __pycache__/numba-<hash of every kernel module>, and any change to any of
them starts a fresh cache. numba's CACHE_DIR is set only while a kernel is decorated (that is when
numba fixes its cache path), so other numba users in the process keep their own setting.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable

import numba
from numba import njit

#: every module whose functions a cached kernel may inline
KERNEL_MODULES = ("kernels_float.py", "kernels_quant.py", "jit.py")
OPTIONS = dict(cache=True, nogil=True, boundscheck=False)


def cache_dir_for(package: Path) -> str:
    """The cache directory for the kernel modules as they are in `package` (a directory): in its
    __pycache__, or in the user's cache directory when the package is not writable (an installed copy)."""
    digest = hashlib.sha256()
    for name in KERNEL_MODULES:
        digest.update(name.encode() + b"\0" + (package / name).read_bytes())
    name = f"numba-{digest.hexdigest()[:16]}"
    local = package / "__pycache__"
    if os.access(local if local.exists() else package, os.W_OK):
        return str(local / name)
    return str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlts" / name)


CACHE_DIR = cache_dir_for(Path(__file__).resolve().parent)


def kernel(fn: Callable | None = None, **options: Any) -> Any:
    """`@kernel` or `@kernel(inline="always")`: njit with OPTIONS, cached under CACHE_DIR."""
    def decorate(f: Callable) -> Any:
        previous = numba.config.CACHE_DIR
        numba.config.CACHE_DIR = CACHE_DIR
        try:
            return njit(**{**OPTIONS, **options})(f)
        finally:
            numba.config.CACHE_DIR = previous

    return decorate(fn) if fn is not None else decorate
