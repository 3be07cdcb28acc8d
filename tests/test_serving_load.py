"""Issue 40: load as users state it (:func:`costmodel.serving.scheduler.simulate`).

A closed loop at a concurrency and an open loop at the rate it serves agree on TTFT (the clients
are out of step, not in the lockstep of identical requests all sent at time 0); Gamma arrivals
with a coefficient of variation; p50/p90/p99 from the replay; an arrival rate above capacity
says so with the growing queue; a prompt beyond the model's context is refused in one line.
"""

import json

import pytest

from costmodel.serving.inference import evaluate_inference
from costmodel.serving.scheduler import percentile
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner import cli

M = load_model("llama3.1-70b")
H200 = load_cluster("h200").with_gpus(8)
TP8 = ParallelConfig(tp=8)


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_closed_and_open_loop_at_the_same_concurrency_agree(engine):
    """The issue's case: SGLang, Llama-3.1-70B TP8 on 8 H200, 16 clients (lockstep gave 1.05 s
    against 125 ms for Poisson arrivals at a similar mean concurrency)."""
    w = Workload(mode="infer", global_batch=16, input_len=2000, output_len=500)
    closed = evaluate_inference(M, H200, w, TP8, engine=engine)
    assert closed.serving["clients"] == "staggered"
    opened = evaluate_inference(M, H200, w, TP8, engine=engine, request_rate=closed.requests_per_s)
    assert opened.serving["running_mean"] == pytest.approx(closed.serving["running_mean"], rel=0.1)
    assert closed.ttft_s == pytest.approx(opened.ttft_s, rel=0.3)
    assert closed.tpot_s == pytest.approx(opened.tpot_s, rel=0.1)
    lockstep = evaluate_inference(M, H200, w, TP8, engine=engine, stagger=False)
    if engine == "sglang":  # the artifact: all 16 prompts in one prefill batch every cycle
        assert lockstep.ttft_s > 5 * opened.ttft_s


def test_gamma_arrivals_burstier_than_poisson_raise_the_tail():
    w = Workload(mode="infer", global_batch=16, input_len=2000, output_len=500)
    poisson = evaluate_inference(M, H200, w, TP8, engine="vllm", request_rate=2.0)
    bursty = evaluate_inference(M, H200, w, TP8, engine="vllm", request_rate=2.0, arrival_cv=3.0)
    assert poisson.serving["load"] == "poisson" and bursty.serving["load"] == "gamma"
    p, b = poisson.serving["percentiles_ms"]["ttft_ms"], bursty.serving["percentiles_ms"]["ttft_ms"]
    assert b["p90"] > p["p90"] and b["p99"] > p["p99"]


def test_percentiles_in_the_estimate_and_the_report(capsys):
    w = Workload(mode="infer", global_batch=16, input_len=2000, output_len=500)
    d = evaluate_inference(M, H200, w, TP8, engine="sglang").to_dict()
    for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
        q = d["serving"]["percentiles_ms"][k]
        assert 0 < q["p50"] <= q["p90"] <= q["p99"]
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    argv = ["evaluate", "--mode", "infer", "--model", "llama3.1-70b", "--cluster", "h200", "--tp", "8"]
    argv += ["--gpus", "8", "--input-len", "2000", "--output-len", "500", "--global-batch", "16"]
    assert cli.main(argv) == 0
    assert "p50 / p90 / p99" in capsys.readouterr().out


def test_a_rate_above_capacity_says_so_and_reports_the_growing_queue(capsys):
    w = Workload(mode="infer", global_batch=16, input_len=2000, output_len=500)
    ok = evaluate_inference(M, H200, w, TP8, engine="sglang", request_rate=1.0)
    assert not ok.serving["overloaded"] and ok.serving["queue_growth_per_s"] == 0
    assert ok.serving["served_requests_per_s"] == pytest.approx(1.0, rel=0.3)
    over = evaluate_inference(M, H200, w, TP8, engine="sglang", request_rate=100.0)
    sv = over.serving
    assert sv["overloaded"] and sv["served_requests_per_s"] < 20 and sv["queue_growth_per_s"] > 80
    assert sv["queue_at_last_arrival"] > 100
    assert any(n.startswith("OVERLOADED") for n in over.notes)
    argv = ["evaluate", "--mode", "infer", "--model", "llama3.1-70b", "--cluster", "h200", "--tp", "8"]
    argv += ["--gpus", "8", "--input-len", "2000", "--output-len", "500", "--request-rate", "100", "--json"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["serving"]["overloaded"] is True


def test_arrival_cv_needs_a_rate(capsys):
    argv = ["evaluate", "--mode", "infer", "--model", "llama3.1-70b", "--cluster", "h200", "--tp", "8"]
    argv += ["--gpus", "8", "--input-len", "2000", "--output-len", "500", "--arrival-cv", "2"]
    assert cli.main(argv) == 2
    assert "arrival_cv" in capsys.readouterr().err


def test_a_prompt_beyond_the_context_is_refused_in_one_line(capsys):
    argv = ["evaluate", "--mode", "infer", "--model", "llama3-8b", "--cluster", "h100-sxm", "--tp", "1"]
    argv += ["--gpus", "1", "--input-len", "10000000", "--output-len", "100", "--global-batch", "8"]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1
    assert "input_len=10000000" in lines[0] and "8192" in lines[0] and "8092" in lines[0]


def test_recommend_refuses_a_prompt_beyond_the_context_too(capsys):
    argv = ["recommend", "--mode", "infer", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8"]
    argv += ["--input-len", "10000000", "--output-len", "500"]
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "input_len=10000000" in lines[0] and "8192" in lines[0]
    assert "launch" not in out
