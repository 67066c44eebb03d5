"""NNAPI-style runtime: models, compilations, memory, executions, partitioning and the driver HAL.

This is the public API, gathered from the layers: app/ (what an application calls), hal/ (the driver
contract), drivers/base.py (what a driver subclasses) and the shared vocabulary (enums, errors, operand
types). The README's "Layout" section maps the packages."""
from .enums import (DeviceType, DurationCode, FeatureLevel, FuseCode, OperandCode, OperandLifetime,
                    OperationCode, PaddingCode, Preference, Priority, ResultCode)
from .errors import MltsError
from .operand_type import OperandType, SymmPerChannelQuantParams
from .app.memory import Memory
from .hal.memory import PROT_READ, PROT_WRITE
from .app.model import Model
from .app.manager import Device, devices, get_device, register_driver, unregister_driver
from .app.compilation import Compilation
from .app.burst import Burst
from .app.event import Event
from .app.execution import Execution
from .hal import Capabilities, PerformanceInfo
from .drivers.base import Driver, PreparedModel
from .app.memory_desc import MemoryDesc
from .app.graphdump import graph_dump

__all__ = [
    "Burst", "Capabilities", "Compilation", "Device", "DeviceType", "Driver", "DurationCode", "Event", "Execution",
    "FeatureLevel", "FuseCode", "Memory", "MemoryDesc", "MltsError", "Model", "OperandCode", "OperandLifetime",
    "OperandType", "OperationCode", "PaddingCode", "PerformanceInfo", "Preference", "PreparedModel", "Priority",
    "PROT_READ", "PROT_WRITE", "ResultCode", "SymmPerChannelQuantParams", "devices", "get_device", "graph_dump",
    "register_driver", "unregister_driver",
]
