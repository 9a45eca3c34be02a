"""The Python API under wrong types: each quoted call is one SpecError line, and generated calls
of resolve, simulate, with_settings, load_config and write_outputs with arguments of every kind
return or raise the project's error, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from simtrain import api
from simtrain.errors import SimtrainError, SpecError

#: Generated calls (the sum is this module's count of fuzzed invocations).
EXAMPLES = {"resolve": 300, "with_settings": 200, "other": 100}
FUZZ = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])

SMALL = {"model": "llama3-8b", "topology": "h100-ib", "gpus": 8, "tp": 2, "pp": 2, "gbs": 8, "seq": 512,
         "max_events": 20_000}


@pytest.fixture(scope="module")
def scenario():
    return api.resolve(SMALL)


def one_line(call) -> str:
    with pytest.raises(SpecError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    return message


@pytest.mark.quick
def test_the_quoted_calls_are_one_line(scenario):
    assert one_line(lambda: api.resolve([1, 2])) == \
        'resolve: settings must be a dict of settings (e.g. {"tp": 2, "gbs": 64}), got list [1, 2]'
    assert one_line(lambda: api.simulate(None)) == \
        "simulate: scenario must be Scenario, got None; make one with simtrain.resolve({...})"
    assert one_line(lambda: api.with_settings(scenario, tp=2)).startswith(
        "with_settings: 'tp' is not a field of Scenario (fields: model, cluster, gpu, parallel, network")
    assert "simtrain.resolve_with(scenario, NAME=VALUE)" in one_line(
        lambda: api.with_settings(scenario, tp=2))
    assert one_line(lambda: api.resolve({}, recompute_rule="bogus")) == \
        "resolve: recompute_rule = 'bogus': must be one of memory, ledger"
    with pytest.raises(TypeError):  # an unknown keyword: Python's own refusal
        api.resolve({}, recompute="full")


@pytest.mark.quick
def test_more_wrong_types(scenario, tmp_path):
    assert one_line(lambda: api.resolve({1: 2})) == "resolve: a setting's name must be a str, got int 1"
    assert one_line(lambda: api.resolve("llama3-8b")).startswith("resolve: settings must be a dict")
    assert one_line(lambda: api.load_config(3)) == "load_config: path must be str or PathLike, got int 3"
    assert one_line(lambda: api.simulate(scenario, options=3)) == \
        "simulate: options must be WorkloadOptions or None, got int 3"
    assert one_line(lambda: api.with_settings(None)).startswith("with_settings: scenario must be Scenario, got None")
    assert one_line(lambda: api.with_settings(scenario, model="x")) == \
        "with_settings: model must be ModelSpec, got str 'x'"
    assert one_line(lambda: api.with_settings(scenario, max_events=True)) == \
        "with_settings: max_events must be int, got bool True"
    assert one_line(lambda: api.write_outputs(None, tmp_path)).startswith("write_outputs: result must be SimResult")
    changed = api.with_settings(scenario, max_events=50_000, collective_algo=None, calibration=None)
    assert changed.max_events == 50_000 and changed.parallel == scenario.parallel
    assert api.resolve(None).parallel.tp == 8 and api.resolve({"model": None}).model.name == api.resolve().model.name


WRONG = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**20), st.floats(allow_nan=True),
                  st.text(max_size=8), st.binary(max_size=4), st.lists(st.integers(0, 3), max_size=3),
                  st.dictionaries(st.text(max_size=4), st.integers(0, 3), max_size=2),
                  st.sampled_from([object(), (1, 2), {1, 2}, b"tp", 1j, Ellipsis, type]))
NAMES = st.sampled_from(sorted(SMALL) + ["dp", "recompute", "schedule", "network", "zero", "sp", "vpp",
                                         "calibration", "fail_link", "efficiency", "bogus"])


def only_our_errors(call) -> None:
    try:
        call()
    except SimtrainError as exc:
        assert "\n" not in str(exc).strip() or "rank" in str(exc), str(exc)[:500]


KEYS = st.one_of(NAMES, st.none(), st.integers(-3, 3), st.text(max_size=6), st.binary(max_size=3), st.just((1, 2)))


@settings(max_examples=EXAMPLES["resolve"], **FUZZ)
@given(st.one_of(WRONG, st.dictionaries(KEYS, WRONG, max_size=2)
                 .map(lambda d: {**SMALL, **d})), st.one_of(st.sampled_from(["memory", "ledger"]), WRONG))
def test_resolve_with_generated_arguments(settings_, rule):
    only_our_errors(lambda: api.resolve(settings_, recompute_rule=rule))


FIELDS = st.sampled_from(["model", "cluster", "gpu", "parallel", "network", "collective_algo", "fold", "max_events",
                          "routing", "calibration", "perturbations", "jitter", "options", "record", "settings",
                          "tp", "gbs"])


@settings(max_examples=EXAMPLES["with_settings"], **FUZZ)
@given(st.dictionaries(FIELDS, WRONG, min_size=1, max_size=2))
def test_with_settings_with_generated_fields(scenario, changes):
    only_our_errors(lambda: api.with_settings(scenario, **changes))


@settings(max_examples=EXAMPLES["other"], **FUZZ)
@given(st.sampled_from(["simulate", "load_config", "write_outputs", "with_settings"]), WRONG)
def test_other_calls_with_generated_arguments(tmp_path_factory, function, value):
    calls = {"simulate": lambda: api.simulate(value), "load_config": lambda: api.load_config(value),
             "write_outputs": lambda: api.write_outputs(value, tmp_path_factory.getbasetemp()),
             "with_settings": lambda: api.with_settings(value)}
    if function == "load_config" and isinstance(value, str):
        value = f"{tmp_path_factory.getbasetemp()}/missing-{abs(hash(value))}.toml"  # no stray files read
    only_our_errors(calls[function])


@pytest.mark.quick
def test_the_inspection_verbs_refuse_wrong_types_in_one_line():
    assert one_line(lambda: api.presets(3)) == "presets: what must be str, got int 3; one of gpus, topologies, models, schedules"
    assert one_line(lambda: api.describe_topology(None)).startswith("describe_topology: name must be str or PathLike")
    assert one_line(lambda: api.describe_topology("h100-ib", nodes="2")) == \
        "describe_topology: nodes must be int or None, got str '2'"
    assert one_line(lambda: api.describe_mesh([1])).startswith("describe_mesh: settings must be a dict")
    assert one_line(lambda: api.describe_mesh({}, rank="0")) == "describe_mesh: rank must be int or None, got str '0'"
    assert one_line(lambda: api.schedule_alone("1f1b", "4", 8)) == "schedule_alone: pp must be int, got str '4'"
    assert one_line(lambda: api.schedule_alone("1f1b", 0, 8)) == "schedule_alone: pp=0: must be >= 1"
    assert one_line(lambda: api.schedule_alone("1f1b", 4, 8, (1, 1))).startswith(
        "schedule_alone: costs=(1, 1), comm=0.0: costs must be three numbers")
    assert one_line(lambda: api.schedule_alone("1f1b", 4, 8, (1, float("nan"), 1))).endswith(
        "each must be a finite number >= 0")
