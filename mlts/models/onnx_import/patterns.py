"""Graph patterns rewritten into single NNAPI-shaped operations before conversion (issue 17).

Each rewrite takes the intermediate graph and rewrites it in place; `rewrite_patterns` runs them all.
"""
from __future__ import annotations

from .ir import Graph


def rewrite_patterns(graph: Graph) -> None:
    """Run every pattern rewrite (filled in by the converter families that need one)."""
