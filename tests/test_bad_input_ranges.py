"""Absurd but finite cluster numbers, a string where a list belongs, and the "no plan" line of ``recommend``.

Each cluster case was accepted: a link latency of 1e30 s priced a step of 6e30 s, an HBM bandwidth of 1e-300 GB/s
was an OverflowError traceback, a bandwidth or peak of 1e300 a numpy overflow warning or nonsense; a
``calibrated_constants`` of ``"x"`` was read as the constant ``'x'``. Now each exits 2 with one line naming the
field, the value and the allowed range (:data:`costmodel.spec.bounds.RANGES`). The "no plan" explanation ran to
~500 characters on one line; it is now the binding reason and the smallest change in at most 200
(:mod:`planner.no_plan_line`).
"""

import json
import warnings

import pytest

from costmodel.spec.bounds import RANGES
from costmodel.spec.presets import cluster_from_dict, preset_info, preset_names
from planner import cli
from planner.no_plan_line import NO_PLAN_CHARS, no_plan_line
from tests.test_cli_bad_input_sweep import _cluster  # the h100-sxm preset with one key path set

EVALUATE = ["evaluate", "--model", "llama3-8b", "--cluster", "{cluster}", "--gpus", "16", "--global-batch", "64"]
EVALUATE += ["--seq", "2048", "--tp", "8"]


# (id, key path, value, field the error names, the range it states)
RANGE_CASES = [
    ("latency_huge", "inter_link.latency_us", 1e36, "inter_link.latency_us", "[0, 1e+06] us"),
    ("latency_negative", "intra_link.latency_us", -1.0, "intra_link.latency_us", "non-negative"),
    ("intra_bw_tiny", "intra_link.bw_gbps", 1e-30, "intra_link.bw_gbps", "[0.001, 1e+09] GB/s"),
    ("inter_bw_huge", "inter_link.bw_gbps", 1e300, "inter_link.bw_gbps", "[0.001, 1e+09] GB/s"),
    ("nvls_tree_bw_huge", "intra_link.nvls_tree_channel_bw_gbps", 1e300, "nvls_tree_channel_bw_gbps", "0 (none) or"),
    ("nvls_tree_2node_tiny", "intra_link.nvls_tree_2node_channel_bw_gbps", 1e-9, "nvls_tree_2node", "GB/s"),
    ("hbm_huge", "device.hbm_gib", 1e40, "device.hbm_gib", "16,384 GiB"),
    ("hbm_bw_tiny", "device.hbm_bw_gbps", 1e-300, "device.hbm_bw_gbps", "[0.001, 1e+09] GB/s"),
    ("hbm_bw_huge", "device.hbm_bw_gbps", 1e300, "device.hbm_bw_gbps", "1e+18 B/s"),
    ("peak_bf16_huge", "device.peak_bf16_tflops", 1e300, "device.peak_bf16_tflops", "[0.001, 1e+06] TFLOP/s"),
    ("peak_bf16_tiny", "device.peak_bf16_tflops", 1e-300, "device.peak_bf16_tflops", "1e+09 to 1e+18 FLOP/s"),
    ("peak_fp8_huge", "device.peak_fp8_tflops", 1e300, "device.peak_fp8_tflops", "0 (none) or"),
    ("kernel_overhead_huge", "device.kernel_overhead_us", 1e30, "device.kernel_overhead_us", "0 to 1 s"),
    ("dma_bw_huge", "device.dma_engines.0.bw_gbps", 1e300, "nccl-sm.bw_gbps", "0 (none) or"),
    ("dma_bw_tiny", "device.dma_engines.0.bw_gbps", 1e-300, "nccl-sm.bw_gbps", "GB/s"),
    ("sm_count_huge", "device.sm_count", 10**9, "device.sm_count", "at most 100,000"),
    ("gpus_per_node_huge", "gpus_per_node", 10**6, "cluster.gpus_per_node", "at most 1,024"),
    ("gpus_per_node_float", "gpus_per_node", 8.5, "cluster.gpus_per_node", "positive integer"),
]

