"""Finding driver code: `module:factory` references and `.py` files, shared by the plugin loader
and by driver service processes (which must rebuild a driver from a reference they can import);
loading the drivers a spec names (`--driver`, $MLTS_DRIVERS) and the `mlts.drivers` entry points.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .enums import ResultCode
from .errors import MltsError

if TYPE_CHECKING:
    from .hal import Driver
    from .manager import Device


def import_factory(ref: str) -> Callable[..., Any]:
    """`package.module:attr` or `/path/to/file.py:attr` -> the attribute (a driver class or factory).

    A `.py` path without `:attr` resolves to its `create_drivers` (or, failing that, `create_driver`).
    """
    if not isinstance(ref, str) or not ref:
        raise MltsError(ResultCode.BAD_DATA, f"driver reference must be a non-empty string, got {ref!r}")
    module_part, _, attr = ref.rpartition(":")
    if not module_part or "/" in attr or attr.endswith(".py"):
        module_part, attr = ref, ""
    if module_part.endswith(".py"):
        module = _import_path(Path(module_part))
        attrs = [attr] if attr else ["create_drivers", "create_driver"]
    else:
        if not attr:
            raise MltsError(ResultCode.BAD_DATA,
                            f"driver reference {ref!r}: expected 'module:factory' or a path to a .py file")
        try:
            module = importlib.import_module(module_part)
        except Exception as exc:  # an import error in third-party code is the plugin's fault
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: cannot import "
                                                 f"{module_part!r}: {type(exc).__name__}: {exc}") from exc
        attrs = [attr]
    for name in attrs:
        target: Any = module
        try:
            for part in name.split("."):
                target = getattr(target, part)
        except AttributeError:
            continue
        if not callable(target):
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: {name!r} is not callable")
        return target
    raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: {module.__name__} has no "
                                         f"{' or '.join(repr(a) for a in attrs)}")


def _import_path(path: Path):
    path = path.expanduser().resolve()
    if not path.is_file():
        raise MltsError(ResultCode.BAD_DATA, f"driver file {str(path)!r} does not exist")
    name = "mlts_plugin_" + "".join(c if c.isalnum() else "_" for c in path.stem) + f"_{abs(hash(str(path))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise MltsError(ResultCode.BAD_DATA, f"driver file {str(path)!r} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise MltsError(ResultCode.BAD_DATA, f"driver file {str(path)!r} failed to import: "
                                             f"{type(exc).__name__}: {exc}") from exc
    return module


# -- driver specs: what `--driver`, MLTS_DRIVERS and the `mlts.drivers` entry points name --------------
FAULTY_PREFIX = "faulty:"
FAULTY_FACTORY = "mlts.runtime.drivers.faulty:create"
BUILD_DRIVER = "mlts.runtime.plugins:build_driver"
ENTRY_POINT_GROUP = "mlts.drivers"
HOSTINGS = ("service", "in-process")
#: Short names for the built-in drivers that are not devices by default.
ALIASES = {"sample": "mlts.runtime.drivers.sample:sample_drivers"}
#: Set in every process that hosts a plugin driver (and inherited by its children), so that a
#: driver host never loads the entry-point plugins itself (no process trees of driver services).
NO_PLUGINS_ENV = "MLTS_NO_PLUGINS"
#: Overrides the default hosting of plugin and fault drivers ("service" or "in-process").
HOSTING_ENV = "MLTS_DRIVER_HOSTING"
DRIVERS_ENV = "MLTS_DRIVERS"
PROBE_TIMEOUT_S = 120.0


class PluginWarning(UserWarning):
    """A driver plugin that could not be loaded; the other devices stay usable."""


def load_drivers(spec: str, *, hosting: str | None = None) -> list[Driver]:
    """The drivers a spec names: `faulty:<fault>@<stage>[?opts]` (or `faulty:all`), `sample`,
    `package.module:factory`, or `path/to/file.py[:factory]`; a factory returns a Driver or a list.

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


def build_driver(ref: str, name: str | None = None) -> Driver:
    """The factory a driver service calls: the driver called `name` (or the only one) that `ref` makes."""
    os.environ[NO_PLUGINS_ENV] = "1"  # this process hosts a driver: it must not host the plugins too
    return select_driver(make_drivers(ref), ref, name)


def make_drivers(ref: str, args: tuple = (), kwargs: dict | None = None) -> list[Driver]:
    """`import_factory(ref)(*args, **kwargs)` as a checked list of uniquely named Drivers."""
    return _as_driver_list(_call_factory(import_factory(ref), ref, args, kwargs), ref)


