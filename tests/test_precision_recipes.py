"""Low-precision training recipes (issue 39): accepted on Blackwell, refused in one line where the GPU lacks
them, their memory from their block sizes, their GEMM speed from the measured tables, their Megatron flags."""

import argparse
import math
import shlex
from dataclasses import replace

import pytest

from costmodel.physics.kernels.gemm import gemm_time_s, recipe_rate_factor
from costmodel.physics.kernels.measured import SUSTAINED_CLOCK, table_gemm
from costmodel.physics.memory.activations import saved_input_bytes
from costmodel.physics.memory.stage_memory import stage_memory, weight_copy_bytes
from costmodel.physics.tables import gemm_lookup
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.precision import RECIPE_NAMES, check_supported, quantized_bytes
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner import megatron_args as mg
from planner.cli import main
from planner.emit import megatron_args

LOW = ("fp8", "fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4")
EVAL = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]
PINS = ["--tp", "1", "--pp", "1", "--mb", "1", "--zero", "1", "--recompute", "full", "--bucket-mb", "40"]


def test_fp8_keeps_its_meaning():
    w = Workload(global_batch=8, seq_len=4096, dtype="fp8")
    assert (w.dtype, w.recipe) == ("fp8", "fp8")
    m = Workload(global_batch=8, seq_len=4096, dtype="mxfp8")
    assert (m.dtype, m.recipe) == ("fp8", "mxfp8")
    assert replace(m, dtype="bf16").recipe == "bf16"


@pytest.mark.parametrize("dtype", ["mxfp8", "nvfp4"])
def test_blackwell_recipes_accepted_on_b200(dtype, capsys):
    rc = main(EVAL + ["--cluster", "b200", "--dtype", dtype, *PINS, "--emit", "megatron"])
    out = capsys.readouterr().out
    assert rc == 0
    t = shlex.split(out.replace("\\\n", " "))
    if dtype == "mxfp8":
        assert t[t.index("--fp8-recipe") + 1] == "mxfp8" and t[t.index("--fp8-format") + 1] == "e4m3"
    else:
        assert t[t.index("--fp4-format") + 1] == "e2m1" and t[t.index("--fp4-recipe") + 1] == "nvfp4"
        assert "--fp8-format" not in t  # arguments.py refuses both


@pytest.mark.parametrize("dtype", ["mxfp8", "nvfp4"])
def test_blackwell_recipes_refused_in_one_line_on_h100(dtype, capsys):
    rc = main(EVAL + ["--cluster", "h100-sxm", "--dtype", dtype, *PINS])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1
    assert f"dtype='{dtype}'" in err and "fp8-blockwise" in err and "blackwell" in err and "H100" in err


def test_refusals_by_generation():
    for name in RECIPE_NAMES:
        check_supported(name, "B200")
        check_supported(name, "GB300")
    for name in ("mxfp8", "nvfp4"):
        with pytest.raises(SpecError):
            check_supported(name, "H100-SXM5-80GB")
    for name in ("fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4"):
        with pytest.raises(SpecError, match="A100"):
            check_supported(name, "A100-SXM4-80GB")
    check_supported("fp8-blockwise", "H800-SXM5-80GB")


def _up(x, m):
    return math.ceil(x / m) * m


