"""The sequence workload: an LSTM classifier of the "spoken command" set (mlts.datasets.commands), as ONNX.

Described once here and shared by the build-time trainer (tools/train_sequence.py, torch) and the ONNX
builder, like mobilenet.py: log-mel frames "features" [1, FRAMES, MEL_BINS] (batch first) -> one forward
ONNX LSTM (default sigmoid/tanh activations, no clip, no peepholes, zero initial state) -> its last hidden
state Y_h -> Reshape [1, HIDDEN] -> Gemm -> "logits" [1, len(CLASSES)]. The shipped weights
(mlts/models/weights/lstm_commands.npz, float16) are stored in ONNX's layouts and gate order (i, o, f, c),
so the file maps one to one onto the graph's initializers.

The LSTM's batch-first `layout=1` (opset 14) is what the model means, but onnxruntime's CPU LSTM refuses
it ("Batchwise recurrent operations (layout == 1) are not supported"), so the default graph is the one
torch.onnx exports for a batch_first LSTM: Transpose to time-major, then the LSTM with layout=0.
build_onnx(..., layout=1) gives the direct batch-first form (onnx.reference runs it) for importer tests.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from ..datasets.commands import CLASSES, FRAMES, MEL_BINS
from ..runtime.enums import ResultCode
from ..runtime.errors import MltsError
from .weight_check import check_weights

MODEL_NAME = "lstm_commands"
HIDDEN = 64
INPUT_SIZE = MEL_BINS
NUM_CLASSES = len(CLASSES)
ONNX_OPSET = 14  # the first opset whose LSTM has the batch-first `layout` attribute
WEIGHTS_PATH = Path(__file__).resolve().parent / "weights" / f"{MODEL_NAME}.npz"

# torch.nn.LSTM stacks its gate blocks as (input, forget, cell, output); ONNX as (input, output, forget, cell).
TORCH_GATES = "ifgo"
ONNX_GATES = "iofg"  # "g" (torch's cell candidate) is ONNX's "c"


def weight_shapes() -> dict[str, tuple[int, ...]]:
    """Names and shapes of the arrays a weights file holds (ONNX layouts, one direction)."""
    return {
        "lstm.W": (1, 4 * HIDDEN, INPUT_SIZE),    # input weights, gates iofc
        "lstm.R": (1, 4 * HIDDEN, HIDDEN),        # recurrent weights, gates iofc
        "lstm.B": (1, 8 * HIDDEN),                # [Wb, Rb], gates iofc each
        "classifier.weight": (NUM_CLASSES, HIDDEN),
        "classifier.bias": (NUM_CLASSES,),
    }


def parameters() -> int:
    return int(sum(np.prod(shape) for shape in weight_shapes().values()))


def macs() -> int:
    """Multiply-accumulates of one sequence: per frame the four gates' input and recurrent products plus the
    cell update (f*c + i*g, o*tanh(c): 3 per unit), then the classifier."""
    per_frame = 4 * HIDDEN * (INPUT_SIZE + HIDDEN) + 3 * HIDDEN
    return FRAMES * per_frame + HIDDEN * NUM_CLASSES


def gates_torch_to_onnx(array: np.ndarray) -> np.ndarray:
    """Reorder the 4*HIDDEN gate blocks along axis 0 from torch's (i, f, g, o) to ONNX's (i, o, f, c)."""
    blocks = np.split(np.asarray(array), 4, axis=0)
    return np.concatenate([blocks[TORCH_GATES.index(g)] for g in ONNX_GATES], axis=0)


def gates_onnx_to_torch(array: np.ndarray) -> np.ndarray:
    """The inverse of gates_torch_to_onnx."""
    blocks = np.split(np.asarray(array), 4, axis=0)
    return np.concatenate([blocks[ONNX_GATES.index(g)] for g in TORCH_GATES], axis=0)


def _check_weights(weights: Mapping[str, np.ndarray], where: str) -> None:
    check_weights(weight_shapes(), weights, where)


def load_weights(path: str | Path = WEIGHTS_PATH) -> dict[str, np.ndarray]:
    """The weights file's arrays as float32, checked against weight_shapes()."""
    try:
        with np.load(path) as data:
            weights = {k: np.asarray(data[k], np.float32) for k in data.files}
    except (OSError, ValueError) as exc:
        raise MltsError(ResultCode.BAD_DATA, f"{path}: cannot read LSTM weights ({exc})") from None
    _check_weights(weights, str(path))
    return weights


def build_onnx(weights: Mapping[str, np.ndarray], name: str = MODEL_NAME, *, layout: int = 0):
    """The float32 ONNX model: "features" [1, FRAMES, MEL_BINS] -> "logits" [1, NUM_CLASSES].

    layout=0 (default, what onnxruntime runs): Transpose to [FRAMES, 1, MEL_BINS], then a time-major LSTM;
    layout=1: a batch-first LSTM straight on the input. Both compute the same function."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if layout not in (0, 1):
        raise MltsError(ResultCode.BAD_DATA, f"{name}: LSTM layout must be 0 or 1, not {layout!r}")
    _check_weights(weights, f"{name} weights")
    inits = [numpy_helper.from_array(np.asarray(weights[k], np.float32), k) for k in weight_shapes()]
    inits.append(numpy_helper.from_array(np.array([1, HIDDEN], np.int64), "last_hidden_shape"))
    nodes = []
    sequence = "features"
    if layout == 0:
        nodes.append(helper.make_node("Transpose", ["features"], ["features_time_major"], name="time_major",
                                      perm=[1, 0, 2]))
        sequence = "features_time_major"
    # Y (every frame's hidden state) is not needed: its output name is left empty. Y_h is
    # [num_directions=1, batch=1, HIDDEN] (layout 0) or [batch=1, num_directions=1, HIDDEN] (layout 1).
    nodes.append(helper.make_node("LSTM", [sequence, "lstm.W", "lstm.R", "lstm.B"], ["", "lstm_last_hidden"],
                                  name="lstm", hidden_size=HIDDEN, direction="forward", layout=layout))
    nodes.append(helper.make_node("Reshape", ["lstm_last_hidden", "last_hidden_shape"], ["last_hidden"],
                                  name="flatten"))
    nodes.append(helper.make_node("Gemm", ["last_hidden", "classifier.weight", "classifier.bias"], ["logits"],
                                  name="classifier", transB=1))
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, FRAMES, MEL_BINS])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, NUM_CLASSES])], inits)
    model = helper.make_model(graph, producer_name="mlts", opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model
