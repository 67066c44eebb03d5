"""Driver plugins: the drivers a spec names (`--driver`, $MLTS_DRIVERS), where each runs (in-process or as
a driver service), and the `mlts.drivers` entry points. Turning a reference into driver objects is
mlts.runtime.drivers.loading's job; making drivers devices is the manager's."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from ..drivers import faulty
from ..drivers.loading import NO_PLUGINS_ENV, close_driver, make_drivers
from ..enums import ResultCode
from ..errors import MltsError
from ..hal import IDevice


# -- driver specs: what `--driver`, MLTS_DRIVERS and the `mlts.drivers` entry points name --------------
FAULTY_PREFIX = "faulty:"
FAULTY_FACTORY = "mlts.runtime.drivers.faulty:create"
BUILD_DRIVER = "mlts.runtime.drivers.loading:build_driver"
ENTRY_POINT_GROUP = "mlts.drivers"
HOSTINGS = ("service", "in-process")
#: Short names for the built-in drivers that are not devices by default.
ALIASES = {"sample": "mlts.runtime.drivers.sample:sample_drivers"}
#: Overrides the default hosting of plugin and fault drivers ("service" or "in-process").
HOSTING_ENV = "MLTS_DRIVER_HOSTING"
DRIVERS_ENV = "MLTS_DRIVERS"
PROBE_TIMEOUT_S = 120.0


class PluginWarning(UserWarning):
    """A driver plugin that could not be loaded; the other devices stay usable."""


def load_drivers(spec: str, *, hosting: str | None = None) -> list[IDevice]:
    """The drivers a spec names: `faulty:<fault>@<stage>[?opts]` (or `faulty:all`), `sample`,
    `package.module:factory`, or `path/to/file.py[:factory]`; a factory returns a IDevice or a list.

    Hosting: fault drivers and third-party drivers run as services (their own process, so a crash
    or a hang cannot take the caller down); built-in drivers (modules under `mlts.`) run in-process.
    `hosting` (or $MLTS_DRIVER_HOSTING) overrides that for every spec.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise MltsError(ResultCode.BAD_DATA, f"driver spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    hosting = _check_hosting(hosting if hosting is not None else os.environ.get(HOSTING_ENV) or None, spec)
    if spec.startswith(FAULTY_PREFIX):
        return _load_faulty(spec, hosting or "service")
    ref = _absolute_ref(ALIASES.get(spec, spec))
    builtin = not ref.split(":", 1)[0].endswith(".py") and ref.split(":", 1)[0].split(".")[0] == "mlts"
    hosting = hosting or ("in-process" if builtin else "service")
    if hosting == "service" and _service_host(spec) is None:
        hosting = "in-process"
    if hosting == "in-process":
        drivers = make_drivers(ref)
        for d in drivers:
            _mark_source(d, spec)
        return drivers
    return _host_all([(BUILD_DRIVER, (ref, name), name) for name in _probe(ref)], spec)


def entry_point_drivers(*, hosting: str | None = None) -> list[IDevice]:
    """Every driver the installed `mlts.drivers` entry points provide. A plugin that fails to load
    (import error, factory error, probe crash, name clash) gives a PluginWarning naming it, never an error.
    """
    if os.environ.get(NO_PLUGINS_ENV, "").strip() not in ("", "0"):
        return []
    try:
        points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception as exc:  # a broken distribution on sys.path: no plugins, but say why
        warnings.warn(f"mlts: cannot list the {ENTRY_POINT_GROUP!r} entry points: {exc}", PluginWarning, 2)
        return []
    drivers: list[Any] = []
    seen: set[str] = set()
    for point in sorted(points, key=lambda p: p.name):
        where = f"driver plugin {point.name!r} ({point.value}" + (
            f", from {point.dist.name} {point.dist.version})" if getattr(point, "dist", None) else ")")
        try:
            found = load_drivers(point.value, hosting=hosting)
        except Exception as exc:
            warnings.warn(f"mlts: {where} could not be loaded: {exc}", PluginWarning, 2)
            continue
        for d in found:
            if d.name in seen:
                warnings.warn(f"mlts: {where}: a driver named {d.name!r} is already loaded; skipped", PluginWarning, 2)
                close_driver(d)
                continue
            seen.add(d.name)
            _mark_source(d, f"entry point {point.name}")
            drivers.append(d)
    return drivers


def driver_specs(specs: Sequence[str] | None = (), *, environ: bool = True) -> list[str]:
    """The specs of one run: $MLTS_DRIVERS (comma-separated) first, then `specs` (e.g. `--driver`s)."""
    out: list[str] = []
    if environ:
        out += [s.strip() for s in os.environ.get(DRIVERS_ENV, "").split(",") if s.strip()]
    out += [s.strip() for s in (specs or ()) if s and s.strip()]
    return list(dict.fromkeys(out))


def is_builtin_spec(spec: str) -> bool:
    """Specs that name only mlts's own code (fault drivers, the sample drivers, `mlts.` modules)."""
    spec = spec.strip()
    if spec.startswith(FAULTY_PREFIX) or spec in ALIASES:
        return True
    module = spec.rpartition(":")[0] or spec
    return not module.endswith(".py") and "/" not in module and module.split(".")[0] == "mlts"


def normal_spec(spec: str) -> str:
    """A spec with its .py path made absolute (so a run resumed from another directory still finds it and
    a spec given again matches the recorded one)."""
    spec = spec.strip()
    module, sep, attr = spec.rpartition(":")
    if not module or "/" in attr or attr.endswith(".py"):
        module, sep, attr = spec, "", ""
    if module.endswith(".py"):
        return str(Path(module).expanduser().resolve()) + (sep + attr if attr else "")
    return spec


def recorded_specs(recorded: Sequence[Any], given: Sequence[str], *, trusted: bool, source: str,
                   trust_flag: str) -> list[str]:
    """The driver specs named inside a data file (a run's run.json, a saved graph) that may be loaded:
    those not given again on the command line (`given`, $MLTS_DRIVERS included) are imported only when
    they name mlts's own code or `trusted` is set; otherwise BAD_DATA naming them and `trust_flag`
    (data copied from elsewhere must not run code by being read)."""
    known = {normal_spec(s) for s in driver_specs(list(given))}
    extra = list(dict.fromkeys(s for s in recorded if isinstance(s, str) and s.strip() and normal_spec(s) not in known))
    untrusted = [s for s in extra if not is_builtin_spec(s)]
    if untrusted and not trusted:
        names = " ".join(f"--driver {s}" for s in untrusted)
        raise MltsError(ResultCode.BAD_DATA, f"{source} names driver code to import "
                                             f"({', '.join(repr(s) for s in untrusted)}); it is loaded only when "
                                             f"given again ({names}) or with {trust_flag}")
    return extra


# -- helpers ----------------------------------------------------------------------------------------------
def _check_hosting(hosting: str | None, spec: str) -> str | None:
    if hosting is not None and hosting not in HOSTINGS:
        raise MltsError(ResultCode.BAD_DATA, f"driver spec {spec!r}: hosting must be one of "
                                             f"{', '.join(HOSTINGS)}, got {hosting!r}")
    return hosting


def _load_faulty(spec: str, hosting: str) -> list[Any]:
    rest = spec[len(FAULTY_PREFIX):].strip()
    parsed = [faulty.parse_spec(s) for s in faulty.fault_specs()] if rest == "all" else [faulty.parse_spec(spec)]
    if hosting == "service" and _service_host(spec) is None:
        hosting = "in-process"
    if hosting == "in-process":
        drivers = [faulty.FaultyDriver(p) for p in parsed]
        for d in drivers:
            _mark_source(d, str(d.spec))
        return drivers
    return _host_all([(FAULTY_FACTORY, (str(p),), p.name) for p in parsed], spec)


def _service_host(spec: str) -> Callable[..., Any] | None:
    """`mlts.runtime.service.host_driver`, or None (with a warning) where driver services are missing."""
    try:
        from ..service import host_driver
    except ImportError as exc:
        warnings.warn(f"mlts: driver services are not available ({exc}); {spec!r} runs in-process",
                      PluginWarning, 4)
        return None
    return host_driver


def _host_all(jobs: list[tuple[str, tuple, str]], spec: str) -> list[Any]:
    """Driver services for (factory_ref, args, name) jobs, started in parallel (each start is a
    process start plus imports); if any fails to start, the others are stopped and the error raised."""
    from concurrent.futures import ThreadPoolExecutor

    host_driver = _service_host(spec)
    assert host_driver is not None  # checked by the caller

    def start(job: tuple[str, tuple, str]) -> Any:
        factory_ref, args, name = job
        return host_driver(factory_ref, args, {}, name=name, hosting="service")

    with ThreadPoolExecutor(max_workers=max(1, min(8, len(jobs)))) as pool:
        futures = [pool.submit(start, job) for job in jobs]
    drivers, error = [], None
    for future in futures:
        try:
            drivers.append(future.result())
        except Exception as exc:
            error = error or exc
    if error is not None:
        for d in drivers:
            close_driver(d)
        if isinstance(error, MltsError):
            raise error
        raise MltsError(ResultCode.OP_FAILED, f"driver spec {spec!r}: starting its service failed: "
                                              f"{type(error).__name__}: {error}")
    for d in drivers:
        _mark_source(d, spec)
    return drivers


def _mark_source(driver: Any, source: str) -> None:
    """Remember where a driver came from, for `mlts devices --json`."""
    try:
        driver.mlts_source = source
    except Exception:  # a driver with __slots__ or a read-only attribute: fine, it is only a label
        pass


def _absolute_ref(ref: str) -> str:
    """A `.py` reference with an absolute path, so that a service started elsewhere finds the file."""
    return normal_spec(ref)


def _probe(ref: str) -> list[str]:
    """The names of the drivers `ref` makes, learnt in a throw-away process (third-party code may
    crash or hang on import; it must not do so here)."""
    from ...childproc import child_env

    env = child_env({NO_PLUGINS_ENV: "1"})
    # os._exit: a plugin's leftover non-daemon threads must not keep the probe alive.
    code = ("import os, sys; del sys.path[0]; from mlts.runtime.drivers.loading import _probe_main; rc = _probe_main(sys.argv[1]); "
            "sys.stdout.flush(); sys.stderr.flush(); os._exit(rc)")
    try:
        proc = subprocess.run([sys.executable, "-c", code, ref], env=env, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise MltsError(ResultCode.UNAVAILABLE_DEVICE, f"driver reference {ref!r}: creating its drivers did not "
                                                       f"finish within {PROBE_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise MltsError(ResultCode.UNAVAILABLE_DEVICE, f"driver reference {ref!r}: cannot start a process "
                                                       f"to load it: {exc}") from None
    answer = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    try:
        reply = json.loads(answer)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        tail = proc.stderr.strip().splitlines()[-3:]
        raise MltsError(ResultCode.DEAD_OBJECT, f"driver reference {ref!r}: the process loading it died "
                                                f"(exit status {proc.returncode})"
                        + (": " + " | ".join(tail) if tail else ""))
    if "error" in reply:
        raise MltsError(ResultCode(reply.get("code", ResultCode.BAD_DATA)), reply["error"])
    return [str(n) for n in reply["names"]]


