"""Compute jitter: seeded noise on every kernel time, so that steps differ and scale costs.

Model. Each compute op of each GPU runs ``f`` times its modelled time, ``f`` lognormal with mean 1
and coefficient of variation ``cv`` (``sigma^2 = ln(1 + cv^2)``; positive, so no op runs in
negative time), independent across ops, GPUs and steps. Optionally a *slow step*: with
probability ``slow_step_prob`` per step one GPU, drawn at random, runs that whole step at
``slow_step_factor`` of its speed (a throttling episode, a host hiccup). Synchronous training
waits for the slowest GPU at every collective, so the expected step time grows with the number of
GPUs even at constant work per GPU: the expected maximum of ``n`` standard normals grows like
``sqrt(2 ln n)`` (order statistics; e.g. David and Nagaraja, *Order Statistics*, 3rd ed., 2003,
section 10.5).

Folded representatives stand for many GPUs. A representative standing for ``w`` GPUs splits them
into ``m`` that meet it every layer (its TP, CP and EP groups: ``m = min(w, tp cp ep)``) and
``n = w / m`` replicas of that set that meet only at the data-parallel reductions:

* across the ``m``, which meet at the TP collective closing each block, each block of each pass
  takes as long as the slowest of ``m`` independent noisy copies of its ops (drawn exactly);
* across the ``n`` replicas, whose noise accumulates independently until their compute next waits
  for a data-parallel collective (a parameter gather, the gradient norm), the representative runs
  late by the expected maximum of ``n`` such accumulated sums: after its ``j``-th op,
  ``E[max of n standard normals] x sqrt(V_j)`` with ``V_j`` the variance accumulated since the
  last such wait (a normal approximation of the sum: the mean of the slowest replica, without
  its spread).

``--no-fold`` draws every GPU's noise separately and needs neither approximation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simtrain.specs.perturbation import parse_share
from simtrain.workload.program import KIND, STREAM, Program

@dataclass(frozen=True)
class Jitter:
    """Noise on compute times (see the module docstring)."""

    cv: float = 0.0  # coefficient of variation of one op's time
    seed: int = 0
    slow_step_prob: float = 0.0  # probability per step that one GPU runs the step slowly
    slow_step_factor: float = 0.5  # that GPU's speed during its slow step

    @property
    def any(self) -> bool:
        return self.cv > 0 or self.slow_step_prob > 0


def expected_max_normal(n: int) -> float:
    """E[max of ``n`` independent standard normals] (0 for n = 1), by quadrature of
    ``x n phi(x) Phi(x)^(n-1)`` on [-10, 10].

    >>> round(expected_max_normal(2), 4), round(expected_max_normal(1000), 3)
    (0.5642, 3.241)
    """
    if n <= 1:
        return 0.0
    x = np.linspace(-10.0, 10.0, 8001)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in x]))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    density = n * pdf * cdf ** (n - 1)
    return float(np.sum(x * density) * (x[1] - x[0]))


def _segments(program: Program, ids: list[int]) -> npt.NDArray[np.int64]:
    """Segment index of each op of ``ids``: consecutive ops of one block of one pass (same
    micro-batch, layer, kind and block: ``attn`` or ``mlp``) share one, since the block's TP
    collective is where its group meets; the other ops are segments of their own."""
    seg, last, keys = [], None, []
    t = program.ops
    names, name_code = t.names.values, t.name_code
    for i in ids:
        layer = t.layer[i]
        key = (t.mb[i], layer, t.kind[i], names[name_code[i]].split(".", 1)[0]) if layer >= 0 else None
        if key is None or key != last:
            keys.append(key)
        seg.append(len(keys) - 1)
        last = key
    return np.array(seg, dtype=np.int64)


def _slowest_members(rng: np.random.Generator, base: npt.NDArray[np.float64], seg: npt.NDArray[np.int64], m: int,
                     sigma: float) -> npt.NDArray[np.float64]:
    """Op times of the slowest of ``m`` GPUs that meet after every segment: per segment, the
    largest of the ``m`` members' noisy sums, shared among its ops in proportion to ``base``."""
    factors = np.exp(sigma * rng.standard_normal((m, len(base))) - 0.5 * sigma * sigma)
    times: npt.NDArray[np.float64]
    if m == 1:
        times = base * factors[0]
        return times
    sums = np.zeros((m, int(seg[-1]) + 1))
    for member in range(m):
        np.add.at(sums[member], seg, base * factors[member])
    slowest = sums.max(axis=0)
    planned = np.zeros(slowest.shape)
    np.add.at(planned, seg, base)
    scale = np.divide(slowest, planned, out=np.ones_like(slowest), where=planned > 0)
    times = base * scale[seg]
    return times


