"""``simtrain list``, ``topology`` and ``mesh``: the presets' key figures, the seed's mesh example, the
default scenario's mesh, topology keys and drawings (also coloured by a flow report), one-line user
errors."""

from __future__ import annotations

import pytest

from helpers import assert_user_error, cli, cli_json


@pytest.mark.quick
def test_mesh_text_output():
    code, out, _ = cli("mesh", "--gpus", 16, "--tp", 2, "--cp", 2, "--dp", 2, "--pp", 2, "--rank", 13)
    assert code == 0
    assert "rank 13: PP=1 DP=1 CP=0 TP=1" in out
    assert "across nodes" in out


@pytest.mark.quick
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


@pytest.mark.quick
@pytest.mark.parametrize("what", ["models", "gpus", "topologies", "schedules"])
def test_list_prints_a_table_and_json(what):
    rows = cli_json("list", what)
    assert len(rows) >= 2 and all(isinstance(r, dict) and r["name"] for r in rows)
    code, out, err = cli("list", what)
    assert code == 0, err
    lines = out.splitlines()
    assert set(lines[1]) <= {"-", " "}  # a header, its rule, one row per preset
    assert all(any(line.startswith(r["name"]) for line in lines[2:]) for r in rows)


@pytest.mark.quick
def test_list_key_figures():
    gpus = {r["name"]: r for r in cli_json("list", "gpus")}
    assert {"a100-80g", "h100-sxm", "h200", "b200", "seed-h100"} <= set(gpus)
    h100 = gpus["h100-sxm"]
    assert (round(h100["bf16_tflops"]), round(h100["fp8_tflops"]), round(h100["hbm_gib"]), h100["hbm_TBps"],
            h100["nvlink_GBps"]) == (989, 1979, 80, 3.35, 450.0)
    assert gpus["a100-80g"]["fp8_tflops"] is None
    topologies = {r["name"]: r for r in cli_json("list", "topologies")}
    ib = topologies["h100-ib"]
    assert (ib["gpus_per_node"], ib["nodes"], ib["nic_Gbps"], ib["fabric"], ib["oversubscription"]) == \
        (8, 8, 400.0, "fat-tree", 1.0)
    assert topologies["h100-ib-2to1"]["oversubscription"] == 2.0
    models = {r["name"]: r for r in cli_json("list", "models")}
    assert (round(models["llama3-70b"]["params_b"], 1), models["llama3-70b"]["layers"]) == (70.6, 80)
    mixtral = models["mixtral-8x7b"]
    assert (round(mixtral["params_b"], 1), round(mixtral["active_params_b"], 1), mixtral["experts"],
            mixtral["top_k"]) == (46.7, 12.9, 8, 2)
    schedules = {r["name"]: r for r in cli_json("list", "schedules")}
    assert schedules["1f1b"]["bubble"] == "(p - 1)(F + B)"
    assert schedules["1f1b"]["peak_in_flight"] == "min(p - stage, m)"
    assert schedules["interleaved-1f1b"]["bubble"] == "(p - 1)(F + B)/v"
    assert schedules["zb-auto"]["bubble"] == "-" and "hand-4x4" in schedules
    code, text, _ = cli("list", "gpus")
    assert "BF16 TFLOP/s" in text and "h100-sxm" in text and "1,979" in text


@pytest.mark.quick
def test_mesh_without_flags_is_the_default_scenario():
    info = cli_json("mesh")
    assert [len(info["groups"][d]) for d in ("tp", "pp", "dp")] == [8, 16, 32]  # TP8 x PP4 x DP2 of 64


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


@pytest.mark.quick
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
    assert_user_error("mesh", "--gpus", 16, "--tp", 3, contains=("gpus=16", "tp*cp*pp=12", "pp=4", "--pp"))
    assert_user_error("mesh", "--gpus", 16, "--tp", 2, "--dp", 3, contains=("does not match gpus=16",))
    assert_user_error("mesh", "--gpus", 16, "--pp", 2, "--order", "tp-dp-pp", contains=("permutation",))
    assert_user_error("mesh", "--gpus", "x", contains=("--gpus", "'x'"))
    assert_user_error("topology", "h100-ib", "--nodes", 0, contains=("--nodes",))
    assert_user_error("topology", "h100-ib", "--draw", tmp_path / "x.gif", contains=(".png",))
