"""Optimizer CPU offload at the planner's edges: its command-line flags, --emit megatron and the Megatron-line parser."""

import argparse

import pytest

from costmodel.spec.plan import ParallelConfig
from costmodel.spec.errors import SpecError
from planner import cli
from planner import megatron_args as mg
from planner.emit import megatron_args
from planner.inputs.megatron import check_megatron_flags

# the flags as Megatron-LM d98e8a64 declares them (megatron/training/arguments.py, _add_training_args and the
# precision-aware optimizer group): store_true, type=float default 1.0, store_true, store_true
MEGATRON = {
    "--use-distributed-optimizer": dict(action="store_true"),
    "--use-precision-aware-optimizer": dict(action="store_true"),
    "--optimizer-cpu-offload": dict(action="store_true"),
    "--optimizer-offload-fraction": dict(type=float, default=1.0),
    "--overlap-cpu-optimizer-d2h-h2d": dict(action="store_true"),
}
PLAN = dict(tp=8, zero=1, recompute="full")
BASE = [
    "evaluate",
    "--model",
    "llama3-70b",
    "--cluster",
    "h100-sxm",
    "--gpus",
    "8",
    "--global-batch",
    "16",
    "--seq",
    "4096",
    "--tp",
    "8",
    "--zero",
    "1",
    "--recompute",
    "full",
]


@pytest.mark.parametrize("frac, overlap", [(1.0, False), (0.25, True)])
def test_emitted_flags_parse_as_megatron_declares_them_and_round_trip(frac, overlap):
    c = ParallelConfig(**PLAN, optimizer_offload_fraction=frac, overlap_cpu_optimizer_d2h_h2d=overlap)
    argv = [t for a in megatron_args(c, global_batch=16, layers=80) for t in a]
    check_megatron_flags(argv)  # every flag is one of Megatron-LM d98e8a64 and none is refused
    p = argparse.ArgumentParser()
    for k, spec in MEGATRON.items():
        p.add_argument(k, **spec)
    got, _ = p.parse_known_args(argv)
    assert got.use_distributed_optimizer and got.use_precision_aware_optimizer and got.optimizer_cpu_offload
    assert got.optimizer_offload_fraction == frac and got.overlap_cpu_optimizer_d2h_h2d == overlap
    f = mg.config_fields(mg.parse_command_line(" ".join(argv)))
    assert f["optimizer_offload_fraction"] == frac
    assert f.get("overlap_cpu_optimizer_d2h_h2d", False) == overlap


def test_no_offload_emits_no_offload_flags():
    argv = [t for a in megatron_args(ParallelConfig(**PLAN), global_batch=16, layers=80) for t in a]
    assert not {"--optimizer-cpu-offload", "--use-precision-aware-optimizer"} & set(argv)


def test_parser_reads_megatron_defaults_and_refusals():
    read = lambda line: mg.config_fields(mg.parse_command_line(line))  # noqa: E731
    on = "--use-distributed-optimizer --use-precision-aware-optimizer --optimizer-cpu-offload"
    assert read(on)["optimizer_offload_fraction"] == 1.0  # arguments.py default
    assert "optimizer_offload_fraction" not in read("--use-distributed-optimizer --optimizer-offload-fraction 0.5")
    with pytest.raises(SpecError, match="use_precision_aware_optimizer"):  # Megatron asserts it
        read("--use-distributed-optimizer --optimizer-cpu-offload")
    with pytest.raises(SpecError, match="optimizer_offload_fraction"):
        read(on + " --optimizer-offload-fraction 2")


def test_evaluate_charges_it(capsys):
    import json

    runs = {}
    for extra in ([], ["--optimizer-offload-fraction", "1"]):
        assert cli.main(BASE + extra + ["--json"]) == 0
        runs[bool(extra)] = json.loads(capsys.readouterr().out)
    assert not runs[False]["fits"] and runs[True]["fits"]
    assert runs[True]["peak_memory_bytes"] < runs[False]["peak_memory_bytes"]
    assert runs[True]["step_time_s"] > runs[False]["step_time_s"]


def test_recommend_takes_a_stated_fraction_as_a_plan_option():
    # a stated 0 is no offload; a stated fraction (and the overlap) is an option every plan of the search runs
    from planner.flags import plan_options

    ns = argparse.Namespace(optimizer_offload_fraction=0.0, overlap_cpu_optimizer_d2h_h2d=None)
    assert dict(plan_options(ns)).get("optimizer_offload_fraction") is None
    opts = dict(plan_options(argparse.Namespace(optimizer_offload_fraction=0.5, overlap_cpu_optimizer_d2h_h2d=True)))
    assert opts["optimizer_offload_fraction"] == 0.5 and opts["overlap_cpu_optimizer_d2h_h2d"] is True


@pytest.mark.parametrize(
    "argv, field",
    [
        (BASE + ["--optimizer-offload-fraction", "1.5"], "optimizer_offload_fraction"),
        (BASE + ["--optimizer-offload-fraction", "half"], "optimizer_offload_fraction"),
        (BASE[:-4] + ["--zero", "0", "--optimizer-offload-fraction", "1"], "optimizer_offload_fraction"),
        (BASE + ["--overlap-cpu-optimizer-d2h-h2d"], "overlap_cpu_optimizer_d2h_h2d"),
        (["recommend"] + BASE[1:11] + ["--optimizer-offload-fraction", "1", "--zero", "3"], "zero"),
        (["recommend"] + BASE[1:11] + ["--overlap-cpu-optimizer-d2h-h2d"], "overlap_cpu_optimizer_d2h_h2d"),
        (
            ["recommend"] + BASE[1:11] + ["--optimizer-offload-fraction", "1", "--optimizer-dtype", "bf16"],
            "optimizer_offload_fraction",
        ),
    ],
)
def test_bad_values_exit_2_with_one_line(capsys, argv, field):
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and field in err


def test_free_recommend_reports_and_emits_the_fraction_it_chose(capsys):
    # Llama-3-70B on 8 H100 fits no plan without offload: recommend chooses it (search.offload_choice)
    rec = ["recommend"] + BASE[1:11]
    assert cli.main(rec) == 0
    out = capsys.readouterr().out
    assert "optimizer CPU offload: no plan fits without it" in out and "optimizer_offload_fraction=1.0" in out
    assert cli.main(rec + ["--emit", "megatron"]) == 0
    text = capsys.readouterr().out
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("note:")]
    argv = " ".join(ln.rstrip(" \\") for ln in lines).split()
    for flag in ("--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d"):
        assert flag in argv
    assert argv[argv.index("--optimizer-offload-fraction") + 1] == "1.0"
    flags = [t for t in argv if t.startswith("--")]
    check_megatron_flags(flags)  # Megatron-LM's parser data (planner/data/megatron_arguments_*.txt)
    f = mg.config_fields(mg.parse_command_line(" ".join(argv)))
    assert f["optimizer_offload_fraction"] == 1.0 and f["overlap_cpu_optimizer_d2h_h2d"] is True
