"""Stress targets: which drivers a run tests, and how a test process loads the one it tests.

Each test runs in a fresh process, and driver services belong to the process that started them, so
the parent only learns the targets (name, the spec that makes the driver, how to host it in a
service) and every test process loads its own driver from that. `all-devices` is the target with
no named device: compilations there use every device with runtime partitioning and CPU fallback.
"""
from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from ..runtime import Device, MltsError, ResultCode, devices, get_device
from ..runtime.drivers import REFERENCE_DEVICE_NAME

ALL_DEVICES = "all-devices"
REFERENCE = REFERENCE_DEVICE_NAME


@dataclass(frozen=True)
class Target:
    """One driver under test (or ALL_DEVICES)."""

    name: str
    spec: str | None = None         # the --driver spec that makes just this driver (None: built in)
    hosting: str = "in-process"     # how the run hosts it by default
    service_ref: str | None = None  # `module:factory` to host a built-in driver in a service

    def to_job(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_job(cls, d: dict[str, Any]) -> "Target":
        return cls(**{k: d.get(k) for k in ("name", "spec", "hosting", "service_ref") if k in d})


def minimal_spec(device: Device) -> str | None:
    """The spec that makes this driver alone (a fault driver of `faulty:all` -> its own fault)."""
    d = device.driver
    from ..runtime.app.plugins import FAULTY_FACTORY

    spec = getattr(d, "spec", None)
    if spec is not None and type(d).__name__ == "FaultyDriver":
        return str(spec)
    if getattr(d, "factory_ref", None) == FAULTY_FACTORY and getattr(d, "_args", None):
        return str(d._args[0])
    source = getattr(d, "mlts_source", None)
    if isinstance(source, str) and not source.startswith("entry point"):
        return source
    return None


def service_ref(device: Device) -> str | None:
    """`module:Class` of an in-process driver whose class builds with no arguments (so a service can)."""
    cls = type(device.driver)
    if device.hosting != "in-process" or "<" in cls.__qualname__:
        return None
    try:
        inspect.signature(cls).bind()
    except (TypeError, ValueError):
        return None
    return f"{cls.__module__}:{cls.__qualname__}"


def discover_targets(include_reference: bool = False) -> list[Target]:
    """The devices of this process (built in, entry points, registered --driver specs) as targets,
    nnapi-reference only when asked, then ALL_DEVICES."""
    out = []
    for d in devices():
        if d.name == REFERENCE and not include_reference:
            continue
        out.append(Target(d.name, minimal_spec(d), d.hosting, service_ref(d)))
    out.append(Target(ALL_DEVICES))
    return out


def select_targets(targets: Sequence[Target], names: Sequence[str] | None) -> list[Target]:
    """`--drivers` filter; an unknown name is an error naming the available ones."""
    if not names:
        return list(targets)
    by_name = {t.name: t for t in targets}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise MltsError(ResultCode.BAD_DATA, f"--drivers: unknown {', '.join(unknown)} (available: "
                                             f"{', '.join(by_name)}; nnapi-reference needs --include-reference)")
    return [by_name[n] for n in dict.fromkeys(names)]


def open_target(target: Target, specs: Sequence[str], hosting: str | None,
                log: Callable[[str], None] = print) -> tuple[Device | None, Callable[[], None]]:
    """In a test process: load what the target needs and return (its Device, or None for
    ALL_DEVICES; a function that undoes it: services stopped, devices unregistered, a built-in
    device that was re-hosted in a service put back). `hosting` overrides the run's hosting."""
    from ..runtime import register_driver, unregister_driver
    from ..runtime.app.manager import register_drivers

    registered: list[Device] = []
    replaced: list[Device] = []

    def undo() -> None:
        close_devices(registered)
        for d in registered:
            unregister_driver(d.name)
        for d in replaced:
            register_driver(d.driver)

    if target.name == ALL_DEVICES:
        registered += register_drivers(list(specs), hosting=hosting) if specs else []
        return None, undo
    if target.spec:
        registered += register_drivers([target.spec], hosting=hosting or target.hosting)
        return get_device(target.name), undo
    device = get_device(target.name)
    if hosting == "service" and device.hosting != "service":
        if not target.service_ref:
            log(f"[stress] {target.name} cannot be hosted in a service (no argument-free factory); in-process")
            return device, undo
        from ..runtime.service import host_driver

        driver = host_driver(target.service_ref, name=target.name, hosting="service")
        unregister_driver(target.name)
        replaced.append(device)
        registered.append(register_driver(driver))
        return registered[-1], undo
    return device, undo


SERVICE_REFERENCE = f"{REFERENCE}@service"


def service_reference_driver() -> Any:
    """nnapi-reference's driver under the name SERVICE_REFERENCE (what open_service_reference's service
    builds: the in-process nnapi-reference stays a device, under its own name)."""
    from ..runtime.drivers.reference import ReferenceDriver

    driver = ReferenceDriver()
    driver.name = SERVICE_REFERENCE
    return driver


def open_service_reference() -> tuple[Device, Callable[[], None]]:
    """nnapi-reference in a service of its own, to time a service-hosted driver against: disk and memory
    pressure slow a process round trip more than a computation (a correct driver drifted +42% against the
    in-process reference under a disk writer), so only a reference hosted the same way cancels the
    machine's load out of the ratio. Returns the device and what closes it."""
    from ..runtime import register_driver, unregister_driver
    from ..runtime.service import host_driver

    device = register_driver(host_driver(f"{__name__}:service_reference_driver", name=SERVICE_REFERENCE,
                                         hosting="service"))

    def undo() -> None:
        close_devices([device])
        unregister_driver(device.name)

    return device, undo


def close_devices(registered: Sequence[Device]) -> None:
    """Stop the services a test process started (they would exit with it anyway)."""
    from ..runtime.drivers.loading import close_driver

    for d in registered:
        close_driver(d.driver)


__all__ = ["ALL_DEVICES", "REFERENCE", "Target", "close_devices", "discover_targets", "minimal_spec",
           "open_service_reference", "open_target", "select_targets", "service_ref",
           "service_reference_driver"]
