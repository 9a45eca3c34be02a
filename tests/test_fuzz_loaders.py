"""Fuzzing every loader: random and mutated inputs load or raise the project's error, never
anything else (hypothesis); hostile files (a link to /dev/zero, binary data, deep nesting, huge
integers and indices) end at once with one short line."""

from __future__ import annotations

import json
import os
import string
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import assert_user_error
from simtrain import api
from simtrain.costs.calibration import read_calibration
from simtrain.errors import SimtrainError, SpecError
from simtrain.schedules import read_schedule_csv, schedule_from_csv, validate
from simtrain.specs.model import load_model, model_from_hf_config, model_from_table
from simtrain.specs.strict import (MAX_INT, Table, check_value, parse_json, parse_toml, read_json, read_text,
                                   read_toml, shown)
from simtrain.topology.cluster import build_topology

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.integers(-10**6, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.text(max_size=12), st.none())
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)

TOPOLOGY = {"name": "t", "gpu": "h100-sxm", "nodes": 4,
            "node": {"gpus": 8, "nvlink_GBps": 450, "nic_gbps": 400, "pcie_GBps": 64},
            "fabric": {"kind": "fat-tree", "tiers": 2, "nodes_per_leaf": 2, "spines": 2,
                       "oversubscription": 1.0}}
MODEL = {"hidden": 1024, "layers": 4, "heads": 8, "kv_heads": 8, "ffn": 4096, "vocab": 32000,
         "gated_mlp": True, "num_experts": 0, "top_k": 0}
HF = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
      "num_key_value_heads": 8, "intermediate_size": 4096, "vocab_size": 32000, "tie_word_embeddings": False}
EXPERIMENT = {"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2, "gbs": 8,
              "seq": 1024, "schedule": "1f1b"}


def mutate(base: dict, data) -> dict:
    """Drop, retype or add keys (also inside nested tables)."""
    out = json.loads(json.dumps(base))
    for _ in range(data.draw(st.integers(1, 3))):
        target = out
        tables = [k for k, v in out.items() if isinstance(v, dict)]
        if tables and data.draw(st.booleans()):
            target = out[data.draw(st.sampled_from(tables))]
        action = data.draw(st.sampled_from(["drop", "set", "add"]))
        keys = list(target)
        if action == "drop" and keys:
            target.pop(data.draw(st.sampled_from(keys)))
        elif action == "set" and keys:
            target[data.draw(st.sampled_from(keys))] = data.draw(values)
        else:
            target[data.draw(st.text(string.ascii_lowercase + "_", min_size=1, max_size=10))] = data.draw(values)
    return out


def only_our_errors(fn, *args):
    try:
        fn(*args)
    except SimtrainError:
        pass


@FUZZ
@given(st.data())
def test_topology_loader(data):
    only_our_errors(build_topology, mutate(TOPOLOGY, data), "fuzz.toml")


@FUZZ
@given(st.dictionaries(st.text(max_size=10), values, max_size=6))
def test_topology_loader_random(table):
    only_our_errors(build_topology, table, "fuzz.toml")


@FUZZ
@given(st.data())
def test_model_toml_loader(data):
    only_our_errors(lambda t: model_from_table(Table(t, "fuzz.toml"), "fuzz"), mutate(MODEL, data))


@FUZZ
@given(st.data())
def test_hf_config_loader(data):
    base = dict(HF, model_type=data.draw(st.sampled_from(
        ["llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3", "gpt2", "gpt_neox", "bert"])))
    only_our_errors(model_from_hf_config, mutate(base, data), "config.json")


@FUZZ
@given(st.data())
def test_experiment_settings(data):
    settings_ = mutate(EXPERIMENT, data)

    def resolve(s):
        api.resolve(s)

    only_our_errors(resolve, settings_)


@pytest.mark.quick
@FUZZ
@given(st.text(max_size=200))
def test_toml_text(text):
    only_our_errors(parse_toml, text, "fuzz.toml")


cells = st.one_of(st.from_regex(r"\A[0-3][FIWB][0-3]\Z"), st.from_regex(r"\A[0-3]F[0-3]&[0-3]B[0-3]\Z"),
                  st.text(max_size=4))


@FUZZ
@given(st.lists(st.lists(cells, max_size=8), max_size=4))
def test_schedule_csv(rows):
    text = "\n".join(",".join(r) for r in rows)

    def load(t):
        validate(schedule_from_csv(t, "fuzz.csv"))

    only_our_errors(load, text)


