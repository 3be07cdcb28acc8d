"""A ``bench_serving`` run's own requests in the replay (issue 40; the note
benchmarks/notes/2026-12-05-serving-arrivals.md, section "2026-12-06").

Each test holds one rule to the code it was read in (the ``sglang-0.5.6`` wheel, ``python/sglang/``):

* ``bench_serving.py`` seeds ``np.random`` with ``--seed`` (default 1, l. 2334-2335, 2683) and
  ``sample_random_requests`` (l. 1217-1236) draws every input length, then every output length, from
  ``[max(int(L * r), 1), L]`` and ``[int(O * r), O]``: the run's requests, in the order sent;
* its warmup (l. 1914-1927) sends ``input_requests[0]`` before the timed run and the cache is flushed only with
  ``--flush-cache`` or in SGLang's CI (l. 1954-1955), so that prompt is in the radix cache;
* ``srt/managers/schedule_batch.py`` ``Req.init_next_round_input`` (l. 784-790) matches at most ``len - 1`` prompt
  tokens: a cached prompt still prefills its last token.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from benchmarks.validate_inference import DATA, bench_serving_requests, bench_serving_run, load_rows
from costmodel.serving.engines import SchedulerSpec
from costmodel.serving.scheduler import simulate
from costmodel.spec.errors import SpecError

SOURCE = "sglang_cookbook_qwen3_235b_b200_2026"


class Recording:
    """A step of ``1 ms`` per token it computes (prompt tokens and sampled decodes) plus ``1 us`` per cached token
    the decodes read, recording every step's arguments."""

    def __init__(self):
        self.steps = []

    def price(self, tokens, sampled, prefill_pairs, decode_ctx, micro_batches=1):
        self.steps.append((tokens, sampled, prefill_pairs, decode_ctx))
        return 1e-3 * tokens + 1e-6 * decode_ctx

    def time_s(self, *, tokens, sampled, prefill_pairs, decode_ctx, micro_batches=1):
        return 1e-3 * tokens + 1e-6 * decode_ctx


def _sglang() -> SchedulerSpec:
    return SchedulerSpec(engine="sglang", token_budget=16384, max_seqs=None, mixed=False, overlap=True)


def _runs() -> list[dict]:
    """The cookbook's nine runs: one ``ttft_ms`` row each."""
    with open(DATA, newline="") as f:
        return [r for r in csv.DictReader(f) if r["source_key"] == SOURCE and r["metric"] == "ttft_ms"]


def test_the_draws_are_each_runs_stated_input_and_generated_tokens():
    runs = _runs()
    assert len(runs) == 9
    for r in runs:
        cmd, notes = r["source_location"], r["notes"]
        n = int(cmd.split("--num-prompts ")[1].split()[0])
        O = int(cmd.split("--random-output-len ")[1].split()[0])
        total_in = int(notes.split("total input tokens ")[1].split(" /")[0])
        total_out = int(notes.split("total generated tokens ")[1].split(" /")[0])
        lengths, cached = bench_serving_requests(cmd)
        assert len(lengths) == len(cached) == n
        assert sum(a for a, _ in lengths) == total_in
        # outputs drawn as 0 are replayed as 1 token: count them from the seeded stream itself
        state = np.random.RandomState(1)
        state.randint(1, int(cmd.split("--random-input-len ")[1].split()[0]) + 1, size=n)
        zeros = int((state.randint(0, O + 1, size=n) == 0).sum())
        assert sum(b for _, b in lengths) == total_out + zeros
        # the rows' lengths are these draws' means
        assert round(total_in / n) == int(r["input_len"]) and round(total_out / n) == int(r["output_len"])


def test_the_draws_depend_on_the_command():
    base = "bench_serving --dataset-name random --random-input-len 8000 --random-output-len 1000 --num-prompts 80"
    a, _ = bench_serving_requests(base)
    # the first draws of a longer run are this run's (one stream, inputs drawn first): not so for the outputs
    longer, _ = bench_serving_requests(base.replace("--num-prompts 80", "--num-prompts 320"))
    assert [x for x, _ in longer[:80]] == [x for x, _ in a]
    assert [y for _, y in longer[:80]] != [y for _, y in a]
    # another seed, another run; a range ratio of 1 fixes every length
    assert bench_serving_requests(base + " --seed 2")[0] != a
    fixed, _ = bench_serving_requests(base + " --random-range-ratio 1")
    assert set(fixed) == {(8000, 1000)}
    # other datasets: no draws known here
    assert bench_serving_requests(base.replace("random", "sharegpt")) is None


