"""Fuzzing the command line: every flag of every command, read from the argparse parsers (so a new
flag is fuzzed without a change here), and every ``--config`` key, gets generated values: valid,
boundary, huge, negative, NaN and infinity, empty, garbage text and hostile files (a link to
/dev/zero, binary data, 100,000 nested brackets, 5,000-digit integers; a torchtitan job, a
launch script and a calibration table holding values the importers and the table refuse). Each
invocation must end
with exit status 0 or 2, at most one ``simtrain: error:`` line of bounded length on stderr, never a
traceback, within a time limit, and with only finite numbers in its JSON output and report.json.

The scenarios are small (a two-layer model on 8 GPUs, ``--max-events 2000``) and a search's worker
pool and dask cluster are replaced by running the candidates inline, so the thousands of
invocations take about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from helpers import cli
from simtrain.layout_search import executors
from simtrain.cli.main import build_parser
from simtrain.settings import OUTPUTS, SETTINGS

#: Invocations per command; the sum is the number of generated invocations (at least 2,000).
EXAMPLES = {"run": 330, "analytic": 200, "compare": 120, "search": 120, "whatif": 80, "collective": 220,
            "schedule": 240, "topology": 140, "mesh": 160, "list": 20, "calibrate": 60}
CONFIG_EXAMPLES = 360
#: Limits on what one invocation may do.
INVOCATION_LIMIT_S = 20.0
MAX_ERROR_LINE = 2000  # characters of the one "simtrain: error:" line
MAX_STDERR = 20_000  # characters of stderr in all (a schedule's error may add its grid)
# No shrinking: a failure reports the invocation that failed, at once.
FUZZ = dict(deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                                   HealthCheck.function_scoped_fixture])

TINY_MODEL = """hidden = 256
layers = 2
heads = 4
kv_heads = 4
ffn = 1024
vocab = 1000
"""
SCENARIO = {"model": "{tiny}", "topology": "h100-ib", "gpus": 8, "tp": 2, "pp": 2, "gbs": 4, "seq": 256,
            "max_events": 2000}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


PARSERS = _subcommands()


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def _exclusive(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """dest -> the dests it excludes (argparse mutually exclusive groups)."""
    out: dict[str, set[str]] = {}
    for group in parser._mutually_exclusive_groups:
        dests = {a.dest for a in group._group_actions}
        for d in dests:
            out.setdefault(d, set()).update(dests - {d})
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Hostile and valid input files, and output paths, by name."""
    d = tmp_path_factory.mktemp("fuzz")
    out: dict[str, str] = {}

    def put(name: str, content: str | bytes) -> None:
        p = d / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        out[name] = str(p)

    put("tiny.toml", TINY_MODEL)
    put("titan.toml", '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ntensor_parallel_degree = 2\n'
        'pipeline_parallel_degree = 2\ndata_parallel_shard_degree = -1\nmodule_fqns_per_model_part = [1, 2]\n'
        '[training]\nlocal_batch_size = 2\nbatch_size = 2\nseq_len = 256\n')
    put("launch.sh", "TP=0\nA0=xx\n" + "".join(f"A{i + 1}=$A{i}$A{i}\n" for i in range(24)) +
        "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --tensor-model-parallel-size $TP "
        "--num-layers-per-virtual-pipeline-stage 3 --recompute-method bogus --x $A24\n")
    put("calibration-fast.csv", "kind,shape,dtype,time_us\ngemm,1x256x256x256,bf16,1e-6\n"
        "attention_forward,0x256x256x64x64x1,bf16,1\ngemm,1x256x256x256,bf16,2\n")
    put("binary.toml", bytes(range(256)) * 8)
    put("nul.toml", b"gpus = 8\x00\n")
    put("deep.toml", "a = " + "[" * 100_000)
    put("deep.json", "[" * 100_000)
    put("digits.toml", "gpus = " + "9" * 5000 + "\n")
    put("digits.json", '{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}")
    put("big-int.toml", "gpus = " + "9" * 40 + "\n")
    put("hf.json", json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 1000}))
    put("hf-huge.json", json.dumps({"model_type": "llama", "hidden_size": 2**62, "num_hidden_layers": 2,
                                    "num_attention_heads": 4, "intermediate_size": 1e300, "vocab_size": 1000}))
    put("nan.json", '{"model_type": "llama", "hidden_size": NaN}')
    put("config.toml", "\n".join(f"{k} = {json.dumps(v)}" for k, v in SCENARIO.items())
        .replace("{tiny}", out["tiny.toml"]) + "\n")
    put("ok.csv", "0F0,0F1,0B0,0B1\n,1F0,1B0,1F1,1B1\n")
    put("huge-index.csv", "99999999F0,99999999B0\n")
    put("digits.csv", "0F" + "9" * 5000 + "\n")
    put("binary.csv", bytes(range(256)) * 8)
    put("calibration.csv", "kind,shape,dtype,time_us\ngemm,1x256x256x256,bf16,10.5\n")
    put("calibration-huge.csv", "kind,shape,dtype,time_us\ngemm,1x" + "9" * 40 + "x256x256,bf16,1e308\n")
    put("topo-fast.toml", 'gpu = "h100-sxm"\nnodes = 1\n[node]\ngpus = 8\nnvlink_GBps = 1e308\n')
    put("topo-slow.toml", 'gpu = "h100-sxm"\nnodes = 2\n[node]\ngpus = 8\nnic_gbps = 400\n'
        '[fabric]\nkind = "fat-tree"\nnodes_per_leaf = 1\nspines = 1\nswitch_latency_us = 1e308\n')
    put("report.json", json.dumps({"links": {"utilisation_by_link": {"leaf0->spine0": "x"}}}))
    put("a-file", "not a folder")
    zero = d / "zero.toml"
    if os.path.exists("/dev/zero"):
        zero.symlink_to("/dev/zero")
        out["zero.toml"] = str(zero)
    (d / "folder.png").mkdir()
    out["folder.png"] = str(d / "folder.png")
    out["folder"] = str(d)
    out["missing.toml"] = str(d / "missing" / "x.toml")
    out["missing-dir.png"] = str(d / "missing" / "dir" / "x.png")
    out["out"] = str(d / "out")
    out["gantt.png"] = str(d / "gantt.png")
    out["under-file"] = str(d / "a-file" / "sub")
    out["results.jsonl"] = str(d / "results.jsonl")
    out["calibration-out.csv"] = str(d / "calibration-out.csv")
    return out


