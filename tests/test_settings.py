"""The settings table: every setting (and every output setting) is a run flag, a config key and a
README row; a flag, a config key and a Python value are refused in the same words; every setting
replaces one value of the default scenario; errors name the defaults they clash with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import assert_user_error
from simtrain import api
from simtrain.cli.main import build_parser
from simtrain.errors import SpecError
from simtrain.settings import DEFAULT_SCENARIO, OUTPUTS, SETTINGS, complete, defaults_note


README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _good_and_bad(setting):
    """A valid value other than the default, and a value of the wrong type."""
    kind = setting.flag_kind
    if kind is bool:
        return (not setting.default), "yes"
    if setting.choices:
        return next(c for c in setting.choices if c != setting.default), 3
    if isinstance(setting.kind, tuple):
        return "full", 1.5
    return {int: (2, "two"), float: (0.5, "half"), str: ("x", 3)}[kind]


def _flag_argv(setting, value):
    if setting.kind is bool:
        return [setting.off_flag] if value is False else [setting.cli_flags[0]]
    return [setting.cli_flags[0], str(value)]


@pytest.mark.parametrize("name", [*SETTINGS, *OUTPUTS])
def test_every_setting_is_a_run_flag_a_config_key_and_documented(name, tmp_path):
    setting = {**SETTINGS, **OUTPUTS}[name]
    good, bad = _good_and_bad(setting)
    args = build_parser().parse_args(["run", *_flag_argv(setting, good)])
    assert getattr(args, name) == good and type(getattr(args, name)) is type(good)
    assert getattr(build_parser().parse_args(["run"]), name) is None  # not given: the table decides

    cfg = tmp_path / "exp.toml"
    cfg.write_text(f"{name} = {json.dumps(good)}\n")
    loaded = api.load_config(cfg)
    assert loaded == {name: good} and type(loaded[name]) is type(good)
    cfg.write_text(f"{name} = {json.dumps(bad)}\n")
    with pytest.raises(SpecError, match=rf"exp\.toml: {name} = .*expected"):
        api.load_config(cfg)
    assert_user_error("run", "--config", cfg, contains=(f"{name} = {bad!r}", "expected"))

    row = next((line for line in README.splitlines() if line.startswith(f"| `{name}` |")), None)
    assert row is not None, f"setting {name} is not in the README's settings reference"
    for flag in (*setting.cli_flags, *([setting.off_flag] if setting.off_flag else [])):
        assert f"`{flag}`" in row


@pytest.mark.parametrize("name", [n for n, s in SETTINGS.items() if s.rule is not None])
def test_a_flag_and_a_config_key_are_refused_in_the_same_words(name, tmp_path):
    setting = SETTINGS[name]
    low = 0 if setting.flag_kind is int and setting.rule.test(0) is False else -1
    flag_error = assert_user_error("run", setting.cli_flags[0], low)
    cfg = tmp_path / "exp.toml"
    cfg.write_text(f"{name} = {low}\n")
    config_error = assert_user_error("run", "--config", cfg)
    api_error = str(pytest.raises(SpecError, api.resolve, {name: low}).value)
    for message in (flag_error, config_error, api_error):
        assert setting.rule.phrase in message, message
    assert setting.cli_flags[0] in flag_error and f"{name} = " in config_error


def test_choices_are_checked_for_a_flag_a_config_key_and_a_python_value(tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('network = "flo"\n')
    for message in (assert_user_error("run", "--network", "flo"), assert_user_error("run", "--config", cfg),
                    str(pytest.raises(SpecError, api.resolve, {"network": "flo"}).value)):
        assert "network = 'flo': must be one of analytic, flow, none; did you mean 'flow'?" in message


def test_every_setting_replaces_one_value_of_the_default_scenario():
    assert {k: complete({})[k] for k in DEFAULT_SCENARIO} == dict(DEFAULT_SCENARIO)
    for name, value in (("gbs", 64), ("seq", 4096), ("pp", 1), ("gpus", 128), ("model", "llama3-8b")):
        s = complete({name: value})
        assert s[name] == value
        assert {k: s[k] for k in DEFAULT_SCENARIO if k != name} == \
            {k: v for k, v in DEFAULT_SCENARIO.items() if k != name}
    derived = complete({"gpus": 128})
    assert derived["dp"] is None and derived["nodes"] is None and derived["etp"] is None  # resolved later
    assert complete({"out": "x", "json": True}) == complete({})  # output settings are the caller's
    with pytest.raises(SpecError, match="json = 'yes': expected bool"):
        complete({"json": "yes"})
    with pytest.raises(SpecError, match="unknown setting 'ppp'; did you mean 'pp'"):
        complete({"ppp": 2})


def test_errors_name_the_defaults_they_clash_with():
    assert defaults_note("gpus=100 is not divisible by tp*cp*pp=32 (tp=8, cp=1, pp=4)", {"gpus"}) == \
        "; defaults in use: tp=8, pp=4 (override with --tp, --pp)"
    # dp is derived: its sources that are defaults are named; given values and defaults of 1 are not
    assert defaults_note("gbs=32 gives 2 micro-batches per pipeline (gbs/(dp*mbs)), fewer than pp=4",
                         {"gpus", "tp"}) == "; defaults in use: pp=4, gbs=32 (override with --pp, --gbs)"
    assert defaults_note("tp=3 does not divide the 64 attention heads of llama3-70b", {"tp"}) == \
        "; defaults in use: model=llama3-70b (override with --model)"
    assert defaults_note("unknown schedule 'x'", {"schedule"}) == ""
    assert defaults_note("the schedule model of 1f1bx", set()) == ""  # words, not values
