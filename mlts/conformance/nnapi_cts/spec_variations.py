"""The variations of our implementation of NNAPI's spec DSL: each transforms a copy of a model (data
types, relaxed computation, NCHW layout, axes, activations, constants as inputs, inputs and outputs as
internal operands), as NNAPI's generator README documents them."""
from __future__ import annotations

from typing import Any

import numpy as np

from .spec_model import (Input, Internal, Model, Operand, OperandKind, Output, Parameter, SkipVariation,
                         _kind_from_tuple, dequantize, quantize)


class ModelVariation:
    """A transformation of a copy of the model; `targetOperands` maps operand -> argument."""

    supports_subgraphs = False

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.targetOperands: dict[Operand, Any] = {}

    def ApplyTo(self, model: Model) -> Model:
        if not self.supports_subgraphs:
            assert not any(o.type.type == "SUBGRAPH" for o in model.operands), \
                f"{type(self).__name__} does not support subgraphs"
        if not self.targetOperands:
            self.AutoIdentify(model)
        targets = [model.find(o) for o in sorted(self.targetOperands)]
        model.replace([self.TransformOperand(o, self.targetOperands[o]) for o in targets])
        return self.TransformModel(model)

    def Identify(self, operands: Any = None, params: Any = None) -> "ModelVariation":
        if operands is not None:
            self.targetOperands = operands if isinstance(operands, dict) else {o: None for o in operands}
        return self

    def SetToDefaultName(self) -> "ModelVariation":
        self.name = ""
        return self

    def AutoIdentify(self, model: Model) -> "ModelVariation":
        return self

    def TransformOperand(self, op: Operand, arg: Any = None) -> Operand:
        return op

    def TransformModel(self, model: Model) -> Model:
        return model


class DefaultVariation(ModelVariation):
    supports_subgraphs = True


class DataTypeConverter(ModelVariation):
    """Operands converted to other types: values dequantized from the old type, quantized to the new."""

    supports_subgraphs = True
    shorthands = ("float16", "int32", "quant8", "quant8_signed")

    def __init__(self, targetType: str | None = None, name: str | None = None, scale: float | None = None,
                 zeroPoint: int | None = None) -> None:
        super().__init__(name)
        assert targetType is None or targetType.lower() in self.shorthands
        self.targetType, self.scale, self.zeroPoint = targetType, scale, zeroPoint

    def SetToDefaultName(self) -> "DataTypeConverter":
        if self.targetType is not None:
            self.name = self.targetType.lower()
            return self
        firsts = [a[0] for a in self.targetOperands.values() if not isinstance(a, DataTypeConverter)]
        for code, name in (("TENSOR_QUANT8_SYMM_PER_CHANNEL", "channelQuant8"), ("TENSOR_QUANT8_ASYMM", "quant8"),
                           ("TENSOR_QUANT8_ASYMM_SIGNED", "quant8_signed"), ("TENSOR_INT32", "int32"),
                           ("TENSOR_FLOAT16", "float16")):
            if code in firsts:
                self.name = name
                return self
        self.name = "float32"
        return self

    def AutoIdentify(self, model: Model) -> "DataTypeConverter":
        if self.targetType is None:
            return self
        if self.targetType in ("quant8", "quant8_signed"):
            code = "TENSOR_QUANT8_ASYMM" if self.targetType == "quant8" else "TENSOR_QUANT8_ASYMM_SIGNED"
            assert self.scale is not None and self.zeroPoint is not None
            tensor, scalar = [code, self.scale, self.zeroPoint], None
        else:
            tensor, scalar = ["TENSOR_" + self.targetType.upper()], [self.targetType.upper()]
        targets: dict[Operand, Any] = {}
        for o in model.operands:
            if o.type.type == "SUBGRAPH":
                targets[o] = DataTypeConverter(self.targetType, self.name, self.scale, self.zeroPoint)
        for o in model.operands:
            if o.type.type == "TENSOR_FLOAT32":
                targets[o] = tensor
        if scalar is not None:
            for o in model.operands:
                if o.type.type == "FLOAT32":
                    targets[o] = scalar
        return self.Identify(targets)

    def TransformOperand(self, op: Operand, arg: Any = None) -> Operand:
        if isinstance(arg, DataTypeConverter):  # a referenced model converts as a whole
            op.value[0] = arg.ApplyTo(op.value[0])
            return op
        arg = list(arg)
        new_kind = _kind_from_tuple([arg[0], op.type.dimensions, *arg[1:]], None)
        if op.value is None or op.type.count() == 0:
            op.type = new_kind
        else:
            real = dequantize(op.GetValueAsNumpy().astype(np.float32), op.type)
            op.type = new_kind
            op.SetValueFromNumpy(quantize(real, new_kind))
        return op


