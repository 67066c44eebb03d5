"""One check for every zoo builder: the trained weights it is given are the ones its architecture describes."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..runtime import MltsError, ResultCode


def check_weights(expected: Mapping[str, tuple[int, ...]], weights: Mapping[str, np.ndarray], where: str) -> None:
    """Every expected array present, of its shape and finite; else BAD_DATA naming `where` and the array."""
    for key, shape in expected.items():
        if key not in weights:
            raise MltsError(ResultCode.BAD_DATA, f"{where}: weight {key!r} is missing")
        if tuple(np.shape(weights[key])) != tuple(shape):
            raise MltsError(ResultCode.BAD_DATA,
                            f"{where}: weight {key!r} has shape {tuple(np.shape(weights[key]))}, expected {tuple(shape)}")
        if not np.all(np.isfinite(np.asarray(weights[key], np.float32))):
            raise MltsError(ResultCode.BAD_DATA, f"{where}: weight {key!r} holds non-finite values")
