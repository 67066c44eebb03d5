"""Python child processes (driver services, stress tests, stress clients, plugin probes) that import
the same mlts as their parent, whatever the current directory holds, and die with their parent.

`python -m pkg.mod` puts the current directory first on sys.path, so a folder named `mlts/` where the
user happens to stand would shadow the installed package in every child: every stress test would
crash and the driver would be blamed. Children therefore start through a tiny bootstrap that drops
that entry, with the directory of the parent's own mlts first on PYTHONPATH.
"""
from __future__ import annotations

import os
import sys
from typing import Mapping, Sequence

import mlts

#: runs a module as `python -m` would, without the current directory on sys.path
_BOOTSTRAP = ("import runpy, sys; del sys.path[0]; sys.argv[:] = sys.argv[1:]; "
              "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def mlts_root() -> str:
    """The directory holding the mlts package this process imported."""
    return os.path.dirname(os.path.dirname(os.path.abspath(mlts.__file__)))


def python_path() -> str:
    """PYTHONPATH for a child: our mlts first, then this process's sys.path (so the child imports every
    driver module the parent can)."""
    entries = [mlts_root()]
    for p in sys.path:
        p = os.path.abspath(p) if p else os.getcwd()
        if p not in entries:
            entries.append(p)
    return os.pathsep.join(entries)


def module_command(module: str, *args: str) -> list[str]:
    """The argv that runs `module` as a script (its `if __name__ == "__main__"`) in a child Python."""
    return [sys.executable, "-c", _BOOTSTRAP, module, *args]


#: variables for children only (not for this process: e.g. NUMBA_NUM_THREADS, which numba rereads here
#: at every compilation and refuses to change once its pool runs); mlts.benchmark.threads sets it
CHILD_ENV: dict[str, str] = {}


def child_env(extra: Mapping[str, str] | None = None, drop: Sequence[str] = ()) -> dict[str, str]:
    """Our environment for a child, with PYTHONPATH from `python_path()` and CHILD_ENV."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = python_path()
    env.update(CHILD_ENV)
    env.update(extra or {})
    return env


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (PR_SET_PDEATHSIG), so a SIGKILLed `mlts stress`
    leaves no worker behind; elsewhere a no-op (process-group kills still apply)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


__all__ = ["CHILD_ENV", "child_env", "die_with_parent", "module_command", "mlts_root", "python_path"]
