"""Drivers: nnapi-reference and the other built-in drivers, all behind the HAL of `mlts.runtime.hal`."""
from .kernel_driver import KernelDriver, KernelPreparedModel
from .reference import REFERENCE_DEVICE_NAME, ReferenceDriver

__all__ = ["KernelDriver", "KernelPreparedModel", "REFERENCE_DEVICE_NAME", "ReferenceDriver"]