class RelaxedModeConverter(ModelVariation):
    """float32 computed with float16 range and precision allowed."""

    supports_subgraphs = True

    def __init__(self, isRelaxed: Any = True, name: str | None = None) -> None:
        super().__init__(name)
        self.isRelaxed = isRelaxed if isinstance(isRelaxed, bool) else True

    def SetToDefaultName(self) -> "RelaxedModeConverter":
        self.name = "relaxed" if self.isRelaxed else "float"
        return self

    def TransformModel(self, model: Model) -> Model:
        return model.RelaxedExecution(self.isRelaxed)


class DataLayoutConverter(ModelVariation):
    """NHWC <-> NCHW: 4-D tensors transposed, 4-element vectors permuted, the layout BOOL set."""

    def __init__(self, targetLayout: str = "nchw", name: str | None = None) -> None:
        super().__init__(name)
        self.targetLayout = targetLayout.lower()
        assert self.targetLayout in ("nchw", "nhwc")
        self.perm = (0, 3, 1, 2) if self.targetLayout == "nchw" else (0, 2, 3, 1)

    def SetToDefaultName(self) -> "DataLayoutConverter":
        self.name = self.targetLayout
        return self

    def TransformOperand(self, op: Operand, arg: Any = None) -> Operand:
        t = op.type
        if len(t.dimensions) == 4:
            if op.value is not None and t.count() != 0:
                op.SetValueFromNumpy(op.GetValueAsNumpy().transpose(self.perm))
            op.type = OperandKind(t.type, [t.dimensions[i] for i in self.perm], t.scale, t.zeroPoint)
        elif len(t.dimensions) == 1 and len(op.value) == 4:
            op.SetValueFromNumpy(op.GetValueAsNumpy()[list(self.perm)])
        elif t.type == "BOOL":
            op.SetValue(self.targetLayout == "nchw")
        else:
            raise AssertionError(f"{op} not supported by DataLayoutConverter")
        return op


class AxisConverter(ModelVariation):
    """Moves axis `origin` to `target` (tensors transposed, the INT32 axis set) and drops axes `drop`."""

    def __init__(self, origin: int, target: int, dim: int, drop: Any = (), name: str | None = None) -> None:
        super().__init__(name)
        assert all(-dim <= i < dim for i in (origin, target))
        self.origin, self.target, self.dim = origin, target, dim
        self.perm = list(range(dim))
        self.perm.insert(target if target >= 0 else target + dim, self.perm.pop(origin))
        drop = [drop] if isinstance(drop, int) else list(drop)
        self.drop = [i if i >= 0 else i + dim for i in drop]
        assert target not in self.drop and target + dim not in self.drop

    def SetToDefaultName(self) -> "AxisConverter":
        axis = self.target if self.target >= 0 else self.target + self.dim
        axis -= sum(i < axis for i in self.drop)
        self.name = f"dim{self.dim - len(self.drop)}_axis{axis}{'' if self.target >= 0 else '_neg'}"
        return self

    def TransformOperand(self, op: Operand, arg: Any = None) -> Operand:
        t = op.type
        if t.type == "INT32":
            op.SetValue(self.target)
            axis = op.value[0]
            if axis >= 0:
                op.SetValue(axis - sum(i < axis for i in self.drop))
            else:
                op.SetValue(axis + sum(i > axis + self.dim for i in self.drop))
            return op
        assert len(t.dimensions) == self.dim, f"{op} not supported by AxisConverter"
        if op.value is not None:
            values = op.GetValueAsNumpy().transpose(self.perm)
            for i in sorted(self.drop, reverse=True):
                values = np.take(values, 0, axis=i)
            op.SetValueFromNumpy(values)
        dims = [t.dimensions[i] for i in self.perm]
        op.type = OperandKind(t.type, [d for i, d in enumerate(dims) if i not in self.drop], t.scale, t.zeroPoint)
        return op