# Realistic large scales (100,000 GPUs) are the benchmarks' business; here numbers are small, at the
# edges of float and int arithmetic, or far beyond what the work estimates accept.
NUMBERS = ["0", "1", "2", "3", "4", "8", "16", "-1", "-3", "100", str(10**18), "9" * 30, "9" * 5000,
           "1e308", "1e400", "5e-324", "-0", "0.5", "1.5", "1e-9", "nan", "inf", "-inf", "0x10", "1_6"]
LISTS = ["1,2", "1,1,1", "0,0,0", "-1,1,1", "1e308,1e308,1e308", "1,nan,1", ",", "1,,2", "0:1", "mb:0:2",
         "mb:5:1", "0-3:a100-80g", "leaf0-spine0:0.5", "0:0.8,1", "0.5:0.7", "a=1", "nic_gbps=1,2",
         "spines=1000000000", "h100-ib=2", "x" * 10_000]
PATHS = ["tiny.toml", "titan.toml", "launch.sh", "calibration-fast.csv", "binary.toml", "nul.toml", "deep.toml",
         "deep.json", "digits.toml", "digits.json", "big-int.toml", "hf.json", "hf-huge.json", "nan.json", "config.toml", "ok.csv", "huge-index.csv",
         "digits.csv", "binary.csv", "calibration.csv", "calibration-huge.csv", "topo-fast.toml",
         "topo-slow.toml", "report.json", "a-file", "zero.toml", "folder.png", "folder", "missing.toml",
         "missing-dir.png", "gantt.png", "under-file"]
SPECIAL_PATHS = ["/dev/null", "/proc/simtrain-x", "/proc"]
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24)


