"""Post-training quantization of float ONNX models into QDQ ONNX models (NNAPI's 8-bit schemes).

`quantize_model(float_model, calibration_inputs, scheme=..., calibration=...)` runs the float
graph over calibration inputs with onnx.reference (`Evaluator`, with a faster Conv; no
onnxruntime needed), collects the range of every activation that gets quantized, and returns a
QDQ model: QuantizeLinear/DequantizeLinear pairs around float operations, the format onnxruntime
and the mlts importer understand. Quantized values follow NNAPI: real = (q - zero_point) * scale.

Schemes
- "uint8": uint8 activations (asymmetric; the range always includes 0) and per-tensor
  asymmetric uint8 weights: NNAPI's TENSOR_QUANT8_ASYMM models.
- "int8": int8 activations (asymmetric, TENSOR_QUANT8_ASYMM_SIGNED) and per-channel symmetric
  int8 convolution weights (zero point 0, one scale per output channel, axis 0 of OIHW):
  TENSOR_QUANT8_SYMM_PER_CHANNEL. Fully-connected (Gemm) weights stay per-tensor symmetric int8
  unless `per_channel_fc=True`, because NNAPI's FULLY_CONNECTED has no per-channel filters.
- Biases: int32, scale = input scale x weight scale (per channel where the weights are),
  zero point 0, as DequantizeLinear(int32 bias).

Graph rules (what the NNAPI quantized operations require)
- Conv (or Gemm) followed by its only consumer Relu/Clip is fused: DQ -> Conv -> Clip -> Q, the
  activation's output range sets the output quantization (NNAPI keeps the fused RELU6 through it).
- Add (residuals): both inputs and the output are quantized.
- Pooling and reshaping (GlobalAveragePool, AveragePool, MaxPool, Flatten, Reshape, Identity,
  Transpose, Squeeze, Unsqueeze) keep their input's scale and zero point, as NNAPI requires.
- Softmax and Sigmoid outputs have scale 1/256 and zero point 0 (uint8) or -128 (int8); Tanh
  outputs 1/128 and 128 (uint8) or 0 (int8): NNAPI's SOFTMAX, LOGISTIC and TANH.
- Concat: its output and the calibrated sources of its inputs share one joint range, so NNAPI's
  CONCATENATION needs no requantization; constant inputs take the output's parameters.
- LSTM (int8 only; NNAPI's QUANTIZED_LSTM is signed): per-gate symmetric int8 W and R, the float
  bias, int8 hidden state (Y, Y_h) calibrated over every step, int16 cell state with a power-of-two
  scale on Y_c; the model moves to opset 21 (recurrent.py has the exact contract).
- Nodes of other domains (e.g. ai.mlts DetectionPostProcess) stay float with everything after
  them: they read DequantizeLinear outputs, and calibration runs the graph cut before them.
- The graph input keeps its name and shape. An image input ([N, 3, H, W]) becomes uint8/int8
  with scale 1/127.5 and zero point 128 (int8: 0) followed by DequantizeLinear, so the model
  takes quantized images directly; other inputs are calibrated. Graph outputs of quantized
  nodes keep their names and become the quantized tensors; those of float nodes stay float.

Modules: qparams (scale/zero-point arithmetic), evaluator and conv (running graphs), graph (graph
helpers, the standard part of a graph with custom operators), calibration (activation ranges),
parameters (which parameters each tensor gets), recurrent (LSTM), rewrite (the QDQ graph), quantize
(the entry point), report (inspection and float/quantized comparison).
"""
from .calibration import CALIBRATIONS, collect_ranges
from .evaluator import Evaluator
from .graph import standard_part
from .qparams import (INPUT_SCALE, SOFTMAX_SCALE, QParams, choose_qparams, dequantize_array, quantize_array,
                      symmetric_scales)
from .quantize import QUANT_OPSET, SCHEMES, quantize_model
from .recurrent import LSTM_OPSET, lstm_states
from .report import input_qparams, output_qparams, quantization_report

__all__ = [
    "CALIBRATIONS", "INPUT_SCALE", "LSTM_OPSET", "QUANT_OPSET", "SCHEMES", "SOFTMAX_SCALE", "Evaluator", "QParams",
    "choose_qparams", "collect_ranges", "dequantize_array", "input_qparams", "lstm_states", "output_qparams",
    "quantization_report", "quantize_array", "quantize_model", "standard_part", "symmetric_scales",
]
