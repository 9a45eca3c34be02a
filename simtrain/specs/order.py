"""Rank order: how the ranks of a parallel layout are numbered along its dimensions.

An order string lists the dimensions innermost first, as Megatron-LM's ``RankGenerator`` does
(``megatron/core/parallel_state.py``, default order ``tp-cp-ep-dp-pp``): the innermost dimension
has stride 1, so its groups hold consecutive ranks and land in one node.
"""

from __future__ import annotations

from collections.abc import Mapping

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


def dimension_strides(order: str, sizes: Mapping[str, int]) -> dict[str, int]:
    """Each dimension's stride in rank order ``order``: the rank distance between neighbours
    along it, the product of the sizes of the dimensions inside it (Megatron-LM's
    ``RankGenerator``; :class:`~simtrain.topology.mesh.Mesh` numbers ranks so).

    >>> dimension_strides("tp-cp-ep-dp-pp", {"tp": 8, "cp": 2, "ep": 1, "dp": 4, "pp": 2})
    {'tp': 1, 'cp': 8, 'ep': 16, 'dp': 16, 'pp': 64}
    """
    out, stride = {}, 1
    for dim in parse_order(order):
        out[dim] = stride
        stride *= sizes[dim]
    return out


def dimension_spans(order: str, sizes: Mapping[str, int]) -> dict[str, int]:
    """The ranks a group along each dimension spans in rank order ``order``: its stride times its
    size (:func:`dimension_strides`). The closed form reads a group's bandwidth from its span
    (:mod:`simtrain.analytic.bandwidth`).

    >>> dimension_spans("tp-cp-ep-dp-pp", {"tp": 8, "cp": 2, "ep": 1, "dp": 4, "pp": 2})
    {'tp': 8, 'cp': 16, 'ep': 16, 'dp': 64, 'pp': 128}
    """
    return {dim: stride * sizes[dim] for dim, stride in dimension_strides(order, sizes).items()}
