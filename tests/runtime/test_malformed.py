"""Malformed models and misuse of the public API: every failure is an MltsError with NNAPI's code.

Each case is split into `setup` (must succeed; builds whatever the bad call needs) and `act` (the one
malformed call). The test checks the ResultCode (BAD_DATA for bad arguments, BAD_STATE for a call
in the wrong state, as NNAPI's NeuralNetworks.cpp / ModelBuilder / CompilationBuilder /
ExecutionBuilder return them) and that the message names the culprit.
"""
from __future__ import annotations

import math
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

from mlts.runtime import (PROT_READ, Burst, Compilation, Device, Execution, FuseCode, Memory, MltsError, Model,
                          OperandCode, OperandType, OperationCode, Preference, Priority, ResultCode,
                          SymmPerChannelQuantParams, get_device)

BAD_DATA = ResultCode.BAD_DATA
BAD_STATE = ResultCode.BAD_STATE

F32 = OperandCode.TENSOR_FLOAT32
T22 = OperandType(F32, (2, 2))
I32 = OperandType(OperandCode.INT32)


# -- builders ------------------------------------------------------------------------------------
def add_model(*, finish: bool = True, out_dims=(2, 2)) -> Model:
    """operand 0, 1: inputs [2,2]; 2: fused activation NONE; 3: output. ADD(0, 1, 2) -> 3."""
    m = Model()
    m.add_operand(T22)
    m.add_operand(T22)
    m.add_operand(I32)
    m.add_operand(OperandType(F32, out_dims))
    m.set_operand_value(2, np.int32(FuseCode.NONE))
    m.add_operation(OperationCode.ADD, [0, 1, 2], [3])
    m.identify_inputs_and_outputs([0, 1], [3])
    if finish:
        m.finish()
    return m


def operands(*types: OperandType) -> Model:
    """A fresh model holding the given operands (indexes 0..n-1)."""
    m = Model()
    for t in types:
        m.add_operand(t)
    return m


def fuse_none(m: Model) -> int:
    i = m.add_operand(I32)
    m.set_operand_value(i, np.int32(0))
    return i


def reference() -> Device:
    return get_device("nnapi-reference")


def compiled(model: Model | None = None, *, single_device: bool = False) -> Compilation:
    model = model or add_model()
    c = Compilation.for_devices(model, [reference()]) if single_device else Compilation(model)
    c.finish()
    return c


def ready_execution(*, single_device: bool = False, out_dims=(2, 2)) -> Execution:
    e = Execution(compiled(add_model(out_dims=out_dims), single_device=single_device))
    e.set_input(0, np.ones((2, 2), np.float32))
    e.set_input(1, np.ones((2, 2), np.float32))
    return e


def computed_execution(*, single_device: bool = False) -> Execution:
    e = ready_execution(single_device=single_device)
    e.set_output(0, np.empty((2, 2), np.float32))
    e.compute()
    return e


# -- the cases -----------------------------------------------------------------------------------
@dataclass
class Case:
    id: str
    act: Callable[[Any], Any]
    code: ResultCode
    match: str  # regex the message must contain (names the culprit)
    setup: Callable[[], Any] = lambda: None


def _cycle() -> Model:
    # op 0 reads 0 (temporary) and writes 2; op 1 reads 2 and writes 0: 0 -> 2 -> 0.
    m = operands(T22, T22, T22, T22)
    f = fuse_none(m)
    m.add_operation(OperationCode.ADD, [0, 1, f], [2])
    m.add_operation(OperationCode.ADD, [2, 1, f], [0])
    m.add_operation(OperationCode.ADD, [2, 1, f], [3])
    m.identify_inputs_and_outputs([1], [3])
    return m


def _two_writers() -> Model:
    m = operands(T22, T22, T22)
    f = fuse_none(m)
    m.add_operation(OperationCode.ADD, [0, 1, f], [2])
    return m


def _unwritten_read() -> Model:
    m = operands(T22, T22, T22)  # operand 1 is read but never written
    f = fuse_none(m)
    m.add_operation(OperationCode.ADD, [0, 1, f], [2])
    m.identify_inputs_and_outputs([0], [2])
    return m


def _no_outputs() -> Model:
    m = operands(T22, T22, T22)
    f = fuse_none(m)
    m.add_operation(OperationCode.ADD, [0, 1, f], [2])
    return m


def _failed_finish() -> Model:
    m = _no_outputs()
    with pytest.raises(MltsError):
        m.finish()
    return m


def _constant_operand() -> Model:
    m = operands(T22, T22)  # 0: temporary; 1: a constant; 2: fused activation
    m.set_operand_value(1, np.zeros((2, 2), np.float32))
    fuse_none(m)
    return m


def _mixed() -> Model:
    return operands(T22, OperandType(OperandCode.TENSOR_INT32, (2, 2)), I32, T22)


def _fuse7() -> Model:
    m = operands(T22, T22, I32, T22)
    m.set_operand_value(2, np.int32(7))
    return m


def _file_memory() -> Memory:
    return Memory.from_file(_tmpfile(64), protect=PROT_READ)


def _unregistered_device() -> Device:
    from mlts.runtime.drivers import ReferenceDriver

    return Device(ReferenceDriver())  # a device object the runtime never listed


def _burst_other() -> tuple[Execution, Burst]:
    e = ready_execution()
    e.set_output(0, np.empty((2, 2), np.float32))
    return e, Burst(compiled())


def _unfinished_compilation() -> Compilation:
    return Compilation(add_model())


def _model_operand() -> tuple[Model, Model]:
    m = operands(OperandType(OperandCode.MODEL), T22)
    return m, add_model()


def _per_channel(scales, dim) -> OperandType:
    return OperandType(OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, (3, 2), 0.0, 0,
                       SymmPerChannelQuantParams(tuple(scales), dim))


