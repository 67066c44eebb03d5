"""`mlts benchmark --threads N`: the thread pools every benchmark run pins (default 1).

Why: on a shared machine a multi-threaded BLAS, OpenMP or numba pool contends with whatever else runs,
and latency then measures the contention. On this project's 2-core machine, with other work running,
mlts-fast's median on mobilenet_v2_0.35_128_quant was 72 ms with numpy's BLAS at its default 2 threads
and 7.8 ms at 1 (on an idle machine 2 threads win by 7-20%). One thread per pool by default makes
drivers comparable and runs repeatable; `--threads N` measures what N threads give, on purpose.

What is pinned, and how:
- the environment (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS): read by each library when
  it loads, so it covers driver services started afterwards (they inherit os.environ; `mlts benchmark`
  pins before it registers any driver) and libraries loaded later. NUMBA_NUM_THREADS goes to child
  processes only (mlts.childproc): numba rereads it in this process at every compilation and refuses
  a value other than the pool it already launched;
- in this process, threadpoolctl's limits on every BLAS and OpenMP library already loaded; BLAS limits
  are process-wide, OpenMP's and numba's are per thread, so every stage thread of the benchmark
  (stage_timeout.Watchdog runs stages in worker threads) applies them again as it starts
  (`PinnedWatchdog`; about 0.03 ms);
- numba through `numba.set_num_threads`, within its allowed range (1 to numba.config.NUMBA_NUM_THREADS,
  fixed when numba is imported: numba imported after the pinning allows exactly N).

The pinning is a context manager and restores what it changed (thread limits, numba's count in the
calling thread, the environment), so library callers and tests get their process back; only numba's
upper bound stays N when the pinning was what imported numba.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Callable

from mlts import childproc
from mlts.runtime import MltsError, ResultCode

from .stage_timeout import Tick, Watchdog

#: The documented default of `mlts benchmark`: one thread per pool.
DEFAULT_THREADS = 1
#: Environment variables that set thread pools when a library loads (in this process or a driver service).
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
#: Of those, the ones set in this process's own environment (the rest only in its children's).
OWN_THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: threadpoolctl's fields kept in environment.json (the path says which copy of a library was loaded).
THREADPOOL_FIELDS = ("user_api", "internal_api", "prefix", "version", "num_threads", "threading_layer",
                     "architecture", "filepath")


def parse_threads(value: Any, what: str = "--threads") -> int:
    """`value` (an int, or the option's text) as a thread count >= 1; anything else is a BAD_DATA error
    naming `what`, one line."""
    given = value
    if isinstance(value, str):
        try:
            value = int(value.strip(), 10)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MltsError(ResultCode.BAD_DATA, f"{what} must be an integer >= 1 (threads per pool), got {given!r}")
    return value


def _numba() -> Any:
    """numba when installed (imported now if it was not), else None."""
    if "numba" not in sys.modules and importlib.util.find_spec("numba") is None:
        return None
    try:
        import numba
    except Exception:  # a broken numba install must not stop a benchmark of other drivers
        return None
    return numba


def _threadpoolctl() -> Any:
    """threadpoolctl (a dependency of mlts), or a one-line error saying how to get it."""
    try:
        import threadpoolctl
    except ImportError:
        raise MltsError(ResultCode.OP_FAILED, "threadpoolctl is not installed: mlts benchmark needs it to pin "
                                              "thread pools (pip install -e . again, or pip install "
                                              "threadpoolctl)") from None
    return threadpoolctl


def threadpools() -> list[dict]:
    """threadpoolctl's view of the BLAS and OpenMP libraries loaded in this process, as seen from the
    calling thread (OpenMP's count is per thread)."""
    return [{k: p.get(k) for k in THREADPOOL_FIELDS} for p in _threadpoolctl().threadpool_info()]


def thread_counts(pools: list[dict] | None = None) -> dict:
    """{"blas", "openmp", "numba"}: the threads each pool would use now, from the calling thread; the
    largest where several libraries of a kind are loaded; None where none is (numba: not imported)."""
    if pools is None:
        try:
            pools = threadpools()
        except Exception:  # threadpoolctl cannot inspect some exotic loaders: those counts stay unknown
            pools = []
    counts: dict = {"blas": None, "openmp": None, "numba": None}
    for p in pools:
        api, n = p.get("user_api"), p.get("num_threads")
        if api in ("blas", "openmp") and isinstance(n, int):
            counts[api] = n if counts[api] is None else max(counts[api], n)
    numba = sys.modules.get("numba")
    if numba is not None:
        try:
            counts["numba"] = int(numba.get_num_threads())
        except Exception:  # no threading layer could start
            pass
    return counts


class ThreadPinning:
    """Pins BLAS, OpenMP and numba to `threads` for the `with` block (see the module's docstring)."""

    def __init__(self, threads: int = DEFAULT_THREADS) -> None:
        self.threads = parse_threads(threads, "threads")
        self._env: dict[str, str | None] = {}
        self._limits: Any = None
        self._controller: Any = None
        self._numba: Any = None
        self._numba_before: int | None = None

    @property
    def numba_threads(self) -> int | None:
        """What numba is set to: `threads` within its allowed range (None without numba)."""
        if self._numba is None:
            return None
        return max(1, min(self.threads, int(self._numba.config.NUMBA_NUM_THREADS)))

    def __enter__(self) -> "ThreadPinning":
        controller_class = _threadpoolctl().ThreadpoolController
        value = str(self.threads)
        self._env = {k: os.environ.get(k) for k in OWN_THREAD_ENV}
        os.environ.update({k: value for k in OWN_THREAD_ENV})
        childproc.CHILD_ENV["NUMBA_NUM_THREADS"] = value  # driver services' numba pools
        try:
            self._numba = _numba()
            if self._numba is not None:
                try:
                    self._numba_before = int(self._numba.get_num_threads())  # also starts its threading layer
                except Exception:  # no threading layer: numba runs no parallel code anyway
                    self._numba = None
            # After numba: its threading layer may have loaded an OpenMP library just now.
            self._controller = controller_class()
            self._limits = self._controller.limit(limits=self.threads)
            self.apply_to_current_thread()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def apply_to_current_thread(self) -> None:
        """Apply the per-thread limits (OpenMP, numba) to the calling thread; cheap (~0.03 ms)."""
        if self._controller is not None:
            omp = self._controller.select(user_api="openmp")
            if omp.lib_controllers:
                omp.limit(limits=self.threads)
        n = self.numba_threads
        if n is not None:
            try:
                self._numba.set_num_threads(n)
            except Exception:  # the layer failed in this thread; thread_counts reports what applies
                pass

    def __exit__(self, *exc: object) -> None:
        if self._limits is not None:
            self._limits.restore_original_limits()
            self._limits = None
        if self._numba is not None and self._numba_before is not None:
            try:
                self._numba.set_num_threads(max(1, min(self._numba_before,
                                                       int(self._numba.config.NUMBA_NUM_THREADS))))
            except Exception:
                pass
        for k, v in self._env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._env = {}
        childproc.CHILD_ENV.pop("NUMBA_NUM_THREADS", None)
        self._controller = None


class PinnedWatchdog(Watchdog):
    """A Watchdog whose stage threads apply the pinning's per-thread limits before the stage's work:
    OpenMP and numba thread counts are per thread, and each stage runs in a new one."""

    def __init__(self, timeout_s: float | None, pinning: ThreadPinning | None, **kwargs: Any) -> None:
        super().__init__(timeout_s, **kwargs)
        self.pinning = pinning

    def run(self, stage: str, fn: Callable[[Tick], Any], *args: Any, **kwargs: Any) -> Any:
        pinning = self.pinning
        if pinning is None:
            return super().run(stage, fn, *args, **kwargs)

        def pinned(tick: Tick) -> Any:
            pinning.apply_to_current_thread()
            return fn(tick)

        return super().run(stage, pinned, *args, **kwargs)
