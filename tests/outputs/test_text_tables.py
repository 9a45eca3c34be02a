"""Printed summaries: a run that does not fit says which stage and by how much; counts read right in
the singular; the idle time and the communication tables say how they read against each other."""

from __future__ import annotations

import json

import pytest

from helpers import cli
from simtrain.outputs.text_tables import EXPOSED_NOTE, IDLE_NOTE, table


def test_a_run_that_does_not_fit_says_where_and_by_how_much(tmp_path):
    code, out, err = cli("run", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64, "--tp", 8,
                         "--pp", 4, "--seq", 8192, "--gbs", 64, "--schedule", "gpipe", "--no-plot", "--out",
                         tmp_path)
    assert code == 0, err
    assert out.startswith("DOES NOT FIT: peak memory exceeds the 67.1 GiB usable per GPU on stage 0 by ")
    assert "DOES NOT FIT" in out.split("peak memory per stage", 1)[1].splitlines()[0]  # and in the table's row


@pytest.mark.quick
def test_one_node_and_one_micro_batch_read_in_the_singular(tmp_path):
    code, out, err = cli("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 8, "--pp", 1,
                         "--gbs", 1, "--seq", 2048, "--no-plot", "--out", tmp_path)
    assert code == 0, err
    assert "(h100-ib, 1 node)" in out and "gbs 1 (1 micro-batch per pipeline)" in out


def test_the_tables_say_how_they_read_against_each_other(tmp_path):
    code, out, err = cli("run", "--no-plot", "--out", tmp_path)
    assert code == 0, err
    report = json.loads((tmp_path / "report.json").read_text())
    flat = " ".join(out.split())
    assert " ".join(IDLE_NOTE.split()) in flat and " ".join(EXPOSED_NOTE.split()) in flat
    br, step = report["breakdown_s"], report["step_time_s"]
    idle = f"{(br['bubble'] + br['imbalance']) / step:.1%} = {br['bubble'] / step:.1%} + {br['imbalance'] / step:.1%}"
    assert "idle (bubble + imbalance)" in out and idle in out
    dp_row = next(line.split() for line in out.splitlines() if line.startswith("dp ") and "ms" in line
                  and len(line.split()) == 7)
    assert dp_row[0] == "dp" and float(dp_row[3]) == round(br["dp"] * 1000, 2)  # "in breakdown" column
    assert report["exposed_comm_s"]["dp"] >= br["dp"]  # exposed counts what another kind also covered


@pytest.mark.quick
def test_columns_align_as_asked():
    assert table([["a", "1"], ["bb", "22"]], ["x", "y"]).splitlines() == ["x    y", "--  --", "a    1", "bb  22"]
    assert table([["a", "1"]], ["name", "n"], align="ll").splitlines()[2] == "a     1"
