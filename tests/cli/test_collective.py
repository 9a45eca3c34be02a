"""``simtrain collective``: sizes, the report (bus bandwidth, contention between concurrent groups,
bad inputs), the command and its errors."""

from __future__ import annotations

import json

import pytest

from helpers import GB, assert_user_error, cli_json, fat_tree, nvlink_node
from simtrain.api.collective import collective
from simtrain.cli.collective import add_collective_command, parse_size
from simtrain.errors import SimtrainError, SpecError
from simtrain.network.algorithms import bandwidths, bus_factor
from simtrain.topology.cluster import load_topology

pytestmark = pytest.mark.quick


def test_busbw_of_an_uncontended_ring_approaches_the_achievable_link_bandwidth():
    c = nvlink_node(bw_GBps=450, latency_us=0.0)
    rep = collective("all-reduce", size_bytes=2**34, gpus=8, topology=c, network="flow",
                            algo="ring")
    assert rep["busbw_Bps"] == pytest.approx(450 * GB * 0.822, rel=0.001)  # NCCL's latency: 56 us of 95 ms
    assert rep["algbw_Bps"] == pytest.approx(rep["busbw_Bps"] * 8 / 14, rel=1e-9)
    assert (rep["protocol"], rep["channels"]) == ("Simple", 1)
    for op in ("all-gather", "reduce-scatter"):
        rep = collective(op, size_bytes=2**34, gpus=8, topology=c)
        assert rep["busbw_Bps"] == pytest.approx(450 * GB * 0.822, rel=0.001)
    assert bus_factor("all_to_all", 8) == 7 / 8 and bus_factor("p2p", 2) == 1.0
    assert bandwidths("all_reduce", 4, 1e9, 1.0) == (1e9, 1.5e9)


def test_acceptance_busbw_of_h100_collectives():
    """8 H100s: ring 340-400 GB/s, NVLS 440-500 GB/s (NCCL maintainers: ~370 and ~480,
    NVIDIA/nccl-tests issue 212); all-gather over 2 nodes >= 300 GB/s (one channel per NIC); a
    2-node all-reduce within 15% of the cited measurements: ~396 GB/s with NCCL_ALGO=RING
    (nccl-tests issue 319), 470 GB/s by default, NVLS tree (nccl-tests issue 309)."""
    ring = cli_json("collective", "all-reduce", "--size", "1G", "--gpus", 8, "--topology", "h100-ib", "--algo", "ring")
    assert 340e9 <= ring["busbw_Bps"] <= 400e9
    nvls = cli_json("collective", "all-reduce", "--size", "1G", "--gpus", 8, "--topology", "h100-ib")
    assert nvls["algorithm"] == "nvls" and 440e9 <= nvls["busbw_Bps"] <= 500e9
    off = cli_json("collective", "all-reduce", "--size", "1G", "--gpus", 8, "--topology", "h100-ib", "--no-nvls")
    assert off["algorithm"] == "ring" and off["busbw_Bps"] == ring["busbw_Bps"]
    gather = cli_json("collective", "all-gather", "--size", "1G", "--gpus", 16, "--topology", "h100-ib")
    assert gather["channels"] == 8 and gather["busbw_Bps"] >= 300e9
    two_ring = cli_json("collective", "all-reduce", "--size", "16G", "--gpus", 16, "--topology", "h100-ib",
                        "--algo", "ring")
    assert two_ring["busbw_Bps"] == pytest.approx(396e9, rel=0.15)
    two = cli_json("collective", "all-reduce", "--size", "16G", "--gpus", 16, "--topology", "h100-ib")
    assert two["algorithm"] == "nvls_tree" and two["busbw_Bps"] == pytest.approx(470e9, rel=0.15)


def test_parse_size():
    assert parse_size("256M") == 256 * 2**20
    assert parse_size("1G") == 2**30
    assert parse_size("64KiB") == 65536
    assert parse_size("1GB") == 10**9
    assert parse_size("4096") == 4096
    assert parse_size("1.5k") == 1536
    assert parse_size("1.5e3") == 1500 and parse_size("0.5K") == 512
    for bad in ("1x", "", "-1", "G"):
        with pytest.raises(SpecError, match="size"):
            parse_size(bad)
    for bad, words in (("1.5", "1.5 bytes is not a whole number"), ("1.1K", "1126.4 bytes is not a whole number")):
        with pytest.raises(SpecError, match=words):  # not rounded to a size the user did not give
            parse_size(bad)