def _drift(program: Program, ids: list[int], sd: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Per op, the growth of ``sqrt(V)``, ``V`` the variance accumulated since the last op that
    waited for a data-parallel collective (where the replicas met: a parameter gather before a
    forward, the gradient norm before the optimizer), from the ops' standard deviations ``sd``."""
    dp = STREAM["dp"]
    stream, deps_of = program.ops.stream, program.ops.deps_of
    out = np.zeros(len(ids))
    var = 0.0
    for j, i in enumerate(ids):
        if any(stream[d] == dp for d in deps_of(i)):
            var = 0.0
        before = math.sqrt(var)
        var += float(sd[j]) ** 2
        out[j] = math.sqrt(var) - before
    return out


def _steps_of(program: Program, rank: int) -> list[list[int]]:
    """``rank``'s compute op ids, split by step (each step ends with its optimizer op)."""
    steps: list[list[int]] = [[]]
    opt, kinds = KIND["opt"], program.ops.kind
    for i in program.order.get((rank, STREAM["compute"]), []):
        steps[-1].append(i)
        if kinds[i] == opt:
            steps.append([])
    return [s for s in steps if s]


def apply_jitter(program: Program, jitter: Jitter, layer_size: int) -> dict[str, int]:
    """Scale every compute op's time in ``program`` by its draw (in place; the program is the
    lowering's fresh output). ``layer_size`` is the number of GPUs that meet every layer
    (``tp cp ep``). Returns the slow steps drawn: step -> simulated rank."""
    if not jitter.any:
        return {}
    rng = np.random.default_rng((jitter.seed, 7))
    sigma = math.sqrt(math.log1p(jitter.cv ** 2))
    ranks = program.ranks
    weights = np.array([program.rank_weight[r] for r in ranks], dtype=float)
    steps = {r: _steps_of(program, r) for r in ranks}
    count = max((len(s) for s in steps.values()), default=0)
    slow = {}
    for k in range(count):
        if jitter.slow_step_prob > 0 and rng.random() < jitter.slow_step_prob:
            slow[k] = ranks[int(rng.choice(len(ranks), p=weights / weights.sum()))]
    duration = program.ops.duration_s
    shifts: dict[int, float] = {}  # replicas -> expected maximum (one quadrature per distinct count)
    for r in ranks:
        w = program.rank_weight[r]
        m = max(1, min(w, layer_size))
        n = max(1, w // m)
        shift = shifts.get(n)
        if shift is None:
            shift = shifts[n] = expected_max_normal(n)
        for k, ids in enumerate(steps[r]):
            base = np.array([duration[i] for i in ids])
            scaled = _slowest_members(rng, base, _segments(program, ids), m, sigma)
            if shift > 0 and sigma > 0:
                scaled += shift * _drift(program, ids, jitter.cv * base)
            if slow.get(k) == r:
                scaled /= jitter.slow_step_factor
            for i, t in zip(ids, scaled.tolist()):
                duration[i] = t
    return {str(k): r for k, r in slow.items()}


def jitter_of(cv: float, seed: int, slow_steps: str | None) -> Jitter:
    """The :class:`Jitter` of the ``--jitter``, ``--seed`` and ``--slow-steps PROB[:FACTOR]``
    settings (one-line errors for a malformed ``slow_steps``)."""
    if not slow_steps:
        return Jitter(cv=cv, seed=seed)
    prob, factor = parse_share("--slow-steps", slow_steps, "probability", 0.5)
    return Jitter(cv=cv, seed=seed, slow_step_prob=prob, slow_step_factor=factor)
