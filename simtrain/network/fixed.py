"""A fixed-latency network: every point-to-point transfer takes the same time, collectives none.

``latency_s=0`` makes communication free, which isolates compute and schedule effects
(``--network none``); a positive latency is the stage-to-stage cost of a schedule study
(``simtrain schedule``).
"""

from __future__ import annotations

from simtrain.network.interface import PricedNetwork


class FixedLatency(PricedNetwork):
    """Every p2p transfer takes ``latency_s`` whatever its size and route; collectives take 0."""

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s

    def collective_time(self, op: str, gpus: tuple[int, ...], nbytes: float) -> float:
        return 0.0

    def p2p_time(self, src: int, dst: int, nbytes: float) -> float:
        return self.latency_s
