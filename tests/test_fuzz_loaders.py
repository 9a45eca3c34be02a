"""Fuzzing every loader: random and mutated inputs load or raise the project's error, never
anything else (hypothesis), the job importers, calibration tables and HF configs as far as the
kernel costs of the scenario they give; hostile files (a link to /dev/zero, binary data, deep nesting, huge
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


# ---- importers, calibration tables and HF configs as far as the kernel costs ----------------------
# Each generated input is loaded and, where it loads, resolved into a scenario whose per-chunk
# kernel costs are computed (where a value that passed a loader used to divide by zero).

#: Generated inputs per loader (the sum counts toward the fuzzed invocations of the suite).
LOADER_EXAMPLES = {"torchtitan": 400, "megatron": 400, "calibration": 400, "hf_layout": 300}
LOADERS = dict(deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                      HealthCheck.data_too_large, HealthCheck.filter_too_much])
EDGE_INTS = st.one_of(st.integers(-12, 40), st.sampled_from([-1, 0, 1, 2, 64, 100, 10**6, 2**63, -(2**63)]))


def resolve_and_cost(settings_: dict) -> None:
    """Resolve ``settings_`` (on 8 GPUs unless they say) and, within the work bound a simulation
    checks first, time every chunk's kernels."""
    from simtrain.specs import budget
    from simtrain.workload.options import WorkloadOptions
    from simtrain.workload.stages import chunk_pass_times, split_layers

    sc = api.resolve({"topology": "h100-ib", "gpus": 8, "max_events": 20_000, **settings_})
    par = sc.parallel
    budget.check_operations(sc.model.layers, par.num_microbatches, pipelines=1, tp=par.tp, steps=1,
                            max_events=sc.max_events)
    opts = WorkloadOptions(calibration=sc.calibration)
    chunk_pass_times(sc.model, sc.parallel, sc.gpu, split_layers(sc.model, sc.parallel, sc.gpu, sc.parallel.pp,
                                                                 opts), opts)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if value != value else ("inf" if value > 0 else "-inf") if abs(value) == float("inf") else repr(value)
    if isinstance(value, (int, str)):
        return json.dumps(value) if isinstance(value, str) else str(value)
    return "[" + ", ".join(_toml_value(v) for v in value) + "]"


TITAN = {"model": {"name": "llama3", "flavor": "8B"},
         "parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2, "data_parallel_shard_degree": 2,
                         "pipeline_parallel_first_stage_less_layers": 0, "pipeline_parallel_last_stage_less_layers": 0},
         "training": {"local_batch_size": 4, "seq_len": 512}, "activation_checkpoint": {"mode": "none"}}
TITAN_KEYS = {"parallelism": ["tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree",
                              "data_parallel_replicate_degree", "data_parallel_shard_degree", "expert_parallel_degree",
                              "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
                              "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_microbatch_size",
                              "module_fqns_per_model_part", "pipeline_parallel_schedule",
                              "fsdp_reshard_after_forward"],
              "training": ["local_batch_size", "batch_size", "global_batch_size", "seq_len"],
              "activation_checkpoint": ["mode", "selective_ac_option"], "model": ["name", "flavor", "converters"]}
FQNS = st.lists(st.lists(st.one_of(st.integers(0, 40).map(lambda i: f"layers.{i}"),
                                   st.sampled_from(["tok_embeddings", "norm", "output", "layers.x", "layers.-1"]),
                                   st.integers(-1, 3)), max_size=20), max_size=4)
TITAN_VALUES = st.one_of(EDGE_INTS, st.sampled_from(["1F1B", "Interleaved1F1B", "ZBVZeroBubble", "GPipe", "never",
                                                      "always", "default", "op", "2", "full", "selective", "",
                                                      "llama3", "8B", "float8"]),
                         st.booleans(), st.floats(allow_nan=True))
#: Keys whose values are lists: mostly lists (of names, of numbers, empty, the right split).
TITAN_LISTS = {"module_fqns_per_model_part": st.one_of(
    FQNS, st.lists(st.one_of(st.integers(0, 3), st.sampled_from(["layers.0", "norm"])), max_size=3),
    st.just([[f"layers.{i}" for i in range(16)], [f"layers.{i}" for i in range(16, 32)]]), TITAN_VALUES),
    "converters": st.one_of(st.lists(st.sampled_from(["float8", "mx", ""]), max_size=2), TITAN_VALUES)}


