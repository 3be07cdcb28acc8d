"""Details a reader of the output notices.

No output cites "source section N" (a document users do not have); reports show the sequence
parallelism in effect, not the flag given; text outputs name the engine their numbers come from;
``--robust`` says "proven optimal" in words; ``--emit``'s help lists every format; sweep plots label
spec files by name, not path; the Gantt legend sits outside the axes, so it covers no lane; the
co-design caption mentions dotted lines only when some are drawn; no two slices on one Chrome-trace lane
overlap (DP buckets in flight on several engines get one lane each).
"""

import io
import re

import pytest

from costmodel.engines.graph.trace import gantt_figure, timeline
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner import cli, evaluate
from planner.report import estimate_text
from planner.sweep import plots

SMALL = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]
LLAMA = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "16", "--global-batch", "64", "--seq", "4096"]
PROBLEM = ["--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]
DP8 = (
    load_model("llama3-8b"),
    load_cluster("h100-sxm").with_gpus(8),
    Workload(global_batch=64, seq_len=4096),
    ParallelConfig(tp=1, dp=8, mb=1),
)


def run(capsys, argv):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- text
@pytest.mark.parametrize(
    "argv",
    [["explain", *SMALL, "--tp", "8"], ["explain", *SMALL, "--tp", "2", "--sp"], ["evaluate", *SMALL, "--tp", "8"]],
)
def test_no_output_cites_the_source_document(capsys, argv):
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert not re.search(r"section \d", out + err), out
    if argv[0] == "explain":  # the TP feasibility rule, in words
        assert re.search(r"feasibility \((tp|sp)\): one AllReduce of the layer output", out), out
        assert "GEMMs it can run beside" in out or "GEMMs it could run beside" in out


def test_reports_show_the_effective_sequence_parallelism(capsys):
    e = evaluate("llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096, sp=True)  # tp=1: sp has no effect
    text = estimate_text(
        e, load_model("llama3-8b"), load_cluster("h100-sxm").with_gpus(8), Workload(global_batch=64, seq_len=4096)
    )
    assert " sp=off " in text and "sp=on" not in text
    code, out, _ = run(capsys, ["evaluate", *SMALL, "--tp", "2", "--sp"])
    assert code == 0 and " sp=on " in out


def test_text_outputs_name_the_engine(capsys):
    _, out, _ = run(capsys, ["recommend", *LLAMA])
    assert "step time s (op graph)" in out and "MFU % (op graph)" in out and "engine: " in out
    _, out, _ = run(capsys, ["evaluate", *LLAMA, "--tp", "2"])
    assert "(op graph engine)" in out


def test_robust_says_proven_optimal_in_words(capsys):
    code, out, _ = run(capsys, ["recommend", "--model", "llama3-8b", *PROBLEM, "--robust", "--tp", "8"])
    assert code == 0 and "proven True" not in out and "proven False" not in out
    assert "proven optimal over the scenarios" in out


def test_emit_help_lists_every_format(capsys):
    for cmd in ("evaluate", "recommend"):
        code, out, _ = run(capsys, [cmd, "--help"])
        emit = out[out.index("\n  --emit") + 1 :]  # the option's help, not the usage line
        emit = emit[: emit.index("\n  --")] if "\n  --" in emit else emit
        assert code == 0 and all(f in emit for f in ("megatron", "deepspeed", "fsdp2", "torchtitan")), emit


# --------------------------------------------------------------------------- traces and plots
@pytest.mark.parametrize(
    "model,cluster,workload,config",
    [
        DP8,
        (
            load_model("gpt3-175b"),
            load_cluster("a100-80g").with_gpus(64),
            Workload(global_batch=64, seq_len=2048),
            ParallelConfig(tp=8, pp=4, dp=2, mb=1),
        ),
    ],
)
def test_no_two_slices_on_one_trace_lane_overlap(model, cluster, workload, config):
    tl = timeline(model, cluster, workload, config)
    lanes: dict = {}
    for e in tl["events"]:
        lanes.setdefault(e["lane"], []).append((e["start_s"], e["start_s"] + e["dur_s"], e["name"]))
    assert any(lane.startswith("nccl-sm/dp#dp") for lane in lanes)  # the dp stream's pool (costmodel.physics.comm.dma)
    for lane, spans in lanes.items():
        spans.sort()
        for (_, end0, a), (start1, _, b) in zip(spans, spans[1:]):
            assert start1 >= end0 - 1e-12 * max(1.0, end0), (lane, a, b)


def test_gantt_legend_is_outside_the_axes():
    fig = gantt_figure(*DP8)
    fig.savefig(io.BytesIO(), format="png")  # lay it out
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert legend is not None
    box, axes_box = legend.get_window_extent(), ax.get_window_extent()
    assert box.x0 >= axes_box.x1  # right of the plotting area: it hides no slice


def _curve(hidden):
    return plots.CodesignCurve(
        knob="nic_gbps",
        unit="GB/s",
        values=[25.0, 50.0, 100.0],
        compute_s=[1.0, 1.0, 1.0],
        link_s={"dp": [2.0, 1.0, 0.5]},
        exposed_s={"dp": [1.0, 0.4, 0.0]},
        critical={"dp": 50.0},
        hidden=hidden,
    )


@pytest.mark.parametrize("hidden,dotted", [({"dp": None}, False), ({"dp": 100.0}, True)])
def test_codesign_caption_mentions_dotted_lines_only_when_drawn(monkeypatch, tmp_path, hidden, dotted):
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, out_dir, stem: figures.append(fig) or [])
    plots.plot_codesign([_curve(hidden)], tmp_path, "c")
    ax = figures[0].axes[1]
    drawn = any(line.get_linestyle() == ":" for line in ax.get_lines())
    assert drawn is dotted
    assert ("dotted" in ax.get_title()) is dotted


def test_sweep_plots_label_spec_files_by_name_not_path(tmp_path):
    pytest.importorskip("matplotlib")
    from planner.sweep.grid import AXES_COLUMNS
    from planner.sweep.plots import plot_scaling, plot_tp_pp

    model = "/data/configs/deep/folder/my-model.json"
    recs = [
        {
            **dict.fromkeys(AXES_COLUMNS),
            "model": model,
            "cluster": "h100-sxm",
            "gpus": g,
            "status": "ok",
            "model_params": 8e9,
            "mfu": 0.4,
            "step_time_s": 1.0 / g,
            "tp": 1,
            "pp": 1,
        }
        for g in (8, 16)
    ]
    for plot in (plot_scaling, plot_tp_pp):
        svg = next(p for p in plot(recs, tmp_path) if p.suffix == ".svg").read_text()
        assert "my-model" in svg and "/data/configs" not in svg and "folder" not in svg
