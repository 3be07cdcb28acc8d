"""Bands that know what they do not know (issue 23): a band holds its own estimate, widens with the
spread of the plausible completions of unstated knobs and beyond the data (scale, device, stack,
regime, mechanism), and says so in words (``costmodel.trust.band_scope``)."""

import math
import random
from dataclasses import replace

import pytest

from costmodel.trust import uncertainty as U
from costmodel.trust.band_scope import device_class, mechanisms, scope
from costmodel.spec.plan import ParallelConfig
from costmodel.api import evaluate
from costmodel.spec.presets import load_cluster, load_model
from costmodel.spec.workload import Workload

ROWS = U.stored_residuals()
COMPONENTS = U.stored_components()


def regime(**kw):
    base = dict(
        kind="dense",
        device="a100",
        zero="0",
        scale="65-512",
        gpus=512,
        stack="mcore-2025",
        device_name="A100-SXM4-80GB",
        mechanisms=mechanisms(False, 1, "bf16"),
        sens_log_sd=0.05,
    )
    return U.Regime(**{**base, **kw})


def width(r, rows=ROWS):
    lo, hi, notes = U.band_detail(r, residuals=rows, components=COMPONENTS)
    return hi - lo, notes


def test_a_band_never_excludes_its_own_estimate():
    rng = random.Random(0)
    for _ in range(40):  # strongly biased pools: the normal interval alone would exclude 0
        bias, sd = rng.uniform(-0.5, 0.5), rng.uniform(0.001, 0.05)
        pool = [
            {
                "regime": {"kind": "dense", "device": "a100", "zero": "0", "scale": "65-512"},
                "log_residual": rng.gauss(bias, sd),
                "gpus": 512,
                "stack": "mcore-2025",
                "source": "s",
            }
            for _ in range(8)
        ]
        lo, hi = U.band_log(regime(sens_log_sd=0.0), residuals=pool, components=COMPONENTS)
        assert lo <= 0.0 <= hi
    for x in ROWS:  # every stored regime, at its own measured scale
        lo, hi = U.band_log(regime(**x["regime"], gpus=x["gpus"]), components=COMPONENTS)
        assert lo <= 0.0 <= hi


def test_unstated_knobs_widen_the_band_and_say_so():
    w0, notes0 = width(regime())
    w1, notes1 = width(regime(completion_log_sd=0.05))
    assert w1 > w0
    assert not any("unstated" in n for n in notes0) and any("unstated knobs" in n for n in notes1)


def test_ten_times_the_largest_measured_run_widens_and_notes_it():
    top = max(
        x["gpus"]
        for x in ROWS
        if x["regime"]["kind"] == "dense" and x["regime"]["device"] == "a100" and x["regime"]["zero"] == "0"
    )
    w_in, notes_in = width(regime(scale="513+", gpus=top))
    w_out, notes_out = width(regime(scale="513+", gpus=10 * top))
    assert w_out > w_in and not any("extrapolating" in n for n in notes_in)
    assert any(n.startswith(f"extrapolating: no measured run above {top:,} GPUs") for n in notes_out)
    # inside the data the output says that too, with the runs it rests on; beyond it, it does not
    runs = [
        x
        for x in ROWS
        if x["regime"]["kind"] == "dense" and x["regime"]["device"] == "a100" and x["regime"]["zero"] == "0"
    ]
    sources = len({x["source"] for x in runs})
    assert (
        f"within the data: {len(runs)} measured runs of dense ZeRO-0 training on a100 from {sources} sources, "
        f"up to {top:,} GPUs on this stack (mcore-2025): no extrapolation" in notes_in
    )
    assert not any(n.startswith("within the data") for n in notes_out)
    assert width(regime(scale="513+", gpus=100 * top))[0] > w_out  # further out, wider still


def test_end_to_end_a_plan_at_ten_times_the_data():
    model, cluster = load_model("gpt3-175b"), load_cluster("a100-80g")
    w = Workload(global_batch=1536, seq_len=2048)
    top = max(
        x["gpus"] for x in ROWS if x["regime"] == {"kind": "dense", "device": "a100", "zero": "0", "scale": "513+"}
    )
    dp = 10 * top // 64
    est = evaluate(
        model,
        cluster.with_gpus(64 * dp),
        replace(w, global_batch=dp * 8),
        ParallelConfig(tp=8, pp=8, dp=dp, sp=True),
        engine="analytic",
    )
    lo, hi, notes = U.assess(model, cluster.with_gpus(64 * dp), replace(w, global_batch=dp * 8), est)
    assert lo <= est.step_time_s <= hi and any("extrapolating" in n for n in notes)


def test_no_residuals_of_a_regime_falls_back_to_all_runs_pooled_and_says_so():
    mean, half, n = U.outside_band(ROWS)
    assert n == len(ROWS)
    for r, said in (
        (regime(device="b300", device_name="B300"), "no measured run on b300"),
        (regime(kind="moe", zero="0", mechanisms=()), "no measured run of moe ZeRO-0 training on a100"),
    ):
        lo, hi, notes = U.band_detail(replace(r, sens_log_sd=0.0), residuals=ROWS, components=COMPONENTS)
        assert any(said in n for n in notes) and any(
            n.startswith(f"band of all {len(ROWS)} measured runs pooled") for n in notes
        )
        assert hi - lo >= 2 * half - 1e-9
        assert hi - lo > width(regime(sens_log_sd=0.0))[0]  # wider than a measured regime's


def test_a_stack_without_measured_runs_is_named():
    _, notes = width(regime(stack="torchtitan-2024"))
    assert any("no measured run on stack torchtitan-2024" in n for n in notes)


def test_a_mechanism_without_component_data_is_named():
    # (Ampere has all-to-all measurements since the collectives data grew; FP8 GEMMs it has none of)
    _, notes = width(regime(kind="moe", zero="1-2", mechanisms=mechanisms(True, 8, "fp8")))
    assert any("no component data" in n and "FP8 GEMMs" in n and "ampere" in n for n in notes)
    assert not any("no component data" in n and "all-to-all" in n for n in notes)
    # Hopper has all-to-all and grouped-GEMM measurements: no such note
    r = regime(
        kind="moe", zero="1-2", device="h100", device_name="H100-SXM5-80GB", mechanisms=mechanisms(True, 8, "fp8")
    )
    assert not any("no component data" in n for n in width(r)[1])


def test_inside_the_data_one_note_saying_so():
    (note,) = width(regime())[1]  # no widening note: the one sentence that the plan is inside the data
    assert note.startswith("within the data: ") and note.endswith(": no extrapolation")


def test_device_classes():
    assert [device_class(n) for n in ("A100-SXM4-80GB", "SM90 (Hopper)", "H800", "SM100 (B200)", "MI300X")] == [
        "ampere",
        "hopper",
        "hopper",
        "blackwell",
        "mi300x",
    ]


def test_scope_needs_the_regime_on_its_stack():
    rows = [{"regime": {"kind": "dense", "device": "a100", "zero": "0"}, "gpus": 64, "stack": "mcore-2025"}]
    s = scope({"kind": "dense", "device": "a100", "zero": "0"}, 640, "mcore-2025", (), rows, ())
    assert s.scale_ratio == pytest.approx(10.0) and not s.outside
    assert math.isclose(
        scope({"kind": "dense", "device": "a100", "zero": "0"}, 32, "mcore-2025", (), rows, ()).scale_ratio, 1.0
    )
