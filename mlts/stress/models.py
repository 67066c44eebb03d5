"""The models the stress tests run: the zoo's models that have trained weights, or, while none do,
small MobileNet-like models built here with the Model API (float32, uint8, and a CONV_2D/ADD/
CONCATENATION one that minimal drivers take). Each comes with fixed example inputs: a zoo model gets the
first held-out sample of its benchmark task (an image, a command sequence), the suite's own seeded ones.

Model-level correctness (`check_outputs`) uses the whole-model tolerances: float outputs within
the float16 tolerance of SPEC section 3 (whole models accumulate differently per driver), quantized
outputs within 3 steps, or the task's own rule where it has one (a detector's detections compared as
the benchmark's verdict compares them, so an NMS tie resolved the other way is not a failure);
`check_cts` is the per-operation CTS rule the random graphs use.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..runtime import FuseCode, MltsError, Model, OperandCode, OperandType, OperationCode, PaddingCode, ResultCode
from .graph_spec import GraphBuilder, build_model

F32 = OperandCode.TENSOR_FLOAT32
U8 = OperandCode.TENSOR_QUANT8_ASYMM
I32 = OperandCode.TENSOR_INT32
FLOAT32_ATOL, FLOAT32_RTOL = 1e-5, 5 * 1.1920928955078125e-7
FLOAT16_TOL = 5 * 0.0009765625
QUANT_TOL, WHOLE_MODEL_QUANT_TOL = 1, 3
_QUANT = {OperandCode.TENSOR_QUANT8_ASYMM, OperandCode.TENSOR_QUANT8_ASYMM_SIGNED, OperandCode.TENSOR_QUANT8_SYMM,
          OperandCode.TENSOR_QUANT16_ASYMM, OperandCode.TENSOR_QUANT16_SYMM}
_EXACT = {OperandCode.TENSOR_BOOL8, OperandCode.TENSOR_INT32, OperandCode.BOOL, OperandCode.INT32}


@dataclass
class StressModel:
    """A finished model with example inputs; `spec` is set for the suite's own graph-spec models."""

    name: str
    model: Model
    inputs: list[np.ndarray]
    source: str  # "zoo" | "built-in"
    spec: dict | None = None
    output_codes: list[OperandCode] = field(default_factory=list)
    #: the task's rule for one sample's outputs against the reference's (None: element-wise, check_outputs)
    sample_rule: Callable[[list, list], str | None] | None = None

    def __post_init__(self) -> None:
        self.model._stress_name = self.name  # what the stress record's coverage calls it
        if not self.output_codes:
            self.output_codes = [self.model.operand_type(i).code for i in self.model.outputs]


