"""The one registry of operations: op modules register here; everything else looks ops up here
(`register` / `get_operation`: what model building validates and drivers run and claim)."""
from __future__ import annotations

import importlib
import pkgutil

from ..enums import OperationCode
from .base import Operation

_REGISTRY: dict[OperationCode, Operation] = {}
_LOADED = False
# Modules of this package that hold shared helpers rather than operations.
_NOT_OPERATIONS = {"base", "registry", "quant", "common"}


def register(cls: type[Operation]) -> type[Operation]:
    """Class decorator: add one Operation subclass (one NNAPI operation) to the registry."""
    code = OperationCode(cls.code)
    if code in _REGISTRY:
        raise RuntimeError(f"operation {code.name} registered twice")
    _REGISTRY[code] = cls()
    return cls


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    package = __name__.rsplit(".", 1)[0]
    for info in pkgutil.iter_modules(__import__(package, fromlist=["_"]).__path__):
        if info.name not in _NOT_OPERATIONS and not info.name.startswith("_"):
            importlib.import_module(f"{package}.{info.name}")
    _LOADED = True


def get_operation(code: OperationCode) -> Operation | None:
    """The registered implementation of `code`, or None when mlts has no kernel for it."""
    _load_all()
    return _REGISTRY.get(code)


def implemented_operations() -> dict[OperationCode, Operation]:
    _load_all()
    return dict(sorted(_REGISTRY.items()))
