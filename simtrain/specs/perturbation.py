"""Perturbations: what makes a cluster differ from its uniform description.

A :class:`Perturbations` holds what the ``--straggler``, ``--throttle``, ``--slow-node``,
``--node-gpu``, ``--degrade-link`` and ``--fail-link`` settings give:

* a *straggler* is one GPU whose kernels run at a fraction of their speed (a thermally or power
  throttled GPU: its kernels take ``1 / factor`` as long);
* *throttle* slows a seeded random fraction of the GPUs the same way;
* a *slow node* slows every GPU of one node;
* *node GPUs* put another GPU preset on a range of nodes (mixed generations): their kernels are
  timed on that GPU's peak and measured efficiencies;
* a *degraded link* keeps a fraction of its bandwidth (both directions), a *failed link* is gone
  (routes avoid it; a group it disconnects is an error).

Links are named by their two ends as the cluster graph names them (``leaf0-spine3``,
``node2/nic1-leaf0``; :mod:`simtrain.topology.cluster`). Everything here is plain data: the
lowering reads :meth:`Perturbations.compute_of` (which GPUs compute differently), the topology
applies the link changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np

from simtrain.errors import SpecError
from simtrain.specs.strict import clip

#: The speed factor of a straggler, a throttled GPU or a slow node when none is given: the 0.8x
#: of a GPU held at a lower clock (a user's example, not a measurement; give FACTOR to change it).
DEFAULT_FACTOR = 0.8
#: Each setting that perturbs a cluster (in the order the report lists them) and the fields of
#: :class:`Perturbations` it gives.
SETTING_FIELDS = {"straggler": ("stragglers",), "throttle": ("throttle_fraction", "throttle_factor"),
                  "slow_node": ("slow_nodes",), "node_gpu": ("node_gpus",), "degrade_link": ("degraded_links",),
                  "fail_link": ("failed_links",)}


@dataclass(frozen=True)
class Perturbations:
    """Departures from a uniform cluster (see the module docstring). Factors are in (0, 1]."""

    stragglers: tuple[tuple[int, float], ...] = ()  # (GPU, speed factor)
    throttle_fraction: float = 0.0  # fraction of the GPUs throttled, drawn with ``seed``
    throttle_factor: float = DEFAULT_FACTOR
    slow_nodes: tuple[tuple[int, float], ...] = ()  # (node, speed factor)
    node_gpus: tuple[tuple[int, int, str], ...] = ()  # (first node, last node, GPU preset)
    degraded_links: tuple[tuple[str, str, float], ...] = ()  # (end, end, bandwidth factor)
    failed_links: tuple[tuple[str, str], ...] = ()  # (end, end)
    seed: int = 0
    given: tuple[str, ...] = ()  # the settings of SETTING_FIELDS given, even one that perturbs nothing

    @property
    def any(self) -> bool:
        return bool(self.stragglers or self.throttle_fraction or self.slow_nodes or self.node_gpus
                    or self.degraded_links or self.failed_links)

    def only(self, setting: str) -> "Perturbations":
        """What ``setting`` (a key of :data:`SETTING_FIELDS`) alone perturbs, with the same seed."""
        return Perturbations(**{name: getattr(self, name) for name in SETTING_FIELDS[setting]}, seed=self.seed,
                             given=(setting,) if setting in self.given else ())

    def settings_given(self) -> tuple[str, ...]:
        """The settings of :data:`SETTING_FIELDS` that were given or that perturb something."""
        return tuple(k for k in SETTING_FIELDS if k in self.given or self.only(k).any)

    def setting_texts(self) -> dict[str, str | None]:
        """Each setting of :data:`SETTING_FIELDS` as text that parses to these perturbations (None:
        it perturbs nothing)."""
        def joined(items: list[str]) -> str | None:
            return ",".join(items) or None

        return {"straggler": joined([f"{g}:{f!r}" for g, f in self.stragglers]),
                "throttle": f"{self.throttle_fraction!r}:{self.throttle_factor!r}" if self.throttle_fraction else None,
                "slow_node": joined([f"{n}:{f!r}" for n, f in self.slow_nodes]),
                "node_gpu": joined([f"{lo}-{hi}:{name}" for lo, hi, name in self.node_gpus]),
                "degrade_link": joined([f"{a}-{b}:{f!r}" for a, b, f in self.degraded_links]),
                "fail_link": joined([f"{a}-{b}" for a, b in self.failed_links])}

    def speeds(self, gpus: int, gpus_per_node: int) -> dict[int, float]:
        """GPU -> speed factor of every slowed GPU (the product where several slow one GPU)."""
        out: dict[int, float] = {}

        def slow(gpu: int, factor: float) -> None:
            out[gpu] = out.get(gpu, 1.0) * factor

        for gpu, factor in self.stragglers:
            slow(gpu, factor)
        for node, factor in self.slow_nodes:
            for gpu in range(node * gpus_per_node, min(gpus, (node + 1) * gpus_per_node)):
                slow(gpu, factor)
        for gpu in self.throttled(gpus):
            slow(gpu, self.throttle_factor)
        return out

    def throttled(self, gpus: int) -> list[int]:
        """The GPUs ``throttle`` slows: ``round(fraction x gpus)`` of them, drawn without
        replacement with ``seed`` (the same seed and size give the same GPUs)."""
        count = round(self.throttle_fraction * gpus)
        if count == 0:
            return []
        picked = np.random.default_rng(self.seed).choice(gpus, size=count, replace=False)
        return sorted(int(g) for g in picked)

    def gpu_presets(self, gpus: int, gpus_per_node: int) -> dict[int, str]:
        """GPU -> GPU preset name of the GPUs on nodes given another GPU."""
        out: dict[int, str] = {}
        for first, last, name in self.node_gpus:
            for gpu in range(first * gpus_per_node, min(gpus, (last + 1) * gpus_per_node)):
                out[gpu] = name
        return out

    def check(self, gpus: int, nodes: int) -> None:
        """Every GPU and node named exists among the ``gpus`` GPUs on ``nodes`` nodes."""
        for gpu, _ in self.stragglers:
            if not 0 <= gpu < gpus:
                raise SpecError(f"--straggler {gpu}: no such GPU rank (the job has ranks 0..{gpus - 1})")
        for node, _ in self.slow_nodes:
            if not 0 <= node < nodes:
                raise SpecError(f"--slow-node {node}: no such node (the job has nodes 0..{nodes - 1})")
        for first, last, _ in self.node_gpus:
            if not last < nodes:
                raise SpecError(f"--node-gpu {first}-{last}: no such node (the job has nodes 0..{nodes - 1})")
        failed = {frozenset(link) for link in self.failed_links}
        for a, b, factor in self.degraded_links:
            if frozenset((a, b)) in failed:
                raise SpecError(f"--degrade-link {a}-{b}:{factor:g} and --fail-link name the same link; "
                                f"a failed link carries nothing, so give it to one of them")


def parse_factor(flag: str, item: str, text: str) -> float:
    """A speed or bandwidth factor in (0, 1] given as ``text`` in ``item`` of ``flag``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise SpecError(f"{flag} {item!r}: factor {text!r} must be a number in (0, 1]")
    return value


