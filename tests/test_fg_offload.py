"""Fine-grained activation offloading (Megatron-Core --fine-grained-activation-offloading --offload-modules):
memory, time, refusals, emit/parse, CLI, and published row 293 that ran it."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from costmodel.api import evaluate
from costmodel.physics.mechanics import fg_offload, offload
from costmodel.physics.memory.activations import (
    MIN_OFFLOADED_ELEMENTS,
    offloaded_group_bytes,
    routed_slots_per_token,
)
from costmodel.physics.memory.stage_memory import memory_per_stage
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from costmodel.training.fastpath import Scorer
from planner import cli
from planner import megatron_args as mg
from planner.emit import megatron_args
from planner.emit.megatron import megatron_notes
from planner.inputs.megatron import check_megatron_flags

M, CL, W = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm").with_gpus(8), Workload(global_batch=16, seq_len=4096)
PLAN = dict(dp=8, ep=8, zero=1, recompute="selective", recompute_modules=("moe_act",))
BOTH = ("expert_fc1", "moe_act")
FLAGS = ["--fine-grained-activation-offloading", "--offload-modules", "expert_fc1", "moe_act"]
BASE = ["evaluate", "--model", "qwen3-30b-a3b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "16"]
BASE += ["--seq", "4096", "--dp", "8", "--ep", "8", "--zero", "1", "--recompute", "selective"]
BASE += ["--recompute-modules", "moe_act", "--framework-defaults"]


def test_off_is_the_plan_without_it():
    c = ParallelConfig(**PLAN)
    assert c.offload_modules is None and "offload_modules" not in c.to_dict()
    assert "fg_offload_exposed_s" not in evaluate(M, CL, W, c).breakdown
    on = ParallelConfig(**PLAN, offload_modules=["moe_act", "expert_fc1", "moe_act"])
    assert on.offload_modules == ("moe_act", "expert_fc1") and ParallelConfig.from_dict(on.to_dict()) == on


def test_group_bytes_by_hand():
    c = ParallelConfig(**PLAN, offload_modules=BOTH)
    routed = W.seq_len * routed_slots_per_token(M, W, c)  # slots this GPU's experts hold per layer
    g = offloaded_group_bytes(M, W, c)
    assert list(g) == list(BOTH)  # forward order
    assert g["expert_fc1"] == pytest.approx(routed * 2 * M.hidden)  # the BF16 permuted tokens
    assert g["moe_act"] == pytest.approx(routed * 2 * 2 * M.moe_ffn_hidden)  # the fc1 output, 2f wide (SwiGLU)
    # MXFP8 keeps (and copies) the quantized input; FP8 per-tensor copies the BF16 input (set_save_original_input)
    # where the GEMM would have kept 1 B
    mx = Workload(global_batch=16, seq_len=4096, dtype="mxfp8")
    assert offloaded_group_bytes(M, mx, c)["expert_fc1"] == pytest.approx(routed * (1 + 1 / 32) * M.hidden)
    f8 = Workload(global_batch=16, seq_len=4096, dtype="fp8")
    assert offloaded_group_bytes(M, f8, c)["expert_fc1"] == pytest.approx(routed * 2 * M.hidden)
    assert offloaded_group_bytes(M, f8, c, copied=False)["expert_fc1"] == pytest.approx(routed * 1 * M.hidden)
    # a tensor under min_offloaded_tensor_size stays: at 128 tokens each local expert's fc1 input is too small
    short = Workload(global_batch=16, seq_len=128)
    per_expert = 128 * routed_slots_per_token(M, short, c) / (M.experts // 8) * M.hidden
    assert per_expert < MIN_OFFLOADED_ELEMENTS and list(offloaded_group_bytes(M, short, c)) == ["moe_act"]


@pytest.mark.parametrize("mods", [("expert_fc1",), ("moe_act",), BOTH])
def test_memory_drops_by_the_offloaded_groups(mods):
    base, on = (evaluate(M, CL, W, ParallelConfig(**PLAN, offload_modules=m)) for m in (None, mods))
    off = sum(offloaded_group_bytes(M, W, ParallelConfig(**PLAN, offload_modules=mods), copied=False).values())
    # pp = 1 holds one micro-batch: every layer's groups leave but the last layer's, kept as the reload margin
    drop = base.memory[0]["activations_bytes"] - on.memory[0]["activations_bytes"]
    assert drop == pytest.approx((M.layers - 1) * off) and on.peak_memory_bytes < base.peak_memory_bytes


def test_memory_under_a_pipeline_drops_per_held_micro_batch():
    c = dict(PLAN, pp=2, dp=4, vp=2)
    base, on = (memory_per_stage(M, W, ParallelConfig(**c, offload_modules=m)) for m in (None, BOTH))
    off = sum(offloaded_group_bytes(M, W, ParallelConfig(**c, offload_modules=BOTH), copied=False).values())
    for b, o in zip(base, on):  # a whole number of layer-micro-batches, more than one stage's layers
        held = (b.activations_bytes - o.activations_bytes) / off + 1
        assert held == pytest.approx(round(held)) and held > M.layers / 2


@pytest.mark.parametrize("engine", ["analytic", "graph"])
def test_step_time_adds_the_exposed_reloads(engine):
    c = ParallelConfig(**PLAN, offload_modules=BOTH)
    base, on = evaluate(M, CL, W, ParallelConfig(**PLAN), engine=engine), evaluate(M, CL, W, c, engine=engine)
    exposed = on.breakdown["fg_offload_exposed_s"]
    assert on.step_time_s - base.step_time_s == pytest.approx(exposed)
    t = {k: v / offload.host_link_bytes_per_s(CL) for k, v in offloaded_group_bytes(M, W, c).items()}
    m = 2  # 16 sequences / dp 8 / mb 1
    assert on.comm_link_s["fg_offload"] == pytest.approx(2 * M.layers * m * sum(t.values()))
    # each layer's expert_fc1 reload is issued when its moe_act backward ends and awaited at once: exposed whole
    assert M.layers * m * t["expert_fc1"] * (1 - 1e-9) <= exposed <= on.comm_link_s["fg_offload"]


def test_a_slow_host_link_grows_the_step(monkeypatch):
    c = ParallelConfig(**PLAN, offload_modules=BOTH)
    fast = evaluate(M, CL, W, c)
    # one module: its reload is issued a layer ahead and hides behind the layer's backward outside its experts
    one = evaluate(M, CL, W, replace(c, offload_modules=("expert_fc1",)))
    assert one.breakdown["fg_offload_exposed_s"] < fast.breakdown["fg_offload_exposed_s"]
    monkeypatch.setitem(offload.HOST_LINK_BYTES_PER_S, "H100", offload.HOST_LINK_BYTES_PER_S["H100"] / 4)
    slow = evaluate(M, CL, W, c)
    assert slow.breakdown["fg_offload_exposed_s"] >= 4 * fast.breakdown["fg_offload_exposed_s"] * (1 - 1e-9)
    assert slow.step_time_s > fast.step_time_s


def test_engines_and_fast_path_agree():
    c = ParallelConfig(**PLAN, offload_modules=BOTH)
    a, g = (evaluate(M, CL, W, c, engine=e) for e in ("analytic", "graph"))
    assert a.breakdown["fg_offload_exposed_s"] == pytest.approx(g.breakdown["fg_offload_exposed_s"], rel=0.05)
    s = Scorer(M, CL, W).score(c)
    assert s.step_time_s == pytest.approx(a.step_time_s, rel=1e-9)
    assert s.peak_memory_bytes == pytest.approx(a.peak_memory_bytes, rel=1e-9)


def test_layer_schedule_by_hand():
    # forward order fc1 (1 s), act (2 s): act's reload hides behind 1.5 s but 0.5 s; fc1's is awaited whole
    assert fg_offload.layer_exposed_s([1.0, 2.0], 1.5) == pytest.approx(1.5)
    assert fg_offload.layer_exposed_s([1.0], 3.0) == 0.0 and fg_offload.layer_exposed_s([], 1.0) == 0.0
    from costmodel.physics.kernels.flops import layer_forward_flops_per_token

    experts = 2 * M.topk * M.expert_params / layer_forward_flops_per_token(M, True, 4096)  # the routed experts' share
    assert 0 < experts < 1 and fg_offload.window_s(M, 4096, 1.0) == pytest.approx(1.0 - experts)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(offload_modules=()), "non-empty"),
        (dict(offload_modules=("experts",)), "expert_fc1, moe_act"),
        (dict(offload_modules=("core_attn",)), "not modelled"),  # a Megatron choice this model does not charge
        (dict(offload_modules=BOTH, recompute_modules=("moe",)), "recomputed MoE layer"),
        (dict(offload_modules=BOTH, recompute="full", recompute_modules=None), "full recompute"),
        (
            dict(offload_modules=BOTH, recompute="none", recompute_modules=None, activation_offload_layers=4),
            "cpu_offloading",
        ),
        (dict(offload_modules=BOTH, recompute="none", recompute_modules=None, framework="fsdp2"), "megatron"),
    ],
)
def test_refusals(kw, match):
    with pytest.raises(SpecError, match=match):
        ParallelConfig(**{**PLAN, **kw})


def test_a_dense_model_is_refused():
    with pytest.raises(SpecError, match="dense"):
        evaluate(load_model("llama3-8b"), CL, W, ParallelConfig(dp=8, offload_modules=BOTH))


def test_emit_and_parse_round_trip():
    c = ParallelConfig(**PLAN, offload_modules=BOTH)
    argv = [t for a in megatron_args(c, global_batch=16, layers=M.layers, moe=True) for t in a]
    check_megatron_flags(argv)  # flags of Megatron-LM d98e8a64's argument list
    i = argv.index("--offload-modules")
    assert argv[i + 1 : i + 3] == list(BOTH) and "--fine-grained-activation-offloading" in argv
    assert mg.config_fields(mg.parse_command_line(" ".join(argv)))["offload_modules"] == BOTH
    assert any("NVTE_CPU_OFFLOAD_V1=1" in n for n in megatron_notes(c))  # arguments.py asserts it (TE >= 2.10)
    off = [t for a in megatron_args(ParallelConfig(**PLAN), global_batch=16, layers=M.layers, moe=True) for t in a]
    assert "--offload-modules" not in off and not any("NVTE" in n for n in megatron_notes(ParallelConfig(**PLAN)))


def test_parser_reads_what_megatron_reads():
    read = lambda line: mg.config_fields(mg.parse_command_line(line))  # noqa: E731
    assert "offload_modules" not in read("--offload-modules moe_act")  # Megatron ignores them without the flag
    line = "--fine-grained-activation-offloading --offload-modules expert_fc1 moe_act --delay-offload-until-cuda-graph"
    assert read(line)["offload_modules"] == BOTH
    printed = {"fine_grained_activation_offloading": "True", "offload_modules": "['expert_fc1', 'moe_act']"}
    assert mg.config_fields(printed)["offload_modules"] == BOTH  # Megatron's printed arguments
    for knob in (
        "--activation-offload-fraction 0.5",
        "--min-offloaded-tensor-size 4",
        "--delta-offload-bytes-across-pp-ranks 9",
    ):
        with pytest.raises(SpecError, match=knob.split()[0][2:].replace("-", "_")):
            read(f"--fine-grained-activation-offloading --offload-modules moe_act {knob}")
    assert read("--fine-grained-activation-offloading --offload-modules moe_act --activation-offload-fraction 1.0")
    with pytest.raises(SpecError, match="offload_modules"):
        read("--fine-grained-activation-offloading")


def test_cli_evaluate_charges_it(capsys):
    runs = {}
    for on in (False, True):
        assert cli.main(BASE + (FLAGS if on else []) + ["--json"]) == 0
        runs[on] = json.loads(capsys.readouterr().out)
    assert runs[True]["config"]["offload_modules"] == list(BOTH) and "offload_modules" not in runs[False]["config"]
    assert runs[True]["breakdown"]["fg_offload_exposed_s"] > 0
    assert runs[True]["peak_memory_bytes"] < runs[False]["peak_memory_bytes"]


@pytest.mark.parametrize(
    "argv",
    [
        BASE + ["--fine-grained-activation-offloading", "--offload-modules", "qkv_linear"],
        BASE + ["--offload-modules", "moe_act"],
        BASE + ["--fine-grained-activation-offloading"],
        BASE[:-3] + ["--recompute-modules", "moe", "--framework-defaults"] + FLAGS,
    ],
)
def test_bad_values_exit_2_with_one_line(capsys, argv):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "offload_modules" in err


def test_a_stated_offload_is_a_plan_option_of_the_search():
    # a stated plan option (search.problem.PLAN_OPTIONS): every plan runs it, memory in the search, reloads in evaluate
    from search.problem import Limits, Problem

    out = Problem(model=M, cluster=CL, workload=W, limits=Limits(), options=(("offload_modules", BOTH),))
    assert "full" in out.limits.exclude["recompute"]  # Megatron refuses full recompute with it
    with pytest.raises(SpecError, match="dense model"):
        Problem(model=load_model("llama3-8b"), cluster=CL, workload=W, options=(("offload_modules", BOTH),))


def test_row_293_runs_it_and_fits():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package
    from benchmarks import published

    row = next(r for r in published.load_set("all") if r.row_id == "293")
    assert row.fixed["offload_modules"] == BOTH
    on = ParallelConfig(**row.fixed)
    peak = max(m.total_bytes for m in memory_per_stage(row.model, row.workload, on, row.cluster.device))
    off = replace(on, offload_modules=None)
    before = max(m.total_bytes for m in memory_per_stage(row.model, row.workload, off, row.cluster.device))
    assert peak <= row.cluster.device.hbm_bytes < before


def test_a_measured_run_states_it(tmp_path):
    from planner.runs import read_runs

    head = "label,model,cluster,gpus,global_batch,seq,tp,dp,ep,recompute,recompute_modules,offload_modules,step_time_s"
    row = "r,qwen3-30b-a3b,h100-sxm,8,16,4096,1,8,8,selective,moe_act,expert_fc1 moe_act,1.0"
    (tmp_path / "runs.csv").write_text(head + "\n" + row + "\n")
    (run,) = read_runs([tmp_path / "runs.csv"])
    assert run.config.offload_modules == BOTH
