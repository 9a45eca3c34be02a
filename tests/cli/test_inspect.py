"""``simtrain list``, ``topology`` and ``mesh``: the seed's mesh example, MoE folding, topology keys and
drawings (also coloured by a flow report), one-line user errors."""

from __future__ import annotations

import pytest

from helpers import assert_user_error, cli, cli_json


def test_mesh_text_output():
    code, out, _ = cli("mesh", "--gpus", 16, "--tp", 2, "--cp", 2, "--dp", 2, "--pp", 2, "--rank", 13)
    assert code == 0
    assert "rank 13: PP=1 DP=1 CP=0 TP=1" in out
    assert "across nodes" in out


def test_topology_json_keys_and_oversubscription():
    full = cli_json("topology", "h100-ib")
    half = cli_json("topology", "h100-ib-2to1")
    for info in (full, half):
        for key in ("nodes_by_kind", "links_by_kind", "bisection_bandwidth_Bps", "oversubscription"):
            assert key in info
    assert half["bisection_bandwidth_Bps"] == pytest.approx(full["bisection_bandwidth_Bps"] / 2)
    assert (full["oversubscription"], half["oversubscription"]) == (1.0, 2.0)


def test_topology_nodes_and_draw(tmp_path):
    png = tmp_path / "t.png"
    info = cli_json("topology", "seed-h100", "--nodes", 4, "--draw", png)
    assert info["num_gpus"] == 32
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_topology_draw_coloured_by_a_flow_report(tmp_path):
    assert cli("run", "--network", "flow", "--no-plot", "--out", tmp_path)[0] == 0
    png = tmp_path / "t.png"
    code, out, err = cli("topology", "seed-h100", "--draw", png, "--report", tmp_path / "report.json")
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    analytic = tmp_path / "a"
    assert cli("run", "--no-plot", "--out", analytic)[0] == 0
    assert_user_error("topology", "seed-h100", "--draw", png, "--report", analytic / "report.json",
                      contains=("no link utilisation", "--network flow"))
    assert_user_error("topology", "seed-h100", "--nodes", 2, "--draw", png, "--report",
                      tmp_path / "report.json", contains=("is not in topology",))


@pytest.mark.parametrize("what", ["models", "gpus", "topologies", "schedules"])
def test_list(what):
    names = cli_json("list", what)
    assert len(names) >= 2


def test_list_contents():
    assert {"llama3-70b", "deepseek-v3"} <= set(cli_json("list", "models"))
    assert {"a100-80g", "h100-sxm", "h200", "b200", "seed-h100"} <= set(cli_json("list", "gpus"))
    assert "seed-h100" in cli_json("list", "topologies")


BAD_TOPOLOGY = """
name = "bad"
gpu = "h100-sxm"
nodes = 2
[node]
gpus = 8
nic_gbps = {nic}
[fabric]
kind = "fat-tree"
nodes_per_leaf = 2
spines = 2
{extra}
"""


def test_bad_inputs_one_line(tmp_path):
    assert_user_error("topology", "h100-i", contains=("unknown topology 'h100-i'", "did you mean 'h100-ib'"))
    assert_user_error("run", "--model", "llama3-7b", contains=("unknown model", "llama3-70b"))
    malformed = tmp_path / "m.toml"
    malformed.write_text('name = "x"\nnodes = = 2\n')
    assert_user_error("topology", malformed, contains=(str(malformed), "line 2"))
    neg = tmp_path / "neg.toml"
    neg.write_text(BAD_TOPOLOGY.format(nic=-400, extra=""))
    assert_user_error("topology", neg, contains=("nic_gbps", "-400"))
    unknown = tmp_path / "unk.toml"
    unknown.write_text(BAD_TOPOLOGY.format(nic=400, extra="spine_count = 3"))
    assert_user_error("topology", unknown, contains=("unknown key 'spine_count'",))
    disconnected = tmp_path / "disc.toml"
    disconnected.write_text('gpu = "h100-sxm"\nnodes = 2\n[node]\ngpus = 8\n[fabric]\nkind = "none"\n')
    assert_user_error("topology", disconnected, contains=("route",))
    assert_user_error("mesh", "--gpus", 16, "--tp", 3, contains=("gpus=16", "tp*cp*pp=3"))
    assert_user_error("mesh", "--gpus", 16, "--tp", 2, "--dp", 3, contains=("does not match gpus=16",))
    assert_user_error("mesh", "--gpus", 16, "--order", "tp-dp-pp", contains=("permutation",))
    assert_user_error("mesh", "--gpus", "x", contains=("--gpus", "'x'"))
    assert_user_error("topology", "h100-ib", "--nodes", 0, contains=("--nodes",))
    assert_user_error("topology", "h100-ib", "--draw", tmp_path / "x.gif", contains=(".png",))
