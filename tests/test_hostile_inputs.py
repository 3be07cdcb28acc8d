"""A battery of hostile inputs (issue 42, "Done when"): each ends in exit 2 with one stderr line naming the
field, or in a correct answer (stated per case), within :data:`LIMIT_S` seconds and :data:`LIMIT_BYTES` of memory.

Each case runs ``planner.cli.main(argv)`` in a child forked from this process, so that the imports are paid once
(here) and the time and memory measured are the case's own:

* wall time from the fork to the child's exit; a child still running at :data:`LIMIT_S` is killed and fails;
* memory: the child's address space is capped at its size at the fork plus :data:`LIMIT_BYTES`
  (``RLIMIT_AS``: a runaway read fails in the child instead of taking the host), and its peak resident memory
  (``wait4``'s ``ru_maxrss``) less its resident memory at the fork must stay under :data:`LIMIT_BYTES` less
  :data:`CLI_IMPORT_BYTES`, the resident memory a fresh ``planner`` process starts with.

Files the cases read (special files, huge and empty files, malformed JSON/YAML/TOML, Hugging Face configs with
missing or absurd fields, logs and run tables) are made once in a temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from planner.sweep.ray_backend import LOOPBACK_ENV

os.environ.setdefault(*LOOPBACK_ENV)  # before Ray is imported anywhere in this process (ray_backend's rule)

#: seconds a case may run (issue 42)
LIMIT_S = 10.0
#: memory a case may use (issue 42)
LIMIT_BYTES = 2**30
#: resident memory of a fresh ``planner`` process after its imports (~170 MB measured with /usr/bin/time on the
#: CLI's refusals), counted against LIMIT_BYTES since a forked child starts with it already resident
CLI_IMPORT_BYTES = 256 * 2**20
#: the longest refusal line allowed (costmodel.spec.errors.ERROR_LINE_CHARS, with the ``planner: error: `` prefix)
MAX_LINE_BYTES = 320

SMALL = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]
PROBLEM = SMALL[2:]
GPT3 = ["--model", "gpt3-175b", "--cluster", "a100-80g", "--gpus", "1024", "--global-batch", "1536", "--seq", "2048"]
INFER = ["--mode", "infer", "--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8"]
FAST = ["--time-limit", "2", "--workers", "1"]
LONG = "m" * 300


@dataclass(frozen=True)
class Case:
    """``argv`` (``{d}`` is the directory of the prepared files) ends in exit 2 with one line starting
    ``planner: error: <field>`` (``field`` a regular expression), or, with ``answer``, in exit 0 with
    ``answer(stdout, stderr)`` true."""

    id: str
    argv: list
    field: str | None = None
    answer: object = None
    no_ray: bool = False  # run with ``import ray`` failing (Ray not installed)


def _json_answer(check):
    def answer(out, err):
        return check(json.loads(out))

    return answer


def _calibrated_model(model):
    """``calibrate``'s run table names the logged model (not the log's file name)."""

    def answer(out, err):
        rows = [ln for ln in out.splitlines() if ln.startswith("uneven.log")]
        return len(rows) == 1 and rows[0].split()[1] == model

    return answer


def _hf(**over):
    d = {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 1024,
        "vocab_size": 1000,
    }
    d.update(over)
    return json.dumps({k: v for k, v in d.items() if v is not None})


def _iterations(n=8, gb=128):
    return "".join(
        f" iteration {i:8d}/     100 | elapsed time per iteration (ms): {5000 + i:.1f} | global batch size: {gb:5d} |\n"
        for i in range(1, n + 1)
    )


DUMPS = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "components" / "megatron_dumps"


def _prepare(d: Path) -> None:
    """The files the cases read."""
    (d / "empty.json").write_text("")
    (d / "truncated.json").write_text('{"layers": 4, "hidden": ')
    (d / "list.json").write_text("[1, 2, 3]")
    (d / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (d / "nan.json").write_text(
        '{"name": "x", "layers": NaN, "hidden": 512, "heads": 8, "ffn_hidden": 1024, "vocab": 1000}'
    )
    (d / "bad.yaml").write_text("layers: [4\nhidden: : :\n")
    (d / "weights.json").write_bytes(bytes(range(128, 256)) * 64)
    with open(d / "huge.json", "wb") as f:  # sparse: 17 MiB on paper, no disk used
        f.truncate(17 * 2**20)
    with open(d / "huge.log", "wb") as f:
        f.truncate(65 * 2**20)
    os.mkfifo(d / "fifo.json")
    (d / "adir.json").mkdir()
    (d / "zero.json").symlink_to("/dev/zero")
    (d / "hf_missing_hidden.json").write_text(_hf(hidden_size=None))
    (d / "hf_layers_1e30.json").write_text(_hf(num_hidden_layers=1e30))
    (d / "hf_layers_negative.json").write_text(_hf(num_hidden_layers=-4))
    (d / "hf_layers_text.json").write_text(_hf(num_hidden_layers="four"))
    (d / "hf_heads_not_dividing.json").write_text(_hf(num_attention_heads=7))
    (d / "hf_vocab_huge.json").write_text(_hf(vocab_size=10**12))
    from costmodel.spec.presets import preset_info

    c = preset_info("clusters", "h100-sxm")
    (d / "cluster_nobw.json").write_text(json.dumps({**c, "intra_link": {**c["intra_link"], "bw_gbps": -1}}))
    (d / "cluster_nodevice.json").write_text(json.dumps({k: v for k, v in c.items() if k != "device"}))
    (d / "cluster_tflops_text.json").write_text(
        json.dumps({**c, "device": {**c["device"], "peak_bf16_tflops": "fast"}})
    )
    # calibrate's inputs
    (d / "empty.log").write_text("")
    (d / "noiter.log").write_text("just some text\nwith no iteration lines\n")
    (d / "naniter.log").write_text(" iteration 1/ 10 | elapsed time per iteration (ms): nan |\n")
    (d / "binary.log").write_bytes(bytes(range(256)) * 64)
    (d / "header_only.csv").write_text("model,gpus,global_batch,seq,step_time_s\n")
    (d / "unknown_column.csv").write_text("model,gpus,global_batch,seq,step_time,tp\nllama3-8b,8,64,4096,1.0,8\n")
    (d / "negative_time.csv").write_text("model,gpus,global_batch,seq,step_time_s,tp\nllama3-8b,8,64,4096,-1,8\n")
    (d / "runs.yaml").write_text("runs: [ {model: llama3-8b, gpus: 8\n")
    dump = (DUMPS / "dense_llama3_8b_tp2_pp2.log").read_text()
    uneven = dump.replace(
        "decoder_first_pipeline_num_layers ............... None",
        "decoder_first_pipeline_num_layers ............... 15",
    )
    assert uneven != dump
    (d / "uneven.log").write_text(uneven + _iterations())
    # framework configs and sweep grids
    (d / "ds.json").write_text('{"train_batch_size": ')
    (d / "tt.toml").write_text("[parallelism\ndata_parallel_shard_degree = \n")
    (d / "grid.yaml").write_text("models: [llama3-8b\n")
    (d / "grid_list.yaml").write_text("- a\n- b\n")


CASES = [
    # ---------------------------------------------------------------- absurd numbers
    Case("gpus-zero", ["evaluate", *SMALL[:4], "--gpus", "0", *SMALL[6:]], "gpus"),
    Case("gpus-negative", ["evaluate", *SMALL[:4], "--gpus", "-8", *SMALL[6:]], "gpus"),
    Case("gpus-1e30", ["recommend", *SMALL[:4], "--gpus", "1e30", *SMALL[6:]], "gpus"),
    Case("gpus-5000-digits", ["recommend", *SMALL[:4], "--gpus", "9" * 5000, *SMALL[6:]], "gpus"),
    Case("gpus-beyond-bound", ["recommend", *SMALL[:4], "--gpus", str(2**40), *SMALL[6:]], "(num_)?gpus"),
    Case("batch-nan", ["evaluate", *SMALL[:6], "--global-batch", "nan", "--seq", "4096"], "global_batch"),
    Case(
        "batch-beyond-bound", ["recommend", *SMALL[:6], "--global-batch", str(10**9), "--seq", "4096"], "global_batch"
    ),
    Case("seq-inf", ["evaluate", *SMALL[:8], "--seq", "inf"], "seq"),
    Case("seq-beyond-bound", ["recommend", *SMALL[:8], "--seq", str(10**9)], "seq(_len)?"),
    Case("tp-not-dividing", ["evaluate", *SMALL, "--tp", "3"], r"tp\b.*"),
    Case("tp-huge", ["recommend", *SMALL, "--tp", str(10**12)], r"tp\b.*"),
    Case("pp-beyond-layers", ["recommend", *GPT3, "--pp", "1024"], "pp"),
    Case("vp-1000-recommend", ["recommend", *GPT3, "--vp", "1000"], "vp"),
    Case("vp-1000-pp2-evaluate", ["evaluate", *GPT3, "--pp", "2", "--vp", "1000"], r"pp\*vp"),
    Case("vp-1000-explain", ["explain", *GPT3, "--vp", "1000"], "vp"),
    Case("vp-49-pp4", ["recommend", *GPT3, "--pp", "4", "--vp", "49"], r"pp\*vp"),
    Case("mb-not-dividing", ["evaluate", *SMALL, "--mb", "7"], r"(global_batch|mb)"),
    Case("chunks-million", ["evaluate", *SMALL, "--chunks", "1000000"], "chunks"),
    Case("bucket-negative", ["evaluate", *SMALL, "--bucket-mb", "-1"], "bucket_mb"),
    Case("bucket-nan", ["evaluate", *SMALL, "--bucket-mb", "nan"], "bucket_mb"),
    Case(
        "recompute-layers-beyond",
        ["evaluate", *SMALL, "--recompute", "full", "--recompute-layers", "10000"],
        "recompute_layers",
    ),
    Case("time-limit-negative", ["recommend", *SMALL, "--time-limit", "-1"], "time_limit"),
    Case("time-limit-inf", ["recommend", *SMALL, "--time-limit", "inf"], "time_limit"),
    Case("headroom-inf", ["recommend", *SMALL, "--headroom-gib", "inf"], "headroom_gib"),
    Case("headroom-above-hbm", ["recommend", *SMALL, "--headroom-gib", "100"], "headroom_gib"),
    Case("top-zero", ["recommend", *SMALL, "--top", "0"], "top"),
    Case("top-100000", ["recommend", *SMALL, "--top", "100000"], "top"),
    Case("mb-max-zero", ["recommend", *SMALL, "--mb-max", "0"], "mb_max"),
    Case("input-len-zero", ["recommend", *INFER, "--input-len", "0", "--output-len", "100"], "input_len"),
    Case("output-len-1e30", ["recommend", *INFER, "--input-len", "100", "--output-len", "1e30"], "output_len"),
    Case(
        "ttft-in-seconds",
        ["recommend", *INFER, "--input-len", "100", "--output-len", "100", "--ttft-ms", "0.0001"],
        "ttft_ms",
    ),
    # ---------------------------------------------------------------- wrong types, unknown names, conflicts
    Case("tp-text", ["evaluate", *SMALL, "--tp", "eight"], "tp"),
    Case("dtype-unknown", ["evaluate", *SMALL, "--dtype", "fp4"], "dtype"),
    Case("stack-unknown", ["evaluate", *SMALL, "--stack", "megatron-1999"], "stack"),
    Case("zero-5", ["evaluate", *SMALL, "--zero", "5"], "zero"),
    Case("unknown-flag", ["evaluate", *SMALL, "--tensor-parallel", "8"], "argument"),
    Case("unknown-command", ["optimise", *SMALL], "command"),
    Case("no-command", [], "command"),
    Case("model-unknown", ["evaluate", "--model", "llama-9000", *PROBLEM], "model"),
    Case("model-300-chars", ["evaluate", "--model", LONG, *PROBLEM], "model"),
    Case("cluster-300-chars", ["recommend", "--model", "llama3-8b", "--cluster", LONG, *PROBLEM[2:]], "cluster"),
    Case("model-300-chars-explain", ["explain", "--model", LONG, *PROBLEM], "model"),
    Case("zero3-and-no-zero3", ["recommend", *SMALL, "--zero", "3", "--no-zero3"], "zero"),
    Case("sp-without-tp", ["evaluate", *SMALL, "--tp", "1", "--sp"], "sp"),
    Case("ep-on-dense", ["evaluate", *SMALL, "--ep", "2"], "ep"),
    Case(
        "objective-in-infer",
        ["recommend", *INFER, "--input-len", "100", "--output-len", "100", "--objective", "cost"],
        "objective",
    ),
    Case("presets-flag", ["presets", "--everything"], "argument"),
    # ---------------------------------------------------------------- special, huge, empty and malformed files
    Case("model-dev-zero", ["recommend", "--model", "/dev/zero", *PROBLEM], "model"),
    Case("model-symlink-to-dev-zero", ["evaluate", "--model", "{d}/zero.json", *PROBLEM], "model"),
    Case(
        "cluster-dev-urandom",
        ["evaluate", "--model", "llama3-8b", "--cluster", "/dev/urandom", *PROBLEM[2:]],
        "cluster",
    ),
    Case("model-fifo", ["evaluate", "--model", "{d}/fifo.json", *PROBLEM], "model"),
    Case("model-directory", ["evaluate", "--model", "{d}/adir.json", *PROBLEM], "model"),
    Case("model-17-mib", ["evaluate", "--model", "{d}/huge.json", *PROBLEM], "model"),
    Case("model-empty", ["evaluate", "--model", "{d}/empty.json", *PROBLEM], "model"),
    Case("model-truncated-json", ["evaluate", "--model", "{d}/truncated.json", *PROBLEM], "model"),
    Case("model-json-list", ["evaluate", "--model", "{d}/list.json", *PROBLEM], "model"),
    Case("model-200000-deep-json", ["evaluate", "--model", "{d}/deep.json", *PROBLEM], "model"),
    Case("model-nan-layers", ["evaluate", "--model", "{d}/nan.json", *PROBLEM], r"model\.layers"),
    Case("model-bad-yaml", ["evaluate", "--model", "{d}/bad.yaml", *PROBLEM], "model"),
    Case("model-binary", ["evaluate", "--model", "{d}/weights.json", *PROBLEM], "model"),
    Case("model-missing-file", ["evaluate", "--model", "{d}/nothing.json", *PROBLEM], "model"),
    Case("hf-missing-hidden", ["evaluate", "--model", "{d}/hf_missing_hidden.json", *PROBLEM], "hidden_size"),
    Case("hf-layers-1e30", ["evaluate", "--model", "{d}/hf_layers_1e30.json", *PROBLEM], "(num_hidden_layers|layers)"),
    Case(
        "hf-layers-negative",
        ["evaluate", "--model", "{d}/hf_layers_negative.json", *PROBLEM],
        "(num_hidden_layers|layers)",
    ),
    Case("hf-layers-text", ["evaluate", "--model", "{d}/hf_layers_text.json", *PROBLEM], "num_hidden_layers"),
    Case(
        "hf-heads-not-dividing",
        ["evaluate", "--model", "{d}/hf_heads_not_dividing.json", *PROBLEM],
        "(heads|num_attention_heads|hidden)",
    ),
    Case("hf-vocab-1e12", ["evaluate", "--model", "{d}/hf_vocab_huge.json", *PROBLEM], "(vocab|vocab_size)"),
    Case(
        "cluster-negative-bw",
        ["evaluate", "--model", "llama3-8b", "--cluster", "{d}/cluster_nobw.json", *PROBLEM[2:]],
        r"intra_link\.bw_gbps",
    ),
    Case(
        "cluster-no-device",
        ["evaluate", "--model", "llama3-8b", "--cluster", "{d}/cluster_nodevice.json", *PROBLEM[2:]],
        r"cluster\.device",
    ),
    Case(
        "cluster-tflops-text",
        ["evaluate", "--model", "llama3-8b", "--cluster", "{d}/cluster_tflops_text.json", *PROBLEM[2:]],
        r"device\.peak_bf16_tflops",
    ),
    Case("megatron-args-dev-zero", ["evaluate", *SMALL, "--megatron-args", "@/dev/zero"], "megatron_args"),
    Case("deepspeed-config-truncated", ["evaluate", *SMALL, "--deepspeed-config", "{d}/ds.json"], "deepspeed_config"),
    Case("deepspeed-config-fifo", ["evaluate", *SMALL, "--deepspeed-config", "{d}/fifo.json"], "deepspeed_config"),
    Case(
        "torchtitan-config-malformed", ["evaluate", *SMALL, "--torchtitan-config", "{d}/tt.toml"], "torchtitan_config"
    ),
    # ---------------------------------------------------------------- calibrate
    Case("calibrate-empty-log", ["calibrate", "{d}/empty.log", "--cluster", "h100-sxm", "-o", "{d}/c.json"], "runs"),
    Case(
        "calibrate-log-without-iterations",
        ["calibrate", "{d}/noiter.log", "--cluster", "h100-sxm", "-o", "{d}/c.json"],
        "runs",
    ),
    Case(
        "calibrate-nan-iteration",
        ["calibrate", "{d}/naniter.log", "--cluster", "h100-sxm", "-o", "{d}/c.json"],
        r".*naniter.log:1: elapsed time per iteration \(ms\)",
    ),
    Case("calibrate-binary-log", ["calibrate", "{d}/binary.log", "--cluster", "h100-sxm", "-o", "{d}/c.json"], "runs"),
    Case("calibrate-65-mib-log", ["calibrate", "{d}/huge.log", "--cluster", "h100-sxm", "-o", "{d}/c.json"], "runs"),
    Case("calibrate-dev-zero", ["calibrate", "/dev/zero", "--cluster", "h100-sxm", "-o", "{d}/c.json"], "runs"),
    Case("calibrate-fifo", ["calibrate", "{d}/fifo.json", "--cluster", "h100-sxm", "-o", "{d}/c.json"], "runs"),
    Case(
        "calibrate-header-only-csv",
        ["calibrate", "{d}/header_only.csv", "--cluster", "h100-sxm", "-o", "{d}/c.json"],
        "runs",
    ),
    Case(
        "calibrate-unknown-column",
        ["calibrate", "{d}/unknown_column.csv", "--cluster", "h100-sxm", "-o", "{d}/c.json"],
        r".*unknown_column.csv:2: column",
    ),
    Case(
        "calibrate-negative-time",
        ["calibrate", "{d}/negative_time.csv", "--cluster", "h100-sxm", "-o", "{d}/c.json"],
        r".*negative_time.csv:2: step_time_s",
    ),
    Case("calibrate-bad-yaml", ["calibrate", "{d}/runs.yaml", "--cluster", "h100-sxm", "-o", "{d}/c.json"], "runs"),
    Case(
        "calibrate-output-directory",
        ["calibrate", "{d}/uneven.log", "--cluster", "h100-sxm", "-o", "{d}/adir.json"],
        "output",
    ),
    Case(
        "calibrate-uneven-stage-log",
        ["calibrate", "{d}/uneven.log", "--cluster", "h100-sxm", "-o", "{d}/c.json"],
        answer=_calibrated_model("llama3-8b"),
    ),
    # ---------------------------------------------------------------- sweep
    Case("sweep-grid-dev-zero", ["sweep", "--grid", "/dev/zero", "--out", "{d}/sw"], "grid"),
    Case("sweep-grid-malformed", ["sweep", "--grid", "{d}/grid.yaml", "--out", "{d}/sw"], "grid"),
    Case("sweep-grid-list", ["sweep", "--grid", "{d}/grid_list.yaml", "--out", "{d}/sw"], "grid"),
    Case(
        "sweep-gpus-text",
        [
            "sweep",
            "--models",
            "llama3-8b",
            "--clusters",
            "h100-sxm",
            "--gpus",
            "8,x",
            "--global-batch",
            "64",
            "--seq",
            "4096",
            "--out",
            "{d}/sw",
        ],
        "gpus",
    ),
    Case(
        "sweep-ray-closed-port",
        [
            "sweep",
            "--models",
            "llama3-8b",
            "--clusters",
            "h100-sxm",
            "--gpus",
            "8",
            "--global-batch",
            "64",
            "--seq",
            "4096",
            "--backend",
            "ray",
            "--address",
            "127.0.0.1:1",
            "--out",
            "{d}/sw_ray",
        ],
        "(address|backend)",
    ),
    Case(
        "sweep-ray-not-installed",
        [
            "sweep",
            "--models",
            "llama3-8b",
            "--clusters",
            "h100-sxm",
            "--gpus",
            "8",
            "--global-batch",
            "64",
            "--seq",
            "4096",
            "--backend",
            "ray",
            "--address",
            "127.0.0.1:1",
            "--out",
            "{d}/sw_noray",
        ],
        "backend",
        no_ray=True,
    ),
    # ---------------------------------------------------------------- hostile but valid: a correct answer
    Case(
        "gpus-leading-zeros",
        ["evaluate", *SMALL[:4], "--gpus", "0008", *SMALL[6:], "--tp", "8", "--json"],
        answer=_json_answer(lambda j: j["config"]["tp"] == 8 and j["config"]["dp"] == 1 and j["step_time_s"] > 0),
    ),
    Case(
        "vp-at-its-bound",
        [
            "recommend",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-sxm",
            "--gpus",
            "16",
            "--global-batch",
            "64",
            "--seq",
            "4096",
            "--vp",
            "17",
            *FAST,
            "--json",
        ],
        answer=_json_answer(lambda j: j["config"]["vp"] == 17 and j["config"]["pp"] == 2),
    ),
]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def run_case(case: Case, d: Path) -> tuple[int, str, str, float, int]:
    """``(exit code, stdout, stderr, wall seconds, peak memory bytes beyond the fork)`` of ``case`` in a forked child."""
    from planner import cli

    argv = [a.replace("{d}", str(d)) for a in case.argv]
    out_path, err_path = d / f"{case.id}.out", d / f"{case.id}.err"
    sys.stdout.flush()
    sys.stderr.flush()
    base = _rss_bytes()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 3
        try:
            vm = _vm_bytes()
            resource.setrlimit(resource.RLIMIT_AS, (vm + LIMIT_BYTES, resource.RLIM_INFINITY))
            for fd, path in ((1, out_path), (2, err_path)):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(f, fd)
                os.close(f)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            if case.no_ray:
                sys.modules["ray"] = None  # `import ray` raises ImportError, as where Ray is not installed
            code = cli.main(argv)
        except BaseException as e:  # noqa: BLE001 - anything escaping main() fails the case, traceback shown
            import traceback

            traceback.print_exc()
            code = 99 if not isinstance(e, SystemExit) else (e.code if isinstance(e.code, int) else 98)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = t0 + LIMIT_S
    while True:
        wpid, status, usage = os.wait4(pid, os.WNOHANG)
        if wpid:
            break
        if time.perf_counter() > deadline:
            os.kill(pid, signal.SIGKILL)
            wpid, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux; pages inherited and never touched are not counted, so this may be negative
    peak = usage.ru_maxrss * 1024 - base
    return code, out_path.read_text(errors="replace"), err_path.read_text(errors="replace"), wall, peak


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    _prepare(d)
    import planner.cli as cli

    for name in cli.COMMANDS:  # every command's imports paid here, before the forks
        cli.command_module(name)
    import search.solve  # noqa: F401

    return d


def test_battery_has_at_least_60_distinct_cases():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 60
    assert len({tuple(c.argv) for c in CASES}) == len(CASES)


@pytest.mark.skipif(sys.platform != "linux", reason="fork, /proc and RLIMIT_AS: Linux only")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(case, files):
    code, out, err, wall, peak = run_case(case, files)
    where = f"{case.id}: exit {code} in {wall:.2f} s, {peak / 2**20:.0f} MiB; stderr {err[-600:]!r}"
    assert wall < LIMIT_S, where
    assert peak < LIMIT_BYTES - CLI_IMPORT_BYTES, where
    if case.answer is not None:
        assert code == 0, where
        assert case.answer(out, err), f"{where}; stdout {out[-600:]!r}"
        return
    assert code == 2 and out == "", where
    assert err.count("\n") == 1 and err.endswith("\n"), where
    assert re.match(rf"planner: error: {case.field}=", err), where
    assert len(err.encode()) <= MAX_LINE_BYTES, where
