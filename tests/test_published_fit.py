"""Every published run that ran fits (issue 21): the model's memory verdict
(:mod:`costmodel.physics.memory.verdict`) for each row's plan as the source ran it (``benchmarks/published`` fills
the unstated knobs), over the development set, the new set and the sealed and spent splits
(``benchmarks/data/sealed/``, ``benchmarks/data/spent/``: only the memory is read there, never a step time).

Issue 42: a row may be ``tight``, over the HBM only by the assumed allocator fragmentation allowance (5% of the
activations, evidence "assumed"; the peak without it fits): a pinned plan that ``evaluate`` and pinned
``recommend`` accept with a warning. Those rows are listed in :data:`KNOWN_TIGHT`; a row the model cannot fit even
without the allowance is listed in :data:`KNOWN_UNFIT` with the reason (benchmarks/RESULTS.md, "Memory a user can
launch on"). Both lists must stay exact: the test fails when a listed row's verdict changes (a tight row that
turns ``does not fit`` fails) and when any other row is not ``fits``.
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package

from benchmarks import published  # noqa: E402
from costmodel.spec.plan import ParallelConfig  # noqa: E402
from costmodel.physics.memory.stage_memory import memory_per_stage  # noqa: E402
from costmodel.physics.memory.verdict import DOES_NOT_FIT, FITS, TIGHT, VERDICTS, memory_verdict  # noqa: E402
from costmodel.physics.memory.verdict import peak_without_allowance  # noqa: E402

#: (set, row_id) -> why (the sealed rows keep their new-set ids: "new") the model's plan as filled needs more than
#: the device's HBM even without the fragmentation allowance (RESULTS.md)
KNOWN_UNFIT: dict = {
    # empty of dev/new rows since h-mem4: new 112 (Llama 3 405B pp16 8K, 32 micro-batches) fits at 76.3 GiB once
    # each model chunk frees its received input, as arXiv 2407.21783 section 3.3.2 says its schedule does
    # (pp_free_stage_inputs; 80.9 GiB without)
    # issue 38's sealed rows 220, 229 and 248 fit since issue 42 traced their frameworks (their plans as the sources
    # state them; only the memory is read): 220 (torchtitan Llama 2 13B, 64 A100, local batch 2 x 4096, no AC) 94.6 ->
    # 68.4 GiB of 80 once eager RoPE saves no FP32 Q/K (MulBackward0 keeps ``self`` only for ``other``'s gradient) and
    # the preset's fused_rmsnorm runs fused; 229 (KempnerForge 7B on one H200) 139.4 -> 94.5 and 248 (70B TP4 x FSDP2
    # on 8 H200) 138.0 -> 72.3 GiB of 131 (139.8 since the measured HBM) once KempnerForge's BF16 model and BF16 Adam moments are charged
    # (benchmarks/published/sources.py TORCHTITAN_FUSED_RMSNORM, BF16_MODEL)
    # issue 39's development rows (the Megatron-Bridge tables' Blackwell rows), with the 25.11 performance recipes traced
    # (benchmarks/published/sources.py BRIDGE_2511_RECIPES, BRIDGE_BF16_GRADS, MXFP8_PARAMS; issue 42). Fit since:
    # 268 (cpu_offloading_num_layers 20), 269, 271, 279, 280, 286, 287, 288 (BF16 gradient buffer, MXFP8 parameters,
    # the DeepSeek recipes' selective recompute), 289 (GPT-OSS 120B BF16 EP8 MBS 4 on B200, no recompute: 180.0 GiB,
    # 167.1 of 168 once the loss is TE's cross entropy, 2 B/logit, as every 25.11 script sets: BRIDGE_TE_LOSS).
    # 293 (ModelZoo Qwen3-235B MXFP8 PP4 VP6 EP64 MBS 3 on 256 GB200) fits since issue 42's fine-grained activation
    # offloading: its --offload-modules expert_fc1 moe_act (MODELZOO_FG_OFFLOAD) takes stage 1 from 215.3 to 111.9 GiB
}

#: (set, row_id) -> why the row is ``tight``: over the HBM with the assumed 5% fragmentation allowance, within it
#: without (issue 42: accepted as a pinned plan, with a warning)
KNOWN_TIGHT: dict = {
    # empty since the GB200 preset holds the 184.31 GiB PyTorch's allocator reports (nvidia-smi: 189,471 MiB; was
    # 173.2 read from 186e9 bytes): 277 (Bridge Llama 3 70B FP8-CS, 64 GB200, Megatron-FSDP, 40 of 80 layers offloaded) 176.6 GiB and 278
    # (Bridge Llama 3.1 405B FP8-CS TP4 PP16 VP4, 256 GB200) 175.5 GiB fit; both were tight at 173
}

GiB = 2**30


def _rows():
    rows = [r for r in published.load_set("all") if not r.skip]
    for name in ("sealed", "spent"):  # the sealed split and issue 20's spent one: only ``fits`` is read
        if published.SETS[name].exists():
            rows += [r for r in published.load_set(name) if not r.skip]
    return rows


def _verdict(row) -> tuple[str, float, float]:
    """The row's memory verdict, its worst stage's peak and that peak without the fragmentation allowance, for the
    best choice of the free knobs (the best verdict, then the least peak; no step time is computed)."""
    import itertools

    keys = list(row.free)
    best = None
    for values in itertools.product(*(row.free[k] for k in keys)):
        c = ParallelConfig(**dict(row.fixed, **dict(zip(keys, values))))
        stages = [m.to_dict() for m in memory_per_stage(row.model, row.workload, c, row.cluster.device)]
        peak, without = max(m["total_bytes"] for m in stages), peak_without_allowance(stages)
        verdict = memory_verdict(peak, without, row.cluster.device.hbm_bytes)
        if best is None or (VERDICTS.index(verdict), peak) < (VERDICTS.index(best[0]), best[1]):
            best = (verdict, peak, without)
    return best


ROWS = _rows()


def test_the_published_rows_are_loaded():
    sets = {r.set for r in ROWS}
    assert {"dev", "new"} <= sets and len(ROWS) > 100


def test_the_lists_name_loaded_rows():
    keys = {("dev" if r.set == "dev" else "new", r.row_id) for r in ROWS}
    assert set(KNOWN_TIGHT) <= keys and set(KNOWN_UNFIT) <= keys and not set(KNOWN_TIGHT) & set(KNOWN_UNFIT)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.set}-{r.row_id}" for r in ROWS])
def test_a_run_that_ran_fits(row):
    verdict, peak, without = _verdict(row)
    key = ("dev" if row.set == "dev" else "new", row.row_id)  # sealed and spent rows are new-set rows moved aside
    hbm = row.cluster.device.hbm_bytes / GiB
    if key in KNOWN_UNFIT:
        assert verdict == DOES_NOT_FIT, f"row {key} is {verdict} now ({peak / GiB:.1f} GiB): drop it from KNOWN_UNFIT"
    elif key in KNOWN_TIGHT:
        assert verdict == TIGHT, (
            f"row {key} is {verdict} now ({peak / GiB:.1f} GiB, {without / GiB:.1f} without the allowance, of "
            f"{hbm:.0f} GiB): update KNOWN_TIGHT"
        )
    else:
        assert verdict == FITS, (
            f"row {key} ({row.label}, {row.gpus} GPUs) is {verdict}: {peak / GiB:.1f} GiB "
            f"({without / GiB:.1f} without the allowance) of {hbm:.0f} GiB"
        )