def _valid(action: argparse.Action) -> list[str]:
    """Values that pass the flag's own check: its choices, its setting's default, its default."""
    out = [str(c) for c in (action.choices or ())]
    setting = SETTINGS.get(action.dest) or OUTPUTS.get(action.dest)
    for value in (getattr(setting, "default", None), action.default):
        if value is not None and not isinstance(value, (bool, tuple, list)):
            out.append(str(value))
        elif isinstance(value, (tuple, list)) and value:
            out.append(",".join(map(str, value)))
    return out


def values(action: argparse.Action, files: dict[str, str]) -> st.SearchStrategy[str]:
    """Generated text for one flag's value."""
    paths = [files[p] for p in PATHS if p in files] + SPECIAL_PATHS
    valid = _valid(action)
    return st.one_of(
        *([st.sampled_from(valid)] if valid else []),
        st.sampled_from(NUMBERS),
        st.integers(-5, 64).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.sampled_from(LISTS),
        st.sampled_from(paths),
        st.just(""),
        TEXT,
    )


def _bases(files: dict[str, str]) -> dict[str, tuple[list[str], dict[str, str | None]]]:
    """Per command: the positional arguments and the flags of a small valid invocation."""
    tiny, out = files["tiny.toml"], files["out"]
    scenario = {"--model": tiny, "--topology": "h100-ib", "--gpus": "8", "--tp": "2", "--pp": "2",
                "--gbs": "4", "--seq": "256", "--max-events": "2000"}
    search = {"--model": tiny, "--topology": "h100-ib", "--gpus": "8", "--seq": "256", "--gbs": "4", "--top": "1",
              "--jobs": "1"}
    return {
        "run": ([], {**scenario, "--no-plot": None, "--out": out}),
        "analytic": ([], dict(scenario)),
        "compare": ([], dict(scenario)),
        "calibrate": ([], {**scenario, "--out": files["calibration-out.csv"]}),
        "search": ([], search),
        "whatif": ([], {**{k: v for k, v in search.items() if k != "--topology"}, "--topologies": "h100-ib",
                        "--train-tokens": "1000000000", "--no-plot": None, "--out": out}),
        "collective": (["all-reduce"], {"--size": "1M", "--gpus": "8", "--topology": "h100-ib", "--nodes": "1"}),
        "schedule": (["1f1b"], {"--pp": "4", "--microbatches": "8"}),
        "topology": (["h100-ib"], {"--nodes": "2"}),
        "mesh": ([], {"--gpus": "8", "--tp": "2", "--pp": "2"}),
        "list": (["models"], {}),
    }


class TooSlow(BaseException):
    """An invocation ran past :data:`INVOCATION_LIMIT_S`."""


def _alarm(signum, frame):
    raise TooSlow()


def _no_constant(name: str):
    raise AssertionError(f"non-finite number {name} in JSON output")


def check_invocation(argv: list[str], out_dir: str | None = None) -> tuple[int, str, str]:
    """Run ``argv`` in-process and assert the CLI's contract (module docstring); the time limit
    is a POSIX interval timer (none where there is no ``setitimer``), the test's own timer
    resumed afterwards."""
    if not hasattr(signal, "setitimer"):  # pragma: no cover - not POSIX
        code, out, err = cli(*argv)
        return _check_result(argv, out_dir, code, out, err)
    previous_handler = signal.signal(signal.SIGALRM, _alarm)
    previous_timer = signal.setitimer(signal.ITIMER_REAL, INVOCATION_LIMIT_S)
    started = time.monotonic()
    try:
        code, out, err = cli(*argv)
    except TooSlow:
        raise AssertionError(f"ran past {INVOCATION_LIMIT_S} s: {argv}") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_timer[0]:
            signal.setitimer(signal.ITIMER_REAL, max(0.001, previous_timer[0] - (time.monotonic() - started)))
    return _check_result(argv, out_dir, code, out, err)


