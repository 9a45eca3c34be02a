"""Bad inputs tried as a new user would: each gets one line naming the input, the value and what
would be valid (the command's help, the values of a degree that divide, a model file in place of
an unknown name), and exit status 2."""

from __future__ import annotations

import json

import pytest

from helpers import assert_user_error, cli
from simtrain import api

RUN = ("run", "--no-plot")
GOOD_TOPOLOGY = 'gpu = "h100-sxm"\nnodes = 2\n[node]\ngpus = 8\nnic_gbps = 400\n[fabric]\nkind = "fat-tree"\nnodes_per_leaf = 2\nspines = 2\n'

FILES = {
    "malformed.toml": 'name = "x"\nnodes = = 2\n',
    "neg_bw.toml": GOOD_TOPOLOGY.replace("nic_gbps = 400", "nic_gbps = -400"),
    "zero_bw.toml": GOOD_TOPOLOGY.replace("nic_gbps = 400", "nic_gbps = 0"),
    "unknown_key.toml": GOOD_TOPOLOGY + "spine_count = 3\n",
    "string_gpus.toml": GOOD_TOPOLOGY.replace("gpus = 8", 'gpus = "eight"'),
    "unknown_gpu.toml": GOOD_TOPOLOGY.replace('"h100-sxm"', '"h100"'),
    "disconnected.toml": 'gpu = "h100-sxm"\nnodes = 2\n[node]\ngpus = 8\n[fabric]\nkind = "none"\n',
    "bad_fabric.toml": GOOD_TOPOLOGY.replace('"fat-tree"', '"dragonfly"'),
    "model_missing.toml": "hidden = 1024\nlayers = 4\n",
    "model_typo.toml": "hidden = 1024\nlayers = 4\nheads = 8\nffn = 4096\nvocab = 32000\nhiden = 3\n",
    "model_bad_heads.toml": "hidden = 1024\nlayers = 4\nheads = 8\nkv_heads = 3\nffn = 4096\nvocab = 32000\n",
    "model_negative.toml": "hidden = -1024\nlayers = 4\nheads = 8\nffn = 4096\nvocab = 32000\n",
    "config.json": json.dumps({"model_type": "llama", "hidden_size": 1024}),
    "bert.json": json.dumps({"model_type": "bert", "hidden_size": 768}),
    "broken.json": '{"model_type": "llama",\n "hidden_size": 10,,}',
    "exp_typo.toml": "tp = 8\nppp = 2\n",
    "exp_type.toml": 'tp = "eight"\n',
    "exp_malformed.toml": "tp = [8\n",
    "exp_range.toml": "tp = 0\n",
    "exp_fraction.toml": "efficiency = 1.5\n",
    "exp_choice.toml": 'network = "flo"\n',
    "exp_bool.toml": 'fold = "no"\n',
    "missing_cell.csv": "0F0,0F1,0B0,0B1\n1F0,1B0,1F1\n",
    "duplicate.csv": "0F0,0F1,0B0,0B1,0B1\n1F0,1B0,1F1,1B1\n",
    "deadlock.csv": "0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n",
    "bad_cell.csv": "0F0,0F1,0B0,0X1\n1F0,1B0,1F1,1B1\n",
    "w_before_i.csv": "0F0,0W0,0I0\n1F0,1I0,1W0\n",
    "good2.csv": "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n",
}

