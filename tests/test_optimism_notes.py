"""The "treat the prediction as optimistic" notes mean something (issue 42 item 6): the published-MFU ceiling is
compared like with like (attention counted as each reference counts it, the best run at the plan's scale, FP16
held to the 16-bit runs), an FP8 speedup over the same plan in BF16 beyond the best published one is flagged,
and no note is put on a prediction that matches or undershoots a published run, nor on a calibrated cluster.
Through the CLI and ``planner.report.with_trust``, as a user meets them."""

import csv
import json
from dataclasses import replace
from pathlib import Path

from planner import ParallelConfig, Workload, cli, evaluate, load_cluster, load_model
from planner.report import with_trust

ROOT = Path(__file__).resolve().parents[1]
KORTHIKANTI = ROOT / "tests" / "data" / "korthikanti2022_runs.csv"
#: the README's first example, the answer pinned: GPT-3 175B on 1,024 A100, 62.3% MFU (causal)
README_GPT3 = [
    "--model", "gpt3-175b", "--gpus", "1024", "--global-batch", "1536", "--seq", "2048",
    "--tp", "8", "--pp", "4", "--vp", "8", "--mb", "2", "--sp", "--zero", "1",
]  # fmt: skip
#: GPT-NeoX-20B (Black et al. 2022, Table 1 and Section 3: 44 layers, d 6144, 64 heads, untied, FP16)
NEOX = {"name": "gpt-neox-20b", "layers": 44, "hidden": 6144, "heads": 64, "ffn_hidden": 24576,
        "vocab": 50432, "activation": "gelu", "tied_embeddings": False}  # fmt: skip


