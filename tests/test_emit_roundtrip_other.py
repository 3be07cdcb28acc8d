"""Emitted torchtitan TOML and DeepSpeed JSON read back to the same plan and step time
(``benchmarks/emit_roundtrip_other.py``).

A plan is emitted as ``planner recommend ... --emit fsdp2|deepspeed`` prints it and read back as ``planner evaluate
--torchtitan-config FILE`` / ``--deepspeed-config FILE`` reads it (DeepSpeed with the planner flags of the
benchmark's ``SCRIPT_FIELDS``); every ``ParallelConfig`` field, the workload and the model are compared (by the
benchmark's ``meaning``), what the format's own parser states is compared with the plan, the emitted keys are
checked against torchtitan v0.2.2's and DeepSpeed edaa72212's schemas, and the step time of the same engine within
1e-9.

The subset, by rule (:func:`subset`): every published FSDP2 or DeepSpeed row and every stated plan, and of the
recommended problems those on at most 32 GPUs (the quicker searches; they still hold every setting of each format
the problems pin: each ZeRO stage, recompute choice, TP with async TP, PP with an uneven split, CP, EP with DeepEP,
FP8, the BF16 optimizer, the FP32 loss, eager kernels, DeepSpeed's Hugging Face modules, unfused attention and
pipeline).
"""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import emit_roundtrip_other as E  # noqa: E402
from costmodel.spec.errors import SpecError  # noqa: E402
from costmodel.spec.plan import ParallelConfig  # noqa: E402
from costmodel.spec.workload import Workload  # noqa: E402
from planner.emit import emit_text  # noqa: E402
from planner.emit.deepspeed import deepspeed_config  # noqa: E402
from planner.inputs.deepspeed import parse_deepspeed_text  # noqa: E402
from planner.inputs.torchtitan import model_parts_layout, parse_torchtitan_text  # noqa: E402

W = Workload(global_batch=64, seq_len=4096)
#: the plan fields a refusal of a recommended or stated plan may name: what the format cannot run (the recipe a
#: problem pins; dp 1 beside TP or PP, where torchtitan trains without mixed precision; a model's MTP layers, which
#: torchtitan v0.2.2 does not train)
REFUSABLE = {"dtype", "dp", "mtp_layers"}


def subset() -> list:
    """The rule of the module docstring: ``(kind, case)`` pairs."""
    out = [("row", r) for r in E.published_rows()]
    out += [("stated", c) for c in E.STATED]
    out += [("problem", p) for p in E.PROBLEMS if int(p.argv[p.argv.index("--gpus") + 1]) <= 32]
    return out


CASES = subset()


def _run(kind, case) -> dict:
    if kind == "row":
        return E.roundtrip_row(case)
    if kind == "stated":
        return E.roundtrip_stated(case)
    return E.roundtrip_problem(case)


def _id(pair) -> str:
    kind, case = pair
    return f"row{case.row_id}" if kind == "row" else case[0] if kind == "stated" else case.name


@pytest.mark.parametrize("pair", CASES, ids=[_id(p) for p in CASES])
def test_emitted_plan_reads_back_the_same(pair):
    kind, case = pair
    r = _run(kind, case)
    if r["status"] == "emit refused":
        field = r["why"].split("=")[0]
        fmt = r["framework"]
        # a published row ran another framework's settings; a recommended plan only for REFUSABLE fields
        assert kind == "row" or field in REFUSABLE, r["why"]
        assert f"--emit {fmt}" in r["why"], r["why"]
        return
    assert r["status"] == "same", E.detail(r)
    assert abs(r["rel"]) <= E.REL_TOL and not r["fields"]


def test_the_subset_emits_every_setting():
    # the rule keeps a case of each setting the formats state; were every one refused, the test above could not fail
    names = {c.name for k, c in CASES if k == "problem"}
    for must in (
        "tt-3b-ddp",
        "tt-8b-full",
        "tt-8b-opsac",
        "tt-8b-pp3-uneven",
        "tt-8b-fp8",
        "tt-8b-loss-fp32",
        "tt-8b-eager",
        "tt-mixtral-ep8",
        "tt-gptoss-deepep",
        "ds-3b-zero0",
        "ds-8b-zero1",
        "ds-8b-zero2",
        "ds-8b-zero3",
        "ds-8b-hf",
        "ds-8b-noflash",
        "ds-8b-loss-fp32",
        "ds-mixtral-ep8",
    ):
        assert must in names


