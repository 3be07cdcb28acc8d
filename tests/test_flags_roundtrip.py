"""Emitted Megatron-LM flags read back to the same plan and step time (``benchmarks/flags_roundtrip.py``).

A plan is emitted as ``planner recommend ... --emit megatron`` prints it and read back as ``planner evaluate
--megatron-args LINE`` reads it; every ``ParallelConfig`` field is compared (less the benchmark's ``EXCLUDED``,
each with its reason) and the step time of the same engine within 1e-9. Published plans: those of the rule in
:func:`subset` (every Megatron plan with a plan option off its default or a layout, and the first plain plan of
each source); then plans no published row has (optimizer offload, NVFP4, Megatron's default recompute module
named, experts reduced at dp 1); then the converters and parsers the round trip needed.
"""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import flags_roundtrip as F  # noqa: E402
from costmodel.api import evaluate  # noqa: E402
from costmodel.spec.errors import SpecError  # noqa: E402
from costmodel.spec.plan import ParallelConfig  # noqa: E402
from costmodel.spec.presets import load_cluster, load_model  # noqa: E402
from costmodel.spec.workload import Workload  # noqa: E402
from planner import megatron_args as mg  # noqa: E402
from planner.cli import build_parser, main  # noqa: E402
from planner.emit.megatron import megatron_args  # noqa: E402
from planner.framework_plan import from_cli, to_cli  # noqa: E402
from search.problem import PLAN_OPTIONS  # noqa: E402

DEFAULT = ParallelConfig()
#: what --emit megatron refuses, published plans that have it: a BF16 run reducing FP16 gradients (the 2020-22 FP16
#: runs, modelled on BF16 compute) and BF16 Adam state with no master copy (NeMo's distributed_fused_adam), for lack
#: of Megatron-LM flags; Transformer Engine's cross-entropy (the Megatron-Bridge 25.11 recipes), which Megatron-LM
#: d98e8a64's validate_args refuses; the refusal names the field
UNSTATABLE = {"grad_dtype", "optimizer_dtype", "loss_impl"}


def options_of(row) -> set:
    """The plan options (search.problem.PLAN_OPTIONS) a published row sets off ParallelConfig's defaults."""
    return {k for k in PLAN_OPTIONS if k in row.fixed and row.fixed[k] != getattr(DEFAULT, k)}


def subset() -> list:
    """The rule: every published Megatron plan that sets a plan option off its default or states a layout, and
    the first plain plan of each source."""
    rows, plain_seen = [], set()
    for row in F.megatron_rows("all"):
        if options_of(row) or row.fixed.get("layout"):
            rows.append(row)
        elif row.source not in plain_seen:
            plain_seen.add(row.source)
            rows.append(row)
    return rows


ROWS = subset()


@pytest.fixture(scope="module")
def results():
    return {(r.set, r.row_id): F.roundtrip(r) for r in ROWS}


def test_the_rule_picks_option_plans_and_plain_ones():
    with_options = [r for r in ROWS if options_of(r)]
    assert len(with_options) >= 40 and len(ROWS) - len(with_options) >= 5
    # every option a published Megatron plan sets is among them
    assert {k for r in F.megatron_rows("all") for k in options_of(r)} == {
        k for r in with_options for k in options_of(r)
    }


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.set}-{r.row_id}" for r in ROWS])
def test_published_plan_reads_back_identical(results, row):
    r = results[(row.set, row.row_id)]
    if r["status"] == "emit refused":  # only what no Megatron-LM flag states, the refusal naming it
        assert r["why"].split("=")[0] in UNSTATABLE, r["why"]
        return
    assert r["status"] == "same", F.detail(r)
    assert r["fields"] == {} and abs(r["rel"]) <= F.REL_TOL


def test_every_option_a_published_plan_sets_is_emitted_and_read_back(results):
    emitted = {k for r in ROWS if results[(r.set, r.row_id)]["status"] == "same" for k in options_of(r)}
    # an option only refused plans set (activation offload: rows 268 and 277, on Transformer Engine's loss) is
    # emitted and read back in a plan of no published row (SYNTHETIC below)
    only_refused = {k for r in ROWS for k in options_of(r)} - emitted - UNSTATABLE
    assert only_refused <= {k for case in SYNTHETIC for k in case[4]}, only_refused


