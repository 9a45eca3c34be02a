"""Fuzzing every loader: random and mutated inputs load or raise the project's error, never
anything else (hypothesis)."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings, strategies as st

from simtrain import api
from simtrain.errors import SimtrainError
from simtrain.schedules import schedule_from_csv, validate
from simtrain.specs.model import model_from_hf_config, model_from_table
from simtrain.specs.strict import Table, parse_toml
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