# --------------------------------------------------------------------------- what the round trip needed
def test_torchtitan_model_parts_read_as_the_layout():
    # an uneven or interleaved split is written as module_fqns_per_model_part; it was not read (interleaved:
    # refused for want of pipeline_parallel_layers_per_stage; 1F1B: read as the even split)
    parts = [["tok_embeddings", "layers.0"], ["layers.1", "layers.2"], ["layers.3"], ["layers.4", "norm", "output"]]
    assert model_parts_layout(parts, 2, interleaved=True) == "Et|tt|t|tL"
    fi = parse_torchtitan_text(
        '[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "Interleaved1F1B"\n'
        f"module_fqns_per_model_part = {parts!r}\n".replace("'", '"')
    )
    assert (fi.stated["layout"], fi.stated["vp"], fi.deferred["less"]) == ("Et|tt|t|tL", 2, (0, 0))
    for bad, words in (
        ([["tok_embeddings", "layers.1"], ["layers.0", "norm", "output"]], "model order"),
        ([["tok_embeddings", "layers.0", "norm"], ["layers.1", "output"]], "norm and output"),
        (parts, "1F1B"),  # four parts on two ranks under a one-stage-per-rank schedule
    ):
        with pytest.raises(SpecError, match=words):
            model_parts_layout(bad, 2, interleaved=False)


def test_torchtitan_states_what_it_runs():
    c = ParallelConfig(dp=8, zero=2, mb=2, framework="fsdp2", optimizer_dtype="bf16")
    text, _ = emit_text("fsdp2", c, Workload(global_batch=64, seq_len=4096, dtype="fp8-tensorwise"), 32)
    assert 'dtype = "bfloat16"' in text and 'converters = ["quantize.linear.float8"]' in text
    s = parse_torchtitan_text(text).stated
    assert (s["optimizer_dtype"], s["dtype"], s["loss_impl"]) == ("bf16", "fp8-tensorwise", "fused")
    moe = ParallelConfig(dp=8, ep=8, zero=2, mb=2, framework="fsdp2", ep_dispatcher="deepep")
    text, _ = emit_text("fsdp2", moe, W, 32)
    assert parse_torchtitan_text(text).stated["ep_dispatcher"] == "deepep"
    # compile components: the blocks (fused element-wise ops) and the loss (else eager FP32 cross-entropy)
    for comp, fused, loss in (
        ("enable = false", False, "fp32"),
        ('enable = true\ncomponents = ["loss"]', False, "fused"),
        ('enable = true\ncomponents = ["model"]', True, "fp32"),
        ("enable = true", True, "fused"),
    ):
        s = parse_torchtitan_text(f"[compile]\n{comp}\n").stated
        assert (s["fused_elementwise"], s["loss_impl"]) == (fused, loss)
    s = parse_torchtitan_text("[parallelism]\ncontext_parallel_degree = 2\n").stated
    assert s["cp_impl"] == "torch"
    assert parse_torchtitan_text("").mtp_layers == 0
    with pytest.raises(SpecError, match="rowwise"):
        parse_torchtitan_text(
            '[model]\nconverters = ["quantize.linear.float8"]\n[quantize.linear.float8]\nrecipe_name = "rowwise"\n'
        )
    with pytest.raises(SpecError, match="Async TP requires"):
        parse_torchtitan_text("[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n")


@pytest.mark.parametrize(
    "fields, field",
    [
        (dict(flash_attention=False), "flash_attention"),
        (dict(fused_elementwise=False, fused_norm=True), "fused_norm"),
        (dict(fsdp_copies=False), "fsdp_copies"),
        (dict(recompute="selective"), "recompute"),
        (dict(tp=2, sp=True, dp=4, zero=0), "zero"),
        (dict(tp=2, sp=True, chunks=2, fused_elementwise=False), "chunks"),
        (dict(zero=0, bucket_bytes=40e6), "bucket_mb"),
        (dict(tp=8, pp=1, dp=1, sp=True), "dp"),
        (dict(ep=8, ep_dispatcher="hybridep"), "ep_dispatcher"),
    ],
)
def test_torchtitan_refuses_what_it_cannot_state(fields, field):
    base = dict(dp=8, zero=3, mb=1, framework="fsdp2")
    c = ParallelConfig(**{**base, **fields})
    # a field torchtitan's config has no words for (--emit fsdp2), or degrees it does not run together (the
    # framework's rule, costmodel.frameworks.rules.check_degrees, which evaluate and the search hold too)
    with pytest.raises(SpecError, match=rf"^{field}=.*(--emit fsdp2|under framework=fsdp2)"):
        emit_text("fsdp2", c, W, 32)


