"""Printed summaries: a run that does not fit says which stage and by how much."""

from __future__ import annotations

from helpers import cli


def test_a_run_that_does_not_fit_says_where_and_by_how_much(tmp_path):
    code, out, err = cli("run", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64, "--tp", 8,
                         "--pp", 4, "--seq", 8192, "--gbs", 64, "--schedule", "gpipe", "--no-plot", "--out",
                         tmp_path)
    assert code == 0, err
    assert "DOES NOT FIT" in out and "stage 0 exceeds the capacity by" in out