# -- the suite's own models --------------------------------------------------------------------
def _conv_net_spec(resolution: int, width: int, quantized: bool, seed: int) -> dict:
    """conv 3x3/2 -> dw 3x3 -> conv 1x1 -> dw 3x3/2 -> conv 1x1 -> avg pool -> reshape -> FC -> softmax."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    code = U8 if quantized else F32
    act_scale = 6.0 / 255  # RELU6 activations, uint8 [0, 255] -> [0, 6]

    def tensor(dims, scale=act_scale, zp=0) -> OperandType:
        return OperandType.tensor(code, dims, scale if quantized else 0.0, zp if quantized else 0)

    in_scale, in_zp = 1.0 / 128, 128
    x_t = tensor((1, resolution, resolution, 3), in_scale, in_zp)
    if quantized:
        x = b.input(x_t, rng.integers(0, 256, x_t.dimensions))
    else:
        x = b.input(x_t, rng.uniform(-1, 1, x_t.dimensions))
    state = {"x": x, "shape": x_t.dimensions, "scale": in_scale}

    def weights(shape, fan_in):
        w = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        if not quantized:
            return OperandType.tensor(F32, shape), w.astype(np.float32), 0.0
        w_scale = float(np.abs(w).max()) / 127 or 1.0
        q = np.clip(np.round(w / w_scale) + 128, 0, 255).astype(np.uint8)
        return OperandType.tensor(U8, shape, w_scale, 128), q, w_scale

    def bias(n, w_scale):
        if not quantized:
            return OperandType.tensor(F32, (n,)), rng.uniform(-0.1, 0.1, n).astype(np.float32)
        s = state["scale"] * w_scale
        return OperandType.tensor(I32, (n,), s, 0), np.round(rng.uniform(-0.1, 0.1, n) / s).astype(np.int32)

    def conv(out_ch, k, stride, depthwise=False):
        n, h, w, c = state["shape"]
        if depthwise:
            w_t, w_v, w_s = weights((1, k, k, c), k * k)
            out_ch = c
        else:
            w_t, w_v, w_s = weights((out_ch, k, k, c), k * k * c)
        b_t, b_v = bias(out_ch, w_s)
        oh, ow = -(-h // stride), -(-w // stride)
        y = b.temp(tensor((n, oh, ow, out_ch)))
        ins = [state["x"], b.const(w_t, w_v), b.const(b_t, b_v), b.i32(PaddingCode.SAME), b.i32(stride), b.i32(stride)]
        if depthwise:
            ins.append(b.i32(1))
        ins.append(b.i32(FuseCode.RELU6))
        b.op(OperationCode.DEPTHWISE_CONV_2D if depthwise else OperationCode.CONV_2D, ins, [y])
        state.update(x=y, shape=(n, oh, ow, out_ch), scale=act_scale)

    conv(width, 3, 2)
    conv(0, 3, 1, depthwise=True)
    conv(2 * width, 1, 1)
    conv(0, 3, 2, depthwise=True)
    conv(4 * width, 1, 1)
    n, h, w, c = state["shape"]
    pooled = b.temp(tensor((n, 1, 1, c)))
    b.op(OperationCode.AVERAGE_POOL_2D, [state["x"], b.i32(PaddingCode.VALID), b.i32(1), b.i32(1), b.i32(w), b.i32(h),
                                         b.i32(FuseCode.NONE)], [pooled])
    flat = b.temp(tensor((1, c)))
    b.op(OperationCode.RESHAPE, [pooled, b.i32_tensor([1, c])], [flat])
    classes = 10
    w_t, w_v, w_s = weights((classes, c), c)
    b_t, b_v = bias(classes, w_s)
    logits = b.temp(tensor((1, classes), 0.1, 128))
    b.op(OperationCode.FULLY_CONNECTED, [flat, b.const(w_t, w_v), b.const(b_t, b_v), b.i32(FuseCode.NONE)], [logits])
    probs = b.temp(tensor((1, classes), 1.0 / 256, 0))
    b.op(OperationCode.SOFTMAX, [logits, b.f32(1.0)], [probs])
    b.output(probs)
    return b.spec(name=f"convnet_{'u8' if quantized else 'f32'}_{resolution}")


def _conv_add_spec(seed: int) -> dict:
    """CONV_2D, ADD and CONCATENATION only (float32): what the most minimal drivers take."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    x = b.input(OperandType.tensor(F32, (1, 16, 16, 4)), rng.uniform(-1, 1, (1, 16, 16, 4)))

    def conv(src, c_in, c_out):
        y = b.temp(OperandType.tensor(F32, (1, 16, 16, c_out)))
        w = (rng.standard_normal((c_out, 3, 3, c_in)) / np.sqrt(9 * c_in)).astype(np.float32)
        b.op(OperationCode.CONV_2D, [src, b.const(OperandType.tensor(F32, w.shape), w),
                                     b.const(OperandType.tensor(F32, (c_out,)), rng.uniform(-.1, .1, c_out)),
                                     b.i32(PaddingCode.SAME), b.i32(1), b.i32(1), b.i32(FuseCode.RELU)], [y])
        return y

    c1 = conv(x, 4, 8)
    c2 = conv(c1, 8, 8)
    s = b.temp(OperandType.tensor(F32, (1, 16, 16, 8)))
    b.op(OperationCode.ADD, [c1, c2, b.i32(FuseCode.NONE)], [s])
    out = b.temp(OperandType.tensor(F32, (1, 16, 16, 16)))
    b.op(OperationCode.CONCATENATION, [s, c1, b.i32(3)], [out])
    b.output(out)
    return b.spec(name="conv_add_f32")


BUILTIN: dict[str, Callable[[], dict]] = {
    "convnet_f32": lambda: _conv_net_spec(32, 8, False, 1),
    "convnet_u8": lambda: _conv_net_spec(32, 8, True, 2),
    "conv_add_f32": lambda: _conv_add_spec(3),
    # larger, for latency measurements that must not be dominated by per-call overhead
    "convnet_f32_large": lambda: _conv_net_spec(96, 16, False, 4),
}


def builtin_model(name: str, *, memory_dir: Any = None) -> StressModel:
    """One of BUILTIN, built afresh (constants memory-mapped from a file in `memory_dir` if given)."""
    spec = BUILTIN[name]()
    model, inputs = build_model(spec, memory_dir=memory_dir)
    return StressModel(name, model, inputs, "built-in", spec)


# -- the zoo ---------------------------------------------------------------------------------------
def zoo_names(include_uncached_quantized: bool = False) -> list[str]:
    """Zoo models with trained weights: the smallest model of each task first (an image classifier, the sequence
    model, the detector: the tests that take a few models get different workloads, not the LSTM's two variants),
    then the rest, smallest first. Quantized ones only when already built (calibrating a quantized model takes
    far longer than any stress test)."""
    from ..models import zoo_registry as zoo_module
    from ..models.architectures import IMAGE_CLASSIFICATION

    usable = [e for e in sorted(zoo_module.zoo(), key=lambda e: (e.macs, e.name)) if e.available
              and (e.quantization is None or include_uncached_quantized or _zoo_cached(e))]
    firsts: dict[str, Any] = {}
    for e in usable:
        firsts.setdefault(e.task, e)
    leading = sorted(firsts.values(), key=lambda e: (e.task != IMAGE_CLASSIFICATION, e.macs))
    return [e.name for e in leading] + [e.name for e in usable if e not in leading]