def test_torchtitan_refuses_recipes_and_mtp_it_has_no_setting_for():
    c = ParallelConfig(dp=8, zero=3, mb=1, framework="fsdp2")
    for recipe in ("fp8", "fp8-blockwise"):
        with pytest.raises(SpecError, match=r"dtype=.*bf16 or fp8-tensorwise"):
            emit_text("fsdp2", c, Workload(global_batch=64, seq_len=4096, dtype=recipe), 32)
    tp = ParallelConfig(tp=2, sp=True, dp=4, zero=3, mb=1, framework="fsdp2")
    with pytest.raises(SpecError, match="Float8 TP plan"):
        emit_text("fsdp2", tp, Workload(global_batch=64, seq_len=4096, dtype="fp8-tensorwise"), 32)
    from planner.emit.torchtitan import torchtitan_lines

    with pytest.raises(SpecError, match="mtp_layers"):
        torchtitan_lines(c, W, 32, mtp_layers=1)
    with pytest.raises(SpecError, match="routed experts"):
        torchtitan_lines(c, Workload(global_batch=64, seq_len=4096, dtype="fp8-tensorwise"), 32, moe=True)


def test_deepspeed_overlaps_only_where_deepspeed_does():
    # stage 0 builds no ZeRO optimizer (gradients all-reduced after backward); the pipeline engine turns
    # overlap_comm off: the JSON says no overlap there, and a stage-0 JSON stating one reads back without it
    z0 = deepspeed_config(ParallelConfig(dp=8, zero=0, bucket_bytes=40e6, framework="deepspeed"), 64)
    pp = deepspeed_config(ParallelConfig(pp=2, dp=4, zero=1, bucket_bytes=40e6, framework="deepspeed"), 64)
    for d in (z0, pp):
        assert d["zero_optimization"]["overlap_comm"] is False and "reduce_bucket_size" not in d["zero_optimization"]
    text = (
        '{"train_batch_size": 64, "bf16": {"enabled": true}, "zero_optimization": {"stage": 0, "overlap_comm": true}}'
    )
    assert parse_deepspeed_text(text).stated["bucket_mb"] == 0
    moe = ParallelConfig(dp=8, ep=8, zero=2, framework="deepspeed", ep_dispatcher="deepep")
    with pytest.raises(SpecError, match="ep_dispatcher=.*alltoall for --emit deepspeed"):
        emit_text("deepspeed", moe, W, 32)
    with pytest.raises(SpecError, match="fused_elementwise=False"):
        emit_text("deepspeed", ParallelConfig(dp=8, zero=2, framework="deepspeed", fused_elementwise=False), W, 32)


def test_the_key_check_finds_a_key_the_real_parser_lacks():
    assert E.unknown_keys("fsdp2", '[training]\nseq_len = 8\n[model]\nnorm_type = "rmsnorm"\n') == ["model.norm_type"]
    assert E.unknown_keys("fsdp2", "[quantize.linear.float8]\nrecipe = 1\n") == ["quantize.linear.float8.recipe"]
    assert E.unknown_keys("deepspeed", '{"zero_optimization": {"stage": 1, "bucket": 2}, "bf16": {"on": true}}') == [
        "zero_optimization.bucket",
        "bf16.on",
    ]
    # what the emitters write has none
    text, _ = emit_text("fsdp2", ParallelConfig(dp=8, zero=3, mb=1, framework="fsdp2"), W, 32)
    assert E.unknown_keys("fsdp2", text) == []


def test_a_difference_fails_the_case():
    # the comparison the test relies on sees a changed field, workload and stated key
    c = ParallelConfig(dp=8, zero=3, mb=1, framework="fsdp2")
    from dataclasses import replace

    from costmodel.spec.presets import load_model

    m = load_model("llama3-8b")
    d = E.differences(c, replace(c, mb=2), m, W, replace(W, global_batch=128), m)
    assert set(d) == {"mb", "workload.global_batch"}
    text, _ = emit_text("fsdp2", c, W, 32)
    assert E.stated_differences("fsdp2", re.sub(r"local_batch_size = \d+", "local_batch_size = 4", text), c, m, W) == {
        "stated mb": (1, 4)
    }
