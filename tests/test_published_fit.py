"""Every published run that ran fits (issue 21): the model says ``fits`` for each row's plan as the
source ran it (``benchmarks/published`` fills the unstated knobs), over the development set, the
new set and the sealed and spent splits (``benchmarks/data/sealed/``, ``benchmarks/data/spent/``: only ``fits``
is read there, never a step time).

A row the model still cannot fit is listed in :data:`KNOWN_UNFIT` with the reason (benchmarks/RESULTS.md,
"Memory a user can launch on"); the test fails when such a row starts to fit (the list must stay exact)
and when any other row does not fit.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import published  # noqa: E402
from costmodel.spec.plan import ParallelConfig  # noqa: E402
from costmodel.physics.memory.stage_memory import memory_per_stage  # noqa: E402

#: (set, row_id) -> why (the sealed rows keep their new-set ids: "new") the model's plan as filled needs more than the device's HBM (RESULTS.md)
KNOWN_UNFIT: dict = {
    # empty since h-mem4: new 112 (Llama 3 405B pp16 8K, 32 micro-batches) fits at 76.3 GiB once each model chunk
    # frees its received input, as arXiv 2407.21783 section 3.3.2 says its schedule does (pp_free_stage_inputs;
    # 80.9 GiB without)
    # issue 38's sealed rows, as placed (their plans as the sources state them; only ``fits`` is read):
    ("new", "220"): "torchtitan Llama 2 13B, 64 A100 80GB, local batch 2 x 4096, no AC: 94.6 GiB of 80 as filled",
    ("new", "229"): "KempnerForge 7B on one H200 (80.7 GB measured): 139.4 GiB of 131 as filled (FP32 Adam state "
    "for 8B parameters alone is 120 GiB)",
    ("new", "248"): "KempnerForge 70B TP4 x FSDP2 on 8 H200 (128.5 GB measured, 'memory-bound'): 138.0 GiB of 131",
    # issue 39's development rows (the Megatron-Bridge tables' Blackwell rows), with the 25.11 performance recipes traced
    # (benchmarks/published/sources.py BRIDGE_2511_RECIPES, BRIDGE_BF16_GRADS, MXFP8_PARAMS; issue 42). Fit since:
    # 268 (cpu_offloading_num_layers 20), 269, 271, 279, 280, 286, 287, 288 (BF16 gradient buffer, MXFP8 parameters,
    # the DeepSeek recipes' selective recompute), 289 (GPT-OSS 120B BF16 EP8 MBS 4 on B200, no recompute: 180.0 GiB,
    # 167.1 of 168 once the loss is TE's cross entropy, 2 B/logit, as every 25.11 script sets: BRIDGE_TE_LOSS).
    # Still not fitting with every traced knob:
    (
        "new",
        "277",
    ): "Bridge Llama 3 70B FP8-CS on 64 GB200, Megatron-FSDP, MBS 2 x 8192, cpu_offloading_num_layers 40 of 80, no "
    "recompute, BF16 grads, TE's cross entropy (Megatron-Bridge@e940d997d LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2): "
    "176.6 GiB of 173 (40 resident layers x 3.6 GiB = 145 GiB; FP8 parameters 1 B on Blackwell, BF16 grads 2 B)",
    (
        "new",
        "278",
    ): "Bridge Llama 3.1 405B FP8-CS TP4 PP16 VP4 on 256 GB200, MBS 1, GBS 1536, no FSDP, no offloading, no recompute, "
    "BF16 grads, TE's cross entropy (Megatron-Bridge@e940d997d LLAMA31_405B_PRETRAIN_CONFIG_GB200_FP8_CS_V2): 175.5 GiB "
    "of 173 (stage 1: 77 chunks in flight as Megatron-Core@0d8e0714 get_pp_rank_microbatches warms up, 132.5 GiB of "
    "activations; FP8 parameters 1 B on Blackwell, 181.4 GiB at 2 B)",
    # 293 (ModelZoo Qwen3-235B MXFP8 PP4 VP6 EP64 MBS 3 on 256 GB200) fits since issue 42's fine-grained activation
    # offloading: its --offload-modules expert_fc1 moe_act (MODELZOO_FG_OFFLOAD) takes stage 1 from 215.3 to 111.9 GiB
}

GiB = 2**30


def _rows():
    rows = [r for r in published.load_set("all") if not r.skip]
    for name in ("sealed", "spent"):  # the sealed split and issue 20's spent one: only ``fits`` is read
        if published.SETS[name].exists():
            rows += [r for r in published.load_set(name) if not r.skip]
    return rows


def _fits(row) -> tuple[bool, float]:
    """Whether the row's plan fits, and its worst stage's peak (the best fitting choice of the free
    knobs, as ``published.predict`` picks them; no step time is computed)."""
    import itertools

    keys = list(row.free)
    best = None
    for values in itertools.product(*(row.free[k] for k in keys)):
        c = ParallelConfig(**dict(row.fixed, **dict(zip(keys, values))))
        peak = max(m.total_bytes for m in memory_per_stage(row.model, row.workload, c, row.cluster.device))
        if best is None or peak < best:
            best = peak
    return best <= row.cluster.device.hbm_bytes, best


ROWS = _rows()


def test_the_published_rows_are_loaded():
    sets = {r.set for r in ROWS}
    assert {"dev", "new"} <= sets and len(ROWS) > 100


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.set}-{r.row_id}" for r in ROWS])
def test_a_run_that_ran_fits(row):
    fits, peak = _fits(row)
    key = ("dev" if row.set == "dev" else "new", row.row_id)  # sealed and spent rows are new-set rows moved aside
    if key in KNOWN_UNFIT:
        assert not fits, f"row {key} fits now ({peak / GiB:.1f} GiB): drop it from KNOWN_UNFIT"
    else:
        assert fits, (
            f"row {key} ({row.label}, {row.gpus} GPUs) needs {peak / GiB:.1f} GiB of "
            f"{row.cluster.device.hbm_bytes / GiB:.0f} GiB"
        )