def _index(flag: str, item: str, text: str, what: str) -> int:
    if not text.strip().isdigit() or len(text.strip()) > 12:
        raise SpecError(f"{flag} {item!r}: {what} {text!r} must be a whole number >= 0")
    return int(text)


def _items(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def parse_indexed(flag: str, text: str | None, what: str) -> tuple[tuple[int, float], ...]:
    """``INDEX[:FACTOR],...`` (``--straggler 5:0.8,17``, ``--slow-node 3``)."""
    out = []
    for item in _items(text):
        index, _, factor = item.partition(":")
        out.append((_index(flag, item, index, what), parse_factor(flag, item, factor) if factor else DEFAULT_FACTOR))
    return tuple(out)


def parse_share(flag: str, text: str, what: str, default_factor: float) -> tuple[float, float]:
    """``SHARE[:FACTOR]``: a number in [0, 1] (a fraction, a probability: ``what``) and a speed
    factor (``default_factor`` when not given)."""
    share, _, factor = text.partition(":")
    try:
        value = float(share)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise SpecError(f"{flag} {text!r}: {what} {share!r} must be a number in [0, 1]")
    return value, parse_factor(flag, text, factor) if factor else default_factor


def parse_throttle(text: str | None) -> tuple[float, float]:
    """``FRACTION[:FACTOR]`` (``--throttle 0.01:0.7``): the fraction of GPUs and their speed."""
    return parse_share("--throttle", text, "fraction", DEFAULT_FACTOR) if text else (0.0, DEFAULT_FACTOR)


def parse_node_gpus(text: str | None, known: list[str]) -> tuple[tuple[int, int, str], ...]:
    """``FIRST[-LAST]:GPU,...`` (``--node-gpu 0-3:a100-80g``): nodes FIRST to LAST hold GPU."""
    out = []
    for item in _items(text):
        nodes, sep, name = item.partition(":")
        if not sep or not name:
            raise SpecError(f"--node-gpu {item!r}: expected FIRST[-LAST]:GPU, e.g. 0-3:a100-80g")
        first, _, last = nodes.partition("-")
        lo = _index("--node-gpu", item, first, "node")
        hi = _index("--node-gpu", item, last, "node") if last else lo
        if hi < lo:
            raise SpecError(f"--node-gpu {item!r}: the last node {hi} comes before the first {lo}")
        if name not in known:
            from simtrain.errors import unknown_name

            raise unknown_name("gpu", name, known)
        out.append((lo, hi, name))
    items = sorted(zip(out, _items(text)))
    for ((_, hi, _), before), ((lo, _, _), item) in zip(items, items[1:]):
        if lo <= hi:  # sorted by first node: two ranges overlap where one starts before the other ends
            raise SpecError(f"--node-gpu {before!r} and {item!r} both set node {lo}; give each node once")
    return tuple(out)


def _link(flag: str, item: str, text: str) -> tuple[str, str]:
    a, sep, b = text.partition("-")
    if not sep or not a or not b:
        raise SpecError(f"{flag} {item!r}: expected a link as END-END, e.g. leaf0-spine3 or node2/nic1-leaf0")
    return a, b


def parse_degraded(text: str | None) -> tuple[tuple[str, str, float], ...]:
    """``END-END:FACTOR,...`` (``--degrade-link leaf0-spine3:0.5``)."""
    out = []
    for item in _items(text):
        link, sep, factor = item.rpartition(":")
        if not sep:
            raise SpecError(f"--degrade-link {item!r}: expected END-END:FACTOR, e.g. leaf0-spine3:0.5")
        out.append((*_link("--degrade-link", item, link), parse_factor("--degrade-link", item, factor)))
        _once("--degrade-link", [(frozenset(d[:2]), i) for d, i in zip(out, _items(text))])
    return tuple(out)


def _once(flag: str, keyed: list[tuple[frozenset[str], str]]) -> None:
    """Refuse a link (in either direction) that two items of ``flag`` both set: which value would
    hold is not for simtrain to guess."""
    seen: dict[frozenset[str], str] = {}
    for key, item in keyed:
        if key in seen:
            raise SpecError(f"{flag} {seen[key]!r} and {item!r} set the same link; give it once")
        seen[key] = item


def parse_failed(text: str | None) -> tuple[tuple[str, str], ...]:
    """``END-END,...`` (``--fail-link leaf0-spine3``); a link given twice (in either direction:
    a failed link is removed both ways) is refused naming it."""
    seen: dict[frozenset[str], str] = {}
    out = []
    for item in _items(text):
        a, b = _link("--fail-link", item, item)
        first = seen.get(frozenset((a, b)))
        seen.setdefault(frozenset((a, b)), item)
        if first is not None:
            raise SpecError(f"--fail-link {clip(cast(str, text))}: the link {first} is given twice (as {first} and "
                            f"{item}); a failed link is removed in both directions, so name it once")
        out.append((a, b))
    return tuple(out)
