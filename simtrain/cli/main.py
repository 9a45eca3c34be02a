"""Command line: a thin layer over :mod:`simtrain.api`, one module per command group.

Every user error is one line on stderr and exit status 2; a traceback means a bug. SIGINT and
SIGTERM end a command with one line naming the signal and the shell's status for it, 128 + the
signal number (130, 143: Bash Reference Manual, "Exit Status"); outputs are written as a whole set
or not at all (:mod:`simtrain.outputs.files`), so an interrupted run leaves the previous set.
Matplotlib's cache goes to a private folder in the system's temporary folder unless
``MPLCONFIGDIR`` says otherwise (:func:`matplotlib_config_dir`): a command writes only where it is
asked to.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from simtrain.cli import analysis, calibrate, collective, inspect, run, schedule, whatif
from simtrain.cli.pages import small_pages_unless_set
from simtrain.errors import SimtrainError


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit status 2, pointing to the help of the
    command that was given (``simtrain run --help``); a quoted value in argparse's message
    (``invalid choice: '...'``) is cut to 80 characters. A value that starts with a minus sign and
    a digit (``--costs -1,1,1``, ``--gbs -1e3``) is a value, not a flag (argparse alone reads only
    ``-1`` and ``-1.5`` so), so its flag's own check names what is valid."""

    def __init__(self, *args, **kwargs) -> None:
        # argparse makes a formatter for every flag it adds (to check its metavar), and each read
        # the terminal's width again: here it is read once per parser, as the formatter reads it
        width = shutil.get_terminal_size().columns - 2
        kwargs.setdefault("formatter_class", functools.partial(argparse.HelpFormatter, width=width))
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """As argparse's, but words no command takes are refused in the words of the command
        given: argparse leaves them to the top-level parser, whose help does not list them."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            help_of = f"{self.prog} {command}" if command else self.prog
            self._fail(f"unrecognized arguments: {' '.join(extras)}", help_of)
        return parsed

    def error(self, message: str) -> None:  # type: ignore[override]
        self._fail(message, self.prog)

    @staticmethod
    def _fail(message: str, help_of: str) -> None:
        message = re.sub(r"'([^'\n]{76})[^'\n]{4,}'", r"'\1...'", message.replace("\n", " "))
        raise SimtrainError(f"{message} (see {help_of} --help)")


#: The modules' functions that add the commands, in the order ``simtrain --help`` lists them.
ADDERS = (run.add_command, analysis.add_commands, collective.add_collective_command, schedule.add_command,
          calibrate.add_command, inspect.add_commands, whatif.add_command)
#: Each command and the function of :data:`ADDERS` that adds it (a test holds the two together).
COMMANDS = {"run": run.add_command, "analytic": analysis.add_commands, "compare": analysis.add_commands,
            "search": analysis.add_commands, "collective": collective.add_collective_command,
            "schedule": schedule.add_command, "calibrate": calibrate.add_command, "list": inspect.add_commands,
            "topology": inspect.add_commands, "mesh": inspect.add_commands, "whatif": whatif.add_command}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``simtrain`` parser with every subcommand; with ``command`` one of :data:`COMMANDS`, with
    that command's group alone. A command's parser is the same either way; building the run
    command's alone takes about 1.3 ms, all eleven about 8 ms."""
    parser = _Parser(prog="simtrain", description="Simulate one training step of a large "
                     "transformer on a GPU cluster, event by event.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in ADDERS if command not in COMMANDS else (COMMANDS[command],):
        add(sub)
    return parser


class Interrupted(KeyboardInterrupt):
    """A termination signal received while a command ran (``signum``: its number)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted(signum)


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread (a
    signal ignored when the process started, as in a shell's background job, stays ignored);
    the previous handlers come back after it. Outside the main thread, nothing changes.

    Python cannot raise out of some places (an ``os.fork`` hook, a ``__del__``): it reports the
    exception to ``sys.unraisablehook`` and goes on. While the block runs, that hook sends an
    interruption it is given to this process again (``signal.raise_signal``), so the signal is
    honoured at the next place that can raise, not lost."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is not signal.SIG_IGN:
            previous[signum] = handler
            signal.signal(signum, _raise_interrupted)
    unraisable = sys.unraisablehook

    def raise_again(info: Any) -> None:
        if isinstance(info.exc_value, Interrupted):
            signal.raise_signal(info.exc_value.signum)
        else:
            unraisable(info)

    sys.unraisablehook = raise_again
    try:
        yield
    finally:
        sys.unraisablehook = unraisable
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def interrupted_status(exc: KeyboardInterrupt) -> tuple[str, int]:
    """The line and exit status of an interruption: 128 + the signal number (SIGINT when the
    interruption is Python's own KeyboardInterrupt).

    >>> interrupted_status(Interrupted(signal.SIGTERM))
    ('simtrain: interrupted by SIGTERM', 143)
    >>> interrupted_status(KeyboardInterrupt())
    ('simtrain: interrupted by SIGINT', 130)
    """
    signum = getattr(exc, "signum", signal.SIGINT)
    return f"simtrain: interrupted by {signal.Signals(signum).name}", 128 + int(signum)


def matplotlib_config_dir(environ: dict[str, str] | None = None) -> str:
    """Set ``MPLCONFIGDIR`` when it is unset and return it. Matplotlib keeps its font cache there,
    by default under the home folder (``~/.config/matplotlib`` or ``~/.cache/matplotlib``:
    matplotlib's ``get_configdir`` documentation); here it is ``simtrain-matplotlib-UID`` in the
    system's temporary folder, made private (mode 0700) and refused when someone else owns it, a
    fresh private folder then. ``environ`` defaults to ``os.environ``."""
    env = os.environ if environ is None else environ
    if env.get("MPLCONFIGDIR"):
        return env["MPLCONFIGDIR"]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = os.path.join(tempfile.gettempdir(), f"simtrain-matplotlib-{uid}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
            raise PermissionError(folder)
    except OSError:
        folder = tempfile.mkdtemp(prefix="simtrain-matplotlib-")
    env["MPLCONFIGDIR"] = folder
    return folder


#: Bounds on an error as printed: a word (a path, a value) longer than :data:`LONG_WORD` is cut to
#: 80 characters, a line to :data:`MAX_LINE`, and the lines after the first (a schedule's grid) to
#: :data:`MAX_EXTRA_LINES`.
LONG_WORD, MAX_LINE, MAX_EXTRA_LINES = 160, 2000, 60


def bounded(message: str) -> str:
    """``message`` with every over-long word, line and the number of lines cut (see above), so a
    value of megabytes echoed by an error stays one readable line.

    >>> bounded("bad value " + "x" * 500 + " here")
    'bad value xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... here'
    """
    def cut_word(m: re.Match) -> str:
        return m.group(0)[:77] + "..."

    lines = [re.sub(rf"\S{{{LONG_WORD + 1},}}", cut_word, line) for line in message.split("\n")]
    lines = [line if len(line) <= MAX_LINE else line[:MAX_LINE - 3] + "..." for line in lines]
    if len(lines) > MAX_EXTRA_LINES + 1:
        lines = lines[:MAX_EXTRA_LINES + 1] + [f"... ({len(lines) - MAX_EXTRA_LINES - 1} more lines)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    matplotlib_config_dir()
    small_pages_unless_set()
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(str(words[0]) if words else None)
    try:
        with signals_interrupt():
            args = parser.parse_args(argv)
            if not getattr(args, "func", None):
                parser.print_help()
                return 2
            return args.func(args)
    except SimtrainError as exc:
        print(f"simtrain: error: {bounded(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        line, status = interrupted_status(exc)
        print(line, file=sys.stderr)
        return status
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
