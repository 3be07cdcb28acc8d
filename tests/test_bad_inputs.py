"""Every user mistake ends as exit code 2, nothing on stdout, and one stderr line naming the field.

Each case changes one thing in a valid ``planner evaluate`` call (GPT-3 175B, 64 A100-80GB,
tp=8 pp=8) or gives a bad spec file. ``{tmp}`` in an argument is the test's temporary folder.
"""

import json

import pytest
import yaml

from costmodel.spec.presets import preset_info
from planner import cli

BASE = {
    "--model": "gpt3-175b",
    "--cluster": "a100-80g",
    "--gpus": "64",
    "--global-batch": "64",
    "--seq": "2048",
    "--tp": "8",
    "--pp": "8",
}
TINY = {"name": "tiny", "layers": 8, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 32000}


def _cluster(**changes) -> dict:
    d = json.loads(json.dumps(preset_info("clusters", "a100-80g")))
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = d
        for p in parents:
            target = target[p]
        if value is None:
            del target[key]
        else:
            target[key] = value
    return d


#: file name -> content written before each case (dicts as JSON/YAML, strings verbatim)
FILES = {
    "malformed.json": '{"layers": 2,',
    "list.yaml": "- 1\n- 2\n",
    "unknown_key.json": {**TINY, "flavour": "vanilla"},
    "missing_vocab.json": {k: v for k, v in TINY.items() if k != "vocab"},
    "heads_hidden.json": {**TINY, "hidden": 1000, "heads": 16},
    "kv_heads.json": {**TINY, "kv_heads": 3},
    "string_layers.yaml": {**TINY, "layers": "many"},
    "topk.json": {**TINY, "experts": 4, "topk": 5},
    "efficiency.json": _cluster(intra_link__efficiency=1.5),
    "no_device.yaml": _cluster(device=None),
    "negative_hbm.json": _cluster(device__hbm_gib=-80),
    "link_not_object.json": _cluster(inter_link=25),
}

