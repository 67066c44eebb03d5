"""Vendor-style quantized CONV_2D drivers, for the quantized accuracy verdict and `mlts diff`.

Each accelerates only CONV_2D on TENSOR_QUANT8_ASYMM (the runtime runs every other operation on
nnapi-reference when partitioned) and computes it itself in numpy, as a vendor's kernel would, not with
the project's kernels: the exact integer accumulation sum((x - zp_in) * (w - zp_w)) + bias, then one
requantization acc * in_scale * filter_scale / out_scale rounded once (half away from zero, float64),
plus the output zero point, clamped to the fused activation's range. NNAPI's own kernel rounds twice
(a 31-bit fixed-point multiplier, then a rounding shift), so the two differ by at most one step on an
operation: within NNAPI's per-operation tolerance, although the differences grow over a whole network.

    single_rounding      the kernel above: must pass the quantized verdict
    ignores_zero_point   the same kernel treating the input's zero point as 0 (a real bug class: an NPU
                         kernel written for symmetric activations): must fail, naming the CONV_2D

Forms: explicit padding with 10, 11 or 13 inputs (the importer's), NHWC, any stride and dilation; a
TENSOR_QUANT8_ASYMM or TENSOR_QUANT8_SYMM_PER_CHANNEL (channelDim 0) filter; fused NONE, RELU, RELU1,
RELU6. Any other form fails the execution with OP_FAILED saying which.

Use one as a vendor would: `mlts diff MODEL --driver tests/quantized_rounding_drivers.py:create_single_rounding`.
"""
from __future__ import annotations

import os

import numpy as np

from mlts.runtime import DeviceType, MltsError, OperandCode, OperationCode, ResultCode
from mlts.runtime.drivers.kernel_driver import KernelDriver, KernelPreparedModel, run_request
from mlts.runtime.enums import FuseCode, OperandLifetime
from mlts.runtime.hal import Capabilities, constant_array
from mlts.runtime.hal.validation import validate_preparation_arguments

U8 = OperandCode.TENSOR_QUANT8_ASYMM
PER_CHANNEL = OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL
_CONSTANT = (OperandLifetime.CONSTANT_COPY, OperandLifetime.CONSTANT_REFERENCE)
#: float64 sums of integer products are exact below this (the accumulator is then the exact int sum)
_EXACT = 2 ** 53


def _failed(message: str) -> MltsError:
    return MltsError(ResultCode.OP_FAILED, f"CONV_2D: {message}")


def round_half_away(y: np.ndarray) -> np.ndarray:
    """Round to the nearest integer, ties away from zero (C's round())."""
    return np.sign(y) * np.floor(np.abs(y) + 0.5)


def activation_range(fuse: int, scale: float, zero_point: int) -> tuple[int, int]:
    """The quantized bounds of a fused activation on an output of `scale` and `zero_point` (uint8)."""
    def q(real: float) -> int:
        return zero_point + int(round_half_away(np.float64(real) / scale))

    if fuse == FuseCode.NONE:
        return 0, 255
    if fuse == FuseCode.RELU:
        return max(0, q(0.0)), 255
    if fuse == FuseCode.RELU1:
        return max(0, q(-1.0)), min(255, q(1.0))
    if fuse == FuseCode.RELU6:
        return max(0, q(0.0)), min(255, q(6.0))
    raise _failed(f"fused activation {fuse} is not implemented")


