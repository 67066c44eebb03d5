"""`mlts stress`: argument parsing and the run behind it (mlts.stress.suite runs the tests), a saved
failing graph replayed (--replay), and the options `mlts conformance` shares with it."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlts.runtime import MltsError, ResultCode

from .options import add_driver_options, register_cli_drivers

NAME = "stress"
HELP = "crash, hang, leak and corner-case tests of every driver, each in a watched process"


def _epilog() -> str:
    from mlts.stress.catalog import CONFORMANCE_TESTS, TESTS

    width = max(len(t.name) for t in TESTS + CONFORMANCE_TESTS)
    lines = ["tests (default s / quick s, before --duration-scale):"]
    for t in TESTS:
        quick = "-" if t.quick_s is None else f"{t.quick_s:g}"
        lines.append(f"  {t.name:<{width}}  {t.duration_s:>4g} / {quick:<4} {t.description}")
    lines += ["", "conformance tests (--tests conformance, or `mlts conformance`; per driver, not all-devices):"]
    lines += [f"  {t.name:<{width}}  {t.description}" for t in CONFORMANCE_TESTS]
    lines += ["", "models: the zoo models with trained weights (smallest first; quantized ones once built), else the "
              "suite's own: convnet_f32 / convnet_u8 (CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D, RESHAPE, "
              "FULLY_CONNECTED, SOFTMAX), conv_add_f32 (CONV_2D, ADD, CONCATENATION), convnet_f32_large (for "
              "latency). A driver that runs part of a model runs it partitioned with nnapi-reference (no CPU "
              "fallback: its failures count); the record says how many operations ran on the driver. A test none "
              "of whose models has an operation the driver takes is SKIPPED."]
    lines += ["", "outcomes: SUCCESS, SKIPPED (the test could not exercise the driver; never a success), FAILURE "
              "(with its reason), HANG (killed at its deadline or after no heartbeat), CRASH (the test process "
              "died). Under all-devices, a driver failure that the CPU fallback hid is a FAILURE. Exit status 1 on "
              "any FAILURE, HANG or CRASH, or when a driver's tests were all SKIPPED."]
    return "\n".join(lines)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """The `stress` subcommand (sets func=run)."""
    p = subparsers.add_parser(
        NAME, help=HELP,
        description="Run the stress tests on every available driver (nnapi-reference only with "
                    "--include-reference) and once with no named device (all-devices: runtime partitioning). "
                    "Records go to <run dir>/results.jsonl (kind \"stress\"), the HTML report and JUnit XML.",
        epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the quick set (about a minute on 2 cores)")
    p.add_argument("--tests", action="append", metavar="NAMES",
                   help="only these tests (comma-separated, repeatable); the groups quick, default and "
                        "conformance stand for their tests")
    p.add_argument("--no-all-devices", action="store_true",
                   help="skip the all-devices target (no named device: runtime partitioning)")
    add_run_options(p)
    p.add_argument("--duration-scale", type=float, default=1.0, metavar="F",
                   help="multiply every test's duration (0.2: five times shorter)")
    p.add_argument("--replay", metavar="FILE", help="run a saved failing random graph again, on its driver "
                                                    "(or on --drivers)")
    p.add_argument("--trust-run-dir", action="store_true",
                   help="with --replay: load the driver files or modules the graph file names (otherwise only "
                        "those given again with --driver, and mlts's own)")
    p.set_defaults(func=run)
    return p


def add_run_options(p: argparse.ArgumentParser) -> None:
    """What `stress` and `conformance` share: drivers, heartbeat, seed, run directory, outputs."""
    p.add_argument("--drivers", action="append", metavar="NAMES",
                   help="only these drivers (comma-separated, repeatable; all-devices is the unnamed-device run)")
    p.add_argument("--include-reference", action="store_true", help="also test nnapi-reference itself")
    p.add_argument("--heartbeat", type=float, default=30.0, metavar="S",
                   help="a test silent for this long is a HANG (default 30)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice (graphs, kill moments)")
    p.add_argument("--out", metavar="DIR", help="run directory (default: reports/<timestamp>); an existing one "
                                                "is resumed: finished tests are skipped")
    p.add_argument("--junit", metavar="FILE", help="JUnit XML path (default: <run dir>/junit-stress.xml)")
    p.add_argument("--no-report", action="store_true", help="do not render index.html")
    p.add_argument("--list", action="store_true", help="list the tests and targets, run nothing")
    add_driver_options(p)


def split_names(values) -> list[str]:
    """The names of a repeatable, comma-separated option."""
    return [n.strip() for item in values or [] for n in item.split(",") if n.strip()]


def _logger(args: argparse.Namespace):
    """Progress lines prefixed with the command that runs (`mlts stress:` / `mlts conformance:`)."""
    prefix = f"mlts {getattr(args, 'command', None) or 'stress'}"

    def log(line: str) -> None:
        print(f"{prefix}: {line}", file=sys.stderr, flush=True)
    return log


def _targets_and_specs(args: argparse.Namespace):
    """Register the run's drivers here only to learn their names, then stop their services: every
    test process loads its own."""
    from mlts.runtime import unregister_driver
    from mlts.runtime.drivers.loading import close_driver
    from mlts.runtime.app.plugins import driver_specs
    from mlts.stress.drivers import discover_targets

    registered = register_cli_drivers(args)
    try:
        targets = discover_targets(include_reference=args.include_reference)
    finally:
        for d in registered:
            close_driver(d.driver)
            unregister_driver(d.name)
    return targets, driver_specs(getattr(args, "driver", None) or [])


def run(args: argparse.Namespace) -> int:
    """Run the suite; 0 when nothing failed, hung or crashed and every driver was exercised (CI gates on
    it); SIGTERM / Ctrl-C write the JUnit XML and the report of what finished (exit 143 / 130)."""
    from mlts.benchmark.records import new_run_dir
    from mlts.fileio import WriteError, make_dir
    from mlts.signals import exit_status, interrupt_on_signals
    from mlts.stress.catalog import select_tests
    from mlts.stress.drivers import ALL_DEVICES, select_targets
    from mlts.stress.junit import write_junit
    from mlts.stress.models import model_names
    from mlts.stress.suite import SuiteConfig, outcome_counts, run_passed, run_suite

    _log = _logger(args)

    if args.duration_scale <= 0:
        raise MltsError(ResultCode.BAD_DATA, f"--duration-scale must be > 0, got {args.duration_scale:g}")
    if args.replay:
        return run_replay(args)
    tests = select_tests(split_names(args.tests), args.quick)
    all_targets, specs = _targets_and_specs(args)
    if getattr(args, "no_all_devices", False):
        all_targets = [t for t in all_targets if t.name != ALL_DEVICES]
    targets = select_targets(all_targets, split_names(args.drivers))
    if args.list:
        print("targets: " + ", ".join(t.name for t in targets))
        for t in tests:
            print(f"{t.name}: {t.duration(args.quick, args.duration_scale):g} s  {t.description}")
        return 0
    models, note = model_names()
    if note:
        _log(note)
    run_dir = make_dir(Path(args.out)) if args.out else new_run_dir("reports")
    config = SuiteConfig(run_dir=run_dir, targets=targets, tests=tests, specs=specs,
                         hosting="in-process" if args.in_process else None, quick=args.quick,
                         duration_scale=args.duration_scale, heartbeat_s=args.heartbeat, models=models,
                         max_models=1 if args.quick else None, seed=args.seed,
                         liveness_after_disruptive=not args.quick)  # quick: the tests' own checks suffice
    _log(f"{len(tests)} test(s) x {len(targets)} target(s) ({', '.join(t.name for t in targets)}) -> {run_dir}")
    interrupted: BaseException | None = None
    with interrupt_on_signals():
        try:
            records = run_suite(config, progress=_log)
        except KeyboardInterrupt as e:  # what finished is in results.jsonl: report it
            interrupted = e
            _log(f"interrupted ({e or 'SIGINT'}): reporting the tests that finished")
            records = _finished_records(run_dir)
        junit = write_junit(records, args.junit or run_dir / "junit-stress.xml")
        counts = outcome_counts(records)
        _log(", ".join(f"{n} {o}" for o, n in counts.items() if n) + f"; JUnit XML: {junit}")
        if not args.no_report:
            from mlts.report import render_report

            try:
                report = render_report(run_dir, run_dir / "index.html")
                _log(f"report: {report}")
            except WriteError:
                raise
            except MltsError as e:
                _log(f"the report could not be rendered: {e}")
    print(run_dir)
    if interrupted is not None:
        return exit_status(interrupted)
    return 0 if run_passed(records) else 1


def _finished_records(run_dir: Path) -> list[dict]:
    from mlts.benchmark.records import read_results

    try:
        return [r for r in read_results(run_dir).records if r.get("kind") == "stress"]
    except MltsError:
        return []


def run_replay(args: argparse.Namespace) -> int:
    """A saved graph on the driver it failed on (its spec is in the file), or on --drivers."""
    import tempfile

    from mlts.runtime.app.plugins import driver_specs, recorded_specs
    from mlts.stress.catalog import REPLAY
    from mlts.stress.drivers import Target, select_targets
    from mlts.stress.graph_spec import load_spec
    from mlts.stress.suite import SuiteConfig, watch

    path = Path(args.replay).resolve()
    spec = load_spec(path)
    given = driver_specs(getattr(args, "driver", None) or [])
    target_spec = (spec.get("target") or {}).get("spec") if isinstance(spec.get("target"), dict) else None
    recorded = recorded_specs(list(spec.get("specs") or []) + [target_spec], given, trusted=args.trust_run_dir,
                              source=f"--replay: {path}", trust_flag="--trust-run-dir")
    specs = list(dict.fromkeys(given + recorded))
    names = split_names(args.drivers)
    if names:
        all_targets, cli_specs = _targets_and_specs(args)
        specs = list(dict.fromkeys(specs + cli_specs))
        targets = select_targets(all_targets, names)
    elif spec.get("target"):
        targets = [Target.from_job(spec["target"])]
    else:
        raise MltsError(ResultCode.BAD_DATA, f"{path}: the graph names no driver; give one with --drivers")
    hosting = "in-process" if args.in_process else spec.get("hosting")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="mlts-replay-") as tmp:
        run_dir = Path(args.out) if args.out else Path(tmp)
        config = SuiteConfig(run_dir=run_dir, targets=targets, tests=[REPLAY], specs=specs, hosting=hosting,
                             heartbeat_s=args.heartbeat)
        for target in targets:
            r = watch(config, target, REPLAY, Path(tmp), spec_path=str(path))
            print(f"{target.name}: {r.outcome}" + (f": {r.reason}" if r.reason else "")
                  + (f"\n{r.log_tail}" if r.outcome in ("HANG", "CRASH") else ""))
            failed += r.outcome != "SUCCESS" or "did not reproduce" not in (r.details.get("note") or r.reason or "")
    return 1 if failed else 0