def _evaluate(capsys, *args) -> dict:
    code = cli.main(["evaluate", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _ceiling_notes(notes) -> list[str]:
    return [n for n in notes if "exceeds the best published" in n and "MFU" in n and "FP8 speedup" not in n]


def test_readme_a100_example_is_held_to_the_runs_at_its_scale(capsys):
    """62.3% causal (63.2% in full) on 1,024 A100: above every published run at 512+ A100 (56.3% GPT 1T,
    55.2% MegaScale, both counted in full), though under MPT-7B's 64.2% on 8 GPUs; 00b7cca said nothing."""
    d = _evaluate(capsys, "--cluster", "a100-80g", *README_GPT3)
    notes = _ceiling_notes(d["notes"])
    assert d["mfu"] > 0.563, d["mfu"]
    assert len(notes) == 1 and "56.3%" in notes[0] and "counted full" in notes[0] and "512 GPUs" in notes[0], notes


def test_fp16_is_held_to_the_16_bit_runs(capsys, tmp_path):
    """GPT-NeoX-20B in FP16 on 96 A100 at the plan recommend chooses (63% MFU): FP16 has BF16's peak, so
    the BF16 runs are its ceiling; 00b7cca had no FP16 row and said nothing."""
    spec = tmp_path / "neox.json"
    spec.write_text(json.dumps(NEOX))
    plan = ["--tp", "1", "--pp", "3", "--vp", "8", "--mb", "1", "--zero", "1", "--recompute", "none"]
    d = _evaluate(capsys, "--model", str(spec), "--cluster", "a100-80g", "--gpus", "96", "--global-batch", "1536",
                  "--seq", "2048", "--dtype", "fp16", *plan)  # fmt: skip
    assert d["mfu"] > 0.563, d["mfu"]
    notes = _ceiling_notes(d["notes"])
    assert len(notes) == 1 and "fp16" in notes[0], d["notes"]


def test_meta_405b_131k_plan_predicted_as_reported_gets_no_note(capsys):
    """Meta's 131k-context plan (Llama 3 paper, Table 4 row 3: TP8 PP16 CP16 on 16,384 H100, 38% MFU): the
    planner predicts ~38% counted causally; 00b7cca counted it in full (53%) against a full-count ceiling of
    49% and called it optimistic."""
    d = _evaluate(capsys, "--model", "llama3.1-405b", "--cluster", "h100-sxm", "--gpus", "16384",
                  "--global-batch", "128", "--seq", "131072", "--tp", "8", "--pp", "16", "--cp", "16", "--sp")  # fmt: skip
    assert abs(d["mfu"] - 0.38) < 0.03, d["mfu"]  # the prediction matches the report
    assert not [n for n in d["notes"] if "optimistic" in n], d["notes"]


def _deepseek_at(tokens_per_gpu: float):
    """DeepSeek-V3 on 2,048 H800 in FP8 (the report's run: 15,360 x 4,096 tokens a step), the planner's
    estimate of one plan rescaled to ``tokens_per_gpu``, with its trust notes."""
    model, cluster = load_model("deepseek-v3"), load_cluster("h800").with_gpus(2048)
    w = Workload(global_batch=15360, seq_len=4096, dtype="fp8")
    est = evaluate(model, cluster, w, ParallelConfig(tp=2, dp=1024, ep=64, sp=True, zero=1, recompute="full"))
    assert not _ceiling_notes(est.notes)  # the plan as predicted (~600 tokens/s/GPU) is far under any ceiling
    step = 15360 * 4096 / (tokens_per_gpu * 2048)
    k = est.step_time_s / step
    est = replace(
        est,
        step_time_s=step,
        tokens_per_s=est.tokens_per_s * k,
        mfu=est.mfu * k,
        hfu=est.hfu * k,
        model_tflops_per_gpu=est.model_tflops_per_gpu * k,
        hardware_tflops_per_gpu=est.hardware_tflops_per_gpu * k,
    )
    return with_trust(est, model, cluster, w)


def test_deepseek_v3_prediction_under_its_own_run_gets_no_note():
    """The DeepSeek-V3 report's run (~1,543 tokens/s/GPU, 180K H800 GPU-hours per trillion tokens) is itself a
    published FP8 MoE run: a prediction 23% under it (1,192 tokens/s/GPU, issue 42) claims nothing beyond it;
    00b7cca compared it in full count with a 17.1% ceiling and called it optimistic. One 20% above it does."""
    assert not _ceiling_notes(_deepseek_at(1192).notes)
    above = _ceiling_notes(_deepseek_at(1.2 * 1543).notes)
    assert len(above) == 1 and "DeepSeek-V3" in above[0], above


def test_fp8_speedup_beyond_the_published_ones_gets_a_note(capsys):
    """Llama-3-70B on 256 H100, a plan recommend answers in FP8: the planner predicts it over 1.5x faster than
    the same plan in BF16, more than any published FP8 run (1.50x, PyTorch FSDP2 float8; NeMo-style recipes less)."""
    plan = ["--tp", "2", "--pp", "8", "--cp", "2", "--vp", "5", "--mb", "1", "--sp", "--zero", "1",
            "--recompute", "none", "--bucket-mb", "25", "--chunks", "2"]  # fmt: skip
    common = ["--model", "llama3-70b", "--cluster", "h100-sxm", "--gpus", "256", "--global-batch", "1024",
              "--seq", "8192", *plan]  # fmt: skip
    fp8 = _evaluate(capsys, *common, "--dtype", "fp8")
    bf16 = _evaluate(capsys, *common, "--dtype", "bf16")
    speedup = bf16["step_time_s"] / fp8["step_time_s"]
    notes = [n for n in fp8["notes"] if "FP8 speedup" in n]
    assert speedup > 1.5, speedup
    assert len(notes) == 1 and f"{speedup:.2f}x" in notes[0] and "optimistic" in notes[0], fp8["notes"]
    assert not [n for n in bf16["notes"] if "FP8 speedup" in n]


def test_no_note_after_calibration(capsys, tmp_path):
    """`planner calibrate` on four runs 20% faster than Korthikanti et al. measured (the user's cluster is
    faster than the preset): the calibrated prediction of the README plan is above every published A100 run,
    and the user's own runs say so; no ceiling note. 00b7cca still called it optimistic."""
    rows = list(csv.DictReader(KORTHIKANTI.open(newline="")))[:4]
    for r in rows:
        r["step_time_s"] = f"{0.8 * float(r['step_time_s']):.3f}"
    runs = tmp_path / "runs.csv"
    with runs.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cal = tmp_path / "cal.json"
    assert cli.main(["calibrate", str(runs), "--cluster", "a100-80g", "-o", str(cal)]) == 0
    capsys.readouterr()
    d = _evaluate(capsys, "--cluster", str(cal), *README_GPT3)
    assert d["mfu"] > 0.65, d["mfu"]  # above every published A100 run, at any scale
    assert not [n for n in d["notes"] if "optimistic" in n], d["notes"]
