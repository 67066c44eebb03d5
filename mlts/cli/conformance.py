"""`mlts conformance`: the NNAPI 1.3 conformance tests of the stress suite, driver by driver; the same
run as `mlts stress --tests conformance`, with the options the two share."""
from __future__ import annotations

import argparse

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
    add_run_options(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """`mlts conformance` = `mlts stress --tests conformance` (or the named conformance tests)."""
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
