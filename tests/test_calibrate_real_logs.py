"""`calibrate` on real Megatron-LM text (issue 24, items 2-4).

The dumps under ``benchmarks/data/components/megatron_dumps/`` are what Megatron-LM d98e8a64's own
``parse_args`` + ``validate_args`` printed on CPU (``benchmarks/megatron_dumps.py``; their command
lines are in ``dumps.csv`` there). The iteration lines appended here have the format of
``megatron/training/training.py`` ``training_log`` at that commit; their times are the test's.
"""

import re
from pathlib import Path

import pytest

from costmodel.trust import calibration as calib
from costmodel.trust.calibration import MeasuredRun, fit
from costmodel.trust.calibration_constants import CalibrationError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.errors import SpecError
from costmodel.spec.workload import Workload
from planner import megatron_args as mg
from planner.cli import main
from planner.runs import read_table, run_from_log

DUMPS = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "components" / "megatron_dumps"


def iteration_lines(times_ms, global_batch):
    return "".join(
        f" [2026-08-22 10:00:{i:02d}.000000] iteration {i:8d}/     100 | consumed samples: {i * global_batch:12d} |"
        f" elapsed time per iteration (ms): {t:.1f} | throughput per GPU (TFLOP/s/GPU): 400.0 |"
        f" learning rate: 3.000000E-04 | global batch size: {global_batch:5d} | lm loss: 2.000000E+00 |"
        f" loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
        for i, t in enumerate(times_ms, 1)
    )


def dump_log(name, times_ms=(9000.0, 5000.0)):
    text = (DUMPS / f"{name}.log").read_text()
    gb = int(re.search(r"global_batch_size \.+ (\d+)", text).group(1))
    return text + iteration_lines(times_ms, gb)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


# --------------------------------------------------------------------------- item 2: the attention kernel
def test_current_megatron_runs_fused_attention_whatever_use_flash_attn_says(tmp_path):
    text = dump_log("cp4_llama3_70b_tp8_32k")
    assert "use_flash_attn .................................. False" in text  # the legacy flag, unread
    assert "attention_backend ............................... AttnBackend.auto" in text
    run = run_from_log(write(tmp_path, "cp4.log", text))
    assert run.config.flash_attention and run.config.cp == 4 and run.config.tp == 8


@pytest.mark.parametrize("name", ["dense_llama3_8b_te_unfused_attention", "dense_llama3_8b_local_spec"])
def test_unfused_backends_are_read_as_unfused(tmp_path, name):
    assert not run_from_log(write(tmp_path, "x.log", dump_log(name))).config.flash_attention


def test_attention_rule_for_older_logs():
    assert mg.flash_attention({"use_flash_attn": "True"}) is True  # before transformer_impl: the flag decided
    assert (
        mg.flash_attention({"transformer_impl": "local", "use_mcore_models": "False", "use_flash_attn": "True"}) is True
    )  # legacy ParallelAttention
    assert mg.flash_attention({"transformer_impl": "local", "use_flash_attn": "True"}) is False  # mcore local spec
    assert mg.flash_attention({}) is None
    with pytest.raises(SpecError, match="attention_backend"):
        mg.flash_attention({"attention_backend": "AttnBackend.magic"})


def test_megatron_fsdp_dump_is_zero3(tmp_path):
    run = run_from_log(write(tmp_path, "f.log", dump_log("dense_llama3_8b_megatron_fsdp")))
    assert run.config.zero == 3 and run.config.mb == 2


# --------------------------------------------------------------------------- item 2: the fit's checks
H100 = load_cluster("h100-sxm")


def _run(measured_s, label="r", gb=512, model="llama3-8b"):
    return MeasuredRun(
        model=load_model(model),
        workload=Workload(global_batch=gb, seq_len=4096),
        config=ParallelConfig(tp=1, pp=1, dp=8, mb=1, zero=1),
        measured_s=measured_s,
        label=label,
    )


def test_refuses_a_run_faster_than_the_hardware():
    # 8B model, 512 x 4096 tokens: >= 6 * ~7.5e9 * 2.1e6 FLOPs ~ 9.4e16 over 8 x ~989 TFLOP/s ~ 12 s
    t = calib.min_step_time_s(_run(1.0), H100.with_gpus(8))
    assert 5 < t < 20
    with pytest.raises(CalibrationError, match=r"r: step_time_s=1e-09: must be at least .* dense bf16 peak"):
        fit([_run(1e-9)], H100)


