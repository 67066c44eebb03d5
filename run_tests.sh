#!/usr/bin/env bash
# Run the mlts test suite: creates/updates .venv, installs mlts with its test extras, runs pytest.
# Extra arguments go to pytest (e.g. ./run_tests.sh -m "not slow" -x).
set -euo pipefail
cd "$(dirname "$0")"
source ./scripts/bootstrap.sh
exec "$VENV/bin/python" -m pytest "$@"
