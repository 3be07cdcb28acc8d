"""``planner sweep --backend ray`` on a local Ray with 2 CPUs: same results as local, a killed worker retried.

Ray is in the ``test`` extra, so these tests run in CI; without Ray installed they fail (they
are not skipped).
"""

import functools
import json
import os
import signal
import sys
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a local Ray on loopback (see ray_backend)
import ray  # noqa: E402

from planner import cli
from planner.sweep import grid_from_mapping, run_sweep
from planner.sweep.solve import solve_case

SMALL = {"models": "llama3-8b,gpt3-5b", "gpus": "8,16,32", "global_batch": 64, "seq": 2048, "clusters": "h100-sxm"}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # this test module is not importable there
    yield
    ray.shutdown()


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def kill_own_worker_once(marker_dir: str, case):
    """Solve ``case``; the first time a 16-GPU case starts, SIGKILL the Ray worker running it."""
    marker = Path(marker_dir) / f"{case.id}.started"
    if case.gpus == 16 and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return solve_case(case)


def test_ray_backend_gives_the_local_backend_plans(local_ray, tmp_path):
    cases = grid_from_mapping(SMALL).cases()
    run_sweep(cases, tmp_path / "local", workers=2, progress=False)
    s = run_sweep(cases, tmp_path / "ray", backend="ray", progress=False)
    assert (s.total, s.ran, s.backend) == (6, 6, "ray")
    plan = lambda rs: {r["case_id"]: (r["status"], r["estimate"] and r["estimate"]["config"]) for r in rs}
    assert plan(records(tmp_path / "ray")) == plan(records(tmp_path / "local"))


def test_killed_ray_worker_is_retried_and_every_case_runs_once(local_ray, tmp_path):
    cases = grid_from_mapping(SMALL).cases()
    solve = functools.partial(kill_own_worker_once, str(tmp_path))
    s = run_sweep(cases, tmp_path / "out", backend="ray", progress=False, solve=solve)
    assert (s.total, s.ok, s.crashed) == (6, 6, 0)
    rs = records(tmp_path / "out")
    assert sorted(r["case_id"] for r in rs) == sorted(c.id for c in cases)  # each exactly once
    killed = {p.stem for p in tmp_path.glob("*.started")}
    assert len(killed) == 2  # both 16-GPU cases lost their worker once
    assert all(r["attempts"] == (2 if r["case_id"] in killed else 1) for r in rs)


def test_cli_backend_ray(local_ray, tmp_path, capsys):
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
            "--backend",
            "ray",
            "--json",
            "--no-progress",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and (d["backend"], d["ok"]) == ("ray", 2)


def test_address_needs_ray_backend(capsys, tmp_path):
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
            "--out",
            str(tmp_path),
            "--address",
            "auto",
        ]
    )
    assert code == 2 and "address='auto': must be given only with --backend ray" in capsys.readouterr().err
