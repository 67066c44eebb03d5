"""Helpers of the ONNX importer tests: graph building, onnxruntime references, tolerances."""
from __future__ import annotations

import logging
import warnings
from typing import Iterable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from mlts.models import import_onnx
from mlts.models.mobilenet import weight_shapes
from mlts.runtime import OperandCode
from support.tolerance import assert_cts_close

IR_VERSION = 8  # what the installed onnxruntime reads

FLOAT = TensorProto.FLOAT


def tensor(name: str, shape, elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 13, extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="mlts-tests")
    model.ir_version = IR_VERSION
    return model


def ort_run(model: onnx.ModelProto | bytes | str, feeds: dict) -> dict:
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # small models: threads only contend on the 2-core CI machines
    options.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def op_types(imported) -> list[str]:
    return [code.name for code, _, _ in imported.model.operations()]


def assert_float_close(actual, expected, *, softmax: bool = False) -> None:
    """CTS float32 tolerance; softmax outputs: max abs 1e-4 (SPEC section 3 and the importer brief)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if softmax:
        diff = float(np.max(np.abs(actual.astype(np.float64) - expected), initial=0.0))
        assert diff <= 1e-4, f"softmax outputs differ by {diff}"
    else:
        assert_cts_close(actual, expected, OperandCode.TENSOR_FLOAT32)


def check_against_ort(model: onnx.ModelProto, feeds: dict, *, softmax_outputs: Iterable[str] = (), devices=None):
    """Import, run on nnapi-reference (or `devices`), compare every output with onnxruntime."""
    imported = import_onnx(model.SerializeToString())
    got = imported.run(feeds, devices=devices or ["nnapi-reference"])
    ref = ort_run(model, feeds)
    for name in imported.output_names:
        if np.asarray(ref[name]).dtype.kind == "f":
            assert_float_close(got[name], ref[name], softmax=name in softmax_outputs)
        else:
            np.testing.assert_array_equal(got[name], ref[name])
    return imported, got, ref


def assert_quant_close(actual, expected, step: float, *, max_steps: float = 3, argmax: bool = True) -> float:
    """Within `max_steps` quantization steps; identical argmax unless ORT's top two are within tolerance."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape
    steps = float(np.max(np.abs(actual - expected), initial=0.0)) / step
    assert steps <= max_steps + 1e-3, f"outputs differ by {steps:.2f} quantization steps (> {max_steps})"
    if argmax:
        for a, e in zip(actual.reshape(actual.shape[0], -1), expected.reshape(expected.shape[0], -1)):
            top = np.sort(e)[-2:]
            if top[1] - top[0] > max_steps * step:  # a clear winner must be the same
                assert a.argmax() == e.argmax(), f"argmax {a.argmax()} != onnxruntime's {e.argmax()}"
    return steps


# -- MobileNet with random weights -------------------------------------------------------------------
def mobilenet_weights(family: str, alpha: float, seed: int = 0, *, residual_gain: float = 0.5,
                      classifier_gain: float = 2.0) -> dict[str, np.ndarray]:
    """Seeded random weights of sensible scale: He-normal convolutions (ReLU6 follows), the linear
    bottleneck projections of v2 at half gain (keeps the residual stack stable), a moderate
    classifier, small biases."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in weight_shapes(family, alpha).items():
        if name.endswith(".weight"):
            fan_in = int(np.prod(shape[1:]))
            gain = classifier_gain if name.startswith("classifier") else (
                residual_gain if "project" in name else 1.0)
            weights[name] = (rng.standard_normal(shape) * gain * np.sqrt(2.0 / fan_in)).astype(np.float32)
        else:
            weights[name] = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    return weights


def image_batch(seed: int, resolution: int, n: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 3, resolution, resolution)).astype(np.float32)


# -- onnxruntime static quantization --------------------------------------------------------------------
def quantize(model: onnx.ModelProto, input_name: str, input_shape: Sequence[int], *, fmt: str,
             per_channel: bool, samples: int = 8, seed: int = 0) -> bytes:
    """onnxruntime.quantization.quantize_static with uint8 activations and int8 weights.

    reduce_range (7-bit weights) keeps onnxruntime's x86 u8s8 kernels free of the int16 pair
    saturation they otherwise have without VNNI, so that the reference is exact integer arithmetic.
    """
    import os
    import tempfile

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(seed)
    data = [{input_name: rng.uniform(-1, 1, input_shape).astype(np.float32)} for _ in range(samples)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(data)

        def get_next(self):
            return next(self.it, None)

    logging.disable(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "quant.onnx")
            onnx.save(model, src)
            quantize_static(src, dst, Reader(), quant_format=getattr(QuantFormat, fmt), per_channel=per_channel,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=True)
            with open(dst, "rb") as f:
                return f.read()
    finally:
        logging.disable(logging.NOTSET)
