"""The collective validation table: every published nccl-tests result of tests/validation/nccl_tests.csv
is reproduced within 10%, as ``simtrain collective`` prices it."""

from __future__ import annotations

from pathlib import Path

import pytest

from simtrain.api.collective import collective
from simtrain.errors import SpecError
from simtrain.network.nccl_tests import cluster_of, load_measurements, main, markdown, reproduce
from simtrain.units import GB

pytestmark = pytest.mark.quick

TABLE = Path(__file__).resolve().parents[1] / "validation" / "nccl_tests.csv"
MEASUREMENTS = load_measurements(TABLE)


def test_the_table_covers_generations_and_scales():
    assert len(MEASUREMENTS) >= 12
    assert {"A100", "H100", "H200"} <= {m.gpu for m in MEASUREMENTS}
    assert {m.nodes for m in MEASUREMENTS} >= {1, 2, 3, 4}
    assert all(m.source.startswith("NVIDIA/nccl") for m in MEASUREMENTS)


@pytest.mark.parametrize("m", MEASUREMENTS, ids=lambda m: f"{m.gpu}-{m.nodes}x{m.gpus // m.nodes}-{m.op}-{m.algorithm}")
def test_each_measurement_within_10_percent(m):
    busbw, _ = reproduce(m)
    assert busbw == pytest.approx(m.busbw_GBps * GB, rel=0.10)


def test_reproduction_is_what_the_collective_command_reports():
    m = next(m for m in MEASUREMENTS if m.nodes == 2 and m.algorithm == "default" and m.gpu == "H100")
    rep = collective(m.op, size_bytes=m.size_bytes, gpus=m.gpus, topology=cluster_of(m))
    busbw, algo = reproduce(m)
    assert rep["busbw_Bps"] == busbw and algo == f"{rep['algorithm']}/{rep['protocol']}"
    four_nics = next(m for m in MEASUREMENTS if m.nics_per_node == 4)
    assert cluster_of(four_nics).fabric["nics_per_node"] == 4


def test_a_table_without_a_column_is_an_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("gpu,nodes\nH100,1\n")
    with pytest.raises(SpecError, match="missing columns nvlink, topology"):
        load_measurements(bad)


def test_markdown_table(capsys):
    text = markdown(MEASUREMENTS[:2])
    assert text.count("\n") == 3 and "| A100 |" in text and "%" in text
    assert main([str(TABLE)]) == 0
    assert capsys.readouterr().out.count("\n") == len(MEASUREMENTS) + 2
    assert MEASUREMENTS[0].size_bytes == 4 * 2**30
