"""The settings table: every setting (and every output setting) is a run flag, a config key and a
README row; a flag, a config key and a Python value are refused in the same words; every setting
replaces one value of the default scenario; errors name the defaults they clash with. No flag is
silently ignored: one that does not apply is a one-line error naming why, the closed form reads
the layout's ZeRO stage, SP, recompute and stage split or says what it does not model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import assert_user_error, cli, cli_json
from simtrain import api
from simtrain.cli.main import build_parser
from simtrain.errors import SpecError
from simtrain.settings import DEFAULT_SCENARIO, OUTPUTS, SETTINGS, complete, defaults_note
from simtrain.specs.model import load_model
from simtrain.units import GiB


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
    if setting.name == "recompute_modules":  # names from a closed list
        return "mlp,layernorm", 3
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


@pytest.mark.quick
def test_choices_are_checked_for_a_flag_a_config_key_and_a_python_value(tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('network = "flo"\n')
    for message in (assert_user_error("run", "--network", "flo"), assert_user_error("run", "--config", cfg),
                    str(pytest.raises(SpecError, api.resolve, {"network": "flo"}).value)):
        assert "network = 'flo': must be one of analytic, flow, none; did you mean 'flow'?" in message


@pytest.mark.quick
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


@pytest.mark.quick
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


# ---- no flag silently ignored ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "analytic"])
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "zb-h1", "zb-v", "dualpipe"])
def test_vpp_with_a_schedule_without_virtual_stages_is_an_error(command, schedule):
    outputs = ("--no-plot", "--out", "unused") if command == "run" else ()  # analytic writes nothing
    assert_user_error(command, "--schedule", schedule, "--vpp", 2, *outputs,
                      contains=(f"--vpp 2: schedule {schedule} has no virtual stages",
                                "only interleaved-1f1b takes --vpp"))


@pytest.mark.quick
def test_vpp_with_a_schedule_file_is_an_error():
    assert_user_error("analytic", "--schedule", "hand-4x4", "--vpp", 2, "--gbs", 8,
                      contains=("--vpp 2: schedule hand-4x4 is a schedule file",))


@pytest.mark.quick
def test_vpp_one_is_accepted_with_any_schedule():
    assert cli_json("analytic", "--schedule", "zb-h1", "--vpp", 1)["vpp"] == 1


@pytest.mark.quick
def test_stage_layers_beyond_the_model_are_one_line():
    assert_user_error("analytic", "--first-stage-layers", 10 ** 18,
                      contains=(f"first_stage_layers={10 ** 18}", "at most 77 with pp*vpp=4"))
    assert_user_error("analytic", "--last-stage-layers", 78, contains=("last_stage_layers=78", "at most 77"))


@pytest.mark.quick
def test_analytic_honours_zero_and_stage_split():
    z0, z3 = (cli_json("analytic", "--zero", z, "--recompute", "none") for z in (0, 3))
    psi = load_model("llama3-70b").params_total / 32  # TP8 x PP4
    assert z0["memory_gib"] - z3["memory_gib"] == pytest.approx(8 * psi / GiB)  # 16 psi against 16 psi / 2
    even, split = (cli_json("analytic", *flags) for flags in ((), ("--first-stage-layers", 17)))
    assert split["compute_s_per_stage"][1] / even["compute_s_per_stage"][1] == pytest.approx(21 / 20)


@pytest.mark.quick
def test_analytic_names_the_settings_it_does_not_model():
    code, out, err = cli("analytic", "--no-overlap-grad-reduce", "--jitter", 0.1)
    assert code == 0, err
    notes = [line for line in out.splitlines() if line.startswith("note: the closed form does not model")]
    assert len(notes) == 1 and "--no-overlap-grad-reduce" in notes[0] and "--jitter 0.1" in notes[0]
    assert cli_json("analytic", "--fp8", "--topology", "h100-ib")["not_modelled"].count("--fp8") == 1
    assert cli_json("analytic")["not_modelled"] == ""


@pytest.mark.quick
@pytest.mark.parametrize("flag, value, words", [
    ("--zero", "9", "9 must be a ZeRO stage: 0, 1, 2 or 3"),
    ("--zero", "1,4", "4 must be a ZeRO stage: 0, 1, 2 or 3"),
    ("--recompute", "bogus", "recompute = 'bogus': must be none, selective, full, auto or a layer count"),
    ("--mbs", "0", "0 must be >= 1"),
    ("--vpp", "0", "0 must be >= 1"),
    ("--vpp", "2", "--vpp 2: schedule 1f1b has no virtual stages"),
])
def test_search_checks_its_values_before_searching(flag, value, words):
    assert_user_error("search", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 8, "--seq", 2048,
                      "--gbs", 16, flag, value, contains=(words,))


@pytest.mark.quick
def test_config_keys_and_flags_share_the_checks(tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('zero = 9\n')
    assert_user_error("run", "--config", cfg, contains=("zero = 9: must be a ZeRO stage: 0, 1, 2 or 3",))
    assert_user_error("run", "--zero", 9, contains=("--zero: 9 must be a ZeRO stage: 0, 1, 2 or 3",))
    cfg.write_text('recompute = "bogus"\n')
    assert_user_error("run", "--config", cfg, contains=("recompute = 'bogus'",))


@pytest.mark.quick
@pytest.mark.parametrize("argv", [("--costs", "-1,1,1"), ("--costs=-1,1,1",)])
def test_negative_values_reach_their_check(argv):
    assert_user_error("schedule", "1f1b", "--pp", 4, "--microbatches", 8, *argv,
                      contains=("invalid costs '-1,1,1': expected three numbers >= 0",))


def _out_of_range(setting):
    """A value of the setting's type just outside its rule."""
    for value in (0, -5, 9, 1.5, -1.0, 0.0):
        if isinstance(value, setting.flag_kind) and not setting.rule.test(value):
            return value
    raise AssertionError(f"no out-of-range value for {setting.name}")


