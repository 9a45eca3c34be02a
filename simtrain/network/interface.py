"""The protocol between the engine and a network model, and the up-front pricing of a folded op.

The engine knows nothing of links or algorithms: it drives every communication op through
:class:`NetworkModel`, in this order.

1. ``prepare(program, clock)`` once before the run; ``clock()`` reads the simulated time.
2. For each communication op, once (for a collective: when its last member arrives),
   ``fixed_duration(op)``: the op's duration in seconds when the network prices it up front, or
   None when the network times it as the run unfolds.
3. In the second case the engine runs ``transfer(op)``, an iterator of steps (:class:`Step`):
   a delay (the engine waits that long) or a token (the engine waits until ``advance`` reports
   it finished).
4. The engine's one network process sleeps until ``next_event_s()`` (None: until a transfer
   hands out a token), then calls ``advance(now)``, which returns the tokens finished by then.
5. After the run, ``check()`` asserts the network's own invariants and ``link_report(step_s)``
   gives the report's ``links`` section and the link-utilisation series of the trace.

:class:`PricedNetwork` is the base of the networks that price every op up front from the time
of one collective on one group and of one point-to-point transfer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Iterator, NamedTuple, Protocol, Sequence, cast

import numpy as np

from simtrain.topology.build import paused_gc
from simtrain.workload.program import AnyOp, OpRef, Program

#: "u->v" -> the link's utilisation over time: (times in s, utilisation) arrays, in time order
LinkSeries = dict[str, tuple[np.ndarray, np.ndarray]]


class Step(NamedTuple):
    """One step of a transfer: wait ``delay_s`` seconds, or, with a ``token``, until
    :meth:`NetworkModel.advance` reports that token finished."""

    delay_s: float = 0.0
    token: int | None = None


class NetworkModel(Protocol):
    """What the engine asks of a network (see the module docstring for the order of calls)."""

    def prepare(self, program: Program, clock: Callable[[], float]) -> None:
        """Start a run of ``program``; ``clock()`` is the simulated time in seconds."""

    def fixed_duration(self, op: AnyOp) -> float | None:
        """Seconds ``op`` takes, or None when :meth:`transfer` times it."""

    def transfer(self, op: AnyOp) -> Iterator[Step]:
        """The steps of ``op``'s communication, one after another."""

    def next_event_s(self) -> float | None:
        """When the network's state next changes on its own; None when nothing is in flight."""

    def advance(self, now_s: float) -> list[int]:
        """Run the network to ``now_s``; the tokens finished by then, in completion order."""

    def check(self) -> None:
        """Raise AssertionError when the run broke one of the network's invariants."""

    def link_report(self, step_s: float) -> tuple[dict[str, Any], LinkSeries]:
        """The report's ``links`` section and the utilisation series of its most used links
        (both empty when the network does not model links)."""


def op_parts(op: AnyOp) -> tuple[list[str], float]:
    """The communications ``op`` runs back to back and the bytes of each (:func:`comm_parts`)."""
    return comm_parts(cast(str, op.comm), op.nbytes)  # (asked of communication ops only)


def comm_parts(comm: str, nbytes: float) -> tuple[list[str], float]:
    """The parts of communication ``comm`` of ``nbytes`` and the bytes of each: ``"a+b"`` is two
    collectives of half the bytes each (they share one stream and one launch); ``"p2p"`` and a
    single collective are one part of all the bytes."""
    parts = comm.split("+")
    return parts, nbytes / len(parts)


class PricedNetwork(ABC):
    """A network that prices every op up front: subclasses give :meth:`collective_time` of one
    group and :meth:`p2p_time` of one transfer. A folded op stands for several identical groups
    at once and lasts as long as the slowest of them; an ``"a+b"`` op lasts the sum of its parts.
    Durations are cached per (communication, group set, bytes) for the run."""

    @abstractmethod
    def collective_time(self, op: str, gpus: tuple[int, ...], nbytes: float) -> float:
        """Seconds collective ``op`` of ``nbytes`` (nccl-tests sizes) takes on ``gpus``."""

    @abstractmethod
    def p2p_time(self, src: int, dst: int, nbytes: float) -> float:
        """Seconds a transfer of ``nbytes`` from GPU ``src`` to GPU ``dst`` takes."""

    def p2p_max_time(self, pairs: Sequence[tuple[int, ...]], nbytes: float) -> float:
        """The longest :meth:`p2p_time` of ``nbytes`` over ``pairs`` (source, destination)."""
        return max(self.p2p_time(a, b, nbytes) for a, b in pairs)

    def prepare(self, program: Program, clock: Callable[[], float]) -> None:
        self._program = program
        self._durations: dict[tuple[str | None, int, float], float] = {}  # (comm, group set, bytes)

    def fixed_duration(self, op: AnyOp) -> float:
        """The op's price: the slowest of the groups it stands for. Pricing them first builds
        routes and phases by the hundred thousand (a folded op on 131,072 GPUs), none of them in
        a reference cycle, so Python's cycle collector is paused meanwhile (:func:`paused_gc`):
        its full passes over the cluster graph would otherwise cost more than the pricing.
        A row of an op table is read from its columns (the engine asks once per op)."""
        if type(op) is OpRef:
            table, i = op.table, op.id
            key = (table.comms.values[table.comm_code[i]], table.group_set[i], table.nbytes[i])
        else:
            key = (op.comm, op.group_set, op.nbytes)
        t = self._durations.get(key)
        if t is None:
            with paused_gc():
                groups = self._program.group_sets[op.group_set]
                if op.comm == "p2p":
                    t = self.p2p_max_time(groups, op.nbytes)
                else:
                    parts, size = op_parts(op)
                    t = max(sum(self.collective_time(c, g, size) for c in parts) for g in groups)
            self._durations[key] = t
        return t

    def transfer(self, op: AnyOp) -> Iterator[Step]:
        """One delay: the op's price."""
        yield Step(self.fixed_duration(op))

    def next_event_s(self) -> float | None:
        """Nothing is ever in flight."""
        return None

    def advance(self, now_s: float) -> list[int]:
        """No token is ever handed out."""
        return []

    def check(self) -> None:
        """Prices keep no state to check."""

    def link_report(self, step_s: float) -> tuple[dict[str, Any], LinkSeries]:
        """No links are modelled: both empty."""
        return {}, {}