CASES = [
    # names
    (("topology", "h100-i"), ("unknown topology 'h100-i'", "did you mean 'h100-ib'")),
    ((*RUN, "--model", "llama3-7b"), ("unknown model 'llama3-7b'", "llama3-70b")),
    ((*RUN, "--topology", "h100"), ("unknown topology 'h100'",)),
    ((*RUN, "--schedule", "1f1c"), ("unknown schedule '1f1c'", "1f1b")),
    ((*RUN, "--network", "flo"), ("network = 'flo'", "analytic")),
    ((*RUN, "--collective-algo", "rng", "--network", "flow"), ("rng", "ring")),
    (("list", "modles"), ("invalid choice", "models")),
    (("frobnicate",), ("invalid choice",)),
    (("collective", "all-reduc", "--size", "1G", "--gpus", "8", "--topology", "h100-ib"), ("all-reduc",)),
    # flags
    ((*RUN, "--tp", "x"), ("--tp", "'x'")),
    ((*RUN, "--tp", "0"), ("--tp", "must be >= 1")),
    ((*RUN, "--routing-skew", "-1"), ("--routing-skew", "must be a finite number >= 0")),
    (("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", "8", "--seq", "8192",
      "--gbs", "64", "--mbs", "1,0"), ("--mbs", "invalid list '1,0'", "0 must be >= 1")),
    ((*RUN, "--efficiency", "1.5"), ("--efficiency", "(0, 1]")),
    ((*RUN, "--zero", "4"), ("--zero: 4 must be a ZeRO stage: 0, 1, 2 or 3",)),
    ((*RUN, "--recompute", "some"), ("recompute = 'some'", "selective")),
    (("schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--costs", "1,1"), ("F,I,W",)),
    (("collective", "all-reduce", "--size", "lots", "--gpus", "8", "--topology", "h100-ib"), ("lots",)),
    (("topology", "h100-ib", "--draw", "x.gif"), (".png or .svg",)),
    # layouts
    ((*RUN, "--model", "llama3-70b", "--gpus", "64", "--tp", "3"),
     ("gpus=64 is not divisible by tp*cp*pp=12", "defaults in use: pp=4 (override with --pp)")),
    ((*RUN, "--gpus", "100"), ("gpus=100", "defaults in use: tp=8, pp=4 (override with --tp, --pp)")),
    ((*RUN, "--gpus", "512", "--topology", "h100-ib"), ("gbs=32", "fewer than pp=4", "--gbs")),
    ((*RUN, "--model", "llama3-70b", "--gpus", "64", "--tp", "16", "--nodes", "8"), ("tp=16 does not divide the 8 KV heads",)),
    ((*RUN, "--gpus", "64", "--tp", "8", "--pp", "3", "--dp", "2"), ("does not match gpus=64",)),
    ((*RUN, "--gpus", "64", "--tp", "8", "--pp", "4", "--gbs", "3"), ("gbs=3 is not divisible by dp*mbs=2",)),
    ((*RUN, "--gpus", "64", "--tp", "8", "--pp", "4", "--gbs", "4"), ("fewer than pp=4 stages",)),
    ((*RUN, "--gpus", "64", "--tp", "1", "--pp", "64", "--vpp", "2", "--gbs", "128"),
     ("pp*vpp=128", "exceeds the 80 layers")),
    ((*RUN, "--gpus", "640", "--nodes", "8"), ("gpus=640 exceeds",)),
    ((*RUN, "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--ep", "2", "--topology", "h100-ib"),
     ("has no experts",)),
    ((*RUN, "--model", "mixtral-8x7b", "--gpus", "64", "--ep", "3", "--topology", "h100-ib"),
     ("ep=3 does not divide the 8 experts",)),
    ((*RUN, "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", "64", "--tp", "8", "--cp", "8",
      "--pp", "1", "--seq", "2048"), ("tokens per CP rank",)),
    ((*RUN, "--gpus", "64", "--tp", "8", "--pp", "2", "--gbs", "16", "--fp8"), ("--fp8", "no FP8 tensor cores")),
    ((*RUN, "--gpus", "64", "--tp", "8", "--cp", "2", "--pp", "2", "--attention", "eager"),
     ("attention=eager with cp=2",)),
    ((*RUN, "--gpus", "64", "--tp", "8", "--pp", "1", "--vpp", "2"), ("vpp=2 needs pp > 1",)),
    ((*RUN, "--gpus", "64", "--tp", "8", "--pp", "4", "--gbs", "16", "--schedule", "interleaved-1f1b",
      "--vpp", "2", "--mbs", "1", "--dp", "2", "--gbs", "10"), ("interleaved-1f1b", "m=5")),
    (("mesh", "--gpus", "16", "--pp", "2", "--order", "tp-dp-pp"), ("permutation",)),
    (("mesh", "--gpus", "16", "--pp", "2", "--rank", "99"), ("rank 99",)),
    (("mesh", "--gpus", "16"), ("gpus=16", "defaults in use: tp=8, pp=4")),
    ((*RUN, "--from-megatron", "--tensor-model-parallel-size 8 --cpu-offloading"),
     ("Megatron-LM keys simtrain cannot simulate", "--cpu-offloading")),
    ((*RUN, "--from-megatron", "--tensor-model-parallel-size 8 --tp-comm-overlap"),
     ("--tp-comm-overlap needs sequence parallelism", "--sequence-parallel")),
    ((*RUN, "--from-megatron", "no-such-file.sh"), ("--from-megatron", "neither a file nor")),
    ((*RUN, "--from-torchtitan", "no-such-file.toml"), ("file not found",)),
    ((*RUN, "--recompute", "100", "--gpus", "64", "--tp", "8"), ("recompute=100 layers exceeds",)),
    ((*RUN, "--max-events", "100"), ("max_events=100", "at least 10,240 operations", "raise --max-events")),
    ((*RUN, "--schedule", "gpipe", "--gbs", "64", "--gpus", "64", "--tp", "8", "--pp", "4", "--require-fit"),
     ("--require-fit", "stage 0 by")),
    (("search", "--model", "llama3-405b", "--topology", "seed-h100", "--gpus", "8", "--seq", "131072",
      "--gbs", "8"), ("no configuration fits",)),
    (("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", "8", "--seq", "8192",
      "--gbs", "64", "--resume"), ("--resume needs --results",)),
]

