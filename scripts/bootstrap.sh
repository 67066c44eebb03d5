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
  # --no-compile: byte-compiling every installed package costs ~12 s here; Python compiles what it imports.
  "$VENV/bin/python" -m pip install --quiet --no-compile -e '.[test]'
  touch "$stamp"
fi
