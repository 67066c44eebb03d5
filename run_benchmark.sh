#!/usr/bin/env bash
# The main job: set up .venv, run the benchmark, the quick stress set and the conformance tests into
# one run directory, write the HTML report and print its path. Extra arguments go to `mlts benchmark`
# (--quick, --models, --drivers, --baseline, ...); with --quick the stress tests are also shortened
# and run on the drivers alone (not again on all devices together).
set -uo pipefail
cd "$(dirname "$0")"
source ./scripts/bootstrap.sh || exit 1
MLTS="$VENV/bin/mlts"

run_dir="reports/$(date -u +%Y%m%dT%H%M%SZ)"
stress_args=(--tests quick,conformance)
for arg in "$@"; do
  case "$arg" in
    --quick) stress_args+=(--quick --duration-scale 0.3 --no-all-devices) ;;
    --out|--out=*|--resume|--resume=*)
      echo "run_benchmark.sh picks the run directory itself; use mlts benchmark directly for --out/--resume" >&2
      exit 2 ;;
  esac
done

"$MLTS" benchmark --out "$run_dir" "$@"
bench_rc=$?
if [ "$bench_rc" -eq 130 ] || [ "$bench_rc" -eq 143 ]; then exit "$bench_rc"; fi  # interrupted: its report is written
echo "== quick stress set and conformance tests" >&2
"$MLTS" stress "${stress_args[@]}" --out "$run_dir"
stress_rc=$?
echo "report: $run_dir/index.html"
# Non-zero when the benchmark failed (errors, no models, a baseline regression) or a stress test did not succeed.
if [ "$bench_rc" -ne 0 ]; then exit "$bench_rc"; fi
exit "$stress_rc"