def test_collective_report_concurrent_groups_show_contention():
    c = fat_tree(2.0)
    dp = list(range(0, 64, 8))
    flow = collective("all-reduce", size_bytes=2**28, ranks=dp, topology=c, algo="ring",
                             network="flow", concurrent_groups=8)
    assert flow["groups"] == [list(range(j, 64, 8)) for j in range(8)]
    assert flow["time_s"] / flow["uncontended_time_s"] == pytest.approx(2.0, rel=0.1)
    assert flow["top_links"] and flow["top_links"][0]["mean_utilisation"] <= 1 + 1e-9
    analytic = collective("all-reduce", size_bytes=2**28, ranks=dp, topology=c,
                                 algo="ring", concurrent_groups=8)
    assert analytic["time_s"] == pytest.approx(analytic["uncontended_time_s"])
    blocks = collective("all-gather", size_bytes=2**20, gpus=8, topology=c,
                               concurrent_groups=3)
    assert blocks["groups"] == [list(range(8 * k, 8 * k + 8)) for k in range(3)]
    assert set(flow) >= {"time_s", "algbw_Bps", "busbw_Bps", "algorithm", "network", "ranks"}


def test_collective_report_bad_inputs():
    c = load_topology("h100-ib")
    one = collective("all-to-all", size_bytes=2**20, gpus=1, topology=c, network="flow")
    assert one["time_s"] == 0.0 and one["algbw_Bps"] is None
    with pytest.raises(SpecError, match=r"rank 64 is out of range \[0, 64\).*--nodes"):
        collective("all-reduce", size_bytes=1, ranks=[0, 64], topology=c)
    with pytest.raises(SpecError, match="more than the 64 GPUs"):
        collective("all-reduce", size_bytes=1, gpus=65, topology=c)
    with pytest.raises(SpecError, match="did you mean 'ring'"):
        collective("all-reduce", size_bytes=1, gpus=8, topology=c, algo="rign")
    with pytest.raises(SpecError, match="ranks repeat"):
        collective("all-reduce", size_bytes=1, ranks=[1, 1], topology=c)
    with pytest.raises(SpecError, match="either --gpus N or --ranks"):
        collective("all-reduce", size_bytes=1, topology=c)
    with pytest.raises(SpecError, match="exactly two ranks"):
        collective("p2p", size_bytes=1, ranks=[0, 1, 2], topology=c)
    with pytest.raises(SpecError, match="--network"):
        collective("all-reduce", size_bytes=1, gpus=8, topology=c, network="fast")
    with pytest.raises(SpecError, match="concurrent-groups 9"):
        collective("all-reduce", size_bytes=1, gpus=8, topology=c, concurrent_groups=9)


def _cli(*argv: str) -> tuple[int, str]:
    import argparse
    import contextlib
    import io

    from simtrain.cli.main import _Parser

    parser = _Parser(prog="simtrain")
    add_collective_command(parser.add_subparsers(dest="command", parser_class=_Parser))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        args = parser.parse_args(list(argv))
        assert isinstance(args, argparse.Namespace)
        code = args.func(args)
    return code, out.getvalue()


def test_collective_cli():
    code, out = _cli("collective", "all-reduce", "--size", "256M", "--gpus", "8",
                     "--topology", "h100-ib")
    assert code == 0 and "nvls" in out and "busbw GB/s" in out and "Simple" in out
    code, out = _cli("collective", "all-reduce", "--size", "64M", "--ranks", "0,8,16,24",
                     "--topology", "h100-ib", "--network", "flow", "--concurrent-groups", "2",
                     "--json")
    rep = json.loads(out)
    assert code == 0 and rep["network"] == "flow" and rep["groups"][1] == [1, 9, 17, 25]
    assert rep["size_bytes"] == 64 * 2**20 and "top_links" in rep
    with pytest.raises(SimtrainError, match="--size"):
        _cli("collective", "all-reduce", "--size", "lots", "--gpus", "8", "--topology", "h100-ib")
    with pytest.raises(SimtrainError, match="out of range"):
        _cli("collective", "p2p", "--size", "1M", "--ranks", "0,64", "--topology", "h100-ib")
    with pytest.raises(SimtrainError):
        _cli("collective", "all-reduce", "--size", "1M", "--topology", "h100-ib")


def test_collective_command(tmp_path):
    rep = cli_json("collective", "all-reduce", "--size", "1G", "--gpus", 8, "--topology", "h100-ib")
    for key in ("time_s", "algbw_Bps", "busbw_Bps", "algorithm"):
        assert key in rep
    assert rep["time_s"] == rep["uncontended_time_s"]
    flow = cli_json("collective", "all-reduce", "--size", "1G", "--gpus", 8, "--topology", "h100-ib",
                    "--network", "flow")
    assert flow["time_s"] == pytest.approx(rep["time_s"], rel=0.01)


def test_collective_errors():
    assert_user_error("collective", "all-reduce", "--size", "1G", "--gpus", 8, "--topology", "h100-ib",
                      "--algo", "rng", contains=("rng", "ring"))
    assert_user_error("collective", "all-reduce", "--size", "1G", "--ranks", "0,999", "--topology",
                      "h100-ib", contains=("999",))
    assert_user_error("collective", "all-reduce", "--size", "1G", "--gpus", 8, "--topology", "a100-hdr",
                      "--algo", "nvls", contains=("nvls", "off", "nvls = true"))
    assert_user_error("run", "--collective-algo", "tre", contains=("tre", "tree"))
