"""Issue 40: each engine's admission rule as its code runs it (:mod:`costmodel.serving.engines`).

A recording step cost shows what the replayed loop put in every step; each test holds one rule
of the cited scheduler code:

* vLLM V1 ``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``, vllm-project/vllm@b4622cf9):
  running requests first (a decode is one token), then waiting prompts under
  ``max_num_batched_tokens``, the last one chunked; ``max_num_seqs`` caps the running requests.
* SGLang ``get_next_batch_to_run`` (sgl-project/sglang@d51c1c21; ``--enable-mixed-chunk`` off, @b36e8e19 docs): a prefill batch of up to
  ``chunked_prefill_size`` tokens runs before the next decode step; the two never share a step.
* TensorRT-LLM ``MicroBatchScheduler::operator()`` (NVIDIA/TensorRT-LLM@b8b7b782
  ``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp``): generation requests take their
  token first; without chunking a context goes whole only if it fits what is left, and the first
  that does not ends the walk; with chunking the contexts get ``maxNumTokens - batchNumTokens``.
"""

import pytest

from costmodel.serving.engines import SchedulerSpec, default_scheduler
from costmodel.serving.inference import evaluate_inference
from costmodel.serving.scheduler import simulate
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload


class Recorder:
    """10 ms a step; keeps (tokens, sampled) of every step priced one at a time."""

    def __init__(self):
        self.steps = []

    def time_s(self, *, tokens, sampled, prefill_pairs, decode_ctx, micro_batches):
        self.steps.append((tokens, sampled, prefill_pairs > 0))
        return 0.010


def run(sched, *, I=1000, O=50, C=2, kv=8):
    rec = Recorder()
    st = simulate(rec, sched, input_len=I, output_len=O, kv_capacity=kv, concurrency=C, num_requests=C, measure="all")
    return rec, st


def test_vllm_admits_a_prompt_next_to_running_decodes_in_the_budget_left():
    rec, st = run(SchedulerSpec(engine="vllm", token_budget=512, max_seqs=8))
    # steps 1-2: request 0's 512 + 488 tokens, the 24 left go to request 1; step 3: request 0
    # decodes (1 token) and request 1 takes the remaining 511: the budget is full every step
    assert [t for t, _, _ in rec.steps[:3]] == [512, 512, 512]
    assert rec.steps[2][1] == 1  # request 0's decode token, sampled in the mixed step
    assert st.queue_s == pytest.approx(0.005)  # request 1 admitted in step 2 (mean of 0 and 10 ms)


def test_vllm_max_num_seqs_keeps_a_prompt_waiting():
    _, st = run(SchedulerSpec(engine="vllm", token_budget=512, max_seqs=1))
    assert st.queue_s > 0.2  # request 1 waits for request 0's 50 tokens


def test_sglang_runs_prefill_first_and_never_mixes_it_with_decodes():
    sched = default_scheduler("sglang", load_cluster("h100-sxm").device)
    assert not sched.mixed
    rec, st = run(SchedulerSpec(engine="sglang", token_budget=512, max_seqs=None, mixed=False), C=3)
    # a step holds prompt tokens (prefill batch) or decodes, never both: in a prefill step the
    # sampled tokens are only the prompts it completes (at most 3 here)
    assert all(not has_prefill or sampled <= 3 for _, sampled, has_prefill in rec.steps)
    # the three prompts (3,000 tokens) run back to back before any decode step: ceil(3000/512) = 6
    assert all(p for _, _, p in rec.steps[:6]) and not rec.steps[6][2]


def test_trtllm_without_chunking_a_prompt_that_does_not_fit_next_to_decodes_waits():
    # a 1000-token prompt under max_num_tokens 1000: one decode leaves 999, so request 1 cannot
    # start until request 0 finished (the `break` of MicroBatchScheduler without a chunking config)
    rec, st = run(SchedulerSpec(engine="trtllm", token_budget=1000, max_seqs=8, chunked=False))
    assert st.queue_s == pytest.approx(0.5 * (0.010 + 49 * 0.010), rel=0.05)  # half the clients wait one request
    assert all(not (p and t > sampled and sampled > 1) for t, sampled, p in rec.steps)


def test_trtllm_with_chunked_context_fills_what_the_decodes_leave():
    rec, st = run(SchedulerSpec(engine="trtllm", token_budget=1000, max_seqs=8, chunked=True))
    # step 2: request 0 decodes one token, request 1 gets the 999 left (ctxTokensCapacity)
    assert rec.steps[1][0] == 1000 and rec.steps[1][2]
    assert st.queue_s == pytest.approx(0.005)  # request 1 admitted in step 2, next to the decode


def test_the_issue_case_trtllm_8k_prompts_ttft_under_a_second():
    """Issue 40: llama3.1-70b on 8 B200, fp8, 8,192-token prompts under an 8,192-token budget:
    the engine measured 0.27 s. With chunked context (the planner's launch) the prompt shares
    the step with the decodes; with the unchunked default every prompt waits for the decodes."""
    m, cl = load_model("llama3.1-70b"), load_cluster("b200").with_gpus(8)
    w = Workload(mode="infer", global_batch=8, input_len=8192, output_len=1024, dtype="fp8")
    args = dict(kv_dtype="fp8", prefill_tokens=8192, engine="trtllm")
    est = evaluate_inference(m, cl, w, ParallelConfig(tp=8), **args)
    assert est.serving["chunked_prefill"] and est.ttft_s < 1.0
    whole = evaluate_inference(m, cl, w, ParallelConfig(tp=8), chunked=False, **args)
    assert whole.ttft_s > 10.0 and whole.serving["queue_ms"] > 10_000