QU8 = OperandCode.TENSOR_QUANT8_ASYMM

CASES: list[Case] = [
    # ---- operand indexes --------------------------------------------------------------------------
    Case("set_value-negative-index", lambda m: m.set_operand_value(-1, np.int32(0)), BAD_DATA,
         r"operand -1 does not exist", lambda: operands(I32)),
    Case("set_value-index-out-of-range", lambda m: m.set_operand_value(5, np.int32(0)), BAD_DATA,
         r"operand 5 does not exist", lambda: operands(I32)),
    Case("set_value-index-not-int", lambda m: m.set_operand_value("0", np.int32(0)), BAD_DATA,
         r"operand index must be an int.*'0'", lambda: operands(I32)),
    Case("set_value-index-float", lambda m: m.set_operand_value(0.0, np.int32(0)), BAD_DATA,
         r"operand index must be an int.*0\.0", lambda: operands(I32)),
    Case("add_operation-input-out-of-range", lambda m: m.add_operation(OperationCode.ADD, [0, 9, 2], [3]),
         BAD_DATA, r"operation 0 \(ADD\): inputs: operand 9 does not exist", lambda: operands(T22, T22, I32, T22)),
    Case("add_operation-negative-output", lambda m: m.add_operation(OperationCode.ADD, [0, 1, 2], [-1]),
         BAD_DATA, r"operation 0 \(ADD\): outputs: operand -1 does not exist", lambda: operands(T22, T22, I32, T22)),
    Case("add_operation-index-not-int", lambda m: m.add_operation(OperationCode.ADD, [0, 1.5, 2], [3]),
         BAD_DATA, r"operation 0 \(ADD\): inputs: operand index 1\.5 is not an int",
         lambda: operands(T22, T22, I32, T22)),
    Case("add_operation-inputs-not-a-list", lambda m: m.add_operation(OperationCode.ADD, 0, [3]),
         BAD_DATA, r"operation 0 \(ADD\): inputs must be a sequence", lambda: operands(T22, T22, I32, T22)),
    Case("identify-output-out-of-range", lambda m: m.identify_inputs_and_outputs([0], [4]), BAD_DATA,
         r"outputs: operand 4 does not exist", lambda: operands(T22, T22)),
    Case("identify-input-bool-index", lambda m: m.identify_inputs_and_outputs([True], [1]), BAD_DATA,
         r"inputs: operand index True is not an int", lambda: operands(T22, T22)),
    # ---- operation signatures ---------------------------------------------------------------------
    Case("add-two-inputs", lambda m: m.add_operation(OperationCode.ADD, [0, 1], [3]), BAD_DATA,
         r"operation 0 \(ADD\): expected 3 inputs, got 2", lambda: operands(T22, T22, I32, T22)),
    Case("add-two-outputs", lambda m: m.add_operation(OperationCode.ADD, [0, 1, 2], [3, 4]), BAD_DATA,
         r"operation 0 \(ADD\): expected 1 outputs, got 2", lambda: operands(T22, T22, I32, T22, T22)),
    Case("add-no-outputs", lambda m: m.add_operation(OperationCode.ADD, [0, 1, 2], []), BAD_DATA,
         r"operation 0 \(ADD\): an operation needs at least one output", lambda: operands(T22, T22, I32)),
    Case("add-bool8-inputs", lambda m: m.add_operation(OperationCode.ADD, [0, 1, 2], [3]), BAD_DATA,
         r"operation 0 \(ADD\): input 0 \(operand 0\): type TENSOR_BOOL8 not allowed",
         lambda: operands(*[OperandType(OperandCode.TENSOR_BOOL8, (2,))] * 2, I32,
                          OperandType(OperandCode.TENSOR_BOOL8, (2,)))),
    Case("div-quant8-inputs", lambda m: m.add_operation(OperationCode.DIV, [0, 1, 2], [3]), BAD_DATA,
         r"operation 0 \(DIV\): input 0 \(operand 0\): type TENSOR_QUANT8_ASYMM not allowed",
         lambda: operands(*[OperandType(QU8, (2,), 0.5, 0)] * 2, I32, OperandType(QU8, (2,), 0.5, 0))),
    Case("add-float32-plus-int32", lambda m: m.add_operation(OperationCode.ADD, [0, 1, 2], [3]), BAD_DATA,
         r"operation 0 \(ADD\): input 1 \(operand 1\): type TENSOR_INT32 not allowed", _mixed),
    Case("mul-activation-not-int32", lambda m: m.add_operation(OperationCode.MUL, [0, 1, 2], [3]), BAD_DATA,
         r"operation 0 \(MUL\): input 2 \(operand 2\): type FLOAT32 not allowed",
         lambda: operands(T22, T22, OperandType(OperandCode.FLOAT32), T22)),
    Case("fused-activation-7", lambda m: m.add_operation(OperationCode.ADD, [0, 1, 2], [3]), BAD_DATA,
         r"operation 0 \(ADD\): input 2 \(operand 2\): invalid fused activation code 7", _fuse7),
    Case("unknown-operation-code", lambda m: m.add_operation(4242, [0, 1, 2], [3]), BAD_DATA,
         r"operation 0: unknown operation code 4242", lambda: operands(T22, T22, I32, T22)),
    Case("operation-code-not-a-number", lambda m: m.add_operation("ADD", [0, 1, 2], [3]), BAD_DATA,
         r"operation 0: unknown operation code 'ADD'", lambda: operands(T22, T22, I32, T22)),
    # ---- operand types ----------------------------------------------------------------------------
    Case("unknown-operand-code", lambda _: OperandType(99, (2,)), BAD_DATA, r"unknown operand type code 99"),
    Case("add_operand-not-an-OperandType", lambda m: m.add_operand(OperandCode.TENSOR_FLOAT32), BAD_DATA,
         r"add_operand: expected an OperandType", Model),
    Case("scalar-with-dimensions", lambda m: m.add_operand(OperandType(OperandCode.INT32, (2,))), BAD_DATA,
         r"operand 0: scalar type INT32 must have no dimensions", Model),
    Case("negative-dimension", lambda m: m.add_operand(OperandType(F32, (2, -1))), BAD_DATA,
         r"operand 0: negative dimension", Model),
    Case("dimensions-not-ints", lambda _: OperandType(F32, ("a", 2)), BAD_DATA, r"dimensions must be a sequence of ints"),
    Case("quant8-scale-zero", lambda m: m.add_operand(OperandType(QU8, (2,), 0.0, 0)), BAD_DATA,
         r"operand 0: TENSOR_QUANT8_ASYMM requires a positive finite scale, got 0", Model),
    Case("quant8-scale-negative", lambda m: m.add_operand(OperandType(QU8, (2,), -0.5, 0)), BAD_DATA,
         r"operand 0: TENSOR_QUANT8_ASYMM requires a positive finite scale, got -0.5", Model),
    Case("quant8-scale-nan", lambda m: m.add_operand(OperandType(QU8, (2,), math.nan, 0)), BAD_DATA,
         r"operand 0: TENSOR_QUANT8_ASYMM requires a positive finite scale, got nan", Model),
    Case("quant8-scale-inf", lambda m: m.add_operand(OperandType(QU8, (2,), math.inf, 0)), BAD_DATA,
         r"operand 0: .*positive finite scale, got inf", Model),
    Case("quant16-symm-scale-zero", lambda m: m.add_operand(OperandType(OperandCode.TENSOR_QUANT16_SYMM, (2,))),
         BAD_DATA, r"operand 0: TENSOR_QUANT16_SYMM requires a positive finite scale", Model),
    Case("quant8-zero-point-256", lambda m: m.add_operand(OperandType(QU8, (2,), 0.5, 256)), BAD_DATA,
         r"operand 0: TENSOR_QUANT8_ASYMM zeroPoint 256 outside \[0, 255\]", Model),
    Case("quant8-signed-zero-point-128",
         lambda m: m.add_operand(OperandType(OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, (2,), 0.5, 128)), BAD_DATA,
         r"operand 0: TENSOR_QUANT8_ASYMM_SIGNED zeroPoint 128 outside \[-128, 127\]", Model),
    Case("quant8-symm-nonzero-zero-point",
         lambda m: m.add_operand(OperandType(OperandCode.TENSOR_QUANT8_SYMM, (2,), 0.5, 3)), BAD_DATA,
         r"operand 0: TENSOR_QUANT8_SYMM must have zeroPoint 0, got 3", Model),
    Case("float-tensor-nonzero-scale", lambda m: m.add_operand(OperandType(F32, (2,), 0.5, 0)), BAD_DATA,
         r"operand 0: TENSOR_FLOAT32 must have scale 0, got 0.5", Model),
    Case("float-tensor-nonzero-zero-point", lambda m: m.add_operand(OperandType(F32, (2,), 0.0, 1)), BAD_DATA,
         r"operand 0: TENSOR_FLOAT32 must have zeroPoint 0, got 1", Model),
    Case("scalar-nonzero-scale", lambda m: m.add_operand(OperandType(OperandCode.FLOAT32, (), 1.0)), BAD_DATA,
         r"operand 0: scalar type FLOAT32 must have scale 0", Model),
    Case("per-channel-wrong-scale-count", lambda m: m.add_operand(_per_channel([0.5, 0.5], 0)), BAD_DATA,
         r"operand 0: 2 channel scales for dimension of size 3", Model),
    Case("per-channel-channel-dim-out-of-range", lambda m: m.add_operand(_per_channel([0.5, 0.5], 2)), BAD_DATA,
         r"operand 0: channelDim 2 out of range for rank 2", Model),
    Case("per-channel-zero-scale", lambda m: m.add_operand(_per_channel([0.5, 0.0, 0.5], 0)), BAD_DATA,
         r"operand 0: channel scales must be positive", Model),
    Case("per-channel-scales-not-numbers", lambda _: SymmPerChannelQuantParams("abc", 0), BAD_DATA,
         r"per-channel quantization parameters \(scales 'abc', channelDim 0\)"),
    Case("per-channel-channel-dim-not-int", lambda _: SymmPerChannelQuantParams((0.5,), "0"), BAD_DATA,
         r"per-channel quantization parameters .*channelDim '0'"),
    Case("channel-quant-not-params",
         lambda _: OperandType(OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, (3,), 0.0, 0, (0.5, 0.5, 0.5)), BAD_DATA,
         r"TENSOR_QUANT8_SYMM_PER_CHANNEL: channel_quant must be SymmPerChannelQuantParams or None, got tuple"),
    Case("zero-point-beyond-int32",
         lambda m: m.add_operand(OperandType(OperandCode.TENSOR_INT32, (2,), 0.0, 2**31)), BAD_DATA,
         r"operand 0: TENSOR_INT32 zeroPoint 2147483648 does not fit in int32", Model),
    Case("per-channel-params-set-wrong-count",
         lambda m: m.set_operand_symm_per_channel_quant_params(0, SymmPerChannelQuantParams((1.0,), 0)), BAD_DATA,
         r"operand 0: 1 channel scales for dimension of size 3",
         lambda: operands(OperandType(OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, (3, 2)))),
    Case("per-channel-params-on-float-operand",
         lambda m: m.set_operand_symm_per_channel_quant_params(0, SymmPerChannelQuantParams((1.0, 1.0), 0)),
         BAD_DATA, r"operand 0 is TENSOR_FLOAT32, not TENSOR_QUANT8_SYMM_PER_CHANNEL", lambda: operands(T22)),
    Case("per-channel-params-never-set", lambda m: m.finish(), BAD_DATA,
         r"operand 4: TENSOR_QUANT8_SYMM_PER_CHANNEL needs per-channel quantization parameters",
         lambda: _per_channel_unset()),
    Case("channel-quant-on-quant8-asymm",
         lambda m: m.add_operand(OperandType(QU8, (3,), 0.5, 0, SymmPerChannelQuantParams((1.0,) * 3, 0))),
         BAD_DATA, r"operand 0: per-channel parameters are only valid for TENSOR_QUANT8_SYMM_PER_CHANNEL", Model),
    # ---- constants --------------------------------------------------------------------------------
    Case("constant-wrong-byte-size", lambda m: m.set_operand_value(0, np.zeros(3, np.float32)), BAD_DATA,
         r"operand 0 of type TENSOR_FLOAT32 \[2,2\] needs 16 bytes, got 12", lambda: operands(T22)),
    Case("constant-raw-bytes-wrong-size", lambda m: m.set_operand_value(0, b"\x00" * 3), BAD_DATA,
         r"operand 0 of type INT32 needs 4 bytes, got 3", lambda: operands(I32)),
    Case("constant-float-for-int32", lambda m: m.set_operand_value(0, np.float32(1.5)), BAD_DATA,
         r"operand 0: value dtype float32 does not match INT32 \(int32\)", lambda: operands(I32)),
    Case("constant-unconvertible", lambda m: m.set_operand_value(0, object()), BAD_DATA,
         r"operand 0: value cannot be converted to INT32", lambda: operands(I32)),
    Case("constant-unspecified-dims", lambda m: m.set_operand_value(0, b"\x00" * 16), BAD_DATA,
         r"operand 0 needs fully specified dimensions", lambda: operands(OperandType(F32, (0, 2)))),
    Case("constant-unknown-rank", lambda m: m.set_operand_value(0, b"\x00" * 16), BAD_DATA,
         r"operand 0 needs fully specified dimensions", lambda: operands(OperandType(F32, None))),
    Case("constant-array-unknown-rank", lambda m: m.set_operand_value(0, np.zeros((2, 2), np.float32)), BAD_DATA,
         r"operand 0 needs fully specified dimensions", lambda: operands(OperandType(F32, None))),
    Case("constant-on-operation-output", lambda m: m.set_operand_value(3, np.zeros((2, 2), np.float32)), BAD_DATA,
         r"operand 3 is an output of operation 0 \(ADD\)", lambda: add_model(finish=False)),
    Case("constant-on-model-input", lambda m: m.set_operand_value(0, np.zeros((2, 2), np.float32)), BAD_DATA,
         r"operand 0 is a model input", lambda: add_model(finish=False)),
    Case("value-from-model-on-non-model-operand", lambda mm: mm[0].set_operand_value_from_model(1, mm[1]), BAD_DATA,
         r"operand 1 is TENSOR_FLOAT32, not MODEL", _model_operand),
    Case("value-from-model-unfinished", lambda mm: mm[0].set_operand_value_from_model(0, add_model(finish=False)),
         BAD_STATE, r"operand 0: the referenced model is not finished", _model_operand),
    Case("value-from-model-not-a-model", lambda mm: mm[0].set_operand_value_from_model(0, "model"), BAD_DATA,
         r"operand 0: expected a Model", _model_operand),
    Case("set_value-on-model-operand", lambda mm: mm[0].set_operand_value(0, b"\x00"), BAD_DATA,
         r"operand 0 is a MODEL operand; use set_operand_value_from_model", _model_operand),
    # ---- memory -----------------------------------------------------------------------------------
    Case("value-from-memory-past-end", lambda mem: _memory_model().set_operand_value_from_memory(0, mem, 56, 16),
         BAD_DATA, r"operand 0: region \[offset 56, length 16\] is outside memory shared-memory-\d+ of 64 bytes",
         lambda: Memory.create_shared(64)),
    Case("value-from-memory-negative-offset",
         lambda mem: _memory_model().set_operand_value_from_memory(0, mem, -4, 16), BAD_DATA,
         r"operand 0: region \[offset -4, length 16\] is outside memory", lambda: Memory.create_shared(64)),
    Case("value-from-memory-wrong-length", lambda mem: _memory_model().set_operand_value_from_memory(0, mem, 0, 8),
         BAD_DATA, r"operand 0 of type TENSOR_FLOAT32 \[2,2\] needs 16 bytes, got length 8",
         lambda: Memory.create_shared(64)),
    Case("value-from-memory-not-a-memory",
         lambda _: _memory_model().set_operand_value_from_memory(0, bytearray(64), 0, 16), BAD_DATA,
         r"operand 0: expected a Memory, got bytearray"),
    Case("value-from-freed-memory", lambda mem: _memory_model().set_operand_value_from_memory(0, mem, 0, 16),
         BAD_DATA, r"operand 0: memory shared-memory-\d+ has been freed", lambda: _freed(Memory.create_shared(64))),
    Case("memory-file-missing", lambda _: Memory.from_file("/nonexistent/mlts/weights.bin"), BAD_DATA,
         r"cannot open memory file '/nonexistent/mlts/weights.bin'"),
    Case("memory-file-region-past-end", lambda _: Memory.from_file(_tmpfile(64), offset=32, size=64), BAD_DATA,
         r"region \[32, 96\) exceeds the file's 64 bytes"),
    Case("memory-bad-protection", lambda _: Memory.from_file(_tmpfile(64), protect=0x40), BAD_DATA,
         r"memory protection must be a combination of PROT_READ and PROT_WRITE, got 64"),
    Case("memory-file-offset-not-int", lambda _: Memory.from_file(_tmpfile(64), offset="8"), BAD_DATA,
         r"memory offset must be an int, got '8'"),
    Case("memory-file-protect-not-int", lambda _: Memory.from_file(_tmpfile(64), protect="r"), BAD_DATA,
         r"memory protection must be an int, got 'r'"),
    Case("shared-memory-size-0", lambda _: Memory.create_shared(0), BAD_DATA,
         r"shared memory size must be positive, got 0"),
    Case("shared-memory-size-negative", lambda _: Memory.create_shared(-8), BAD_DATA,
         r"shared memory size must be positive, got -8"),
    Case("shared-memory-size-not-int", lambda _: Memory.create_shared(8.0), BAD_DATA,
         r"shared memory size must be an int, got 8.0"),
    # ---- graph structure (checked by add_operation / identify / finish) ---------------------------
    Case("cycle", lambda m: m.finish(), BAD_DATA, r"cycle through operations 0 \(ADD\), 1 \(ADD\)", _cycle),
    Case("operand-written-twice", lambda m: m.add_operation(OperationCode.SUB, [0, 1, 3], [2]), BAD_DATA,
         r"operation 1 \(SUB\): operand 2 is already the output of operation 0 \(ADD\)", _two_writers),
    Case("operand-in-and-out-of-one-operation", lambda m: m.add_operation(OperationCode.ADD, [0, 1, 2], [1]),
         BAD_DATA, r"operation 0 \(ADD\): operand 1 is both an input and an output", lambda: operands(T22, T22, I32)),
    Case("operand-twice-among-outputs", lambda m: m.add_operation(OperationCode.ADD, [0, 1, 2], [3, 3]), BAD_DATA,
         r"operation 0 \(ADD\): an operand appears twice among the outputs", lambda: operands(T22, T22, I32, T22)),
    Case("operation-writes-constant", lambda m: m.add_operation(OperationCode.ADD, [0, 0, 2], [1]), BAD_DATA,
         r"operation 0 \(ADD\): output operand 1 already has a value \(CONSTANT_COPY\)", _constant_operand),
    Case("operation-writes-model-input", lambda m: m.add_operation(OperationCode.ADD, [1, 1, 3], [0]), BAD_DATA,
         r"operation 0 \(ADD\): output operand 0 is a model input", lambda: _inputs_identified()),
    Case("model-input-and-output", lambda m: m.identify_inputs_and_outputs([0, 1], [0]), BAD_DATA,
         r"operand 0 cannot be both a model input and output", lambda: add_model(finish=False)),
    Case("model-input-is-constant", lambda m: m.identify_inputs_and_outputs([0, 2], [3]), BAD_DATA,
         r"model input operand 2 already has a value \(CONSTANT_COPY\)", lambda: add_model(finish=False)),
    Case("model-input-written-by-operation", lambda m: m.identify_inputs_and_outputs([0, 3], [1]), BAD_DATA,
         r"model input operand 3 is the output of operation 0 \(ADD\)", lambda: add_model(finish=False)),
    Case("model-output-is-constant", lambda m: m.identify_inputs_and_outputs([0, 1], [2]), BAD_DATA,
         r"model output operand 2 is a constant \(CONSTANT_COPY\)", lambda: add_model(finish=False)),
    Case("model-input-listed-twice", lambda m: m.identify_inputs_and_outputs([0, 0], [3]), BAD_DATA,
         r"an operand is listed twice as a model input", lambda: add_model(finish=False)),
    Case("model-without-operations", lambda m: m.finish(), BAD_DATA, r"finish: the model has no operations",
         lambda: _no_operations()),
    Case("model-without-outputs", lambda m: m.finish(), BAD_DATA, r"finish: the model has no outputs", _no_outputs),
    Case("operand-read-never-written", lambda m: m.finish(), BAD_DATA,
         r"finish: operand 1 is never written", _unwritten_read),
    Case("declared-output-shape-conflicts", lambda m: m.finish(), BAD_DATA,
         r"operation 0 \(ADD\): output 0 \(operand 3\): declared dimensions \[3, 3\] do not match",
         lambda: add_model(finish=False, out_dims=(3, 3))),
    Case("relax-not-bool", lambda m: m.relax_computation_float32_to_float16("yes"), BAD_DATA,
         r"relax_computation_float32_to_float16: expected a bool, got 'yes'", Model),
    # ---- modifying a finished (or invalid) model ---------------------------------------------------
    Case("finished-add_operand", lambda m: m.add_operand(T22), BAD_STATE,
         r"add_operand: the model is finished", add_model),
    Case("finished-set_operand_value", lambda m: m.set_operand_value(2, np.int32(0)), BAD_STATE,
         r"set_operand_value: the model is finished", add_model),
    Case("finished-set_operand_value_from_memory",
         lambda m: m.set_operand_value_from_memory(2, Memory.create_shared(4), 0, 4), BAD_STATE,
         r"set_operand_value_from_memory: the model is finished", add_model),
    Case("finished-add_operation", lambda m: m.add_operation(OperationCode.ADD, [0, 1, 2], [3]), BAD_STATE,
         r"add_operation: the model is finished", add_model),
    Case("finished-identify", lambda m: m.identify_inputs_and_outputs([0], [3]), BAD_STATE,
         r"identify_inputs_and_outputs: the model is finished", add_model),
    Case("finished-relax", lambda m: m.relax_computation_float32_to_float16(True), BAD_STATE,
         r"relax_computation_float32_to_float16: the model is finished", add_model),
    Case("finish-twice", lambda m: m.finish(), BAD_STATE, r"finish: the model is finished", add_model),
    Case("invalid-model-finish-again", lambda m: m.finish(), BAD_STATE,
         r"finish: the model is invalid after an earlier error", _failed_finish),
    Case("invalid-model-add_operand", lambda m: m.add_operand(T22), BAD_STATE,
         r"add_operand: the model is invalid", _failed_finish),
    # ---- compilation -------------------------------------------------------------------------------
    Case("compile-unfinished-model", lambda m: Compilation(m), BAD_STATE, r"Compilation: the model is not finished",
         lambda: add_model(finish=False)),
    Case("compile-invalid-model", lambda m: Compilation(m), BAD_STATE, r"Compilation: the model is not finished",
         _failed_finish),
    Case("compile-not-a-model", lambda _: Compilation("model"), BAD_DATA, r"Compilation: expected a Model, got str"),
    Case("compile-for-devices-unfinished-model", lambda m: Compilation.for_devices(m, [reference()]), BAD_STATE,
         r"the model is not finished", lambda: add_model(finish=False)),
    Case("set_preference-after-finish", lambda c: c.set_preference(Preference.LOW_POWER), BAD_STATE,
         r"set_preference: the compilation is already finished", compiled),
    Case("set_priority-after-finish", lambda c: c.set_priority(Priority.HIGH), BAD_STATE,
         r"set_priority: the compilation is already finished", compiled),
    Case("set_caching-after-finish", lambda c: c.set_caching("/tmp", bytes(32)), BAD_STATE,
         r"set_caching: the compilation is already finished", compiled),
    Case("set_timeout-after-finish", lambda c: c.set_timeout(10**9), BAD_STATE,
         r"set_timeout: the compilation is already finished", lambda: compiled(single_device=True)),
    Case("compilation-finish-twice", lambda c: c.finish(), BAD_STATE,
         r"finish: the compilation is already finished", compiled),
    Case("invalid-preference", lambda c: c.set_preference(7), BAD_DATA, r"set_preference: invalid preference 7",
         lambda: Compilation(add_model())),
    Case("invalid-priority", lambda c: c.set_priority(42), BAD_DATA, r"set_priority: invalid priority 42",
         lambda: Compilation(add_model())),
    Case("set_timeout-multi-device", lambda c: c.set_timeout(10**9), BAD_DATA,
         r"set_timeout: only allowed for a compilation created for exactly one device",
         lambda: Compilation(add_model())),
    Case("set_timeout-negative", lambda c: c.set_timeout(-1), BAD_DATA,
         r"set_timeout: duration must be a non-negative int.*-1",
         lambda: Compilation.for_devices(add_model(), [reference()])),
    Case("cache-token-too-short", lambda c: c.set_caching("/tmp", b"short"), BAD_DATA,
         r"set_caching: token must be 32 bytes", lambda: Compilation(add_model())),
    Case("cache-token-not-bytes", lambda c: c.set_caching("/tmp", "x" * 32), BAD_DATA,
         r"set_caching: token must be 32 bytes", lambda: Compilation(add_model())),
    Case("cache-dir-missing", lambda c: c.set_caching("/nonexistent/mlts-cache", bytes(32)), BAD_DATA,
         r"set_caching: cache directory '/nonexistent/mlts-cache' does not exist", lambda: Compilation(add_model())),
    Case("for_devices-empty-list", lambda m: Compilation.for_devices(m, []), BAD_DATA,
         r"Compilation.for_devices: expected a non-empty list of devices", add_model),
    Case("for_devices-unknown-name", lambda m: Compilation.for_devices(m, ["no-such-npu"]), BAD_DATA,
         r"no device named 'no-such-npu'", add_model),
    Case("for_devices-unlisted-device", lambda m: Compilation.for_devices(m, [_unregistered_device()]), BAD_DATA,
         r"Compilation.for_devices: <Device nnapi-reference .*> is not an available device", add_model),
    Case("for_devices-duplicate", lambda m: Compilation.for_devices(m, [reference(), reference()]), BAD_DATA,
         r"Compilation.for_devices: device nnapi-reference listed twice", add_model),
    Case("for_devices-not-a-list", lambda m: Compilation.for_devices(m, 3), BAD_DATA,
         r"Compilation.for_devices: expected a non-empty list of devices", add_model),
    # ---- execution ---------------------------------------------------------------------------------
    Case("execution-unfinished-compilation", lambda c: Execution(c), BAD_STATE,
         r"Execution: the compilation is not finished", _unfinished_compilation),
    Case("execution-not-a-compilation", lambda m: Execution(m), BAD_DATA, r"Execution: expected a Compilation, got Model",
         add_model),
    Case("burst-unfinished-compilation", lambda c: Burst(c), BAD_STATE, r"Burst: the compilation is not finished",
         _unfinished_compilation),
    Case("set_input-index-out-of-range", lambda e: e.set_input(2, np.ones((2, 2), np.float32)), BAD_DATA,
         r"set_input: index 2 out of range \(model has 2\)", lambda: Execution(compiled())),
    Case("set_input-negative-index", lambda e: e.set_input(-1, np.ones((2, 2), np.float32)), BAD_DATA,
         r"set_input: index -1 out of range", lambda: Execution(compiled())),
    Case("set_input-wrong-dtype", lambda e: e.set_input(0, np.ones((2, 2), np.float64)), BAD_DATA,
         r"set_input\(0\): array dtype float64 does not match TENSOR_FLOAT32", lambda: Execution(compiled())),
    Case("set_input-wrong-shape", lambda e: e.set_input(1, np.ones((4,), np.float32)), BAD_DATA,
         r"set_input\(1\): rank 1 differs from the model's 2", lambda: Execution(compiled())),
    Case("set_input-wrong-dims", lambda e: e.set_input(0, np.ones((2, 3), np.float32)), BAD_DATA,
         r"set_input\(0\): dimensions \[2, 3\] conflict with the model's \[2, 2\]", lambda: Execution(compiled())),
    Case("set_input-type-differs-beyond-dims",
         lambda e: e.set_input(0, np.ones((2, 2), np.float32), OperandType(OperandCode.TENSOR_FLOAT16, (2, 2))),
         BAD_DATA, r"set_input\(0\): the given type may only differ from the model's in its dimensions",
         lambda: Execution(compiled())),
    Case("set_input_from_memory-past-end", lambda e: e.set_input_from_memory(0, Memory.create_shared(16), 8, 16),
         BAD_DATA, r"set_input_from_memory\(0\): region \[offset 8, length 16\] is outside memory",
         lambda: Execution(compiled())),
    Case("set_input_from_memory-wrong-length", lambda e: e.set_input_from_memory(0, Memory.create_shared(32), 0, 32),
         BAD_DATA, r"set_input_from_memory\(0\): length 32 != 16 bytes", lambda: Execution(compiled())),
    Case("set_output-read-only-array", lambda e: e.set_output(0, _read_only((2, 2))), BAD_DATA,
         r"set_output\(0\): the array must be C-contiguous and writable", lambda: Execution(compiled())),
    Case("set_output-non-contiguous-array", lambda e: e.set_output(0, np.empty((2, 4), np.float32)[:, ::2]),
         BAD_DATA, r"set_output\(0\): the array must be C-contiguous and writable", lambda: Execution(compiled())),
    Case("set_output-not-an-array", lambda e: e.set_output(0, [[0.0, 0.0], [0.0, 0.0]]), BAD_DATA,
         r"set_output\(0\): expected a numpy array", lambda: Execution(compiled())),
    Case("set_output-wrong-dtype", lambda e: e.set_output(0, np.empty((2, 2), np.int32)), BAD_DATA,
         r"set_output\(0\): array dtype int32 does not match TENSOR_FLOAT32", lambda: Execution(compiled())),
    Case("set_output-too-small", lambda e: e.set_output(0, np.empty(3, np.float32)), BAD_DATA,
         r"set_output\(0\): 12 bytes given, TENSOR_FLOAT32 \[2,2\] needs 16", lambda: Execution(compiled())),
    Case("set_output_from_memory-read-only", lambda e: e.set_output_from_memory(0, _file_memory(), 0, 16), BAD_DATA,
         r"set_output_from_memory\(0\): memory file-memory-\d+ is not writable", lambda: Execution(compiled())),
    Case("set_output_from_memory-too-small", lambda e: e.set_output_from_memory(0, Memory.create_shared(8), 0, 8),
         BAD_DATA, r"set_output_from_memory\(0\): length 8 < 16 bytes", lambda: Execution(compiled())),
    Case("output-index-out-of-range", lambda e: e.set_output(1, np.empty((2, 2), np.float32)), BAD_DATA,
         r"set_output: index 1 out of range \(model has 1\)", lambda: Execution(compiled())),
    Case("input-not-set-at-compute", lambda e: e.compute(), BAD_DATA, r"compute: input 1 is not set",
         lambda: _only_input0_set()),
    Case("input-not-set-at-start_compute", lambda e: e.start_compute(), BAD_DATA,
         r"start_compute: input 1 is not set", lambda: _only_input0_set()),
    Case("output-dimensions-before-compute", lambda e: e.get_output_operand_dimensions(0), BAD_STATE,
         r"get_output_operand_dimensions: the execution has not completed", ready_execution),
    Case("output-rank-before-compute", lambda e: e.get_output_operand_rank(0), BAD_STATE,
         r"get_output_operand_rank: the execution has not completed", ready_execution),
    Case("get_output-before-compute", lambda e: e.get_output(0), BAD_STATE,
         r"get_output: the execution has not completed", ready_execution),
    Case("get_duration-before-compute", lambda e: e.get_duration(0), BAD_STATE,
         r"get_duration: the execution has not completed", lambda: ready_execution(single_device=True)),
    Case("get_duration-invalid-code", lambda e: e.get_duration(9), BAD_DATA, r"get_duration: invalid duration code 9",
         lambda: computed_execution(single_device=True)),
    Case("output-dimensions-bad-index", lambda e: e.get_output_operand_dimensions(3), BAD_DATA,
         r"get_output_operand_dimensions: index 3 out of range", computed_execution),
    Case("compute-twice-not-reusable", lambda e: e.compute(), BAD_STATE,
         r"compute: the execution has completed and is not reusable", computed_execution),
    Case("set_input-after-compute", lambda e: e.set_input(0, np.ones((2, 2), np.float32)), BAD_STATE,
         r"set_input: the execution has completed and is not reusable", computed_execution),
    Case("set_measure_timing-multi-device", lambda e: e.set_measure_timing(True), BAD_DATA,
         r"set_measure_timing: only for a compilation created for exactly one device", ready_execution),
    Case("execution-set_timeout-multi-device", lambda e: e.set_timeout(10**9), BAD_DATA,
         r"set_timeout: only for a compilation created for exactly one device", ready_execution),
    Case("set_loop_timeout-negative", lambda e: e.set_loop_timeout(-5), BAD_DATA,
         r"set_loop_timeout: duration must be a non-negative int.*-5", ready_execution),
    Case("burst-of-another-compilation", lambda eb: eb[0].burst_compute(eb[1]), BAD_DATA,
         r"burst_compute: the burst belongs to another compilation", _burst_other),
    Case("burst-closed", lambda eb: eb[0].burst_compute(eb[1]), BAD_DATA, r"burst_compute: expected an open Burst",
         lambda: _closed_burst()),
    Case("fenced-dependencies-none", lambda e: e.start_compute_with_dependencies(None), BAD_DATA,
         r"start_compute_with_dependencies: dependencies must be a sequence of Events, got None", ready_execution),
    Case("event-wait-bad-timeout", lambda ev: ev.wait("soon"), BAD_DATA,
         r"Event.wait: timeout must be a non-negative number of seconds or None, got 'soon'",
         lambda: _started_event()),
    Case("fenced-dependency-not-an-event", lambda e: e.start_compute_with_dependencies([object()]), BAD_DATA,
         r"start_compute_with_dependencies: dependencies must be Events", ready_execution),
]


