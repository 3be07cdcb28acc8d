"""A mistake in the inputs ends in one stderr line naming the field, the value and what is allowed.

A refusal exits 2 with nothing on stdout; what runs but not as asked exits 0 with one ``planner: warning:``
line. Covered: headroom at or above the device HBM (the CLI and the API alike), contradicting flags
(``--zero 3 --no-zero3``, ``--sp`` without tensor parallelism), names too long and model files that are not
text, an MoE family with no experts, HBM beyond any device, unbounded ``--chunks`` and ``--top``, chunk
counts the framework cannot run, baseline flags that change nothing, ``--plot`` to a directory, and an
unreachable Ray address (Ray's own retry lines kept off stderr).
"""

import json

import pytest

import planner
from costmodel.spec.errors import SpecError
from costmodel.spec.units import GiB
from planner import cli
from search.problem import Limits

SMALL = ["--model", "llama3-8b", "--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]


def run(capsys, argv):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, argv, field):
    code, out, err = run(capsys, argv)
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith(f"planner: error: {field}="), err
    return err


# --------------------------------------------------------------------------- headroom
@pytest.mark.parametrize("gib", ["100", "80"])
def test_headroom_at_or_above_hbm_is_refused(capsys, gib):
    err = refused(capsys, ["recommend", *SMALL, "--headroom-gib", gib], "headroom_gib")
    assert "below the device HBM 79.2 GiB" in err and "usable" not in err


def test_headroom_at_or_above_hbm_is_refused_by_the_api():
    with pytest.raises(SpecError) as e:
        planner.recommend(
            "llama3-8b", "h100-sxm", gpus=8, global_batch=64, seq=4096, limits=Limits(headroom_bytes=100 * GiB)
        )
    assert e.value.field == "headroom_gib" and e.value.value == 100


# --------------------------------------------------------------------------- contradicting flags
def test_zero3_with_no_zero3_is_refused(capsys):
    err = refused(capsys, ["recommend", *SMALL, "--zero", "3", "--no-zero3"], "zero")
    assert "--no-zero3" in err


@pytest.mark.parametrize("command", ["evaluate", "explain"])
@pytest.mark.parametrize("tp", [[], ["--tp", "1"]])
def test_sp_without_tensor_parallelism_is_refused(capsys, command, tp):
    err = refused(capsys, [command, *SMALL, *tp, "--sp"], "sp")
    assert "tp=1" in err


# --------------------------------------------------------------------------- bounded, named inputs
LONG = "x" * 300
PROBLEM = ["--cluster", "h100-sxm", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]


