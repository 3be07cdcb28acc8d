"""No tracebacks, no runaways.

Absurd sizes get a one-line bound at once; ``explain --trace/--gantt`` refuse paths they cannot
write, naming the flag, and write what they say; Ctrl-C and SIGTERM stop ``sweep`` with one line,
exit 130/143, no traceback and no leaked semaphore, and a rerun resumes; Ctrl-C after a CP-SAT solve
is still a ``KeyboardInterrupt`` (OR-Tools' signal handler does not outlive the solve).
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from costmodel.spec.errors import SpecError
from costmodel.spec.bounds import MAX_SIZE
from costmodel.spec.specs import ModelSpec
from costmodel.spec.workload import Workload
from planner import cli

SMALL = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]


def refused(capsys, argv, field, within_s=10.0):
    t0 = time.perf_counter()
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert time.perf_counter() - t0 < within_s
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith(f"planner: error: {field}="), err
    return err


# --------------------------------------------------------------------------- sizes
def test_spec_sizes_are_bounded():
    with pytest.raises(SpecError, match=r"layers=200000: must be at most 10,000"):
        ModelSpec(layers=200_000, hidden=1_000_000, heads=1000, ffn_hidden=4_000_000, vocab=50_000)
    with pytest.raises(SpecError, match="hidden"):
        ModelSpec(layers=2, hidden=2_000_000, heads=1000, ffn_hidden=4_000_000, vocab=50_000)
    with pytest.raises(SpecError, match="global_batch"):
        Workload(global_batch=MAX_SIZE["global_batch"] + 1, seq_len=2048)
    ModelSpec(
        layers=MAX_SIZE["layers"], hidden=4096, heads=32, ffn_hidden=16384, vocab=50_000
    )  # the bound itself is fine


def test_absurd_model_file_is_refused_in_one_line(capsys, tmp_path):
    path = tmp_path / "huge.json"
    path.write_text(
        json.dumps(
            {
                "name": "huge",
                "layers": 200_000,
                "hidden": 1_000_000,
                "heads": 1000,
                "ffn_hidden": 4_000_000,
                "vocab": 50_000,
            }
        )
    )
    err = refused(capsys, ["evaluate", "--model", str(path), *SMALL[2:]], "model.layers")
    assert "at most 10,000" in err


@pytest.mark.parametrize("command", ["recommend", "evaluate"])
def test_absurd_gpu_count_is_refused_at_once(capsys, command):
    argv = [command, *SMALL]
    argv[argv.index("--gpus") + 1] = "100000000"
    assert "at most 1,048,576" in refused(capsys, argv, "num_gpus")


def test_too_many_micro_batches_are_refused_not_scheduled(capsys):
    # 1,000,000 sequences on one data-parallel replica of micro-batch 1: a million micro-batches
    err = refused(
        capsys, ["evaluate", *SMALL[:6], "--global-batch", "1000000", "--seq", "4096", "--tp", "8"], "global_batch"
    )
    assert "100,000 micro-batches" in err


# --------------------------------------------------------------------------- explain outputs
@pytest.mark.parametrize(
    "flag,path,allowed",
    [
        ("--trace", "{tmp}", "not a directory"),
        ("--trace", "/proc/nope/t.json", "existing directory"),
        ("--gantt", "/proc/nope/g.png", "existing directory"),
        ("--gantt", "g.txt", ".png, .svg or .pdf"),
        ("--gantt", "{tmp}", "not a directory"),
        ("--gantt", "{tmp}/g", ".png, .svg or .pdf"),
    ],
)
def test_explain_refuses_paths_it_cannot_write(capsys, tmp_path, flag, path, allowed):
    path = path.format(tmp=tmp_path)
    err = refused(capsys, ["explain", *SMALL, "--tp", "8", flag, path], flag.lstrip("-"))
    assert allowed in err and flag in err
    assert os.listdir(tmp_path) == []  # nothing written (no g.png beside a refused "g")


def test_explain_writes_what_it_says(capsys, tmp_path):
    trace, gantt = tmp_path / "t.json", tmp_path / "g.png"
    assert cli.main(["explain", *SMALL, "--tp", "8", "--trace", str(trace), "--gantt", str(gantt)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {trace}" in out and f"wrote {gantt}" in out and trace.exists() and gantt.exists()


# --------------------------------------------------------------------------- sweep interrupts
def _sweep_then_signal(tmp_path, sig):
    """Start a sweep of 32 cases on 2 workers, signal it once a case is written; (rc, stderr, out dir)."""
    out = tmp_path / "runs"
    argv = [
        sys.executable,
        "-m",
        "planner",
        "sweep",
        "--models",
        "llama3-8b",
        "--clusters",
        "h100-sxm",
        "--gpus",
        "8,16,32,64,128,256,512,1024",
        "--global-batch",
        "512,1024",
        "--seq",
        "2048,4096",
        "--workers",
        "2",
        "--no-progress",
        "--out",
        str(out),
    ]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        jsonl = out / "results.jsonl"
        while time.monotonic() < deadline and p.poll() is None:
            if jsonl.exists() and jsonl.read_text().count("\n") >= 1:
                break
            time.sleep(0.05)
        assert p.poll() is None, "the sweep ended before it could be interrupted"
        if sig == signal.SIGINT:
            os.killpg(p.pid, sig)  # a terminal's Ctrl-C reaches the whole process group
        else:
            p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return p.returncode, err, out


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_sweep_interrupt_is_one_line_and_resumable(tmp_path, sig, code):
    rc, err, out = _sweep_then_signal(tmp_path, sig)
    assert rc == code, err
    assert "Traceback" not in err and "leaked" not in err and "KeyboardInterrupt" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("planner: interrupted: "), err
    written = int(lines[0].split("interrupted: ")[1].split(" of ")[0])
    assert written >= 1 and f"of 32 cases written to {out}; rerun" in lines[0]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == written == len({r["case_id"] for r in records})


def test_ctrl_c_after_a_solve_is_a_keyboard_interrupt_not_a_silent_death():
    # OR-Tools' SIGINT handler outlived each CP-SAT solve and left SIG_DFL: Ctrl-C on `planner sweep`
    # then killed it before it could print "N of M cases written"
    code = (
        "import os, signal, time\n"
        "from planner.api import recommend\n"
        "recommend('llama3-8b', 'h100-sxm', gpus=8, global_batch=64, seq=4096, tp=8, time_limit_s=5)\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted cleanly')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "interrupted cleanly" in p.stdout, (p.returncode, p.stderr[-500:])
