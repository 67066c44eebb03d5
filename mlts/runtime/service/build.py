"""Building a driver from a reference: the one step shared by in-process hosting and service processes."""
from __future__ import annotations

from ..hal import IDevice
from ..drivers.loading import make_drivers, select_driver


def build_driver(factory_ref: str, args: tuple = (), kwargs: dict | None = None, name: str | None = None) -> IDevice:
    """`import_factory(factory_ref)(*args, **kwargs)`; from a list of drivers, the one called `name` (or the only one)."""
    return select_driver(make_drivers(factory_ref, args, kwargs), factory_ref, name)
