"""Driver services: any driver can run in its own process, as NNAPI drivers do.

`ServiceDriver(factory_ref, ...)` is a HAL driver whose implementation (`import_factory(factory_ref)`)
runs in a child process; `host_driver(..., hosting="service" | "in-process")` is the per-driver
switch the plugin loader uses. Modules: `channel` (framing and descriptor passing), `protocol`
(messages), `pools` (memory pools across the boundary), `client` (one service process: calls,
death detection), `driver` (the HAL proxies), `build` (driver from reference), `host` (the child).
"""
from .driver import ServiceBurstContext, ServiceDriver, ServicePreparedModel, host_driver

__all__ = ["ServiceBurstContext", "ServiceDriver", "ServicePreparedModel", "host_driver"]
