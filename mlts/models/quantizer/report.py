"""Inspecting quantized models (their input/output parameters) and comparing them with their float models."""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .calibration import BatchRunner, batches
from .evaluator import Evaluator
from .graph import input_ranks
from .qparams import QParams, dequantize_array, quantize_array


def _const_params(model, node) -> QParams:
    from onnx import numpy_helper
    inits = {t.name: t for t in model.graph.initializer}
    scale = numpy_helper.to_array(inits[node.input[1]])
    zp = numpy_helper.to_array(inits[node.input[2]]) if len(node.input) > 2 and node.input[2] else np.array(0, np.uint8)
    axis = None
    if scale.ndim:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    return QParams(scale.astype(np.float32), zp, axis)


def _params_at(quant_model, op_type: str, name: str, kind: str) -> QParams:
    """The parameters of the QuantizeLinear writing (or DequantizeLinear reading) graph tensor `name`."""
    for node in quant_model.graph.node:
        if node.op_type == op_type and (node.output[0] if op_type == "QuantizeLinear" else node.input[0]) == name:
            return _const_params(quant_model, node)
    raise ValueError(f"{kind} {name!r} is not quantized")


def input_qparams(quant_model, name: str | None = None) -> QParams:
    """Scale and zero point of a quantized model's input (the DequantizeLinear that reads it)."""
    return _params_at(quant_model, "DequantizeLinear", name or quant_model.graph.input[0].name, "input")


def output_qparams(quant_model, name: str | None = None) -> QParams:
    """Scale and zero point of a quantized model's output (the QuantizeLinear that writes it)."""
    return _params_at(quant_model, "QuantizeLinear", name or quant_model.graph.output[0].name, "output")


def _run_all(model, inputs: Sequence[np.ndarray], runner: str) -> np.ndarray:
    if runner == "numpy":  # graphs that fix their batch size run one sample at a time
        ev = Evaluator(model)
        batch_runner = BatchRunner(ev, ev.output_names[:1])
        return np.concatenate([v[ev.output_names[0]] for b in inputs for v in batch_runner.run(b)])
    if runner == "onnxruntime":
        import onnxruntime as ort  # test-only dependency
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        return np.concatenate([sess.run(None, {name: b[i:i + 1]})[0] for b in inputs for i in range(b.shape[0])])
    raise ValueError(f"unknown runner {runner!r} (expected 'numpy' or 'onnxruntime')")


def quantization_report(float_model, quant_model, inputs: Iterable[np.ndarray] | np.ndarray, *,
                        labels: Sequence[int] | np.ndarray | None = None, runner: str = "numpy",
                        batch_size: int = 16) -> dict:
    """Compares a quantized model with its float model on the same inputs.

    inputs: NHWC uint8 images (preprocessed for each model with mlts.datasets.preprocess), or
    float inputs of the float model (batches, or single samples of one less dimension than the
    model's input), quantized with the quantized model's input parameters.
    runner: "numpy" (onnx.reference with the quantizer's Conv, for both) or "onnxruntime" (a
    test-only dependency). Returns top-1 agreement, the output error in quantization steps of the
    output (max, mean), the max absolute error, and with labels each model's top-1 accuracy.
    """
    from mlts.datasets.preprocess import to_float_input, to_quant_input

    qin = input_qparams(quant_model)
    qout = output_qparams(quant_model)
    sample_rank = (input_ranks(quant_model.graph).get(quant_model.graph.input[0].name) or 4) - 1
    arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
    float_batches, quant_batches = [], []
    for arr in arrays:
        arr = np.asarray(arr)
        if arr.dtype == np.uint8 and arr.shape[-1] == 3:
            float_batches.append(to_float_input(arr))
            quant_batches.append(to_quant_input(arr, float(qin.scale), int(qin.zero_point), qin.dtype))
        else:
            f = np.asarray(arr, np.float32)
            f = f[None] if f.ndim == sample_rank else f
            float_batches.append(f)
            quant_batches.append(quantize_array(f, qin.scale, qin.zero_point, qin.dtype))
    float_batches = list(batches(float_batches, batch_size, sample_rank))
    quant_batches = [np.concatenate(quant_batches)[i:i + batch_size]
                     for i in range(0, sum(b.shape[0] for b in quant_batches), batch_size)]
    y_float = _run_all(float_model, float_batches, "numpy")
    y_quant_q = _run_all(quant_model, quant_batches, runner)
    y_quant = dequantize_array(y_quant_q, qout.scale, qout.zero_point)
    err = np.abs(y_quant.astype(np.float64) - y_float.astype(np.float64))
    steps = err / float(qout.scale)
    top_float = y_float.reshape(len(y_float), -1).argmax(axis=1)
    top_quant = y_quant.reshape(len(y_quant), -1).argmax(axis=1)
    report = {
        "num_inputs": int(len(y_float)),
        "top1_agreement": float(np.mean(top_float == top_quant)),
        "max_abs_error_steps": float(steps.max()),
        "mean_abs_error_steps": float(steps.mean()),
        "max_abs_error": float(err.max()),
        "output_scale": float(qout.scale),
        "output_zero_point": int(qout.zero_point),
        "runner": runner,
    }
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        report["float_accuracy"] = float(np.mean(top_float == labels))
        report["quant_accuracy"] = float(np.mean(top_quant == labels))
    return report
