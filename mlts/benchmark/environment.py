"""What machine and software a run measured: latency means little without it, and merged reports
from several machines need it to tell their rows apart. Written once per run as environment.json,
by `mlts benchmark` after it has pinned the thread pools (threads.ThreadPinning), so `threadpools`,
`threads` and `env` show what the run used, and `requested_threads` what it asked for."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ..fileio import atomic_write
from .conditions import load_average
from .record_schema import to_jsonable, utc_now
from .records import ENVIRONMENT_FILE
from .threads import thread_counts, threadpools

ENVIRONMENT_SCHEMA_VERSION = 1
#: Environment variables that change what a benchmark measures (thread pools, mlts settings).
RELEVANT_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "NUMBA_NUM_THREADS")
PACKAGES = ("numpy", "pandas", "psutil", "jinja2", "onnx", "pillow", "numba", "threadpoolctl")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "Processor", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                 text=True, timeout=5)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown"


def _cpu() -> dict:
    info: dict = {"model": _cpu_model(), "architecture": platform.machine(), "logical_cores": os.cpu_count()}
    try:
        info["usable_cores"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        info["usable_cores"] = os.cpu_count()
    try:
        import psutil

        info["physical_cores"] = psutil.cpu_count(logical=False)
        freq = psutil.cpu_freq()
        info["max_frequency_mhz"] = (freq.max or freq.current) if freq else None
    except Exception:  # psutil cannot read everything in every container; what it can is enough
        info.setdefault("physical_cores", None)
        info.setdefault("max_frequency_mhz", None)
    return info


def _memory() -> dict:
    try:
        import psutil

        vm = psutil.virtual_memory()
        return {"total_bytes": vm.total, "available_bytes": vm.available}
    except Exception:
        return {"total_bytes": None, "available_bytes": None}


def _numpy(pools: list[dict] | None) -> dict:
    import numpy as np

    info: dict = {"version": np.__version__, "blas": None,
                  "threadpools": None if pools is None else
                  [{k: p.get(k) for k in ("internal_api", "version", "num_threads", "threading_layer")}
                   for p in pools]}
    try:
        config = np.show_config(mode="dicts")  # numpy >= 1.26
        deps = (config or {}).get("Build Dependencies", {})
        info["blas"] = {k: v for k, v in deps.get("blas", {}).items()
                        if k in ("name", "version", "openblas configuration", "found")} or None
    except Exception:  # an older numpy prints instead of returning; the version alone will do
        pass
    return info


def _threadpools() -> list[dict] | None:
    try:
        return threadpools()
    except Exception:  # threadpoolctl cannot inspect some exotic loaders; the rest of the file still helps
        return None


def _packages() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_info(path: str | os.PathLike | None = None) -> dict:
    """Commit and dirty flag of the mlts checkout, or nulls when mlts is not run from one.

    Read-only git: `--no-optional-locks` keeps `git status` from refreshing the index, and the
    checkout must be mlts's own (an installed mlts inside some other repository is not attributed).
    """
    pkg_dir = Path(path) if path is not None else Path(__file__).resolve().parents[1]
    none = {"commit": None, "dirty": None}

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "--no-optional-locks", "-C", str(pkg_dir), *args],
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != pkg_dir.parent.resolve():
        return none
    commit = git("rev-parse", "HEAD")
    if not commit:
        return none
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def collect_environment(requested_threads: int | None = None) -> dict:
    """A JSON-ready description of this machine and software, for environment.json and the report.
    `requested_threads`: what `mlts benchmark --threads` asked for (None outside a benchmark run)."""
    import mlts

    pools = _threadpools()
    return to_jsonable({
        "schema_version": ENVIRONMENT_SCHEMA_VERSION,
        "collected_at": utc_now(),
        "hostname": platform.node(),
        "cpu": _cpu(),
        "memory": _memory(),
        "os": {"system": platform.system(), "release": platform.release(), "version": platform.version(),
               "platform": platform.platform()},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "numpy": _numpy(pools),
        "threadpools": pools,
        "threads": thread_counts(pools) if pools is not None else None,
        "requested_threads": requested_threads,
        "load_average_at_start": load_average(),
        "packages": _packages(),
        "mlts": {"version": getattr(mlts, "__version__", None), **git_info()},
        "env": {k: os.environ[k] for k in sorted(os.environ)
                if k in RELEVANT_ENV or k.startswith("MLTS_")},
    })


def write_environment(run_dir: str | os.PathLike, environment: dict | None = None, *,
                      requested_threads: int | None = None) -> Path:
    """Write `<run_dir>/environment.json` atomically (a killed run never leaves half of it)."""
    env = collect_environment(requested_threads) if environment is None else to_jsonable(environment)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return atomic_write(run_dir / ENVIRONMENT_FILE, json.dumps(env, indent=2, sort_keys=False) + "\n")
