"""Speculative decoding (issue 40): tokens per step, the replay's verify and draft steps, memory, launch flags."""

import contextlib
import io
import math
import shlex
from types import SimpleNamespace

import pytest

from costmodel.serving.disagg import _Decode, decode_step_s
from costmodel.serving.engines import SchedulerSpec
from costmodel.serving.inference import evaluate_inference
from costmodel.serving.scheduler import simulate
from costmodel.serving.speculative import MTP_ACCEPTANCE, Speculation, speculation_for, tokens_per_step
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner import cli

DSV3 = load_model("deepseek-v3")
B200 = load_cluster("b200").with_gpus(8)
PLAN = ParallelConfig(tp=8, ep=8)


def _est(batch, spec=None, output_len=400):
    w = Workload(mode="infer", global_batch=batch, input_len=1000, output_len=output_len, dtype="fp8")
    return evaluate_inference(DSV3, B200, w, PLAN, kv_dtype="fp8", engine="sglang", speculation=spec)


def test_tokens_per_step_is_the_expected_accepted_chain():
    # Leviathan et al. 2023, Eq. 1: sum over i = 0..k of a^i
    for k in (1, 2, 4):
        for a in (0.0, 0.3, 0.85):
            assert tokens_per_step(k, a) == pytest.approx(sum(a**i for i in range(k + 1)))
    assert tokens_per_step(1, 0.0) == 1.0
    assert tokens_per_step(3, 0.9) > tokens_per_step(2, 0.9) > tokens_per_step(1, 0.9)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(k=0, acceptance=0.5), "spec_tokens"),
        (dict(k=9, acceptance=0.5), "spec_tokens"),
        (dict(k=True, acceptance=0.5), "spec_tokens"),
        (dict(k=1, acceptance=1.0), "spec_accept"),
        (dict(k=1, acceptance=-0.1), "spec_accept"),
        (dict(k=1, acceptance=0.5, method="medusa"), "spec_method"),
    ],
)
def test_bad_speculation_names_its_field(kw, field):
    with pytest.raises(SpecError) as e:
        Speculation(**kw)
    assert e.value.field == field


def test_speculation_for_defaults_and_refusals():
    s = speculation_for(DSV3, 2, None, None)
    assert (s.method, s.acceptance, s.evidence) == ("mtp", MTP_ACCEPTANCE, "assumed")
    assert speculation_for(DSV3, 1, 0.7, None).evidence == "stated"
    assert speculation_for(DSV3, None, None, None) is None
    llama = load_model("llama3-70b")
    with pytest.raises(SpecError, match="no multi-token-prediction module"):
        speculation_for(llama, 1, 0.7, "mtp")
    with pytest.raises(SpecError, match="stated acceptance"):
        speculation_for(llama, 1, None, None)  # EAGLE: no default acceptance
    with pytest.raises(SpecError, match="given with --spec-tokens"):
        speculation_for(DSV3, None, 0.7, None)


class _FlatCost:
    """A step of 10 ms whatever it holds; no draft time (one layer of nothing)."""

    model = SimpleNamespace(layers=1)
    mla = False

    def time_s(self, **kw):
        return 0.010

    def body_s(self, tokens, micro_batches=1):
        return 0.0

    def head_s(self, sampled):
        return 0.0


def test_replay_takes_the_expected_number_of_verify_steps():
    sched = SchedulerSpec(engine="vllm", token_budget=4096, max_seqs=None, chunked=True, mixed=True)
    kw = dict(input_len=100, output_len=101, kv_capacity=100, concurrency=1, num_requests=3, measure="all")
    plain = simulate(_FlatCost(), sched, **kw)
    assert plain.tpot_s == pytest.approx(0.010)
    s = Speculation(k=3, acceptance=0.8)
    fast = simulate(_FlatCost(), sched, speculation=s, **kw)
    steps = math.ceil(100 / s.per_step)  # 100 tokens after the first, per_step a step
    assert fast.tpot_s == pytest.approx(0.010 * steps / 100)
    assert fast.output_tokens_per_s > plain.output_tokens_per_s