@FUZZ
@given(st.data())
def test_schedule_csv_mutated(data):
    from simtrain.schedules import generate, schedule_to_csv

    text = schedule_to_csv(generate(data.draw(st.sampled_from(["1f1b", "zb-h1", "zb-v", "interleaved-1f1b"])),
                                    4, 8, vpp=2))
    lines = text.splitlines()
    i = data.draw(st.integers(0, len(lines) - 1))
    cells_ = lines[i].split(",")
    j = data.draw(st.integers(0, len(cells_) - 1))
    cells_[j] = data.draw(cells)
    lines[i] = ",".join(cells_)

    def load(t):
        validate(schedule_from_csv(t, "fuzz.csv"))

    only_our_errors(load, "\n".join(lines))


def _toml_line(key: str, value) -> str | None:
    """One TOML line for a scalar (None, lists and tables are left out)."""
    if isinstance(value, bool):
        return f"{json.dumps(key)} = {'true' if value else 'false'}"
    if isinstance(value, (int, float)) and value == value and abs(value) != float("inf"):
        return f"{json.dumps(key)} = {value!r}"
    if isinstance(value, str):
        return f"{json.dumps(key)} = {json.dumps(value)}"
    return None


@FUZZ
@given(st.data())
def test_experiment_toml_file(data):
    import tempfile
    from pathlib import Path

    table = mutate(EXPERIMENT, data)
    lines = [line for k, v in table.items() if (line := _toml_line(k, v)) is not None]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "exp.toml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

        def load_and_resolve(p):
            api.resolve(api.load_config(p))

        only_our_errors(load_and_resolve, path)


# ---- hostile files: size, binary data, depth, huge integers, huge indices --------------------------

def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


@pytest.mark.quick
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_link_to_dev_zero_is_refused_after_the_cap(tmp_path):
    link = tmp_path / "zero.toml"
    link.symlink_to("/dev/zero")
    with pytest.raises(SpecError, match=r"zero.toml: larger than 64 MiB"):
        read_toml(link)
    with pytest.raises(SimtrainError, match=r"cannot read schedule CSV: larger than 16 MiB"):
        read_schedule_csv(link)
    line = assert_user_error("run", "--config", link, contains="larger than 64 MiB")
    assert len(line) < 200


@pytest.mark.quick
def test_the_cap_is_exact(tmp_path):
    """A file of exactly the cap is read; one byte more is refused."""
    path = _write(tmp_path, "a.txt", "x" * 1000)
    assert read_text(path, max_bytes=1000) == "x" * 1000
    with pytest.raises(SpecError, match="larger than 999 bytes"):
        read_text(path, max_bytes=999)


@pytest.mark.quick
def test_binary_input_is_one_line(tmp_path):
    path = _write(tmp_path, "b.toml", b"name = \"x\"\n\xff\xfe\x00")
    with pytest.raises(SpecError, match=r"b.toml: not UTF-8 text \(byte 0xff at offset 11\)"):
        read_toml(path)
    nul = _write(tmp_path, "n.toml", b"gpus = 8\x00")
    with pytest.raises(SpecError, match=r"n.toml: binary data \(a NUL byte at offset 8\)"):
        read_toml(nul)
    csv_path = _write(tmp_path, "s.csv", bytes(range(128, 256)))
    with pytest.raises(SimtrainError, match="not UTF-8 text"):
        read_schedule_csv(csv_path)
    assert_user_error("schedule", csv_path, "--pp", 1, "--microbatches", 1, contains="not UTF-8 text")


@pytest.mark.quick
def test_deep_nesting_and_huge_integers_are_one_line(tmp_path):
    for text in ("a = " + "[" * 100_000, "a = " + "{b=" * 100_000):
        with pytest.raises(SpecError, match="nested too deeply"):
            parse_toml(text, "deep.toml")
    with pytest.raises(SpecError, match="nested too deeply"):
        parse_json("[" * 100_000, "deep.json")
    digits = sys.get_int_max_str_digits()
    with pytest.raises(SpecError, match=f"an integer of more than {digits} digits"):
        parse_toml("gpus = " + "9" * 5000, "big.toml")
    with pytest.raises(SpecError, match=f"an integer of more than {digits} digits"):
        parse_json('{"hidden_size": ' + "9" * 5000 + "}", "config.json")
    with pytest.raises(SpecError, match="NaN is not a JSON number"):
        parse_json('{"hidden_size": NaN}', "config.json")
    config = _write(tmp_path, "deep.toml", "a = " + "[" * 100_000)
    assert_user_error("run", "--config", config, contains="nested too deeply")
    hf = _write(tmp_path, "config.json", "[" * 100_000)
    assert_user_error("run", "--model", hf, contains="nested too deeply")


