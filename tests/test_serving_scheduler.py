"""Issue 24 item 1: the engine's step loop (continuous batching, chunked prefill, admission, queueing).

Cases go trivial -> hand-computed (a step cost of one unit, arithmetic in comments) -> the real
cost model -> the search and the CLI -> errors.
"""

import json

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.serving.inference import evaluate_inference
from costmodel.spec.presets import load_cluster, load_model
from costmodel.serving.scheduler import simulate
from costmodel.serving.engines import SchedulerSpec, default_scheduler
from costmodel.spec.workload import Workload
from planner import cli
from search.infer import InferProblem, solve_infer

H100 = load_cluster("h100-sxm")


class Unit:
    """Every step takes 1 s, plus ``per_ctx`` s per cached token its decodes read."""

    def __init__(self, per_ctx=0.0):
        self.per_ctx = per_ctx

    def time_s(self, *, tokens, sampled, prefill_pairs, decode_ctx, micro_batches):
        return 1.0 + self.per_ctx * decode_ctx


def vllm(budget, seqs=64):
    return SchedulerSpec(engine="vllm", token_budget=budget, max_seqs=seqs)


def run(sched, cost=None, **kw):
    kw.setdefault("kv_capacity", 64)
    kw.setdefault("measure", "all")
    return simulate(cost or Unit(), sched, **kw)


# --------------------------------------------------------------------------- hand-computed step counts
@pytest.mark.parametrize("budget, steps", [(2000, 1), (1000, 1), (512, 2), (256, 4), (300, 4)])
def test_a_prompt_spans_ceil_input_over_budget_steps(budget, steps):
    # 1000 prompt tokens in chunks of the budget: 512 + 488 -> 2; 256 x 3 + 232 -> 4; 300 x 3 + 100 -> 4
    s = run(vllm(budget), input_len=1000, output_len=1, concurrency=1, num_requests=1)
    assert s.prefill_steps_per_request == steps
    assert s.ttft_s == pytest.approx(steps)  # TTFT = the steps the prompt spans (1 s each)


def test_mixed_steps_two_clients_by_hand():
    # vLLM, budget 1000, prompts of 1000, 3 output tokens, both clients at t=0:
    # step 1: r0 1000            -> r0 first token at 1
    # step 2: r0 decode + r1 999
    # step 3: r0 decode + r1 1   -> r0 has 3 tokens, done at 3; r1 first token at 3
    # steps 4, 5: r1 decodes     -> r1 done at 5
    s = run(vllm(1000), input_len=1000, output_len=3, concurrency=2, num_requests=2)
    assert s.ttft_s == pytest.approx((1 + 3) / 2)
    assert s.tpot_s == pytest.approx(((3 - 1) / 2 + (5 - 3) / 2) / 2)
    assert s.duration_s == pytest.approx(5) and s.steps == 5


def test_sglang_steps_prefill_apart_from_decodes_by_hand():
    # SGLang's default (no mixed chunk): step 1 prefills r0, step 2 prefills r1 while r0's decode
    # waits, steps 3 and 4 decode both: TTFT 1 and 2, TPOT (4-1)/2 and (4-2)/2
    s = run(
        SchedulerSpec(engine="sglang", token_budget=1000, max_seqs=None, mixed=False),
        input_len=1000,
        output_len=3,
        concurrency=2,
        num_requests=2,
    )
    assert s.ttft_s == pytest.approx(1.5)
    assert s.tpot_s == pytest.approx((1.5 + 1.0) / 2)
    assert s.duration_s == pytest.approx(4)


def test_unchunked_prompt_waits_for_a_step_where_it_fits():
    # TensorRT-LLM without context chunking, budget 1200: step 1 r0 (1000; r1 does not fit the 200
    # left), step 2 r0 decode + r1 1000: TTFT 1 and 2 (chunked: r1 would start in step 1)
    trt = SchedulerSpec(engine="trtllm", token_budget=1200, max_seqs=64, chunked=False)
    s = run(trt, input_len=1000, output_len=2, concurrency=2, num_requests=2)
    assert s.ttft_s == pytest.approx(1.5) and s.prefill_steps_per_request == 1
    chunked = run(vllm(1200), input_len=1000, output_len=2, concurrency=2, num_requests=2)
    assert chunked.prefill_steps_per_request == 1.5  # r1 in two chunks (200 + 800)


def test_decode_stretch_is_the_arithmetic_series_of_its_steps():
    # one request, prompt 100 in one step (1 s), then 10 decode steps reading 101..110 cached tokens
    # at 0.01 s each: 10 + 0.01 * 1055 = 20.55 s, TPOT 2.055 s
    s = run(vllm(512), Unit(per_ctx=0.01), input_len=100, output_len=11, concurrency=1, num_requests=1)
    assert s.ttft_s == pytest.approx(1.0)
    assert s.tpot_s == pytest.approx(2.055)
    assert s.steps == 11


# --------------------------------------------------------------------------- queueing
def test_ttft_grows_with_concurrency_once_the_engine_queues():
    # the KV cache holds 4 requests: beyond 4 clients the others wait, throughput stops growing
    stats = {
        c: run(vllm(4096), input_len=1000, output_len=50, concurrency=c, kv_capacity=4, measure="steady")
        for c in (2, 4, 8, 16)
    }
    assert stats[2].queue_s == 0 and stats[16].queue_s > stats[8].queue_s > 0
    assert stats[4].ttft_s < stats[8].ttft_s < stats[16].ttft_s
    assert stats[16].output_tokens_per_s == pytest.approx(stats[8].output_tokens_per_s, rel=0.05)
    assert stats[8].admitted_limit == 4


