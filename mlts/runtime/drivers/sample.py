"""AOSP-style sample drivers: thin drivers over the shared kernels that differ only in which operations
they take (by the operation's input-0 operand type, as AOSP's sample drivers decide) and in their
declared performance, so that partitioning has real choices to make.

Not registered by default: `register_drivers(["sample"])` (mlts.runtime.app.manager) makes them devices of this process.
"""
from __future__ import annotations

from ..enums import DeviceType, OperandCode, OperationCode
from ..hal import Capabilities, PerformanceInfo
from .kernel_driver import KernelDriver

FLOAT32 = (OperandCode.TENSOR_FLOAT32, OperandCode.FLOAT32)
QUANT8 = (OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED)


def _capabilities(exec_time: float, power: float, types, relaxed: tuple[float, float] | None = None) -> Capabilities:
    """Declared performance for `types` (None = every type); other types are not offered (infinite)."""
    return Capabilities.uniform(exec_time, power, types=types,
                                relaxed=PerformanceInfo(*relaxed) if relaxed is not None else None)


def sample_drivers() -> list[KernelDriver]:
    """The five sample drivers of the drivers issue (exec time / power usage relative to the CPU's 1.0)."""
    return [
        KernelDriver("sample-all", _capabilities(1.1, 1.1, None), device_type=DeviceType.ACCELERATOR),
        KernelDriver("sample-float-fast", _capabilities(0.8, 1.2, FLOAT32, relaxed=(0.7, 1.1)),
                     device_type=DeviceType.GPU, operand_types=[OperandCode.TENSOR_FLOAT32]),
        KernelDriver("sample-float-slow", _capabilities(1.3, 0.7, FLOAT32, relaxed=(1.2, 0.6)),
                     device_type=DeviceType.GPU, operand_types=[OperandCode.TENSOR_FLOAT32]),
        KernelDriver("sample-minimal", _capabilities(0.4, 0.5, FLOAT32), device_type=DeviceType.ACCELERATOR,
                     operations=[OperationCode.ADD, OperationCode.CONCATENATION, OperationCode.CONV_2D],
                     operand_types=[OperandCode.TENSOR_FLOAT32]),
        KernelDriver("sample-quant", _capabilities(50.0, 1.0, QUANT8), device_type=DeviceType.ACCELERATOR,
                     operand_types=QUANT8),
    ]


def sample_all() -> KernelDriver:
    """sample-all alone: a factory a `--driver` spec can name to host just that driver (in a service)."""
    return sample_drivers()[0]
