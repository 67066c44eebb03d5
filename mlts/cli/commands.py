"""The table of `mlts` subcommands, in `mlts --help` order (pytest's default-plugins idea): main() walks
it, so a new subcommand is one module with the interface below and one entry here, with no dispatch
code to touch."""
from __future__ import annotations

import argparse
from typing import Any, Protocol

from . import (benchmark, compare, conformance, devices, diff, fuzz, graphdump, import_model, models, profile, report,
               stress)


class Subcommand(Protocol):
    """What each subcommand module offers."""

    NAME: str  # the word after `mlts`
    HELP: str  # its line in `mlts --help`

    def add_parser(self, subparsers: Any) -> argparse.ArgumentParser:
        """Add the NAME subparser with its options to `mlts`'s subparsers; it sets func=run."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the command; the exit status."""


COMMANDS: tuple[Subcommand, ...] = (devices, models, import_model, graphdump, diff, compare, report, benchmark,
                                    profile, stress, conformance, fuzz)
