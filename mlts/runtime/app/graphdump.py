"""A model as a Graphviz dot graph (like NNAPI's graphDump): operands as boxes, operations as ellipses."""
from __future__ import annotations

from typing import Sequence

from ..enums import OperandLifetime
from ..errors import bad_data
from .model import Model


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def graph_dump(model: Model, name: str = "model", devices_per_operation: Sequence[str] | None = None) -> str:
    """Dot text for a finished model; `devices_per_operation` (run order) annotates the partition."""
    if not isinstance(model, Model):
        raise bad_data(f"graph_dump: expected a Model, got {type(model).__name__}")
    hal = model.hal_model()
    sg = hal.main
    lines = [f'digraph "{_esc(name)}" {{', "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']
    for i, operand in enumerate(sg.operands):
        t = operand.type
        style = {OperandLifetime.SUBGRAPH_INPUT: 'style=filled, fillcolor="#cfe8ff"',
                 OperandLifetime.SUBGRAPH_OUTPUT: 'style=filled, fillcolor="#d5f5d5"',
                 OperandLifetime.CONSTANT_COPY: 'style=filled, fillcolor="#eeeeee"',
                 OperandLifetime.CONSTANT_REFERENCE: 'style=filled, fillcolor="#dddddd"',
                 OperandLifetime.NO_VALUE: "style=dashed"}.get(operand.lifetime, "")
        label = _esc(f"{i}: {t.describe()}") + "\\n" + operand.lifetime.name
        lines.append(f'  d{i} [shape=box, label="{label}"{", " + style if style else ""}];')
    for j, op in enumerate(sg.operations):
        label = op.type.name
        if devices_per_operation is not None:
            label += "\\n@ " + _esc(devices_per_operation[j])
        lines.append(f'  op{j} [shape=ellipse, label="{label}"];')
        for k, i in enumerate(op.inputs):
            lines.append(f'  d{i} -> op{j} [label="{k}"];')
        for o in op.outputs:
            lines.append(f"  op{j} -> d{o};")
    lines.append("}")
    return "\n".join(lines) + "\n"
