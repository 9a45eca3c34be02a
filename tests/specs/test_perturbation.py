"""Perturbation settings: parsing, their one-line errors, and which GPUs they slow."""

import pytest

from simtrain.errors import SpecError
from simtrain.specs import perturbation as pt
from simtrain.specs.perturbation import DEFAULT_FACTOR, Perturbations

pytestmark = pytest.mark.quick


def test_indexed_items_with_and_without_a_factor():
    assert pt.parse_indexed("--straggler", "5:0.5, 17", "GPU rank") == ((5, 0.5), (17, DEFAULT_FACTOR))
    assert pt.parse_indexed("--straggler", None, "GPU rank") == ()


@pytest.mark.parametrize("text, words", [
    ("5:1.5", "factor '1.5' must be a number in (0, 1]"),
    ("5:0", "factor '0' must be a number in (0, 1]"),
    ("5:nan", "factor 'nan'"),
    ("x:0.5", "GPU rank 'x' must be a whole number >= 0"),
    ("-1", "GPU rank '-1' must be a whole number"),
])
def test_bad_stragglers_name_the_value(text, words):
    with pytest.raises(SpecError, match="^--straggler") as err:
        pt.parse_indexed("--straggler", text, "GPU rank")
    assert words in str(err.value)


def test_throttle_and_links():
    assert pt.parse_throttle("0.25:0.5") == (0.25, 0.5)
    assert pt.parse_throttle("0.1") == (0.1, DEFAULT_FACTOR)
    with pytest.raises(SpecError, match=r"--throttle '2': fraction '2' must be a number in \[0, 1\]"):
        pt.parse_throttle("2")
    assert pt.parse_degraded("leaf0-spine3:0.5,node2/nic1-leaf0:0.25") == (
        ("leaf0", "spine3", 0.5), ("node2/nic1", "leaf0", 0.25))
    assert pt.parse_failed("leaf0-spine3") == (("leaf0", "spine3"),)
    with pytest.raises(SpecError, match="expected END-END:FACTOR"):
        pt.parse_degraded("leaf0-spine3")
    with pytest.raises(SpecError, match="expected a link as END-END"):
        pt.parse_failed("leaf0")


def test_node_gpus():
    known = ["a100-80g", "h100-sxm"]
    assert pt.parse_node_gpus("0-3:a100-80g,5:h100-sxm", known) == ((0, 3, "a100-80g"), (5, 5, "h100-sxm"))
    with pytest.raises(SpecError, match="the last node 1 comes before the first 3"):
        pt.parse_node_gpus("3-1:a100-80g", known)
    with pytest.raises(SpecError, match="unknown gpu 'a100'"):
        pt.parse_node_gpus("0:a100", known)
    with pytest.raises(SpecError, match="expected FIRST"):
        pt.parse_node_gpus("0-3", known)


def test_speeds_multiply_where_perturbations_meet():
    p = Perturbations(stragglers=((9, 0.5),), slow_nodes=((1, 0.8),))
    speeds = p.speeds(gpus=32, gpus_per_node=8)
    assert speeds == {**{g: 0.8 for g in range(8, 16)}, 9: 0.4}
    assert set(speeds) | set(p.gpu_presets(32, 8)) == set(range(8, 16))


def test_throttle_draws_a_seeded_fraction():
    p = Perturbations(throttle_fraction=0.1, seed=3)
    drawn = p.throttled(1000)
    assert len(drawn) == 100 and len(set(drawn)) == 100 and drawn == p.throttled(1000)
    assert drawn != Perturbations(throttle_fraction=0.1, seed=4).throttled(1000)
    assert set(p.speeds(1000, 8)) == set(drawn)


def test_check_names_the_missing_gpu_or_node():
    with pytest.raises(SpecError, match=r"--straggler 64: no such GPU rank \(the job has ranks 0..63\)"):
        Perturbations(stragglers=((64, 0.5),)).check(gpus=64, nodes=8)
    with pytest.raises(SpecError, match="--slow-node 8: no such node"):
        Perturbations(slow_nodes=((8, 0.5),)).check(gpus=64, nodes=8)
    with pytest.raises(SpecError, match="--node-gpu 6-9: no such node"):
        Perturbations(node_gpus=((6, 9, "a100-80g"),)).check(gpus=64, nodes=8)


@pytest.mark.parametrize("text", ["leaf0-spine0,leaf0-spine0", "leaf0-spine0,spine0-leaf0"])
def test_a_failed_link_given_twice_is_refused_naming_it(text):
    """Removing the link the second time was a NetworkXError."""
    from helpers import assert_user_error

    second = text.split(",")[1]
    with pytest.raises(SpecError, match=f"--fail-link {text}: the link leaf0-spine0 is given twice \\(as leaf0-spine0 "
                                        f"and {second}\\); a failed link is removed in both directions"):
        pt.parse_failed(text)
    assert_user_error("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 32, "--gbs", 32, "--seq", 512,
                      "--no-plot", "--fail-link", text, contains="is given twice")
    assert pt.parse_failed("leaf0-spine0,leaf0-spine1") == (("leaf0", "spine0"), ("leaf0", "spine1"))


def test_setting_texts_parse_back_and_each_setting_alone():
    from simtrain.api.perturbations import from_texts

    p = from_texts(straggler="5:0.5,17", throttle="0.25", slow_node="1", node_gpu="0-1:a100-80g",
                   degrade_link="leaf0-spine3:0.5", fail_link="leaf1-spine0", seed=3)
    assert from_texts(**p.setting_texts(), seed=3) == p
    assert p.setting_texts()["straggler"] == "5:0.5,17:0.8"
    assert p.only("straggler") == Perturbations(stragglers=p.stragglers, seed=3, given=("straggler",))
    assert p.only("throttle").throttle_fraction == 0.25 and not p.only("throttle").stragglers
    assert Perturbations().setting_texts() == dict.fromkeys(pt.SETTING_FIELDS)
    # a setting given that perturbs nothing still counts as given; one built by hand counts where it perturbs
    assert from_texts(straggler="2", throttle="0").settings_given() == ("straggler", "throttle")
    assert Perturbations(failed_links=(("a", "b"),)).settings_given() == ("fail_link",)