# (id, top-level key, value, field the error names)
LIST_CASES = [
    ("calibrated_constants_string", "calibrated_constants", "x", "cluster.calibrated_constants"),
    ("calibrated_constants_numbers", "calibrated_constants", [1, 2], "cluster.calibrated_constants"),
    ("calibrated_constants_object", "calibrated_constants", {"gemm_efficiency": 1}, "cluster.calibrated_constants"),
    ("calibrated_constants_unknown", "calibrated_constants", ["gemm_eficiency"], "cluster.calibrated_constants"),
    ("log_residuals_string", "calibration_log_residuals", "1", "cluster.calibration_log_residuals"),
    ("log_residuals_text", "calibration_log_residuals", ["x"], "cluster.calibration_log_residuals"),
    ("calibrated_fitted_string", "calibrated", {"fitted": "x"}, "cluster.calibrated.fitted"),
    ("calibrated_fitted_unknown", "calibrated", {"fitted": ["bogus"]}, "cluster.calibrated_constants='bogus'"),
    ("log_residuals_inf", "calibration_log_residuals", [float("inf")], "cluster.calibration_log_residuals"),
    (
        "calibrated_residuals_inf",
        "calibrated",
        {"fitted": ["gemm_efficiency"], "loo_log_residuals": [float("inf")]},
        "cluster.calibrated.loo_log_residuals",
    ),
]


def assert_one_line_error(code, out, err, *needles):
    assert code == 2, (code, err)
    assert out == ""
    assert "Traceback" not in err and "warning" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("planner: error: "), lines[0]
    assert ": must be " in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert len(lines[0]) <= 300, lines[0]


def _evaluate(capsys, tmp_path, doc: dict):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy overflow warning fails the test
        code = cli.main([a.replace("{cluster}", str(path)) for a in EVALUATE])
    return (code, *capsys.readouterr())


@pytest.mark.parametrize("path, value, field, allowed", [c[1:] for c in RANGE_CASES], ids=[c[0] for c in RANGE_CASES])
def test_absurd_cluster_number_exits_2_naming_field_and_range(capsys, tmp_path, path, value, field, allowed):
    code, out, err = _evaluate(capsys, tmp_path, _cluster(path, value))
    assert_one_line_error(code, out, err, field, allowed, repr(value))


@pytest.mark.parametrize("key, value, field", [c[1:] for c in LIST_CASES], ids=[c[0] for c in LIST_CASES])
def test_calibration_list_fields_refuse_non_lists(capsys, tmp_path, key, value, field):
    code, out, err = _evaluate(capsys, tmp_path, {**preset_info("clusters", "h100-sxm"), key: value})
    assert_one_line_error(code, out, err, field)


def test_calibrated_cluster_file_still_loads():
    doc = {
        **preset_info("clusters", "h100-sxm"),
        "calibrated": {"fitted": ["gemm_efficiency"], "loo_log_residuals": [0.1]},
    }
    c = cluster_from_dict(doc)
    assert c.calibrated_constants == ("gemm_efficiency",) and c.calibration_log_residuals == (0.1,)


@pytest.mark.parametrize("name", preset_names("clusters"))
def test_every_preset_sits_inside_the_ranges(name):
    """The ranges are generous: each shipped preset is at least 100x inside every bound it has a value for."""
    c = cluster_from_dict(preset_info("clusters", name))
    parts = {"device": c.device, "intra_link": c.intra_link, "inter_link": c.inter_link}
    parts.update({f"dma.{e.name}": e for e in c.device.dma_engines})
    for where, spec in parts.items():
        for field, (lo, hi, zero_ok, *_) in RANGES.items():
            v = getattr(spec, field, None)
            if v is None or (v == 0 and (zero_ok or where.startswith("dma."))):  # 0: none / the link's own
                continue
            assert lo * 100 <= v or lo == 0, (name, where, field, v)
            assert v * 100 <= hi, (name, where, field, v)


@pytest.mark.parametrize("edge", ["floor", "ceiling"])
def test_values_at_the_bounds_run_without_overflow(capsys, tmp_path, edge):
    """A cluster at the edge of every range is priced without a warning (the bounds sit below overflow)."""
    doc = json.loads(json.dumps(preset_info("clusters", "h100-sxm")))
    rate, gb = (1e-3, 1e-3) if edge == "floor" else (1e6, 1e9)
    doc["device"].update(peak_bf16_tflops=rate, peak_fp8_tflops=rate, hbm_bw_gbps=gb, kernel_overhead_us=1e6)
    for link in ("intra_link", "inter_link"):
        doc[link].update(bw_gbps=gb, latency_us=1e6)
    doc["intra_link"].update(nvls_tree_channel_bw_gbps=gb, nvls_tree_2node_channel_bw_gbps=gb)
    doc["device"]["dma_engines"][0]["bw_gbps"] = gb
    path = tmp_path / "edge.json"
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = cli.main([a.replace("{cluster}", str(path)) for a in EVALUATE])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "step time" in out and "warning" not in err


