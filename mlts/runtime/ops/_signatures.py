"""Structural validation of the NNAPI 1.3 operations mlts has no kernel for.

A model using such an operation is still a model NNAPI would accept or refuse: input and output
counts and the operand type of every input and output, chosen by the type of one "primary" input,
are checked here as NNAPI's validateOperation checks them. That keeps "invalid model" (BAD_DATA at
build time) apart from "unsupported operation" (every device declines it). Only structure: no ranks,
shapes or values; those belong to a kernel's validate / prepare.

The table lists, per operation, the allowed input and output counts (several where NNAPI versions
added inputs or outputs), the input whose type selects the variant, the documented optional inputs,
and per primary type the expected code of every input and output (longest form; a shorter operand
list is checked against its prefix). A position may allow several codes. These signatures live in
their own registry (registry.register_signature), not among kernels, so drivers still decline them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Union

from ..enums import OperandCode as C
from ..enums import OperationCode
from .base import OperationContext
from .registry import register_signature

#: one input or output position: the code it must have, or the codes it may have
Allowed = Union[C, tuple[C, ...]]
Types = tuple[Allowed, ...]

F32, F16, I32, BOOL = C.FLOAT32, C.FLOAT16, C.INT32, C.BOOL
TF32, TF16, TI32 = C.TENSOR_FLOAT32, C.TENSOR_FLOAT16, C.TENSOR_INT32
Q8A, Q8AS, Q8S = C.TENSOR_QUANT8_ASYMM, C.TENSOR_QUANT8_ASYMM_SIGNED, C.TENSOR_QUANT8_SYMM
Q16S, Q16A = C.TENSOR_QUANT16_SYMM, C.TENSOR_QUANT16_ASYMM
#: the scalar type of float parameters that goes with each float tensor type
FLOAT_SCALAR = {TF32: F32, TF16: F16}


@dataclass(frozen=True)
class OperationSignature:
    """What NNAPI checks of one operation's structure; `validate` raises BAD_DATA naming the culprit."""

    code: OperationCode
    input_counts: tuple[int, ...]
    output_counts: tuple[int, ...]
    primary: int
    variants: Mapping[C, tuple[Types, Types]]
    optional: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        for ins, outs in self.variants.values():
            assert len(ins) == max(self.input_counts) and len(outs) == max(self.output_counts), self.code

    @property
    def supported_types(self) -> frozenset[C]:
        """The primary input's allowed codes (as Operation.supported_types, for a kernel's author)."""
        return frozenset(self.variants)

    def validate(self, ctx: OperationContext) -> None:
        ctx.check_counts(self.input_counts, self.output_counts)
        ctx.check_input_type(self.primary, self.variants.keys())
        ins, outs = self.variants[ctx.input_code(self.primary)]
        for i in range(ctx.num_inputs):
            ctx.check_input_type(i, ins[i], optional=i in self.optional)
        for k in range(ctx.num_outputs):
            ctx.check_output_type(k, outs[k])


def _signature(code: OperationCode, inputs: int | Iterable[int], outputs: int | Iterable[int], primary: int,
               variants: Mapping[C, tuple[Types, Types]], optional: Iterable[int] = ()) -> None:
    counts = (lambda n: (n,) if isinstance(n, int) else tuple(n))
    register_signature(OperationSignature(code, counts(inputs), counts(outputs), primary, dict(variants),
                                          frozenset(optional)))


def _per_float_type(build) -> dict[C, tuple[Types, Types]]:
    """Variants for TENSOR_FLOAT32 and TENSOR_FLOAT16 from build(tensor type, its scalar type)."""
    return {t: build(t, FLOAT_SCALAR[t]) for t in (TF32, TF16)}


# -- the sequence family ----------------------------------------------------------------------------
# EMBEDDING_LOOKUP (1.0; int32/quant8 1.2; float16/quant8 signed 1.3): lookups, values -> values' type.
_signature(OperationCode.EMBEDDING_LOOKUP, 2, 1, primary=1,
           variants={t: ((TI32, t), (t,)) for t in (TF32, TF16, TI32, Q8A, Q8AS)})

# HASHTABLE_LOOKUP (1.0): lookups, keys, values -> output (values' type), hits (quant8).
_signature(OperationCode.HASHTABLE_LOOKUP, 3, 2, primary=2,
           variants={t: ((TI32, TI32, t), (t, Q8A)) for t in (TF32, TI32, Q8A)})

