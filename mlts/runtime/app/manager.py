"""Device discovery (ANeuralNetworks_getDevice*): the drivers this process can use, as Device handles."""
from __future__ import annotations

import threading
import warnings
from typing import Any, Sequence

from .. import vlog
from ..drivers import ReferenceDriver
from ..drivers.fast import FastDriver
from ..drivers.loading import close_driver
from ..enums import DeviceType, ResultCode
from ..errors import MltsError, bad_data
from ..hal import Capabilities, IDevice
from .plugins import PluginWarning, entry_point_drivers, load_drivers


class Device:
    """A handle on one driver: name, type, version, feature level, capabilities."""

    def __init__(self, driver: IDevice) -> None:
        self.driver = driver

    @property
    def name(self) -> str:
        return self.driver.name

    @property
    def type(self) -> DeviceType:
        return DeviceType(self.driver.device_type)

    @property
    def version(self) -> str:
        return self.driver.version

    @property
    def feature_level(self) -> int:
        return int(self.driver.feature_level)

    @property
    def hosting(self) -> str:
        return getattr(self.driver, "hosting", "in-process")

    @property
    def capabilities(self) -> Capabilities:
        return self.driver.get_capabilities()

    def wait(self) -> None:
        """ANeuralNetworksDevice_wait: block until the device is ready."""
        self.driver.wait_for_ready()

    def __repr__(self) -> str:
        return f"<Device {self.name} {self.type.name} v{self.version} fl{self.feature_level} {self.hosting}>"


# Re-entrant: an in-process plugin factory may itself ask for devices() while they are being loaded.
_lock = threading.RLock()
_devices: list[Device] | None = None


def _default_drivers() -> list[IDevice]:
    return [ReferenceDriver(), FastDriver()]


def devices() -> list[Device]:
    """Every available device; nnapi-reference is always among them."""
    global _devices
    with _lock:
        if _devices is None:
            _devices = [Device(d) for d in _default_drivers()]
            _devices.extend(_entry_point_devices(_devices))
            vlog.log("manager", "devices: " + ", ".join(d.name for d in _devices))
        return list(_devices)


def _entry_point_devices(present: list[Device]) -> list[Device]:
    """Installed `mlts.drivers` plugins are devices like the built-in ones (pip install, then
    `mlts devices` lists them); $MLTS_NO_PLUGINS=1 turns that off. A broken plugin only warns."""
    try:
        found = entry_point_drivers()
    except Exception as exc:  # the built-in devices must stay usable whatever the plugins do
        warnings.warn(f"mlts: loading the driver plugins failed: {exc}", PluginWarning, 3)
        return []
    taken = {d.name for d in present}
    out = []
    for driver in found:
        if driver.name in taken:
            warnings.warn(f"mlts: plugin driver {driver.name!r} has the name of a built-in device; skipped",
                          PluginWarning, 3)
            close_driver(driver)
            continue
        taken.add(driver.name)
        out.append(Device(driver))
    return out


def register_driver(driver: IDevice) -> Device:
    """Make a driver available as a device of this process (plugins, tests)."""
    if not isinstance(driver, IDevice):
        raise bad_data(f"register_driver: expected a Driver, got {type(driver).__name__}")
    devices()
    with _lock:
        assert _devices is not None
        if any(d.name == driver.name for d in _devices):
            raise bad_data(f"register_driver: a device named {driver.name!r} already exists")
        device = Device(driver)
        _devices.append(device)
        return device


def unregister_driver(name: str) -> None:
    devices()
    with _lock:
        assert _devices is not None
        _devices[:] = [d for d in _devices if d.name != name]


def get_device(name: str) -> Device:
    for d in devices():
        if d.name == name:
            return d
    raise MltsError(4, f"no device named {name!r} (available: {', '.join(d.name for d in devices())})")


def check_device_list(devs: Any, what: str) -> list[Device]:
    if isinstance(devs, Device):
        devs = [devs]
    if not isinstance(devs, (list, tuple)) or not devs:
        raise bad_data(f"{what}: expected a non-empty list of devices")
    known = devices()
    out = []
    for d in devs:
        if isinstance(d, str):
            d = get_device(d)
        if not isinstance(d, Device) or all(d is not k for k in known):
            raise bad_data(f"{what}: {d!r} is not an available device")
        if d in out:
            raise bad_data(f"{what}: device {d.name} listed twice")
        out.append(d)
    return out


def supported_operations_for_devices(model: Any, devs: Sequence[Device]) -> list[bool]:
    """Per operation of `model` (in the order they were added): does any of `devs` support it?"""
    devs = check_device_list(devs, "get_supported_operations_for_devices")
    hal = model.hal_model()
    run_order = model._run_order
    flags_in_run_order = [False] * len(hal.main.operations)
    for d in devs:
        try:
            flags = list(d.driver.get_supported_operations(hal))
        except Exception:  # MltsError or a driver bug: the device supports nothing here
            continue
        if len(flags) != len(flags_in_run_order):  # a malformed answer counts as no support
            continue
        flags_in_run_order = [a or bool(b) for a, b in zip(flags_in_run_order, flags)]
    result = [False] * len(run_order)
    for pos, op_index in enumerate(run_order):
        result[op_index] = flags_in_run_order[pos]
    return result


def register_drivers(specs: Sequence[str], *, hosting: str | None = None) -> list[Device]:
    """Load every spec and make its drivers devices of this process; returns the new Devices.

    All specs are loaded before any is registered, so a bad spec registers nothing.
    """
    drivers: list[IDevice] = []
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
