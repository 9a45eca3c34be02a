"""Power and price of a cluster beyond its GPUs: the ``[power]`` and ``[cost]`` tables of a topology.

The GPUs' own power is on :class:`simtrain.specs.gpu.GpuSpec` (``tdp_w``, ``idle_w``). Everything
else in the cluster draws a constant power while a job runs, taken from datasheets:

* ``host_w``, per node: CPUs, memory, NVSwitches, fans, storage and the management network. The
  DGX H100 datasheet gives 10.2 kW maximum system power for 8 H100 SXM GPUs of 700 W and 8
  ConnectX-7 compute NICs: 10,200 - 8 x 700 - 8 x 25 = 4,400 W, i.e. :data:`DEFAULT_HOST_W_PER_GPU`
  = 550 W per GPU, the default (``host_w`` = 550 x GPUs per node). It is the system's maximum,
  so an upper bound; a topology file sets its own.
* ``nic_w``, per NIC: :data:`DEFAULT_NIC_W` = 25 W, the typical power of a 400 Gb/s ConnectX-7
  adapter (NVIDIA ConnectX-7 datasheet).
* ``switch_w``, per fabric switch (leaf, spine, core): :data:`DEFAULT_SWITCH_W` = 747 W, the
  typical power of a 64-port NDR Quantum-2 QM9700 with passive cables (QM9700 datasheet).
* ``pue``: power usage effectiveness, the facility's energy over the IT equipment's (The Green
  Grid, White Paper 49). Default 1.0: the report gives the IT energy unless a file says more.

Price (``[cost]``): ``price_per_gpu_hour_usd`` (what a GPU-hour costs, e.g. a cloud list price),
or ``purchase_usd`` (one node, with its share of the fabric) written off over
``depreciation_years`` of 8,766 hours (365.25 days); ``electricity_usd_per_kwh`` adds the price of
the facility energy (leave it out where the GPU-hour price includes power). No preset carries a
price: prices change, and a default would pretend to be a fact.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.errors import SpecError
from simtrain.specs.strict import Table

#: Per GPU, W: (DGX H100 maximum system power 10.2 kW - 8 x 700 W GPUs - 8 x 25 W NICs) / 8.
DEFAULT_HOST_W_PER_GPU = 550.0
#: Per NIC, W: typical power of a ConnectX-7 400 Gb/s adapter (ConnectX-7 datasheet).
DEFAULT_NIC_W = 25.0
#: Per switch, W: typical power of a Quantum-2 QM9700 with passive cables (QM9700 datasheet).
DEFAULT_SWITCH_W = 747.0
#: Hours in a year of 365.25 days.
HOURS_PER_YEAR = 8766.0


@dataclass(frozen=True)
class PowerSpec:
    """The constant power of a cluster's nodes and fabric (module docstring)."""

    host_w: float | None = None  # per node, W; None: DEFAULT_HOST_W_PER_GPU x GPUs per node
    nic_w: float = DEFAULT_NIC_W  # per NIC, W
    switch_w: float = DEFAULT_SWITCH_W  # per fabric switch, W
    pue: float = 1.0  # facility energy / IT energy

    def host_power_w(self, gpus_per_node: int) -> float:
        """One node's power beyond its GPUs and NICs."""
        return self.host_w if self.host_w is not None else DEFAULT_HOST_W_PER_GPU * gpus_per_node


@dataclass(frozen=True)
class CostSpec:
    """What the cluster costs (module docstring); every field None: no price."""

    price_per_gpu_hour_usd: float | None = None
    purchase_usd: float | None = None  # one node, with its share of the fabric
    depreciation_years: float | None = None
    electricity_usd_per_kwh: float | None = None

    def gpu_hour_usd(self, gpus_per_node: int) -> float | None:
        """The price of one GPU-hour: the given price, or the purchase written off; None: no price.

        >>> CostSpec(purchase_usd=350_640.0, depreciation_years=5.0).gpu_hour_usd(8)
        1.0
        """
        if self.price_per_gpu_hour_usd is not None:
            return self.price_per_gpu_hour_usd
        if self.purchase_usd is not None and self.depreciation_years is not None:
            return self.purchase_usd / (gpus_per_node * self.depreciation_years * HOURS_PER_YEAR)
        return None


def power_from_table(t: Table) -> PowerSpec:
    """``[power]``: host_w, nic_w, switch_w (W, >= 0), pue (>= 1)."""
    spec = PowerSpec(host_w=t.get("host_w", float, None, min_value=0.0),
                     nic_w=t.get("nic_w", float, DEFAULT_NIC_W, min_value=0.0),
                     switch_w=t.get("switch_w", float, DEFAULT_SWITCH_W, min_value=0.0),
                     pue=t.get("pue", float, 1.0, min_value=1.0))
    t.done()
    return spec


def cost_from_table(t: Table) -> CostSpec:
    """``[cost]``: price_per_gpu_hour_usd, or purchase_usd with depreciation_years (all > 0);
    electricity_usd_per_kwh (>= 0)."""
    spec = CostSpec(price_per_gpu_hour_usd=t.get("price_per_gpu_hour_usd", float, None, positive=True),
                    purchase_usd=t.get("purchase_usd", float, None, positive=True),
                    depreciation_years=t.get("depreciation_years", float, None, positive=True),
                    electricity_usd_per_kwh=t.get("electricity_usd_per_kwh", float, None, min_value=0.0))
    t.done()
    if spec.price_per_gpu_hour_usd is not None and spec.purchase_usd is not None:
        raise SpecError(f"{t.where}: price_per_gpu_hour_usd = {spec.price_per_gpu_hour_usd!r} and purchase_usd = "
                        f"{spec.purchase_usd!r}: give one of them")
    if (spec.purchase_usd is None) != (spec.depreciation_years is None):
        given, missing = (("purchase_usd", "depreciation_years") if spec.purchase_usd is not None
                          else ("depreciation_years", "purchase_usd"))
        raise SpecError(f"{t.where}: {given} = {t.data[given]!r} needs {missing} as well")
    return spec