@pytest.mark.quick
def test_integers_beyond_int64_are_refused_with_a_short_line():
    with pytest.raises(SpecError, match=r"out of range \(at most 9,223,372,036,854,775,807 in size\)"):
        check_value("gpus", MAX_INT + 1, int)
    assert check_value("gpus", MAX_INT, int) == MAX_INT
    with pytest.raises(SpecError) as info:
        check_value("nvlink_GBps", 10**4000, float)  # float(10**4000) would overflow
    assert len(str(info.value)) < 200
    with pytest.raises(SpecError, match="must be at most 10"):
        check_value("x", 11.0, float, max_value=10)


@pytest.mark.quick
def test_shown_cuts_long_values():
    assert shown("ab") == "'ab'"
    assert shown("x" * 200) == "'" + "x" * 76 + "..."
    assert len(shown("x" * 200)) == 80
    text = shown(2**20000)  # 6,021 digits: more than repr may print (int-string conversion limit)
    assert text == "<an integer of about 6021 digits>"


@pytest.mark.quick
def test_a_huge_stage_number_is_refused_before_building(tmp_path):
    """``99999999F0`` would need a hundred million stages: refused at once with a short line."""
    path = _write(tmp_path, "s.csv", "99999999F0,99999999B0\n")
    with pytest.raises(SimtrainError) as info:
        read_schedule_csv(path)
    msg = str(info.value)
    assert "stage 99999999 is beyond what the file's 2 actions can fill" in msg
    assert len(msg) < 300
    mb = _write(tmp_path, "m.csv", "0F0,0B0,0F99999999,0B99999999\n")
    with pytest.raises(SimtrainError, match="micro-batch 99999999 is beyond what the file's 4 actions"):
        read_schedule_csv(mb)
    digits = _write(tmp_path, "d.csv", "0F0,0F" + "9" * 5000 + "\n")
    with pytest.raises(SimtrainError, match="thousands of digits") as info:
        read_schedule_csv(digits)
    assert len(str(info.value)) < 300
    with pytest.raises(SimtrainError, match="10,000 micro-batches asked for, but the file has only 2 actions"):
        schedule_from_csv("0F0,0B0\n", "x.csv", num_microbatches=10_000)


@pytest.mark.quick
def test_missing_stages_are_listed_briefly():
    with pytest.raises(SimtrainError) as info:
        schedule_from_csv("0F0,0B0,900F0,900B0\n", "x.csv")
    msg = str(info.value)
    assert "stages 1, 2, 3, 4, 5, 6, 7, 8, ... (899 in all) appear in no cell" in msg


@pytest.mark.quick
def test_calibration_file_bounds(tmp_path):
    head = "kind,shape,dtype,time_us\n"
    huge = _write(tmp_path, "c.csv", head + "gemm,1x" + "9" * 20 + "x8x8,bf16,1.0\n")
    with pytest.raises(SpecError, match="numbers must be at most 2\\*\\*53"):
        read_calibration(huge)
    tiny = _write(tmp_path, "t.csv", head + "gemm,1x8x8x8,bf16,1e-320\n")
    with pytest.raises(SpecError, match="must be a finite number > 0"):
        read_calibration(tiny)
    long_kind = _write(tmp_path, "k.csv", head + "x" * 10_000 + ",1,bf16,1\n")
    with pytest.raises(SpecError) as info:
        read_calibration(long_kind)
    assert len(str(info.value)) < 300


@pytest.mark.quick
def test_hf_config_json_is_read_through_the_guarded_reader(tmp_path):
    path = _write(tmp_path, "config.json", '{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}")
    with pytest.raises(SpecError, match="config.json: malformed JSON: an integer of more than"):
        load_model(path)
    huge = _write(tmp_path, "huge.json", json.dumps(dict(HF, hidden_size=2**70)))
    with pytest.raises(SpecError, match="hidden_size = .*out of range"):
        load_model(huge)
    assert read_json(_write(tmp_path, "ok.json", "[1, 2]")) == [1, 2]
