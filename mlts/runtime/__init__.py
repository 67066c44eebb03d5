"""NNAPI-style runtime: models, compilations, memory, executions, partitioning and the driver HAL."""
from .enums import (DeviceType, DurationCode, FeatureLevel, FuseCode, OperandCode, OperandLifetime,
                    OperationCode, PaddingCode, Preference, Priority, ResultCode)
from .errors import MltsError
from .operand_type import OperandType, SymmPerChannelQuantParams
from .memory import PROT_READ, PROT_WRITE, Memory
from .model import Model
from .manager import Device, devices, get_device, register_driver, unregister_driver
from .compilation import Compilation
from .execution import Burst, Event, Execution
from .hal import Capabilities, Driver, PerformanceInfo, PreparedModel
from .memory_desc import MemoryDesc
from .graphdump import graph_dump

__all__ = [
    "Burst", "Capabilities", "Compilation", "Device", "DeviceType", "Driver", "DurationCode", "Event", "Execution",
    "FeatureLevel", "FuseCode", "Memory", "MemoryDesc", "MltsError", "Model", "OperandCode", "OperandLifetime",
    "OperandType", "OperationCode", "PaddingCode", "PerformanceInfo", "Preference", "PreparedModel", "Priority",
    "PROT_READ", "PROT_WRITE", "ResultCode", "SymmPerChannelQuantParams", "devices", "get_device", "graph_dump",
    "register_driver", "unregister_driver",
]
