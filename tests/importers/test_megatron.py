"""Megatron-LM launches: a realistic launch script of the 70B layout, then argument strings one flag
at a time: layout, batch, memory, model, and the flags that are ignored or cannot be simulated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simtrain.errors import SpecError
from simtrain.importers.megatron import from_megatron, launch_tokens

pytestmark = pytest.mark.quick

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "jobs" / "megatron_llama3_70b.sh"
LLAMA_8B = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
            "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --seq-length 4096 ")
MIXTRAL = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
           "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --num-experts 8 --moe-router-topk 2 "
           "--moe-grouped-gemm ")


def settings(args: str, flags=None) -> dict:
    return from_megatron(args, flags).settings


def test_the_llama3_70b_launch_script():
    imported = from_megatron(str(SCRIPT))
    assert imported.settings == {"model": "llama3-70b", "tp": 8, "pp": 4, "cp": 1, "mbs": 1, "gbs": 512,
                                 "seq": 8192, "gpus": 64, "vpp": 1, "schedule": "1f1b", "sp": True, "zero": 1,
                                 "grad_dtype": "fp32", "overlap_grad_reduce": True, "overlap_param_gather": True,
                                 "overlap_p2p_comm": True, "rope_fusion": True, "recompute": "none"}
    assert imported.source == str(SCRIPT) and imported.framework == "Megatron-LM"
    assert {"--lr", "--save", "--data-path", "--tokenizer-model", "--master_addr"} <= set(imported.ignored)


def test_launch_script_words():
    tokens = launch_tokens('N=8\nARGS=(\n  --a $N  # a comment\n  --b ${N}\n)\ntorchrun ${ARGS[@]} x.py \\\n  --c 1',
                           "script")
    assert tokens == ["--a", "8", "--b", "8", "torchrun", "x.py", "--c", "1"]


def test_layout_and_batch():
    s = settings(LLAMA_8B + "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                 "--context-parallel-size 2 --micro-batch-size 2 --global-batch-size 64")
    assert {k: s[k] for k in ("model", "tp", "pp", "cp", "mbs", "gbs", "seq")} == \
        {"model": "llama3-8b", "tp": 2, "pp": 2, "cp": 2, "mbs": 2, "gbs": 64, "seq": 4096}
    assert "gpus" not in s  # the GPU count comes from torchrun, --gpus or the default
    s = settings(LLAMA_8B + "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 2 "
                 "--decoder-first-pipeline-num-layers 6 --use-tp-pp-dp-mapping --micro-batch-size 1")
    assert (s["schedule"], s["vpp"], s["first_stage_layers"], s["order"]) == ("interleaved-1f1b", 4, 6,
                                                                             "tp-cp-ep-pp-dp")
    assert s["gbs"] == 16  # no --global-batch-size: micro-batch x DP (64 GPUs / PP 4)
    s = settings("torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py " + LLAMA_8B +
                 "--num-virtual-stages-per-pipeline-rank 3 --pipeline-model-parallel-size 2")
    assert (s["gpus"], s["vpp"], s["gbs"]) == (16, 3, 8)


def test_memory_settings():
    assert settings(LLAMA_8B)["sp"] is False and settings(LLAMA_8B)["zero"] == 0  # Megatron-LM's defaults
    assert settings(LLAMA_8B + "--use-distributed-optimizer --sequence-parallel")["zero"] == 1
    assert settings(LLAMA_8B + "--use-torch-fsdp2")["zero"] == 3
    assert settings(LLAMA_8B + "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads")["zero"] == 2
    assert settings(LLAMA_8B + "--recompute-activations")["recompute"] == "selective"
    assert settings(LLAMA_8B + "--recompute-granularity full --recompute-method uniform "
                    "--recompute-num-layers 1")["recompute"] == "full"
    assert settings(LLAMA_8B + "--recompute-granularity full --recompute-method block "
                    "--recompute-num-layers 3")["recompute"] == 3
    assert settings(LLAMA_8B)["recompute"] == "none"


def test_kernel_settings():
    s = settings(LLAMA_8B + "--fp8-format hybrid --fp8-amax-history-len 1024 --grad-reduce-in-bf16 "
                 "--attention-backend unfused")
    assert (s["fp8"], s["grad_dtype"], s["attention"]) == (True, "bf16", "eager")
    assert "fp8" not in settings(LLAMA_8B) and settings(LLAMA_8B)["grad_dtype"] == "fp32"
    s = settings(LLAMA_8B + "--no-overlap-p2p-communication --no-rope-fusion")
    assert (s["overlap_grad_reduce"], s["overlap_p2p_comm"]) == (False, False)  # Megatron-LM's default, and off
    assert s["rope_fusion"] is False and settings(LLAMA_8B)["rope_fusion"] is True


def test_the_model_preset_and_expert_parallelism():
    s = settings(MIXTRAL + "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1 "
                 "--tensor-model-parallel-size 2")
    assert (s["model"], s["ep"], s["etp"]) == ("mixtral-8x7b", 8, 1)
    dense = settings(LLAMA_8B + "--expert-model-parallel-size 8")
    assert "ep" not in dense  # no effect on a dense model
    with pytest.raises(SpecError, match="no model preset has them all"):
        settings(LLAMA_8B.replace("--group-query-attention ", ""))  # multi-head attention: another model
    assert "model" not in settings("--num-layers 40 --hidden-size 8192", {"model": "llama3-70b"})


def test_flags_that_cannot_be_simulated_are_named_together():
    with pytest.raises(SpecError) as err:
        settings(LLAMA_8B + "--num-distributed-optimizer-instances 2 --cpu-offloading "
                 "--moe-token-dispatcher-type flex --frobnicate 3")
    message = str(err.value)
    for flag in ("--num-distributed-optimizer-instances", "--cpu-offloading", "--moe-token-dispatcher-type flex",
                 "--frobnicate"):
        assert flag in message
    with pytest.raises(SpecError, match=r"--tensor-model-parallel-size '\$TP': expected a whole number; expand"):
        settings("--tensor-model-parallel-size $TP")
    with pytest.raises(SpecError, match="neither a file nor Megatron-LM arguments"):
        settings("pretrain_gpt.py")


DSV3 = ("--num-layers 61 --hidden-size 7168 --num-attention-heads 128 --ffn-hidden-size 18432 --num-experts 256 "
        "--moe-router-topk 8 --moe-ffn-hidden-size 2048 --moe-grouped-gemm --swiglu --tensor-model-parallel-size 2 "
        "--pipeline-model-parallel-size 8 --expert-model-parallel-size 64 --sequence-parallel --mtp-num-layers 1 ")


def test_a_pipeline_layout_gives_the_split():
    """Megatron Bridge's DeepSeek-V3 layouts on H100 and B200: the end chunks' decoder layers,
    the virtual stages (chunks / pp) and the MTP module after the last chunk's layers."""
    s = settings(DSV3 + "--pipeline-model-parallel-layout 'Et|(tt|)*30mL'")
    assert (s["model"], s["vpp"], s["schedule"]) == ("deepseek-v3", 4, "interleaved-1f1b")
    assert (s["first_stage_layers"], s["last_stage_layers"], s["mtp_layers"]) == (1, 0, 1)
    s = settings(DSV3 + "--pipeline-model-parallel-layout Et*4|(t*4|)*14tmL")
    assert (s["vpp"], s["first_stage_layers"], s["last_stage_layers"]) == (2, 4, 1)


