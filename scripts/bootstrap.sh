# Sourced by run_tests.sh and run_benchmark.sh: make .venv and install mlts[test] when needed.
PYTHON="${PYTHON:-python3}"
VENV="${MLTS_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "mlts: creating virtual environment in $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.mlts-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "mlts: installing mlts[test] into $VENV" >&2
  # Byte-compiling every installed package costs ~12 s; compile (on all cores) only what runs import,
  # which also matters where PYTHONDONTWRITEBYTECODE is set: every test process would recompile numba.
  "$VENV/bin/python" -m pip install --quiet --no-compile -e '.[test]'
  "$VENV/bin/python" - <<'PY'
import compileall, importlib.util, os
specs = [importlib.util.find_spec(name) for name in
         ("numpy", "numba", "llvmlite", "onnx", "onnxruntime", "google.protobuf", "psutil", "jinja2", "markupsafe")]
for root in [os.path.dirname(s.origin) for s in specs if s is not None and s.origin] + ["mlts"]:
    compileall.compile_dir(root, quiet=1, workers=0)
PY
  touch "$stamp"
fi
