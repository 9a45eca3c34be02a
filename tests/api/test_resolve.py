"""The Python API: every setting replaces one value of the default scenario and an impossible
combination names the defaults it clashes with; the cluster takes the nodes its fabric allows;
automatic recompute picks the fewest layers that fit or says it cannot; library functions print
nothing."""

from __future__ import annotations

import pytest

from helpers import assert_user_error
from simtrain import api

pytestmark = pytest.mark.quick


def test_auto_recompute_is_the_fewest_layers_that_fit():
    settings = dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=8, pp=1, seq=131072, gbs=4)
    sc = api.resolve({**settings, "recompute": "auto"})
    n = int(sc.parallel.recompute)
    assert n > 0
    assert api.simulate(sc).report["fits_in_memory"]
    fewer = api.simulate(api.resolve({**settings, "recompute": str(n - 1)})).report
    assert not fewer["fits_in_memory"]
    config = api.scenario_config(sc)
    assert config["recompute"] == "auto" and config["recompute_layers"] == n


def test_auto_recompute_that_cannot_fit_is_an_error():
    assert_user_error("run", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64, "--tp", 8,
                      "--pp", 1, "--seq", 131072, "--gbs", 8, "--recompute", "auto",
                      contains=("--recompute auto", "even recomputing all 80 layers"))


def test_library_functions_print_nothing(capfd, tmp_path):
    """Printing is the command line's business: the API returns values and writes files only."""
    from simtrain.analytic.model import estimate

    sc = api.resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 8, "tp": 2, "pp": 2, "seq": 2048,
                      "gbs": 8, "recompute": "auto"})
    result = api.simulate(sc)
    api.write_outputs(result, tmp_path, plot=False)
    estimate(sc.model, sc.cluster, sc.parallel)
    assert capfd.readouterr() == ("", "")


def test_each_setting_replaces_one_value_of_the_default_scenario():
    """A user who wants PP=1 says pp=1: nothing else of the default scenario moves."""
    sc = api.resolve({"gbs": 64})
    assert (sc.parallel.tp, sc.parallel.pp, sc.parallel.dp, sc.parallel.seq) == (8, 4, 2, 8192)
    assert sc.parallel.num_microbatches == 32
    interleaved = api.resolve({"schedule": "interleaved-1f1b", "vpp": 2}).parallel
    assert (interleaved.pp, interleaved.vpp) == (4, 2)
    wider = api.resolve({"gpus": 128})  # dp re-derived, gbs kept
    assert (wider.parallel.dp, wider.parallel.gbs, wider.cluster.num_nodes) == (4, 32, 16)


def test_an_impossible_combination_names_the_defaults_and_the_value_given():
    import pytest

    from simtrain.errors import SpecError

    message = str(pytest.raises(SpecError, api.resolve, {"gpus": 100}).value)
    assert "gpus=100" in message and "defaults in use: tp=8, pp=4 (override with --tp, --pp)" in message
    message = str(pytest.raises(SpecError, api.resolve, {"gpus": 512, "topology": "h100-ib"}).value)
    assert "gbs=32" in message and "--gbs" in message and "pp=4" in message
    explicit = str(pytest.raises(SpecError, api.resolve, {"gpus": 64, "tp": 3, "pp": 1}).value)
    assert "defaults in use" not in explicit  # every value that clashes was given


def test_the_cluster_has_the_fewest_nodes_that_hold_the_gpus(tmp_path):
    assert api.cluster_for("h100-ib", 100).num_nodes == 13
    assert api.cluster_for("h100-ib", 64).num_nodes == 8
    small = tmp_path / "small.toml"
    small.write_text('gpu = "h100-sxm"\nnodes = 2\n[node]\ngpus = 8\nnic_gbps = 400\n[fabric]\n'
                     'kind = "fat-tree"\nnodes_per_leaf = 2\nspines = 2\nswitch_ports = 64\n')
    assert_user_error("run", "--topology", small, "--gpus", 4096, "--pp", 1, "--tp", 8,
                      contains=("gpus=4096 needs 512 nodes of 8 GPUs", "nodes = 512"))
    assert_user_error("run", "--nodes", 4, contains=("gpus=64 exceeds the 32 GPUs", "defaults in use",
                                                      "gpus=64", "--gpus"))


