"""The one exception type of the public API: every failure is an MltsError carrying a ResultCode."""
from __future__ import annotations

from .enums import ResultCode


class MltsError(Exception):
    """An NNAPI-style failure: `.code` is the ResultCode, the message names the culprit."""

    def __init__(self, code: ResultCode, message: str, *, output_shapes: list | None = None):
        self.code = ResultCode(code)
        self.message = message
        # For OUTPUT_INSUFFICIENT_SIZE: the output shapes as far as they are known.
        self.output_shapes = output_shapes
        super().__init__(f"{self.code.name}: {message}")

    def __reduce__(self):  # keep code and shapes when crossing process boundaries
        return (_rebuild_error, (int(self.code), self.message, self.output_shapes))


def _rebuild_error(code: int, message: str, output_shapes):
    return MltsError(ResultCode(code), message, output_shapes=output_shapes)


def bad_data(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_DATA, message)


def bad_state(message: str) -> MltsError:
    return MltsError(ResultCode.BAD_STATE, message)


def op_failed(message: str) -> MltsError:
    return MltsError(ResultCode.OP_FAILED, message)


def error_from_exception(exc: BaseException, where: str) -> MltsError:
    """The MltsError a failure inside a kernel, a driver or a service stands for, the same at every driver
    boundary: an MltsError as it is, MemoryError as OUT_OF_MEMORY, anything else (a driver's bug) as
    OP_FAILED naming the exception. `where` names the call that failed."""
    if isinstance(exc, MltsError):
        return exc
    if isinstance(exc, MemoryError):
        return MltsError(ResultCode.OUT_OF_MEMORY, f"{where}: out of memory")
    return MltsError(ResultCode.OP_FAILED, f"{where}: {type(exc).__name__}: {exc}")


class ExecutionAborted(MltsError):
    """A run stopped at a checkpoint (deadline passed, or pre-empted by a higher priority run)."""
