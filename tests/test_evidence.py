"""Issue 38: every component of a prediction carries its evidence (measured, interpolated, extrapolated, fitted,
assumed), ``evaluate --json`` shows it per component, the text output in one line, and the band widens where a
constant no measured run of the device has tested."""

import json
from dataclasses import replace

from costmodel.api import evaluate
from costmodel.spec.plan import ParallelConfig
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from costmodel.trust.attach import attach
from costmodel.trust.evidence import KINDS, constant_evidence, step_evidence, widening_log_sd
from planner import cli

ARGS = ["--model", "llama3-70b", "--gpus", "64", "--global-batch", "128", "--seq", "4096", "--tp", "8", "--pp", "2"]


def _estimate(cluster_name: str, **cluster_changes):
    m, c = load_model("llama3-70b"), load_cluster(cluster_name).with_gpus(64)
    if cluster_changes:
        c = replace(c, **cluster_changes)
    w = Workload(global_batch=128, seq_len=4096)
    est = evaluate(m, c, w, ParallelConfig(tp=8, pp=2, dp=4, mb=1, sp=True))
    return m, c, w, est


def test_evaluate_json_carries_evidence_for_every_component(capsys):
    assert cli.main(["evaluate", *ARGS, "--cluster", "h100-sxm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ev = out["evidence"]
    assert set(out["breakdown"]) | {"memory"} == set(ev)
    assert all(e["kind"] in KINDS and e["basis"] for e in ev.values())
    gemm = ev["compute_s"]["parts"]["gemm"]
    assert gemm["kind"] == "fitted" and "47 Hopper" in gemm["basis"] and gemm["share"] > 0.5
    assert out["evidence_summary"].startswith("evidence: fitted: gemm")


def test_text_output_summarises_the_evidence_in_one_line(capsys):
    assert cli.main(["evaluate", *ARGS, "--cluster", "b200"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("evidence:")]
    assert len(lines) == 1 and "gemm*" in lines[0] and "untested" in lines[0]


def test_blackwell_constants_carried_over_from_hopper_say_so_and_widen_the_band():
    ev_b = constant_evidence(load_cluster("b200"), "device.gemm_efficiency")
    assert ev_b.kind == "assumed" and ev_b.untested and "Hopper" in ev_b.basis
    m, c, w, est = _estimate("b200")
    ev = step_evidence(m, c, w, est)
    assert widening_log_sd(ev) > 0.1  # compute is most of the step and rests on an untested constant
    banded = attach(est, m, c, w)
    assert any("no measured run of this device has tested" in n for n in banded.band_notes)
    # the same plan on H100, whose constants the runs fitted, is not widened
    m, c, w, est = _estimate("h100-sxm")
    assert widening_log_sd(step_evidence(m, c, w, est)) == 0.0
    assert not any("has tested" in n for n in attach(est, m, c, w).band_notes)


def test_a_users_own_constant_is_assumed_and_a_calibrated_one_fitted():
    c = load_cluster("h100-sxm")
    mine = replace(c, device=replace(c.device, gemm_efficiency=0.61))
    assert constant_evidence(mine, "device.gemm_efficiency").kind == "assumed"
    renamed = replace(c, name="my-cluster")
    assert constant_evidence(renamed, "device.gemm_efficiency").kind == "assumed"
    calibrated = replace(mine, calibrated_constants=("gemm_efficiency",))
    k = constant_evidence(calibrated, "device.gemm_efficiency")
    assert k.kind == "fitted" and "calibrate" in k.basis


def test_collective_evidence_names_the_link_the_group_crosses():
    m, c, w, est = _estimate("h100-sxm")
    ev = step_evidence(m, c, w, est)
    assert "inside a node" in ev["tp_exposed_s"]["basis"]  # TP 8 on 8-GPU nodes
    assert "across nodes" in ev["dp_exposed_s"]["basis"]  # DP over the nodes
