"""nnapi-reference's outputs on a model's accuracy images, kept in the run directory
(`reference/<model>.npz`) so that a resumed run need not compute them again. They are used only for
the same accuracy inputs and the same ONNX file (both by digest)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

REFERENCE_DIR = "reference"


def reference_path(run_dir: Path, model: str) -> Path:
    return run_dir / REFERENCE_DIR / f"{model}.npz"


def load_reference(path: Path, inputs_sha256: str | None, onnx_sha256: str) -> list[np.ndarray] | None:
    """The kept outputs (one array per model output, samples first); None when there are none, when they are
    unreadable (a killed run) or when they were computed for other inputs or another model file."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as data:
            if str(data["inputs_sha256"]) == inputs_sha256 and str(data["onnx_sha256"]) == onnx_sha256:
                return [data[f"outputs_{k}"] for k in range(int(data["output_count"]))]
    except (OSError, KeyError, ValueError):
        pass
    return None


def save_reference(path: Path, outputs: list[np.ndarray], inputs_sha256: str | None, onnx_sha256: str) -> None:
    """Keep `outputs` (one array per model output) at `path`, whole or not at all (OSError, with no partial
    file left behind)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, output_count=np.array(len(outputs)), inputs_sha256=np.array(inputs_sha256),
                     onnx_sha256=np.array(onnx_sha256), **{f"outputs_{k}": o for k, o in enumerate(outputs)})
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
