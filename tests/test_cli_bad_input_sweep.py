"""A sweep of user mistakes over every subcommand: each was a traceback, a run past a minute, a silently ignored flag or a
multi-line refusal, and now exits 2 with one stderr line naming the field (``planner: error: <field>=<value>: must be``).

Spec-file cases write a small bad file into the test's temporary folder (``{tmp}`` in an argument).
"""

import json
import time
from pathlib import Path

import pytest

from costmodel.spec.presets import preset_info
from planner import cli

EVALUATE = ["evaluate", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64"]
EVALUATE += ["--seq", "2048", "--tp", "8"]
EXPLAIN = ["explain", *EVALUATE[1:]]
RECOMMEND = ["recommend", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64"]
RECOMMEND += ["--seq", "2048", "--time-limit", "1"]
SERVE = ["recommend", "--mode", "infer", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8"]
SERVE += ["--input-len", "512", "--output-len", "128"]
INFER_EVAL = ["evaluate", "--mode", "infer", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "1"]
INFER_EVAL += ["--input-len", "100", "--output-len", "10"]
SWEEP = ["sweep", "--models", "llama3-8b", "--clusters", "h100-sxm", "--gpus", "8", "--global-batch", "64"]
SWEEP += ["--seq", "2048", "--no-progress"]
RUNS = str(Path(__file__).parent / "data" / "korthikanti2022_runs.csv")
TINY = {"name": "tiny", "layers": 8, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 32000}
MOE = {**TINY, "experts": 8, "topk": 2, "activation": "swiglu"}
BIG = "9" * 5000  # past int()'s 4,300 digits


def _cluster(path: str, value) -> dict:
    """The h100-sxm preset with ``path`` (``device.name``, ``device.dma_engines.0.count``) set to ``value``."""
    d = json.loads(json.dumps(preset_info("clusters", "h100-sxm")))
    *parents, key = path.split(".")
    target = d
    for p in parents:
        target = target[int(p)] if isinstance(target, list) else target[p]
    target[key] = value
    return d


#: file name -> content (dicts as JSON, strings verbatim)
FILES = {
    "name_list.json": {**TINY, "name": ["x"]},
    "tied_list.json": {**TINY, "tied_embeddings": [1]},
    "shared_experts_huge.json": {**MOE, "shared_experts": 10**30},
    "kv_lora_huge.json": {**MOE, "kv_lora_rank": 10**30},
    "load_cv_inf.json": '{"name": "m", "layers": 8, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 32000, '
    '"experts": 8, "topk": 2, "moe_load_cv": Infinity}',
    "load_cv_huge.json": {**MOE, "moe_load_cv": 1e30},
    "tflops_inf.json": json.dumps(_cluster("device.peak_bf16_tflops", 1.0)).replace(
        '"peak_bf16_tflops": 1.0', '"peak_bf16_tflops": Infinity'
    ),
    "cluster_name_list.json": _cluster("name", ["x"]),
    "stack_list.json": _cluster("stack", ["mcore-2025"]),
    "device_name_null.json": _cluster("device.name", None),
    "kernel_table_bool.json": _cluster("device.kernel_table", True),
    "sustained_clocks_list.json": _cluster("device.sustained_clocks", [True]),
    "sm_count_huge.json": _cluster("device.sm_count", 10**30),
    "dma_count_huge.json": _cluster("device.dma_engines.0.count", 10**30),
    "dma_name_list.json": _cluster("device.dma_engines.0.name", ["x"]),
    "dma_uses_compute_list.json": _cluster("device.dma_engines.0.uses_compute", [1]),
    "typo_key.json": {**{k: v for k, v in TINY.items() if k != "hidden"}, "hiden": 1024},
    "tt_tp_zero.toml": "[parallelism]\ntensor_parallel_degree = 0\n",
    "tt_shard_text.toml": "[parallelism]\ndata_parallel_shard_degree = 'x'\n",
    "tt_cp_inf.toml": "[parallelism]\ncontext_parallel_degree = inf\n",
    "tt_seq_zero.toml": "[training]\nseq_len = 0\n",
    "tt_pp_past_gpus.toml": "[parallelism]\npipeline_parallel_degree = 128\n",
}

_TT = ["evaluate", "--model", "gpt3-175b", "--cluster", "a100-80g", "--gpus", "64", "--torchtitan-config"]

# (id, argv, field the error names)
CASES = [
    # spec files: a traceback before (unhashable, not iterable, OverflowError), a timeout, or a silently accepted inf
    ("model_name_list", [*EVALUATE[:2], "{tmp}/name_list.json", *EVALUATE[3:]], "model.name"),
    ("model_tied_embeddings_list", [*EVALUATE[:2], "{tmp}/tied_list.json", *EVALUATE[3:]], "model.tied_embeddings"),
    (
        "model_shared_experts_huge",
        [*EVALUATE[:2], "{tmp}/shared_experts_huge.json", *EVALUATE[3:11], "--tp", "2"],
        "shared_experts",
    ),
    ("model_kv_lora_rank_huge", [*EVALUATE[:2], "{tmp}/kv_lora_huge.json", *EVALUATE[3:11]], "kv_lora_rank"),
    ("model_moe_load_cv_inf", [*EVALUATE[:2], "{tmp}/load_cv_inf.json", *EVALUATE[3:11]], "model.moe_load_cv"),
    ("model_moe_load_cv_huge", [*EVALUATE[:2], "{tmp}/load_cv_huge.json", *EVALUATE[3:11]], "model.moe_load_cv"),
    ("model_unknown_key_short", [*EVALUATE[:2], "{tmp}/typo_key.json", *EVALUATE[3:11]], "model.hiden"),
    ("cluster_tflops_inf", [*EVALUATE[:4], "{tmp}/tflops_inf.json", *EVALUATE[5:]], "device.peak_bf16_tflops"),
    ("cluster_name_list", [*EVALUATE[:4], "{tmp}/cluster_name_list.json", *EVALUATE[5:]], "cluster.name"),
    ("cluster_stack_list", [*EVALUATE[:4], "{tmp}/stack_list.json", *EVALUATE[5:]], "cluster.stack"),
    ("device_name_null", [*EVALUATE[:4], "{tmp}/device_name_null.json", *EVALUATE[5:]], "device.name"),
    ("device_kernel_table_bool", [*EVALUATE[:4], "{tmp}/kernel_table_bool.json", *EVALUATE[5:]], "device.kernel_table"),
    (
        "device_sustained_clocks_list",
        [*EVALUATE[:4], "{tmp}/sustained_clocks_list.json", *EVALUATE[5:]],
        "device.sustained_clocks",
    ),
    ("device_sm_count_huge", [*EVALUATE[:4], "{tmp}/sm_count_huge.json", *EVALUATE[5:]], "device.sm_count"),
    ("dma_count_huge", [*EVALUATE[:4], "{tmp}/dma_count_huge.json", *EVALUATE[5:]], "count"),
    ("dma_name_list", [*EVALUATE[:4], "{tmp}/dma_name_list.json", *EVALUATE[5:]], "dma.name"),
    ("dma_uses_compute_list", [*EVALUATE[:4], "{tmp}/dma_uses_compute_list.json", *EVALUATE[5:]], "uses_compute"),
    # torchtitan job TOML: TypeError, ZeroDivisionError, OverflowError; a degree past the GPUs read as dp=0
    ("torchtitan_tp_zero", [*_TT, "{tmp}/tt_tp_zero.toml"], "torchtitan_config.parallelism.tensor_parallel_degree"),
    (
        "torchtitan_shard_text",
        [*_TT, "{tmp}/tt_shard_text.toml"],
        "torchtitan_config.parallelism.data_parallel_shard_degree",
    ),
    ("torchtitan_cp_inf", [*_TT, "{tmp}/tt_cp_inf.toml"], "torchtitan_config.parallelism.context_parallel_degree"),
    ("torchtitan_seq_zero", [*_TT, "{tmp}/tt_seq_zero.toml"], "torchtitan_config.training.seq_len"),
    ("torchtitan_pp_past_gpus", [*_TT, "{tmp}/tt_pp_past_gpus.toml"], "tp*pp*cp"),
    # numbers past what CP-SAT takes (OverflowError / TypeError tracebacks) or what the search enumerates
    ("recommend_workers_huge", [*RECOMMEND, "--workers", "99999999999999999999"], "workers"),
    ("recommend_seed_past_int32", [*RECOMMEND, "--seed", "2147483648"], "seed"),
    ("recommend_vp_max_huge", [*RECOMMEND, "--vp-max", "1000000000"], "vp_max"),
    ("layout_repeat_huge", [*EVALUATE, "--pp", "1", "--layout", "(t|)*1000000000"], "layout"),
    ("layout_count_digits", [*EVALUATE, "--pp", "1", "--layout", "t*" + BIG], "layout"),
    ("dma_count_digits", [*EVALUATE, "--dma", "tp:nccl-sm*" + BIG], "dma"),
    ("megatron_args_nan", [*_TT[:7], "--megatron-args", "--bf16 --tensor-model-parallel-size nan"], "tensor_model"),
    # flags a command accepted and ignored
    ("recommend_layout", [*RECOMMEND, "--pp", "2", "--layout", "Et*15|t*16L"], "layout"),
    ("recommend_infer_global_batch", [*SERVE, "--global-batch", "8"], "global_batch"),
    ("explain_input_len_in_training", [*EXPLAIN, "--input-len", "512"], "input_len"),
    ("explain_kv_dtype_in_training", [*EXPLAIN, "--kv-dtype", "fp8"], "kv_dtype"),
    ("calibrate_unknown_model", ["calibrate", RUNS, "--cluster", "a100-80g", "--model", "llama3-8bb"], "model"),
    (
        "calibrate_missing_model",
        ["calibrate", RUNS, "--cluster", "a100-80g", "--model", "/nonexistent/m.json"],
        "model",
    ),
    ("calibrate_log_flag_with_table", ["calibrate", RUNS, "--cluster", "a100-80g", "--tp", "8"], "tp"),
    ("calibrate_model_name_too_long", ["calibrate", RUNS, "--cluster", "a100-80g", "--model", "x" * 5000], "model"),
    ("recommend_dma_unknown_engine", [*RECOMMEND, "--dma", "tp:cdma*2"], "dma"),
    ("recommend_dma_too_many_engines", [*RECOMMEND, "--dma", "tp:nccl-sm*64"], "dma"),
    ("recommend_dma_stream_twice", [*RECOMMEND, "--dma", "tp+tp:nccl-sm*1"], "dma"),
    # empty paths: --report '' wrote nothing, sweep --out '' wrote into the working directory
    ("evaluate_report_empty", [*EVALUATE, "--report", ""], "report"),
    ("explain_trace_empty", [*EXPLAIN, "--trace", ""], "trace"),
    ("explain_gantt_blank", [*EXPLAIN, "--gantt", " "], "gantt"),
    ("recommend_baseline_empty", [*RECOMMEND, "--baseline", ""], "baseline"),
    ("sweep_out_empty", [*SWEEP, "--out", ""], "out"),
    ("sweep_grid_empty", [*SWEEP, "--grid", "", "--out", "{tmp}/sweep"], "grid"),
    # a converter's own error named its Python function ("invalid _names value")
    ("calibrate_fit_empty", ["calibrate", RUNS, "--cluster", "a100-80g", "--fit", ""], "fit"),
    # recommend --mode infer ignored --mtp-layers (the model's MTP modules are speculative decoding's drafts)
    ("serve_mtp_layers_huge", [*SERVE, "--mtp-layers", "1" + "0" * 20], "mtp_layers"),
    # training settings evaluate --mode infer ignored (the serving replay reads none of them)
    *[
        (f"evaluate_infer_{field}", [*INFER_EVAL, *flag], field)
        for field, flag in (
            ("bucket_mb", ["--bucket-mb", "25"]),
            ("loss_impl", ["--loss-impl", "te"]),
            ("activation_offload_layers", ["--activation-offload-layers", "1"]),
            ("pp_free_stage_inputs", ["--pp-free-stage-inputs"]),
            ("dma", ["--dma", "tp:nccl-sm*4"]),
            ("flash_attention", ["--no-flash-attention"]),
        )
    ],
]

# baselines are read after the search (one solve of --time-limit 1 each)
BASELINE_CASES = [
    ("baseline_key_twice", "tp=8,tp=4", "baseline.tp"),
    ("baseline_no_pairs", ",,,", "baseline"),
    ("baseline_bucket_inf", "tp=8,bucket_mb=inf", "bucket_mb"),
    ("baseline_degree_digits", "tp=" + BIG, "baseline.tp"),
]


@pytest.fixture
def spec_dir(tmp_path):
    for name, content in FILES.items():
        (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return tmp_path


def assert_one_line_error(code, out, err, field):
    assert code == 2, (code, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("planner: error: "), lines[0]
    assert field in lines[0], lines[0]
    assert ": must be " in lines[0], lines[0]
    assert len(lines[0]) <= 300, lines[0]  # one short line


def _run(capsys, argv, tmp):
    code = cli.main([a.replace("{tmp}", str(tmp)) for a in argv])
    return (code, *capsys.readouterr())


def test_every_case_has_its_own_id():
    assert len({c[0] for c in CASES + BASELINE_CASES}) == len(CASES) + len(BASELINE_CASES)


@pytest.mark.parametrize("argv, field", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(capsys, spec_dir, argv, field, monkeypatch):
    monkeypatch.chdir(spec_dir)  # nothing a refused command might write lands in the repository
    started = time.perf_counter()
    code, out, err = _run(capsys, argv, spec_dir)
    assert_one_line_error(code, out, err, field)
    assert time.perf_counter() - started < 10  # refused before any long work (the layout took 49 s)


@pytest.mark.parametrize("baseline, field", [c[1:] for c in BASELINE_CASES], ids=[c[0] for c in BASELINE_CASES])
def test_bad_baseline_exits_2_with_one_line(capsys, tmp_path, baseline, field):
    code, out, err = _run(capsys, [*RECOMMEND, "--baseline", baseline], tmp_path)
    assert_one_line_error(code, out, err, field)


def test_empty_sweep_out_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, [*SWEEP, "--out", ""], tmp_path)
    assert_one_line_error(code, out, err, "out")
    assert list(tmp_path.iterdir()) == []
