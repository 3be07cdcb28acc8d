"""``planner sweep --backend ray --address HOST:PORT`` joins a Ray cluster that is already running.

The cluster is a head node started here with ``ray start`` on loopback (2 CPUs, token
authentication off for the test), in its own session so that exactly its processes are
stopped afterwards.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RAY_BIN = Path(sys.executable).with_name("ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head(tmp_path):
    import ray  # noqa: F401  (Ray is in the test extra: fail here, do not skip, when it is missing)

    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    current = Path("/tmp/ray/ray_current_cluster")
    before = current.read_text() if current.exists() else None
    head = subprocess.Popen(
        [
            str(RAY_BIN),
            "start",
            "--head",
            "--port",
            str(port),
            "--num-cpus",
            "2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, err = head.communicate(timeout=60)
        assert head.returncode == 0, err.decode()[-2000:]
        yield f"127.0.0.1:{port}", env
    finally:
        # `ray start` leaves its daemons in the session it was started in: stop exactly those
        out = subprocess.run(["ps", "-o", "pid=", "-s", str(head.pid)], capture_output=True, text=True).stdout
        for pid in map(int, out.split()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if current.exists() and current.read_text().strip().endswith(f":{port}"):
            if before is None:
                current.unlink()
            else:
                current.write_text(before)
        time.sleep(0.5)


def test_join_an_existing_cluster(ray_head, tmp_path):
    address, env = ray_head
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "planner",
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
            "--address",
            address,
            "--json",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    assert (d["backend"], d["total"], d["ok"]) == ("ray", 2, 2)
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 2