FILE_CASES = [
    (("topology", "{malformed.toml}"), ("malformed TOML", "line 2")),
    (("topology", "{neg_bw.toml}"), ("nic_gbps", "-400")),
    (("topology", "{zero_bw.toml}"), ("nic_gbps", "0")),
    (("topology", "{unknown_key.toml}"), ("unknown key 'spine_count'",)),
    (("topology", "{string_gpus.toml}"), ("gpus", "'eight'")),
    (("topology", "{unknown_gpu.toml}"), ("unknown gpu 'h100'",)),
    (("topology", "{disconnected.toml}"), ("route",)),
    (("topology", "{bad_fabric.toml}"), ("dragonfly",)),
    (("topology", "{nofile.toml}"), ("file not found",)),
    ((*RUN, "--model", "{model_missing.toml}"), ("missing key",)),
    ((*RUN, "--model", "{model_typo.toml}"), ("unknown key 'hiden'", "did you mean 'hidden'")),
    ((*RUN, "--model", "{model_bad_heads.toml}"), ("kv_heads = 3",)),
    ((*RUN, "--model", "{model_negative.toml}"), ("hidden = -1024",)),
    ((*RUN, "--model", "{config.json}"), ("num_hidden_layers",)),
    ((*RUN, "--model", "{bert.json}"), ("bert", "llama")),
    ((*RUN, "--model", "{broken.json}"), ("line 2",)),
    ((*RUN, "--config", "{exp_typo.toml}"), ("unknown key 'ppp'", "did you mean 'pp'")),
    ((*RUN, "--config", "{exp_type.toml}"), ("tp", "'eight'")),
    ((*RUN, "--config", "{exp_malformed.toml}"), ("malformed TOML",)),
    ((*RUN, "--config", "{exp_range.toml}"), ("exp_range.toml: tp = 0: must be >= 1",)),
    ((*RUN, "--config", "{exp_fraction.toml}"), ("efficiency = 1.5: must be in (0, 1]",)),
    ((*RUN, "--config", "{exp_choice.toml}"), ("network = 'flo'", "did you mean 'flow'")),
    ((*RUN, "--config", "{exp_bool.toml}"), ("fold = 'no': expected bool",)),
    ((*RUN, "--config", "{nofile.toml}"), ("file not found",)),
    (("schedule", "{missing_cell.csv}", "--pp", "2", "--microbatches", "2"), ("rank 1 (line 2), cell 3", "missing")),
    (("schedule", "{duplicate.csv}", "--pp", "2", "--microbatches", "2"), ("duplicate",)),
    (("schedule", "{deadlock.csv}", "--pp", "2", "--microbatches", "2"), ("deadlock",)),
    (("schedule", "{bad_cell.csv}", "--pp", "2", "--microbatches", "2"), ("cell 3", "0X1")),
    (("schedule", "{w_before_i.csv}", "--pp", "2", "--microbatches", "1"), ("rank 0",)),
    (("schedule", "{good2.csv}", "--pp", "4", "--microbatches", "2"), ("2 ranks", "pp=4")),
    (("schedule", "{good2.csv}", "--pp", "2", "--microbatches", "3"), ("m=3",)),
    (("schedule", "{nofile.csv}", "--pp", "2", "--microbatches", "2"), ("nofile.csv",)),
]


@pytest.mark.parametrize("argv, needles", CASES)
def test_bad_input(argv, needles):
    assert_user_error(*argv, contains=needles)


@pytest.mark.quick
@pytest.mark.parametrize("argv, needles", FILE_CASES)
def test_bad_file(tmp_path, argv, needles):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    paths = {f"{{{n}}}": str(tmp_path / n) for n in list(FILES) + ["nofile.toml", "nofile.csv"]}
    argv = [paths.get(a, a) for a in argv]
    if argv[0] == "schedule":
        code_line = assert_user_error_first_line(*argv)
        for n in needles:
            assert n in code_line, code_line
        return
    assert_user_error(*argv, contains=needles)