def conv2d_quant8(x: np.ndarray, x_zp: int, w: np.ndarray, w_zp: np.ndarray, bias: np.ndarray,
                  multiplier: np.ndarray, out_zp: int, pads: tuple[int, int, int, int], strides: tuple[int, int],
                  dilations: tuple[int, int], act: tuple[int, int]) -> np.ndarray:
    """uint8 NHWC `x` [n, h, w, c], filter `w` [o, kh, kw, c] with zero points `w_zp` (per output channel),
    int32 `bias`; pads (left, right, top, bottom), strides and dilations (w, h); `multiplier` (per output
    channel) = input scale x filter scale / output scale. Exact int accumulation, one rounding."""
    n, in_h, in_w, c = x.shape
    o, kh, kw, fc = w.shape
    if fc != c:
        raise _failed(f"filter has {fc} input channels, the input {c}")
    left, right, top, bottom = pads
    sw, sh = strides
    dw, dh = dilations
    out_h = (in_h + top + bottom - ((kh - 1) * dh + 1)) // sh + 1
    out_w = (in_w + left + right - ((kw - 1) * dw + 1)) // sw + 1
    if out_h <= 0 or out_w <= 0:
        raise _failed(f"output size {out_h}x{out_w} is not positive")
    if kh * kw * c * 255 * 255 + np.abs(bias).max(initial=0) >= _EXACT:
        raise _failed("the accumulator would not be exact in float64")
    xc = np.zeros((n, in_h + top + bottom, in_w + left + right, c), np.float64)  # padding holds real 0
    xc[:, top:top + in_h, left:left + in_w, :] = x.astype(np.float64) - x_zp
    wc = w.astype(np.float64) - w_zp.astype(np.float64)[:, None, None, None]
    acc = np.zeros((n, out_h, out_w, o), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xc[:, i * dh:i * dh + sh * (out_h - 1) + 1:sh, j * dw:j * dw + sw * (out_w - 1) + 1:sw, :]
            acc += patch @ wc[:, i, j, :].T
    acc += bias.astype(np.float64)
    y = round_half_away(acc * multiplier) + out_zp  # one rounding of the exact product (float64)
    return np.clip(y, *act).astype(np.uint8)


class Quant8ConvGraph:
    """A prepared partition of CONV_2Ds (what run_request runs): inputs in, every operation in order."""

    def __init__(self, model, ignore_input_zero_point: bool) -> None:
        self.model = model
        self.ignore_input_zero_point = ignore_input_zero_point

    def _value(self, values: dict, index: int):
        if index in values:
            return values[index]
        operand = self.model.main.operands[index]
        if operand.lifetime in _CONSTANT:
            return constant_array(self.model, operand.type, operand.location)
        raise _failed(f"operand {index} has no value")

    def _conv(self, op, values: dict) -> np.ndarray:
        operands = self.model.main.operands
        ins = op.inputs
        n = len(ins)
        if n not in (10, 11, 13) or operands[ins[7]].type.code != OperandCode.INT32:
            raise _failed(f"only the explicit-padding form (10, 11 or 13 inputs) is implemented, got {n} inputs")
        scalar = lambda k: int(np.asarray(self._value(values, ins[k])).reshape(()))  # noqa: E731
        if n >= 11 and bool(np.asarray(self._value(values, ins[10])).reshape(())):
            raise _failed("the NCHW layout is not implemented")
        t_in, t_f, t_b = (operands[i].type for i in ins[:3])
        t_out = operands[op.outputs[0]].type
        if t_in.code != U8 or t_out.code != U8:
            raise _failed(f"only {U8.name} input and output are implemented, got {t_in.code.name} -> "
                          f"{t_out.code.name}")
        out_c = t_f.dimensions[0]
        if t_f.code == U8:
            w_zp = np.full(out_c, t_f.zero_point, np.int64)
            w_scale = np.full(out_c, t_f.scale, np.float64)
        elif t_f.code == PER_CHANNEL and t_f.channel_quant is not None and t_f.channel_quant.channel_dim == 0:
            w_zp = np.zeros(out_c, np.int64)
            w_scale = np.asarray(t_f.channel_quant.scales, np.float64)
        else:
            raise _failed(f"a {t_f.code.name} filter is not implemented (channelDim 0 per-channel or "
                          f"{U8.name} only)")
        if t_b.code != OperandCode.TENSOR_INT32:
            raise _failed(f"a {t_b.code.name} bias is not implemented")
        x = np.asarray(self._value(values, ins[0]))
        x_zp = 0 if self.ignore_input_zero_point else t_in.zero_point  # the bug of ignores_zero_point
        multiplier = np.float64(t_in.scale) * w_scale / np.float64(t_out.scale)
        pads = tuple(scalar(k) for k in (3, 4, 5, 6))
        dilations = (scalar(11), scalar(12)) if n == 13 else (1, 1)
        return conv2d_quant8(x, x_zp, np.asarray(self._value(values, ins[1])), w_zp,
                             np.asarray(self._value(values, ins[2])), multiplier, t_out.zero_point,
                             pads, (scalar(7), scalar(8)), dilations,
                             activation_range(scalar(9), t_out.scale, t_out.zero_point))

    def run(self, inputs, **_unused) -> list[np.ndarray]:
        main = self.model.main
        values = {i: np.asarray(x) for i, x in zip(main.input_indexes, inputs) if x is not None}
        for op in main.operations:
            if op.type != OperationCode.CONV_2D:
                raise MltsError(ResultCode.OP_FAILED, f"{op.type.name} is not implemented")
            values[op.outputs[0]] = self._conv(op, values)
        return [values[i] for i in main.output_indexes]


class _Prepared(KernelPreparedModel):
    def __init__(self, driver: "QuantizedConvDriver", model) -> None:
        super().__init__(driver, model)
        self.conv_graph = Quant8ConvGraph(model, driver.ignore_input_zero_point)

    def execute_synchronously(self, request, measure, deadline, loop_timeout_ns):
        return run_request(self.conv_graph, request, measure, deadline, loop_timeout_ns, self.driver.name)


class QuantizedConvDriver(KernelDriver):
    """An accelerator of 8-bit CONV_2D only, with its own kernel (see the module doc)."""

    ignore_input_zero_point = False

    def __init__(self, name: str) -> None:
        types = (U8, PER_CHANNEL, OperandCode.TENSOR_INT32, OperandCode.INT32, OperandCode.BOOL)
        super().__init__(name, Capabilities.uniform(0.1, 0.1, types=types), device_type=DeviceType.ACCELERATOR,
                         operations=(OperationCode.CONV_2D,), operand_types=(U8,), memory_domains=False)

    def get_number_of_cache_files_needed(self) -> tuple[int, int]:
        return (0, 0)

    def prepare_model(self, model, preference, priority, deadline, cache):
        validate_preparation_arguments(preference, priority, deadline, cache, f"{self.name}: prepare_model")
        prepared = super().prepare_model(model, preference, priority, deadline, None)  # checks its support
        return _Prepared(self, prepared.model)


class IgnoresZeroPointDriver(QuantizedConvDriver):
    ignore_input_zero_point = True


def create_single_rounding() -> QuantizedConvDriver:
    return QuantizedConvDriver("npu-single-rounding")


def create_ignores_zero_point() -> QuantizedConvDriver:
    return IgnoresZeroPointDriver("npu-ignores-zero-point")


def spec(kind: str) -> str:
    """The --driver spec of a driver of this file ("single_rounding" or "ignores_zero_point"), by path."""
    return f"{os.path.abspath(__file__)}:create_{kind}"