# --------------------------------------------------------------------------- the "no plan" line
INFEASIBLE = [
    # a 405B model on 8 GPUs of 40 GiB: was 464 characters (the leanest plan, two offload notes, two changes)
    ["--model", "llama3.1-405b", "--cluster", "a100-40g", "--gpus", "8", "--global-batch", "64", "--seq", "2048"],
    # pinned degrees that leave no plan in memory: was 460 characters
    ["--model", "llama3-70b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "8192"]
    + ["--tp", "2", "--pp", "1"],
]


@pytest.mark.parametrize("argv", INFEASIBLE, ids=["405b_on_8_a100_40g", "70b_pinned_tp2_pp1"])
def test_no_plan_line_is_short_and_names_reason_and_change(capsys, argv):
    code = cli.main(["recommend", *argv, "--time-limit", "5"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert line.startswith("planner: error: problem=infeasible: no plan fits in memory: "), line
    assert "GiB per GPU" in line and "usable" in line, line  # the binding reason, with its numbers
    assert "smallest changes: " in line, line  # and the smallest change
    assert len(line) <= len("planner: error: ") + NO_PLAN_CHARS, (len(line), line)


def test_pinned_tp_not_dividing_heads_is_one_short_line(capsys):
    code = cli.main(["recommend", "--model", "llama3-8b", *INFEASIBLE[0][2:], "--tp", "3"])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, "tp=3", "heads=32")


def test_no_plan_line_keeps_reason_first_and_drops_detail_last():
    why = (
        "no plan fits in memory: the leanest (tp=8 pp=1 dp=1 cp=1 ep=1 mb=1 zero=0 recompute=full) needs 852.5 GiB per"
        " GPU, 40.0 GiB usable; activation CPU offload (Megatron --cpu-offloading-num-layers, up to 125 layers, pp = 1"
        " without recompute) does not make a plan fit either. Optimizer CPU offload (fraction 0.5, 1) does not make a"
        " plan fit either."
    )
    changes = ["--gpus 192 (more GPUs: +184)", "HBM >= 852.5 GiB per GPU (have 40.0)", "--global-batch 8"]
    line = no_plan_line("problem=infeasible", why, changes)
    assert len(line) <= NO_PLAN_CHARS and "\n" not in line
    assert line.startswith("problem=infeasible: no plan fits in memory: the leanest plan needs 852.5 GiB per GPU")
    assert "smallest changes: --gpus 192" in line and line.endswith("(details: --json)")
    # a short explanation is kept whole, offload notes summarised
    short = no_plan_line(
        "problem=infeasible",
        "no plan fits in memory: x. Optimizer CPU offload (fraction 1) does not make a plan fit either.",
        ["--gpus 16"],
    )
    assert short == (
        "problem=infeasible: no plan fits in memory: x; optimizer CPU offload does not help either; "
        "smallest changes: --gpus 16"
    )
    # one endless clause is clipped, never longer than the cap
    assert len(no_plan_line("problem=infeasible", "y" * 1000)) <= NO_PLAN_CHARS


@pytest.mark.parametrize("path", ["device.gemm_efficiency", "device.mem_bw_efficiency", "intra_link.efficiency"])
def test_an_efficiency_below_one_percent_exits_2(capsys, tmp_path, path):
    code, out, err = _evaluate(capsys, tmp_path, _cluster(path, 1e-300))
    assert_one_line_error(code, out, err, path.split(".")[-1], "[0.01, 1]")


@pytest.mark.parametrize("value", [0.1, 0.99])
def test_an_efficiency_outside_the_calibration_bounds_is_priced(capsys, tmp_path, value):
    """GEMM efficiency 0.1 or 0.99 is outside the calibration's bounds [0.3, 0.95]: the band's sensitivity was taken
    at steps the calibration refuses ('gemm_efficiency=0.11: must be within its bounds'); now at the nearest bound."""
    code, out, err = _evaluate(capsys, tmp_path, _cluster("device.gemm_efficiency", value))
    assert code == 0, err
    assert "step time" in out and err == ""


@pytest.mark.parametrize(
    "flag, value, field",
    [("--nic-gbps", "1e300", "nic_gbps"), ("--nvlink-gbps", "1e-9", "nvlink_gbps"), ("--hbm-gib", "1e9", "hbm_gib")],
)
def test_sweep_whatifs_outside_the_cluster_bounds_exit_2(capsys, tmp_path, flag, value, field):
    """A what-if is refused at the grid as the same number in a cluster file is (it was a per-case error naming the
    internal field: 'bw_bytes_per_s=inf')."""
    argv = ["sweep", "--models", "gpt3-175b", "--clusters", "a100-80g", "--gpus", "64", "--global-batch", "64"]
    code = cli.main(argv + ["--seq", "2048", flag, value, "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, f"{field}=", "a sanity bound")