def select_driver(drivers: list[Driver], ref: str, name: str | None) -> Driver:
    """The driver called `name`, or the only one when `name` is None."""
    if name is None:
        if len(drivers) != 1:
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r} makes {len(drivers)} drivers "
                                                 f"({', '.join(d.name for d in drivers)}); name the one to build")
        return drivers[0]
    for d in drivers:
        if d.name == name:
            return d
    raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r} makes no driver named {name!r} "
                                         f"(it makes {', '.join(d.name for d in drivers)})")


def entry_point_drivers(*, hosting: str | None = None) -> list[Driver]:
    """Every driver the installed `mlts.drivers` entry points provide. A plugin that fails to load
    (import error, factory error, probe crash, name clash) gives a PluginWarning naming it, never an error.
    """
    import importlib.metadata

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


def register_drivers(specs: Sequence[str], *, hosting: str | None = None) -> list[Device]:
    """Load every spec and make its drivers devices of this process; returns the new Devices.

    All specs are loaded before any is registered, so a bad spec registers nothing.
    """
    from .manager import devices, register_driver

    drivers: list[Driver] = []
    try:
        for spec in specs:
            drivers += load_drivers(spec, hosting=hosting)
        taken = {d.name for d in devices()}
        for d in drivers:
            if d.name in taken:
                raise MltsError(ResultCode.BAD_DATA, f"driver {d.name!r} (from {getattr(d, 'mlts_source', '?')}) "
                                                     "has the name of a device that already exists")
            taken.add(d.name)
    except BaseException:
        for d in drivers:  # the services already started for the good specs
            close_driver(d)
        raise
    return [register_driver(d) for d in drivers]


def close_driver(driver: Any) -> None:
    """Stop a driver's service, if it has one; a no-op for in-process drivers."""
    close = getattr(driver, "close", None) if getattr(driver, "hosting", None) == "service" else None
    if close is not None:
        try:
            close()
        except Exception:  # closing is best effort: the service exits with its client anyway
            pass


# -- helpers ----------------------------------------------------------------------------------------------
def _check_hosting(hosting: str | None, spec: str) -> str | None:
    if hosting is not None and hosting not in HOSTINGS:
        raise MltsError(ResultCode.BAD_DATA, f"driver spec {spec!r}: hosting must be one of "
                                             f"{', '.join(HOSTINGS)}, got {hosting!r}")
    return hosting


def _load_faulty(spec: str, hosting: str) -> list[Any]:
    from .drivers import faulty

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
        from .service import host_driver
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


def _call_factory(factory: Callable[..., Any], ref: str, args: tuple = (), kwargs: dict | None = None) -> Any:
    try:
        return factory(*tuple(args), **dict(kwargs or {}))
    except MltsError:
        raise
    except Exception as exc:  # a broken factory is the plugin's fault, reported as such
        raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: the factory raised "
                                             f"{type(exc).__name__}: {exc}") from exc


def _as_driver_list(made: Any, ref: str) -> list[Any]:
    from .hal import Driver

    drivers = list(made) if isinstance(made, (list, tuple)) else [made]
    if not drivers:
        raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: the factory returned no driver")
    for d in drivers:
        if not isinstance(d, Driver):
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: the factory returned "
                                                 f"{type(d).__name__}, not an mlts.runtime.hal.Driver")
        if not isinstance(getattr(d, "name", None), str) or not d.name:
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: a driver has no name")
    names = [d.name for d in drivers]
    if len(set(names)) != len(names):
        raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: driver names repeat: {names}")
    return drivers


def _probe(ref: str) -> list[str]:
    """The names of the drivers `ref` makes, learnt in a throw-away process (third-party code may
    crash or hang on import; it must not do so here)."""
    from ..childproc import child_env

    env = child_env({NO_PLUGINS_ENV: "1"})
    # os._exit: a plugin's leftover non-daemon threads must not keep the probe alive.
    code = ("import os, sys; del sys.path[0]; from mlts.runtime.plugins import _probe_main; rc = _probe_main(sys.argv[1]); "
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


def _probe_main(ref: str) -> int:
    """Child side of _probe: one JSON line on stdout."""
    os.environ[NO_PLUGINS_ENV] = "1"
    try:
        names = [d.name for d in make_drivers(ref)]
        reply: dict[str, Any] = {"names": names}
    except MltsError as exc:
        reply = {"error": exc.message, "code": int(exc.code)}
    except BaseException as exc:  # even SystemExit from a plugin becomes an answer
        reply = {"error": f"driver reference {ref!r}: {type(exc).__name__}: {exc}", "code": int(ResultCode.BAD_DATA)}
    sys.stdout.write("\n" + json.dumps(reply) + "\n")
    sys.stdout.flush()
    return 0
