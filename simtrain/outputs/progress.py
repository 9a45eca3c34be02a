"""A progress bar on a terminal for long runs and searches.

A :class:`Progress` draws one line on its stream (stderr), rewritten in place: what is being
done, how many units (operations, candidates) of how many are finished, the rate and the time
left (remaining units / the mean rate so far). It draws nothing before ``delay_s`` (2 s by
default: short commands stay silent) and nothing at all unless the stream is a terminal
(``isatty()``) and the caller wants it (``--progress auto`` and no ``--json``, see
:func:`wanted`). Work that reports no count shows its phase and the time spent in it.

Producers call :meth:`Progress.phase` when they move to another stage of work and
:meth:`Progress.update` with a count; both are cheap (a clock read and, at most every
``interval_s``, one write), so a simulator loop may call ``update`` on every operation. With ``background=True`` a
daemon thread also redraws every ``interval_s`` (the elapsed time moves while a long phase
reports nothing); it starts with the first phase and stops at :meth:`close`.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, TextIO

from simtrain.settings import PROGRESS_MODES  # noqa: F401  (auto, on, off: see wanted)


def wanted(mode: str, stream: TextIO, json_output: bool) -> bool:
    """Whether a bar should be drawn: never when ``mode`` is off or ``stream`` is not a terminal;
    with auto, not when the command prints JSON."""
    if mode == "off" or not _isatty(stream):
        return False
    return mode == "on" or not json_output


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def format_duration(seconds: float) -> str:
    """``0:07``, ``3:05``, ``1:02:03``: minutes and seconds, with hours when there are any.

    >>> format_duration(7.4), format_duration(185), format_duration(3723)
    ('0:07', '3:05', '1:02:03')
    """
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def progress_line(label: str, done: int, total: int | None, elapsed_s: float, unit: str,
                  width: int = 24) -> str:
    """One line of the bar: label, bar, done/total, rate per second, time left (from the mean
    rate so far); without a total, the count and rate only.

    >>> progress_line("search", 5, 20, 10.0, "candidates", width=8)
    'search [##      ] 5/20 candidates  0.5/s  ETA 0:30'
    >>> progress_line("simulate", 0, None, 3.0, "")
    'simulate  0:03'
    """
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    rate_text = f"{rate:,.1f}/s" if rate < 100 else f"{rate:,.0f}/s"
    if total:
        filled = width * min(done, total) // total
        eta = format_duration((total - done) / rate) if rate > 0 else "?"
        return f"{label} [{'#' * filled:<{width}}] {done:,}/{total:,} {unit}  {rate_text}  ETA {eta}"
    if done:
        return f"{label} {done:,} {unit}  {rate_text}  {format_duration(elapsed_s)}"
    return f"{label}  {format_duration(elapsed_s)}"


class Progress:
    """A bar on ``stream`` (module docstring); ``enabled=False`` makes every call a no-op."""

    def __init__(self, stream: TextIO, *, enabled: bool = True, delay_s: float = 2.0,
                 interval_s: float = 0.2, clock: Callable[[], float] = time.monotonic,
                 background: bool = False) -> None:
        self.stream = stream
        self.enabled = enabled
        self.delay_s = delay_s
        self.interval_s = interval_s
        self.clock = clock
        self.label, self.unit = "", ""
        self.done, self.total = 0, None
        self.started_s: float | None = None
        self.phase_started_s = 0.0
        self.drawn_s: float | None = None
        self.width = 0  # characters of the last line drawn
        self.background = background
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None

    def phase(self, label: str, total: int | None = None, unit: str = "") -> None:
        """Start a stage of work with ``total`` units (None: unknown)."""
        now = self.clock()
        if self.started_s is None:
            self.started_s = now
        self.label, self.unit, self.total, self.done = label, unit, total, 0
        self.phase_started_s = now
        self.tick(force=self.drawn_s is not None)
        if self.enabled and self.background and self._stop is None:
            self._stop = threading.Event()
            threading.Thread(target=self._redraw, args=(self._stop,), daemon=True).start()

    def _redraw(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            self.tick()

    def update(self, done: int, total: int | None = None) -> None:
        """``done`` units of the current phase are finished (``total``: a new total)."""
        self.done = done
        if total is not None:
            self.total = total
        self.tick(force=self.total is not None and done >= self.total and self.drawn_s is not None)

    def tick(self, force: bool = False) -> None:
        """Redraw when the delay has passed and the last draw is ``interval_s`` old (or ``force``)."""
        if not self.enabled or self.started_s is None:
            return
        with self._lock:
            self._draw(force)

    def _draw(self, force: bool) -> None:
        now = self.clock()
        if now - self.started_s < self.delay_s:
            return
        if not force and self.drawn_s is not None and now - self.drawn_s < self.interval_s:
            return
        line = progress_line(self.label, self.done, self.total, now - self.phase_started_s, self.unit)
        self.stream.write("\r" + line + " " * max(0, self.width - len(line)))
        self.stream.flush()
        self.width, self.drawn_s = len(line), now

    def close(self) -> None:
        """Stop redrawing and erase the bar (if one was drawn) so that what follows starts on a
        clean line."""
        if self._stop is not None:
            self._stop.set()
            self._stop = None
        with self._lock:
            if self.enabled and self.drawn_s is not None:
                self.stream.write("\r" + " " * self.width + "\r")
                self.stream.flush()
            self.drawn_s = None
            self.started_s = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