@pytest.mark.parametrize("layout, words", [
    ("Ettt|(tt|)*29,m|L", "MTP modules (m) outside the last chunk"),
    ("Et|tt", "2 chunks do not divide over pp=8"),
    ("Et|ttt|(tt|)*28t|mL", "the middle chunks hold 1, 2, 3 decoder layers"),
    ("Et|(tt|)*30m", "the loss (L) must close the last chunk, once"),
    ("t|(tt|)*30EmL", "the embedding (E) must open the first chunk, once"),
    ("Et|(tt|)*30tmL", "62 decoder layers (t), the model has 61"),
    ("Et|(tt|)*30xL", "unknown layer character 'x'"),
])
def test_a_layout_simtrain_cannot_run_is_one_line(layout, words):
    with pytest.raises(SpecError, match=r"^arguments: --pipeline-model-parallel-layout '.*': .*" + re.escape(words)):
        settings(DSV3 + f"--pipeline-model-parallel-layout '{layout}'")
    with pytest.raises(SpecError, match="give the split either by the layout or by --decoder-first-pipeline"):
        settings(DSV3 + "--pipeline-model-parallel-layout 'Et|(tt|)*30mL' --decoder-first-pipeline-num-layers 1")
    with pytest.raises(SpecError, match="4 chunks per pipeline rank where the virtual-stage flag gives 2"):
        settings(DSV3 + "--pipeline-model-parallel-layout 'Et|(tt|)*30mL' --num-virtual-stages-per-pipeline-rank 2")


