"""Finding driver code: `module:factory` references and `.py` files made into checked driver objects. Shared
by the application's plugin loader (mlts.runtime.app.plugins) and by driver service processes, which must
rebuild a driver from a reference they can import."""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from ..enums import ResultCode
from ..errors import MltsError
from ..hal import IDevice

#: Set in every process that hosts a plugin driver (and inherited by its children), so that a
#: driver host never loads the entry-point plugins itself (no process trees of driver services).
NO_PLUGINS_ENV = "MLTS_NO_PLUGINS"


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


def build_driver(ref: str, name: str | None = None) -> IDevice:
    """The factory a driver service calls: the driver called `name` (or the only one) that `ref` makes."""
    os.environ[NO_PLUGINS_ENV] = "1"  # this process hosts a driver: it must not host the plugins too
    return select_driver(make_drivers(ref), ref, name)


def make_drivers(ref: str, args: tuple = (), kwargs: dict | None = None) -> list[IDevice]:
    """`import_factory(ref)(*args, **kwargs)` as a checked list of uniquely named Drivers."""
    return _as_driver_list(_call_factory(import_factory(ref), ref, args, kwargs), ref)


def select_driver(drivers: list[IDevice], ref: str, name: str | None) -> IDevice:
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


def close_driver(driver: Any) -> None:
    """Stop a driver's service, if it has one; a no-op for in-process drivers."""
    close = getattr(driver, "close", None) if getattr(driver, "hosting", None) == "service" else None
    if close is not None:
        try:
            close()
        except Exception:  # closing is best effort: the service exits with its client anyway
            pass


def _call_factory(factory: Callable[..., Any], ref: str, args: tuple = (), kwargs: dict | None = None) -> Any:
    try:
        return factory(*tuple(args), **dict(kwargs or {}))
    except MltsError:
        raise
    except Exception as exc:  # a broken factory is the plugin's fault, reported as such
        raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: the factory raised "
                                             f"{type(exc).__name__}: {exc}") from exc


def _as_driver_list(made: Any, ref: str) -> list[Any]:
    drivers = list(made) if isinstance(made, (list, tuple)) else [made]
    if not drivers:
        raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: the factory returned no driver")
    for d in drivers:
        if not isinstance(d, IDevice):
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: the factory returned "
                                                 f"{type(d).__name__}, not an mlts.runtime.Driver")
        if not isinstance(getattr(d, "name", None), str) or not d.name:
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: a driver has no name")
    names = [d.name for d in drivers]
    if len(set(names)) != len(names):
        raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: driver names repeat: {names}")
    return drivers


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
