"""Plans the frameworks run that the search left out (issue 21): pinned ``recommend`` answers them.

- Megatron-Core builds up to ``layers + 2`` virtual stages, the embedding and the loss each alone
  (``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``; the
  Megatron-MoE-ModelZoo's Qwen3-235B-A22B H100 run: PP32 x VPP3 over 94 layers, published row 206).
- torchtitan takes any stage split (``module_fqns_per_model_part``), so FSDP2 plans whose layers do
  not divide ``pp * vp`` are searched (the AutoModel DeepSeek-V3 / Kimi K2 rows 196-198: 61 layers).
- Where no choice is left, the explanation names the knob and its rule, not "no way to divide".
"""

import ast
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from costmodel.spec.errors import SpecError
from costmodel.spec.layout import from_split
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload
from planner.emit import megatron_args, torchtitan_lines
from planner.emit.torchtitan import torchtitan_model_parts
from search.explain import explain_infeasible
from search.pins import check_pins
from search.problem import Limits, Problem
from search.solve import SolveOptions, solve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks.pinned_recommend import searchable_split  # noqa: E402
from test_uneven_stages import expected_layers, megatron_layers  # noqa: E402

H100 = load_cluster("h100-sxm")


def _problem(layers, framework, gpus=8, batch=64, **limits):
    model = replace(load_model("llama3-8b"), layers=layers)
    return Problem(
        model=model,
        cluster=H100.with_gpus(gpus),
        workload=Workload(global_batch=batch, seq_len=2048),
        limits=Limits(**limits),
        framework=framework,
    )


def test_megatron_pins_the_embedding_and_the_loss_in_their_own_virtual_stages():
    # 14 layers over pp 4 x vp 4 = 16 virtual stages (row 206's PP32 x VPP3 over 94, scaled down)
    p = _problem(14, "megatron", fixed={"pp": 4, "vp": 4, "tp": 2, "dp": 1})
    r = solve(p, SolveOptions(time_limit_s=20))
    assert r.best is not None, r.explanation
    c = r.best.config
    assert (c.pp, c.vp) == (4, 4) and sum(c.layers_per_stage) == 14
    # the emitted flags build exactly those layers under Megatron-Core's rules (test_uneven_stages' validator)
    argv = [t for arg in megatron_args(c, 64, 14) for t in arg]
    assert megatron_layers(argv, 14) == expected_layers(c, 14)
    # one more virtual stage than the layers plus embedding and loss can fill is refused, naming the rule
    with pytest.raises(SpecError, match=r"pp\*vp=16.*at most layers=13 \+ 2"):
        check_pins(_problem(13, "megatron", fixed={"pp": 4, "vp": 4, "tp": 2, "dp": 1}))


def test_other_frameworks_keep_a_layer_in_every_virtual_stage():
    with pytest.raises(SpecError, match=r"pp\*vp.*at most layers=14 \(pp=4"):
        check_pins(_problem(14, "fsdp2", fixed={"pp": 4, "vp": 4, "dp": 2}))


def test_fsdp2_searches_uneven_splits_and_emits_them_for_torchtitan():
    # 30 layers over pp 4 x vp 2: no even split (before: no plan, "no way to divide 8 GPUs")
    p = _problem(30, "fsdp2", fixed={"pp": 4, "vp": 2, "dp": 2, "tp": 1})
    r = solve(p, SolveOptions(time_limit_s=20))
    assert r.best is not None, r.explanation
    c = r.best.config
    assert c.framework == "fsdp2" and sum(c.layers_per_stage) == 30 and len(set(c.layers_per_stage)) > 1
    lines = torchtitan_lines(c, p.workload, 30)
    assert not any(l.startswith("pipeline_parallel_layers_per_stage") for l in lines)
    parts = ast.literal_eval(next(l for l in lines if l.startswith("module_fqns_per_model_part")).split(" = ", 1)[1])
    assert len(parts) == c.pp * c.vp
    # torchtitan's looped schedules: virtual stage k runs on rank k % pp; the layers each rank holds are the plan's
    for rank, n in enumerate(c.layers_per_stage):
        mine = [m for k, part in enumerate(parts) if k % c.pp == rank for m in part if m.startswith("layers.")]
        assert len(mine) == n
    flat = [m for part in parts for m in part]
    assert flat[0] == "tok_embeddings" and flat[-2:] == ["norm", "output"]
    assert [int(m.split(".")[1]) for m in flat if m.startswith("layers.")] == list(range(30))


def test_torchtitan_refuses_an_empty_virtual_stage():
    # rank 1 holds one layer over two chunks: its second chunk holds nothing torchtitan can build
    with pytest.raises(SpecError, match="layers_per_stage"):
        torchtitan_model_parts(from_split((3, 1, 3, 3), 2))


def test_the_explanation_names_the_interleave_rule_not_the_gpu_count():
    p = _problem(30, "megatron", fixed={"pp": 4, "vp": 2, "dp": 2, "tp": 1}, uneven_stages=False)
    why, _ = explain_infeasible(p)
    assert not why.startswith("no way to divide"), why
    assert re.search(r"vp=2 cannot run: pp\*vp=8 does not divide layers=30", why), why


@pytest.mark.parametrize(
    "split, ok", [((7, 8, 8, 7), True), ((2,) + (3,) * 30 + (2,), True), ((15, 16, 15, 15), False), ((16, 15), True)]
)
def test_pinned_recommend_pins_only_splits_the_search_can_hold(split, ok):
    assert searchable_split(split) is ok
