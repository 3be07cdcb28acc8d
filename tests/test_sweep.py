"""``planner sweep``: grid parsing, result schema, append-as-you-go files, resume after kill -9, bad input."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from planner import cli
from planner.sweep import COLUMNS, SCHEMA_VERSION, Case, ResultStore, grid_from_mapping, run_sweep
from planner.sweep.schema import NAMES, STATUSES, parse_cell

ROOT = Path(__file__).resolve().parent.parent
SMALL = {"models": "llama3-8b,gpt3-5b", "gpus": "8,16", "global_batch": 64, "seq": 2048, "clusters": "h100-sxm"}


def rows(out: Path) -> tuple[list[dict], list[dict]]:
    jsonl = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    with open(out / "results.csv", newline="") as f:
        table = list(csv.DictReader(f))
    return jsonl, table


# --------------------------------------------------------------------------- grid
def test_grid_is_the_product_of_its_axes_models_outermost():
    cases = grid_from_mapping({**SMALL, "seq": [2048, 4096]}).cases()
    assert len(cases) == 2 * 2 * 2
    assert [c.model for c in cases[:4]] == ["llama3-8b"] * 4
    assert cases[0] == Case(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=2048)


def test_case_ids_are_deterministic_and_distinct():
    a, b = grid_from_mapping(SMALL).cases(), grid_from_mapping(dict(SMALL)).cases()
    assert [c.id for c in a] == [c.id for c in b]
    assert len({c.id for c in a}) == len(a)
    # the id is a hash of the inputs: fixed text, the same on every machine and Python
    assert Case(model="llama3-8b", cluster="h100-sxm", gpus=8, global_batch=64, seq=2048).id == "83246fb951839058"


def test_hyphenated_keys_scalars_and_repeats_are_accepted():
    g = grid_from_mapping(
        {
            "models": ["llama3-8b"],
            "gpus": [8, 8, "16"],
            "global-batch": "64",
            "seq": 2048,
            "clusters": "h100-sxm",
            "nic-gbps": "25,50",
        }
    )
    assert g.gpus == (8, 16) and g.global_batch == (64,) and g.nic_gbps == (25.0, 50.0)
    assert len(g.cases()) == 4


def test_whatifs_change_the_cluster_of_a_case():
    case = Case(
        model="llama3-8b",
        cluster="sg2262-like",
        gpus=16,
        global_batch=64,
        seq=2048,
        dma_engines=8,
        nvlink_gbps=900,
        hbm_gib=40,
    )
    _, cl, _ = case.problem()
    assert cl.intra_link.bw_bytes_per_s == 900e9 and cl.device.hbm_bytes == 40 * 2**30
    assert all(e.count == 8 for e in cl.device.dma_engines if e.scopes)


@pytest.mark.parametrize(
    "data, message",
    [
        ({**SMALL, "gpus": "8,x"}, "gpus='x': must be positive integers"),
        ({**SMALL, "gpus": "8,,16"}, "gpus='8,,16': must be positive integers"),
        ({**SMALL, "models": "nosuch"}, "model='nosuch': must be a preset"),
        ({**SMALL, "dtype": "int4"}, "dtype='int4': must be some of bf16, fp16, fp8"),
        ({**SMALL, "nic_gbps": -1}, "nic_gbps=-1: must be positive numbers"),
        ({**SMALL, "warp": 2}, "warp=2: must be a grid key"),
        ({**SMALL, "time_limit_s": "5,10"}, "time_limit_s='5,10': must be one positive number of seconds"),
        ({k: v for k, v in SMALL.items() if k != "seq"}, "seq=None: must be given"),
    ],
)
def test_bad_grid_values_name_the_key(data, message):
    with pytest.raises(Exception) as e:
        grid_from_mapping(data)
    assert str(e.value).startswith(message)


# --------------------------------------------------------------------------- bad input on the CLI
@pytest.mark.parametrize(
    "argv, field",
    [
        (
            [
                "--models",
                "llama3-8b",
                "--gpus",
                "8,abc",
                "--global-batch",
                "64",
                "--seq",
                "2048",
                "--clusters",
                "h100-sxm",
            ],
            "gpus='abc'",
        ),
        (
            [
                "--models",
                "llama3-8b",
                "--gpus",
                "8",
                "--global-batch",
                "64",
                "--seq",
                "2048",
                "--clusters",
                "h100-sxm",
                "--backend",
                "mpi",
            ],
            "backend='mpi'",
        ),
        (
            ["--models", "llama3-8b", "--gpus", "8", "--global-batch", "64", "--seq", "2048", "--clusters", "nosuch"],
            "cluster='nosuch'",
        ),
        (["--gpus", "8"], "models=None"),
    ],
)
def test_bad_sweep_flags_exit_2_with_one_line(capsys, tmp_path, argv, field):
    code = cli.main(["sweep", *argv, "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"planner: error: {field}")


@pytest.mark.parametrize(
    "text, field",
    [
        ("models: [llama3-8b\n", "grid="),  # not YAML
        ("- llama3-8b\n", "grid="),  # not a mapping
        ("models: llama3-8b\ngpus: [8]\nglobal_batch: 64\nseq: 2048\nclusters: h100-sxm\nbogus: 1\n", "bogus=1"),
    ],
)
def test_bad_grid_file_exits_2_with_one_line(capsys, tmp_path, text, field):
    f = tmp_path / "grid.yaml"
    f.write_text(text)
    code = cli.main(["sweep", "--grid", str(f), "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"planner: error: {field}")


def test_missing_out_exits_2(capsys):
    code = cli.main(
        [
            "sweep",
            "--models",
            "llama3-8b",
            "--gpus",
            "8",
            "--global-batch",
            "64",
            "--seq",
            "2048",
            "--clusters",
            "h100-sxm",
        ]
    )
    assert code == 2 and "out=None" in capsys.readouterr().err


# --------------------------------------------------------------------------- schema
def test_schema_columns_are_stable():
    # Appending a column means a new SCHEMA_VERSION; renaming or removing one is not allowed.
    assert SCHEMA_VERSION == 8
    assert list(NAMES) == [
        "case_id",
        "model",
        "cluster",
        "gpus",
        "global_batch",
        "seq",
        "dtype",
        "dma_engines",
        "nvlink_gbps",
        "nic_gbps",
        "hbm_gib",
        "model_params",
        "status",
        "reason",
        "tp",
        "pp",
        "dp",
        "ep",
        "cp",
        "vp",
        "mb",
        "sp",
        "zero",
        "recompute",
        "recompute_layers",
        "bucket_mb",
        "chunks",
        "layers_per_stage",
        "step_time_s",
        "graph_step_time_s",
        "tokens_per_s",
        "mfu",
        "hfu",
        "model_tflops_per_gpu",
        "peak_memory_bytes",
        "hbm_bytes",
        "fits",
        "compute_s",
        "bubble_s",
        "exposed_comm_s",
        "solver",
        "solve_status",
        "solve_time_s",
        "objective_s",
        "bound_s",
        "gap",
        "case_time_s",
        "attempts",
        "schema_version",
        "finished_at",
        "step_time_band_lo_s",
        "step_time_band_hi_s",
        "dma_assignment",
        "critical_strategy",
        "t_comm_s",
        "t_compute_s",
        "critical_holds",
        "framework",
        "grad_dtype",
        "band_notes",
        "analytic_step_time_s",
        "stack",
        "optimizer_offload_fraction",
        "objective",
        "train_tokens",
        "objective_candidates",
        "days",
        "goodput",
        "checkpoint_interval_s",
        "checkpoint_interval_steps",
        "lost_checkpoint_s",
        "lost_work_s",
        "lost_restart_s",
        "usd",
        "usd_per_million_tokens",
        "kwh",
        "j_per_token",
    ]
    assert all(c.doc and c.type in ("str", "int", "float", "bool") for c in COLUMNS)


def test_schema_is_printed_for_users(capsys):
    assert cli.main(["sweep", "--schema"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| column | type | group | meaning |") and all(f"| `{n}` |" in out for n in NAMES)


def test_framework_and_gradient_dtype_are_axes_that_keep_old_case_ids(tmp_path):
    base = {"models": "llama3-8b", "gpus": 8, "global_batch": 64, "seq": 2048, "clusters": "h100-sxm"}
    # the id a case had before framework and grad_dtype were axes (computed at 41159bf): the defaults,
    # given or not, keep it
    assert grid_from_mapping(base).cases()[0].id == "83246fb951839058"
    assert (
        grid_from_mapping({**base, "framework": "megatron", "grad_dtype": "fp32"}).cases()[0].id == "83246fb951839058"
    )
    grid = grid_from_mapping({**base, "framework": "megatron,fsdp2", "grad_dtype": "fp32,bf16"})
    cases = grid.cases()
    assert len({c.id for c in cases}) == 4 and {(c.framework, c.grad_dtype) for c in cases} == {
        ("megatron", "fp32"),
        ("megatron", "bf16"),
        ("fsdp2", "fp32"),
        ("fsdp2", "bf16"),
    }
    summary = run_sweep(cases, tmp_path, workers=1, progress=False)
    assert summary.ok == 4
    jsonl, _ = rows(tmp_path)
    from costmodel.spec.plan import ParallelConfig
    from costmodel.frameworks.rules import check

    for r in jsonl:  # each plan is its framework's, with the gradient dtype of the case
        c = ParallelConfig.from_dict(r["estimate"]["config"])
        assert (c.framework, c.grad_dtype) == (r["framework"], r["grad_dtype"])
        check(c)
        if r["framework"] == "fsdp2":
            assert r["zero"] in (0, 2, 3) and r["recompute"] in ("none", "op_sac", "full")
    with pytest.raises(Exception, match="framework='jax'"):
        grid_from_mapping({**base, "framework": "jax"})


def test_results_follow_the_schema_in_both_files(tmp_path):
    # 1 GPU: an 8B model fits only with optimizer CPU offload (search.offload_choice); a 70B model not even so,
    # recorded with its reason
    grid = grid_from_mapping({**SMALL, "models": "llama3-8b,llama3-70b", "gpus": "8,1"})
    summary = run_sweep(grid.cases(), tmp_path, workers=1, progress=False)
    assert (summary.total, summary.ran, summary.ok, summary.infeasible) == (4, 4, 3, 1)
    jsonl, table = rows(tmp_path)
    assert [list(r)[:-1] for r in jsonl] == [list(NAMES)] * 4 and all(list(r)[-1] == "estimate" for r in jsonl)
    assert [list(r) for r in table] == [list(NAMES)] * 4
    for j, c in zip(jsonl, table):
        assert j["status"] in STATUSES and j["schema_version"] == SCHEMA_VERSION
        assert {k: parse_cell(k, v) for k, v in c.items()} == {k: j[k] for k in NAMES}  # CSV == JSONL
        assert j["stack"] == "mcore-2025"  # the stack the numbers assume, for every case that loaded
        if j["status"] == "ok":
            assert j["fits"] is True and j["step_time_s"] > 0 and 0 < j["mfu"] < 1
            assert j["tp"] * j["pp"] * j["dp"] * j["cp"] == j["gpus"] and j["reason"] is None
            assert j["estimate"]["step_time_s"] == j["step_time_s"] and j["solve_status"]
            assert j["graph_step_time_s"] > 0
            assert (j["optimizer_offload_fraction"] > 0) == (j["model"] == "llama3-8b" and j["gpus"] == 1) or (
                j["model"] == "llama3-70b"
            )  # 70B on 8 GPUs may need it too
            assert j["estimate"]["config"].get("optimizer_offload_fraction", 0.0) == j["optimizer_offload_fraction"]
        else:
            assert j["reason"] and j["tp"] is None and j["estimate"] is None and j["optimizer_offload_fraction"] is None


def test_a_case_that_raises_is_recorded_and_the_sweep_goes_on(tmp_path):
    spec = tmp_path / "broken.yaml"
    spec.write_text(yaml.safe_dump({"layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 256, "vocab": 100}))
    cases = grid_from_mapping({**SMALL, "models": f"llama3-8b,{spec}"}).cases()
    spec.write_text("layers: [")  # the file breaks after the grid was read
    s = run_sweep(cases, tmp_path / "out", workers=2, progress=False)
    assert (s.total, s.ok, s.error) == (4, 2, 2)
    jsonl, _ = rows(tmp_path / "out")
    errors = [r for r in jsonl if r["status"] == "error"]
    assert all("valid JSON or YAML" in r["reason"] and "\n" not in r["reason"] for r in errors)


def test_rerun_skips_finished_cases_and_adds_new_ones(tmp_path):
    run_sweep(grid_from_mapping(SMALL).cases(), tmp_path, workers=1, progress=False)
    s = run_sweep(grid_from_mapping({**SMALL, "gpus": "8,16,32"}).cases(), tmp_path, workers=1, progress=False)
    assert (s.total, s.resumed, s.ran) == (6, 4, 2)
    jsonl, table = rows(tmp_path)
    assert len(jsonl) == len(table) == len({r["case_id"] for r in jsonl}) == 6


def test_store_repairs_partial_lines_and_a_csv_behind_the_jsonl(tmp_path):
    run_sweep(grid_from_mapping(SMALL).cases(), tmp_path, workers=1, progress=False)
    jsonl, table = rows(tmp_path)
    lines = (tmp_path / "results.csv").read_text().splitlines(keepends=True)
    (tmp_path / "results.csv").write_text("".join(lines[:2]) + lines[2][:30])  # killed between the two files
    with open(tmp_path / "results.jsonl", "a") as f:
        f.write(json.dumps(jsonl[0]) + "\n" + '{"case_id": "x", "mo')  # a repeat and a partial line
    assert ResultStore(tmp_path).open() == {r["case_id"] for r in jsonl}
    again, table2 = rows(tmp_path)
    assert again == jsonl and sorted(r["case_id"] for r in table2) == sorted(r["case_id"] for r in table)


def test_progress_bar_on_stderr(capsys, tmp_path):
    code = cli.main(
        [
            "sweep",
            "--models",
            "llama3-8b",
            "--gpus",
            "8,16",
            "--global-batch",
            "64",
            "--seq",
            "2048",
            "--clusters",
            "h100-sxm",
            "--out",
            str(tmp_path),
            "--workers",
            "1",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0 and "2 cases: 2 ok" in out
    last = err.strip().splitlines()[-1]
    assert last.startswith("sweep 2/2 [") and "cases/s" in last and "ETA" in last


def test_json_summary_and_grid_file_keys(capsys, tmp_path):
    f = tmp_path / "grid.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "models": ["llama3-8b"],
                "gpus": [8],
                "global-batch": 64,
                "seq": 2048,
                "clusters": "h100-sxm",
                "out": str(tmp_path / "o"),
                "workers": 1,
            }
        )
    )
    code = cli.main(["sweep", "--grid", str(f), "--gpus", "8,16", "--json", "--no-progress"])
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert code == 0 and err == ""
    assert (d["total"], d["ok"], d["workers"]) == (2, 2, 1) and d["out_dir"] == str(tmp_path / "o")


# --------------------------------------------------------------------------- kill -9 and resume
SLOW_SOLVE = """
import time
from planner.sweep.solve import solve_case