def test_max_seqs_limits_admission_like_the_kv_cache():
    a = run(vllm(4096, seqs=4), input_len=1000, output_len=50, concurrency=8)
    b = run(vllm(4096, seqs=64), input_len=1000, output_len=50, concurrency=8, kv_capacity=4)
    assert a.admitted_limit == b.admitted_limit == 4 and a.ttft_s == pytest.approx(b.ttft_s)


def test_poisson_arrivals_are_seeded_and_queue_more_at_a_higher_rate():
    kw = dict(input_len=500, output_len=20, num_requests=200, kv_capacity=8)
    slow = run(vllm(2048), request_rate=0.05, **kw)
    assert run(vllm(2048), request_rate=0.05, **kw) == slow  # deterministic (seed 0)
    fast = run(vllm(2048), request_rate=0.5, **kw)
    assert fast.ttft_s > slow.ttft_s and fast.running_mean > slow.running_mean


def test_real_model_ttft_grows_past_the_kv_limit_and_throughput_saturates():
    # Llama-3.1-70B fp8 on 2 x H100 TP2, 5000/500 (the NIM table's shape)
    m, cl = load_model("llama3.1-70b"), H100.with_gpus(2)
    est = {
        c: evaluate_inference(
            m,
            cl,
            Workload(mode="infer", global_batch=c, input_len=5000, output_len=500, dtype="fp8"),
            ParallelConfig(tp=2),
            kv_dtype="fp8",
            engine="trtllm",
        )
        for c in (150, 200, 250)
    }
    cap = est[150].max_concurrency_per_replica
    assert cap < 150 and all(e.serving["admitted_per_replica"] == cap for e in est.values())
    assert est[150].ttft_s < est[200].ttft_s < est[250].ttft_s
    assert est[250].tokens_per_s == pytest.approx(est[150].tokens_per_s, rel=0.05)
    assert any("queue" in n for n in est[200].notes)


# --------------------------------------------------------------------------- engines
def test_engine_defaults_follow_their_code():
    h100, a100 = H100.device, load_cluster("a100-80g").device
    assert (default_scheduler("vllm", h100).token_budget, default_scheduler("vllm", h100).max_seqs) == (8192, 1024)
    assert (default_scheduler("vllm", a100).token_budget, default_scheduler("vllm", a100).max_seqs) == (2048, 256)
    sg = default_scheduler("sglang", h100)
    assert sg.token_budget == 8192 and not sg.mixed and sg.max_seqs is None
    # chunked context as the planner launches TensorRT-LLM (enable_chunked_prefill: true; off in llm_args)
    assert default_scheduler("trtllm", h100).chunked


def test_engines_differ_where_their_schedulers_differ():
    m, cl = load_model("llama3-8b"), H100.with_gpus(1)
    w = Workload(mode="infer", global_batch=32, input_len=2000, output_len=200)
    e = {n: evaluate_inference(m, cl, w, ParallelConfig(), engine=n) for n in ("vllm", "sglang")}
    # prefill-first separate steps stall decodes and synchronise the clients' waves
    assert e["sglang"].ttft_s > e["vllm"].ttft_s
    assert e["vllm"].serving["mixed_batches"] and not e["sglang"].serving["mixed_batches"]


# --------------------------------------------------------------------------- the issue's example
def test_issue_example_no_longer_recommends_one_request_at_a_time():
    p = InferProblem(
        model=load_model("llama3-70b"),
        cluster=H100.with_gpus(8),
        input_len=4000,
        output_len=500,
        ttft_target_s=0.4,
        tpot_target_s=0.03,
    )
    r = solve_infer(p)
    best = r.best
    assert r.status == "OPTIMAL" and p.meets(best)
    assert best.batch_per_replica > 1  # cc41895 answered batch 1 (13.6 tok/s/GPU)
    assert best.tokens_per_s_per_gpu > 3 * 13.6


def test_issue_example_cli_emits_more_than_one_sequence(capsys):
    rc = cli.main(
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
            "--json",
        ]
    )
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)["plans"][0]
    args = plan["launch"]["vllm"]["args"]
    seqs = int(args[args.index("--max-num-seqs") + 1])
    budget = int(args[args.index("--max-num-batched-tokens") + 1])
    assert seqs == plan["batch_per_replica"] > 1 and budget == plan["serving"]["token_budget"]
    assert plan["bands"]["ttft_ms"][0] < plan["bands"]["ttft_ms"][1]


# --------------------------------------------------------------------------- CLI and errors
def _evaluate(*extra):
    return [
        "evaluate",
        "--mode",
        "infer",
        "--model",
        "llama3-8b",
        "--cluster",
        "h100-sxm",
        "--gpus",
        "1",
        "--input-len",
        "2000",
        "--output-len",
        "100",
        "--global-batch",
        "8",
        *extra,
    ]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_evaluate_takes_the_engine(engine, capsys):
    assert cli.main(_evaluate("--engine", engine, "--json")) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["serving"]["engine"] == engine and list(d["launch"]) == [engine]


@pytest.mark.parametrize(
    "extra, field",
    [
        (("--engine", "tgi"), "engine"),
        (("--engine", "trtllm", "--input-len", "9000"), "input_len"),  # beyond llama3-8b's 8,192 context
        (("--max-seqs", "0"), "max_seqs"),
        (("--request-rate", "-1"), "request_rate"),
    ],
)
def test_bad_serving_input_is_one_line_exit_2(extra, field, capsys):
    assert cli.main(_evaluate(*extra)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0]


def test_simulate_refuses_bad_load():
    with pytest.raises(SpecError, match="concurrency"):
        simulate(Unit(), vllm(512), input_len=10, output_len=2, kv_capacity=4)
    with pytest.raises(SpecError, match="kv_capacity"):
        simulate(Unit(), vllm(512), input_len=10, output_len=2, kv_capacity=0, concurrency=1)