def _check_result(argv: list[str], out_dir: str | None, code: int, out: str, err: str) -> tuple[int, str, str]:
    shown = [a[:100] for a in argv]
    assert code in (0, 2), (shown, code, err[-3000:])
    assert "Traceback" not in err, (shown, err[-3000:])
    errors = [line for line in err.splitlines() if line.startswith("simtrain: error:")]
    assert len(errors) <= 1, (shown, err[:3000])
    assert len(err) <= MAX_STDERR, (shown, len(err), err[:500])
    if code == 2:
        assert len(errors) == 1 and err.startswith("simtrain: error:"), (shown, err[:3000])
        assert len(errors[0]) <= MAX_ERROR_LINE, (shown, len(errors[0]), errors[0][:500])
    if code == 0 and "--json" in argv and out.strip():
        json.loads(out, parse_constant=_no_constant)
    report = Path(out_dir or "", "report.json")
    if code == 0 and out_dir and report.exists():
        json.loads(report.read_text(encoding="utf-8"), parse_constant=_no_constant)
    return code, out, err


def _inline(fn, todo, jobs, *rest):
    for item in todo:
        yield item, fn(item)


class FakeTimer:
    """Stands for :class:`simtrain.costs.measure.TorchTimer`: every kernel takes 10 us."""

    device = "a stand-in timer"

    def __init__(self, device: str = "cuda", warmup: int = 3, repeat: int = 10):
        pass

    def __call__(self, kernel) -> float:
        return 10e-6


@pytest.fixture
def cheap(monkeypatch, files):
    """Search candidates run inline (no worker pool, no dask cluster); calibration uses a
    stand-in timer; relative output paths land in the fuzzing's own folder."""
    import simtrain.costs.measure as measure

    monkeypatch.chdir(files["folder"])
    monkeypatch.setattr(executors, "_run_pool", lambda fn, todo, jobs: _inline(fn, todo, jobs))
    monkeypatch.setattr(executors, "_run_dask", _inline)
    monkeypatch.setattr(measure, "TorchTimer", FakeTimer)


@st.composite
def invocation(draw, command: str, files: dict[str, str]) -> list[str]:
    """The base invocation of ``command`` with one to three flags (or a positional) replaced."""
    parser = PARSERS[command]
    positionals, flags = _bases(files)[command]
    positionals = list(positionals)
    flags = dict(flags)
    exclusive = _exclusive(parser)
    actions = _flags(parser)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(actions))
        if not action.option_strings:  # a positional
            index = [a for a in actions if not a.option_strings].index(action)
            if index < len(positionals):
                positionals[index] = draw(values(action, files))
            continue
        for other in exclusive.get(action.dest, ()):
            for a in actions:
                if a.dest == other:
                    for flag in a.option_strings:
                        flags.pop(flag, None)
        flag = draw(st.sampled_from(action.option_strings))
        flags[flag] = None if action.nargs == 0 else draw(values(action, files))
    if any("--json" in a.option_strings for a in actions) and draw(st.booleans()):
        flags.setdefault("--json", None)  # half the invocations print JSON, checked for finite numbers
    argv = [command, *positionals]
    for flag, value in flags.items():
        if value is None:
            argv.append(flag)
        elif value.startswith("-") and draw(st.booleans()):
            argv.append(f"{flag}={value}")
        else:
            argv += [flag, value]
    return argv


def _out_dir(argv: list[str]) -> str | None:
    for i, a in enumerate(argv[:-1]):
        if a == "--out":
            return argv[i + 1]
    return None


@pytest.mark.quick
def test_enough_invocations():
    assert sum(EXAMPLES.values()) + CONFIG_EXAMPLES >= 2000
    assert set(EXAMPLES) == set(PARSERS)  # a new command needs its base invocation and its share


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_every_flag_of_every_command(command, files, cheap):
    @settings(max_examples=EXAMPLES[command], **FUZZ)
    @given(st.data())
    def fuzz(data):
        argv = data.draw(invocation(command, files))
        check_invocation(argv, _out_dir(argv))

    fuzz()


