"""The simulated search: a results file cut mid-write resumes to the same ranking."""

from __future__ import annotations

import pytest

from helpers import cli_json


@pytest.mark.quick
def test_search_resume_gives_the_same_ranking(tmp_path):
    results = tmp_path / "r.jsonl"
    argv = ("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", 8, "--seq", 8192,
            "--gbs", 64, "--top", 4, "--results", results)
    full = cli_json(*argv)
    lines = results.read_text().splitlines()
    assert len(lines) == 4
    results.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])  # killed mid-write
    resumed = cli_json(*argv, "--resume")
    assert [r["label"] for r in resumed["ranking"]] == [r["label"] for r in full["ranking"]]
    assert len(results.read_text().splitlines()) >= 4