# LSH_PROJECTION (1.0; float16 hash 1.2): hash, input (any of four types), weight (optional), type.
_signature(OperationCode.LSH_PROJECTION, 4, 1, primary=0, optional=(2,),
           variants=_per_float_type(lambda t, s: ((t, (TF32, TF16, TI32, Q8A), t, I32), (TI32,))))

# LSTM (1.0: 23 inputs; 1.2: float16, and 27 inputs with the four layer-normalization weights):
# 20 tensors, activation, cell clip, projection clip, 4 layer norm weights -> scratch, states, output.
_signature(OperationCode.LSTM, (23, 27), 4, primary=0,
           optional=(1, 5, 9, 10, 11, 12, 16, 17, 23, 24, 25, 26),
           variants=_per_float_type(lambda t, s: ((t,) * 20 + (I32, s, s) + (t,) * 4, (t,) * 4)))

# RNN (1.0; float16 1.2): input, weights, recurrent weights, bias, hidden state, activation.
_signature(OperationCode.RNN, 6, 2, primary=0,
           variants=_per_float_type(lambda t, s: ((t,) * 5 + (I32,), (t, t))))

# SVDF (1.0; float16 1.2): input, feature weights, time weights, bias (optional), state, rank, activation.
_signature(OperationCode.SVDF, 7, 2, primary=0, optional=(3,),
           variants=_per_float_type(lambda t, s: ((t,) * 5 + (I32, I32), (t, t))))

# UNIDIRECTIONAL_SEQUENCE_LSTM (1.2; 3 outputs with the final states 1.3): LSTM's 20 tensors,
# activation, clips, time major, 4 layer norm weights.
_signature(OperationCode.UNIDIRECTIONAL_SEQUENCE_LSTM, 28, (1, 3), primary=0,
           optional=(1, 5, 9, 10, 11, 12, 16, 17, 24, 25, 26, 27),
           variants=_per_float_type(lambda t, s: ((t,) * 20 + (I32, s, s, BOOL) + (t,) * 4, (t,) * 3)))

# UNIDIRECTIONAL_SEQUENCE_RNN (1.2; the final state as a 2nd output 1.3).
_signature(OperationCode.UNIDIRECTIONAL_SEQUENCE_RNN, 7, (1, 2), primary=0,
           variants=_per_float_type(lambda t, s: ((t,) * 5 + (I32, I32), (t, t))))

# BIDIRECTIONAL_SEQUENCE_LSTM (1.2; outputs with final states, 5 merged or 6, 1.3): 48 tensors
# (forward and backward weights, biases, states, auxiliary input and weights), activation, clips,
# merge outputs, time major, 8 layer norm weights.
_BIDI_LSTM_OPTIONAL = (1, 5, 9, 10, 11, 12, 16, 17, 18, 22, 26, 27, 28, 29, 33, 34, *range(39, 48), *range(53, 61))
_signature(OperationCode.BIDIRECTIONAL_SEQUENCE_LSTM, 61, (1, 2, 5, 6), primary=0, optional=_BIDI_LSTM_OPTIONAL,
           variants=_per_float_type(lambda t, s: ((t,) * 48 + (I32, s, s, BOOL, BOOL) + (t,) * 8, (t,) * 6)))

# BIDIRECTIONAL_SEQUENCE_RNN (1.2; with final states, 3 merged or 4, 1.3): input, forward and
# backward weights, biases and hidden states, auxiliary input and weights (optional), activation,
# time major, merge outputs.
_signature(OperationCode.BIDIRECTIONAL_SEQUENCE_RNN, 15, (1, 2, 3, 4), primary=0, optional=(9, 10, 11),
           variants=_per_float_type(lambda t, s: ((t,) * 12 + (I32, BOOL, BOOL), (t,) * 4)))

# QUANTIZED_16BIT_LSTM (1.2): input, 8 weights (quant8), 4 biases (int32), cell state (quant16),
# output state (quant8) -> cell state, output.
_signature(OperationCode.QUANTIZED_16BIT_LSTM, 15, 2, primary=0,
           variants={Q8A: ((Q8A,) * 9 + (TI32,) * 4 + (Q16S, Q8A), (Q16S, Q8A))})

