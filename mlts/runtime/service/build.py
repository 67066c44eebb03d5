"""Building a driver from a reference: the one step shared by in-process hosting and service processes."""
from __future__ import annotations

from typing import Any

from ..enums import ResultCode
from ..errors import MltsError
from ..hal import Driver
from ..plugins import import_factory


def build_driver(factory_ref: str, args: tuple = (), kwargs: dict | None = None, name: str | None = None) -> Driver:
    """`import_factory(factory_ref)(*args, **kwargs)`; from a list of drivers, the one called `name` (or the only one)."""
    factory = import_factory(factory_ref)
    try:
        made: Any = factory(*tuple(args), **dict(kwargs or {}))
    except MltsError as e:
        raise MltsError(e.code, f"driver reference {factory_ref!r}: {e.message}") from None
    except Exception as e:  # third-party code: its failure is a bad reference, not our crash
        raise MltsError(ResultCode.BAD_DATA, f"driver reference {factory_ref!r}: the factory raised "
                                             f"{type(e).__name__}: {e}") from None
    if isinstance(made, Driver):
        candidates = [made]
    elif isinstance(made, (list, tuple)) and all(isinstance(d, Driver) for d in made):
        candidates = list(made)
    else:
        raise MltsError(ResultCode.BAD_DATA, f"driver reference {factory_ref!r}: the factory returned "
                                             f"{type(made).__name__}, not a Driver or a list of Drivers")
    if name is not None:
        named = [d for d in candidates if d.name == name]
        if not named:
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {factory_ref!r} has no driver named {name!r} "
                                                 f"(it has {', '.join(repr(d.name) for d in candidates) or 'none'})")
        return named[0]
    if len(candidates) != 1:
        raise MltsError(ResultCode.BAD_DATA, f"driver reference {factory_ref!r} gives {len(candidates)} drivers "
                                             f"({', '.join(repr(d.name) for d in candidates)}); name the one to host")
    return candidates[0]
