"""Activation CPU offload (Megatron-Core --cpu-offloading-num-layers): memory, time, refusals, emit/parse, CLI."""

import json

import pytest

from costmodel.physics.mechanics import act_offload, offload
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from costmodel.api import evaluate
from costmodel.training.fastpath import Scorer
from costmodel.physics.memory.activations import activation_bytes_per_layer
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner import cli
from planner import megatron_args as mg
from planner.emit import megatron_args
from planner.inputs.megatron import check_megatron_flags

M, CL, W = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(8), Workload(global_batch=16, seq_len=8192)
PLAN = dict(tp=2, dp=4, sp=True, zero=1)
BASE = [
    "evaluate",
    "--model",
    "llama3-8b",
    "--cluster",
    "h100-sxm",
    "--gpus",
    "8",
    "--global-batch",
    "16",
    "--seq",
    "8192",
    "--tp",
    "2",
    "--dp",
    "4",
    "--sp",
    "--zero",
    "1",
]


def test_off_is_the_plan_without_it():
    c = ParallelConfig(**PLAN)
    assert c.activation_offload_layers == 0 and "activation_offload_layers" not in c.to_dict()
    assert "act_offload_exposed_s" not in evaluate(M, CL, W, c).breakdown


@pytest.mark.parametrize("n", [1, 8, 31])
def test_memory_drops_by_the_offloaded_layers(n):
    # TE's default scheduling: at most L - N activation sets on the GPU at any time
    base, on = (evaluate(M, CL, W, ParallelConfig(**PLAN, activation_offload_layers=k)) for k in (0, n))
    layer = activation_bytes_per_layer(M, W, ParallelConfig(**PLAN))
    assert base.memory[0]["activations_bytes"] - on.memory[0]["activations_bytes"] == pytest.approx(n * layer)
    assert on.peak_memory_bytes < base.peak_memory_bytes


@pytest.mark.parametrize("engine", ["analytic", "graph"])
def test_step_time_adds_the_exposed_copies(engine):
    base = evaluate(M, CL, W, ParallelConfig(**PLAN), engine=engine)
    layer = activation_bytes_per_layer(M, W, ParallelConfig(**PLAN))
    t = layer / offload.host_link_bytes_per_s(CL)  # one layer's copy, one way (H100: 51 GB/s)
    m = 4  # 16 sequences / dp 4 / mb 1
    for n in (8, 31):
        on = evaluate(M, CL, W, ParallelConfig(**PLAN, activation_offload_layers=n), engine=engine)
        exposed = on.breakdown["act_offload_exposed_s"]
        assert on.step_time_s - base.step_time_s == pytest.approx(exposed)
        assert on.comm_link_s["act_offload"] == pytest.approx(2 * n * m * t)
        assert 0 <= exposed <= 2 * n * m * t  # never more than the copies themselves
    # 8 of 32 layers: 24 sets to spare, the copies hide (TE's Figure 3); 31 of 32: one set, no overlap
    assert evaluate(M, CL, W, ParallelConfig(**PLAN, activation_offload_layers=8)).breakdown[
        "act_offload_exposed_s"
    ] == pytest.approx(0.0, abs=1e-9)
    assert exposed > m * t


def test_engines_and_fast_path_agree():
    c = ParallelConfig(**PLAN, activation_offload_layers=16)
    a, g = (evaluate(M, CL, W, c, engine=e) for e in ("analytic", "graph"))
    assert a.breakdown["act_offload_exposed_s"] == pytest.approx(g.breakdown["act_offload_exposed_s"], rel=0.02)
    s = Scorer(M, CL, W).score(c)
    assert s.step_time_s == pytest.approx(a.step_time_s, rel=1e-9)
    assert s.peak_memory_bytes == pytest.approx(a.peak_memory_bytes, rel=1e-9)


def test_schedule_by_hand():
    # 2 layers, the first offloaded, one set on the GPU: its 1.5 s copy starts with its forward (1 s); layer 2
    # waits for the copy (0.5 s); in backward layer 1's reload waits for layer 2's backward to free the set
    # (1.5 s): 2 s beyond 4 s of compute
    assert act_offload.schedule_s(2, 1, 1.0, 1.0, 1.5) == pytest.approx(6.0)
    # TE's Figures 3 and 4 (5 layers): 2 offloaded hide; 3 offloaded stall layer 4 until layer 2's copy ends
    assert act_offload.schedule_s(5, 2, 1.0, 2.0, 1.5) == pytest.approx(15.0)
    assert act_offload.schedule_s(5, 3, 1.0, 2.0, 1.5) > 15.0
    c = ParallelConfig(**PLAN, activation_offload_layers=1)
    nbytes = 1.5 * offload.host_link_bytes_per_s(CL)
    link, exposed = act_offload.exposed_s(c, CL, 2, nbytes, 1.0, 1.0, 3)
    assert link == pytest.approx(2 * 1 * 3 * 1.5) and exposed == pytest.approx(3 * 2.0)