# QUANTIZED_LSTM (1.3): input, 8 weights (quant8 symm), 3 peephole weights (quant16), 4 biases,
# projection weights and bias, previous output and cell state, 4 layer norm weights, clips and
# 4 intermediate scales, hidden state zero point and scale -> output state, cell state, output.
_signature(OperationCode.QUANTIZED_LSTM, 32, 3, primary=0,
           optional=(1, 5, 9, 10, 11, 12, 16, 17, 20, 21, 22, 23),
           variants={Q8AS: ((Q8AS,) + (Q8S,) * 8 + (Q16S,) * 3 + (TI32,) * 4 + (Q8S, TI32, Q8AS, Q16S)
                            + (Q16S,) * 4 + (F32,) * 6 + (I32, F32), (Q8AS, Q16S, Q8AS))})

# RANDOM_MULTINOMIAL (1.2): logits, sample count, seeds -> samples.
_signature(OperationCode.RANDOM_MULTINOMIAL, 3, 1, primary=0,
           variants=_per_float_type(lambda t, s: ((t, I32, TI32), (TI32,))))


# -- the detection family (all 1.2; quant8 asymm signed 1.3) --------------------------------------------
def _float_and_quant(build_float, build_quant, quant_types=(Q8A, Q8AS)) -> dict[C, tuple[Types, Types]]:
    variants = _per_float_type(build_float)
    variants.update({q: build_quant(q) for q in quant_types})
    return variants


# AXIS_ALIGNED_BBOX_TRANSFORM: rois, deltas, batch indexes, image info -> rois. Quantized rois are
# quant16 asymm with deltas in either quant8 type.
_signature(OperationCode.AXIS_ALIGNED_BBOX_TRANSFORM, 4, 1, primary=0,
           variants={**_per_float_type(lambda t, s: ((t, t, TI32, t), (t,))),
                     Q16A: ((Q16A, (Q8A, Q8AS), TI32, Q16A), (Q16A,))})

# BOX_WITH_NMS_LIMIT: scores, rois, batch indexes, score threshold, max detections, NMS kernel,
# IoU threshold, sigma, NMS score threshold -> scores, rois, classes, batch indexes.
_signature(OperationCode.BOX_WITH_NMS_LIMIT, 9, 4, primary=0, variants=_float_and_quant(
    lambda t, s: ((t, t, TI32, s, I32, I32, s, s, s), (t, t, TI32, TI32)),
    lambda q: ((q, Q16A, TI32, F32, I32, I32, F32, F32, F32), (q, Q16A, TI32, TI32))))

# GENERATE_PROPOSALS: scores, deltas, anchors, image info, strides, pre/post NMS maxima, IoU
# threshold, min size, layout -> scores, rois, batch indexes.
_signature(OperationCode.GENERATE_PROPOSALS, 11, 3, primary=0, variants=_float_and_quant(
    lambda t, s: ((t, t, t, t, s, s, I32, I32, s, s, BOOL), (t, t, TI32)),
    lambda q: ((q, q, Q16S, Q16A, F32, F32, I32, I32, F32, F32, BOOL), (q, Q16A, TI32))))

# DETECTION_POSTPROCESSING (float only): scores, deltas, anchors, 4 box scales, regular NMS,
# max detections, classes per detection, detections per class, score and IoU thresholds,
# background in label -> scores, boxes, classes, detection count.
_signature(OperationCode.DETECTION_POSTPROCESSING, 14, 4, primary=0, variants=_per_float_type(
    lambda t, s: ((t, t, t, s, s, s, s, BOOL, I32, I32, I32, s, s, BOOL), (t, t, TI32, TI32))))

# HEATMAP_MAX_KEYPOINT: heatmaps, boxes, layout -> scores, keypoints (quantized boxes and
# keypoints are quant16 asymm).
_signature(OperationCode.HEATMAP_MAX_KEYPOINT, 3, 2, primary=0, variants=_float_and_quant(
    lambda t, s: ((t, t, BOOL), (t, t)),
    lambda q: ((q, Q16A, BOOL), (q, Q16A))))

# ROI_ALIGN: feature map, rois, batch indexes, output height and width, strides, sampling ratios,
# layout. ROI_POOLING: the same without the sampling ratios.
_signature(OperationCode.ROI_ALIGN, 10, 1, primary=0, variants=_float_and_quant(
    lambda t, s: ((t, t, TI32, I32, I32, s, s, I32, I32, BOOL), (t,)),
    lambda q: ((q, Q16A, TI32, I32, I32, F32, F32, I32, I32, BOOL), (q,))))
_signature(OperationCode.ROI_POOLING, 8, 1, primary=0, variants=_float_and_quant(
    lambda t, s: ((t, t, TI32, I32, I32, s, s, BOOL), (t,)),
    lambda q: ((q, Q16A, TI32, I32, I32, F32, F32, BOOL), (q,))))