# --------------------------------------------------------------------------- plans no published row has
H100, B200 = load_cluster("h100-sxm"), load_cluster("b200")
SYNTHETIC = [
    # optimizer CPU offload, overlapped and not (Megatron --optimizer-offload-fraction defaults to 1)
    (
        "llama3-70b",
        H100,
        64,
        "bf16",
        dict(
            tp=8,
            dp=8,
            zero=1,
            sp=True,
            recompute="full",
            optimizer_offload_fraction=0.5,
            overlap_cpu_optimizer_d2h_h2d=True,
        ),
    ),
    (
        "llama3-70b",
        H100,
        64,
        "bf16",
        dict(tp=8, dp=8, zero=1, sp=True, recompute="full", optimizer_offload_fraction=1.0),
    ),
    # NVFP4 parameters: --fp4-param-gather; an MXFP8 recipe with FP8 parameters
    ("llama3-8b", B200, 16, "nvfp4", dict(tp=2, dp=8, zero=1, sp=True, fp8_param_gather=True, grad_dtype="bf16")),
    ("llama3-8b", B200, 16, "mxfp8", dict(tp=2, dp=8, zero=1, sp=True, fp8_param_gather=True)),
    # Megatron's default module named
    ("llama3-8b", H100, 8, "bf16", dict(dp=8, zero=1, recompute="selective", recompute_modules=("core_attn",))),
    ("llama3-8b", H100, 8, "bf16", dict(dp=8, zero=1, activation_offload_layers=4)),
    ("mixtral-8x7b", H100, 64, "bf16", dict(tp=8, ep=2, dp=8, zero=1, sp=True, offload_modules=("expert_fc1",))),
    # dp 1, the experts' gradients reduced over tp*dp/ep = 2 ranks in the plan's bucket
    ("mixtral-8x7b", H100, 16, "bf16", dict(tp=8, ep=4, pp=2, dp=1, zero=1, sp=True)),
    # a split only a layout states (5 % vp) and one the first/last flags state
    ("llama3-8b", H100, 8, "bf16", dict(pp=4, vp=2, dp=2, zero=1, layers_per_stage=(9, 8, 8, 7))),
    ("llama3-8b", H100, 8, "bf16", dict(pp=4, vp=2, dp=2, zero=1, layers_per_stage=(7, 9, 9, 7))),
]


@pytest.mark.parametrize("case", SYNTHETIC, ids=[f"{c[0]}-{i}" for i, c in enumerate(SYNTHETIC)])
def test_plan_of_no_published_row_reads_back_identical(case):
    name, cluster, gpus, dtype, kw = case
    model, cluster, w = load_model(name), cluster.with_gpus(gpus), Workload(global_batch=64, seq_len=4096, dtype=dtype)
    est = evaluate(model, cluster, w, ParallelConfig(**kw))
    r = F.roundtrip_estimate(est, model, cluster, w)
    assert r["status"] == "same", F.detail(r)


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(fused_elementwise=False), "fused_elementwise"),
        (dict(loss_impl="te"), "loss_impl"),  # Megatron-LM d98e8a64's validate_args refuses it
    ],
)
def test_a_plan_no_megatron_flag_states_is_refused_not_emitted_as_another(kw, field):
    model, cluster, w = load_model("llama3-8b"), H100.with_gpus(8), Workload(global_batch=64, seq_len=4096)
    est = evaluate(model, cluster, w, ParallelConfig(**{"dp": 8, "zero": 1, **kw}))
    r = F.roundtrip_estimate(est, model, cluster, w)
    assert r["status"] == "emit refused" and r["why"].startswith(field), r


def test_the_comparison_sees_a_dropped_field():
    # the check itself can fail: a plan and the same plan less its modules differ in that field
    model = load_model("qwen3-30b-a3b")
    a = ParallelConfig(tp=1, dp=8, ep=8, zero=1, recompute="selective", recompute_modules=("layernorm", "moe_act"))
    b = ParallelConfig(tp=1, dp=8, ep=8, zero=1, recompute="selective")
    assert set(F.differences(a, b, model)) == {"recompute_modules"}
    assert F.differences(a, a, model) == {}


