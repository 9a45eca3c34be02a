"""An imported job: unsupported keys in one error unless the flags decide what they would; the layer
split simtrain can run; the model preset a launch line describes."""

from __future__ import annotations

import pytest

from simtrain.errors import SpecError
from simtrain.importers.job import JobReader, match_model, stage_split

pytestmark = pytest.mark.quick


def test_unsupported_keys_are_named_in_one_error_unless_flags_decide_them():
    job = JobReader("torchtitan", "job.toml", {})
    job.unsupported("model.converters", "float8 GEMMs")
    job.unsupported("parallelism.pipeline_parallel_schedule = 'LoopedBFS'", "no such schedule", decides=("schedule",))
    job.ignore("[metrics]")
    with pytest.raises(SpecError) as err:
        job.result()
    assert str(err.value) == ("job.toml: torchtitan keys simtrain cannot simulate: model.converters (float8 "
                              "GEMMs); parallelism.pipeline_parallel_schedule = 'LoopedBFS' (no such schedule)")
    flagged = JobReader("torchtitan", "job.toml", {"schedule": "1f1b"})
    flagged.unsupported("parallelism.pipeline_parallel_schedule = 'LoopedBFS'", "no such schedule",
                        decides=("schedule",))
    flagged.set("tp", 4)
    imported = flagged.result()
    assert imported.settings == {"tp": 4} and imported.ignored == ()


def test_a_flag_comes_before_the_job_and_the_job_before_the_default():
    job = JobReader("Megatron-LM", "arguments", {"pp": 2})
    job.update(pp=4, tp=2)
    assert (job.value("pp"), job.value("tp"), job.value("gbs")) == (2, 2, 32)


def test_stage_split():
    assert stage_split([20] * 4) == {}
    assert stage_split([19, 21, 21, 19]) == {"first_stage_layers": 19, "last_stage_layers": 19}
    assert stage_split([30, 50]) == {"first_stage_layers": 30, "last_stage_layers": 50}
    assert stage_split([20, 21, 20, 19]) is None


def test_the_model_a_launch_line_describes():
    assert match_model({"layers": 32, "hidden": 4096, "num_experts": 8, "top_k": 2}) == "mixtral-8x7b"
    assert match_model({"layers": 61, "hidden": 7168}) == "deepseek-v3"
    with pytest.raises(SpecError, match=r"no model preset has them all \(closest: llama3-70b, with layers 40 "
                                        r"against 80\)"):
        match_model({"layers": 40, "hidden": 8192, "heads": 64, "kv_heads": 8})
    with pytest.raises(SpecError, match="the presets llama3-8b, mixtral-8x7b have them all; give --model"):
        match_model({"layers": 32, "hidden": 4096})


def test_a_setting_is_written_by_its_checked_name():
    job = JobReader("Megatron-LM", "arguments", {})
    with pytest.raises(SpecError, match="unknown setting 'tpp'; did you mean 'tp'"):
        job.set("tpp", 4)
    with pytest.raises(SpecError, match="unknown setting 'gbz'"):
        job.update(gbz=8)
    job.set("tp", 4)
    job.set_default("tp", 8)
    job.set_default("pp", 2)
    assert (job.own("tp"), job.own("pp"), job.own("cp")) == (4, 2, None)
    with pytest.raises(TypeError):
        job.settings["tp"] = 1  # read-only: set() writes
    imported = job.result()
    assert imported.pick("tp", "cp") == {"tp": 4, "cp": None}
    with pytest.raises(SpecError, match="unknown setting"):
        imported.pick("pipeline")