# -- helpers used by the cases (defined after the table; called lazily) ----------------------------
def _per_channel_unset() -> Model:
    m = add_model(finish=False)  # operand 4: per-channel, its scales never given
    m.add_operand(OperandType(OperandCode.TENSOR_QUANT8_SYMM_PER_CHANNEL, (3, 2)))
    return m


def _memory_model() -> Model:
    return operands(T22)


def _freed(mem: Memory) -> Memory:
    mem.free()
    return mem


_TMP_DIR = tempfile.TemporaryDirectory(prefix="mlts-malformed-")


@pytest.fixture(scope="module", autouse=True)
def _remove_tmp_files():
    yield
    _TMP_DIR.cleanup()


def _tmpfile(size: int) -> str:
    fd, path = tempfile.mkstemp(dir=_TMP_DIR.name)
    os.write(fd, bytes(size))
    os.close(fd)
    return path


def _read_only(shape) -> np.ndarray:
    a = np.empty(shape, np.float32)
    a.flags.writeable = False
    return a


def _inputs_identified() -> Model:
    m = operands(T22, T22, T22)
    fuse_none(m)
    m.identify_inputs_and_outputs([0, 1], [2])
    return m


def _no_operations() -> Model:
    m = operands(T22)
    m.identify_inputs_and_outputs([], [0])
    return m


