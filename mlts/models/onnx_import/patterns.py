"""Graph patterns rewritten into single NNAPI-shaped operations before conversion.

Each pattern module rewrites the intermediate graph in place; `rewrite_patterns` runs them in order.
"""
from __future__ import annotations

from . import activation_patterns, shuffle_pattern
from .ir import Graph

_REWRITES = (shuffle_pattern.rewrite, activation_patterns.rewrite)


def rewrite_patterns(graph: Graph) -> None:
    """Run every pattern rewrite."""
    for rewrite in _REWRITES:
        rewrite(graph)
