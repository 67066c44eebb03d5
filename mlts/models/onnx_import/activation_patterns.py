"""Placeholder: filled in by the issue-17 work."""
from __future__ import annotations

from .ir import Graph


def rewrite(graph: Graph) -> None:
    """Rewrite the pattern in place (nothing yet)."""
