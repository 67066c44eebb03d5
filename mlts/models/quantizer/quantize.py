"""The public entry point: `quantize_model`, as named steps (options, plan, calibrate, choose, rewrite, package)."""
from __future__ import annotations

import json
from typing import Iterable, Mapping

import numpy as np

from .calibration import collect_ranges, parse_calibration
from .graph import STANDARD_DOMAINS, standard_part
from .parameters import ActivationPlan, WeightPolicy, activation_params, plan_activations
from .qparams import ACTIVATION_DTYPES, INPUT_SCALE, INPUT_ZERO_POINT
from .recurrent import LSTM_OPSET
from .rewrite import rewrite_graph

SCHEMES = tuple(ACTIVATION_DTYPES)
QUANT_OPSET = 13
#: the IR version that goes with opset 21 (int16 QuantizeLinear)
LSTM_IR_VERSION = 10


def _is_image_input(model) -> bool:
    """Whether the graph's first input is an NCHW RGB image ([N, 3, H, W]), fed through to_float_input."""
    from .graph import graph_input_names
    names = graph_input_names(model.graph)
    vi = next((i for i in model.graph.input if names and i.name == names[0]), None)
    dims = [] if vi is None else list(vi.type.tensor_type.shape.dim)
    return len(dims) == 4 and dims[1].HasField("dim_value") and dims[1].dim_value == 3


def _input_params(scheme: str, input_params: tuple[float, int] | str | None,
                  model) -> tuple[np.float32, int] | None:
    """The graph input's (scale, zero point), or None to calibrate it."""
    if input_params is None:
        return (INPUT_SCALE, INPUT_ZERO_POINT[scheme]) if _is_image_input(model) else None
    if input_params == "calibrated":
        return None
    return np.float32(input_params[0]), int(input_params[1])


def _calibrated_ranges(float_model, calibration_inputs, plan: ActivationPlan, known: Mapping | None, *,
                       calibration: str, percentile: float, batch_size: int) -> tuple[dict, int]:
    """The `known` ranges plus the plan's other ranges, and the number of calibration samples.

    Calibration runs the graph up to its non-standard nodes (graph.standard_part).
    """
    ranges = dict(known or {})
    todo = [t for t in plan.calibrated() if t not in ranges]
    derived = [d for d in plan.derived if not all(k in ranges for k in d.keys)]
    if not todo and not derived:
        return ranges, 0
    found, samples = collect_ranges(standard_part(float_model), calibration_inputs, todo, calibration=calibration,
                                    percentile=percentile, batch_size=batch_size, derived=derived)
    ranges.update({t: r for t, r in found.items() if t not in ranges})
    return ranges, samples


def _default_opset(model) -> int:
    return max([o.version for o in model.opset_import if o.domain in STANDARD_DOMAINS] or [1])


def _with_lstm_opset(float_model):
    """A model with LSTM nodes at opset >= 21 (int16 QuantizeLinear for the cell state), converted by onnx."""
    if not any(n.op_type == "LSTM" for n in float_model.graph.node) or _default_opset(float_model) >= LSTM_OPSET:
        return float_model
    from onnx import version_converter
    return version_converter.convert_version(float_model, LSTM_OPSET)


def _package(float_model, qgraph, metadata: dict):
    """The quantized model: opset >= 13 for per-channel QDQ (21 with int16 cell states), IR >= 7 (10),
    the options as metadata, checked."""
    import onnx
    from onnx import TensorProto, helper
    int16 = any(t.data_type == TensorProto.INT16 for t in qgraph.initializer)
    opset = max(_default_opset(float_model), QUANT_OPSET, LSTM_OPSET if int16 else 0)
    opsets = [helper.make_opsetid("", opset)] + [o for o in float_model.opset_import
                                                 if o.domain not in STANDARD_DOMAINS]
    qmodel = helper.make_model(qgraph, producer_name="mlts-quantizer", opset_imports=opsets)
    qmodel.ir_version = max(float_model.ir_version, 7, LSTM_IR_VERSION if opset >= LSTM_OPSET else 0)
    helper.set_model_props(qmodel, {"mlts.quantization": json.dumps(metadata)})
    onnx.checker.check_model(qmodel)
    return qmodel


def quantize_model(float_model, calibration_inputs: Iterable[np.ndarray] | np.ndarray, *, scheme: str = "uint8",
                   calibration: str = "minmax", percentile: float = 99.99, batch_size: int = 16,
                   input_params: tuple[float, int] | str | None = None, per_channel_fc: bool = False,
                   reduce_range: bool = False, ranges: Mapping[str, tuple[float, float]] | None = None):
    """Quantizes a float ONNX model into a QDQ ONNX model (see the package docstring).

    calibration_inputs: float inputs of the float model ([N, C, H, W] batches or [C, H, W] samples;
    for MobileNets `mlts.datasets.preprocess.to_float_input(images)`), or NHWC uint8 images
    (converted with to_float_input). Any iterable: a generator of batches keeps memory small.
    calibration: "minmax" (the observed range) or "percentile" (the `percentile`-th and
    (100 - `percentile`)-th percentiles of every tensor's values over all calibration inputs,
    from a histogram; "percentile:99.9" sets the percentile too).
    input_params: (scale, zero_point) of the graph input; default for image inputs ([N, 3, H, W],
    to_float_input's [-1, 1]) (1/127.5, 128) for uint8 and (1/127.5, 0) for int8, for other inputs
    (e.g. an LSTM's feature frames) calibrated; "calibrated" to calibrate it like any activation.
    per_channel_fc: int8 only: per-channel Gemm weights too (NNAPI's FULLY_CONNECTED has none).
    reduce_range: 7-bit weights (uint8 [0, 127], int8 [-63, 63]), like onnxruntime's option of the
    same name: x86 CPUs without VNNI saturate int8 x int8 products in onnxruntime's fused kernels.
    ranges: precomputed {tensor: (lo, hi)} (skips calibration for those tensors; an LSTM's states over
    every step go by "<node name>#hidden" and "<node name>#cell").
    Graphs with LSTM nodes (int8 only) are converted to opset 21 (onnx.version_converter) for the
    cell state's int16 QuantizeLinear; nodes of other domains (e.g. ai.mlts DetectionPostProcess)
    stay float, as does everything after them, and calibration runs the graph cut before them.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r} (expected one of {', '.join(SCHEMES)})")
    calibration, percentile = parse_calibration(calibration, percentile)
    plan = plan_activations(float_model, scheme, _input_params(scheme, input_params, float_model))
    converted = _with_lstm_opset(float_model)
    if converted is not float_model:
        float_model = converted
        plan = plan_activations(float_model, scheme, _input_params(scheme, input_params, float_model))
    ranges, samples = _calibrated_ranges(float_model, calibration_inputs, plan, ranges,
                                         calibration=calibration, percentile=percentile, batch_size=batch_size)
    params = activation_params(plan, ranges, scheme)
    policy = WeightPolicy(scheme, per_channel_fc, reduce_range)
    qgraph = rewrite_graph(float_model.graph, params, policy)
    metadata = {"scheme": scheme, "calibration": calibration, "calibration_samples": samples,
                "weights": "per-tensor asymmetric uint8" if scheme == "uint8" else "per-channel symmetric int8",
                "weight_bits": policy.bits}
    if plan.derived:
        metadata["lstm"] = "per-gate symmetric int8 weights, int16 power-of-two cell state"
    if calibration == "percentile":
        metadata["percentile"] = float(percentile)
    return _package(float_model, qgraph, metadata)