def toml_value(value) -> str:
    """``value`` in TOML (strings, bools, numbers incl. nan/inf, arrays, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if value != value else ("inf" if value > 0 else "-inf") if abs(value) == float("inf") else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


TOML_SCALARS = st.one_of(st.integers(-10, 64), st.sampled_from([0, -1, 2**63 - 1, 2**63, 10**30, 10**4000]),
                         st.floats(allow_nan=True, allow_infinity=True), st.booleans(), TEXT,
                         st.sampled_from(["none", "auto", "full", "flow", "1f1b", "zb-h1", "h100-ib", ""]))
TOML_VALUES = st.one_of(TOML_SCALARS, st.lists(TOML_SCALARS, max_size=3),
                        st.dictionaries(st.sampled_from(["a", "gpus"]), TOML_SCALARS, max_size=2))


@settings(max_examples=CONFIG_EXAMPLES, **FUZZ)
@given(data=st.data())
def test_every_config_key(files, cheap, data):
    """A ``--config`` file with one key of the settings table (or an unknown one) set to a
    generated TOML value, on top of the small scenario."""
    keys = sorted([*SETTINGS, *OUTPUTS]) + ["unknown_key"]
    key = data.draw(st.sampled_from(keys))
    value = data.draw(st.one_of(TOML_VALUES, st.sampled_from([files[p] for p in PATHS if p in files])))
    table = {**{k: v for k, v in SCENARIO.items()}, "model": files["tiny.toml"], "out": files["out"],
             "plot": False, key: value}
    command = data.draw(st.sampled_from(["run", "analytic", "compare"]))
    path = Path(files["folder"]) / "fuzz-config.toml"
    path.write_text("\n".join(f"{k} = {toml_value(v)}" for k, v in table.items()) + "\n", encoding="utf-8")
    try:
        check_invocation([command, "--config", str(path), *(["--json"] if data.draw(st.booleans()) else [])],
                         files["out"] if command == "run" else None)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; config {key} = {toml_value(value)[:200]}") from None


# ---- the cases the fuzzing grew from: each one line and exit 2, before any work ------------------

SMALL = ("--model", "llama3-8b", "--topology", "h100-ib", "--gpus", "8", "--tp", "2", "--pp", "2", "--gbs", "8",
         "--seq", "512", "--no-plot")


@pytest.mark.quick
def test_numbers_beyond_float_arithmetic_are_refused(tmp_path):
    from helpers import assert_user_error

    assert_user_error("collective", "all-reduce", "--size", "1e400", "--gpus", 8, "--topology", "h100-ib",
                      contains="size '1e400': more than 1,152,921,504,606,846,976 bytes (1 EiB)")
    # 5e-324 (the smallest float) as the efficiency: every kernel takes 1e300+ s, sums overflow to inf
    assert_user_error("run", *SMALL, "--efficiency", "5e-324", "--out", tmp_path / "o",
                      contains=("start_s = inf is not a finite number", "realistic range"))
    assert not (tmp_path / "o" / "report.json").exists()
    assert_user_error("schedule", "zb-h1", "--pp", 4, "--microbatches", 8, "--costs", "1e308,1e308,1e308",
                      contains="--costs 1e+308,1e+308,1e+308: each cost must be at most 1e+15")
    assert_user_error("schedule", "zb-h1", "--pp", 4, "--microbatches", 8, "--costs", "0,0,0",
                      contains="--costs 0,0,0: F and I must be > 0")
    assert_user_error("schedule", "1f1b", "--pp", 4, "--microbatches", 8, "--comm", "1e300",
                      contains="--comm 1e+300: must be at most 1e+15")
    assert_user_error("search", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 8, "--seq", 512,
                      "--gbs", 8, "--jobs", 10**18, contains="--jobs: 1000000000000000000 must be from 1 to 4,096")
    assert_user_error("run", *SMALL, "--jitter", "1e308", contains="--jitter: 1e+308 must be from 0 to 100")


@pytest.mark.quick
def test_topology_keys_beyond_their_range(tmp_path):
    from helpers import assert_user_error

    fast = tmp_path / "fast.toml"
    fast.write_text('gpu = "h100-sxm"\nnodes = 1\n[node]\ngpus = 8\nnvlink_GBps = 1e308\n')
    assert_user_error("topology", fast, contains="nvlink_GBps = 1e+308: must be at most 1e+06")
    slow = tmp_path / "slow.toml"
    slow.write_text('gpu = "h100-sxm"\nnodes = 2\n[node]\ngpus = 8\nnic_gbps = 400\n[fabric]\n'
                    'kind = "fat-tree"\nnodes_per_leaf = 1\nspines = 1\nswitch_latency_us = 1e308\n')
    assert_user_error("run", *SMALL, "--topology", slow, contains="switch_latency_us = 1e+308: must be at most 1e+06")
    seed = tmp_path / "seed.toml"
    seed.write_text("routing_seed = -3\n")
    assert_user_error("run", "--config", seed, contains="routing_seed = -3: must be >= 0")


@pytest.mark.quick
def test_output_paths_are_checked_before_the_run(tmp_path):
    from helpers import assert_user_error

    afile = tmp_path / "afile"
    afile.write_text("x")
    assert_user_error("run", *SMALL, "--out", afile, contains=f"--out {afile}: is not a folder")
    assert_user_error("run", *SMALL, "--out", afile / "sub", contains=f"cannot be created: {afile} is not a folder")
    missing = tmp_path / "missing" / "dir" / "x.png"
    assert_user_error("schedule", "1f1b", "--pp", 2, "--microbatches", 2, "--gantt", missing,
                      contains=f"the folder {missing.parent} does not exist; create it first")
    folder = tmp_path / "pic.png"
    folder.mkdir()
    assert_user_error("schedule", "1f1b", "--pp", 2, "--microbatches", 2, "--gantt", folder, contains="is a folder")
    assert_user_error("topology", "h100-ib", "--draw", tmp_path / "no" / "t.png", contains="does not exist")
    assert_user_error("calibrate", "--out", tmp_path / "no" / "c.csv", contains="does not exist")
    assert_user_error("run", *SMALL, "--out", "", contains="--out '': empty")
    if os.path.exists("/dev/null"):
        assert_user_error("run", *SMALL, "--out", "/dev/null", contains="--out /dev/null: is not a folder")
    assert not any(p.name.startswith(".simtrain-probe") for p in tmp_path.rglob("*"))


@pytest.mark.quick
def test_a_read_only_folder_is_refused(tmp_path):
    from helpers import assert_user_error
    from simtrain.cli.types import check_output_folder

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        probe = folder / "x"
        try:
            probe.write_text("x")  # root may write anyway: then there is nothing to refuse
            probe.unlink()
            pytest.skip("this user can write into a read-only folder")
        except PermissionError:
            pass
        with pytest.raises(Exception, match="cannot write into"):
            check_output_folder(str(folder / "out"))
        assert_user_error("run", *SMALL, "--out", folder / "out", contains="Permission denied")
    finally:
        folder.chmod(0o755)


@pytest.mark.quick
def test_matplotlib_cache_goes_to_a_private_temporary_folder(tmp_path, monkeypatch):
    import stat as stat_

    from simtrain.cli.main import matplotlib_config_dir

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    env: dict[str, str] = {}
    folder = matplotlib_config_dir(env)
    assert env["MPLCONFIGDIR"] == folder and folder.startswith(str(tmp_path))
    assert stat_.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert matplotlib_config_dir({"MPLCONFIGDIR": "/given"}) == "/given"
    os.chmod(folder, 0o777)  # not private any more: a fresh folder is made
    other = matplotlib_config_dir({})
    assert other != folder and stat_.S_IMODE(os.stat(other).st_mode) == 0o700


@pytest.mark.quick
def test_error_lines_are_bounded():
    from helpers import assert_user_error
    from simtrain.cli.main import MAX_LINE, bounded

    line = assert_user_error("mesh", "--gpus", "x" * 100_000)
    assert len(line) < 300 and "..." in line
    line = assert_user_error("run", "--out", "/proc/" + "y" * 5000, "--gpus", "8")
    assert len(line) < 400
    assert len(bounded("word " * 10_000)) == MAX_LINE
    many = bounded("first\n" + "\n".join(f"rank {i}" for i in range(1000)))
    assert many.count("\n") == 61 and many.endswith("... (940 more lines)")
