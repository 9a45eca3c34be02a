"""What the project knows about one pipeline schedule: a :class:`ScheduleRecord`.

Each family module (:mod:`~simtrain.schedules.basic`, :mod:`~simtrain.schedules.interleaved`,
:mod:`~simtrain.schedules.zero_bubble`, :mod:`~simtrain.schedules.dualpipe`,
:mod:`~simtrain.schedules.auto`) defines its generators and one record per schedule;
:mod:`~simtrain.schedules.registry` lists the records.

The closed form of a schedule is its published makespan of one step with uniform stages and free
communication, written as the work plus the bubble: ``m (F + I + W) + bubble(p, m, costs, v)``,
with ``F``, ``I``, ``W`` the costs of one plain stage (1/p of the layers; ``B = I + W``). The
bubble of the analytic model (``t_mb`` per micro-batch and stage, split F : I : W = 1 : 1 : 1)
is the same bubble term at ``F = I = W = t_mb / 3``, so it equals that makespan minus ``m t_mb``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simtrain.schedules.ir import Schedule


@dataclass(frozen=True)
class Costs:
    """Uniform per-stage costs of one micro-batch: forward ``F``, input gradient ``I``, weight
    gradient ``W``, and their sum ``total`` as the caller knows it (``t_mb`` exactly for
    :meth:`split`, ``F + (I + W)`` for :meth:`of`)."""

    F: float
    I: float  # noqa: E741
    W: float
    total: float

    @classmethod
    def of(cls, F: float, I: float, W: float) -> "Costs":  # noqa: E741,N803
        return cls(F, I, W, F + (I + W))

    @classmethod
    def split(cls, t_mb: float) -> "Costs":
        """The analytic model's split of ``t_mb``: F = I = W = t_mb / 3."""
        third = t_mb / 3
        return cls(third, third, third, t_mb)

    @property
    def B(self) -> float:  # noqa: N802
        """A full backward: I + W."""
        return self.I + self.W


@dataclass(frozen=True)
class ClosedForm:
    """A schedule's published closed forms and where they apply.

    ``bubble(p, m, costs, v)`` is the idle term of the makespan (see the module docstring);
    ``in_flight(p, stage, m, v)`` the micro-batches whose activations ``stage`` holds at its
    peak, in activations of one plain stage; ``covers(p, m, v)`` says whether the formulas apply
    to ``p`` ranks, ``m`` micro-batches and ``v`` chunks per rank, ``condition`` says the same in
    words; ``equal_costs`` restricts the makespan to ``F = I = W``.
    """

    bubble: Callable[[int, int, Costs, int], float]
    in_flight: Callable[[int, int, int, int], float]
    covers: Callable[[int, int, int], bool]
    condition: str
    equal_costs: bool = False


@dataclass(frozen=True)
class Param:
    """A generator parameter: its name, default and valid values (as shown to a user)."""

    name: str
    default: str
    valid: str
    help: str


@dataclass(frozen=True)
class ScheduleRecord:
    """One pipeline schedule.

    ``generator(pp, m, **params)`` builds it (unknown params are ignored); ``params`` lists the
    ones it takes; ``closed_form`` is None where no formula is published (zb-auto is built for
    given costs); ``static_copies`` is how many copies of each stage's parameters a rank holds;
    ``ranked_as`` names, for a schedule without a closed form, the registered schedule whose
    closed form bounds its makespan from above, used to rank it in a configuration search.
    """

    name: str
    generator: Callable[..., Schedule]
    description: str
    params: tuple[Param, ...] = ()
    closed_form: ClosedForm | None = None
    static_copies: int = 1
    ranked_as: str | None = None

    def takes(self, param: str) -> bool:
        """Whether the generator reads ``param``."""
        return any(p.name == param for p in self.params)

    def covers(self, pp: int, m: int, vpp: int = 1) -> bool:
        """Whether the closed form applies to (pp, m, vpp)."""
        cf = self.closed_form
        return cf is not None and pp >= 1 and m >= 1 and cf.covers(pp, m, vpp)

    def makespan(self, pp: int, m: int, F: float, I: float, W: float,  # noqa: E741,N803
                 vpp: int = 1) -> float | None:
        """The closed-form makespan with uniform stages of costs F, I, W (per plain stage) and
        free communication; None where no formula applies."""
        cf = self.closed_form  # (covers() is False without one)
        if cf is None or not self.covers(pp, m, vpp) or (cf.equal_costs and not F == I == W):
            return None
        c = Costs.of(F, I, W)
        return m * c.total + cf.bubble(pp, m, c, vpp)

    def bubble(self, pp: int, m: int, t_mb: float, vpp: int = 1) -> float | None:
        """The analytic model's bubble: :meth:`makespan` at F = I = W = t_mb / 3 minus the work
        ``m t_mb``; None where no formula applies."""
        cf = self.closed_form  # (covers() is False without one)
        if cf is None or not self.covers(pp, m, vpp):
            return None
        return cf.bubble(pp, m, Costs.split(t_mb), vpp)

    def in_flight(self, pp: int, stage: int, m: int, vpp: int = 1) -> float | None:
        """Micro-batches whose activations ``stage`` holds at its peak; None without a closed form."""
        return None if self.closed_form is None else self.closed_form.in_flight(pp, stage, m, vpp)
