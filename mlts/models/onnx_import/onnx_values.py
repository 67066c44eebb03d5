"""onnxruntime's value of every ONNX tensor an imported model holds, as the NNAPI operand holds it.

`mlts diff --against onnxruntime` compares each NNAPI operation with the ONNX graph it came from: the
importer records which ONNX tensor (and under which layout permutation) each computed operand holds
(ImportedModel.operand_tensors); onnxruntime runs the original ONNX model with those tensors added as
graph outputs, optimizations off so that every tensor is computed as the ONNX graph writes it (a QDQ
graph in float between its QuantizeLinear/DequantizeLinear pairs). onnxruntime is an optional tool
here, never part of the runtime: it is imported only when asked for.
"""
from __future__ import annotations

import warnings
from typing import Mapping

import numpy as np
import onnx

from mlts.runtime import MltsError, OperandCode, ResultCode

from .imported import ImportedModel


def _onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise MltsError(ResultCode.BAD_DATA, "comparing against onnxruntime needs the onnxruntime package "
                                             "(pip install onnxruntime)") from None
    return onnxruntime


#: The ONNX element type of a tensor an operand of this type holds, where that is unambiguous (an INT32 operand
#: may hold an int64 tensor): for tensors shape inference cannot type (com.microsoft operators' outputs).
_ELEM_TYPE_OF = {OperandCode.TENSOR_FLOAT32: onnx.TensorProto.FLOAT, OperandCode.TENSOR_FLOAT16: onnx.TensorProto.FLOAT16,
                 OperandCode.TENSOR_QUANT8_ASYMM: onnx.TensorProto.UINT8,
                 OperandCode.TENSOR_QUANT8_ASYMM_SIGNED: onnx.TensorProto.INT8,
                 OperandCode.TENSOR_BOOL8: onnx.TensorProto.BOOL}


def _typed_outputs(model: onnx.ModelProto, names: list[str], fallback: Mapping[str, int]) -> list[onnx.ValueInfoProto]:
    """Value infos with element types for `names`: shape inference's, else `fallback`'s; unknown ones skipped."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:  # an uninferable model: only the declared value infos are known
            inferred = model
    g = inferred.graph
    known = {vi.name: vi for vi in list(g.value_info) + list(g.output) + list(g.input)}
    out = []
    for name in names:
        vi = known.get(name)
        elem = vi.type.tensor_type.elem_type if vi is not None and vi.type.HasField("tensor_type") else 0
        elem = elem or fallback.get(name, 0)
        if elem:
            typed = onnx.ValueInfoProto()
            typed.name = name
            typed.type.tensor_type.elem_type = elem
            out.append(typed)
    return out


#: the operator domains onnxruntime's CPU provider has kernels for
_ONNXRUNTIME_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


def _run_every_tensor(imported: ImportedModel, onnx_model: onnx.ModelProto,
                      feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime's value of every tensor of `onnx_model` an operand holds, by tensor name."""
    ort = _onnxruntime()
    model = onnx.ModelProto()
    model.CopyFrom(onnx_model)
    produced = {t for n in model.graph.node for t in n.output}
    present = {o.name for o in model.graph.output}
    wanted = sorted(({name for name, _ in imported.operand_tensors.values()} & (produced | present))
                    - set(imported.output_names) - set(imported.input_names))
    fallback = {name: _ELEM_TYPE_OF[code] for operand, (name, _) in imported.operand_tensors.items()
                if (code := imported.model.operand_type(operand).code) in _ELEM_TYPE_OF}
    for vi in _typed_outputs(model, [n for n in wanted if n not in present], fallback):
        model.graph.output.append(vi)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(None, dict(feeds))))
    except Exception as e:  # onnxruntime's own errors: surfaced as one clean error
        raise MltsError(ResultCode.OP_FAILED, f"onnxruntime cannot run {imported.name!r}: "
                                              f"{' '.join(str(e).split())[:300]}") from None


def onnxruntime_values(imported: ImportedModel, feeds: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
    """{operand index: onnxruntime's value of the ONNX tensor it holds, in the operand's layout}."""
    from ..quantizer.graph import standard_part

    try:
        results = _run_every_tensor(imported, imported.onnx_model, feeds)
    except MltsError:
        # nodes of domains onnxruntime has no kernels for (ai.mlts.DetectionPostProcess): it runs the
        # default-domain part, and the operations computing the rest are not judged against it
        if all(n.domain in _ONNXRUNTIME_DOMAINS for n in imported.onnx_model.graph.node):
            raise
        results = _run_every_tensor(imported, standard_part(imported.onnx_model), feeds)
    results.update({name: np.asarray(feeds[name]) for name in imported.input_names if name in feeds})
    values: dict[int, np.ndarray] = {}
    for operand, (name, perm) in imported.operand_tensors.items():
        value = results.get(name)
        if value is None:
            continue
        value = np.asarray(value)
        if value.ndim and len(perm) == value.ndim:
            value = np.transpose(value, perm)
        if value.dtype == np.int64:
            value = value.astype(np.int32)
        values[operand] = np.ascontiguousarray(value.reshape(value.shape or (1,)))
    return values