@settings(max_examples=LOADER_EXAMPLES["torchtitan"], **LOADERS)
@given(st.data())
def test_torchtitan_jobs(tmp_path_factory, data):
    from simtrain.importers import from_torchtitan

    job = json.loads(json.dumps(TITAN))
    for _ in range(data.draw(st.integers(1, 3))):
        section = data.draw(st.sampled_from(["parallelism", "parallelism", "training", "activation_checkpoint",
                                             "model"]))
        key = data.draw(st.sampled_from(TITAN_KEYS[section]))
        job[section][key] = data.draw(TITAN_LISTS.get(key, TITAN_VALUES))
    path = tmp_path_factory.getbasetemp() / "fuzz-job.toml"
    path.write_text("".join(f"[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items())
                            for name, table in job.items()), encoding="utf-8")
    flags = {"gpus": 8} if data.draw(st.booleans()) else {}

    def load():
        resolve_and_cost({**from_torchtitan(path, flags).settings, **flags})

    only_our_errors(load)


MEGATRON_FLAGS = ["--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                  "--micro-batch-size", "--global-batch-size", "--seq-length", "--num-layers-per-virtual-pipeline-stage",
                  "--num-virtual-stages-per-pipeline-rank", "--decoder-first-pipeline-num-layers",
                  "--decoder-last-pipeline-num-layers", "--recompute-granularity", "--recompute-method",
                  "--recompute-num-layers", "--recompute-modules", "--fp8-format", "--nnodes", "--nproc_per_node",
                  "--attention-backend", "--moe-token-dispatcher-type", "--sequence-parallel",
                  "--use-distributed-optimizer", "--tp-comm-overlap", "--num-layers", "--num-query-groups",
                  "--expert-model-parallel-size", "--frobnicate", "--lr", "--use-torch-fsdp2",
                  "--data-parallel-sharding-strategy", "--use-megatron-fsdp"]
MEGATRON_WORDS = st.one_of(EDGE_INTS.map(str), st.sampled_from(
    ["full", "selective", "block", "uniform", "e4m3", "hybrid", "bogus", "$TP", "${N}", "", "'2 4'", "\\", "(", ")",
     "pretrain_gpt.py", "torchrun", "N=2", "ARGS=(", "${ARGS[@]}", "#", "\"", "core_attn", "flash", "local",
     "optim_grads", "alltoall", "flex"]))
LLAMA_8B_ARGS = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
                 "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --seq-length 512 --micro-batch-size 1 ")


#: A flag's values: mostly one number (what the layout flags take), else none, words or several.
MEGATRON_VALUES = st.one_of(EDGE_INTS.map(lambda i: [str(i)]), EDGE_INTS.map(lambda i: [str(i)]),
                            st.lists(MEGATRON_WORDS, max_size=2))


@settings(max_examples=LOADER_EXAMPLES["megatron"], **LOADERS)
@given(st.lists(st.tuples(st.sampled_from(MEGATRON_FLAGS), MEGATRON_VALUES, st.booleans()), min_size=1, max_size=3),
       st.booleans())
def test_megatron_argument_lines(words, with_model):
    from simtrain.importers import from_megatron

    line = " ".join(f"{flag}={' '.join(values)}" if inline else " ".join([flag, *values])
                    for flag, values, inline in words)
    text = (LLAMA_8B_ARGS if with_model else "N=2\n") + line

    def load():
        resolve_and_cost(from_megatron(text, {}).settings)

    only_our_errors(load)


CALIBRATION = ("kind,shape,dtype,time_us\n"
               "gemm,1x512x4096x4096,bf16,80\ngemm,1x2048x4096x4096,bf16,300\n"
               "attention_forward,16x512x512x128x128x1,bf16,20\nattention_forward,64x512x512x128x128x1,bf16,80\n"
               "attention_forward,64x1024x512x128x128x1,bf16,160\n"
               "attention_backward,64x512x512x128x128x1,bf16,100\nelementwise,4194304,bf16,10\n")