def test_refuses_opposite_errors_the_fit_cannot_reconcile():
    runs = [_run(1.0, "a"), _run(1.0, "b")]
    with pytest.raises(CalibrationError, match=r"after the fit a is predicted \+30% and b -25%"):
        calib.check_reconciled(runs, [0.30, -0.25], ("gemm_efficiency",))
    calib.check_reconciled(runs, [0.30, -0.05], ("gemm_efficiency",))  # one-sided: within the model's accuracy


def test_fit_refuses_runs_no_constant_can_reconcile():
    base = _run(1.0)
    from costmodel.trust.calibration import predict

    t = predict(base, H100)
    # the same plan measured 1.6x slower and 1.6x faster: one run is always off by far more than 10%
    runs = [_run(t * 1.6, "slow"), _run(t / 1.6, "fast")]
    with pytest.raises(CalibrationError, match="opposite errors beyond"):
        fit(runs, H100, loo=False)


def test_warns_when_a_fitted_constant_ends_at_its_bound():
    from costmodel.trust.calibration import predict

    t = predict(_run(1.0), H100)
    cal = fit([_run(t * 0.5, "too_fast")], H100, ["gemm_efficiency"], loo=False)
    assert cal.at_bounds == {"gemm_efficiency": "upper"}
    assert cal.warnings and "ended at its upper bound 0.95" in cal.warnings[0]
    ok = fit([_run(t * 1.05, "fine")], H100, ["gemm_efficiency"], loo=False)
    assert ok.at_bounds == {} and ok.warnings == []