def _only_input0_set() -> Execution:
    e = Execution(compiled())
    e.set_input(0, np.ones((2, 2), np.float32))
    e.set_output(0, np.empty((2, 2), np.float32))
    return e


def _started_event():
    e = ready_execution()
    e.set_output(0, np.empty((2, 2), np.float32))
    return e.start_compute()


def _closed_burst() -> tuple[Execution, Burst]:
    e = ready_execution()
    e.set_output(0, np.empty((2, 2), np.float32))
    b = Burst(e.compilation)
    b.close()
    return e, b


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 45


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed(case: Case):
    subject = case.setup()  # must succeed: only the act is malformed
    with pytest.raises(MltsError) as info:
        case.act(subject)
    err = info.value
    assert err.code == case.code, f"expected {case.code.name}, got {err.code.name}: {err.message}"
    assert re.search(case.match, err.message), f"message {err.message!r} does not match {case.match!r}"
    # The str() of the error leads with the code name so logs are readable.
    assert str(err).startswith(case.code.name)


# -- cases that need more than one call ------------------------------------------------------------
def test_output_insufficient_size_reports_known_shape():
    """An output of unknown dimensions bound to a too-small array: OUTPUT_INSUFFICIENT_SIZE, and the
    execution reports the shape it needed (NNAPI's getOutputOperandDimensions after the failure)."""
    e = ready_execution(out_dims=(0, 0))
    e.set_output(0, np.empty(1, np.float32))
    with pytest.raises(MltsError) as info:
        e.compute()
    assert info.value.code == ResultCode.OUTPUT_INSUFFICIENT_SIZE
    assert info.value.output_shapes is not None
    assert tuple(info.value.output_shapes[0].dimensions) == (2, 2)