def test_1f1b_overlap():
    """--overlap-moe-expert-parallel-comm is the overlap_moe_expert_parallel_comm setting; its
    --delay-wgrad-compute moves weight gradients inside the combined step, which simtrain names."""
    args = MIXTRAL + "--expert-model-parallel-size 8 --pipeline-model-parallel-size 2 " \
                     "--num-virtual-stages-per-pipeline-rank 2 --overlap-moe-expert-parallel-comm"
    s = settings(args)
    assert (s["overlap_moe_expert_parallel_comm"], s["schedule"], s["ep"]) == (True, "interleaved-1f1b", 8)
    assert "overlap_moe_expert_parallel_comm" not in settings(MIXTRAL)
    with pytest.raises(SpecError, match=r"--delay-wgrad-compute \(weight gradients moved later"):
        settings(args + " --delay-wgrad-compute")


def test_shared_expert_overlap():
    """For a model with shared experts, --moe-shared-expert-overlap is moe_shared_expert_overlap and
    its absence Megatron-LM's default, off; a model without them gets no setting."""
    deepseek = ("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 --expert-model-parallel-size 64 "
                "--expert-tensor-parallel-size 1 --micro-batch-size 1 --global-batch-size 256 --seq-length 4096 "
                "--sequence-parallel --moe-grouped-gemm ")
    model = {"model": "deepseek-v3"}
    assert settings(deepseek, model)["moe_shared_expert_overlap"] is False
    assert settings(deepseek + "--moe-shared-expert-overlap", model)["moe_shared_expert_overlap"] is True
    assert "moe_shared_expert_overlap" not in settings(MIXTRAL + "--moe-shared-expert-overlap")


def test_an_moe_launch_without_grouped_gemm_is_named():
    """Without --moe-grouped-gemm Megatron-LM runs the experts one by one (SequentialMLP), which
    simtrain does not model: the import names it instead of simulating the grouped GEMM; a dense
    launch needs no such flag."""
    with pytest.raises(SpecError, match=r"no --moe-grouped-gemm \(Megatron-LM then runs the local experts one "
                                        r"after another \(SequentialMLP\)"):
        settings(MIXTRAL.replace("--moe-grouped-gemm ", "") + "--expert-model-parallel-size 8")
    assert settings(MIXTRAL + "--expert-model-parallel-size 8")["ep"] == 8
    assert settings(LLAMA_8B)["model"] == "llama3-8b"


def test_overlap_param_gather_with_the_distributed_optimizer():
    """With the distributed optimizer, --overlap-param-gather is overlap_param_gather and its absence
    Megatron-LM's default, off (all buckets gathered before the first forward); without it no setting."""
    layout = LLAMA_8B + "--tensor-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 16 "
    assert settings(layout + "--use-distributed-optimizer")["overlap_param_gather"] is False
    assert settings(layout + "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather")[
        "overlap_param_gather"] is True
    assert "overlap_param_gather" not in settings(layout)


def test_recompute_modules():
    got = settings(MIXTRAL + "--recompute-granularity selective --recompute-modules moe_act layernorm "
                   "--sequence-parallel")
    assert got["recompute"] == "selective" and got["recompute_modules"] == "moe_act,layernorm"
    assert got["sp"] is True  # the list stops at the next flag
    assert "recompute_modules" not in settings(LLAMA_8B + "--recompute-granularity selective")  # core_attn
    with pytest.raises(SpecError, match=r"--recompute-modules 'mlp': needs module names and "
                                        r"--recompute-granularity selective \(given: full\)"):
        settings(LLAMA_8B + "--recompute-granularity full --recompute-modules mlp")


