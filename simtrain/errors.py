"""The project's exception types.

Every error a user can cause (a bad file, an impossible layout, an unknown name, a schedule that
deadlocks) is a :class:`SimtrainError`; the CLI prints its message as one line and exits with
status 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SimtrainError(Exception):
    """A user error: the message names the input, the value and what would be valid."""


class SpecError(SimtrainError):
    """A specification (model, GPU, parallel layout, topology, experiment) is invalid."""


class ScheduleError(SimtrainError):
    """A pipeline schedule is malformed or cannot run."""


class SimulationError(SimtrainError):
    """A simulation cannot complete (deadlock, event budget exhausted)."""


def unknown_name(what: str, name: str, known: Iterable[str], also: str = "") -> SpecError:
    """A :class:`SpecError` for an unknown preset name, with a close-match suggestion and, when
    given, ``also``: what else the input takes besides a preset name."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return SpecError(f"unknown {what} {name!r}{hint} (known: {', '.join(known)}){'; ' + also if also else ''}")
