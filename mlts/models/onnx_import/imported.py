"""ImportedModel: the finished NNAPI model of an ONNX file, runnable with ONNX names and layouts."""
from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

import numpy as np

from mlts.runtime import Compilation, Execution, MltsError, Model, OperandLifetime, ResultCode, devices as all_devices
from mlts.runtime import graph_dump as _graph_dump


def _bad(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


class ImportedModel:
    """An imported ONNX model.

    `.model` is the finished mlts Model (inputs and outputs in ONNX order and layout);
    `.run({name: array}, devices=None)` compiles on first use (all devices with CPU fallback, or
    exactly the given devices) and returns {output name: array} with ONNX dtypes and shapes.
    """

    def __init__(self, model: Model, input_names: Sequence[str], output_names: Sequence[str], onnx_model: Any,
                 *, input_types: Mapping[str, tuple], output_types: Mapping[str, tuple],
                 operation_origins: Sequence[str], name: str = "",
                 operand_tensors: Mapping[int, tuple[str, tuple[int, ...]]] | None = None) -> None:
        self.model = model
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.onnx_model = onnx_model
        self.name = name or "model"
        self._input_types = dict(input_types)
        self._output_types = dict(output_types)
        self._origins = list(operation_origins)
        #: operand index -> (ONNX tensor name, permutation): the operand holds tensor.transpose(perm)
        self.operand_tensors = dict(operand_tensors or {})
        self._compilations: dict[tuple, Compilation] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"<ImportedModel {self.name}: {self.model.operation_count} operations, inputs {self.input_names}, "
                f"outputs {self.output_names}>")

    # -- compilation ----------------------------------------------------------------------------
    @staticmethod
    def _device_key(devices) -> tuple:
        if devices is None:
            return ("<all devices>",)
        if isinstance(devices, (str,)) or not isinstance(devices, (list, tuple)):
            devices = [devices]
        names = []
        for d in devices:
            names.append(d if isinstance(d, str) else getattr(d, "name", repr(d)))
        return tuple(names)

    def compilation(self, devices=None) -> Compilation:
        """The finished compilation for a device set (cached): None = every device with CPU fallback."""
        key = self._device_key(devices)
        with self._lock:
            c = self._compilations.get(key)
            if c is None:
                if devices is None:
                    c = Compilation(self.model)
                else:
                    devs = devices if isinstance(devices, (list, tuple)) else [devices]
                    c = Compilation.for_devices(self.model, list(devs))
                c.finish()
                self._compilations[key] = c
            return c

    # -- execution ------------------------------------------------------------------------------
    def input_type(self, name: str) -> tuple:
        """(numpy dtype, ONNX shape with None for unknown dimensions) of input `name`."""
        return self._input_types[name]

    def input_arrays(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        """The model's input arrays (NNAPI order and types) of {ONNX name: array}, checked."""
        if not isinstance(inputs, Mapping):
            raise _bad(f"run: inputs must be a dict of name -> numpy array, got {type(inputs).__name__}")
        missing = [n for n in self.input_names if n not in inputs]
        unknown = [n for n in inputs if n not in self.input_names]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing {missing}")
            if unknown:
                parts.append(f"unknown {unknown}")
            raise _bad(f"run: inputs {'; '.join(parts)} (the model's inputs are {self.input_names})")
        arrays = []
        for name in self.input_names:
            value = inputs[name]
            if isinstance(value, np.generic):
                value = np.asarray(value)
            if not isinstance(value, np.ndarray):
                raise _bad(f"run: input {name!r} must be a numpy array, got {type(value).__name__}")
            dtype, shape = self._input_types[name]
            if dtype is not None and value.dtype != dtype:
                raise _bad(f"run: input {name!r} has dtype {value.dtype}, the model expects {dtype}")
            if shape is not None:
                if value.ndim != len(shape) or any(d is not None and d != s for d, s in zip(shape, value.shape)):
                    want = "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"
                    raise _bad(f"run: input {name!r} has shape {list(value.shape)}, the model expects {want}")
            if value.dtype == np.int64:
                if value.size and (value.min() < -2**31 or value.max() >= 2**31):
                    raise _bad(f"run: input {name!r} has values outside INT32 (NNAPI's integer type)")
                value = value.astype(np.int32)
            if value.ndim == 0:
                value = value.reshape(1)
            arrays.append(np.ascontiguousarray(value))
        return arrays

    def run(self, inputs: Mapping[str, np.ndarray], devices=None) -> dict[str, np.ndarray]:
        """Execute once; inputs and outputs are keyed by ONNX names, in ONNX layout and dtypes."""
        arrays = self.input_arrays(inputs)
        compilation = self.compilation(devices)
        execution = Execution(compilation)
        for i, arr in enumerate(arrays):
            execution.set_input(i, arr)
        execution.compute()
        results = {}
        for i, name in enumerate(self.output_names):
            out = execution.get_output(i)
            dtype, shape = self._output_types[name]
            if dtype is not None and out.dtype != dtype:
                out = out.astype(dtype)
            if shape is not None and len(shape) == 0:
                out = out.reshape(())
            results[name] = out
        return results

    def origin(self, operation: int) -> str:
        """The ONNX node an NNAPI operation (add order) was converted from."""
        return self._origins[operation] if 0 <= operation < len(self._origins) else ""

    # -- inspection -----------------------------------------------------------------------------
    def _operand_text(self, index: int) -> str:
        hal = self.model.hal_model()
        lifetime = hal.main.operands[index].lifetime
        t = self.model.inferred_operand_type(index)
        tag = {OperandLifetime.CONSTANT_COPY: " const", OperandLifetime.CONSTANT_REFERENCE: " const",
               OperandLifetime.SUBGRAPH_INPUT: " input", OperandLifetime.SUBGRAPH_OUTPUT: " output",
               OperandLifetime.NO_VALUE: " omitted"}.get(lifetime, "")
        location = hal.main.operands[index].location
        if lifetime == OperandLifetime.CONSTANT_COPY and location is not None and location.pool_index == -1 \
                and (t.is_scalar or t.element_count() <= 8):
            raw = hal.operand_values[location.offset:location.offset + location.length]
            value = np.frombuffer(raw, dtype=t.dtype)
            shown = value[0].item() if t.is_scalar else value.tolist()
            tag = f" ={shown}"
        return f"#{index} {t.describe()}{tag}"

    def operations(self, devices=None) -> list[dict]:
        """Per operation (order added): type, operand types, the ONNX node it comes from, the devices
        that support it (Model.get_supported_operations_for_devices, one device at a time)."""
        devs = all_devices() if devices is None else list(devices)
        support = {}
        for d in devs:
            try:
                support[d.name] = self.model.get_supported_operations_for_devices([d])
            except MltsError:
                support[d.name] = [False] * self.model.operation_count
        rows = []
        for j, (code, ins, outs) in enumerate(self.model.operations()):
            rows.append({
                "index": j, "type": code.name,
                "inputs": [self._operand_text(i) for i in ins],
                "outputs": [self._operand_text(o) for o in outs],
                "onnx_node": self.origin(j),
                "devices": [name for name, flags in support.items() if flags[j]],
            })
        return rows

    def partition(self) -> dict:
        """The partition plan of Compilation(model) (all devices): steps with their operations (add order)."""
        compilation = self.compilation(None)
        hal = self.model.hal_model()
        by_output = {outs[0]: j for j, (_, _, outs) in enumerate(self.model.operations())}
        steps = []
        for step in compilation.plan.steps:
            ops = [by_output[hal.main.operations[pos].outputs[0]] for pos in step.operations]
            steps.append({"device": step.device.name, "operations": sorted(ops)})
        return {"steps": steps, "log": list(compilation.plan_log)}

    def describe_dict(self) -> dict:
        return {
            "name": self.name,
            "inputs": [{"name": n, "operand": i, "type": self.model.operand_type(i).describe()}
                       for n, i in zip(self.input_names, self.model.inputs)],
            "outputs": [{"name": n, "operand": i, "type": self.model.inferred_operand_type(i).describe()}
                        for n, i in zip(self.output_names, self.model.outputs)],
            "operations": self.operations(),
            "partition": self.partition(),
        }

    def describe(self) -> str:
        info = self.describe_dict()
        lines = [f"model {info['name']}: {self.model.operation_count} operations, {self.model.operand_count} operands"]
        for what in ("inputs", "outputs"):
            for io in info[what]:
                lines.append(f"{what[:-1]:<6} {io['name']}: #{io['operand']} {io['type']}")
        lines.append("operations:")
        for op in info["operations"]:
            devices = ", ".join(op["devices"]) or "no device"
            lines.append(f"  {op['index']:>3} {op['type']:<18} [{devices}]  <- {op['onnx_node']}")
            lines.append(f"        in:  {'; '.join(op['inputs'])}")
            lines.append(f"        out: {'; '.join(op['outputs'])}")
        lines.append("partition (Compilation(model), all devices):")
        for k, step in enumerate(info["partition"]["steps"]):
            lines.append(f"  step {k}: {step['device']}: operations {step['operations']}")
        for line in info["partition"]["log"]:
            lines.append(f"  | {line}")
        return "\n".join(lines)

    def graph_dump(self) -> str:
        """Graphviz dot text of the NNAPI model, operations annotated with the device of the plan."""
        try:
            per_op = self.compilation(None).plan.device_of_operation()
        except MltsError:
            per_op = None
        return _graph_dump(self.model, self.name, per_op)