def assert_user_error_first_line(*argv):
    """Schedule errors print one error line, then the rank-by-step grid."""
    from helpers import cli

    code, out, err = cli(*argv)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err
    first = err.splitlines()[0]
    assert first.startswith("simtrain: error: ")
    return first


@pytest.mark.quick
def test_at_least_forty_cases():
    assert len(CASES) + len(FILE_CASES) >= 40


@pytest.mark.quick
def test_an_unknown_flag_points_to_the_help_of_its_command():
    line = assert_user_error("run", "--microbatches", "8")
    assert line == "simtrain: error: unrecognized arguments: --microbatches 8 (see simtrain run --help)"
    line = assert_user_error("schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--gbs", "8")
    assert line == "simtrain: error: unrecognized arguments: --gbs 8 (see simtrain schedule --help)"
    assert assert_user_error("run", "--tp", "x") == \
        "simtrain: error: argument --tp: invalid integer 'x' (see simtrain run --help)"
    assert assert_user_error("frobnicate").endswith("(see simtrain --help)")


def _subparsers(parser):
    return next(a for a in parser._actions if a.dest == "command").choices


def _flags(parser) -> list[tuple]:
    return [(a.option_strings, a.dest, a.default, a.nargs, a.const, a.choices, a.required, a.help, a.metavar,
             getattr(a.type, "__qualname__", a.type), type(a).__name__) for a in parser._actions]


@pytest.mark.quick
def test_a_command_built_alone_parses_as_within_every_command():
    """``main`` builds only the group of the command it is given; each command's parser is then
    the one built with every command, and :data:`COMMANDS` names every command of the full parser
    in the order its help lists them."""
    from simtrain.cli.main import ADDERS, COMMANDS, build_parser

    full = _subparsers(build_parser())
    assert list(full) == list(COMMANDS)
    assert list(dict.fromkeys(COMMANDS.values())) == list(ADDERS)
    for command in COMMANDS:
        alone = _subparsers(build_parser(command))
        assert command in alone and set(alone) <= set(full)
        assert _flags(alone[command]) == _flags(full[command]), command
    assert list(_subparsers(build_parser("frobnicate"))) == list(COMMANDS)


@pytest.mark.quick
def test_an_unknown_model_says_a_config_json_or_a_toml_works(tmp_path):
    line = assert_user_error("run", "--no-plot", "--model", "Qwen/Qwen3-30B-A3B",
                             contains=("unknown model 'Qwen/Qwen3-30B-A3B'", "known: deepseek-v3", "mixtral-8x7b",
                                       "Hugging Face config.json", "model .toml"))
    assert "path" in line
    # and it does: the model's config.json (Qwen/Qwen3-30B-A3B on the Hugging Face hub)
    config = tmp_path / "Qwen3-30B-A3B" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "vocab_size": 151936,
        "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False}))
    code, out, err = cli("analytic", "--model", config, "--topology", "h100-ib", "--gpus", "16", "--tp", "1",
                         "--pp", "1", "--ep", "8", "--seq", "4096", "--gbs", "16")
    assert code == 0, err
    assert "Qwen3-30B-A3B on 16 x h100-sxm" in out


@pytest.mark.quick
def test_an_ep_that_does_not_divide_lists_the_valid_ones():
    line = assert_user_error("run", "--no-plot", "--model", "mixtral-8x7b", "--ep", "16",
                             contains="ep=16 does not divide the 8 experts of mixtral-8x7b; ")
    assert "valid ep with etp=8, pp=4 on 64 GPUs: 1, 2;" in line
    for ep in (1, 2):  # each value listed runs
        api.resolve({"model": "mixtral-8x7b", "ep": ep})
    line = assert_user_error("run", "--no-plot", "--model", "mixtral-8x7b", "--tp", "1", "--pp", "1", "--gbs", "64",
                             "--ep", "16")
    assert "valid ep with etp=1, pp=1 on 64 GPUs: 1, 2, 4, 8" in line


@pytest.mark.quick
def test_a_pp_that_does_not_divide_the_gpus_lists_the_valid_ones():
    line = assert_user_error("run", "--no-plot", "--pp", "3", "--gpus", "256",
                             contains="gpus=256 is not divisible by tp*cp*pp=24 (tp=8, cp=1, pp=3)")
    assert "; valid pp with tp=8, cp=1: 1, 2, 4, 8, 16, 32;" in line
    for pp in (1, 2, 4, 8, 16, 32):
        api.resolve({"gpus": 256, "pp": pp})
    assert "valid tp with cp=1, pp=4: 1, 2, 4, 8, 16, 32, 64" in assert_user_error("run", "--tp", "3", "--gpus", "256")
