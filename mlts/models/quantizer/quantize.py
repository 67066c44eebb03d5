"""The public entry point: `quantize_model`, as named steps (options, plan, calibrate, choose, rewrite, package)."""
from __future__ import annotations

import json
from typing import Iterable, Mapping

import numpy as np

from .calibration import collect_ranges, parse_calibration
from .parameters import WeightPolicy, activation_params, plan_activations
from .qparams import ACTIVATION_DTYPES, INPUT_SCALE, INPUT_ZERO_POINT
from .rewrite import rewrite_graph

SCHEMES = tuple(ACTIVATION_DTYPES)
QUANT_OPSET = 13


def _input_params(scheme: str, input_params: tuple[float, int] | str | None) -> tuple[np.float32, int] | None:
    """The graph input's (scale, zero point), or None to calibrate it."""
    if input_params is None:
        return INPUT_SCALE, INPUT_ZERO_POINT[scheme]
    if input_params == "calibrated":
        return None
    return np.float32(input_params[0]), int(input_params[1])


def _calibrated_ranges(float_model, calibration_inputs, tensors: list[str], known: Mapping | None, *,
                       calibration: str, percentile: float, batch_size: int) -> tuple[dict, int]:
    """The `known` ranges plus those of the other `tensors`, and the number of calibration samples."""
    ranges = dict(known or {})
    todo = [t for t in tensors if t not in ranges]
    if not todo:
        return ranges, 0
    found, samples = collect_ranges(float_model, calibration_inputs, todo, calibration=calibration,
                                    percentile=percentile, batch_size=batch_size)
    ranges.update(found)
    return ranges, samples


def _package(float_model, qgraph, metadata: dict):
    """The quantized model: opset >= 13 for per-channel QDQ, IR >= 7, the options as metadata, checked."""
    import onnx
    from onnx import helper
    opset = max([o.version for o in float_model.opset_import if o.domain in ("", "ai.onnx")] + [QUANT_OPSET])
    opsets = [helper.make_opsetid("", opset)] + [o for o in float_model.opset_import if o.domain not in ("", "ai.onnx")]
    qmodel = helper.make_model(qgraph, producer_name="mlts-quantizer", opset_imports=opsets)
    qmodel.ir_version = max(float_model.ir_version, 7)
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
    input_params: (scale, zero_point) of the graph input; default (1/127.5, 128) for uint8 and
    (1/127.5, 0) for int8; "calibrated" to calibrate it like any activation.
    per_channel_fc: int8 only: per-channel Gemm weights too (NNAPI's FULLY_CONNECTED has none).
    reduce_range: 7-bit weights (uint8 [0, 127], int8 [-63, 63]), like onnxruntime's option of the
    same name: x86 CPUs without VNNI saturate int8 x int8 products in onnxruntime's fused kernels.
    ranges: precomputed {tensor: (lo, hi)} (skips calibration for those tensors).
    """
    from onnx import TensorProto

    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r} (expected one of {', '.join(SCHEMES)})")
    calibration, percentile = parse_calibration(calibration, percentile)
    plan = plan_activations(float_model, scheme, _input_params(scheme, input_params))
    ranges, samples = _calibrated_ranges(float_model, calibration_inputs, plan.calibrated(), ranges,
                                         calibration=calibration, percentile=percentile, batch_size=batch_size)
    params = activation_params(plan, ranges, scheme)
    policy = WeightPolicy(scheme, per_channel_fc, reduce_range)
    elem_type = TensorProto.UINT8 if scheme == "uint8" else TensorProto.INT8
    qgraph = rewrite_graph(float_model.graph, params, policy, elem_type)
    metadata = {"scheme": scheme, "calibration": calibration, "calibration_samples": samples,
                "weights": "per-tensor asymmetric uint8" if scheme == "uint8" else "per-channel symmetric int8",
                "weight_bits": policy.bits}
    if calibration == "percentile":
        metadata["percentile"] = float(percentile)
    return _package(float_model, qgraph, metadata)
