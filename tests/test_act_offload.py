"""Activation CPU offload (Megatron-Core --cpu-offloading-num-layers): memory, time, refusals, emit/parse, CLI."""
import json

import pytest

from costmodel import act_offload, offload
from costmodel.config import ParallelConfig
from costmodel.errors import SpecError
from costmodel.estimate import evaluate
from costmodel.fastpath import Scorer
from costmodel.memory import activation_bytes_per_layer
from costmodel.presets import load_cluster, load_model
from costmodel.specs import Workload
from planner import cli
from planner import megatron_args as mg
from planner.emit import megatron_args
from planner.framework_inputs import check_megatron_flags

M, CL, W = load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(8), Workload(global_batch=16, seq_len=8192)
PLAN = dict(tp=2, dp=4, sp=True, zero=1)
BASE = ["evaluate", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "16",
        "--seq", "8192", "--tp", "2", "--dp", "4", "--sp", "--zero", "1"]


def test_off_is_the_plan_without_it():
    c = ParallelConfig(**PLAN)
    assert c.activation_offload_layers == 0 and "activation_offload_layers" not in c.to_dict()
    assert "act_offload_exposed_s" not in evaluate(M, CL, W, c).breakdown


@pytest.mark.parametrize("n", [1, 8, 31])
def test_memory_drops_by_the_offloaded_layers_but_one(n):
    # one layer stays in flight (copied while the next computes / reloaded while the next runs backward)
    base, on = (evaluate(M, CL, W, ParallelConfig(**PLAN, activation_offload_layers=k)) for k in (0, n))
    layer = activation_bytes_per_layer(M, W, ParallelConfig(**PLAN))
    assert base.memory[0]["activations_bytes"] - on.memory[0]["activations_bytes"] == pytest.approx((n - 1) * layer)
    assert on.peak_memory_bytes < base.peak_memory_bytes or n == 1


@pytest.mark.parametrize("engine", ["analytic", "graph"])
def test_step_time_adds_the_exposed_copies(engine):
    n, base = 8, evaluate(M, CL, W, ParallelConfig(**PLAN), engine=engine)
    on = evaluate(M, CL, W, ParallelConfig(**PLAN, activation_offload_layers=n), engine=engine)
    layer = activation_bytes_per_layer(M, W, ParallelConfig(**PLAN))
    t = layer / offload.host_link_bytes_per_s(CL)  # one layer's copy, one way (H100: 51 GB/s)
    m = 4  # 16 sequences / dp 4 / mb 1
    exposed = on.breakdown["act_offload_exposed_s"]
    assert on.step_time_s - base.step_time_s == pytest.approx(exposed)
    assert 0 < exposed <= 2 * n * m * t  # never more than the copies themselves
    assert on.comm_link_s["act_offload"] == pytest.approx(2 * n * m * t)


def test_engines_and_fast_path_agree():
    c = ParallelConfig(**PLAN, activation_offload_layers=16)
    a, g = (evaluate(M, CL, W, c, engine=e) for e in ("analytic", "graph"))
    assert a.breakdown["act_offload_exposed_s"] == pytest.approx(g.breakdown["act_offload_exposed_s"], rel=0.02)
    s = Scorer(M, CL, W).score(c)
    assert s.step_time_s == pytest.approx(a.step_time_s, rel=1e-9)
    assert s.peak_memory_bytes == pytest.approx(a.peak_memory_bytes, rel=1e-9)


def test_exposed_is_the_copy_beyond_each_layers_compute():
    # hand arithmetic of act_offload.exposed_s: 2 layers x 3 micro-batches, a 10 ms copy each way,
    # hidden behind 4 ms of forward (6 ms exposed) and 12 ms of backward (none): 2 * 3 * 6 ms = 36 ms
    c = ParallelConfig(**PLAN, activation_offload_layers=2)
    nbytes = 0.010 * offload.host_link_bytes_per_s(CL)
    link, exposed = act_offload.exposed_s(c, CL, nbytes, 0.004, 0.012, 3)
    assert link == pytest.approx(2 * 2 * 3 * 0.010) and exposed == pytest.approx(0.036)


def test_a_device_without_a_known_host_link_is_refused():
    sg = load_cluster("sg2262-like").with_gpus(8)
    if offload.host_link_bytes_per_s(sg) > 0:
        pytest.fail("sg2262-like has a host link now: pick another device for this test")
    with pytest.raises(SpecError, match="device"):
        act_offload.exposed_s(ParallelConfig(**PLAN, activation_offload_layers=2), sg, 1e9, 0.0, 0.0, 1)


@pytest.mark.parametrize("kw, match", [
    (dict(pp=2, dp=2), "pipeline"),                    # transformer_config.py: no PP with CPU offloading
    (dict(recompute="full"), "recompute"),             # nor with activation recomputation
    (dict(recompute_modules=("core_attn",)), "recompute"),
    (dict(framework="fsdp2"), "framework=megatron"),
])
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
    for n in (0, 8):
        assert cli.main(BASE + ["--activation-offload-layers", str(n), "--json"]) == 0
        runs[n] = json.loads(capsys.readouterr().out)
    assert runs[8]["peak_memory_bytes"] < runs[0]["peak_memory_bytes"]
    assert runs[8]["step_time_s"] > runs[0]["step_time_s"]


@pytest.mark.parametrize("argv", [
    BASE + ["--activation-offload-layers", "-2"],
    BASE + ["--activation-offload-layers", "x"],
    BASE + ["--activation-offload-layers", "4", "--recompute", "full"],
    ["recommend"] + BASE[1:11] + ["--activation-offload-layers", "4"],
])
def test_bad_values_exit_2_with_one_line(capsys, argv):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "activation_offload_layers" in err
