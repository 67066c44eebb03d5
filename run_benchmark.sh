#!/usr/bin/env bash
# The main job: set up .venv, run the benchmark and the quick stress set, write the HTML report.
set -euo pipefail
cd "$(dirname "$0")"
source ./scripts/bootstrap.sh
exec "$VENV/bin/mlts" benchmark "$@"
