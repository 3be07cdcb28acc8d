"""Issue 12 item 8: serving plans the emitted vLLM / SGLang / TensorRT-LLM arguments can express.

The search covers only what ``--engine`` can run (no SP/chunk knobs exist in any of them), the
emitted launch arguments read back with the engine's own semantics give exactly the evaluated
plan (and re-evaluating that plan gives the same prediction), the top plans differ in an emitted
setting, and the Pareto section never prints an empty table.
"""

import json

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.serving.inference import evaluate_inference
from costmodel.spec.presets import load_cluster, load_model
from planner import cli, recommend_infer
from search.infer import InferProblem, InferResult, shapes, solve_infer
from search.serving_engines import ENGINES
from search.solve import SolveOptions

H100 = load_cluster("h100-sxm")
ENGINE_NAMES = ("vllm", "sglang", "trtllm")

#: TensorRT-LLM ``trtllm-serve`` options (https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve.html)
TRTLLM_FLAGS = {
    "--tp_size",
    "--pp_size",
    "--ep_size",
    "--max_batch_size",
    "--max_seq_len",
    "--max_num_tokens",
    "--extra_llm_api_options",
}
#: the flags that set batch limits, lengths and formats, not the parallel layout
NOT_LAYOUT = {
    "--max-num-seqs",
    "--max-model-len",
    "--kv-cache-dtype",
    "--max-num-batched-tokens",
    "--quantization",
    "--max-running-requests",
    "--context-length",
    "--chunked-prefill-size",
    "--max_batch_size",
    "--max_seq_len",
    "--max_num_tokens",
    "--extra_llm_api_options",
}


#: each engine's flags for the running-request limit and the step token budget
SCHED_FLAGS = {
    "vllm": ("--max-num-seqs", "--max-num-batched-tokens"),
    "sglang": ("--max-running-requests", "--chunked-prefill-size"),
    "trtllm": ("--max_batch_size", "--max_num_tokens"),
}


def _val(args, flag, default=1):
    return int(args[args.index(flag) + 1]) if flag in args else default


def run_as_engine(engine, args, replicas):
    """(tp, pp, dp, ep) an engine runs for these arguments, by its documented semantics (written
    here independently of planner.emit_serving / search.infer)."""
    if engine == "vllm":  # --enable-expert-parallel: EP = TP x DP of the server
        tp, pp, dps = (
            _val(args, "--tensor-parallel-size"),
            _val(args, "--pipeline-parallel-size"),
            _val(args, "--data-parallel-size"),
        )
        return tp, pp, dps * replicas, tp * dps if "--enable-expert-parallel" in args else 1
    if engine == "sglang":  # --enable-dp-attention: --tp-size spans all DP ranks, attention TP = tp/dp
        tps, pp, dps, ep = (_val(args, f) for f in ("--tp-size", "--pp-size", "--dp-size", "--ep-size"))
        tp = tps // dps if "--enable-dp-attention" in args else tps
        return tp, pp, dps * replicas, ep
    assert {a for a in args if a.startswith("--")} <= TRTLLM_FLAGS
    return _val(args, "--tp_size"), _val(args, "--pp_size"), replicas, _val(args, "--ep_size")


def problem(model="llama3-70b", gpus=8, engine="vllm", **kw):
    kw.setdefault("input_len", 4000)
    kw.setdefault("output_len", 500)
    return InferProblem(model=load_model(model), cluster=H100.with_gpus(gpus), engine=engine, **kw)


README = dict(ttft_target_s=0.4, tpot_target_s=0.03)  # the README's serving example


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_top_plans_are_runnable_and_the_launch_reproduces_them(engine):
    p = problem(engine=engine, **README)
    r = solve_infer(p, SolveOptions(top_k=3))
    assert r.status == "OPTIMAL" and len(r.plans) >= 2
    for e in r.plans:
        c = e.config
        assert not c.sp and c.chunks == 1  # no engine has a launch setting for these
        d = recommend_infer._launch(p, e, None)
        assert d["exact"]
        assert run_as_engine(engine, d["args"], d["replicas"]) == (c.tp, c.pp, c.dp, c.ep)
        # the plan the flags describe (parallel layout, concurrency limit, step token budget), evaluated
        # afresh on that engine, is the prediction shown, and meets the targets
        seqs, budget = SCHED_FLAGS[engine]
        assert _val(d["args"], seqs, None) == e.batch_per_replica
        again = evaluate_inference(
            p.model,
            p.cluster,
            p.workload(e.batch),
            ParallelConfig(tp=c.tp, pp=c.pp, dp=c.dp, ep=c.ep),
            engine=engine,
            max_seqs=_val(d["args"], seqs, None),
            prefill_tokens=_val(d["args"], budget, None),
        )
        assert again.ttft_s == pytest.approx(e.ttft_s) and again.tpot_s == pytest.approx(e.tpot_s)
        assert p.meets(again)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("model, gpus", [("mixtral-8x7b", 8), ("llama3-8b", 8), ("mixtral-8x7b", 16)])
