"""`mlts conformance`: the NNAPI 1.3 conformance tests of the stress suite, driver by driver (the same
run as `mlts stress --tests conformance`, with the options the two share), or, with `--suite nnapi-cts`,
NNAPI's generated CTS test vectors on every driver (mlts.conformance.nnapi_cts)."""
from __future__ import annotations

import argparse
import os

from mlts.runtime import MltsError, ResultCode

from .stress import add_run_options, split_names
from .stress import run as run_stress

NAME = "conformance"
HELP = ("NNAPI 1.3 conformance tests of every driver (validation, deadlines, control flow, memory domains, "
        "caching, execution paths), each in a watched process")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """The `conformance` subcommand: the conformance tests of the stress suite (sets func=run)."""
    from mlts.stress.catalog import CONFORMANCE_TESTS

    width = max(len(t.name) for t in CONFORMANCE_TESTS)
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Run the conformance tests on every available driver (nnapi-reference only with "
                    "--include-reference), like `mlts stress --tests conformance`. Each test reports its "
                    "named checks (pass / fail / n/a for optional features a driver lacks); records go to "
                    "<run dir>/results.jsonl, the HTML report (Conformance section) and JUnit XML.",
        epilog="tests:\n" + "\n".join(f"  {t.name:<{width}}  {t.description}" for t in CONFORMANCE_TESTS)
               + "\n\nexit status 1 unless every test succeeded.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tests", action="append", metavar="NAMES",
                   help="only these conformance tests (comma-separated, repeatable)")
    p.add_argument("--suite", choices=("stress", "nnapi-cts"), default="stress",
                   help="stress: the conformance tests above (default); nnapi-cts: NNAPI's generated test "
                        "vectors (AOSP runtime/test/specs V1_0..V1_3), every case on every driver "
                        "(nnapi-reference included), pass / fail / n/a (operation declined) / error")
    p.add_argument("--ops", action="append", metavar="OPS",
                   help="nnapi-cts: only cases testing these operations (comma-separated, repeatable)")
    p.add_argument("--case", action="append", metavar="NAMES",
                   help="nnapi-cts: only these cases (comma-separated, repeatable), each printed in detail")
    p.add_argument("--spec-dirs", action="append", metavar="DIRS",
                   help="nnapi-cts: only cases from these spec directories (V1_0, V1_1, V1_2, V1_3, V1_3_cts_only)")
    p.add_argument("--no-dynamic", action="store_true",
                   help="nnapi-cts: skip the dynamic-output-shape variant of each case")
    p.add_argument("--paths", action="append", metavar="PATHS",
                   help="nnapi-cts: execution paths (comma-separated, repeatable; default all): sync, async, burst, "
                        "fenced (start_compute_with_dependencies), cached (compiled twice with a cache directory, "
                        "the second from the cache)")
    add_run_options(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """`mlts conformance` = `mlts stress --tests conformance` (or the named conformance tests); with
    --suite nnapi-cts, NNAPI's generated test vectors."""
    if getattr(args, "suite", "stress") == "nnapi-cts":
        return run_nnapi_cts(args)
    from mlts.stress.catalog import CONFORMANCE_TESTS, select_tests

    names = split_names(args.tests) or ["conformance"]
    chosen = select_tests(names, False)
    others = [t.name for t in chosen if t not in CONFORMANCE_TESTS]
    if others:
        raise MltsError(ResultCode.BAD_DATA, f"--tests: {', '.join(others)} are stress tests, not conformance tests "
                                             f"(use mlts stress)")
    args.tests, args.quick, args.duration_scale, args.replay = names, False, 1.0, None
    args.no_all_devices = True  # conformance tests check drivers one by one
    return run_stress(args)


def _cts_devices(args: argparse.Namespace) -> list:
    from mlts.runtime import devices

    from .options import register_cli_drivers

    register_cli_drivers(args)
    available = list(devices())
    names = split_names(args.drivers)
    if not names:
        return available
    by_name = {d.name: d for d in available}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise MltsError(ResultCode.BAD_DATA, f"--drivers: no device named {', '.join(unknown)} "
                                             f"(available: {', '.join(by_name)})")
    return [by_name[n] for n in names]


def _print_cts_summary(records: list[dict]) -> None:
    from mlts.conformance.nnapi_cts.tables import failing, path_counts, replay_command, type_matrices

    by_path = path_counts(records)
    for matrix in type_matrices(records):
        device = matrix.device
        print(f"\n{device}: " + "; ".join(f"{path} {c['pass']} pass, {c['fail']} fail, {c['n/a']} n/a, {c['error']} error"
                                        for path, c in by_path[device].items()))
        width = min(max([len(op) for op, _ in matrix.rows] + [9]), 40)  # long model names overflow
        print(f"  {'operation':<{width}}  {'cases':>6} {'pass':>6} {'fail':>6} {'n/a':>6}   (case and variant; "
              f"pass: on every path)")
        for op, cells in matrix.rows:
            c = [sum(getattr(cell, k) for cell in cells.values()) for k in ("cases", "passed", "failed", "na")]
            print(f"  {op:<{width}}  {c[0]:>6} {c[1]:>6} {c[2]:>6} {c[3]:>6}")
    bad = failing(records)
    if bad:
        print(f"\nfailing cases ({len(bad)}):")
        for r in bad:
            print(f"  {r['status']:<5} {r['device']} {r['spec_dir']}/{r['case']} [{r['variant']}, {r['path']}] "
                  f"{r['operation']}: {r['detail']}\n        replay: {replay_command(r)}")


def run_nnapi_cts(args: argparse.Namespace) -> int:
    """NNAPI's generated test vectors on the chosen drivers and paths; JUnit XML and the HTML report at the
    end; 1 when a case failed or errored, or when no case passed on a driver (it declined them all)."""
    import sys
    import time

    from mlts.benchmark.records import new_run_dir
    from mlts.conformance.nnapi_cts import store, suite
    from mlts.conformance.nnapi_cts.junit import write_junit
    from mlts.conformance.nnapi_cts.paths import parse_paths

    try:
        paths = parse_paths(split_names(args.paths))
    except ValueError as e:
        raise MltsError(ResultCode.BAD_DATA, f"--paths: {e}") from None
    cases = suite.select_cases(store.load_cases(split_names(args.spec_dirs) or store.SPEC_DIRS),
                               ops=split_names(args.ops), names=split_names(args.case))
    if not cases:
        raise MltsError(ResultCode.BAD_DATA, "nnapi-cts: no case matches --ops / --case / --spec-dirs")
    if args.list:
        for c in cases:
            print(f"{c.spec_dir}/{c.name}  {c.operation}{'  (expected to fail)' if c.expect_failure else ''}")
        return 0
    devices = _cts_devices(args)
    run_dir = args.out or str(new_run_dir())
    os.makedirs(run_dir, exist_ok=True)
    results_path = os.path.join(run_dir, "results.jsonl")
    detailed = bool(args.case)
    total = suite.count_runs(cases, not args.no_dynamic, paths) * len(devices)
    print(f"mlts conformance: nnapi-cts: {len(cases)} cases, {total} runs ({', '.join(paths)}) on "
          f"{', '.join(d.name for d in devices)}; results in {results_path}", file=sys.stderr, flush=True)
    done = [0]
    records: list[dict] = []

    def progress(r) -> None:
        done[0] += 1
        records.append(suite.record_of(r))
        if detailed:
            print(f"{r.status:<5} {r.device} {r.case} [{r.variant}] {r.operation} on {r.path} {r.seconds:.3f}s"
                  + (f": {r.detail}" if r.detail else ""))
        elif done[0] % 1000 == 0:
            print(f"mlts conformance: nnapi-cts: {done[0]}/{total}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    results = suite.run_suite(cases, devices, dynamic=not args.no_dynamic, paths=paths, results_path=results_path,
                              on_result=progress)
    elapsed = time.perf_counter() - started
    _print_cts_summary(records)
    junit = write_junit(records, args.junit or os.path.join(run_dir, "junit-nnapi-cts.xml"))
    print(f"\n{len(results)} runs in {elapsed:.1f} s; results: {results_path}; JUnit XML: {junit}")
    if not args.no_report:
        from mlts.fileio import WriteError
        from mlts.report import render_report

        try:
            print(f"report: {render_report(run_dir, os.path.join(run_dir, 'index.html'))}")
        except WriteError:
            raise
        except MltsError as e:
            print(f"the report could not be rendered: {e}", file=sys.stderr)
    passed_on = {r.device for r in results if r.status == "pass"}
    untested = [d.name for d in devices if d.name not in passed_on]
    for name in untested:  # a driver that declined every case was not tested: that is no pass
        print(f"mlts conformance: nnapi-cts: nothing of {name} was tested: no case passed on it (it declined "
              "every one: n/a)", file=sys.stderr)
    return 1 if untested or any(r.status in ("fail", "error") for r in results) else 0
