"""MoE token dropping (Megatron-Core --moe-expert-capacity-factor, --moe-pad-expert-input-to-capacity; issue 39's load
balancing with a capacity factor, issue 42 item 2's Mixtral-8x22B): charged, refused where Megatron refuses it, emitted
and read back."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from costmodel.api import evaluate
from costmodel.physics.comm.ep_dispatch import ep_alltoall_bytes
from costmodel.physics.kernels.compute import layer_ops
from costmodel.physics.kernels.moe_load import moe_imbalance
from costmodel.spec.errors import SpecError
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner.cli import main

MIXTRAL = load_model("mixtral-8x22b")  # 8 experts, top-2, an auxiliary-loss router
DROP = replace(MIXTRAL, moe_capacity_factor=1.0)
PAD = replace(DROP, moe_pad_to_capacity=True)
H100 = load_cluster("h100-sxm").with_gpus(256)
W = Workload(global_batch=1024, seq_len=4096)
EP8 = ParallelConfig(tp=4, pp=4, dp=16, ep=8, vp=7, mb=1, zero=1, sp=True, recompute="none", bucket_bytes=40e6)
FLAGS = "--model mixtral-8x22b --cluster h100-sxm --gpus 256 --global-batch 1024 --seq 4096 --tp 4 --pp 4 --ep 8 --vp 7"


def test_a_capacity_caps_the_busiest_rank_and_padding_runs_every_expert_at_it():
    assert moe_imbalance(MIXTRAL, 8, 1e6) > 1.3  # 8 experts on 8 ranks: one expert's skew is a rank's
    assert moe_imbalance(DROP, 8, 1e6) == 1.0
    assert moe_imbalance(replace(MIXTRAL, moe_capacity_factor=2.0), 8, 1e6) == moe_imbalance(MIXTRAL, 8, 1e6)
    padded = replace(MIXTRAL, moe_capacity_factor=1.25, moe_pad_to_capacity=True)
    assert moe_imbalance(padded, 1, 1e6) == moe_imbalance(padded, 8, 1e6) == 1.25  # padding costs without EP too


def test_padding_sends_the_padded_rows_over_alltoall_and_drops_the_host_sync():
    base = ep_alltoall_bytes(MIXTRAL, 4096, 4, 8, 8)
    assert ep_alltoall_bytes(replace(PAD, moe_capacity_factor=1.5), 4096, 4, 8, 8) == pytest.approx(1.5 * base)
    assert ep_alltoall_bytes(DROP, 4096, 4, 8, 8) == base  # dropping alone sends at most the routed rows

    def names(m):
        return {o.name for o in layer_ops(m, H100.device, W, EP8, True)}

    assert "tokens_per_expert_sync" in names(MIXTRAL) and "tokens_per_expert_sync" in names(DROP)
    assert "tokens_per_expert_sync" not in names(PAD)  # static shapes: cuda_sync_point stays "no_sync"


def test_the_ep_plan_is_faster_when_no_rank_waits_for_the_busiest_expert():
    dropless, padded = (evaluate(m, H100, W, EP8).step_time_s for m in (MIXTRAL, PAD))
    assert padded < 0.9 * dropless
    more = evaluate(replace(PAD, moe_capacity_factor=1.5), H100, W, EP8).step_time_s
    assert more > padded  # half again as many padded token-slots


def test_refusals_are_one_line():
    with pytest.raises(SpecError, match="moe_pad_to_capacity"):
        replace(MIXTRAL, moe_pad_to_capacity=True)
    with pytest.raises(SpecError, match="dense model"):
        replace(load_model("llama3-8b"), moe_capacity_factor=1.0)
    with pytest.raises(SpecError, match="at most experts / topk = 4"):  # 1e308 padded: a traceback before
        replace(PAD, moe_capacity_factor=1e308)


def test_cli_refuses_padding_without_a_capacity(capsys):
    assert main(["evaluate", *FLAGS.split(), "--moe-pad-to-capacity"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "moe_pad_to_capacity" in err[0]


def _step(out: str) -> float:
    return float(re.search(r"step time\s+([\d.]+) s", out).group(1))


def test_flags_are_emitted_and_read_back_to_the_same_step(capsys, tmp_path):
    assert main(["evaluate", *FLAGS.split(), "--moe-capacity-factor", "1", "--moe-pad-to-capacity"]) == 0
    direct = _step(capsys.readouterr().out)
    args = [*FLAGS.split(), "--moe-capacity-factor", "1", "--moe-pad-to-capacity", "--emit", "megatron"]
    assert main(["evaluate", *args]) == 0
    out = capsys.readouterr().out
    line = " ".join(ln.rstrip("\\ ") for ln in out.splitlines() if ln.startswith("--"))
    assert "--moe-expert-capacity-factor 1.0" in line and "--moe-pad-expert-input-to-capacity" in line
    (tmp_path / "line.txt").write_text(line)
    read = ["--megatron-args", f"@{tmp_path / 'line.txt'}", "--model", "mixtral-8x22b", "--cluster", "h100-sxm"]
    assert main(["evaluate", *read, "--gpus", "256"]) == 0
    assert _step(capsys.readouterr().out) == pytest.approx(direct, rel=1e-3)
    dropless = line.replace("--moe-expert-capacity-factor 1.0", "").replace("--moe-pad-expert-input-to-capacity", "")
    (tmp_path / "line.txt").write_text(dropless)
    assert main(["evaluate", *read, "--gpus", "256"]) == 0
    assert _step(capsys.readouterr().out) > 1.1 * direct  # the line without them runs dropless