def test_one_resolve_builds_the_graph_once(monkeypatch):
    """The node count comes from the topology's spec, not from a graph built at its default size:
    at 131,072 GPUs a second graph costs seconds and gigabytes."""
    from simtrain.topology import cluster as cluster_module

    builds = []
    real = cluster_module.build_graph
    monkeypatch.setattr(cluster_module, "build_graph", lambda spec: builds.append(spec.nodes) or real(spec))
    for settings, nodes in (({"gbs": 64}, 8),  # the default topology at its own size
                            ({"topology": "h100-ib", "gpus": 256, "tp": 8, "pp": 4, "gbs": 64}, 32),
                            ({"topology": "h100-ib", "gpus": 64, "nodes": 16, "gbs": 64}, 16)):
        builds.clear()
        assert api.resolve(settings).cluster.num_nodes == nodes
        assert builds == [nodes], settings


def test_an_experiment_file_takes_output_keys(tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('pp = 2\ngbs = 16\nout = "runs/a"\nplot = false\n')
    settings = api.load_config(cfg)
    assert settings == {"pp": 2, "gbs": 16, "out": "runs/a", "plot": False}
    assert api.resolve(settings).parallel.pp == 2  # the scenario ignores the output keys


def test_no_setting_is_read_by_key_below_the_command_line():
    """Every setting is a typed field of the scenario (simtrain.scenario), resolved once: below
    simtrain/cli/ no code indexes a settings dict (importers write through JobReader.set, a
    candidate reads through Candidate.get)."""
    from pathlib import Path

    package = Path(api.__file__).resolve().parent
    found = [f"{path.relative_to(package.parent)}:{n}: {line.strip()}"
             for path in sorted(package.rglob("*.py")) if "cli" not in path.relative_to(package).parts[:1]
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "settings[" in line]
    assert not found, found


def test_with_settings_gives_a_scenario_whose_config_matches_its_fields():
    from dataclasses import replace

    from simtrain.topology.cluster import cluster_for

    sc = api.resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2, "gbs": 16,
                      "recompute": "auto"})
    before = api.scenario_config(sc)
    changed = api.with_settings(sc, max_events=50_000, options=replace(sc.options, steps=2, train_tokens=10**9),
                                cluster=cluster_for("a100-hdr", 16, None))
    config = api.scenario_config(changed)
    assert (config["max_events"], config["steps"], config["train_tokens"]) == (50_000, 2, 10**9)
    assert (config["topology"], config["nodes"]) == ("a100-hdr", changed.cluster.num_nodes)
    assert {k: v for k, v in config.items() if k not in ("max_events", "steps", "train_tokens", "topology")} == \
        {k: v for k, v in before.items() if k not in ("max_events", "steps", "train_tokens", "topology")}
    assert config["recompute"] == "auto" and config["recompute_layers"] == int(sc.parallel.recompute)


def test_resolve_with_changes_settings_by_their_checked_names():
    from simtrain.errors import SpecError

    sc = api.resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2, "gbs": 16,
                      "straggler": "3"})
    wider = api.resolve_with(sc, tp=4, straggler=None)
    assert (wider.parallel.tp, wider.parallel.dp, wider.parallel.gbs, wider.model.name) == (4, 2, 16, "llama3-8b")
    assert not wider.perturbations.any and api.resolve_with(sc).perturbations == sc.perturbations
    with pytest.raises(SpecError, match="unknown setting 'tpp'; did you mean 'tp'"):
        api.resolve_with(sc, tpp=4)
    with pytest.raises(SpecError, match="unknown setting 'out'"):
        api.resolve_with(sc, out="runs")