def test_the_embedding_and_the_loss_in_the_split_and_tp_comm_overlap():
    """--account-for-embedding/loss-in-pipeline-split and --tp-comm-overlap map to the settings of
    the same name; without them they stay off; --tp-comm-overlap needs --sequence-parallel, as
    Megatron-LM's argument check requires."""
    s = settings(LLAMA_8B + "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel "
                 "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --tp-comm-overlap")
    assert (s["account_for_embedding_in_pipeline_split"], s["account_for_loss_in_pipeline_split"],
            s["tp_comm_overlap"], s["sp"]) == (True, True, True, True)
    assert settings(LLAMA_8B + "--account-for-loss-in-pipeline-split")["account_for_loss_in_pipeline_split"]
    plain = settings(LLAMA_8B)
    assert not {"account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
                "tp_comm_overlap"} & set(plain)
    with pytest.raises(SpecError, match=r"--tp-comm-overlap needs sequence parallelism \(add --sequence-parallel\)"):
        settings(LLAMA_8B + "--tensor-model-parallel-size 2 --tp-comm-overlap")
    assert settings(LLAMA_8B + "--tensor-model-parallel-size 2 --tp-comm-overlap", {"sp": True})["tp_comm_overlap"]


def test_deepep_is_the_flex_dispatcher_with_its_deepep_backend():
    """Megatron-LM's DeepEP: ``--moe-token-dispatcher-type flex`` with ``--moe-enable-deepep``
    (or, later, ``--moe-flex-dispatcher-backend deepep``); flex with another backend is named."""
    moe = MIXTRAL + "--expert-model-parallel-size 8 "
    assert settings(moe + "--moe-token-dispatcher-type flex --moe-enable-deepep")["moe_dispatcher"] == "deepep"
    assert settings(moe + "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep")[
        "moe_dispatcher"] == "deepep"
    assert "moe_dispatcher" not in settings(moe)
    with pytest.raises(SpecError, match="--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep"):
        settings(moe + "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep")