def test_failed_add_operation_leaves_model_usable():
    """A rejected add_operation changes nothing: the model can still be completed correctly."""
    m = operands(T22, T22, I32, T22)
    m.set_operand_value(2, np.int32(0))
    with pytest.raises(MltsError):
        m.add_operation(OperationCode.ADD, [0, 1], [3])
    m.add_operation(OperationCode.ADD, [0, 1, 2], [3])
    m.identify_inputs_and_outputs([0, 1], [3])
    m.finish()
    e = Execution(compiled(m))
    e.set_input(0, np.ones((2, 2), np.float32))
    e.set_input(1, np.ones((2, 2), np.float32))
    out = np.empty((2, 2), np.float32)
    e.set_output(0, out)
    e.compute()
    np.testing.assert_array_equal(out, np.full((2, 2), 2, np.float32))


def test_reusable_execution_computes_twice():
    """The counterpart of compute-twice-not-reusable: set_reusable(True) allows it."""
    e = ready_execution()
    e.set_reusable(True)
    out = np.empty((2, 2), np.float32)
    e.set_output(0, out)
    e.compute()
    e.compute()
    np.testing.assert_array_equal(out, np.full((2, 2), 2, np.float32))


def test_failed_execution_has_no_results():
    """Inputs whose run-time shapes cannot broadcast: the computation fails (OP_FAILED, naming the
    operation), and afterwards results are unavailable (BAD_STATE), as NNAPI's completedWith rule says."""
    m = Model()
    t = OperandType(F32, (0, 2))
    for op_type in (t, t, I32, t):
        m.add_operand(op_type)
    m.set_operand_value(2, np.int32(0))
    m.add_operation(OperationCode.ADD, [0, 1, 2], [3])
    m.identify_inputs_and_outputs([0, 1], [3])
    m.finish()
    e = Execution(compiled(m, single_device=True))
    e.set_measure_timing(True)
    e.set_input(0, np.ones((3, 2), np.float32))
    e.set_input(1, np.ones((2, 2), np.float32))
    with pytest.raises(MltsError) as info:
        e.compute()
    assert info.value.code == ResultCode.OP_FAILED
    assert re.search(r"operation 0 \(ADD\)", info.value.message)
    for call in (lambda: e.get_output_operand_dimensions(0), lambda: e.get_output(0), lambda: e.get_duration(0)):
        with pytest.raises(MltsError) as info:
            call()
        assert info.value.code == ResultCode.BAD_STATE
