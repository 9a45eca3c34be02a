"""`simtrain run`: default scenario, outputs, determinism, the JSON contract, user errors, and the
settings table its flags and --config keys come from."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from helpers import assert_user_error, cli
from simtrain import api
from simtrain.cli.main import build_parser
from simtrain.errors import SpecError
from simtrain.metrics import BREAKDOWN
from simtrain.settings import DEFAULT_SCENARIO, SETTINGS, complete

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")

REQUIRED = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "bubble_ratio",
            "breakdown_s", "exposed_comm_s", "overlapped_comm_s", "peak_memory_gib",
            "fits_in_memory", "num_events", "wall_s", "config")


def run_json(*argv):
    code, out, err = cli("run", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_default_scenario_text_and_files(tmp_path):
    code, out, err = cli("run", "--out", tmp_path)
    assert code == 0, err
    assert "step time" in out and "bubble" in out and "MFU" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["breakdown_s"]["bubble"] > 0  # the default shows bubbles,
    assert report["overlapped_comm_s"]["dp"] > 0  # overlap,
    assert report["breakdown_s"]["imbalance"] > 0  # and the LM head's imbalance
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    assert any(e["ph"] == "X" for e in events)
    assert {e["ph"] for e in events} >= {"M", "X", "s", "f"}
    png = (tmp_path / "timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 0 and height > 0


def test_gantt_rows_cover_every_simulated_rank(tmp_path):
    from simtrain import api
    from simtrain.outputs.gantt import gantt_rows

    result = api.simulate(api.resolve(None))
    rows = gantt_rows(result.timeline)
    assert sorted({rank for rank, _ in rows}) == result.timeline.ranks
    assert len(result.timeline.ranks) == result.report["simulated_ranks"] == 4


def test_json_contract(tmp_path):
    rep = run_json("--no-plot", "--out", tmp_path)
    for key in REQUIRED:
        assert key in rep
    assert set(rep["breakdown_s"]) == set(BREAKDOWN)
    assert sum(rep["breakdown_s"].values()) == pytest.approx(rep["step_time_s"], rel=1e-9)
    assert len(rep["peak_memory_gib"]) == rep["config"]["pp"]


def test_report_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        assert cli("run", "--out", d, "--no-plot")[0] == 0
    assert (a / "report.json").read_bytes() == (b / "report.json").read_bytes()
    assert (a / "trace.json").read_bytes() == (b / "trace.json").read_bytes()


def test_config_file_and_flag_override(tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('model = "llama3-8b"\ntopology = "h100-ib"\ngpus = 16\ntp = 2\npp = 2\n'
                   'gbs = 16\nseq = 2048\n')
    rep = run_json("--config", cfg, "--pp", 4, "--no-plot", "--out", tmp_path / "o")
    assert rep["config"]["model"] == "llama3-8b"
    assert rep["config"]["pp"] == 4 and rep["config"]["dp"] == 2


def test_seed_70b_command(tmp_path):
    rep = run_json("--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64, "--tp", 8,
                   "--pp", 4, "--dp", 2, "--seq", 8192, "--gbs", 512, "--schedule", "1f1b",
                   "--no-plot", "--out", tmp_path)
    assert 0.3 < rep["mfu"] < 0.6
    assert rep["num_microbatches"] == 256


def test_user_errors(tmp_path):
    assert_user_error("run", "--tp", 3, "--gpus", 8, contains=("tp=3",))
    assert_user_error("run", "--gpus", 64, "--tp", 8, "--pp", 4, "--schedule", "1f1c",
                      contains=("unknown schedule '1f1c'", "1f1b"))
    assert_user_error("run", "--gpus", 64, "--tp", 8, "--pp", 4, "--gbs", 4,
                      contains=("fewer than pp=4",))
    assert_user_error("run", "--gpus", 640, "--nodes", 8, contains=("gpus=640 exceeds",))
    assert_user_error("run", "--network", "flo", contains=("network", "analytic"))
    assert_user_error("run", "--efficiency", 1.5, contains=("--efficiency",))
    bad = tmp_path / "bad.toml"
    bad.write_text("tp = 8\nppp = 2\n")
    assert_user_error("run", "--config", bad, contains=("unknown key 'ppp'", "did you mean 'pp'"))
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('tp = "eight"\n')
    assert_user_error("run", "--config", wrong, contains=("tp", "'eight'", "int"))


# ---- the settings table: one flag, one TOML key and one README row per setting -----------------

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


@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_setting_is_a_run_flag_a_config_key_and_documented(name, tmp_path):
    setting = SETTINGS[name]
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


def test_default_scenario_under_options_only():
    s = complete({"schedule": "zb-v"})
    assert {k: s[k] for k in DEFAULT_SCENARIO if k != "schedule"} == \
        {k: v for k, v in DEFAULT_SCENARIO.items() if k != "schedule"}
    assert complete({"gpus": 8})["tp"] == SETTINGS["tp"].default  # a scenario key: table defaults
    with pytest.raises(SpecError, match="unknown setting 'ppp'"):
        complete({"ppp": 2})


def test_library_functions_print_nothing(capfd, tmp_path):
    """Printing is the command line's business: the API returns values and writes files only."""
    from simtrain.analytic.model import estimate

    sc = api.resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 8, "tp": 2, "pp": 2, "seq": 2048,
                      "gbs": 8, "recompute": "auto"})
    result = api.simulate(sc)
    api.write_outputs(result, tmp_path, plot=False)
    estimate(sc.model, sc.cluster, sc.parallel)
    assert capfd.readouterr() == ("", "")
