"""Graph rewrites on the intermediate graph before conversion.

- `remove_identities`: Identity and inference-mode Dropout nodes are bypassed.
- `fold_batchnorm`: BatchNormalization after a float Conv with constant weights is folded into the
  Conv's weights and bias; any other BatchNormalization with constant parameters becomes Mul + Add
  with per-channel constants.
- `fuse_matmul_bias`: MatMul with constant weights followed by Add of a bias vector becomes one
  MatMul with a bias (one FULLY_CONNECTED).
- `fuse_activations`: Relu, and Clip with the ranges [0, 6] / [-1, 1] / [0, inf), become the fused
  activation of the producing operation when NNAPI has one (CONV_2D, DEPTHWISE_CONV_2D,
  FULLY_CONNECTED, ADD/SUB/MUL/DIV, pools) and the producer's result has no other use.
"""
from __future__ import annotations

import numpy as np

from .converters import get_converter
from .converters.activations import clip_range, fuse_code_for
from .ir import Graph, Node, Value


def remove_identities(graph: Graph) -> None:
    outputs = set(graph.outputs)
    consumers = graph.consumers()
    keep = []
    for n in graph.nodes:
        bypass = n.op_type in ("Identity", "Dropout") and n.domain == "" and n.input(0) \
            and n.outputs[0] not in outputs and n.input(0) not in outputs
        if bypass and n.op_type == "Dropout":
            mask_used = len(n.outputs) > 1 and n.outputs[1] and (n.outputs[1] in outputs or consumers.get(n.outputs[1]))
            training = graph.const(n.input(2)) if n.input(2) else np.asarray(False)
            bypass = not mask_used and training is not None and not bool(np.asarray(training).reshape(-1)[0])
        if bypass:
            graph.replace_uses(n.outputs[0], n.inputs[0])
            continue
        keep.append(n)
    graph.nodes = keep


def _single_use(graph: Graph, name: str, consumers: dict) -> bool:
    return name not in graph.outputs and len(consumers.get(name, [])) == 1


