"""Energy and cost of a step, and of a whole training run: pure functions of the time each rank
spends computing, communicating and waiting, and of the cluster's power and price.

Model (each number's source is in :mod:`simtrain.specs.gpu` and :mod:`simtrain.specs.power`):

* A GPU draws ``tdp_w`` while its compute stream runs (compute and recompute spans), the
  convention of Llama 2's carbon accounting (Touvron et al. 2023, section 2.2.1: "peak power
  capacity per GPU device"); ``idle_w`` while nothing runs on it; and, while only communication
  runs, ``idle_w + (tdp_w - idle_w) x comm_sms / sm_count``: a communication kernel holds
  ``comm_sms`` of the SMs (:mod:`simtrain.specs.gpu`, after DeepSeek-V3, section 3.2.2), and the
  power above idle scales, to first order, with the SMs that switch.
* The rest of the cluster draws a constant power for the whole step: each node's host, each NIC,
  each fabric switch, and the GPUs of the job's nodes that the job does not use, at idle.
* The facility's energy is the IT energy times the PUE.

So, over the simulated ranks ``r``, each standing for ``w_r`` ranks (a folded run),

    E_step = PUE x (sum_r w_r (busy_r tdp_w + comm_r P_comm + idle_r idle_w) + P_rest x step)

and ``tokens_per_kwh`` = tokens per step / E_step in kWh. A step costs ``GPUs x step / 3600 x
price per GPU-hour`` plus, where a price of electricity is given, ``E_step`` in kWh times it.
A training run of ``train_tokens`` tokens takes ``ceil(train_tokens / tokens per step)`` steps of
the simulated (steady) step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simtrain.specs.gpu import GpuSpec
from simtrain.topology.cluster import Cluster

#: Joules in a kilowatt-hour.
J_PER_KWH = 3.6e6
#: Seconds in an hour.
S_PER_HOUR = 3600.0
#: Graph node kinds that are fabric switches (simtrain.topology.cluster).
SWITCH_KINDS = ("leaf", "spine", "core")
#: The report keys :func:`energy_metrics` gives (documented on :class:`simtrain.results.metrics.Report`).
ENERGY_KEYS = ("energy_per_step_j", "gpu_energy_per_step_j", "mean_power_w", "tokens_per_kwh",
               "cost_per_step_usd", "tokens_per_usd", "train_steps", "time_to_train_s",
               "energy_to_train_kwh", "cost_to_train_usd")


@dataclass(frozen=True)
class PowerDraw:
    """The power and price of one run's cluster, resolved (module docstring)."""

    gpu_busy_w: float | None  # a computing GPU; None: the GPU's power is unknown
    gpu_comm_w: float | None  # a GPU that only communicates
    gpu_idle_w: float | None  # a GPU with nothing running
    rest_w: float  # hosts, NICs, switches and the unused GPUs of the job's nodes
    pue: float = 1.0
    num_gpus: int = 1  # GPUs the job is charged for
    gpu_hour_usd: float | None = None
    electricity_usd_per_kwh: float | None = None
    train_tokens: int | None = None


@dataclass(frozen=True)
class RankSeconds:
    """One simulated rank's step: seconds computing, only communicating, idle; the ranks it stands for."""

    busy_s: float
    comm_s: float
    idle_s: float
    weight: int = 1


def power_draw(cluster: Cluster, gpu: GpuSpec, num_gpus: int, *, price_per_gpu_hour_usd: float | None = None,
               train_tokens: int | None = None) -> PowerDraw:
    """The :class:`PowerDraw` of ``num_gpus`` GPUs of ``cluster`` (its ``[power]`` and ``[cost]``
    tables; ``price_per_gpu_hour_usd`` over the table's price; ``train_tokens`` of a training run)."""
    from simtrain.specs.power import CostSpec, PowerSpec

    spec = cluster.spec
    power = spec.power if spec is not None else PowerSpec()
    cost = spec.cost if spec is not None else CostSpec()
    kinds = [k for _, k in cluster.graph.nodes(data="kind")]
    nics = sum(k == "nic" for k in kinds)
    switches = sum(k in SWITCH_KINDS for k in kinds)
    idle = gpu.idle_power_w
    rest = (cluster.num_nodes * power.host_power_w(cluster.gpus_per_node) + nics * power.nic_w
            + switches * power.switch_w + (cluster.num_gpus - num_gpus) * (idle or 0.0))
    comm = None
    if gpu.tdp_w is not None and idle is not None:
        comm = idle + (gpu.tdp_w - idle) * gpu.comm_sms / gpu.sm_count
    price = price_per_gpu_hour_usd
    return PowerDraw(gpu_busy_w=gpu.tdp_w, gpu_comm_w=comm, gpu_idle_w=idle, rest_w=rest, pue=power.pue,
                     num_gpus=num_gpus,
                     gpu_hour_usd=price if price is not None else cost.gpu_hour_usd(cluster.gpus_per_node),
                     electricity_usd_per_kwh=cost.electricity_usd_per_kwh, train_tokens=train_tokens)


def gpu_energy_j(ranks: list[RankSeconds], draw: PowerDraw) -> float | None:
    """Energy of the job's GPUs in one step (module docstring); None where their power is unknown.

    >>> round(gpu_energy_j([RankSeconds(0.6, 0.1, 0.3, weight=2)], PowerDraw(700.0, 240.0, 140.0, 0.0)), 1)
    972.0
    """
    if draw.gpu_busy_w is None or draw.gpu_comm_w is None or draw.gpu_idle_w is None:
        return None
    return sum(r.weight * (r.busy_s * draw.gpu_busy_w + r.comm_s * draw.gpu_comm_w + r.idle_s * draw.gpu_idle_w)
               for r in ranks)


def energy_metrics(ranks: list[RankSeconds], *, step_s: float, tokens: int, draw: PowerDraw) -> dict[str, Any]:
    """The report's energy, cost and time-to-train keys (:data:`ENERGY_KEYS`) of a step of
    ``step_s`` seconds and ``tokens`` tokens; a key that needs a number the run lacks (the GPU's
    power, a price, ``train_tokens``) is None."""
    out: dict[str, Any] = dict.fromkeys(ENERGY_KEYS)
    gpu_j = gpu_energy_j(ranks, draw)
    kwh = None
    if gpu_j is not None:
        energy_j = draw.pue * (gpu_j + draw.rest_w * step_s)
        kwh = energy_j / J_PER_KWH
        out.update(energy_per_step_j=energy_j, gpu_energy_per_step_j=gpu_j,
                   mean_power_w=energy_j / step_s if step_s > 0 else 0.0,
                   tokens_per_kwh=tokens / kwh if kwh > 0 else None)
    cost = None
    if draw.gpu_hour_usd is not None:
        cost = draw.num_gpus * step_s / S_PER_HOUR * draw.gpu_hour_usd
        if draw.electricity_usd_per_kwh is not None and kwh is not None:
            cost += kwh * draw.electricity_usd_per_kwh
        out.update(cost_per_step_usd=cost, tokens_per_usd=tokens / cost if cost > 0 else None)
    if draw.train_tokens is not None and tokens > 0:
        steps = math.ceil(draw.train_tokens / tokens)
        out.update(train_steps=steps, time_to_train_s=steps * step_s,
                   energy_to_train_kwh=steps * kwh if kwh is not None else None,
                   cost_to_train_usd=steps * cost if cost is not None else None)
    return out