@pytest.mark.parametrize("name", [n for n, s in SETTINGS.items() if s.rule is not None])
def test_a_config_key_and_its_flag_refuse_the_same_range(name, tmp_path):
    """One check for both: ``nodes = 0`` in a config file is refused as ``--nodes 0`` is, and
    ``max_events = -5`` as ``--max-events -5`` (a negative value reaches the flag's check)."""
    setting = SETTINGS[name]
    bad = _out_of_range(setting)
    cfg = tmp_path / "exp.toml"
    cfg.write_text(f"{name} = {json.dumps(bad)}\n")
    assert_user_error("run", "--config", cfg, contains=(f"{name} = {bad!r}: {setting.rule.phrase}",))
    assert_user_error("run", setting.cli_flags[0], str(bad), contains=(f"{bad} {setting.rule.phrase}",))
    with pytest.raises(SpecError, match=re.escape(f"{name} = {bad!r}: {setting.rule.phrase}")):
        api.resolve({name: bad})


SMALL = ("--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 16, "--tp", 8, "--pp", 2, "--gbs", 4,
         "--seq", 2048, "--no-plot")


@pytest.mark.quick
def test_a_forced_collective_algorithm_changes_the_prices_where_it_applies(tmp_path):
    """Without sequence parallelism TP all-reduces inside a node, where NCCL's tuner does not offer
    its tree: forcing it there is slower; with sequence parallelism the run has no all-reduce but
    the step-end gradient norm's, where the tuner already takes the tree."""
    tuned, tree = (cli_json("run", *SMALL, "--no-sp", "--out", tmp_path / str(i), *flags)
                   for i, flags in enumerate(((), ("--collective-algo", "tree"))))
    assert tree["breakdown_s"]["tp"] > 2 * tuned["breakdown_s"]["tp"]


@pytest.mark.quick
def test_a_forced_collective_algorithm_that_runs_nowhere_is_refused_as_collective_refuses_it():
    words = "algorithm 'nvls' is off: topology seed-h100 has no NVLink SHARP"
    assert_user_error("collective", "all-reduce", "--size", "1G", "--gpus", 8, "--topology", "seed-h100",
                      "--algo", "nvls", contains=(words,))
    assert_user_error("run", "--no-sp", "--collective-algo", "nvls", "--no-plot", "--out", "unused",
                      contains=("--collective-algo nvls: runs none of this run's collectives", "implements all-reduce",
                                words))
    assert_user_error("run", *SMALL, "--pp", 1, "--gpus", 8, "--collective-algo", "hierarchical", "--out", "unused",
                      contains=("--collective-algo hierarchical: runs none", "needs a group on >= 2 nodes"))
    assert_user_error("run", *SMALL, "--network", "none", "--collective-algo", "ring", "--out", "unused",
                      contains=("--collective-algo ring: --network none makes communication free",))


@pytest.mark.quick
def test_recompute_modules_are_refused_in_one_line():
    assert_user_error("run", "--recompute-modules", "mlp", contains="recompute_modules='mlp' with recompute='none'")
    assert_user_error("run", "--recompute", "selective", "--recompute-modules", "mlp,attn",
                      contains=("recompute_modules = 'mlp,attn'", "core_attn, mlp, moe"))
    assert_user_error("run", "--recompute", "selective", "--recompute-modules", "moe_act",
                      contains="llama3-70b has no moe_act module")