def test_cli_warns_on_stderr_and_records_it(tmp_path, capsys):
    from costmodel.trust.calibration import predict

    t = predict(_run(1.0), H100)
    csv = write(
        tmp_path,
        "runs.csv",
        f"model,gpus,global_batch,seq,tp,mb,zero,step_time_s\nllama3-8b,8,512,4096,1,1,1,{t * 0.5}\n",
    )
    out = tmp_path / "cal.json"
    assert main(["calibrate", str(csv), "--cluster", "h100-sxm", "--fit", "gemm_efficiency", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: gemm_efficiency ended at its upper bound" in err
    import json

    assert json.loads(out.read_text())["calibrated"]["warnings"]


def test_cli_refuses_a_run_faster_than_the_hardware_in_one_line(tmp_path, capsys):
    csv = write(tmp_path, "runs.csv", "model,gpus,global_batch,seq,step_time_s\nllama3-8b,8,512,4096,1e-9\n")
    assert main(["calibrate", str(csv), "--cluster", "h100-sxm", "-o", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "step_time_s=1e-09" in err and not (tmp_path / "c.json").exists()


# --------------------------------------------------------------------------- item 3: MoE with EP > 1
@pytest.mark.parametrize(
    "name, dispatcher, tp",
    [("moe_mixtral_ep8_alltoall", "alltoall", 1), ("moe_mixtral_ep8_tp2_flex_deepep", "deepep", 2)],
)
def test_moe_dumps_with_expert_parallelism(tmp_path, name, dispatcher, tp):
    run = run_from_log(write(tmp_path, "moe.log", dump_log(name)))
    assert (run.config.ep, run.config.ep_dispatcher, run.config.tp) == (8, dispatcher, tp)
    assert run.model.experts == 8 and run.model.topk == 2 and run.gpus == 64


def test_a_table_states_the_dispatcher(tmp_path):
    p = write(
        tmp_path,
        "moe.csv",
        "model,gpus,global_batch,seq,tp,ep,sp,ep_dispatcher,step_time_s\n"
        "mixtral-8x7b,64,256,4096,2,8,true,deepep,3.0\n"
        "mixtral-8x7b,64,256,4096,2,8,true,alltoall,3.2\n",
    )
    a, b = read_table(p)
    assert (a.config.ep_dispatcher, b.config.ep_dispatcher) == ("deepep", "alltoall")
    bad = write(
        tmp_path,
        "bad.csv",
        "model,gpus,global_batch,seq,ep,ep_dispatcher,step_time_s\nmixtral-8x7b,64,256,4096,8,nccl,3.0\n",
    )
    with pytest.raises(SpecError, match="ep_dispatcher"):
        read_table(bad)


def test_cli_calibrates_an_moe_log(tmp_path, capsys):
    log = write(tmp_path, "moe.log", dump_log("moe_mixtral_ep8_alltoall", (9000.0, 6000.0)))
    rc = main(["calibrate", str(log), "--cluster", "h100-sxm", "-o", str(tmp_path / "c.json"), "--json"])
    assert rc == 0, capsys.readouterr().err
    import json

    run = json.loads((tmp_path / "c.json").read_text())["calibrated"]["runs"][0]
    assert run["config"]["ep"] == 8 and run["config"]["ep_dispatcher"] == "alltoall"


# --------------------------------------------------------------------------- item 4: excerpts
def test_a_partial_dump_without_rulers_is_read(tmp_path):
    keep = (
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "world_size",
        "micro_batch_size",
        "global_batch_size",
        "seq_length",
        "bf16",
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "ffn_hidden_size",
        "num_query_groups",
        "group_query_attention",
        "swiglu",
        "vocab_size",
        "sequence_parallel",
        "transformer_impl",
        "use_flash_attn",
        "untie_embeddings_and_output_weights",
    )
    lines = [
        ln
        for ln in (DUMPS / "dense_llama3_8b_tp2_pp2.log").read_text().splitlines()
        if ln.split(" .", 1)[0].strip() in keep
    ]
    assert not any("arguments" in ln for ln in lines) and len(lines) == len(keep)
    text = "[rank0]: " + "\n[rank0]: ".join(lines) + "\n" + iteration_lines((9000.0, 5000.0, 5100.0), 128)
    run = run_from_log(write(tmp_path, "excerpt.log", text))
    assert (run.config.tp, run.config.pp, run.config.dp, run.gpus) == (2, 2, 4, 16)
    assert run.model.params == pytest.approx(load_model("llama3-8b").params, rel=0.01)


def test_iteration_lines_only_name_everything_missing(tmp_path):
    p = write(tmp_path, "iters.log", iteration_lines((9000.0, 5000.0, 5100.0), 512))
    with pytest.raises(SpecError) as e:
        run_from_log(p)
    msg = str(e.value)
    assert msg.startswith(
        f"{p}: missing=10: must be stated in the log or given: num_layers, hidden_size, num_attention_heads, "
        "padded_vocab_size (or --model), world_size (--gpus), seq_length (--seq), bf16/fp16/fp8 (--dtype), "
        "tensor_model_parallel_size (--tp), pipeline_model_parallel_size (--pp), micro_batch_size (--mb)"
    )
    assert "global_batch_size" not in msg  # the iteration lines state it
    assert "world_size (--gpus)" in msg and "(or --model)" in msg


def test_iteration_lines_with_flags_make_a_run(tmp_path):
    p = write(tmp_path, "iters.log", iteration_lines((9000.0, 5000.0, 5100.0), 512))
    run = run_from_log(
        p, model="llama3-8b", given={"gpus": 8, "seq": 4096, "dtype": "bf16", "tp": 1, "pp": 1, "mb": 1, "cp": None}
    )
    assert run.gpus == 8 and run.workload.global_batch == 512 and run.measured_s == pytest.approx(5.05)
    with pytest.raises(SpecError, match=r"global_batch=256: must be 512 as the log states"):
        run_from_log(
            p,
            model="llama3-8b",
            given={"gpus": 8, "seq": 4096, "dtype": "bf16", "tp": 1, "pp": 1, "mb": 1, "global_batch": 256},
        )


def test_cli_takes_what_the_log_lacks_from_flags(tmp_path, capsys):
    p = write(tmp_path, "iters.log", iteration_lines((40000.0, 30000.0, 30600.0), 512))
    assert main(["calibrate", str(p), "--cluster", "h100-sxm", "-o", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "world_size (--gpus)" in err
    rc = main(
        [
            "calibrate",
            str(p),
            "--cluster",
            "h100-sxm",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--seq",
            "4096",
            "--dtype",
            "bf16",
            "--tp",
            "1",
            "--pp",
            "1",
            "--mb",
            "1",
            "-o",
            str(tmp_path / "c.json"),
        ]
    )
    assert rc == 0, capsys.readouterr().err


# --------------------------------------------------------------------------- issue 42 item 8
def test_a_dump_of_an_uneven_stage_plan_calibrates_and_names_its_model(tmp_path, capsys):
    text = dump_log("dense_llama3_8b_tp2_pp2").replace(
        "decoder_first_pipeline_num_layers ............... None",
        "decoder_first_pipeline_num_layers ............... 15",
    )
    p = write(tmp_path, "uneven.log", text)
    run = run_from_log(p)
    assert run.config.layers_per_stage == (15, 17) and run.model.name == "llama3-8b"
    assert main(["calibrate", str(p), "--cluster", "h100-sxm", "-o", str(tmp_path / "c.json")]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("uneven.log"))
    assert row.split()[1] == "llama3-8b"


def test_an_empty_log_says_it_is_empty(tmp_path, capsys):
    p = write(tmp_path, "empty.log", "")
    assert main(["calibrate", str(p), "--cluster", "h100-sxm", "-o", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"planner: error: runs='{p}': must be a training log") and "(the file is empty)" in err