def test_a_device_without_a_known_host_link_is_refused():
    sg = load_cluster("sg2262-like").with_gpus(8)
    if offload.host_link_bytes_per_s(sg) > 0:
        pytest.fail("sg2262-like has a host link now: pick another device for this test")
    with pytest.raises(SpecError, match="device"):
        act_offload.exposed_s(ParallelConfig(**PLAN, activation_offload_layers=2), sg, 4, 1e9, 0.0, 0.0, 1)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(pp=2, dp=2), "pipeline"),  # transformer_config.py: no PP with CPU offloading
        (dict(recompute="full"), "recompute"),  # nor with activation recomputation
        (dict(recompute_modules=("core_attn",)), "recompute"),
        (dict(framework="fsdp2"), "framework=megatron"),
    ],
)
def test_megatron_refusals(kw, match):
    with pytest.raises(SpecError, match=match):
        ParallelConfig(**{**PLAN, **kw}, activation_offload_layers=4)


def test_bad_counts_refused():
    with pytest.raises(SpecError, match="activation_offload_layers"):
        ParallelConfig(**PLAN, activation_offload_layers=-1)
    with pytest.raises(SpecError, match="from 0 to 31"):  # >= num_layers (32) refused
        evaluate(M, CL, W, ParallelConfig(**PLAN, activation_offload_layers=32))


def test_emit_and_parse_round_trip():
    c = ParallelConfig(**PLAN, activation_offload_layers=6)
    argv = [t for a in megatron_args(c, global_batch=16, layers=32) for t in a]
    check_megatron_flags(argv)  # a flag of Megatron-LM d98e8a64's argument list
    assert argv[argv.index("--cpu-offloading-num-layers") + 1] == "6"
    assert mg.config_fields(mg.parse_command_line(" ".join(argv)))["activation_offload_layers"] == 6
    off = [t for a in megatron_args(ParallelConfig(**PLAN), global_batch=16, layers=32) for t in a]
    assert "--cpu-offloading-num-layers" not in off


def test_parser_refuses_what_is_not_modelled():
    read = lambda line: mg.config_fields(mg.parse_command_line(line))  # noqa: E731
    assert "activation_offload_layers" not in read("--tensor-model-parallel-size 2")
    with pytest.raises(SpecError, match="cpu_offloading_weights"):
        read("--cpu-offloading-num-layers 2 --cpu-offloading-weights")
    with pytest.raises(SpecError, match="cpu_offloading_double_buffering"):
        read("--cpu-offloading-num-layers 2 --cpu-offloading-double-buffering")


def test_cli_evaluate_charges_it(capsys):
    runs = {}
    for n in (0, 16):
        assert cli.main(BASE + ["--activation-offload-layers", str(n), "--json"]) == 0
        runs[n] = json.loads(capsys.readouterr().out)
    assert runs[16]["config"]["activation_offload_layers"] == 16 and runs[16]["breakdown"]["act_offload_exposed_s"] > 0
    # the unstated knobs are chosen as recommend chooses them with the offload stated (a plan option of its
    # search), so both answer the same plan and time
    assert cli.main(["recommend"] + BASE[1:] + ["--activation-offload-layers", "16", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["config"] == runs[16]["config"] and rec["step_time_s"] == pytest.approx(
        runs[16]["step_time_s"], rel=1e-12
    )


@pytest.mark.parametrize(
    "argv",
    [
        BASE + ["--activation-offload-layers", "-2"],
        BASE + ["--activation-offload-layers", "x"],
        BASE + ["--activation-offload-layers", "4", "--recompute", "full"],
        ["recommend"] + BASE[1:11] + ["--activation-offload-layers", "4", "--pp", "2"],
        ["recommend"] + BASE[1:11] + ["--activation-offload-layers", "32"],
    ],
)
def test_bad_values_exit_2_with_one_line(capsys, argv):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "activation_offload_layers" in err


def test_explain_has_the_offload_row():
    """explain's overlap table holds the offload's copies as a row: link and exposed seconds as evaluate charges them,
    the reason where they stall (TE's limit of L - N sets on the GPU)."""
    from costmodel.engines.graph.explain import explain

    for n, stalls in ((8, False), (16, True)):
        c = ParallelConfig(**PLAN, activation_offload_layers=n)
        est = evaluate(M, CL, W, c)
        row = next(r for r in explain(M, CL, W, c) if r["strategy"] == "act_offload")
        assert row["t_comm_s"] == pytest.approx(est.comm_link_s["act_offload"], rel=1e-12)
        assert row["exposed_s"] == pytest.approx(est.breakdown["act_offload_exposed_s"], rel=1e-12)
        assert (row["exposed_s"] > 1e-3 * row["t_comm_s"]) == stalls and (
            f"at most {32 - n} layers'" in row["reason"]
        ) == stalls
    assert all(r["strategy"] != "act_offload" for r in explain(M, CL, W, ParallelConfig(**PLAN)))