def slow(case):
    time.sleep(0.25)
    return solve_case(case)
"""


def test_kill_9_mid_sweep_then_resume_runs_every_case_exactly_once(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        yaml.safe_dump(
            {
                "models": ["llama3-8b", "gpt3-5b"],
                "gpus": [8, 16, 32],
                "global_batch": [64, 128],
                "seq": 2048,
                "clusters": ["h100-sxm"],
            }
        )
    )
    (tmp_path / "slowsolve.py").write_text(SLOW_SOLVE)
    out = tmp_path / "out"
    driver = textwrap.dedent(f"""
        from planner.sweep import grid_from_mapping, load_grid_file, run_sweep
        from slowsolve import slow
        cases = grid_from_mapping(load_grid_file({str(grid)!r})).cases()
        run_sweep(cases, {str(out)!r}, workers=2, solve=slow, progress=False)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.Popen([sys.executable, "-c", driver], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            p = out / "results.jsonl"
            if p.exists() and p.read_text().count("\n") >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the sweep ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: its workers must notice and exit
        proc.wait()
        done_before = (out / "results.jsonl").read_text().count("\n")
        assert 3 <= done_before < 12
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail("pool workers outlived the killed driver")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    r = subprocess.run(
        [sys.executable, "-m", "planner", "sweep", "--grid", str(grid), "--out", str(out), "--workers", "2", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["total"] == 12 and summary["resumed"] >= done_before and summary["ran"] == 12 - summary["resumed"]
    jsonl, table = rows(out)
    ids = {c.id for c in grid_from_mapping(yaml.safe_load(grid.read_text())).cases()}
    assert sorted(r["case_id"] for r in jsonl) == sorted(ids)
    assert sorted(r["case_id"] for r in table) == sorted(ids)


# --------------------------------------------------------------------------- a worker that dies
DYING_SOLVE = """
import os
from planner.sweep.solve import solve_case

def die_on_16(case):
    if case.gpus == 16:
        os._exit(3)  # the worker process dies mid-case
    return solve_case(case)
"""


def test_local_worker_death_is_retried_then_recorded(tmp_path):
    (tmp_path / "dying.py").write_text(DYING_SOLVE)
    out = tmp_path / "out"
    driver = textwrap.dedent(f"""
        from planner.sweep import grid_from_mapping, run_sweep
        from dying import die_on_16
        s = run_sweep(grid_from_mapping({SMALL!r}).cases(), {str(out)!r}, workers=2, progress=False,
                      solve=die_on_16, max_attempts=2)
        print(s.total, s.ok, s.crashed)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    r = subprocess.run([sys.executable, "-c", driver], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["4", "2", "2"]
    jsonl, _ = rows(out)
    dead = [r for r in jsonl if r["status"] == "crashed"]
    assert all(r["gpus"] == 16 and r["attempts"] == 2 and "died" in r["reason"] for r in dead)
    assert len({r["case_id"] for r in jsonl}) == 4
