"""Importer errors: every failure is one MltsError(BAD_DATA) with a one-line message."""
from __future__ import annotations

from mlts.runtime import MltsError, ResultCode


def import_error(message: str) -> MltsError:
    """A one-line BAD_DATA error (newlines in nested messages are folded)."""
    return MltsError(ResultCode.BAD_DATA, "import_onnx: " + " ".join(str(message).split()))


class NotQuantizable(Exception):
    """Raised by a converter's quantization check: the node runs in float between DEQUANTIZE/QUANTIZE."""