class ActivationConverter(ModelVariation):
    """The fused activation set on the INT32 parameter and applied to the expected outputs."""

    activations = {"none": (0, None, None), "relu": (1, 0.0, None), "relu1": (2, -1.0, 1.0),
                   "relu6": (3, 0.0, 6.0)}

    def __init__(self, act: str = "relu", name: str | None = None) -> None:
        super().__init__(name)
        self.act = act.lower()
        self.code, self.low, self.high = self.activations[self.act]

    def SetToDefaultName(self) -> "ActivationConverter":
        self.name = self.act
        return self

    def TransformOperand(self, op: Operand, arg: Any = None) -> Operand:
        if op.type.type == "INT32":
            return op.SetValue(self.code)
        assert isinstance(op, Output)
        values = op.GetValueAsNumpy()
        if self.low is not None:
            values = np.maximum(values, quantize(self.low, op.type))
        if self.high is not None:
            values = np.minimum(values, quantize(self.high, op.type))
        return op.SetValueFromNumpy(values)


class AllTensorsAsInputsConverter(ModelVariation):
    """Every explicitly declared constant tensor becomes a model input (one-operation models only)."""

    supports_subgraphs = True

    def SetToDefaultName(self) -> "AllTensorsAsInputsConverter":
        self.name = "all_tensors_as_inputs"
        return self

    def TransformModel(self, model: Model) -> Model:
        if len(model.operations) != 1:
            raise SkipVariation
        params = [p for p in model.operands
                  if type(p) is Parameter and not p.type.is_scalar() and p.value is not None]
        if not params:
            raise SkipVariation
        model.replace([p.ConvertTo(Input) for p in params])
        return model


def _fits_add(op: Operand) -> bool:
    return (len(op.type.dimensions) <= 4 and op.value is not None and len(op.value) > 0
            and op.type.type in ("TENSOR_FLOAT32", "TENSOR_QUANT8_ASYMM", "TENSOR_FLOAT16",
                                 "TENSOR_QUANT8_ASYMM_SIGNED"))


class AllInputsAsInternalCoverter(ModelVariation):
    """Each input is produced by `new_input + 0` (ADD), so the operation reads a temporary."""

    supports_subgraphs = True

    def SetToDefaultName(self) -> "AllInputsAsInternalCoverter":
        self.name = "all_inputs_as_internal"
        return self

    def TransformModel(self, model: Model) -> Model:
        if len(model.operations) != 1:
            raise SkipVariation
        inputs = [i for i in model.GetInputs() if _fits_add(i) and i.mayBeInternal]
        if not inputs:
            raise SkipVariation
        for op in inputs:
            t = op.type
            zero = Parameter("placeholder", (t.type, [1], t.scale, t.zeroPoint), [t.zeroPoint])
            model.Operation("ADD", op.ConvertTo(Input, name=op.name + "_new"), zero, 0).To(op)
        model.replace([op.ConvertTo(Internal) for op in inputs])
        return model


class AllOutputsAsInternalCoverter(ModelVariation):
    """Each output feeds `output + 0` (ADD) whose result is the new model output."""

    supports_subgraphs = True

    def SetToDefaultName(self) -> "AllOutputsAsInternalCoverter":
        self.name = "all_outputs_as_internal"
        return self

    def TransformModel(self, model: Model) -> Model:
        if len(model.operations) != 1:
            raise SkipVariation
        outputs = [o for o in model.GetOutputs() if _fits_add(o)]
        if not outputs:
            raise SkipVariation
        for op in outputs:
            t = op.type
            zero = Parameter("placeholder", (t.type, [1], t.scale, t.zeroPoint), [t.zeroPoint])
            model.Operation("ADD", op, zero, 0).To(op.ConvertTo(Output, name=op.name + "_new"))
        model.replace([op.ConvertTo(Internal) for op in outputs])
        return model


def _as_variation(value: Any) -> ModelVariation:
    """Strings ("float16", "relaxed", "nchw", "relu") or (string, operands) stand for variations."""
    if isinstance(value, ModelVariation):
        return value
    parts = list(value) if isinstance(value, (list, tuple)) else [value]
    key = parts[0].lower()
    if key in DataTypeConverter.shorthands:
        variation: ModelVariation = DataTypeConverter(parts[0])
    elif key == "relaxed":
        variation = RelaxedModeConverter(True)
    elif key in ("nchw", "nhwc"):
        variation = DataLayoutConverter(key)
    elif key in ActivationConverter.activations:
        variation = ActivationConverter(key)
    else:
        raise ValueError(f"{parts[0]!r} is not a variation")
    if len(parts) > 1:
        variation.Identify(*parts[1:])
    return variation