def test_speculation_cuts_decode_time_and_zero_acceptance_costs_time():
    base = _est(1)
    mtp = _est(1, Speculation(k=1, acceptance=0.85))
    useless = _est(1, Speculation(k=1, acceptance=0.0))
    assert mtp.tpot_s < base.tpot_s < useless.tpot_s  # the verify and draft passes are not free
    assert mtp.serving["speculation"]["tokens_per_step"] == pytest.approx(1.85)
    # at batch 1 a decode step reads the weights: 1 + 1 rows cost little more than 1, so the gain is most of 1.85x
    assert 1.4 < base.tpot_s / mtp.tpot_s < 1.85


def test_the_draft_is_in_memory():
    base, mtp = _est(4), _est(4, Speculation(k=1, acceptance=0.85))
    assert mtp.memory["weights_bytes"] > base.memory["weights_bytes"]
    assert mtp.memory["kv_cache_bytes_per_token_per_gpu"] > base.memory["kv_cache_bytes_per_token_per_gpu"]
    assert mtp.max_concurrency_per_replica < base.max_concurrency_per_replica


def test_disaggregated_decode_time_per_token():
    s = Speculation(k=2, acceptance=0.7)
    raw = decode_step_s(DSV3, B200, PLAN, 16, 1500, "fp8", "fp8", s)
    assert raw > decode_step_s(DSV3, B200, PLAN, 16, 1500, "fp8", "fp8")
    d = _Decode(DSV3, B200, PLAN, 1500, "fp8", "fp8", 64, s)
    assert d.step(16) == pytest.approx(d.raw(16) / s.per_step)


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


INFER = [
    "evaluate",
    "--mode",
    "infer",
    "--model",
    "deepseek-v3",
    "--cluster",
    "b200",
    "--gpus",
    "8",
    "--tp",
    "8",
    "--ep",
    "8",
    "--dtype",
    "fp8",
    "--input-len",
    "1000",
    "--output-len",
    "200",
    "--global-batch",
    "8",
]


def test_cli_emits_each_engines_speculative_flags():
    code, out, _ = _run([*INFER, "--spec-tokens", "2"])
    assert code == 0 and "speculative: mtp drafts 2 token(s)" in out
    vllm = next(line for line in out.splitlines() if "vllm serve" in line)
    args = shlex.split(vllm.split(":", 1)[1])
    assert args[args.index("--speculative-config") + 1] == '{"method":"deepseek_mtp","num_speculative_tokens":2}'
    sglang = shlex.split(next(line for line in out.splitlines() if "sglang.launch_server" in line).split(":", 1)[1])
    assert sglang[sglang.index("--speculative-algorithm") + 1] == "EAGLE"
    assert sglang[sglang.index("--speculative-num-steps") + 1] == "2"
    assert sglang[sglang.index("--speculative-num-draft-tokens") + 1] == "3"
    code, out, _ = _run([*INFER, "--spec-tokens", "1", "--engine", "trtllm"])
    assert code == 0 and "decoding_type: MTP" in out and "num_nextn_predict_layers: 1" in out


@pytest.mark.parametrize(
    "extra, field",
    [
        (["--spec-accept", "0.7"], "spec_accept"),
        (["--spec-tokens", "1", "--spec-accept", "1.5"], "spec_accept"),
        (["--spec-tokens", "0"], "spec_tokens"),
        (["--spec-tokens", "1", "--spec-method", "medusa"], "spec_method"),
    ],
)
def test_cli_refuses_bad_speculation_in_one_line(extra, field):
    code, _, err = _run([*INFER, *extra])
    assert code == 2 and err.count("\n") == 1 and field in err


def test_cli_refuses_speculation_in_training():
    code, _, err = _run(
        ["evaluate", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--spec-tokens", "1"]
    )
    assert code == 2 and "spec_tokens" in err
