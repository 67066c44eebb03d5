"""Einsum of two operands that is a (batched) matrix product -> BATCH_MATMUL or FULLY_CONNECTED.

"bij,bjk->bik", "bhid,bhjd->bhij", "ij,kj->ik", "...ij,...jk->...ik" and the like: every index is a
batch index (both operands and the result), a row or column index (one operand and the result) or a
contracted index (both operands, not the result). The planner in `matmul.contract` lays the
operands out for BATCH_MATMUL (adj flags instead of TRANSPOSEs where it can) and binds the result
in whatever order the equation asks for. Ellipses broadcast like MatMul's batch dimensions.
Anything else (one or three operands, repeated indices within an operand: traces and diagonals,
an index summed within one operand) fails with an error naming the equation.
"""
from __future__ import annotations

from ..ir import Graph, Node
from .base import OpConverter, register
from .matmul import Side, broadcast_letters, broadcast_tiles, check_batch_matmul_quantized, contract, fresh_letters

ELLIPSIS = "..."


def parse_equation(equation: str, shapes: list, fail) -> tuple[list[str], str, set[str]]:
    """Each operand's letters and the result's, ellipses expanded into letters of their own, and the
    broadcast ellipsis letters to TILE (`matmul.broadcast_tiles`); `fail(msg)` returns the exception
    to raise."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != 2 or len(shapes) != 2:
        raise fail(f"{len(terms)} operand(s): only products of two operands map to NNAPI")
    for t in terms + ([rhs] if arrow else []):
        body = t.replace(ELLIPSIS, "", 1)
        if not all(c.isascii() and c.isalpha() for c in body):
            raise fail(f"term {t!r} is not letters with at most one ellipsis")
    letters: list[str] = []
    ell_shapes = []
    for t, shape in zip(terms, shapes):
        explicit = len(t.replace(ELLIPSIS, ""))
        if ELLIPSIS not in t and explicit != len(shape) or explicit > len(shape):
            raise fail(f"term {t!r} does not match an operand of rank {len(shape)}")
        start = t.find(ELLIPSIS)
        ell_shapes.append(tuple(shape[start:start + len(shape) - explicit]) if start >= 0 else ())
    try:
        ell_a, ell_b, ell_out = broadcast_letters(ell_shapes[0], ell_shapes[1], fresh_letters())
    except ValueError as e:
        raise fail(f"the ellipsis dimensions {list(ell_shapes[0])} and {list(ell_shapes[1])}: {e}") from None
    for t, ell in zip(terms, (ell_a, ell_b)):
        expanded = t.replace(ELLIPSIS, "".join(ell))
        if len(set(expanded)) != len(expanded):
            raise fail(f"index repeated within {t!r} (a trace or diagonal) has no NNAPI equivalent")
        letters.append(expanded)
    if not arrow:  # implicit form: the ellipsis, then the indices seen once, in alphabetical order
        once = sorted(c for c in set(terms[0] + terms[1]) if c != "." and (terms[0] + terms[1]).count(c) == 1)
        return letters, "".join(ell_out) + "".join(once), broadcast_tiles(ell_a, ell_b, ell_out)
    if ell_out and ELLIPSIS not in rhs:
        raise fail("the result drops the ellipsis dimensions (a sum over them) which has no NNAPI equivalent")
    out = rhs.replace(ELLIPSIS, "".join(ell_out))
    if len(set(out)) != len(out):
        raise fail(f"index repeated in the result {rhs!r}")
    return letters, out, broadcast_tiles(ell_a, ell_b, ell_out)


@register
class EinsumConverter(OpConverter):
    op_types = ("Einsum",)
    quantizable = True
    data_inputs = None

    def check_quantized(self, node: Node, graph: Graph) -> None:
        check_batch_matmul_quantized(node, graph, [0, 1])

    def convert(self, node: Node, ctx) -> None:
        equation = str(node.attr("equation", ""))
        what = f"equation {equation!r}"
        names = [i for i in node.inputs if i]
        letters, out, tile = parse_equation(equation, [ctx.shape(n) for n in names],
                                            lambda message: ctx.fail(f"{what}: {message}"))
        if ctx.is_const(names[1]) and not ctx.is_quantized(names[1]):
            tile = set()  # B's own broadcast indices become FULLY_CONNECTED units: constant weights, no TILE
        contract(ctx, Side(names[0], letters[0]), Side(names[1], letters[1]), node.outputs[0], out, what=what,
                 tile=tile)
