"""The memory benchmark against measured peaks (benchmarks/component_memory.py, issue 21)."""

import csv
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import component_memory as cm  # noqa: E402

from costmodel.config import ParallelConfig  # noqa: E402
from costmodel.errors import SpecError  # noqa: E402
from costmodel.memory import loss_bytes_per_logit  # noqa: E402

ROWS = list(csv.DictReader(open(cm.DATA, newline="")))


def test_every_row_is_cited_and_says_what_was_read():
    assert len(ROWS) >= 15
    for r in ROWS:
        assert r["source_url"].startswith("https://"), r["case_id"]
        assert r["source_location"].strip() and r["notes"].strip(), r["case_id"]
        assert r["measured_kind"] in cm.KINDS


def test_the_benchmark_scores_every_row():
    results = cm.evaluate(cm.load_cases())
    assert len(results) == len(ROWS)
    s = cm.summary(results)
    reserved = sum(r["measured_kind"] == "max_reserved_gib" for r in ROWS)
    assert s["max_reserved_gib"]["n"] == reserved
    # the tensors target over the max-allocated rows (Megatron-LM's CI golden values, cases 21-26)
    t = s["max_allocated_gib"]
    assert t["n"] == len(ROWS) - reserved >= 6
    assert t["mean"] <= cm.TENSOR_MEAN_LIMIT and t["max"] <= cm.TENSOR_MAX_LIMIT


#: the reserved mean |err| at the last change of the memory model (5.1%, RESULTS.md section 36): issue 21's 5% target
#: is NOT met since the dropout masks Llama does not have are no longer charged (4.99% with them; the torchtitan
#: cases are under-predicted by up to 11.3%). This bound is a regression guard, not the target.
RESERVED_MEAN_NOW = 0.052


def test_reserved_mean_no_worse_than_now():
    # a change that loses the FSDP2 state, op-SAC or loss mechanisms fails here (without them: 27.3%)
    results = cm.evaluate(cm.load_cases())
    assert cm.summary(results)["max_reserved_gib"]["mean"] <= RESERVED_MEAN_NOW
    code, failed = cm.check(results)
    assert failed == [f"reserved mean |err| {cm.summary(results)['max_reserved_gib']['mean']:.1%} > 5%"], failed


def test_a_target_without_rows_fails():
    results = [r for r in cm.evaluate(cm.load_cases()) if r.case.measured_kind == "max_reserved_gib"]
    code, failed = cm.check(results)
    assert code == 1 and any("no max-allocated rows" in f for f in failed)


def test_the_measured_stage_is_the_one_scored():
    # Megatron's TensorBoard writer is on rank world_size - 1, the last pipeline stage: under interleaved 1F1B
    # the first stage holds more micro-batches in flight, so scoring the maximum would score the wrong GPU
    by = {int(c.case_id): r for c, r in ((r.case, r) for r in cm.evaluate(cm.load_cases()))}
    case = by[21].case
    assert case.stage == case.config.pp - 1 == 3
    first = cm.evaluate([replace(case, stage=0)])[0]
    assert first.tensors_bytes != by[21].tensors_bytes


def test_a_bad_stage_or_sp_exits_2(tmp_path, capsys):
    for field, value in (("stage", "9"), ("sp", "yes")):
        bad = tmp_path / "m.csv"
        with open(bad, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(ROWS[0]))
            w.writeheader()
            w.writerow(dict(ROWS[20], **{field: value}))
        assert cm.main(["--csv", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{field}={value!r}" in err[0]


def test_float8_under_op_sac_costs_what_bf16_costs():
    # torchtitan Table 1/3: FSDP + compile with and without Float8 peak within 0.3%; so must the model
    by = {int(c.case_id): r for c, r in ((r.case, r) for r in cm.evaluate(cm.load_cases()))}
    assert by[3].total_bytes == pytest.approx(by[2].total_bytes, rel=0.01)
    assert by[10].total_bytes == pytest.approx(by[9].total_bytes, rel=0.01)


def test_the_fp32_loss_holds_more_than_the_fused_one():
    assert loss_bytes_per_logit(ParallelConfig(framework="fsdp2", zero=3, dp=8, loss_impl="fp32")) == 12
    assert loss_bytes_per_logit(ParallelConfig()) == 6
    # loss parallel under TP: the fused backward holds the output, grad_input, their sum and the product
    assert loss_bytes_per_logit(ParallelConfig(framework="fsdp2", zero=3, tp=8, sp=True, dp=4, loss_impl="fp32")) == 16
    with pytest.raises(SpecError, match="loss_impl"):
        ParallelConfig(loss_impl="chunked")
    assert "loss_impl" not in ParallelConfig().to_dict()
    c = ParallelConfig(framework="fsdp2", zero=3, dp=8, loss_impl="fp32")
    assert ParallelConfig.from_dict(c.to_dict()) == c


def test_a_bad_row_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "m.csv"
    rows = [dict(ROWS[0], tp="zero")]
    with open(bad, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(ROWS[0]))
        w.writeheader()
        w.writerows(rows)
    assert cm.main(["--csv", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tp='zero'" in err[0]