def _one_line_error(capsys, argv, *needles):
    code, out, err = run(capsys, argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("planner: error: "), (code, err)
    assert len(err) < 1000 and all(n in err for n in needles), err
    return err


def test_long_names_are_a_clean_error_not_a_traceback(capsys):
    _one_line_error(capsys, ["evaluate", "--model", LONG, *PROBLEM], "model=", "(302 characters)")
    _one_line_error(
        capsys,
        ["evaluate", "--model", "llama3-8b", "--cluster", LONG + ".json", *PROBLEM[2:]],
        "cluster=",
        "characters)",
    )


def test_a_binary_model_file_error_names_the_file(capsys, tmp_path):
    f = tmp_path / "weights.json"
    f.write_bytes(bytes(range(128, 256)) * 8)
    _one_line_error(capsys, ["evaluate", "--model", str(f), *PROBLEM], str(f), "UTF-8 text")


def test_a_long_model_type_is_cut_in_messages(capsys, tmp_path):
    f = tmp_path / "config.json"
    f.write_text(
        json.dumps(
            {
                "model_type": "q" * 100_000,
                "num_hidden_layers": 4,
                "hidden_size": 512,
                "num_attention_heads": 8,
                "vocab_size": 1000,
                "intermediate_size": 1024,
            }
        )
    )
    code, out, err = run(capsys, ["evaluate", "--model", str(f), *PROBLEM])
    assert code == 0 and "(100,000 characters)" in err and len(err) < 1000 and len(out) < 20_000


def test_zero_experts_in_an_moe_family_is_refused(capsys, tmp_path):
    f = tmp_path / "config.json"
    f.write_text(
        json.dumps(
            {
                "model_type": "mixtral",
                "num_hidden_layers": 4,
                "hidden_size": 512,
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "vocab_size": 1000,
                "intermediate_size": 1024,
                "num_local_experts": 0,
                "num_experts_per_tok": 2,
            }
        )
    )
    _one_line_error(capsys, ["evaluate", "--model", str(f), *PROBLEM], "num_local_experts=0", "mixtral")


def test_hbm_beyond_any_device_is_refused(capsys, tmp_path):
    from costmodel.spec.presets import preset_info

    d = preset_info("clusters", "h100-sxm")
    d["device"]["hbm_gib"] = 1e30
    f = tmp_path / "cluster.json"
    f.write_text(json.dumps(d))
    _one_line_error(capsys, ["evaluate", "--model", "llama3-8b", "--cluster", str(f), *PROBLEM[2:]], "hbm_gib")


def test_chunks_and_top_are_bounded(capsys):
    _one_line_error(capsys, ["evaluate", "--model", "llama3-8b", *PROBLEM, "--chunks", "1000000"], "chunks=1000000")
    _one_line_error(capsys, ["recommend", "--model", "llama3-8b", *PROBLEM, "--top", "100000"], "top=100000")


def test_chunks_the_framework_cannot_run_are_not_silent(capsys):
    code, out, err = run(capsys, ["evaluate", "--model", "llama3-8b", *PROBLEM, "--chunks", "4", "--json"])
    assert code == 0 and json.loads(out)["config"]["chunks"] == 4
    assert err.startswith("planner: warning: chunks=4") and err.count("\n") == 1


def test_baseline_flags_that_change_nothing_are_named(capsys):
    line = "--tensor-model-parallel-size 8 --pipline-model-parallel-size 1 --micro-batch-size 1 --sequence-parallel"
    code, out, err = run(capsys, ["recommend", "--model", "llama3-8b", *PROBLEM, "--tp", "8", "--baseline", line])
    assert code == 0 and "--pipline-model-parallel-size" in err and "--micro-batch-size" not in err
    assert "--tensor-model-parallel-size" not in err


def test_plot_to_a_directory_is_refused_before_the_search(capsys, tmp_path):
    _one_line_error(
        capsys,
        [
            "recommend",
            "--mode",
            "infer",
            "--model",
            "llama3-8b",
            *PROBLEM[:4],
            "--input-len",
            "1000",
            "--output-len",
            "100",
            "--plot",
            str(tmp_path),
        ],
        "plot=",
    )


def test_an_unreachable_ray_address_is_one_line(capfd, monkeypatch):
    # Ray's C++ client retries for ~20 s and writes a line a second to file descriptor 2
    import os
    import sys
    import types
    from planner.sweep import ray_backend

    def init(**kw):
        os.write(2, b"[gcs_client.cc:210] Failed to get cluster ID from GCS server\n" * 3)
        raise ConnectionError("Failed to connect to Ray cluster at 10.255.255.1:6379")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    with pytest.raises(SpecError, match="address='10.255.255.1:6379'"):
        ray_backend.connect("10.255.255.1:6379")
    assert "gcs_client" not in capfd.readouterr().err


def _fake_ray(monkeypatch, init):
    import sys
    import types

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)


def test_a_closed_ray_port_is_refused_before_ray_init(monkeypatch):
    # issue 42 item 3: `sweep --backend ray --address 127.0.0.1:1` hung with no output (Ray's GCS client retries)
    from planner.sweep import ray_backend

    def init(**kw):
        raise AssertionError("ray.init called for an address where nothing listens")

    _fake_ray(monkeypatch, init)
    with pytest.raises(SpecError, match=r"address='127.0.0.1:1': .*nothing accepts a connection there"):
        ray_backend.connect("127.0.0.1:1")


def test_joining_ray_is_bounded_in_time(monkeypatch):
    # something listens (the probe passes) but never answers as Ray: ray.init is interrupted at JOIN_TIMEOUT_S
    import socket
    import time

    from planner.sweep import ray_backend

    def init(**kw):
        t = time.monotonic()
        while time.monotonic() - t < 30:
            time.sleep(0.01)

    _fake_ray(monkeypatch, init)
    monkeypatch.setattr(ray_backend, "JOIN_TIMEOUT_S", 0.5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        address = f"127.0.0.1:{s.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(SpecError, match=r"address=.*no cluster joined within 0.5 s"):
            ray_backend.connect(address)
    assert time.monotonic() - t0 < 5


def test_ray_not_installed_is_one_line(capsys, monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    argv = ["sweep", "--models", "llama3-8b", "--clusters", "h100-sxm", "--gpus", "8", "--out", str(tmp_path)]
    argv += ["--global-batch", "64", "--seq", "4096", "--backend", "ray", "--address", "127.0.0.1:1"]
    err = refused(capsys, argv, "backend")
    assert "pip install" in err
