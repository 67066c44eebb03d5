"""ONNX's own operator conformance cases (onnx.backend.test node tests) through import_onnx + nnapi-reference.

Every node test whose operators the importer supports is imported and run. Inputs that NNAPI needs
as constants (weights, shapes, axes, pads, scales, zero points) are turned into initializers holding
the case's values, the way a converter sees real models. Models written for opsets above the
importer's maximum (21) are converted down with onnx.version_converter (or, where it has no
adapter, relabelled: those operators only gained input types after opset 21). Outputs are compared
with onnx.reference run on the same values (CTS tolerance: float32 atol 1e-5 / rtol 5 ulp;
quantized +-1; bool and integers exact) and with the case's stored expectation (its own tolerance:
some stored outputs are written with 4 digits). The few cases where onnx.reference and onnxruntime
disagree and the importer follows onnxruntime (ORT_REFERENCE) are compared with onnxruntime.

Cases that cannot map to NNAPI are listed in EXCLUDED with the reason; they must fail with one clean
MltsError (never another exception). Every other case must pass, and at least EXPECTED_PASSING do.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, version_converter

from mlts.models import import_onnx
from mlts.models.onnx_import import MAX_OPSET, supported_op_types
from mlts.runtime import MltsError, ResultCode

EXPECTED_PASSING = 505  # with onnx 1.23 (the installed version)

# Cases among the supported operator types that have no NNAPI mapping, by name pattern.
EXCLUDED: list[tuple[str, str]] = [
    (r"^(?!test_qlinear).*(_(u?int(8|16|64)|uint32)(_|$)|_string|e4m3|e5m2|e8m0|u?int[24]$|_U?INT[24]|float4e2m1|FLOAT4|FLOAT8|"
     r"BFLOAT16|DOUBLE|_to_INT|_to_UINT|_float64|_bfloat16)",
     "tensor type with no NNAPI equivalent (NNAPI tensors: float16/32, int32, bool8 and 8-bit quantized)"),
    (r"^test_einsum_(batch_diagonal|batch_matmul|inner_prod|scalar|sum|transpose)$|"
     r"^test_reduce_log_sum_exp_(default_axes|do_not|keepdims|negative)",
     "float64 test data (the case generator writes these cases in float64, which NNAPI has no tensor type for)"),
    (r"^test_cast_FLOAT16_to_FLOAT$|^test_cast_FLOAT_to_FLOAT16$|castlike",
     "float16 test data stored as Python objects by the ONNX case generator"),
    (r"pool_(1d|3d)", "NNAPI pooling is 2-D only"),
    (r"pool_2d_dilations|pool_3d_dilations", "NNAPI pooling has no dilation"),
    (r"with_argmax", "MaxPool's Indices output has no NNAPI equivalent"),
    (r"training|_mask", "training-mode (random) Dropout / BatchNormalization statistics"),
    (r"convtranspose_(1d|3d)", "NNAPI convolutions are 2-D only"),
    (r"reshape_allowzero_reordered|_empty_set|slice_start_out_of_bounds|zero_size_splits",
     "zero-size tensors (NNAPI dimension 0 means unknown)"),
    (r"pow_types_int", "NNAPI POW is float-only (integer powers through float32 are inexact above 2^24)"),
    (r"resize_.*cubic", "cubic interpolation (NNAPI resizes nearest-neighbour or bilinear only)"),
    (r"resize_.*antialias", "antialiased downsampling (a wider filter than NNAPI's bilinear)"),
    (r"resize_tf_crop_and_resize", "tf_crop_and_resize (a region crop with extrapolation) has no NNAPI equivalent"),
    (r"resize_.*linear_half_pixel_symmetric|^test_resize_downsample_scales_linear$",
     "bilinear source positions RESIZE_BILINEAR cannot place (half_pixel_symmetric, a scale other than out / in)"),
    (r"spacetodepth_crd_mode_example", "invalid model: SpaceToDepth has no mode attribute (the ONNX checker rejects it)"),
    (r"quantizelinear_axis|quantizelinear_blocked|dequantizelinear_(axis|blocked)",
     "per-axis/blocked quantization of computed tensors (NNAPI QUANTIZE/DEQUANTIZE are per tensor)"),
    (r"identity_(sequence|opt)", "sequence and optional values"),
    (r"clip_min_greater_than_max", "min > max has no RELU-family form"),
    (r"div_int32_trunc", "NNAPI integer DIV floors where ONNX truncates"),
]

# Cases where onnx.reference and onnxruntime disagree and the importer follows onnxruntime (and the frameworks
# that write such models): compared with onnxruntime instead of onnx.reference and the stored output.
ORT_REFERENCE: list[tuple[str, str]] = [
    (r"^test_resize_downsample_scales_linear_align_corners$",
     "align_corners with a fractional in x scale: onnx.reference divides by in x scale - 1, onnxruntime and torch "
     "by the output size - 1"),
]

# Node inputs that NNAPI takes as constants: frozen to initializers with the case's values.
PARAMETER_INPUTS = {
    "Conv": {1, 2}, "Gemm": {1, 2}, "MatMul": {1}, "Reshape": {1}, "Squeeze": {1}, "Unsqueeze": {1},
    "ReduceMean": {1}, "Pad": {1, 2, 3}, "QuantizeLinear": {1, 2}, "DequantizeLinear": {1, 2},
    "QLinearConv": set(range(1, 9)), "QLinearMatMul": set(range(1, 8)), "Dropout": {1, 2}, "Clip": {1, 2},
    "BatchNormalization": {1, 2, 3, 4}, "ConvTranspose": {1, 2}, "InstanceNormalization": {1, 2},
    "Slice": {1, 2, 3, 4}, "Split": {1}, "Tile": {1}, "Expand": {1}, "Resize": {1, 2, 3}, "Upsample": {1},
    "LSTM": {1, 2, 3, 4, 7}, "RNN": {1, 2, 3, 4},
    **{f"Reduce{k}": {1} for k in ("Max", "Min", "Sum", "Prod", "L1", "L2", "SumSquare", "LogSumExp", "LogSum")},
}


def excluded_reason(name: str) -> str | None:
    for pattern, reason in EXCLUDED:
        if re.search(pattern, name):
            return reason
    return None


@pytest.fixture(scope="module")
def node_cases():
    from onnx.backend.test.loader import load_model_tests

    supported = set(supported_op_types())
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    return [c for c in cases if c.model.graph.node and {n.op_type for n in c.model.graph.node} <= supported]


def _opset(model: onnx.ModelProto) -> int:
    return {o.domain: o.version for o in model.opset_import}.get("", 1)


def _lowered(model: onnx.ModelProto) -> onnx.ModelProto:
    opset = _opset(model)
    target = MAX_OPSET if opset > MAX_OPSET else 7 if opset < 7 else None
    if target is None:
        return model
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return version_converter.convert_version(model, target)
    except Exception:
        relabelled = onnx.ModelProto()
        relabelled.CopyFrom(model)
        for o in relabelled.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = target
        return relabelled


def _frozen(model: onnx.ModelProto, values: dict) -> tuple[onnx.ModelProto, dict]:
    names = [i.name for i in model.graph.input]
    frozen = {name for n in model.graph.node for k, name in enumerate(n.input)
              if k in PARAMETER_INPUTS.get(n.op_type, ()) and name in names}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    keep = [i for i in out.graph.input if i.name not in frozen]
    del out.graph.input[:]
    out.graph.input.extend(keep)
    out.graph.initializer.extend(numpy_helper.from_array(np.asarray(values[n]), n) for n in sorted(frozen))
    return out, {k: np.asarray(v) for k, v in values.items() if k not in frozen}


def _compare(actual: np.ndarray, reference: np.ndarray, stored: np.ndarray, case) -> str | None:
    if actual.shape != reference.shape:
        return f"shape {actual.shape} != {reference.shape}"
    kind = reference.dtype.kind
    if kind == "f":
        a, r = actual.astype(np.float64), reference.astype(np.float64)
        ok = (np.isnan(a) & np.isnan(r)) | (np.abs(a - r) <= 1e-5 + 5 * 1.1920928955078125e-7 * np.abs(r)) | (a == r)
        if not ok.all():
            return f"max abs diff {np.nanmax(np.abs(a - r))} from the reference (CTS tolerance)"
        if not np.allclose(a, stored.astype(np.float64), rtol=max(case.rtol, 1e-3), atol=max(case.atol, 1e-5),
                           equal_nan=True):
            return "differs from the stored expected output"
        return None
    if reference.dtype in (np.uint8, np.int8):
        diff = np.abs(actual.astype(np.int64) - reference.astype(np.int64)).max(initial=0)
        return None if diff <= 1 else f"quantized values differ by {diff}"
    return None if np.array_equal(actual, reference) else "values differ"


def run_case(case) -> str | None:
    """None when the case passes, else why not; MltsError propagates."""
    from onnx.reference import ReferenceEvaluator

    model = _lowered(case.model)
    follow_ort = any(re.search(pattern, case.name) for pattern, _ in ORT_REFERENCE)
    for inputs, expected in case.data_sets:
        values = dict(zip([i.name for i in model.graph.input], inputs))
        if any(np.asarray(v).dtype == object for v in values.values()):
            return "object-typed test data"
        frozen, feeds = _frozen(model, values)
        imported = import_onnx(frozen.SerializeToString())
        got = imported.run(feeds, devices=["nnapi-reference"])
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if follow_ort:
                import onnxruntime

                session = onnxruntime.InferenceSession(case.model.SerializeToString(),
                                                       providers=["CPUExecutionProvider"])
                reference = expected = session.run(None, {k: np.asarray(v) for k, v in values.items()})
            else:
                reference = ReferenceEvaluator(case.model).run(None, {k: np.asarray(v) for k, v in values.items()})
        for name, ref, stored in zip(imported.output_names, reference, expected):
            problem = _compare(np.asarray(got[name]), np.asarray(ref), np.asarray(stored), case)
            if problem:
                return f"output {name}: {problem}"
    return None


@pytest.mark.slow
def test_onnx_node_conformance(node_cases, capsys):
    passed, failed, excluded_ok, excluded_bad = [], [], [], []
    for case in node_cases:
        reason = excluded_reason(case.name)
        try:
            problem = run_case(case)
        except MltsError as e:
            problem = e
        except Exception as e:  # anything but MltsError is an importer bug
            problem = f"CRASH {type(e).__name__}: {e}"
        if reason is not None:
            if isinstance(problem, MltsError) and problem.code == ResultCode.BAD_DATA and "\n" not in str(problem):
                excluded_ok.append(case.name)
            elif problem is None or problem == "object-typed test data":
                excluded_ok.append(case.name)  # happens to work (or cannot be fed): fine either way
            else:
                excluded_bad.append(f"{case.name}: {problem}")
        elif problem is None:
            passed.append(case.name)
        else:
            failed.append(f"{case.name}: {problem.message if isinstance(problem, MltsError) else problem}")
    with capsys.disabled():
        print(f"\nONNX node conformance: {len(passed)} passed, {len(failed)} failed, "
              f"{len(excluded_ok)} excluded (no NNAPI mapping) of {len(node_cases)} cases with supported operators")
        print("  passed: " + ", ".join(sorted(passed)))
    assert not excluded_bad, "excluded cases must fail with one clean MltsError:\n" + "\n".join(excluded_bad)
    assert not failed, "conformance failures:\n" + "\n".join(failed)
    assert len(passed) >= EXPECTED_PASSING, f"only {len(passed)} cases pass, {EXPECTED_PASSING} expected"