def test_a_published_h100_run_imports_as_the_validation_runs_it():
    """The model zoo's Qwen3-235B H100 launch (TP2 PP8 VPP4 EP32, DeepEP, selective recompute of
    the norms and the expert activation, embedding and loss counted in the split) gives the
    settings the H100 validation runs it with."""
    from validation.published_h100 import load_cases, settings_of

    case = next(c for c in load_cases() if c["name"] == "qwen3-235b-deepep-tp2pp8vpp4ep32")
    launch = ("torchrun --nnodes 32 --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size 2 "
              "--pipeline-model-parallel-size 8 --num-virtual-stages-per-pipeline-rank 4 "
              "--expert-model-parallel-size 32 --expert-tensor-parallel-size 1 --sequence-parallel "
              "--use-distributed-optimizer --micro-batch-size 1 --global-batch-size 2048 --seq-length 4096 "
              "--moe-token-dispatcher-type flex --moe-enable-deepep --recompute-granularity selective "
              "--recompute-modules layernorm moe_act --account-for-embedding-in-pipeline-split "
              "--account-for-loss-in-pipeline-split --moe-grouped-gemm")  # the zoo's yaml: ${MOE_GROUPED_GEMM}
    got = settings(launch, {"model": "qwen3-235b-a22b"})
    want = settings_of(case)
    for key in ("gpus", "tp", "pp", "vpp", "ep", "etp", "mbs", "gbs", "seq", "schedule", "sp", "zero", "recompute",
                "moe_dispatcher", "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        assert got[key] == want[key], key
    assert set(got["recompute_modules"].split(",")) == set(want["recompute_modules"].split(","))


def test_mtp_num_layers_maps_to_mtp_layers():
    """--mtp-num-layers is the multi-token prediction modules (mtp_layers); its loss factor has no
    effect on the step's time."""
    s = settings(LLAMA_8B + "--mtp-num-layers 1 --mtp-loss-scaling-factor 0.1")
    assert s["mtp_layers"] == 1
    assert "mtp_layers" not in settings(LLAMA_8B)


@pytest.mark.parametrize("args, message", [
    ("--tensor-model-parallel-size 0", "--tensor-model-parallel-size 0: must be at least 1"),
    ("--pipeline-model-parallel-size 0", "--pipeline-model-parallel-size 0: must be at least 1"),
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 0",
     "--num-layers-per-virtual-pipeline-stage 0: must be at least 1"),
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 100",
     r"--num-layers-per-virtual-pipeline-stage 100: must divide the 16 layers per pipeline stage \(32 layers over "
     r"pp=2; valid: 1, 2, 4, 8, 16\)"),
    ("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3",
     "--num-layers-per-virtual-pipeline-stage 3: must divide the 16 layers per pipeline stage"),
    ("--tensor-model-parallel-size 2 4", r"--tensor-model-parallel-size '2 4' \(2 values\): expected a whole number"),
    ("--recompute-granularity full --recompute-method bogus", "--recompute-method 'bogus': must be one of uniform, "
                                                              "block"),
    ("--fp8-format bogus", "--fp8-format 'bogus': must be one of e4m3, hybrid"),
    ("--nnodes 0 --nproc_per_node 8", "--nnodes 0: must be at least 1"),
    ("--micro-batch-size 1 --tensor-model-parallel-size", r"--tensor-model-parallel-size \(no value\): expected a "
                                                          r"whole number"),
    ("--recompute-method --tensor-model-parallel-size 2", r"--recompute-method \(no value\): expected one value "
                                                          r"\(uniform, block\)"),
    ("--seq-length=", "--seq-length '': expected a whole number"),
])
def test_values_megatron_would_refuse_are_one_line(args, message):
    """Each of these divided by zero or was silently reinterpreted (plain 1F1B, a dropped value,
    full recompute, FP8, one node, the default)."""
    with pytest.raises(SpecError, match=message) as info:
        settings(LLAMA_8B + args)
    assert "\n" not in str(info.value)


def test_a_value_after_a_flag_ends_at_the_program():
    s = settings("torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py " + LLAMA_8B +
                 "--recompute-granularity full --recompute-method uniform")
    assert (s["gpus"], s["recompute"]) == (16, "full")
    assert settings(LLAMA_8B + "--fp8-format hybrid")["fp8"] is True


def test_a_launch_that_expands_past_1_mib_is_refused_at_once(tmp_path):
    """34 doublings of a variable took 3.2 GB and 17.7 s before a MemoryError."""
    import time

    from helpers import assert_user_error

    laughs = tmp_path / "laughs.sh"
    laughs.write_text("\n".join(["A0=xx", *(f"A{i + 1}=$A{i}$A{i}" for i in range(34)),
                                 "pretrain_gpt.py --tensor-model-parallel-size $A34"]) + "\n")
    started = time.monotonic()
    assert_user_error("run", "--from-megatron", laughs, "--gpus", 8, "--no-plot", "--out", tmp_path / "o",
                      contains=f"{laughs}: '$A19$A19' expands to 2,097,152 characters, more than 1,048,576 (1 MiB)")
    assert time.monotonic() - started < 5
    wide = "A=" + "x" * 1000 + "\n--tensor-model-parallel-size " + "$A" * 2000
    with pytest.raises(SpecError, match="expands to 2,000,000 characters"):
        settings(wide)
    many = "A=" + "x" * 100_000 + "\n" + " ".join(["$A"] * 20)
    with pytest.raises(SpecError, match=r"the arguments expand to more than 1,048,576 characters \(1 MiB\)"):
        settings(many)
    for args in ("--tensor-model-parallel-size 0", "--pipeline-model-parallel-size 0"):
        assert_user_error("run", "--from-megatron", LLAMA_8B + args, "--gpus", 8, "--no-plot", "--out",
                          tmp_path / "o", contains=f"arguments: {args}: must be at least 1")
