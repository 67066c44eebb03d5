"""The NNAPI guide's two-operation model, as the README shows it, and the README's code block itself."""
from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import numpy as np
import pytest

from mlts.runtime import (PROT_READ, Compilation, Execution, FuseCode, Memory, Model, OperandCode, OperandLifetime,
                          OperandType, OperationCode)

README = Path(__file__).resolve().parents[2] / "README.md"


def build_guide_model(weights_path: str, a_value, b_value):
    """Operands 0..6: 0 input, 1 and 3 constants from one mapped file, 2 and 5 activations, 4 temp, 6 output."""
    tensor3x4 = OperandType(OperandCode.TENSOR_FLOAT32, (3, 4))
    activation = OperandType(OperandCode.INT32)
    with open(weights_path, "wb") as f:
        f.write(np.asarray(a_value, np.float32).tobytes() + np.asarray(b_value, np.float32).tobytes())
    mem1 = Memory.from_file(weights_path, protect=PROT_READ)
    model = Model()
    indexes = [model.add_operand(t) for t in (tensor3x4, tensor3x4, activation, tensor3x4, tensor3x4, activation,
                                              tensor3x4)]
    assert indexes == list(range(7))  # operands are numbered in the order they are added
    size_of_tensor = 3 * 4 * 4
    model.set_operand_value_from_memory(1, mem1, 0, size_of_tensor)
    model.set_operand_value_from_memory(3, mem1, size_of_tensor, size_of_tensor)
    model.set_operand_value(2, np.int32(FuseCode.NONE))
    model.set_operand_value(5, np.int32(FuseCode.NONE))
    assert model.add_operation(OperationCode.ADD, [1, 0, 2], [4]) == 0
    assert model.add_operation(OperationCode.MUL, [3, 4, 5], [6]) == 1
    model.identify_inputs_and_outputs([0], [6])
    model.finish()
    return model, mem1


def test_guide_example_by_hand(tmp_path):
    model, mem1 = build_guide_model(str(tmp_path / "training.bin"), np.full((3, 4), 1.5), np.full((3, 4), 2.0))
    compilation = Compilation(model)
    compilation.finish()
    execution = Execution(compilation)
    output = np.empty((3, 4), np.float32)
    execution.set_input(0, np.ones((3, 4), np.float32))
    execution.set_output(0, output)
    execution.compute()
    np.testing.assert_array_equal(output, np.full((3, 4), 5.0, np.float32))  # (1 + 1.5) * 2
    assert execution.get_output_operand_dimensions(0) == (3, 4)


def test_guide_example_distinct_values_and_layout(tmp_path):
    """Distinct per-element constants catch a wrong offset into the mapped file or a transposed layout."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 4          # operand 1, bytes [0, 48)
    b = (np.arange(12, dtype=np.float32).reshape(3, 4) + 1) * -1   # operand 3, bytes [48, 96)
    model, mem1 = build_guide_model(str(tmp_path / "training.bin"), a, b)
    hal = model.hal_model().main
    # Constants 1 and 3 are referenced in the mapped pool (not copied); 2 and 5 are small copies.
    assert hal.operands[1].lifetime == OperandLifetime.CONSTANT_REFERENCE
    assert hal.operands[3].lifetime == OperandLifetime.CONSTANT_REFERENCE
    assert (hal.operands[1].location.offset, hal.operands[3].location.offset) == (0, 48)
    assert hal.operands[2].lifetime == hal.operands[5].lifetime == OperandLifetime.CONSTANT_COPY
    compilation = Compilation(model)
    compilation.finish()
    x = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], np.float32)
    for _ in range(2):  # the same compilation serves several executions
        execution = Execution(compilation)
        out = np.empty((3, 4), np.float32)
        execution.set_input(0, x)
        execution.set_output(0, out)
        execution.compute()
        # by hand for element [1][2]: (x=7 + a=6/4=1.5) * b=-(6+1) = -59.5
        assert out[1, 2] == -59.5
        np.testing.assert_allclose(out, (x + a) * b, rtol=1e-6)


def extract_readme_python() -> str:
    """The README's NNAPI guide example: the ```python block that builds the ADD/MUL model."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)
    guide = [b for b in blocks if "model.add_operation(OperationCode.ADD, [1, 0, 2], [4])" in b]
    assert len(guide) == 1, "expected exactly one NNAPI guide ```python block in README.md"
    return guide[0]


def test_readme_code_block_runs(tmp_path, monkeypatch):
    """Execute the README's example verbatim (in a temp dir: it writes training.bin) so it cannot rot."""
    code = extract_readme_python()
    assert "Memory.from_file" in code and "set_operand_value_from_memory" in code
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme_example"}
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(code, str(README) + ":python-block", "exec"), namespace)
    assert os.path.exists(tmp_path / "training.bin")
    np.testing.assert_array_equal(namespace["output"], np.full((3, 4), 5.0, np.float32))
    # what it prints is the same 3x4 grid of 5.0 it promises in its comment
    printed = [float(v) for v in re.findall(r"[-+]?\d+\.\d*", stdout.getvalue())]
    assert printed == [5.0] * 12
    assert "= 5.0" in code  # the comment states the hand-computed value checked above


def test_guide_model_requires_the_constants_region_to_fit(tmp_path):
    """The length given for operand 3 must match its type; the guide's offsets must be in bounds."""
    from mlts.runtime import MltsError, ResultCode

    path = tmp_path / "short.bin"
    path.write_bytes(np.zeros(12, np.float32).tobytes())  # only one tensor's worth of bytes
    mem = Memory.from_file(str(path), protect=PROT_READ)
    model = Model()
    for t in (OperandType(OperandCode.TENSOR_FLOAT32, (3, 4)),) * 2:
        model.add_operand(t)
    with pytest.raises(MltsError) as e:
        model.set_operand_value_from_memory(1, mem, 48, 48)
    assert e.value.code == ResultCode.BAD_DATA
