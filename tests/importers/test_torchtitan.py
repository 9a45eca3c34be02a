"""torchtitan job files: a realistic Llama 3 70B job, then one key at a time: the degrees and FSDP as
ZeRO, schedules and stages per rank, the layer split, batches, activation checkpointing, MoE, and
the keys that are ignored or cannot be simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simtrain.errors import SpecError
from simtrain.importers.torchtitan import from_torchtitan

pytestmark = pytest.mark.quick

JOB = Path(__file__).resolve().parents[1] / "data" / "jobs" / "torchtitan_llama3_70b.toml"


def _toml(sections: dict) -> str:
    return "".join(f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items()) + "\n"
                   for name, table in sections.items())


def job(tmp_path, flags=None, **sections):
    """A job file of ``sections`` ({section: {key: value}}) on top of a small base: Llama 3 8B, 16
    GPUs as TP 2 x PP 2 x FSDP 4, no activation checkpointing."""
    base = {"model": {"name": "llama3", "flavor": "8B"},
            "parallelism": {"tensor_parallel_degree": 2, "pipeline_parallel_degree": 2,
                            "data_parallel_shard_degree": 4, "pipeline_parallel_first_stage_less_layers": 0,
                            "pipeline_parallel_last_stage_less_layers": 0},
            "training": {"local_batch_size": 8, "seq_len": 4096},
            "activation_checkpoint": {"mode": "none"}}
    for name, table in sections.items():
        base[name] = {k: v for k, v in {**base.get(name, {}), **table}.items() if v is not None}
    path = tmp_path / "job.toml"
    path.write_text(_toml(base))
    return from_torchtitan(path, flags)


def test_the_llama3_70b_job():
    imported = from_torchtitan(JOB)
    assert imported.settings == {"model": "llama3-70b", "tp": 8, "pp": 4, "cp": 1, "gpus": 64, "zero": 2,
                                 "schedule": "1f1b", "seq": 8192, "gbs": 32, "mbs": 1, "recompute": "selective"}
    assert {"[job]", "[metrics]", "[optimizer]", "[checkpoint]", "training.steps", "model.hf_assets_path"} <= \
        set(imported.ignored)
    assert imported.framework == "torchtitan" and imported.source == str(JOB)


def test_data_parallel_degrees_as_gpus_and_zero(tmp_path):
    s = job(tmp_path).settings
    assert (s["gpus"], s["zero"]) == (16, 2)  # FSDP with PP: torchtitan keeps the gathered weights
    assert job(tmp_path, parallelism={"fsdp_reshard_after_forward": "always"}).settings["zero"] == 3
    assert job(tmp_path, parallelism={"pipeline_parallel_degree": 1}).settings["zero"] == 3
    ddp = job(tmp_path, parallelism={"data_parallel_shard_degree": 1, "data_parallel_replicate_degree": 4})
    assert (ddp.settings["gpus"], ddp.settings["zero"]) == (16, 0)
    leftover = job(tmp_path, {"gpus": 32}, parallelism={"data_parallel_shard_degree": -1}).settings
    assert "gpus" not in leftover and leftover["gbs"] == 8 * 8  # local batch x DP of 32 / (2 x 2)
    with pytest.raises(SpecError, match="HSDP"):
        job(tmp_path, parallelism={"data_parallel_replicate_degree": 2, "data_parallel_shard_degree": 2})
    with pytest.raises(SpecError, match="gpus=64 is not divisible by replicate\\*cp\\*tp\\*pp=6"):
        job(tmp_path, parallelism={"data_parallel_shard_degree": -1, "tensor_parallel_degree": 3})


def test_schedules_and_stages_per_rank(tmp_path):
    interleaved = job(tmp_path, parallelism={"pipeline_parallel_schedule": "Interleaved1F1B"}).settings
    assert (interleaved["schedule"], interleaved["vpp"]) == ("interleaved-1f1b", 2)  # 2 stages per rank
    by_layers = job(tmp_path, parallelism={"pipeline_parallel_schedule": "interleaved1f1b",
                                           "pipeline_parallel_layers_per_stage": 4}).settings
    assert by_layers["vpp"] == 4  # 32 layers / 4 = 8 stages over 2 ranks
    assert job(tmp_path, parallelism={"pipeline_parallel_schedule": "ZBVZeroBubble"}).settings["schedule"] == "zb-v"
    assert job(tmp_path, parallelism={"pipeline_parallel_schedule": "GPipe"}).settings["schedule"] == "gpipe"
    with pytest.raises(SpecError, match="LoopedBFS"):
        job(tmp_path, parallelism={"pipeline_parallel_schedule": "LoopedBFS"})
    assert "schedule" not in job(tmp_path, {"schedule": "zb-h1"},
                                 parallelism={"pipeline_parallel_schedule": "LoopedBFS"}).settings


def test_the_layer_split(tmp_path):
    defaults = {"pipeline_parallel_first_stage_less_layers": None, "pipeline_parallel_last_stage_less_layers": None}
    four = {"pipeline_parallel_degree": 4, "data_parallel_shard_degree": 2}
    with pytest.raises(SpecError, match=r"\[8, 9, 8, 7\] layers per stage"):  # 32 + 1 + 1 over 4 stages
        job(tmp_path, parallelism={**four, **defaults})
    s = job(tmp_path, parallelism={**four, "pipeline_parallel_first_stage_less_layers": 2,
                                   "pipeline_parallel_last_stage_less_layers": 2}).settings
    assert (s["first_stage_layers"], s["last_stage_layers"]) == (7, 7)  # 7, 9, 9, 7
    parts = [["tok_embeddings", *[f"layers.{i}" for i in range(10)]], [f"layers.{i}" for i in range(10, 32)]]
    s = job(tmp_path, parallelism={"module_fqns_per_model_part": parts}).settings
    assert (s["first_stage_layers"], s["last_stage_layers"]) == (10, 22)
    flagged = job(tmp_path, {"first_stage_layers": 7, "last_stage_layers": 9}, parallelism={**four, **defaults})
    assert "first_stage_layers" not in flagged.settings


def test_batches(tmp_path):
    s = job(tmp_path, parallelism={"pipeline_parallel_microbatch_size": 2}).settings
    assert (s["seq"], s["gbs"], s["mbs"]) == (4096, 32, 2)  # local 8 x DP 4
    no_pp = job(tmp_path, parallelism={"pipeline_parallel_degree": 1, "data_parallel_shard_degree": 8},
                training={"global_batch_size": 256}).settings
    assert (no_pp["gbs"], no_pp["mbs"]) == (256, 8)  # 4 accumulation steps of the local batch
    with pytest.raises(SpecError, match="gradient-accumulation"):
        job(tmp_path, training={"global_batch_size": 64})


def test_activation_checkpointing(tmp_path):
    def recompute(**ac):
        return job(tmp_path, activation_checkpoint=ac).settings["recompute"]

    assert recompute(mode="full") == "full"
    assert recompute(mode="selective", selective_ac_option="op") == "selective"
    assert recompute(mode="selective", selective_ac_option="2") == 8  # every 2nd of 16 layers per stage
    assert recompute(mode="selective", selective_ac_option="1") == "full"
    with pytest.raises(SpecError, match="memory_budget"):
        recompute(mode="memory_budget")


def test_moe_degrees(tmp_path):
    s = job(tmp_path, model={"name": "deepseek_v3", "flavor": "671B"},
            parallelism={"expert_parallel_degree": 4}).settings
    assert (s["model"], s["ep"], s["etp"]) == ("deepseek-v3", 4, 1)
    dense = job(tmp_path, parallelism={"expert_parallel_degree": 4})
    assert "ep" not in dense.settings and any("expert_parallel_degree" in k for k in dense.ignored)


def test_keys_that_cannot_be_simulated_are_named_together(tmp_path):
    with pytest.raises(SpecError) as err:
        job(tmp_path, model={"converters": ["float8", "mx"]}, parallelism={"enable_async_tensor_parallel": True,
                                                                     "pipeline_parallel_splt": 3},
            training={"enable_cpu_offload": True})
    message = str(err.value)
    for key in ("model.converters", "enable_async_tensor_parallel", "pipeline_parallel_splt",
                "training.enable_cpu_offload"):
        assert key in message
    assert len(message.splitlines()) == 1
    with pytest.raises(SpecError, match="no simtrain model preset; give --model"):
        job(tmp_path, model={"flavor": "1B"})
    assert job(tmp_path, {"model": "llama3-8b"}, model={"flavor": "1B"}).settings.get("model") is None
    assert "[quantize]" in job(tmp_path, quantize={"linear": "mx"}).ignored
    assert job(tmp_path, model={"converters": ["float8"]}).settings["fp8"] is True


@pytest.mark.parametrize("sections, message", [
    ({"parallelism": {"tensor_parallel_degree": 0}}, "parallelism.tensor_parallel_degree = 0: must be at least 1"),
    ({"parallelism": {"data_parallel_replicate_degree": 0, "data_parallel_shard_degree": -1}},
     "parallelism.data_parallel_replicate_degree = 0: must be at least 1"),
    ({"parallelism": {"data_parallel_replicate_degree": -4}},
     "parallelism.data_parallel_replicate_degree = -4: must be at least 1"),
    ({"parallelism": {"data_parallel_shard_degree": -5}},
     r"parallelism.data_parallel_shard_degree = -5: must be -1 \(the ranks left over\) or at least 1"),
    ({"parallelism": {"data_parallel_shard_degree": 0}}, "data_parallel_shard_degree = 0: must be -1"),
    ({"training": {"global_batch_size": -5}},
     r"training.global_batch_size = -5: must be -1 \(local_batch_size x DP\) or at least 1"),
    ({"parallelism": {"pipeline_parallel_layers_per_stage": 0}},
     "parallelism.pipeline_parallel_layers_per_stage = 0: must be at least 1"),
    ({"parallelism": {"pipeline_parallel_first_stage_less_layers": -10}},
     "parallelism.pipeline_parallel_first_stage_less_layers = -10: must be at least 0"),
    ({"training": {"batch_size": 4}}, r"training.local_batch_size = 8 and training.batch_size = 4: give one "
                                      r"\(batch_size is torchtitan's older name of local_batch_size\)"),
    ({"parallelism": {"module_fqns_per_model_part": [1, 2]}},
     r"module_fqns_per_model_part = \[1, 2\]: must be a list of non-empty lists of module names, one per pipeline"),
    ({"parallelism": {"module_fqns_per_model_part": ["layers.0", "layers.1"]}}, "must be a list of non-empty lists"),
    ({"parallelism": {"module_fqns_per_model_part": [[], []]}}, "must be a list of non-empty lists"),
    ({"parallelism": {"module_fqns_per_model_part": [["layers.0"], ["layers.1"]]}},
     r"module_fqns_per_model_part: covers 2 of the 32 layers \(missing layers.2 and 29 more\); every layer must be "
     r"in exactly one stage"),
    ({"parallelism": {"module_fqns_per_model_part": [["layers.0"], ["layers.0"]]}},
     "layers.0 is in stage 0 and stage 1; each layer belongs to one stage"),
    ({"parallelism": {"module_fqns_per_model_part": [["layers.32"], ["layers.1"]]}},
     "'layers.32' in stage 0: the model has layers.0 to layers.31"),
])
def test_values_torchtitan_would_refuse_are_one_line(tmp_path, sections, message):
    """Each of these raised a Python error or was silently reinterpreted (an even split, -1 for a
    negative degree, a key ignored)."""
    with pytest.raises(SpecError, match=message) as info:
        job(tmp_path, **sections)
    assert "\n" not in str(info.value) and str(info.value).startswith(str(tmp_path / "job.toml"))


def test_the_quoted_jobs_are_one_line_on_the_command_line(tmp_path):
    from helpers import assert_user_error

    path = tmp_path / "job.toml"
    for key, value in (("tensor_parallel_degree", 0), ("data_parallel_replicate_degree", 0),
                       ("module_fqns_per_model_part", [1, 2])):
        path.write_text(_toml({"model": {"name": "llama3", "flavor": "8B"},
                               "parallelism": {key: value, "data_parallel_shard_degree": -1}}))
        assert_user_error("run", "--from-torchtitan", path, "--gpus", 8, "--no-plot", "--out", tmp_path / "o",
                          contains=f"parallelism.{key} = ")