CALIBRATION_CELLS = st.one_of(st.sampled_from(["gemm", "attention_forward", "attention_backward", "elementwise",
                                               "bf16", "fp8", "0", "1", "1e-9", "1e-3", "nan", "-1", "1e308", "",
                                               "0x512x512x128x128x1", "64x512x512x128x128x2", "1x0x1x1",
                                               "1x512x4096x4096", "64x512x512x128x128x1", "4194304", "x"]),
                              EDGE_INTS.map(str), st.text(max_size=6))


@settings(max_examples=LOADER_EXAMPLES["calibration"], **LOADERS)
@given(st.data())
def test_calibration_tables(tmp_path_factory, data):
    """A valid table with cells replaced, lines repeated or dropped: refused, or read, checked
    against the GPU's peaks and looked up by a scenario's every kernel."""
    lines = CALIBRATION.splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["cell", "cell", "repeat", "drop"]))
        if action == "repeat":
            lines.append(lines[i])
        elif action == "drop" and len(lines) > 1:
            lines.pop(i)
        else:
            cells = lines[i].split(",")
            j = data.draw(st.integers(0, len(cells) - 1))
            dims = cells[j].split("x")
            if j == 1 and data.draw(st.booleans()):  # one number of the shape
                dims[data.draw(st.integers(0, len(dims) - 1))] = str(data.draw(EDGE_INTS))
                cells[j] = "x".join(dims)
            else:
                cells[j] = data.draw(CALIBRATION_CELLS)
            lines[i] = ",".join(cells)
    path = tmp_path_factory.getbasetemp() / "fuzz-calibration.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    seq = data.draw(st.sampled_from([512, 1024]))
    only_our_errors(lambda: resolve_and_cost({"model": "llama3-8b", "tp": 1, "pp": 1, "gpus": 1, "gbs": 1, "seq": seq,
                                              "calibration": str(path)}))


@settings(max_examples=LOADER_EXAMPLES["hf_layout"], **LOADERS)
@given(st.data())
def test_hf_configs_through_the_layout(tmp_path_factory, data):
    """A mutated config.json (a key of HF_EDGE_KEYS set to an edge value, or a key repeated in the
    text) loaded from a file, resolved with a generated tp and pp, and its kernels timed."""
    config = dict(HF, vocab_size=data.draw(st.sampled_from([1, 2, 3, 8, 32000])))
    for _ in range(data.draw(st.integers(0, 2))):
        config[data.draw(st.sampled_from(HF_EDGE_KEYS))] = data.draw(st.one_of(EDGE_INTS, st.none(), values))
    text = json.dumps(config)
    if data.draw(st.integers(0, 5)) == 0:
        text = text[:-1] + f', {json.dumps(data.draw(st.sampled_from(sorted(config))))}: 2}}'
    path = tmp_path_factory.getbasetemp() / "fuzz-config.json"
    path.write_text(text, encoding="utf-8")
    tp, pp = data.draw(st.sampled_from([1, 2, 4, 8])), data.draw(st.sampled_from([1, 2]))
    only_our_errors(lambda: resolve_and_cost({"model": str(path), "tp": tp, "pp": pp, "gpus": tp * pp,
                                              "gbs": 2 * pp, "seq": 256}))


HF_EDGE_KEYS = ["num_key_value_heads", "head_dim", "vocab_size", "num_attention_heads", "hidden_size",
                "intermediate_size", "num_hidden_layers", "tie_word_embeddings"]


@pytest.mark.quick
def test_enough_loader_inputs():
    """The suite's fuzzed invocations: the command line's, these loaders' and the API's."""
    from api import test_checks as test_api_types
    import test_cli_fuzz

    cli_total = sum(test_cli_fuzz.EXAMPLES.values()) + test_cli_fuzz.CONFIG_EXAMPLES
    total = cli_total + sum(LOADER_EXAMPLES.values()) + sum(test_api_types.EXAMPLES.values())
    assert sum(LOADER_EXAMPLES.values()) >= 1500 and total >= 3000, total