# (id, changes to BASE (None removes the flag), extra args, field named in the error)
CASES = [
    ("zero_gpus", {"--gpus": "0"}, [], "gpus"),
    ("negative_gpus", {"--gpus": "-8"}, [], "gpus"),
    ("non_numeric_gpus", {"--gpus": "eight"}, [], "gpus"),
    ("negative_global_batch", {"--global-batch": "-3"}, [], "global_batch"),
    ("zero_global_batch", {"--global-batch": "0"}, [], "global_batch"),
    ("zero_seq", {"--seq": "0"}, [], "seq"),
    ("fractional_seq", {"--seq": "2048.5"}, [], "seq"),
    ("non_numeric_tp", {"--tp": "abc"}, [], "tp"),
    ("zero_tp", {"--tp": "0"}, [], "tp"),
    ("negative_pp", {"--pp": "-2"}, [], "pp"),
    ("non_integer_ep", {}, ["--ep", "two"], "ep"),
    ("zero_cp", {}, ["--cp", "0"], "cp"),
    ("zero_mb", {}, ["--mb", "0"], "mb"),
    ("chunks_zero", {}, ["--chunks", "0"], "chunks"),
    ("bucket_mb_negative", {}, ["--bucket-mb", "-1"], "bucket_mb"),
    ("bucket_mb_infinite", {}, ["--bucket-mb", "inf"], "bucket_mb"),
    ("bad_dtype", {}, ["--dtype", "fp4"], "dtype"),
    ("bad_recompute", {}, ["--recompute", "partial"], "recompute"),
    ("zero_stage_5", {}, ["--zero", "5"], "zero"),
    ("recompute_layers_without_full", {}, ["--recompute-layers", "3"], "recompute_layers"),
    ("recompute_layers_above_stage", {}, ["--recompute", "full", "--recompute-layers", "30"], "recompute_layers"),
    # 96 heads % tp=7
    ("heads_not_divisible_by_tp", {"--gpus": "56", "--tp": "7"}, [], "tp"),
    # layers not divisible by pp * vp are given a layout (issue 22); a layout Megatron refuses is refused:
    # 2 virtual stages for pp=8, and 8 decoder layers of 96
    ("layout_stage_count", {}, ["--layout", "Et|tL"], "layout"),
    ("layout_layer_count", {}, ["--layout", "Et|(t|)*6tL"], "layout"),
    ("vp_with_pp_1", {"--pp": "1"}, ["--vp", "2"], "vp"),
    # 8 * 8 * 2 = 128 != 64
    ("gpus_not_product_of_degrees", {}, ["--dp", "2"], "tp*pp*dp*cp"),
    # 64 % (8 * 3)
    ("degrees_not_dividing_gpus", {"--pp": "3"}, [], "tp*pp*cp"),
    # dp = 2, 63 % 2
    ("global_batch_not_divisible_by_dp_mb", {"--pp": "4", "--global-batch": "63"}, [], "global_batch"),
    # 12 micro-batches % pp=8 with interleaving
    ("micro_batches_not_multiple_of_pp_with_vp", {"--global-batch": "12"}, ["--vp", "2"], "global_batch"),
    ("ep_on_dense_model", {}, ["--ep", "2"], "ep"),
    # Mixtral: 8 experts % ep=3
    (
        "experts_not_divisible_by_ep",
        {"--model": "mixtral-8x7b", "--gpus": "24", "--pp": "1", "--global-batch": "48"},
        ["--ep", "3"],
        "ep",
    ),
    # Mixtral, dp=4: tp*dp*cp = 4 % ep=8
    (
        "ep_not_dividing_tp_dp_cp",
        {"--model": "mixtral-8x7b", "--gpus": "4", "--tp": "1", "--pp": "1"},
        ["--ep", "8"],
        "ep",
    ),
    # 2048 % (2 * cp=3)
    ("cp_not_dividing_seq", {"--gpus": "192"}, ["--cp", "3"], "cp"),
    # 2044 % tp=8 with sequence parallelism
    ("seq_not_multiple_of_tp_with_sp", {"--seq": "2044"}, ["--sp"], "sp"),
    ("switch_given_a_value", {}, ["--sp=yes"], "sp"),
    ("unknown_model_preset", {"--model": "gpt-9000"}, [], "model"),
    ("unknown_cluster_preset", {"--cluster": "tpu-v9"}, [], "cluster"),
    ("missing_model_file", {"--model": "{tmp}/absent.json"}, [], "model"),
    ("model_path_is_a_folder", {"--model": "{tmp}"}, [], "model"),
    ("malformed_json_model", {"--model": "{tmp}/malformed.json"}, [], "model"),
    ("yaml_holding_a_list", {"--model": "{tmp}/list.yaml"}, [], "model"),
    ("unknown_key_in_model_file", {"--model": "{tmp}/unknown_key.json"}, [], "model.flavour"),
    ("missing_required_key", {"--model": "{tmp}/missing_vocab.json"}, [], "model.vocab"),
    ("heads_not_dividing_hidden_in_file", {"--model": "{tmp}/heads_hidden.json"}, [], "heads"),
    ("kv_heads_not_dividing_heads", {"--model": "{tmp}/kv_heads.json"}, [], "kv_heads"),
    ("string_where_integer_expected", {"--model": "{tmp}/string_layers.yaml"}, [], "layers"),
    ("topk_above_experts", {"--model": "{tmp}/topk.json"}, [], "topk"),
    ("cluster_efficiency_above_1", {"--cluster": "{tmp}/efficiency.json"}, [], "intra_link.efficiency"),
    ("cluster_without_device", {"--cluster": "{tmp}/no_device.yaml"}, [], "cluster.device"),
    # the file says hbm_gib; the cost model names the SI field it was converted to
    ("cluster_negative_hbm", {"--cluster": "{tmp}/negative_hbm.json"}, [], "device.hbm_gib"),
    ("cluster_link_not_an_object", {"--cluster": "{tmp}/link_not_object.json"}, [], "inter_link"),
    ("missing_required_model", {"--model": None}, [], "model"),
    ("missing_value", {}, ["--tp"], "tp"),
    ("unknown_option", {}, ["--frobnicate", "3"], "--frobnicate"),
]


def _argv(changes: dict, extra: list, tmp) -> list[str]:
    opts = {**BASE, **changes}
    argv = ["evaluate"]
    for flag, value in opts.items():
        if value is not None:
            argv += [flag, value]
    return [a.replace("{tmp}", str(tmp)) for a in argv + extra]


@pytest.fixture
def spec_dir(tmp_path):
    for name, content in FILES.items():
        if isinstance(content, str):
            text = content
        elif name.endswith(".yaml"):
            text = yaml.safe_dump(content)
        else:
            text = json.dumps(content)
        (tmp_path / name).write_text(text)
    return tmp_path


def assert_one_line_error(code, out, err, field):
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("planner: error: ")
    assert field in lines[0], lines[0]
    assert ": must be " in lines[0]


def test_there_are_at_least_30_cases():
    assert len({c[0] for c in CASES}) == len(CASES) >= 30


@pytest.mark.parametrize("changes, extra, field", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(capsys, spec_dir, changes, extra, field):
    code = cli.main(_argv(changes, extra, spec_dir))
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, field + ("=" if not field.startswith("-") else ""))


@pytest.mark.parametrize(
    "argv, field",
    [
        (["frobnicate"], "command="),
        ([], "command="),
        (["presets", "--json=1"], "json="),
        (["presets", "--model", "x"], "argument="),
    ],
    ids=["unknown_subcommand", "no_subcommand", "switch_with_value_on_presets", "option_of_another_command"],
)
def test_bad_command_line_exits_2_with_one_line(capsys, argv, field):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, field)


def test_json_mode_errors_keep_stdout_empty(capsys):
    code = cli.main(["evaluate", *_argv({"--tp": "7"}, ["--json"], "")[1:]])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, "tp*pp*cp=")
