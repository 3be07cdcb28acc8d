"""The memory benchmark against measured peaks (benchmarks/component_memory.py, issue 21)."""

import csv
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import component_memory as cm  # noqa: E402

from costmodel.spec.plan import ParallelConfig  # noqa: E402
from costmodel.spec.errors import SpecError  # noqa: E402
from costmodel.physics.memory.activations import loss_bytes_per_logit  # noqa: E402

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


def test_the_reserved_target_is_met():
    # issue 21: reserved <= 5% mean over the torchtitan cases (4.9% with torchtitan's DTensor SP saving the
    # all-gathered GEMM inputs, RESULTS.md section 38; 5.1% without). A change that loses the FSDP2 state, op-SAC,
    # loss or gathered-input mechanisms fails here (without the first three: 27.3%)
    results = cm.evaluate(cm.load_cases())
    assert cm.summary(results)["max_reserved_gib"]["mean"] <= cm.RESERVED_MEAN_LIMIT
    assert cm.check(results) == (0, [])


def test_dtensor_sp_saves_the_gathered_inputs_and_moves_the_70b_case_up():
    # torchtitan Table 4 (cases 11, 12: 70B, FSDP 32 x TP 8, full AC, Float8): the recomputed layer holds its QKV
    # and MLP inputs all-gathered in FP8 (PrepareFloat8ModuleInput casts before the gather): 2 x 1 B x h per token
    # at the full micro-batch, where Megatron's SP keeps (2 + 2) B x h / 8 per token; and the LM head's BF16 input
    # (ColwiseParallel(input_layouts=Shard(1)): gathered, 2 B x h, not 2 B x h / 8), with the loss
    by = {int(c.case_id): r for c, r in ((r.case, r) for r in cm.evaluate(cm.load_cases()))}
    case = by[11].case
    assert case.config.sp_saved_inputs == "gathered"
    sharded = cm.evaluate([replace(case, config=replace(case.config, sp_saved_inputs="sharded"))])[0]
    tokens, h = case.config.mb * case.workload.seq_len, 8192
    assert by[11].total_bytes - sharded.total_bytes == pytest.approx(
        tokens * h * ((2 * 1 - 4 / 8) + (2 - 2 / 8)) * 1.05, rel=1e-9
    )
    measured = case.measured_bytes
    assert abs(by[11].total_bytes - measured) < abs(sharded.total_bytes - measured)


def test_eager_torchtitan_keeps_the_element_wise_saves_in_the_recomputed_layer():
    # torchtitan Table 1/3 without torch.compile (cases 1, 8) peak 5.0-5.4 GiB above the compiled runs (2, 9); the
    # eager RMSNorm / RoPE / SwiGLU saves (costmodel.physics.kernels.eager) add to the one layer op-SAC re-materialises in backward
    by = {int(c.case_id): r for c, r in ((r.case, r) for r in cm.evaluate(cm.load_cases()))}
    for eager, compiled in ((1, 2), (8, 9)):
        fused = cm.evaluate([replace(by[eager].case, config=replace(by[eager].case.config, fused_elementwise=True))])[0]
        assert fused.total_bytes == pytest.approx(by[compiled].total_bytes)
        assert by[eager].total_bytes > fused.total_bytes
        measured = by[eager].case.measured_bytes
        assert abs(by[eager].total_bytes - measured) < abs(fused.total_bytes - measured)


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


def test_te_cross_entropy_holds_only_the_logits():
    # Transformer Engine's cross-entropy writes the gradient over the BF16 logits (TE@70f536662 triton/cross_entropy.py)
    c = ParallelConfig(tp=4, sp=True, dp=2, loss_impl="te")
    assert loss_bytes_per_logit(c) == 2
    assert ParallelConfig.from_dict(c.to_dict()) == c
    with pytest.raises(SpecError, match="loss_impl"):
        ParallelConfig(framework="fsdp2", zero=3, dp=8, loss_impl="te")
    from planner.emit.megatron import megatron_args
    from planner.megatron_args import loss_impl, parse_command_line

    # read from a Megatron-Bridge line; not emitted: Megatron-LM d98e8a64's validate_args refuses it
    assert loss_impl(parse_command_line("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te")) == "te"
    with pytest.raises(SpecError, match="loss_impl='te': must be fused for --emit megatron"):
        megatron_args(c, global_batch=16, layers=32)


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