def test_scale_bytes_from_block_sizes():
    r, c = 8192, 3072
    n = r * c
    # MXFP8: one E8M0 byte per 32 elements, row-wise [roundup(r,128), roundup(c/32,4)] and column-wise
    # [roundup(r/32,4), roundup(c,128)] (TE mxfp8_tensor.get_scale_shape)
    mx = 2 * n + _up(r, 128) * _up(c // 32, 4) + _up(r // 32, 4) * _up(c, 128)
    assert quantized_bytes("mxfp8", r, c) == mx
    # NVFP4: half a byte per element, an E4M3 byte per 16, an FP32 amax per usage
    nv = 2 * (n / 2) + _up(r, 128) * _up(c // 16, 4) + _up(c, 128) * _up(r // 16, 4) + 2 * 4
    assert quantized_bytes("nvfp4", r, c) == nv
    # FP8 blockwise: FP32 per 128x128 weight block (both copies), per 1x128 activation block
    assert quantized_bytes("fp8-blockwise", r, c) == 2 * n + 2 * 4 * (r // 128) * (c // 128)
    assert quantized_bytes("fp8-blockwise", r, c, weight=False, usages=1) == n + 4 * r * (c // 128)
    assert quantized_bytes("fp8", r, c) == 2 * n + 2 * 12
    assert quantized_bytes("bf16", r, c) == 0


def test_memory_ordering_per_recipe():
    sizes = {d: quantized_bytes(d, 8192, 8192) for d in LOW}
    assert sizes["nvfp4"] < sizes["fp8"] == sizes["fp8-tensorwise"] < sizes["fp8-blockwise"] < sizes["mxfp8"]
    ws = {d: Workload(global_batch=64, seq_len=4096, dtype=d) for d in ("bf16", *LOW)}
    assert weight_copy_bytes(ws["fp8"]) == 2  # unchanged
    assert weight_copy_bytes(ws["mxfp8"]) == 2 * (1 + 1 / 32)
    assert weight_copy_bytes(ws["nvfp4"]) == 2 * (0.5 + 1 / 16)
    c = ParallelConfig(tp=1, pp=1, dp=8, zero=1)
    assert saved_input_bytes(ws["mxfp8"], c) == 1 + 1 / 32 and saved_input_bytes(ws["fp8"], c) == 1
    m = load_model("llama3-8b")
    peak = {d: stage_memory(m, ws[d], c, 0) for d in ws}
    tot = {d: peak[d].weights_bytes + peak[d].activations_bytes for d in ws}
    assert tot["nvfp4"] < tot["fp8"] == tot["fp8-tensorwise"] < tot["fp8-blockwise"] < tot["mxfp8"]
    assert peak["fp8"].grads_bytes == peak["mxfp8"].grads_bytes == peak["bf16"].grads_bytes  # FP32 master state
    assert peak["fp8"].optimizer_bytes == peak["nvfp4"].optimizer_bytes == peak["bf16"].optimizer_bytes


def test_gemm_time_ratio_from_the_tables():
    dev = replace(load_cluster("b200").device, kernel_table="trtllm")
    m = n = k = 8192
    for dtype, table in (("nvfp4", "nvfp4"), ("fp8-blockwise", "fp8_block"), ("fp8", "fp8")):
        want = (
            gemm_lookup("b200_sxm", table, m, n, k, "trtllm")[0] / gemm_lookup("b200_sxm", "bf16", m, n, k, "trtllm")[0]
        )
        t, ev = table_gemm(m, n, k, dev, dtype)
        assert t == pytest.approx(gemm_lookup("b200_sxm", table, m, n, k, "trtllm")[0] / SUSTAINED_CLOCK["blackwell"])
        assert gemm_time_s(m, n, k, dev, dtype) / gemm_time_s(m, n, k, dev, "bf16") == pytest.approx(want)
    assert gemm_time_s(m, n, k, dev, "nvfp4") < gemm_time_s(m, n, k, dev, "fp8") < gemm_time_s(m, n, k, dev, "bf16")
    assert table_gemm(m, n, k, dev, "mxfp8")[1].kind == "assumed"  # the fp8 table stands in


def test_fitted_rate_assumption_stated():
    fitted = load_cluster("b200").device
    assert recipe_rate_factor(fitted, "nvfp4") == pytest.approx(1.66)
    r = gemm_time_s(8192, 8192, 8192, fitted, "fp8") / gemm_time_s(8192, 8192, 8192, fitted, "nvfp4")
    assert 1.5 < r < 1.7
    assert gemm_time_s(8192, 8192, 8192, fitted, "fp8") == gemm_time_s(8192, 8192, 8192, fitted, "mxfp8")


# transformer_config.py at Megatron-LM d98e8a64: the Literal choices argparse gets
MEGATRON = {
    "--fp8-format": dict(choices=["e4m3", "hybrid"]),
    "--fp8-recipe": dict(choices=["tensorwise", "delayed", "mxfp8", "blockwise", "custom"], default="delayed"),
    "--fp4-format": dict(choices=["e2m1"]),
    "--fp4-recipe": dict(choices=["nvfp4", "custom"], default="nvfp4"),
    "--fp8-param-gather": dict(action="store_true"),
    "--fp4-param-gather": dict(action="store_true"),
    "--bf16": dict(action="store_true"),
    "--fp16": dict(action="store_true"),
}


@pytest.mark.parametrize("dtype", ["bf16", *LOW])
@pytest.mark.parametrize("gather", [False, True])
def test_emitted_flags_parse(dtype, gather):
    c = ParallelConfig(tp=1, pp=1, dp=8, zero=1, fp8_param_gather=gather and dtype != "bf16")
    args = megatron_args(c, 64, 32, dtype)
    tokens = [t for a in args for t in a]
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for name, spec in MEGATRON.items():
        p.add_argument(name, **spec)
    ns, _ = p.parse_known_args(tokens)
    assert not (ns.fp8_format and ns.fp4_format)  # arguments.py: cannot be used simultaneously
    if ns.fp4_param_gather:
        assert ns.fp4_format
    assert mg.workload_fields(mg.parse_command_line(shlex.join(tokens)))["dtype"] == dtype
    if dtype == "fp8":  # unchanged from before issue 39
        assert [a for a in args if a[0] in ("--bf16", "--fp8-format", "--fp8-recipe")] == [
            ["--bf16"],
            ["--fp8-format", "hybrid"],
        ]


def test_recommend_states_each_recipe_and_picks_the_fastest(capsys):
    rc = main(
        ["recommend", "--model", "llama3-8b", "--cluster", "b200", "--gpus", "8", "--global-batch", "64"]
        + ["--seq", "4096", "--dtype", "bf16,nvfp4"]
    )
    out = capsys.readouterr().out
    assert rc == 0
    line = [ln for ln in out.splitlines() if ln.startswith("precision: ")][0]
    t = {p.split()[0]: float(p.split()[1]) for p in line[len("precision: ") :].split(" (")[0].split("; ")}
    assert t["nvfp4"] < t["bf16"] and "chosen: nvfp4" in line
    assert out.splitlines()[0].endswith("nvfp4")


def test_a_recipe_list_is_refused_where_one_is_not_run(capsys):
    rc = main(EVAL[:0] + ["recommend", *EVAL[1:], "--cluster", "h100-sxm", "--dtype", "fp8,mxfp8"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "mxfp8" in err
    assert main(EVAL + ["--cluster", "b200", "--dtype", "auto", *PINS]) == 2  # evaluate times one recipe