def _zoo_cached(entry: Any) -> bool:
    import hashlib

    from ..models import zoo_registry as zoo_module

    try:
        digest = hashlib.sha256(entry.weights_path.read_bytes()).hexdigest()[:12]
    except OSError:
        return False
    return (zoo_module.cache_dir() / f"{entry.name}-{zoo_module.BUILD_VERSION}-{digest}.onnx").exists()


def zoo_model(name: str) -> StressModel:
    """A zoo model imported afresh, fed the first held-out sample of its task (a real image or sequence:
    a detector shown noise finds next to nothing, and what it finds sits at the score threshold), and
    checked with its task's rule."""
    from ..benchmark.tasks import TIMING_INDEX, task_of
    from ..models.zoo_registry import get_entry, load

    spec = get_entry(name)
    imported = load(name)
    task = task_of(spec.task)
    if len(imported.model.inputs) != 1:
        raise MltsError(ResultCode.BAD_DATA, f"stress model {name}: a task feeds one input, the model has "
                                             f"{len(imported.model.inputs)}")
    samples, _ = task.heldout(spec.resolution, TIMING_INDEX + 1)
    sample = task.model_inputs(imported, samples[TIMING_INDEX:TIMING_INDEX + 1])[0]  # one per sample
    return StressModel(name, imported.model, [np.ascontiguousarray(sample)], "zoo", sample_rule=task.sample_rule())


def model_names(max_models: int | None = None, *, builtin: tuple[str, ...] = ("convnet_f32", "convnet_u8",
                                                                            "conv_add_f32")) -> tuple[list[str], str]:
    """(names, note): the zoo models with weights, else the suite's own, at most `max_models`."""
    names = zoo_names()
    note = ""
    if not names:
        names = list(builtin)
        note = "no zoo model has trained weights: using the stress suite's own small models"
    return (names[:max_models] if max_models else names), note


def load_model(name: str) -> StressModel:
    """Built-in or zoo, by name: what a test process loads for each name the suite gave it."""
    return builtin_model(name) if name in BUILTIN else zoo_model(name)


# -- comparisons --------------------------------------------------------------------------------
def compare(actual: np.ndarray, expected: np.ndarray, code: OperandCode, *, whole_model: bool) -> str | None:
    """None when `actual` is acceptable against `expected`, else why not (one line)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} != expected {list(expected.shape)}"
    if actual.size == 0:
        return None
    if code in _QUANT:
        diff = int(np.abs(actual.astype(np.int64) - expected.astype(np.int64)).max())
        limit = WHOLE_MODEL_QUANT_TOL if whole_model else QUANT_TOL
        return None if diff <= limit else f"quantized values differ by up to {diff} steps (allowed {limit})"
    if code in _EXACT:
        bad = int((actual != expected).sum())
        return None if bad == 0 else f"{bad} of {actual.size} values differ (exact match required)"
    if whole_model or code in (OperandCode.TENSOR_FLOAT16, OperandCode.FLOAT16):
        atol = rtol = FLOAT16_TOL
    else:
        atol, rtol = FLOAT32_ATOL, FLOAT32_RTOL
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = (np.isnan(a) & np.isnan(e)) | (np.abs(e - a) <= atol + rtol * np.abs(e)) | ((a == e) & np.isinf(e))
    if ok.all():
        return None
    with np.errstate(invalid="ignore"):
        worst = float(np.nanmax(np.where(ok, 0, np.abs(e - a)))) if (~ok).any() else 0.0
    return (f"{int((~ok).sum())} of {actual.size} values outside tolerance (atol {atol:g}, rtol {rtol:g}); "
            f"max abs difference {worst:.3g}")


def check_outputs(actual: list[np.ndarray], expected: list[np.ndarray], codes: list[OperandCode], *,
                  whole_model: bool = True, sample_rule: Callable[[list, list], str | None] | None = None
                  ) -> str | None:
    """None when every output is acceptable against the reference's, else why not; `sample_rule` (a task's,
    e.g. detections compared as detections) replaces the element-wise comparison."""
    if sample_rule is not None:
        return sample_rule(list(actual), list(expected))
    for k, (a, e, c) in enumerate(zip(actual, expected, codes)):
        why = compare(a, e, c, whole_model=whole_model)
        if why is not None:
            return f"output {k}: {why}"
    return None


__all__ = ["BUILTIN", "StressModel", "builtin_model", "check_outputs", "compare", "load_model", "model_names",
           "zoo_model", "zoo_names"]
