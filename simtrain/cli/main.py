"""Command line: a thin layer over :mod:`simtrain.api`, one module per command group.

Every user error is one line on stderr and exit status 2; a traceback means a bug.
"""

from __future__ import annotations

import argparse
import sys

from simtrain.cli import analysis, calibrate, collective, inspect, run, schedule, whatif
from simtrain.errors import SimtrainError


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SimtrainError(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``simtrain`` parser with every subcommand."""
    parser = _Parser(prog="simtrain", description="Simulate one training step of a large "
                     "transformer on a GPU cluster, event by event.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    run.add_command(sub)
    analysis.add_commands(sub)
    collective.add_collective_command(sub)
    schedule.add_command(sub)
    calibrate.add_command(sub)
    inspect.add_commands(sub)
    whatif.add_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return args.func(args)
    except SimtrainError as exc:
        print(f"simtrain: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("simtrain: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
