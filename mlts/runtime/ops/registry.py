"""The one registry of operations: op modules register here; everything else looks ops up here.

Two tables, kept apart: kernels (`register` / `get_operation`, what drivers run and claim) and
validation-only signatures (`register_signature` / `get_signature`, NNAPI's structural checks of the
operations mlts has no kernel for, so that a model using one is still validated; drivers never see
them and keep declining those operations).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

from ..enums import OperationCode
from .base import Operation

if TYPE_CHECKING:
    from ._signatures import OperationSignature

_REGISTRY: dict[OperationCode, Operation] = {}
_LOADED = False
_SIGNATURES: dict[OperationCode, "OperationSignature"] = {}
_SIGNATURES_LOADED = False
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


def register_signature(signature: "OperationSignature") -> "OperationSignature":
    """Add the structural (validation-only) signature of one NNAPI operation."""
    code = OperationCode(signature.code)
    if code in _SIGNATURES:
        raise RuntimeError(f"signature of {code.name} registered twice")
    _SIGNATURES[code] = signature
    return signature


def get_signature(code: OperationCode) -> "OperationSignature | None":
    """NNAPI's structural checks of `code` (counts, operand types; no kernel), or None when there are none.
    The model builder and the driver-side HAL checks use it when get_operation(code) is None."""
    global _SIGNATURES_LOADED
    if not _SIGNATURES_LOADED:
        importlib.import_module(f"{__name__.rsplit('.', 1)[0]}._signatures")
        _SIGNATURES_LOADED = True
    return _SIGNATURES.get(code)
