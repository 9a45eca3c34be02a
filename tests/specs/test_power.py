"""The [power] and [cost] tables: defaults, the price of a GPU-hour, strict checks."""

from __future__ import annotations

import pytest

from simtrain.errors import SpecError
from simtrain.specs.power import (DEFAULT_HOST_W_PER_GPU, CostSpec, PowerSpec, cost_from_table,
                                  power_from_table)
from simtrain.specs.strict import Table

pytestmark = pytest.mark.quick


def test_the_default_host_power_is_the_dgx_h100_share_per_gpu():
    # DGX H100: 10,200 W max - 8 x 700 W GPUs - 8 x 25 W NICs = 4,400 W for 8 GPUs
    assert DEFAULT_HOST_W_PER_GPU == (10_200 - 8 * 700 - 8 * 25) / 8
    assert PowerSpec().host_power_w(8) == 4400.0
    assert PowerSpec().host_power_w(72) == 72 * 550.0
    assert PowerSpec(host_w=123.0).host_power_w(8) == 123.0


def test_a_gpu_hour_is_the_price_or_the_purchase_written_off():
    assert CostSpec().gpu_hour_usd(8) is None
    assert CostSpec(price_per_gpu_hour_usd=2.5).gpu_hour_usd(8) == 2.5
    # 300,000 USD for 8 GPUs over 4 years of 8,766 h
    assert CostSpec(purchase_usd=300_000.0, depreciation_years=4.0).gpu_hour_usd(8) == pytest.approx(
        300_000 / 8 / (4 * 8766))


def test_tables_read_every_key():
    power = power_from_table(Table({"host_w": 0, "nic_w": 20, "switch_w": 500, "pue": 1.3}, "t [power]"))
    assert power == PowerSpec(host_w=0.0, nic_w=20.0, switch_w=500.0, pue=1.3)
    cost = cost_from_table(Table({"purchase_usd": 1e5, "depreciation_years": 3, "electricity_usd_per_kwh": 0},
                                 "t [cost]"))
    assert cost == CostSpec(purchase_usd=1e5, depreciation_years=3.0, electricity_usd_per_kwh=0.0)


@pytest.mark.parametrize("data, words", [
    ({"price_per_gpu_hour_usd": 2, "purchase_usd": 1e5, "depreciation_years": 3}, "give one of them"),
    ({"depreciation_years": 3}, "depreciation_years = 3 needs purchase_usd as well"),
    ({"depreciation_years": 0, "purchase_usd": 1}, "depreciation_years = 0.0: must be > 0"),
    ({"electricity_usd_per_kwh": -0.1}, "electricity_usd_per_kwh = -0.1: must be >= 0.0"),
    ({"price": 2}, "unknown key 'price'"),
])
def test_bad_cost_tables_name_the_key_and_value(data, words):
    with pytest.raises(SpecError, match=None) as err:
        cost_from_table(Table(data, "c.toml [cost]"))
    assert words in str(err.value) and str(err.value).startswith("c.toml [cost]")


def test_docstring_examples():
    import doctest

    import simtrain.specs.power

    assert doctest.testmod(simtrain.specs.power).failed == 0
