"""`mlts diff MODEL`: the table and its --json, --input files and their errors (one line, exit status 2),
and the verdict's exit status with the vendor-style quantized CONV_2D drivers of
tests/quantized_rounding_drivers.py given as driver specs (1: the driver that ignores the input zero point,
naming the CONV_2D and its ONNX node; 0: the one that only rounds differently)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from mlts.cli import main
from mlts.cli.diff import model_inputs
from mlts.models.zoo_registry import load
import quantized_rounding_drivers as Q
import test_bench_runner
from test_bench_runner import REF, TINY

register, tiny_zoo = test_bench_runner.register, test_bench_runner.tiny_zoo  # fixtures shared with the runner's

pytest.importorskip("onnxruntime")

QUANT = TINY + "_quant"
STEM = "node 'stem/conv' (Conv, opset 13)"
DIFF_KEYS = {"operand", "unit", "max_diff", "max_abs_diff", "within_tolerance", "elements"}
ROW_KEYS = {"index", "operation", "origin", "devices", "isolated", "end_to_end", "status", "message"}


@pytest.fixture(scope="module")
def quant(tiny_zoo):
    """The quantized zoo model (stable random weights, a private cache) and an image for it."""
    imported = load(QUANT)
    x = np.random.default_rng(11).integers(0, 256, (1, 3, 128, 128)).astype(np.uint8)
    return imported, x


def _table(out: str) -> tuple[list[str], list[str]]:
    """(the header's words, the operation rows) of the printed table."""
    lines = out.splitlines()
    header = next(k for k, line in enumerate(lines) if line.split()[:2] == ["op", "operation"])
    rows = [line for line in lines[header + 1:] if line[:4].strip().isdigit()]
    return lines[header].split(), rows


def test_the_table_names_its_columns_and_the_onnx_nodes(quant, capsys):
    imported, _ = quant
    assert main(["diff", QUANT]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{imported.name}: {REF} against onnxruntime, operation by operation"
    header, rows = _table(out)
    assert header == ["op", "operation", "isolated", "end", "to", "end", "verdict", "ONNX", "node"]
    ops = imported.model.operations()
    assert len(rows) == len(ops)
    for j, row in enumerate(rows):
        assert row.split()[:2] == [str(j), ops[j][0].name]
        assert row.endswith(imported.origin(j))
    assert rows[1].split()[:2] == ["1", "CONV_2D"] and " ok " in rows[1] and STEM in rows[1]
    assert out.rstrip().endswith("every judged operation is within NNAPI's per-operation tolerance")


def test_json_against_nnapi_reference_for_another_driver(quant, capsys):
    imported, _ = quant
    assert main(["diff", QUANT, "--driver", "mlts-fast", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"model", "driver", "against", "partitioned_with", "operations", "end_to_end_error",
                        "out_of_tolerance", "errors", "not_judged", "first_out_of_tolerance"}
    assert out["partitioned_with"] is None  # mlts-fast runs every operation of the model
    assert (out["model"], out["driver"], out["against"]) == (imported.name, "mlts-fast", REF)
    assert (out["out_of_tolerance"], out["errors"], out["not_judged"]) == (0, 0, 0)
    assert out["end_to_end_error"] is None and out["first_out_of_tolerance"] is None
    assert [r["index"] for r in out["operations"]] == list(range(len(imported.model.operations())))
    for r in out["operations"]:
        assert set(r) == ROW_KEYS and r["devices"] == ["mlts-fast"] and r["status"] == "ok"
        assert r["origin"] == imported.origin(r["index"])
        outs = imported.model.operations()[r["index"]][2]
        for diffs in (r["isolated"], r["end_to_end"]):
            assert [d["operand"] for d in diffs] == list(outs)
            for d in diffs:
                assert set(d) == DIFF_KEYS and d["within_tolerance"] and d["unit"] == "steps"
                assert d["elements"] == int(np.prod(imported.model.operand_type(d["operand"]).dimensions))


def test_input_files_are_read_as_given(quant, tmp_path, capsys):
    imported, x = quant
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", input=x)
    for name in ("x.npy", "x.npz"):
        feeds = model_inputs(imported, str(tmp_path / name), seed=0)
        assert list(feeds) == ["input"] and feeds["input"].dtype == np.uint8
        np.testing.assert_array_equal(feeds["input"], x)
    outputs = []
    for name in ("x.npy", "x.npz"):
        assert main(["diff", QUANT, "--input", str(tmp_path / name), "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]


def test_the_default_input_is_seeded_random_of_the_input_type(quant):
    imported, _ = quant
    a, b, c = (model_inputs(imported, None, seed)["input"] for seed in (0, 0, 1))
    assert a.dtype == np.uint8 and a.shape == (1, 3, 128, 128) and a.min() < 20 and a.max() > 235
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


def _two_input_model(tmp_path):
    model = helper.make_model(
        helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"], name="add")], "two",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "b")],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = tmp_path / "two.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def test_a_model_with_two_inputs_takes_an_npz(tmp_path, capsys):
    path = _two_input_model(tmp_path)
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 0.5, np.float32)
    np.savez(tmp_path / "ab.npz", a=a, b=b)
    assert main(["diff", path, "--input", str(tmp_path / "ab.npz")]) == 0
    header, rows = _table(capsys.readouterr().out)
    assert len(rows) == 1 and rows[0].split()[:5] == ["0", "ADD", "0.00e+00", "rel", "0.00e+00"]
    assert rows[0].endswith("node 'add' (Add, opset 13)")


def _bad_inputs(tmp_path, quant_input):
    np.savez(tmp_path / "wrong.npz", image=quant_input)
    (tmp_path / "text.npy").write_text("not an array\n")
    (tmp_path / "corrupt.npz").write_bytes(b"PK\x03\x04 this is no zip archive")
    np.savez(tmp_path / "objects.npz", input=np.array([object()], dtype=object))
    np.save(tmp_path / "f64.npy", quant_input.astype(np.float64))
    np.save(tmp_path / "truncated.npy", quant_input)
    data = (tmp_path / "truncated.npy").read_bytes()
    (tmp_path / "truncated.npy").write_bytes(data[:200])


@pytest.mark.parametrize("argv, message", [
    (["--input", "wrong.npz"], "missing ['input']; unknown ['image'] (the model's inputs are ['input'])"),
    (["--input", "text.npy"], "--input {tmp}/text.npy: cannot be read as .npy or .npz"),
    (["--input", "corrupt.npz"], "--input {tmp}/corrupt.npz: cannot be read as .npy or .npz"),
    (["--input", "objects.npz"], "--input {tmp}/objects.npz: cannot be read as .npy or .npz"),
    (["--input", "truncated.npy"], "--input {tmp}/truncated.npy: cannot be read as .npy or .npz"),
    (["--input", "missing.npy"], "--input {tmp}/missing.npy: cannot be read as .npy or .npz"),
    (["--input", "f64.npy"], "input 'input' has dtype float64, the model expects uint8"),
    (["--driver", "no-such-device"], "--driver no-such-device: no device has that name"),
], ids=["names", "text", "corrupt-zip", "object-array", "truncated", "missing", "dtype", "driver"])
def test_bad_input_is_one_line_and_exit_status_2(quant, tmp_path, capsys, argv, message):
    _bad_inputs(tmp_path, quant[1])
    argv = [str(tmp_path / a) if a.endswith((".npy", ".npz")) else a for a in argv]
    assert main(["diff", QUANT, *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.rstrip("\n")
    assert err.startswith("mlts diff: error: ") and "\n" not in err and "Traceback" not in err
    assert message.format(tmp=tmp_path) in err


def test_one_array_for_a_model_with_two_inputs_is_bad_input(tmp_path, capsys):
    path = _two_input_model(tmp_path)
    np.save(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    assert main(["diff", path, "--input", str(tmp_path / "a.npy")]) == 2
    assert "one array for a model with inputs ['a', 'b']: use an .npz" in capsys.readouterr().err


def test_a_driver_that_ignores_the_input_zero_point_exits_1_naming_the_conv(quant, register, capsys):
    assert main(["diff", QUANT, "--driver", Q.spec("ignores_zero_point"), "--in-process"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{quant[0].name}: npu-ignores-zero-point against {REF}")
    _, rows = _table(out)
    stem = rows[1].split()
    assert stem[:3] == ["1", "CONV_2D", "npu-ignores-zero-point"] and int(stem[3]) > 1 and stem[4] == "steps"
    assert rows[0].split()[:3] == ["0", "TRANSPOSE", REF]  # partitioned: nnapi-reference takes the rest
    assert "out of tolerance" in rows[1] and STEM in rows[1]
    assert out.rstrip().endswith(f"1 operation(s) out of tolerance; the first: 1 CONV_2D <- {STEM}")

    assert main(["diff", QUANT, "--driver", "npu-ignores-zero-point", "--json"]) == 1  # registered by now
    summary = json.loads(capsys.readouterr().out)
    assert summary["first_out_of_tolerance"] == {"index": 1, "operation": "CONV_2D", "origin": STEM}
    assert summary["out_of_tolerance"] == 1 and summary["errors"] == 0


def test_a_driver_that_only_rounds_differently_exits_0(quant, register, capsys):
    spec = Q.spec("single_rounding")
    assert main(["diff", QUANT, "--load", spec, "--driver", "npu-single-rounding", "--in-process", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    convs = [r for r in summary["operations"] if r["operation"] == "CONV_2D"]
    assert convs and all(r["status"] == "ok" and r["isolated"][0]["max_diff"] <= 1 for r in convs)
    # partitioned as the benchmark runs a partial driver: nnapi-reference takes every other operation
    assert summary["partitioned_with"] == REF and summary["end_to_end_error"] is None
    assert all(r["devices"] == (["npu-single-rounding"] if r["operation"] == "CONV_2D" else [REF])
               for r in summary["operations"])
    assert (summary["out_of_tolerance"], summary["errors"]) == (0, 0)