def test_every_searched_shape_round_trips_through_the_engine_flags(engine, model, gpus):
    p = problem(model=model, gpus=gpus, engine=engine, input_len=1000, output_len=200)
    got = shapes(p)
    assert got
    for c in got:
        d = recommend_infer._launch(p, _Est(c), None)
        assert d["exact"], c
        assert run_as_engine(engine, d["args"], d["replicas"]) == (c.tp, c.pp, c.dp, c.ep), (c, d["command"])
    if engine == "vllm" and p.model.is_moe:  # vLLM's EP is TP x DP of one server (or TP, one server per replica)
        assert all(c.ep in (1, c.tp, c.tp * c.dp) for c in got)


class _Est:
    """Just enough of an InferenceEstimate for the launch of a shape."""

    def __init__(self, c):
        self.config, self.batch_per_replica, self.batch, self.kv_dtype = c, 4, 4 * c.dp, "bf16"


def _layout(args):
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in NOT_LAYOUT:
            skip = a != "--enable-expert-parallel"
        else:
            out.append(a)
    return tuple(out)


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_top_three_differ_in_an_emitted_setting(capsys, engine):
    code = cli.main(
        [
            "recommend",
            "--mode",
            "infer",
            "--model",
            "llama3-70b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--input-len",
            "4000",
            "--output-len",
            "500",
            "--ttft-ms",
            "400",
            "--tpot-ms",
            "30",
            "--top",
            "3",
            "--engine",
            engine,
            "--json",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["engine"] == engine and len(d["plans"]) == 3
    launches = [p["launch"][engine] for p in d["plans"]]
    keys = [(_layout(x["args"]), x["replicas"]) for x in launches]
    assert len(set(keys)) == 3, [x["command"] for x in launches]


def test_default_engine_is_vllm_and_text_prints_its_commands(capsys):
    code = cli.main(
        [
            "recommend",
            "--mode",
            "infer",
            "--model",
            "llama3-70b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--input-len",
            "4000",
            "--output-len",
            "500",
            "--ttft-ms",
            "400",
            "--tpot-ms",
            "30",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "engine vLLM" in out and "  1: vllm serve $MODEL" in out
    assert "sglang" not in out and " sp " not in out.split("best plans")[1].splitlines()[1]
    code = cli.main(
        [
            "recommend",
            "--mode",
            "infer",
            "--model",
            "llama3-70b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "16",
            "--input-len",
            "2000",
            "--output-len",
            "200",
            "--engine",
            "trtllm",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "  1: trtllm-serve $MODEL --tp_size" in out


@pytest.mark.parametrize(
    "flags, field", [(["--sp", "--tp", "4"], "sp"), (["--chunks", "4"], "chunks"), (["--engine", "tgi"], "engine")]
)
def test_settings_the_engine_cannot_express_are_refused(capsys, flags, field):
    code = cli.main(
        [
            "recommend",
            "--mode",
            "infer",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--input-len",
            "1000",
            "--output-len",
            "200",
        ]
        + flags
    )
    err = capsys.readouterr().err
    assert code == 2 and f"{field}=" in err and len(err.splitlines()) == 1


def test_engine_in_training_mode_is_refused(capsys):
    code = cli.main(
        [
            "recommend",
            "--model",
            "gpt-1.7b",
            "--cluster",
            "a100-80g",
            "--gpus",
            "16",
            "--global-batch",
            "64",
            "--seq",
            "2048",
            "--engine",
            "vllm",
        ]
    )
    assert code == 2 and "engine=" in capsys.readouterr().err


def test_unmet_targets_print_the_closest_plan_and_a_non_empty_front(capsys):
    code = cli.main(
        [
            "recommend",
            "--mode",
            "infer",
            "--model",
            "llama3-70b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "8",
            "--input-len",
            "4000",
            "--output-len",
            "500",
            "--ttft-ms",
            "50",
            "--tpot-ms",
            "5",
        ]
    )
    out = capsys.readouterr().out
    assert code == 2
    front = out.split("Pareto front")[1]
    assert "no plan meets the targets; closest (" in front and "tp=" in front
    rows = [line for line in front.splitlines() if line.startswith("-  ")]
    assert rows and all(line.split()[-1].startswith("x") for line in rows)  # each misses by a stated factor


def test_pareto_section_with_no_fitting_plan_is_one_line():
    p = problem(**README)
    lines = recommend_infer.pareto_lines(p, InferResult("INFEASIBLE", explanation="no plan fits in memory"))
    assert len(lines) == 1 and "Pareto front: none (no plan fits in memory" in lines[0]


def test_engines_table_has_no_sp_or_chunk_knobs():
    assert set(ENGINES) == set(ENGINE_NAMES)
    assert not any(s.sp or s.chunks for s in ENGINES.values())
    with pytest.raises(SpecError, match="sp=True"):
        problem(limits=__import__("search.problem", fromlist=["Limits"]).Limits(fixed={"sp": True}))
