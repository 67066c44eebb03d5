"""One ONNX node evaluated by onnx.reference (ReferenceEvaluator): the float expectation of many ops tests.

ONNX's reference evaluator is an implementation independent of mlts; building the one-node model
here keeps every test file's call to it a single line.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator


def onnx_outputs(op_type: str, *inputs: np.ndarray | None, n_outputs: int = 1, opset: int = 21,
                 **attrs) -> list[np.ndarray]:
    """All outputs of one `op_type` node on `inputs` (None: an omitted optional input), in opset `opset`."""
    names = ["" if a is None else f"x{i}" for i, a in enumerate(inputs)]
    feeds = {n: a for n, a in zip(names, inputs) if a is not None}
    vinfo = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in feeds.items()]
    outs = [f"y{k}" for k in range(n_outputs)]
    graph = helper.make_graph([helper.make_node(op_type, names, outs, **attrs)], "g", vinfo,
                              [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, feeds)


def onnx_eval(op_type: str, *inputs: np.ndarray | None, opset: int = 21, **attrs) -> np.ndarray:
    """The single output of one `op_type` node on `inputs` (see onnx_outputs)."""
    return onnx_outputs(op_type, *inputs, opset=opset, **attrs)[0]


# The ONNX element type of each numpy dtype the ops tests feed to hand-built ONNX graphs.
ONNX_TYPE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
             np.dtype(np.int32): TensorProto.INT32, np.dtype(np.uint8): TensorProto.UINT8,
             np.dtype(np.int8): TensorProto.INT8}
