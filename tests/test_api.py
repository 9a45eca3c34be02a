"""The Python API: automatic recompute picks the fewest layers that fit or says it cannot; library
functions print nothing."""

from __future__ import annotations

from helpers import assert_user_error
from simtrain import api


def test_auto_recompute_is_the_fewest_layers_that_fit():
    settings = dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=8, seq=131072, gbs=4)
    sc = api.resolve({**settings, "recompute": "auto"})
    n = int(sc.parallel.recompute)
    assert n > 0
    assert api.simulate(sc).report["fits_in_memory"]
    fewer = api.simulate(api.resolve({**settings, "recompute": str(n - 1)})).report
    assert not fewer["fits_in_memory"]
    assert sc.settings["recompute"] == "auto" and sc.settings["recompute_layers"] == n


def test_auto_recompute_that_cannot_fit_is_an_error():
    assert_user_error("run", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64, "--tp", 8,
                      "--seq", 131072, "--gbs", 8, "--recompute", "auto",
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
