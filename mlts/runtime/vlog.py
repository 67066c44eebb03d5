"""Verbose logging controlled by MLTS_VLOG (like Android's debug.nn.vlog property).

Empty: nothing; `1` or `all`: every tag; otherwise tags separated by spaces, commas or colons:
model, compilation, execution, cpuexe, manager, driver. Messages go to the `mlts.<tag>` logger at
INFO level, and to stderr when logging is not configured.
"""
from __future__ import annotations

import logging
import os
import re

TAGS = ("model", "compilation", "execution", "cpuexe", "manager", "driver")
_cache: tuple[str | None, frozenset[str]] = (None, frozenset())


def enabled_tags() -> frozenset[str]:
    """Re-read on change so tests and long-running tools can toggle it."""
    global _cache
    raw = os.environ.get("MLTS_VLOG", "")
    if raw != _cache[0]:
        words = {w.lower() for w in re.split(r"[\s,:]+", raw.strip()) if w}
        tags = frozenset(TAGS) if words & {"1", "all"} else frozenset(words & set(TAGS))
        _cache = (raw, tags)
    return _cache[1]


def is_on(tag: str) -> bool:
    return tag in enabled_tags()


def log(tag: str, message: str) -> None:
    if tag in enabled_tags():
        logger = logging.getLogger(f"mlts.{tag}")
        if not logging.getLogger().handlers and not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("mlts %(name)s: %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        logger.info(message)