def test_the_warmup_leaves_the_first_prompt_cached_unless_flushed():
    cmd = "bench_serving --dataset-name random --random-input-len 1000 --random-output-len 1000 --num-prompts 10"
    lengths, cached = bench_serving_requests(cmd)
    assert cached[0] == lengths[0][0] and not any(cached[1:])
    assert not any(bench_serving_requests(cmd + " --flush-cache")[1])
    assert not any(bench_serving_requests(cmd + " --warmup-requests 0")[1])


def test_cookbook_rows_replay_their_own_requests():
    rows = [r for r in load_rows(DATA) if r["source_key"] == SOURCE]
    kw = bench_serving_run(rows[0])
    assert kw["measure"] == "all" and kw["stagger"] is False
    assert kw["num_requests"] == len(kw["lengths"]) == 10 and "output_spread" not in kw
    nim = next(r for r in load_rows(DATA) if r["source_key"] == "nim_llama33_70b" and r["batching"] == "continuous")
    assert bench_serving_run(nim) == {}


def test_lengths_equal_to_the_means_replay_as_before():
    kw = dict(input_len=300, output_len=20, kv_capacity=64, concurrency=4, num_requests=12, measure="all")
    a = simulate(Recording(), _sglang(), **kw)
    b = simulate(Recording(), _sglang(), lengths=[(300, 20)] * 12, **kw)
    assert a == b


def test_each_request_prefills_and_decodes_its_own_lengths():
    # one client, two requests sent in turn: a 100-token prompt with 3 outputs, then a 1000-token one with 2
    cost = Recording()
    st = simulate(
        cost,
        _sglang(),
        input_len=550,
        output_len=2,
        kv_capacity=8,
        concurrency=1,
        num_requests=2,
        measure="all",
        lengths=[(100, 3), (1000, 2)],
    )
    prefills = [s for s in cost.steps if s[2] > 0]
    assert [p[0] for p in prefills] == [100, 1000]
    assert st.percentiles["ttft_s"]["p50"] == pytest.approx((0.100 + 1.000) / 2)
    # decodes read their own prompt plus what they generated (a step: 1 ms + 1 us per token read): 100 + 1 and
    # 100 + 2 tokens, then 1000 + 1
    assert st.tpot_s == pytest.approx(((2e-3 + 203e-6) / 2 + (1e-3 + 1001e-6)) / 2)


def test_a_cached_prompt_prefills_what_the_cache_does_not_hold_and_at_least_its_last_token():
    cost = Recording()
    kw = dict(input_len=1000, output_len=2, kv_capacity=8, concurrency=1, num_requests=3, measure="all")
    simulate(cost, _sglang(), cached=[1000, 600, 0], **kw)
    prefills = [s for s in cost.steps if s[2] > 0]
    assert [p[0] for p in prefills] == [1, 400, 1000]
    # the recomputed tokens attend to the cached ones: causal pairs tokens x (cached + tokens / 2)
    assert [p[2] for p in prefills] == [pytest.approx(x) for x in (1 * 999.5, 400 * 800, 1000 * 500)]
    # the decode reads the whole prompt, cached or not (a step: 1 ms + 1 us per token read)
    st = simulate(Recording(), _sglang(), cached=[1000, 600, 0], **kw)
    assert st.tpot_s == pytest.approx(1e-3 + 1001e-6)


def test_lengths_must_be_one_pair_per_request():
    kw = dict(input_len=100, output_len=2, kv_capacity=8, concurrency=1, num_requests=3)
    with pytest.raises(SpecError):
        simulate(Recording(), _sglang(), lengths=[(100, 2)] * 2, **kw)
    with pytest.raises(SpecError):
        simulate(Recording(), _sglang(), lengths=[(100, 0)] * 3, **kw)
    with pytest.raises(SpecError):
        simulate(Recording(), _sglang(), cached=[0], **kw)
