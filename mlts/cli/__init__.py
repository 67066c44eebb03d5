"""The `mlts` command line: devices, models, benchmark, stress, conformance, report, compare, import, graphdump.

main() builds one parser from the table of subcommands (mlts.cli.commands) and runs the chosen one; it
owns what every command shares: warnings as one line, errors as one line with the exit status they
document, interruptions as 130/143. Each subcommand lives in its own module of this package.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
import warnings
from typing import Sequence

from mlts.fileio import WriteError
from mlts.runtime import MltsError
from mlts.signals import exit_status


def build_parser() -> argparse.ArgumentParser:
    """The `mlts` parser: one subparser per entry of the table, in its order."""
    # Imported here, not with the package, so that `python -m mlts.cli.compare` (or .report) runs that
    # module once, as __main__, instead of after a first import by this package.
    from .commands import COMMANDS

    parser = argparse.ArgumentParser(prog="mlts", description="ML Test Suite for neural-network drivers")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)  # sets func=command.run
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (a plugin that failed to load, ...) as one plain line on stderr."""
    print(f"mlts: warning: {str(message).removeprefix('mlts: ')}", file=sys.stderr if file is None else file)


#: OSErrors of a path that could not be written (EACCES and EPERM too: mlts turns its own read failures
#: into MltsError, so a permission error that reaches main is, in practice, one on a file it writes).
_WRITE_ERRNOS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENOTDIR, errno.EISDIR,
                           errno.EEXIST, errno.EACCES, errno.EPERM})


def _os_error_line(e: OSError) -> str:
    """An OSError that escaped a command as one line: `cannot write <path>: <cause>` where it names one."""
    cause = e.strerror or str(e)
    if e.filename is None:
        return cause
    path = os.fsdecode(e.filename)
    return f"cannot write {path}: {cause}" if e.errno in _WRITE_ERRNOS else f"{path}: {cause}"


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status 0/1 as each command documents; 130 (SIGINT) or 143 (SIGTERM) when interrupted."""
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        return args.func(args)
    except WriteError as e:  # one line, no result code: `mlts <command>: error: cannot write <path>: <cause>`
        print(f"mlts {args.command}: error: {e.message}", file=sys.stderr)
        return 1
    except MltsError as e:
        print(f"mlts {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head` and the like
        return 0
    except OSError as e:  # the last resort for a path that could not be written: never a traceback
        print(f"mlts {args.command}: error: {_os_error_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM where the command handles it (mlts.signals)
        print(f"mlts {args.command}: interrupted", file=sys.stderr)
        return exit_status(e)
