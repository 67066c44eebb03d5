"""nnapi-reference: the CPU implementation, itself a device (type CPU), the baseline of every comparison."""
from __future__ import annotations

from ... import __version__
from ..enums import DeviceType, FeatureLevel
from ..hal import Capabilities
from .kernel_driver import KernelDriver

REFERENCE_DEVICE_NAME = "nnapi-reference"


class ReferenceDriver(KernelDriver):
    """Every implemented operation in every type, at the reference performance of 1.0/1.0."""

    feature_level = FeatureLevel.LEVEL_8

    def __init__(self) -> None:
        super().__init__(REFERENCE_DEVICE_NAME, Capabilities.uniform(1.0, 1.0), version=__version__,
                         device_type=DeviceType.CPU)
