"""Pipeline schedule IR: per-rank ordered actions over pipeline stages.

An action is ``(stage, kind, mb)`` printed as in PyTorch's ``torch.distributed.pipelining``
(``2F0``, ``1I3``, ``1W3``, ``0B5``): F forward, I input-grad backward, W weight-grad backward,
B full backward (I and W together). DualPipe's overlapped forward-backward pair is an
:class:`Action` of kind ``"FB"`` holding both halves (printed ``0F3&5B1``).

Stages are model chunks. A micro-batch walks a *chain* of stages, forward along it and backward
in reverse. Most schedules have one chain ``0..S-1``; DualPipe has two (one per direction), with
the same model chunk placed on two ranks (two parameter copies). ``stage_to_rank`` places each
stage; ``chunk_of_stage`` says which slice of the model's layers a stage holds (its position in
its chain).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from simtrain.errors import ScheduleError

ACTION_KINDS = ("F", "I", "W", "B", "FB")  # forward, input grad, weight grad, full backward, F&B pair
_ACTION_RE = re.compile(r"^\s*(\d+)\s*([FIWB])\s*(\d+)\s*$")


@dataclass(frozen=True, order=True)
class Action:
    stage: int
    kind: str
    mb: int
    # for kind "FB": the backward half (stage, mb); the forward half is (stage, mb) above
    b_stage: int = -1
    b_mb: int = -1

    def __str__(self) -> str:
        if self.kind == "FB":
            return f"{self.stage}F{self.mb}&{self.b_stage}B{self.b_mb}"
        return f"{self.stage}{self.kind}{self.mb}"

    def halves(self) -> tuple["Action", ...]:
        """The plain actions this one performs (two for an overlapped pair)."""
        if self.kind == "FB":
            return (Action(self.stage, "F", self.mb), Action(self.b_stage, "B", self.b_mb))
        return (self,)


def parse_action(text: str) -> Action:
    """Parse ``2F0``, ``1I3``, ``0B5`` or an overlapped pair ``0F3&5B1``."""
    if "&" in text:
        left, right = text.split("&", 1)
        f, b = parse_action(left), parse_action(right)
        if f.kind != "F" or b.kind != "B":
            raise ScheduleError(f"action {text!r}: an overlapped pair is written <stage>F<mb>&<stage>B<mb>")
        return Action(f.stage, "FB", f.mb, b.stage, b.mb)
    m = _ACTION_RE.match(text)
    if not m:
        raise ScheduleError(f"action {text!r}: expected <stage><F|I|W|B><micro-batch>, e.g. 2F0 or 1W3")
    return Action(int(m.group(1)), m.group(2), int(m.group(3)))


@dataclass(frozen=True)
class Schedule:
    """A complete pipeline schedule for ``num_ranks`` ranks and ``num_microbatches`` micro-batches."""

    name: str
    num_ranks: int
    num_microbatches: int
    stage_to_rank: tuple[int, ...]  # rank of each stage
    actions: tuple[tuple[Action, ...], ...]  # per rank, in execution order
    chains: tuple[tuple[int, ...], ...] = ()  # stage chains; () = one chain 0..S-1
    mb_chain: tuple[int, ...] = ()  # chain index per micro-batch; () = all in chain 0
    meta: dict[str, Any] = field(default_factory=dict, compare=False)  # generator parameters, for display

    @property
    def num_stages(self) -> int:
        return len(self.stage_to_rank)

    def chain_list(self) -> tuple[tuple[int, ...], ...]:
        return self.chains or (tuple(range(self.num_stages)),)

    @property
    def chain_length(self) -> int:
        """Stages per chain: the number of model chunks the layers are split into."""
        return len(self.chain_list()[0])

    def chain_of_mb(self, mb: int) -> tuple[int, ...]:
        chains = self.chain_list()
        return chains[self.mb_chain[mb] if self.mb_chain else 0]

    @cached_property
    def _positions(self) -> dict[int, tuple[tuple[int, ...], int]]:
        """Stage -> its chain (the first that holds it) and its position there; computed once
        (the lowering asks for every action)."""
        out: dict[int, tuple[tuple[int, ...], int]] = {}
        for chain in self.chain_list():
            for i, stage in enumerate(chain):
                out.setdefault(stage, (chain, i))
        return out

    def _position(self, stage: int) -> tuple[tuple[int, ...], int]:
        found = self._positions.get(stage)
        if found is None:
            raise ScheduleError(f"stage {stage} is in no chain of schedule {self.name}")
        return found

    def chunk_of_stage(self, stage: int) -> int:
        """Position of ``stage`` in its chain: which slice of the layers it holds."""
        return self._position(stage)[1]

    def stage_neighbours(self, stage: int) -> tuple[int | None, int | None]:
        """(previous, next) stage along the chain, None at the ends."""
        chain, i = self._position(stage)
        return (chain[i - 1] if i > 0 else None,
                chain[i + 1] if i + 1 < len(chain) else None)

    def mbs_of_stage(self, stage: int) -> list[int]:
        """Micro-batches that pass through ``stage``."""
        return [mb for mb in range(self.num_microbatches) if stage in self.chain_of_mb(mb)]

    def stages_of_rank(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.stage_to_rank) if r == rank]

    def text(self) -> list[list[str]]:
        """Per rank, the actions as strings."""
        return [[str(a) for a in row] for row in self.actions]

