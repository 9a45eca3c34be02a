"""``simtrain whatif``: the ranking follows the table's numbers, more NIC bandwidth is never
slower, and bad input is one line with exit status 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from helpers import assert_user_error, cli, cli_json
from simtrain.cli.main import build_parser
from simtrain.api.whatif import overridden
from simtrain.cli.whatif import parse_clusters, parse_prices, parse_sweep
from simtrain.errors import SpecError

TOKENS = 10**12
#: llama3-8b on two 8-GPU nodes with a small batch: each cluster's search takes about a second.
BASE = ("whatif", "--model", "llama3-8b", "--gpus", 16, "--seq", 2048, "--gbs", 32, "--train-tokens", TOKENS,
        "--top", 1, "--jobs", 1)


def test_clusters_rank_by_the_time_and_cost_the_table_gives(tmp_path):
    out = cli_json(*BASE, "--topologies", "h100-ib,a100-hdr", "--prices", "h100-ib=4,a100-hdr=1",
                   "--out", tmp_path)
    rows = out["results"]
    assert [r["topology"] for r in rows] == ["h100-ib", "a100-hdr"]  # sorted by time rank
    by_time = sorted(rows, key=lambda r: r["time_to_train_s"])
    by_cost = sorted(rows, key=lambda r: r["cost_to_train_usd"])
    assert [r["time_rank"] for r in by_time] == [1, 2] and [r["cost_rank"] for r in by_cost] == [1, 2]
    for r, price in zip(rows, (4.0, 1.0)):
        steps = math.ceil(TOKENS / (32 * 2048))
        assert r["train_steps"] == steps
        assert r["time_to_train_s"] == pytest.approx(steps * r["step_time_s"])
        assert r["cost_to_train_usd"] == pytest.approx(steps * 16 * r["step_time_s"] / 3600 * price)
        assert r["gpus"] == 16 and r["energy_to_train_kwh"] > 0
    assert open(out["plots"]["ranking"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_clusters_of_different_sizes_rank_in_one_table_and_one_chart(tmp_path):
    argv = ("whatif", "--model", "llama3-8b", "--clusters", "h100-ib:16,b200-ib:8,a100-hdr:32", "--seq", 2048,
            "--gbs", 32, "--train-tokens", "1T", "--prices", "h100-ib=3,b200-ib=5,a100-hdr=1.5", "--top", 1,
            "--jobs", 1, "--out", tmp_path)
    out = cli_json(*argv)
    rows = out["results"]
    assert {(r["topology"], r["gpus"]) for r in rows} == {("h100-ib", 16), ("b200-ib", 8), ("a100-hdr", 32)}
    assert [r["time_rank"] for r in rows] == [1, 2, 3]  # one ranking over the three
    assert sorted(r["cost_rank"] for r in rows) == [1, 2, 3]
    for r in rows:
        price = {"h100-ib": 3, "b200-ib": 5, "a100-hdr": 1.5}[r["topology"]]
        assert r["cost_to_train_usd"] == pytest.approx(r["train_steps"] * r["gpus"] * r["step_time_s"] / 3600 * price)
        assert r["train_steps"] == math.ceil(TOKENS / (32 * 2048))
    assert list(out["plots"]) == ["ranking"]
    code, text, err = cli(*argv, "--no-plot")
    assert code == 0, err
    table = text.splitlines()[2:7]
    assert [line.split()[2] for line in table[2:]] == [r["topology"] for r in rows]  # the JSON's order
    assert all(f"{r['gpus']} x {r['gpu']}" in text for r in rows)


def test_an_moe_models_best_layout_uses_expert_parallelism(tmp_path):
    out = cli_json("whatif", "--model", "mixtral-8x7b", "--topologies", "h100-ib", "--gpus", 16, "--seq", 2048,
                   "--gbs", 32, "--cp", 1, "--top", 1, "--train-tokens", "1T", "--jobs", 1, "--no-plot",
                   "--out", tmp_path)
    row = out["results"][0]
    assert row["ep"] == row["settings"]["ep"] == 8 and "EP=8" in row["layout"]


def test_more_nic_bandwidth_is_never_slower(tmp_path):
    out = cli_json(*BASE, "--topologies", "h100-ib", "--sweep", "nic_gbps=100,400", "--out", tmp_path)
    rows = sorted(out["results"], key=lambda r: r["sweep_value"])
    assert [r["sweep_value"] for r in rows] == [100, 400]
    assert rows[1]["step_time_s"] <= rows[0]["step_time_s"]
    assert all(r["cost_rank"] is None and r["cost_to_train_usd"] is None for r in rows)  # no price given
    assert (tmp_path / "whatif-topologies" / "h100-ib-nic_gbps-100.0.toml").is_file()
    assert all(Path(r["source"]).is_file() for r in rows)  # the files where the run left them
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".simtrain-run")]  # no staging left
    assert open(out["plots"]["sweep"], "rb").read(4) == b"\x89PNG"


@pytest.mark.quick
@pytest.mark.parametrize("argv, words", [
    (("--topologies", "h100-ibb"), "unknown topology 'h100-ibb'"),
    (("--topologies", "h100-ib", "--sweep", "nic_speed=1,2"), "--sweep nic_speed=1,2: expected KEY=v1,v2,..."),
    (("--topologies", "h100-ib", "--sweep", "nic_gbps=fast"), "--sweep nic_gbps=fast"),
    (("--topologies", "h100-ib", "--sweep", "nic_gbps=0"), "nic_gbps = 0.0: must be > 0"),
    (("--topologies", "h100-ib", "--prices", "b200-ib=3"), "--prices b200-ib=3: b200-ib is not one of"),
    (("--topologies", "h100-ib", "--prices", "h100-ib=0"), "expected NAME=USD"),
    (("--topologies", "h100-ib", "--ep", "2"), "--ep 2: llama3-8b has no experts"),
    (("--topologies", "h100-ib", "--train-tokens", "1.5"), "--train-tokens: invalid count '1.5'"),
])
def test_bad_input_is_one_line(tmp_path, argv, words):
    assert_user_error(*BASE, *argv, "--out", tmp_path, contains=words)


@pytest.mark.quick
@pytest.mark.parametrize("argv, words", [
    (("--clusters", "h100-ib:16,h100-ib:32"), "--clusters h100-ib:16,h100-ib:32: h100-ib is given twice"),
    (("--clusters", "h100-ib:0"), "'h100-ib:0': expected NAME:GPUS with GPUS a whole number >= 1"),
    (("--clusters", "h100-ib:1.5"), "'h100-ib:1.5': expected NAME:GPUS"),
    (("--clusters", "h100-ib"), "'h100-ib': expected NAME:GPUS"),
    (("--clusters", ","), "--clusters ',': expected NAME:GPUS,NAME:GPUS"),
    (("--clusters", "h100-ibb:16"), "unknown topology 'h100-ibb'"),
    (("--clusters", "h100-ib:16", "--prices", "a100-hdr=1"), "a100-hdr is not one of --clusters h100-ib"),
    (("--clusters", "h100-ib:16", "--topologies", "h100-ib"), "not allowed with argument --clusters"),
    (("--clusters", "h100-ib:16", "--gpus", "16"), "--gpus 16 with --clusters: each cluster names its own GPU count"),
    ((), "one of the arguments --topologies --clusters is required"),
])
def test_bad_clusters_are_one_line(tmp_path, argv, words):
    assert_user_error("whatif", "--model", "llama3-8b", "--train-tokens", "1T", *argv, "--out", tmp_path,
                      contains=words)


@pytest.mark.quick
def test_no_layout_that_fits_is_one_line(tmp_path):
    assert_user_error("whatif", "--model", "llama3-70b", "--topologies", "h100-ib", "--gpus", 1, "--seq", 8192,
                      "--gbs", 8, "--train-tokens", TOKENS, "--jobs", 1, "--out", tmp_path,
                      contains=("topology h100-ib:", "no configuration fits"))


@pytest.mark.quick
def test_sweep_and_prices_parse():
    assert parse_clusters("h100-ib:256, b200-ib:256,a100-hdr:512") == [("h100-ib", 256), ("b200-ib", 256),
                                                                        ("a100-hdr", 512)]
    assert parse_clusters("topologies/my:cluster.toml:64") == [("topologies/my:cluster.toml", 64)]
    assert parse_sweep("nic_gbps=100,400,100") == ("nic_gbps", (100.0, 400.0))
    assert parse_sweep("spines=2,4") == ("spines", (2, 4))
    assert parse_prices("a=1.5, b=2") == {"a": 1.5, "b": 2.0}
    with pytest.raises(SpecError, match="expected KEY=v1,v2"):
        parse_sweep("nic_gbps")


@pytest.mark.quick
def test_an_override_changes_the_key_where_the_file_sets_it():
    data = {"gpu": "h100-sxm", "node": {"gpus": 8, "nic_gbps": 400}, "fabric": {"kind": "none"}}
    assert overridden(data, "nic_gbps", 100.0)["node"] == {"gpus": 8, "nic_gbps": 100.0}
    assert overridden(data, "pue", 1.3)["power"] == {"pue": 1.3}  # not in the file: its table
    assert data["node"]["nic_gbps"] == 400  # the original is untouched


@pytest.mark.quick
def test_whatif_takes_the_singular_schedule_too():
    args = build_parser().parse_args(["whatif", "--model", "llama3-8b", "--topologies", "h100-ib",
                                      "--train-tokens", "1000", "--schedule", "zb-h1,1f1b"])
    assert args.schedules == ("zb-h1", "1f1b")


_SWEEP = ("whatif", "--model", "llama3-8b", "--seq", 1024, "--gbs", 8, "--gpus", 8, "--train-tokens", "1B",
          "--cp", 1, "--top", 1, "--jobs", 1, "--sweep", "nic_gbps=100,200", "--json")


def _b200_copy(tmp_path: Path) -> Path:
    """A topology file named like the h100-ib preset whose GPUs are B200s."""
    from simtrain.topology.cluster import preset_table
    from simtrain.outputs.whatif import write_topology

    table = preset_table("h100-ib")
    table["gpu"] = "b200"
    (tmp_path / "sub").mkdir()
    return write_topology(table, tmp_path / "sub" / "h100-ib.toml")


def test_two_bases_of_one_name_keep_their_own_swept_files(tmp_path):
    other = _b200_copy(tmp_path)
    out = cli_json(*_SWEEP, "--topologies", f"h100-ib,{other}", "--out", tmp_path / "o")
    gpu = {(r["topology"], r["sweep_value"]): r["gpu"] for r in out["results"]}
    assert gpu == {("h100-ib", 100): "h100-sxm", ("h100-ib", 200): "h100-sxm",
                   (str(other), 100): "b200", (str(other), 200): "b200"}
    assert len({r["source"] for r in out["results"]}) == 4


def test_concurrent_whatif_runs_into_one_folder_keep_their_own_rows(tmp_path):
    import subprocess
    import sys

    other = _b200_copy(tmp_path)
    runs = [subprocess.Popen([sys.executable, "-m", "simtrain", *map(str, _SWEEP), "--topologies", base, "--out",
                              str(tmp_path / "o")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for base in ("h100-ib", str(other))]
    results = [json.loads(p.communicate(timeout=300)[0]) for p in runs]
    assert {r["gpu"] for r in results[0]["results"]} == {"h100-sxm"}
    assert {r["gpu"] for r in results[1]["results"]} == {"b200"}


@pytest.mark.quick
@pytest.mark.parametrize("argv, words", [
    (("--topologies", "h100-ib", "--prices", "h100-ib=2,h100-ib=3"), "--prices h100-ib=2,h100-ib=3: h100-ib is given twice"),
    (("--topologies", "h100-ib,,a100-hdr"), "an empty name"),
    (("--topologies", "h100-ib,h100-ib"), "h100-ib is given twice"),
])
def test_a_name_given_twice_or_empty_is_refused(argv, words, tmp_path):
    assert_user_error("whatif", "--model", "llama3-8b", *argv, "--train-tokens", "1B", "--out", tmp_path,
                      contains=words)
