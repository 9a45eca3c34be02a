"""Rank order: how the ranks of a parallel layout are numbered along its dimensions.

An order string lists the dimensions innermost first, as Megatron-LM's ``RankGenerator`` does
(``megatron/core/parallel_state.py``, default order ``tp-cp-ep-dp-pp``): the innermost dimension
has stride 1, so its groups hold consecutive ranks and land in one node.
"""

from __future__ import annotations

from simtrain.errors import SpecError

ORDER_DIMS = ("tp", "cp", "ep", "dp", "pp")  # the dimensions an order string permutes
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


def parse_order(order: str) -> tuple[str, ...]:
    """Split and check an order string: a permutation of tp, cp, ep, dp, pp.

    >>> parse_order("tp-dp-cp-ep-pp")
    ('tp', 'dp', 'cp', 'ep', 'pp')
    """
    dims = tuple(order.split("-"))
    if sorted(dims) != sorted(ORDER_DIMS):
        raise SpecError(f"order {order!r}: must be a permutation of {'-'.join(ORDER_DIMS)}, "
                        f"innermost first (e.g. {DEFAULT_ORDER!r})")
    return dims
