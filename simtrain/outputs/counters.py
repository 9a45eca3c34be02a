"""Counter tracks of a trace (memory in use, link utilisation): as event dicts
(:func:`counter_events`) or as columns (:class:`CounterTrack`), which :func:`simtrain.outputs.trace.write_trace`
formats without a dict per sample; both give the same bytes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

from simtrain.outputs.trace_text import _INF, _dumps, _each, _each_run, _f, _text
from simtrain.units import US_PER_S

_US = US_PER_S


@dataclass(frozen=True)
class CounterTrack:
    """A counter track given as columns: the same events as :func:`counter_events` of
    ``zip(times_s, values)``, formatted by :func:`write_trace` without a dict per sample."""

    name: str
    pid: int
    times_s: np.ndarray
    values: np.ndarray
    key: str = "value"

    def events(self) -> list[dict]:
        """The track's counter events as dicts."""
        return counter_events(self.name, self.pid, list(zip(self.times_s.tolist(), self.values.tolist())),
                              key=self.key)


def counter_events(name: str, pid: int, samples: Sequence[tuple[float, float]], *,
                   key: str = "value") -> list[dict]:
    """Counter ("C") events: one per ``(time_s, value)`` sample, a step track named ``name``.

    ``pid`` places the track on a process (see :func:`rank_pid`); Perfetto names the track
    ``"<name> <key>"``.
    """
    return [{"ph": "C", "name": name, "pid": int(pid), "ts": float(t) * _US,
             "args": {key: float(v)}} for t, v in samples]


#: What ``counters`` of :func:`trace_events` and :func:`write_trace` may hold: event dicts and
#: whole counter tracks.
Counter = Union[dict, CounterTrack]


def _expanded(counters: Sequence[Counter]) -> list[dict]:
    """``counters`` with every :class:`CounterTrack` replaced by its events."""
    out: list[dict] = []
    for c in counters:
        if isinstance(c, CounterTrack):
            out += c.events()
        else:
            out.append(c)
    return out


def _track_text(track: CounterTrack) -> str:
    """The events of ``track`` as :func:`_counter_texts` formats them, joined by commas: the text
    around each sample once, each distinct value and each run of equal times formatted once."""
    times = np.asarray(track.times_s, dtype=np.float64) * _US
    values = np.asarray(track.values, dtype=np.float64)
    n = len(times)
    if not n:
        return ""
    head = '{"args":{' + _text(track.key) + ":"
    mid = '},"name":' + _text(track.name) + f',"ph":"C","pid":{int(track.pid)},"ts":'
    chunks: list[str | None] = [None] * (5 * n)
    chunks[0::5] = [head] * n
    chunks[1::5] = _each(values, _f)
    chunks[2::5] = [mid] * n
    chunks[3::5] = _each_run(times)
    chunks[4::5] = ["},"] * n
    chunks[-1] = "}"
    return "".join(chunks)


def _counter_texts(counters: Sequence[Counter]) -> list[str]:
    """Counter events as :func:`counter_events` builds them (a float sample of one str key, an int
    pid, a float time, all finite), formatted directly; the text around the sample and the time is
    formatted once per (key, name, pid). A :class:`CounterTrack` of finite samples is formatted
    from its columns (:func:`_track_text`). Any other event goes through the JSON encoder."""
    around: dict[tuple[str, str, int], tuple[str, str]] = {}
    out = []
    for e in counters:
        if isinstance(e, CounterTrack):
            if np.all(np.isfinite(e.times_s)) and np.all(np.isfinite(e.values)):
                text = _track_text(e)
                if text:
                    out.append(text)
            else:  # NaN or infinity: the encoder's spelling of them
                out += [_dumps(x) for x in e.events()]
            continue
        if type(e) is dict and len(e) == 5 and e.get("ph") == "C":
            args, name, pid, ts = e.get("args"), e.get("name"), e.get("pid"), e.get("ts")
            if type(args) is dict and len(args) == 1 and type(name) is str and type(pid) is int \
                    and type(ts) is float and -_INF < ts < _INF:
                (key, value), = args.items()
                if type(key) is str and type(value) is float and -_INF < value < _INF:
                    text = around.get((key, name, pid))
                    if text is None:
                        text = around[key, name, pid] = (
                            '{"args":{' + _text(key) + ":",
                            '},"name":' + _text(name) + f',"ph":"C","pid":{pid},"ts":')
                    out.append(text[0] + _f(value) + text[1] + _f(ts) + "}")
                    continue
        out.append(_dumps(e))
    return out

