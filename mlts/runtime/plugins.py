"""Finding driver code: `module:factory` references and `.py` files, shared by the plugin loader
and by driver service processes (which must rebuild a driver from a reference they can import)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

from .enums import ResultCode
from .errors import MltsError


def import_factory(ref: str) -> Callable[..., Any]:
    """`package.module:attr` or `/path/to/file.py:attr` -> the attribute (a driver class or factory).

    A `.py` path without `:attr` resolves to its `create_drivers` (or, failing that, `create_driver`).
    """
    if not isinstance(ref, str) or not ref:
        raise MltsError(ResultCode.BAD_DATA, f"driver reference must be a non-empty string, got {ref!r}")
    module_part, _, attr = ref.rpartition(":")
    if not module_part or "/" in attr or attr.endswith(".py"):
        module_part, attr = ref, ""
    if module_part.endswith(".py"):
        module = _import_path(Path(module_part))
        attrs = [attr] if attr else ["create_drivers", "create_driver"]
    else:
        if not attr:
            raise MltsError(ResultCode.BAD_DATA,
                            f"driver reference {ref!r}: expected 'module:factory' or a path to a .py file")
        try:
            module = importlib.import_module(module_part)
        except Exception as exc:  # an import error in third-party code is the plugin's fault
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: cannot import "
                                                 f"{module_part!r}: {type(exc).__name__}: {exc}") from exc
        attrs = [attr]
    for name in attrs:
        target: Any = module
        try:
            for part in name.split("."):
                target = getattr(target, part)
        except AttributeError:
            continue
        if not callable(target):
            raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: {name!r} is not callable")
        return target
    raise MltsError(ResultCode.BAD_DATA, f"driver reference {ref!r}: {module.__name__} has no "
                                         f"{' or '.join(repr(a) for a in attrs)}")


def _import_path(path: Path):
    path = path.expanduser().resolve()
    if not path.is_file():
        raise MltsError(ResultCode.BAD_DATA, f"driver file {str(path)!r} does not exist")
    name = "mlts_plugin_" + "".join(c if c.isalnum() else "_" for c in path.stem) + f"_{abs(hash(str(path))):x}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise MltsError(ResultCode.BAD_DATA, f"driver file {str(path)!r} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise MltsError(ResultCode.BAD_DATA, f"driver file {str(path)!r} failed to import: "
                                             f"{type(exc).__name__}: {exc}") from exc
    return module