def fold_batchnorm(graph: Graph) -> None:
    producers, consumers = graph.producers(), graph.consumers()
    new_nodes: list[Node] = []
    replaced: dict[int, list[Node]] = {}
    removed: set[int] = set()
    for bn in graph.nodes:
        if bn.op_type != "BatchNormalization" or bn.domain != "":
            continue
        if bn.attr("training_mode", 0) or len([o for o in bn.outputs if o]) > 1:
            continue
        params = [graph.const(bn.input(i)) for i in range(1, 5)]
        if any(p is None for p in params):
            continue
        scale, bias, mean, var = (np.asarray(p, np.float64) for p in params)
        a = scale / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
        b = bias - mean * a
        x = bn.inputs[0]
        conv = producers.get(x)
        if conv is not None and conv.op_type == "Conv" and _single_use(graph, x, consumers) \
                and graph.const(conv.inputs[1]) is not None and graph.value(conv.inputs[1]).quant is None \
                and graph.value(conv.inputs[1]).dtype == np.dtype(np.float32) \
                and (conv.input(2) is None or graph.const(conv.input(2)) is not None):
            w = np.asarray(graph.const(conv.inputs[1]), np.float64)
            old_b = np.asarray(graph.const(conv.input(2)), np.float64) if conv.input(2) else np.zeros(w.shape[0])
            w_new = (w * a.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
            b_new = (old_b * a + b).astype(np.float32)
            inputs = [conv.inputs[0], graph.add_const(f"{conv.inputs[1]}_bn", w_new),
                      graph.add_const(f"{conv.name}_bias_bn", b_new)]
            conv.inputs = inputs
            conv.outputs = [bn.outputs[0]]
            removed.add(id(bn))
            continue
        rank = graph.value(x).rank
        if rank is None or rank < 2:
            continue
        dtype = graph.value(x).dtype or np.dtype(np.float32)
        shape = (-1,) + (1,) * (rank - 2)
        mul_out = graph.fresh_name(f"{bn.outputs[0]}_scaled")
        graph.values[mul_out] = Value(mul_out, dtype, graph.value(x).shape)
        mul = Node("Mul", [x, graph.add_const(f"{bn.name}_a", a.astype(dtype).reshape(shape))], [mul_out], {},
                   f"{bn.name}/mul", "", graph.opsets[""])
        add = Node("Add", [mul_out, graph.add_const(f"{bn.name}_b", b.astype(dtype).reshape(shape))],
                   [bn.outputs[0]], {}, f"{bn.name}/add", "", graph.opsets[""])
        replaced[id(bn)] = [mul, add]
    for n in graph.nodes:
        if id(n) in removed:
            continue
        new_nodes.extend(replaced.get(id(n), [n]))
    graph.nodes = new_nodes


def fuse_matmul_bias(graph: Graph) -> None:
    producers, consumers = graph.producers(), graph.consumers()
    dead: list[Node] = []
    for add in graph.nodes:
        if add.op_type != "Add" or add.domain != "" or len(add.inputs) != 2:
            continue
        for k in (0, 1):
            src, other = add.inputs[k], add.inputs[1 - k]
            mm = producers.get(src)
            bias = graph.const(other)
            if mm is None or mm.op_type != "MatMul" or len(mm.inputs) != 2 or bias is None:
                continue
            w = graph.const(mm.inputs[1])
            if w is None or w.ndim != 2 or graph.value(mm.inputs[1]).quant is not None \
                    or graph.value(mm.outputs[0]).quant is not None or not _single_use(graph, src, consumers):
                continue
            out_rank = graph.value(add.outputs[0]).rank
            units = w.shape[1]
            if bias.size != units or bias.shape[-1] != units or (out_rank is not None and bias.ndim > out_rank) \
                    or bias.dtype != np.dtype(np.float32) or graph.value(mm.inputs[0]).rank != out_rank:
                continue
            mm.inputs = mm.inputs + [graph.add_const(f"{mm.name}_bias", bias.reshape(units))]
            mm.outputs = [add.outputs[0]]
            dead.append(add)
            break
    graph.remove_nodes(dead)


_NHWC_PRODUCERS = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization"}
_LAYOUT_FOLLOWERS = {"Relu", "Clip", "Sigmoid", "Tanh", "Add", "Sub", "Mul", "Div", "Identity", "Dropout",
                     "QuantizeLinear", "DequantizeLinear", "Pad", "HardSwish", "HardSigmoid", "LeakyRelu", "PRelu",
                     "Elu", "Selu", "Erf", "Gelu", "Softplus", "Sqrt", "Exp", "Log", "Abs", "Neg", "Floor", "Sin",
                     "Reciprocal", "Pow", "Sum", "Mean", "Max", "Min", "LRN", "InstanceNormalization"}


def _held_in_nhwc(graph: Graph, name: str, producers: dict, depth: int = 0) -> bool:
    """Whether a 4-D tensor will be held in NHWC by the conversion (made by a convolution or pool, possibly
    through element-wise operations)."""
    p = producers.get(name)
    if p is None or depth > 16:
        return False
    if p.op_type in _NHWC_PRODUCERS:
        return True
    if p.op_type in _LAYOUT_FOLLOWERS and p.input(0):
        return _held_in_nhwc(graph, p.inputs[0], producers, depth + 1)
    return False


def flatten_in_nhwc_order(graph: Graph) -> None:
    """Flatten(axis=1) of an NHWC-held [N, C, H, W] (H*W > 1) feeding a Gemm/MatMul with constant weights:
    flatten in NHWC order instead and permute the weights' input rows to match, so no TRANSPOSE back to
    NCHW is needed (the inserted ONNX Transpose is free: it only changes the layout bookkeeping)."""
    producers, consumers = graph.producers(), graph.consumers()
    for fl in list(graph.nodes):
        if fl.op_type != "Flatten" or int(fl.attr("axis", 1)) != 1 or not fl.input(0):
            continue
        x = graph.value(fl.inputs[0])
        if x.shape is None or len(x.shape) != 4 or any(d is None for d in x.shape[1:]):
            continue
        _, c, h, w = x.shape
        if h * w == 1 or not _held_in_nhwc(graph, fl.inputs[0], producers):
            continue
        # The single consumer, looking through QuantizeLinear/DequantizeLinear pairs (QDQ graphs).
        current, mm = fl.outputs[0], None
        for _ in range(4):
            users = consumers.get(current, [])
            if len(users) != 1 or current in graph.outputs:
                break
            if users[0].op_type in ("QuantizeLinear", "DequantizeLinear") and users[0].inputs[0] == current:
                scale = graph.const(users[0].input(1))
                if scale is None or np.size(scale) != 1:
                    break
                current = users[0].outputs[0]
                continue
            mm = users[0]
            break
        if mm is None or mm.op_type not in ("Gemm", "MatMul") or mm.inputs[0] != current or \
                (mm.op_type == "Gemm" and mm.attr("transA", 0)):
            continue
        rows_axis = 1 if mm.op_type == "Gemm" and mm.attr("transB", 0) else 0  # the K axis of B
        holder = mm  # the node holding the weight constant
        b_name = mm.inputs[1]
        if graph.const(b_name) is None:
            dq = producers.get(b_name)
            if dq is None or dq.op_type != "DequantizeLinear" or graph.const(dq.inputs[0]) is None \
                    or len(consumers.get(b_name, [])) != 1:
                continue
            holder, b_name = dq, dq.inputs[0]
            if graph.const(dq.input(1)) is not None and np.size(graph.const(dq.input(1))) > 1 \
                    and int(dq.attr("axis", 1)) % 2 == rows_axis:
                continue  # per-axis along K: the scales would need permuting too
        weights = np.asarray(graph.const(b_name))
        if weights.ndim != 2 or weights.shape[rows_axis] != c * h * w:
            continue
        # Row k of the NHWC flattening (h, w, c) is row c*H*W + h*W + w of the NCHW one.
        order = np.arange(c * h * w).reshape(c, h, w).transpose(1, 2, 0).reshape(-1)
        permuted = np.take(weights, order, axis=rows_axis)
        slot = 1 if holder is mm else 0  # B of the Gemm/MatMul, or x of its weights' DequantizeLinear
        holder.inputs = list(holder.inputs)
        holder.inputs[slot] = graph.add_const(f"{b_name}_nhwc", permuted)
        # The Transpose goes right before the Flatten, or before the DequantizeLinear feeding it (QDQ: the
        # DQ -> Flatten -> Q unit must stay intact to become one 8-bit RESHAPE).
        target = fl
        dq = producers.get(fl.inputs[0])
        if dq is not None and dq.op_type == "DequantizeLinear" and len(consumers.get(fl.inputs[0], [])) == 1 \
                and graph.value(dq.inputs[0]).const is None:
            target = dq
        src = graph.value(target.inputs[0])
        t_out = graph.fresh_name(f"{src.name}_nhwc")
        graph.values[t_out] = Value(t_out, src.dtype, (x.shape[0], h, w, c))
        transpose = Node("Transpose", [src.name], [t_out], {"perm": [0, 2, 3, 1]}, f"{fl.name}/nhwc", "",
                         graph.opsets[""])
        graph.nodes.insert(graph.nodes.index(target), transpose)
        target.inputs = [t_out] + target.inputs[1:]
        if target is dq:
            graph.value(dq.outputs[0]).shape = (x.shape[0], h, w, c)


def fuse_activations(graph: Graph) -> None:
    producers, consumers = graph.producers(), graph.consumers()
    dead: list[Node] = []
    for act in graph.nodes:
        if act.op_type not in ("Relu", "Clip") or act.domain != "":
            continue
        code = fuse_code_for(clip_range(act, graph))
        src = act.input(0)
        p = producers.get(src) if src else None
        if code is None or p is None or p.attrs.get("_fuse"):
            continue
        conv = get_converter(p)
        if conv is None or not conv.fusable or not _single_use(graph, src, consumers):
            continue
        if (graph.value(src).quant is None) != (graph.value(act.outputs[0]).quant is None):
            continue
        if graph.value(src).quant is None and graph.value(src).dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
            continue
        p.attrs["_fuse"] = int(code)
        p.outputs = [act.outputs[0] if o == src else o for o in p.outputs]
        dead.append(act)
    graph.remove_nodes(dead)
