"""When a closed loop's next request reaches the scheduler, and how a bench tool measures (issue 40; the note
benchmarks/notes/2026-12-05-serving-arrivals.md).

Each test holds one rule to the code it was read in (the ``sglang-0.5.6`` wheel, ``python/sglang/``):

* ``bench_serving.py`` ``benchmark`` (l. 1878-1885, 2036-2044): a client sends its next request when the last one
  has returned, so it reaches the engine a round trip after its last token (``simulate(reissue_s=)``), and the
  first ``--max-concurrency`` requests are sent together;
* ``srt/managers/scheduler.py`` ``Scheduler.event_loop_overlap`` (l. 992-1050): ``recv_requests`` and
  ``get_next_batch_to_run`` run before ``run_batch`` launches a batch and before ``pop_and_process`` waits for the
  previous batch's result, so a step's batch is chosen when the step before it starts (``SchedulerSpec.overlap``),
  and an eager prefill's host launch runs while that step is on the GPU.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from benchmarks.validate_inference import DATA, bench_serving_run, load_rows
from costmodel.serving import engine_host as eh
from costmodel.serving.engine_host import EagerPrefillCost
from costmodel.serving.engines import SchedulerSpec, default_scheduler
from costmodel.serving.scheduler import simulate
from costmodel.spec.presets import load_cluster


class Unit:
    """One second a step, whatever it holds."""

    def time_s(self, *, tokens, sampled, prefill_pairs, decode_ctx, micro_batches=1):
        return 1.0

    def price(self, tokens, sampled, prefill_pairs, decode_ctx, micro_batches=1):
        return 1.0


def _sglang(overlap: bool) -> SchedulerSpec:
    return SchedulerSpec(engine="sglang", token_budget=1000, max_seqs=None, mixed=False, overlap=overlap)


def _third_request(overlap: bool, reissue: float, cost=None) -> tuple[float, float]:
    """Two staggered clients of 10-token prompts and 10 output tokens, three requests: client 0 arrives at 0,
    client 1 at 5 s (half of a 10-step cycle). Client 0's first request prefills in [0, 1], decodes one token a
    step and ends at 11 s (its decodes pause for client 1's prefill in [5, 6]), while client 1 still decodes
    (it ends at 15 s). Returns the third request's (queue, TTFT): the time from its arrival to its prefill, and to
    its first token."""
    st = simulate(
        cost or Unit(),
        _sglang(overlap),
        input_len=10,
        output_len=10,
        kv_capacity=8,
        concurrency=2,
        num_requests=3,
        stagger=True,
        reissue_s=reissue,
    )
    # steady measure: the request sent after the first wave of 2
    return st.queue_s, st.ttft_s


def test_without_overlap_or_round_trip_the_next_request_is_prefilled_in_the_next_step():
    assert _third_request(False, 0.0) == pytest.approx((0.0, 1.0))


def test_a_round_trip_makes_the_next_request_miss_the_step_that_starts_when_the_last_one_ended():
    # it arrives at 11.1 s, while [11, 12] (a decode of client 1) runs; prefilled in [12, 13]
    assert _third_request(False, 0.1) == pytest.approx((0.9, 1.9))


def test_the_overlap_scheduler_sees_a_request_arriving_mid_step_two_steps_on():
    # [12, 13] was chosen at 11 s (when [11, 12] was launched), before it arrived: prefilled in [13, 14]
    assert _third_request(True, 0.1) == pytest.approx((1.9, 2.9))
    # arriving as a step ends (no round trip), the iteration that starts then sees it: one step later
    assert _third_request(True, 0.0) == pytest.approx((1.0, 2.0))


def test_the_overlap_scheduler_launches_an_eager_prefill_while_the_step_before_it_runs():
    # the prefill's batch is chosen, and its host launch starts, when the 1-s decode step before it starts: a host
    # launch of 1.5 s ends inside the prefill's GPU second (hidden), one of 2.5 s lengthens the step to 1.5 s
    queue, ttft = _third_request(True, 0.1, EagerPrefillCost(Unit(), 1.5))
    assert (queue, ttft) == pytest.approx((1.9, 2.9))
    queue, ttft = _third_request(True, 0.1, EagerPrefillCost(Unit(), 2.5))
    assert (queue, ttft) == pytest.approx((1.9, 1.9 + 2.5 - 1.0))
    # without overlap the launch starts with the step: the whole host time
    queue, ttft = _third_request(False, 0.1, EagerPrefillCost(Unit(), 2.5))
    assert ttft == pytest.approx(queue + 2.5)


def test_an_idle_engine_sees_a_request_at_once_and_charges_the_whole_host_launch():
    # one client: nothing runs when its next request arrives, the loop polls (recv_requests each iteration)
    host = EagerPrefillCost(Unit(), 1.5)
    kw = dict(input_len=10, output_len=4, kv_capacity=8, concurrency=1, num_requests=3)
    for overlap in (False, True):
        st = simulate(host, _sglang(overlap), reissue_s=0.1 if overlap else 0.0, **kw)
        assert st.ttft_s == pytest.approx(1.5) and st.queue_s == pytest.approx(0.0)


def test_the_overlap_scheduler_and_the_round_trip_are_sglangs_only():
    dev = load_cluster("b200").device
    assert default_scheduler("sglang", dev).overlap
    assert not default_scheduler("vllm", dev).overlap and not default_scheduler("trtllm", dev).overlap
    assert eh.reissue_s("vllm", 1000) == 0.0 == eh.reissue_s("trtllm", 1000)
    # the way back and the way in: the request's path without the first decode's launch
    assert eh.reissue_s("sglang", 1000) == pytest.approx(
        eh.request_path_s("sglang", 1000) - eh.SGLANG_PATH_S["overlap_next_launch"]
    )
    assert 0 < eh.reissue_s("sglang", 1000) < 0.005


def _row(source: str) -> dict:
    return next(r for r in load_rows(DATA) if r["source_key"] == source and r["batching"] == "continuous")


def test_bench_serving_rows_are_replayed_as_the_tool_runs():
    r = _row("sglang_cookbook_qwen3_235b_b200_2026")
    O = int(r["output_len"])
    # the random dataset: the run's own seeded requests (tests/test_bench_serving_requests.py)
    kw = bench_serving_run(r)
    assert (kw["measure"], kw["stagger"], kw["num_requests"]) == ("all", False, len(kw["lengths"]))
    # without known draws (another dataset) the output lengths spread as the random dataset's would
    other = dict(r, source_location=r["source_location"].replace("--dataset-name random", "--dataset-name sharegpt"))
    assert bench_serving_run(other) == dict(measure="all", stagger=False, output_spread=pytest.approx(1 - 1 / O))
    assert bench_serving_run(_row("nim_llama33_70b")) == {}  # genai-perf: steady windows, as before


def test_the_cookbook_runs_drew_bench_serving_seeded_lengths():
    """``bench_serving`` seeds ``np.random`` with ``--seed`` (default 1, l. 2334-2335, 2683) and draws the input
    lengths first (``np.random.randint(max(int(L * r), 1), L + 1, size=num_prompts)``, l. 1227-1231): the rows'
    stated total input tokens are exactly those draws, so a run's prompts are the first ``num_prompts`` of any
    longer run with the same ``--random-input-len`` (the note: prompts shared between the runs)."""
    seen = 0
    with open(DATA, newline="") as f:
        for r in csv.DictReader(f):
            if r["source_key"] != "sglang_cookbook_qwen3_235b_b200_2026" or r["metric"] != "ttft_ms":
                continue
            L = int(r["source_location"].split("--random-input-len ")[1].split()[0])
            n = int(r["source_location"].split("--num-prompts ")[1].split()[0])
            total = int(r["notes"].split("total input tokens ")[1].split(" /")[0])
            np.random.seed(1)
            assert int(np.random.randint(1, L + 1, size=n).sum()) == total
            seen += 1
    assert seen == 9