# --------------------------------------------------------------------------- converters and parsers
def test_module_tuple_to_and_from_the_flags_token_form():
    assert to_cli("recompute_modules", ("layernorm", "moe_act")) == [("layernorm", "moe_act")]
    assert from_cli("recompute_modules", [("layernorm", "moe_act")]) == ("layernorm", "moe_act")
    for mods in (("core_attn",), ("moe_act", "layernorm"), ("mla_up_proj", "layernorm", "moe")):
        assert from_cli("recompute_modules", to_cli("recompute_modules", mods)) == mods
        assert from_cli("offload_modules", to_cli("offload_modules", mods)) == mods
    assert to_cli("tp", 8) == from_cli("tp", 8) == 8 and to_cli("recompute_modules", None) is None
    # the planner's own flag, space- and comma-separated tokens, reads as the same tuple, in order
    args = build_parser().parse_args(
        ["evaluate", "--model", "m", "--cluster", "c", "--recompute-modules", "layernorm,moe", "moe_act"]
    )
    assert from_cli("recompute_modules", args.recompute_modules) == ("layernorm", "moe", "moe_act")


def test_megatron_line_states_modules_as_written():
    read = lambda line: mg.config_fields(mg.parse_command_line(line))  # noqa: E731
    sel = "--recompute-granularity selective --recompute-modules "
    assert read(sel + "moe_act layernorm")["recompute_modules"] == ("moe_act", "layernorm")
    assert read(sel + "core_attn")["recompute_modules"] == ("core_attn",)  # Megatron's default, stated
    assert "recompute_modules" not in read("--recompute-granularity selective")


def test_loss_impl_both_ways():
    line = "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te"  # a Megatron-Bridge 25.11 recipe's
    assert mg.loss_impl(mg.parse_command_line(line)) == "te"
    assert mg.loss_impl({"cross_entropy_loss_fusion": "True"}) is None  # native: Megatron-Core's own, fused
    assert mg.loss_impl({"cross_entropy_fusion_impl": "te"}) is None  # the impl without the fusion is not read
    with pytest.raises(SpecError, match="cross_entropy_fusion_impl"):
        mg.loss_impl({"cross_entropy_loss_fusion": "True", "cross_entropy_fusion_impl": "apex"})


def test_fp4_param_gather_both_ways():
    c = ParallelConfig(dp=8, zero=1, fp8_param_gather=True)
    argv = [t for a in megatron_args(c, 64, 32, dtype="nvfp4") for t in a]
    assert "--fp4-param-gather" in argv and "--fp8-param-gather" not in argv
    assert mg.config_fields(mg.parse_command_line(" ".join(argv)))["fp8_param_gather"] is True
    with pytest.raises(SpecError, match="fp4"):  # Megatron-Core: fp4_param needs fp4 mode
        mg.config_fields(mg.parse_command_line("--bf16 --fp4-param-gather --use-distributed-optimizer"))


def test_overlap_is_written_at_dp_one():
    c = ParallelConfig(tp=8, ep=4, dp=1, zero=1, sp=True)
    argv = [t for a in megatron_args(c, 64, 32, moe=True) for t in a]
    assert "--overlap-grad-reduce" in argv
    assert mg.config_fields(mg.parse_command_line(" ".join(argv)))["bucket_mb"] == pytest.approx(c.bucket_bytes / 1e6)


def test_the_cli_reads_its_own_emitted_file_back(capsys, tmp_path):
    # the commands themselves: evaluate --emit megatron writes the file, evaluate --megatron-args FILE reads it
    problem = ["--model", "qwen3-30b-a3b", "--cluster", "h100-sxm", "--gpus", "16"]
    plan = "--global-batch 128 --seq 4096 --tp 1 --pp 1 --cp 2 --ep 8 --mb 2 --zero 1 --bucket-mb 40 --recompute selective "
    plan += "--recompute-modules layernorm moe_act --fine-grained-activation-offloading "
    plan += "--offload-modules expert_fc1 --ep-dispatcher deepep --framework-defaults"
    assert main(["evaluate", *problem, *plan.split(), "--json"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert main(["evaluate", *problem, *plan.split(), "--emit", "megatron"]) == 0
    f = tmp_path / "plan.args"
    f.write_text(capsys.readouterr().out)
    assert main(["evaluate", *problem, "--megatron-args", str(f), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["config"] == want["config"]
    assert got["step_time_s"] == pytest.approx(want["step_time_s"], rel=F.REL_TOL)
