"""Shrinking a failing random graph to the smallest graph that still fails, so that a vendor reads
"CONV_2D on TENSOR_QUANT8_ASYMM differs by 5 steps" rather than "a 17-operation graph differs".

Two passes over the graph spec (mlts.stress.graph_spec), each candidate run on the driver and
compared with nnapi-reference as the random-graph test does:
1. isolate: every operation alone, fed the inputs nnapi-reference computed for it (the other
   operations replaced by model inputs holding those values): the first operation that fails alone
   is the culprit, in a one-operation graph;
2. drop: when no operation fails alone (the failure needs a combination), the operations after the
   first failing prefix are dropped: the smallest prefix (an operation and what it depends on) that
   still fails.
The whole search is bounded in time; what was found by then is reported.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..runtime import MltsError
from .graph_spec import encode_array

Failure = Callable[[dict[str, Any]], "str | None"]  # a candidate spec -> why it fails, or None


@dataclass
class Shrunk:
    """The smallest failing graph found, and what it says."""

    spec: dict[str, Any]
    reason: str
    operations: list[int]        # indexes into the original graph's operations
    isolated: bool               # one operation fed the reference's inputs
    tried: int

    def describe(self, original: dict[str, Any]) -> str:
        ops = [original["operations"][j] for j in self.operations]
        if self.isolated or len(ops) == 1:
            op = ops[0]
            ins = _types(original, op["inputs"], tensors_only=True)
            outs = _types(original, op["outputs"])
            fed = ", fed nnapi-reference's inputs" if self.isolated else ""
            return f"operation {self.operations[0]} ({op['op']} on {ins} -> {outs}) fails alone{fed}: {self.reason}"
        names = ", ".join(o["op"] for o in ops)
        return (f"no operation fails alone; the smallest failing graph has {len(ops)} operation(s) ({names}): "
                f"{self.reason}")


def _types(spec: dict[str, Any], operands: list[int], tensors_only: bool = False) -> str:
    names = []
    for k in operands:
        d = spec["operands"][k]
        if tensors_only and not str(d["type"]).startswith("TENSOR_"):
            continue
        if d.get("value") is not None and tensors_only:  # constants (weights) are part of the operation
            continue
        names.append(str(d["type"]))
    return ", ".join(dict.fromkeys(names)) or "no tensor input"


def _producers(spec: dict[str, Any]) -> dict[int, int]:
    return {o: j for j, op in enumerate(spec["operations"]) for o in op["outputs"]}


def ancestors(spec: dict[str, Any], j: int) -> list[int]:
    """Operation j and every operation it depends on, in the graph's order."""
    producers = _producers(spec)
    need, todo = set(), [j]
    while todo:
        k = todo.pop()
        if k in need:
            continue
        need.add(k)
        todo += [producers[o] for o in spec["operations"][k]["inputs"] if o in producers]
    return sorted(need)


def subgraph(spec: dict[str, Any], ops: list[int], outputs: list[int],
             fed: dict[int, np.ndarray] | None = None) -> dict[str, Any]:
    """A spec of just `ops`: operands renumbered, `fed` operands (outputs of dropped operations)
    turned into model inputs with those values, `outputs` plus any output nobody consumes as model
    outputs."""
    fed = fed or {}
    kept = [spec["operations"][j] for j in ops]
    produced = {o for op in kept for o in op["outputs"]}
    consumed = {o for op in kept for o in op["inputs"]}
    used = sorted(consumed | produced)
    new = {old: i for i, old in enumerate(used)}
    operands = []
    for old in used:
        d = dict(spec["operands"][old])
        if old in fed and (d.get("dims") is None or 0 in (d.get("dims") or [])):
            d["dims"] = list(np.asarray(fed[old]).shape)
        operands.append(d)
    original_inputs = {o: v for o, v in zip(spec["inputs"], spec.get("input_values", []))}
    inputs, values = [], []
    for old in used:
        if old in original_inputs:
            inputs.append(new[old])
            values.append(original_inputs[old])
        elif old in fed and old not in produced:
            inputs.append(new[old])
            values.append(encode_array(np.asarray(fed[old])))
    wanted = [o for o in outputs if o in produced]
    dangling = [o for op in kept for o in op["outputs"] if o not in consumed and o not in wanted]
    out = {k: v for k, v in spec.items() if k not in ("operands", "operations", "inputs", "outputs", "input_values")}
    out.update(operands=operands, inputs=inputs, input_values=values, outputs=[new[o] for o in wanted + dangling],
               operations=[{"op": op["op"], "inputs": [new[o] for o in op["inputs"]],
                            "outputs": [new[o] for o in op["outputs"]]} for op in kept])
    return out


def reference_values(spec: dict[str, Any], operands: list[int],
                     run_reference: Callable[[dict[str, Any]], list[np.ndarray]]) -> dict[int, np.ndarray]:
    """What nnapi-reference computes for each of `operands` (outputs of operations of `spec`)."""
    producers = _producers(spec)
    out: dict[int, np.ndarray] = {}
    for o in operands:
        if o in producers and o not in out:
            part = subgraph(spec, ancestors(spec, producers[o]), [o])
            out[o] = run_reference(part)[0]
    return out


def shrink(spec: dict[str, Any], fails: Failure, run_reference: Callable[[dict[str, Any]], list[np.ndarray]],
           *, budget_s: float = 30.0, beat: Callable[[], None] = lambda: None) -> Shrunk | None:
    """The smallest failing graph found within `budget_s` (None when nothing smaller fails)."""
    end = time.monotonic() + budget_s
    n_ops = len(spec["operations"])
    tried = 0
    producers = _producers(spec)
    if n_ops > 1:
        for j in range(n_ops):
            if time.monotonic() > end:
                break
            op = spec["operations"][j]
            try:
                fed = reference_values(spec, [o for o in op["inputs"] if o in producers], run_reference)
                candidate = subgraph(spec, [j], list(op["outputs"]), fed)
                why = fails(candidate)
            except MltsError:  # a candidate the reference refuses: not a smaller failing graph
                why = None
            tried += 1
            beat()
            if why is not None:
                return Shrunk(candidate, why, [j], True, tried)
    for j in range(n_ops):
        if time.monotonic() > end:
            break
        ops = ancestors(spec, j)
        if len(ops) >= n_ops:
            continue
        try:
            candidate = subgraph(spec, ops, list(spec["operations"][j]["outputs"]))
            why = fails(candidate)
        except MltsError:
            why = None
        tried += 1
        beat()
        if why is not None:
            return Shrunk(candidate, why, ops, False, tried)
    return None


__all__ = ["Shrunk", "ancestors", "reference_values", "shrink", "subgraph"]
